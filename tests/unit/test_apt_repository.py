"""Debian repository documents and the package lock: version order against dpkg, relations, strict stanzas, the lock reader."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess

import pytest

from pipeline.errors import InputError
from pipeline.formats import apt_lock
from pipeline.formats.apt_repository import (
    Relation,
    compare_versions,
    parse_relations,
    parse_release,
    parse_stanzas,
)
from pipeline.lanework.apt_resolve import Universe, resolve
from tests.kits.aptkit import package

VERSIONS = ["1.0", "1.0-1", "1.0~rc1", "1.0~rc1-1", "1:0.9", "2.41-12", "2.41-12+deb13u1", "2.41-12~bpo1", "1.0a", "1.0+", "1.0.1",
            "1.00", "01.0", "1.0-0", "7:7.1.3-0+deb13u1", "7:7.1.3-0", "1.0~", "1.0~~", "1.0-1ubuntu1", "1.3.dfsg+really1.3.1-1", "0:1.0"]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is the reference for version order (Debian hosts have it)")
def test_version_order_is_dpkgs():
    wrong = []
    for a, b in itertools.product(VERSIONS, VERSIONS):
        ours = compare_versions(a, b)
        for op, holds in (("lt", ours < 0), ("eq", ours == 0), ("gt", ours > 0)):
            if (subprocess.run(["dpkg", "--compare-versions", a, op, b]).returncode == 0) != holds:
                wrong.append(f"{a} {op} {b}")
    assert wrong == []


def test_relations_parse_alternatives_qualifiers_and_the_deprecated_operators():
    groups = parse_relations("libc6 (>= 2.38), libgcc-s1 | libgcc1 (< 1:4), python3:any", source="t", field="x.Depends")
    assert groups == (
        (Relation("libc6", None, ">=", "2.38"),),
        (Relation("libgcc-s1"), Relation("libgcc1", None, "<=", "1:4")),
        (Relation("python3", "any"),),
    )
    for bad in ("libc6 [amd64]", "libc6 (>= )", "Libc6", "libc6 (~ 1)"):
        with pytest.raises(InputError, match="relation that does not parse|not a Debian version"):
            parse_relations(bad, source="t", field="x.Depends")


def test_a_stanza_naming_a_field_twice_or_a_stray_line_is_refused():
    with pytest.raises(InputError, match="names a field twice") as info:
        parse_stanzas("Package: a\nVersion: 1\npackage: b\n", source="Packages")
    assert info.value.field == "line 3"
    with pytest.raises(InputError, match="neither a 'Field: value' line"):
        parse_stanzas("Package: a\nnonsense\n", source="Packages")
    assert parse_stanzas("A: 1\nB: x\n y\n\n\nA: 2\n", source="t") == [{"A": "1", "B": "x\ny"}, {"A": "2"}]


def test_a_release_file_without_sha256_or_with_a_path_out_of_the_suite_is_refused():
    with pytest.raises(InputError, match="has no SHA256 table"):
        parse_release(b"Suite: x\nMD5Sum:\n 00 1 main/binary-amd64/Packages\n", source="InRelease")
    with pytest.raises(InputError, match="leaves the suite folder"):
        parse_release(b"Suite: x\nSHA256:\n " + b"0" * 64 + b" 1 ../../etc/passwd\n", source="InRelease")


def test_a_dependency_on_another_architecture_is_refused_and_any_needs_multi_arch_allowed():
    from pipeline.formats.apt_repository import parse_package

    def universe(*entries):
        return Universe([parse_package(e, source="Packages", origin=0) for e in entries], "amd64")

    with pytest.raises(InputError, match="architecture qualifier"):
        resolve(universe(package("app", Depends="bb:i386"), package("bb")), ["app"], file="d.toml")
    with pytest.raises(InputError, match="needs a package no source offers") as info:
        resolve(universe(package("app", Depends="perl:any"), package("perl", Multi_Arch="foreign")), ["app"], file="d.toml")
    assert "Multi-Arch: foreign" in info.value.found
    assert set(resolve(universe(package("app", Depends="perl:any"), package("perl", Multi_Arch="allowed")), ["app"], file="d.toml")) == {"app", "perl"}


def test_conflicting_packages_in_one_closure_are_refused():
    from pipeline.formats.apt_repository import parse_package

    entries = [package("app", Depends="bb, cc"), package("bb", Conflicts="cc"), package("cc")]
    with pytest.raises(InputError, match=r"cannot be installed together \(bb Conflicts: cc\)"):
        resolve(Universe([parse_package(e, source="P", origin=0) for e in entries], "amd64"), ["app"], file="d.toml")


def _lock_document() -> dict:
    return apt_lock.lock_document(
        definition="x.toml", request_sha256="a" * 64, architecture="amd64", requested=["libc6"],
        sources=[{"uri": "https://deb.debian.org/debian", "suite": "trixie", "components": ["main"], "inrelease_sha256": "b" * 64,
                  "signers": ["F" * 40], "date": "Sat, 21 Nov 2026 09:15:44 UTC", "distro": "debian-13", "indexes": []}],
        packages=[{"name": "libc6", "version": "2.41-12", "architecture": "amd64", "multi_arch": "same", "filename": "pool/main/g/glibc/libc6_2.41-12_amd64.deb",
                   "size": 10, "sha256": "c" * 64, "source_package": "glibc", "source_version": "2.41-12", "source": 0,
                   "why": {"package": None, "field": "base.packages", "relation": "libc6"}, "libraries": ["libc.so.6"]}],
    )


def test_the_lock_round_trips_canonically_and_refuses_a_filename_out_of_the_archive(tmp_path):
    path = tmp_path / "x.lock.json"
    data = apt_lock.write_lock(path, _lock_document())
    assert path.read_bytes() == data and data.endswith(b"\n") and apt_lock.read_lock(path).package("libc6").source_package == "glibc"
    assert apt_lock.read_lock(path).libraries() == {"libc.so.6": "libc6"}
    for field, value, message in (("filename", "../../../etc/passwd.deb", "not a .deb path"), ("size", 2**40, "is not a size"), ("source", 1, "names no source"),
                                  ("libraries", ["../libc.so.6"], "not a sorted list of library file names"), ("libraries", ["libz.so.1", "libc.so.6"], "not a sorted list")):
        document = _lock_document()
        document["packages"][0][field] = value
        with pytest.raises(InputError, match=message) as info:
            apt_lock.read_lock_bytes(json.dumps(document).encode(), path)
        assert info.value.field == f"packages[0].{field}"
