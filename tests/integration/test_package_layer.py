"""The package layer from a lock alone: deterministic, merged-/usr, scanner metadata, ld.so.cache, and every hostile package refused.

The packages are real deb(5) files (dpkg-deb reads them), served by a really signed mini
repository and locked by `image lock`; the layer is then made from the lock and the package cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile

import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.formats import apt_lock, image_definition
from pipeline.lanework import apt, package_layer
from pipeline.lanework.package_layer import ScriptStandIn
from pipeline.stages import image
from tests.kits.aptkit import EPOCH, MiniRepo, SigningKey, build_deb, definition_toml, member, package

LANE = "rtx5090-container"
LIBZ = next((p for p in ("/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1") if shutil.os.path.exists(p)), None)
pytestmark = pytest.mark.skipif(LIBZ is None, reason="needs the host's x86-64 zlib as a real shared library to cache")


@pytest.fixture(scope="module")
def key():
    made = SigningKey.make("Layer Test Archive")
    yield made
    made.close()


@pytest.fixture
def world(tmp_path, key, monkeypatch):
    monkeypatch.setattr(image_definition, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("OMP_NINFER_APT_CACHE", str(tmp_path / "cache"))
    repo = MiniRepo(tmp_path / "archive", key)
    repo.serve()
    yield tmp_path, repo
    repo.close()


def _zlib_deb(tmp_path):
    real = open(LIBZ, "rb").read()  # noqa: SIM115 - a small library
    return build_deb(tmp_path / "debs" / "zlib1g.deb", "zlib1g", "1:1.3-1", members=[
        member("./lib/", kind=tarfile.DIRTYPE, mode=0o755),  # a pre-merged-/usr package: its /lib must not replace the link
        member("./lib/x86_64-linux-gnu/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./lib/x86_64-linux-gnu/libz.so.1.3", real),
        member("./lib/x86_64-linux-gnu/libz.so.1", kind=tarfile.SYMTYPE, link="libz.so.1.3", mode=0o777),
        member("./usr/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/share/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/share/doc/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/share/doc/zlib1g/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/share/doc/zlib1g/copyright", b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: Zlib\n", mtime=EPOCH - 5),
    ])


def _publish_and_lock(tmp_path, repo, key, debs: dict, *, wanted: list[str], depends: dict | None = None, read_debs: bool = True):
    stanzas = [package(name, "1:1.3-1" if name == "zlib1g" else "1.0-1", deb=path, Depends=(depends or {}).get(name, "")) for name, path in debs.items()]
    for entry in stanzas:
        if not entry["Depends"]:
            del entry["Depends"]
    repo.publish(stanzas, debs=debs)
    (tmp_path / "containers" / "keys").mkdir(parents=True, exist_ok=True)
    (tmp_path / "containers" / "keys" / "test.gpg").write_bytes(key.keyring)
    definition = tmp_path / "containers" / "trixie" / "ninfer-runtime.toml"  # where the lane's package.base_image names it
    definition.parent.mkdir(exist_ok=True)
    definition.write_text(definition_toml(repo.server.base, key, "containers/keys/test.gpg", wanted))
    if not read_debs:  # the lock of a hostile .deb, as an edited lock or a lock reader that did not open it would have it
        loaded = image_definition.load_definition(definition)
        document = apt.make_lock(definition, loaded.package_base, loaded.architecture)
        for locked in document["packages"]:
            locked["libraries"] = []
        return apt_lock.read_lock_bytes(apt_lock.write_lock(apt_lock.lock_path(definition), document), apt_lock.lock_path(definition))
    assert image.lock_packages(LANE, definition=definition) == 0
    return apt_lock.read_lock(apt_lock.lock_path(definition))


def _assemble(tmp_path, lock, name: str, stand_ins=None, *, cache=None):
    return package_layer.assemble(lock, stand_ins or {}, tmp_path / name, epoch=EPOCH, compression="gzip", gzip_level=9, cache=cache)


def test_the_layer_is_merged_usr_with_scanner_metadata_and_a_loader_cache_and_the_same_bytes_from_any_cache_state(world):
    tmp_path, repo = world
    tool = build_deb(tmp_path / "debs" / "tool.deb", "tool", members=[
        member("./usr/", kind=tarfile.DIRTYPE, mode=0o755), member("./usr/bin/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/bin/tool", b"#!/bin/sh\necho tool\n", mode=0o755),
        member("./usr/bin/tool-again", kind=tarfile.LNKTYPE, link="./usr/bin/tool", mode=0o755),
    ], depends="zlib1g")
    lock = _publish_and_lock(tmp_path, repo, repo.key, {"zlib1g": _zlib_deb(tmp_path), "tool": tool}, wanted=["tool"], depends={"tool": "zlib1g"})
    first = _assemble(tmp_path, lock, "one")
    with tarfile.open(first.layer_path if hasattr(first, "layer_path") else tmp_path / "one" / "packages.layer") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names, key=lambda n: n.encode())
        assert all(m.uid == 0 and m.gid == 0 and m.uname == "" and m.mtime <= EPOCH for m in members)
        by_name = {m.name: m for m in members}
        assert by_name["lib"].issym() and by_name["lib"].linkname == "usr/lib" and by_name["lib64"].linkname == "usr/lib64"
        assert by_name["usr/lib/x86_64-linux-gnu/libz.so.1"].linkname == "libz.so.1.3"
        assert by_name["usr/share/doc/zlib1g/copyright"].mtime == EPOCH - 5  # older than the commit: kept
        assert by_name["usr/bin/tool-again"].isreg() and by_name["usr/bin/tool-again"].size == by_name["usr/bin/tool"].size
        assert not any(name.startswith("lib/") for name in names)
        status = tar.extractfile("var/lib/dpkg/status.d/zlib1g").read().decode()
        assert status.startswith("Package: zlib1g\nVersion: 1:1.3-1\n")
        md5sums = tar.extractfile("var/lib/dpkg/status.d/zlib1g.md5sums").read().decode()
        libz = open(LIBZ, "rb").read()  # noqa: SIM115
        assert f"{hashlib.md5(libz).hexdigest()}  usr/lib/x86_64-linux-gnu/libz.so.1.3\n" in md5sums  # noqa: S324
        cache = tar.extractfile("etc/ld.so.cache").read()
    (tmp_path / "ld.so.cache").write_bytes(cache)
    listing = subprocess.run(["ldconfig", "-p", "-C", str(tmp_path / "ld.so.cache")], capture_output=True, text=True, check=True).stdout
    assert re.search(r"libz\.so\.1 \(libc6,x86-64\) => (/usr)?/lib/x86_64-linux-gnu/libz\.so\.1\n", listing), listing
    # a cold cache (everything downloaded again) and a warm one with a corrupted entry give the same bytes
    cold = _assemble(tmp_path, lock, "two", cache=tmp_path / "cold-cache")
    corrupt = tmp_path / "cache" / "sha256" / lock.package("zlib1g").sha256
    corrupt.write_bytes(b"x" * corrupt.stat().st_size)
    warm = _assemble(tmp_path, lock, "three")
    assert first.layer.descriptor.digest == cold.layer.descriptor.digest == warm.layer.descriptor.digest


def _hostile(world, members, *, raw=None, scripts=None, zstd=False):
    tmp_path, repo = world
    bad = build_deb(tmp_path / "debs" / "bad.deb", "bad", members=members, raw_data_tar=raw, scripts=scripts, zstd=zstd)
    lock = _publish_and_lock(tmp_path, repo, repo.key, {"bad": bad}, wanted=["bad"], read_debs=False)
    return tmp_path, lock


def test_a_member_named_with_dot_dot_is_refused(world):
    tmp_path, lock = _hostile(world, [member("./usr/../../etc/passwd", b"root::0:0::/:/bin/sh\n")])
    with pytest.raises(IntegrityError, match="leaves the archive's folder") as info:
        _assemble(tmp_path, lock, "out")
    assert "bad 1.0-1" in info.value.file
    # `image lock` reads each .deb for its libraries through the same bounded reader: refused there already
    with pytest.raises(IntegrityError, match="leaves the archive's folder") as info:
        image.lock_packages(LANE, definition=tmp_path / "containers" / "trixie" / "ninfer-runtime.toml")
    assert info.value.file.startswith("bad.deb")


def test_a_link_out_of_the_root_is_refused(world):
    tmp_path, lock = _hostile(world, [member("./usr/", kind=tarfile.DIRTYPE, mode=0o755), member("./usr/escape", kind=tarfile.SYMTYPE, link="../../../etc/shadow")])
    with pytest.raises(IntegrityError, match="symbolic link that leaves the root file system") as info:
        _assemble(tmp_path, lock, "out")
    assert info.value.field == "./usr/escape" and info.value.found == "../../../etc/shadow"


def test_a_device_node_is_refused(world):
    tmp_path, lock = _hostile(world, [member("./dev/", kind=tarfile.DIRTYPE, mode=0o755), member("./dev/sda", kind=tarfile.BLKTYPE, mode=0o660)])
    with pytest.raises(IntegrityError, match="device node") as info:
        _assemble(tmp_path, lock, "out")
    assert info.value.field == "./dev/sda"


def test_a_one_gib_member_is_refused_before_it_is_read(world):
    tmp_path, lock = _hostile(world, [member("./usr/huge", b"", size=1 << 30)])
    with pytest.raises(IntegrityError, match=r"holds a file of 1073741824 bytes, over the \d+ allowed") as info:
        _assemble(tmp_path, lock, "out")
    assert info.value.field == "./usr/huge"


def test_a_package_that_would_replace_a_merged_usr_link_is_refused(world):
    tmp_path, lock = _hostile(world, [member("./lib", kind=tarfile.SYMTYPE, link="/opt/elsewhere")])
    with pytest.raises(IntegrityError, match="would replace the merged-/usr link /lib"):
        _assemble(tmp_path, lock, "out")


@pytest.mark.skipif(shutil.which("zstd") is None, reason="the zstd command makes the test's .deb (apt-get install zstd)")
def test_a_deb_with_a_zstd_data_archive_is_read_and_a_zstd_bomb_is_refused(world):
    tmp_path, repo = world
    text = b"#!/bin/sh\necho from a zstd package\n" * 100
    ubuntu_like = build_deb(tmp_path / "debs" / "tool.deb", "tool", members=[
        member("./usr/", kind=tarfile.DIRTYPE, mode=0o755), member("./usr/bin/", kind=tarfile.DIRTYPE, mode=0o755),
        member("./usr/bin/tool", text, mode=0o755)], zstd=True)
    assert b"data.tar.zst    " in ubuntu_like.read_bytes()  # the ar member name
    lock = _publish_and_lock(tmp_path, repo, repo.key, {"tool": ubuntu_like}, wanted=["tool"])
    result = _assemble(tmp_path, lock, "out")
    entry = result.entries["usr/bin/tool"]
    assert entry.kind == "file" and entry.blob.read_bytes() == text and entry.package == "tool"
    # 64 MiB of zeros in a few KiB of zstd: refused while inflating, not after
    bomb = io.BytesIO()
    with tarfile.open(fileobj=bomb, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("./usr/zeros")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    tmp_path, bombed = _hostile(world, [], raw=bomb.getvalue(), zstd=True)
    with pytest.raises(IntegrityError, match="inflates more than 100 times") as info:
        _assemble(tmp_path, bombed, "bomb")
    assert "data.tar.zst" in info.value.file


def test_a_deb_with_other_bytes_than_the_lock_pins_is_refused(world):
    tmp_path, repo = world
    lock = _publish_and_lock(tmp_path, repo, repo.key, {"zlib1g": _zlib_deb(tmp_path)}, wanted=["zlib1g"])
    served = repo.root / lock.package("zlib1g").filename
    data = bytearray(served.read_bytes())
    data[-2] ^= 0xFF  # same size, other bytes
    served.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="do not match the pin") as info:
        _assemble(tmp_path, lock, "out", cache=tmp_path / "cold-cache")  # `image lock` left the good .deb in the default cache
    assert lock.package("zlib1g").sha256 in info.value.expected


def test_a_postinst_beyond_ldconfig_is_refused_until_its_stand_in_is_listed_by_hash(world):
    script = b"#!/bin/sh\nset -e\nupdate-alternatives --install /usr/lib/x86_64-linux-gnu/libblas.so.3 libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 10\n"
    tmp_path, lock = _hostile(world, [member("./usr/", kind=tarfile.DIRTYPE, mode=0o755)], scripts={"postinst": script})
    with pytest.raises(InputError, match="has a postinst script that does more than ldconfig") as info:
        _assemble(tmp_path, lock, "out")
    digest = hashlib.sha256(script).hexdigest()
    assert digest in info.value.found and digest in info.value.fix
    stand_in = ScriptStandIn("bad", "postinst", digest, "the alternatives link, made here",
                             (("/usr/lib/x86_64-linux-gnu/libblas.so.3", "blas/libblas.so.3"),))
    result = _assemble(tmp_path, lock, "ok", {("bad", "postinst"): stand_in})
    assert result.entries["usr/lib/x86_64-linux-gnu/libblas.so.3"].target == "blas/libblas.so.3"


def test_a_postinst_that_only_runs_ldconfig_needs_no_stand_in(world):
    tmp_path, lock = _hostile(world, [member("./usr/", kind=tarfile.DIRTYPE, mode=0o755)],
                              scripts={"postinst": b'#!/bin/sh\nset -e\n# Automatically added by dh_makeshlibs\nif [ "$1" = "configure" ]; then\n\tldconfig\nfi\n'})
    assert "var/lib/dpkg/status.d/bad" in _assemble(tmp_path, lock, "out").entries


@pytest.mark.parametrize(("edit", "found"), [
    (lambda libraries: [*libraries, "libcurl.so.4"], "libcurl.so.4 (in the lock, not in the package)"),  # a base library made up
    (lambda libraries: [name for name in libraries if name != "libz.so.1"], "libz.so.1 (in the package, not in the lock)"),  # one hidden
])
def test_a_lock_whose_libraries_differ_from_what_the_package_ships_is_refused(world, edit, found):
    """The lock's per-package `libraries` (the lane's base libraries are derived from them) are covered by no digest:
    the layer refuses a list that is not what the package's bytes place, naming the package and the library."""
    tmp_path, repo = world
    lock = _publish_and_lock(tmp_path, repo, repo.key, {"zlib1g": _zlib_deb(tmp_path)}, wanted=["zlib1g"])
    assert lock.package("zlib1g").libraries == ("libz.so.1", "libz.so.1.3")
    path = apt_lock.lock_path(tmp_path / "containers" / "trixie" / "ninfer-runtime.toml")
    document = json.loads(path.read_bytes())
    document["packages"][0]["libraries"] = sorted(edit(document["packages"][0]["libraries"]))
    edited = apt_lock.read_lock_bytes(apt_lock.write_lock(path, document), path)  # still the definition's request: read as valid
    with pytest.raises(IntegrityError, match="the lock says zlib1g ships other libraries than its .deb places") as info:
        _assemble(tmp_path, edited, "out")
    assert info.value.field == "packages[0].libraries (zlib1g)" and info.value.found == found
    assert info.value.expected == "libz.so.1, libz.so.1.3" and "image lock" in info.value.fix


def test_ldconfig_works_on_private_copies_of_the_blobs(world):
    """The image's own ldconfig runs as root in the scratch tree: a file there shares no inode with a recorded blob,
    so whatever it writes (or a chmod) cannot change bytes whose SHA-256 the layer and md5sums record."""
    tmp_path, repo = world
    lock = _publish_and_lock(tmp_path, repo, repo.key, {"zlib1g": _zlib_deb(tmp_path)}, wanted=["zlib1g"])
    tree = package_layer.PackageTree(lock.architecture, tmp_path / "tree", EPOCH)
    tree.add_package(lock.packages[0], apt.package_cache() / "sha256" / lock.packages[0].sha256, {})
    entry = tree.entries["usr/lib/x86_64-linux-gnu/libz.so.1.3"]
    blob_mode = entry.blob.stat().st_mode
    entry.mode = 0o600  # a mode unlike the blob's, as chmod in materialize would set it
    tree.materialize(tmp_path / "root")
    copy = tmp_path / "root" / "usr/lib/x86_64-linux-gnu/libz.so.1.3"
    assert not copy.samefile(entry.blob) and copy.read_bytes() == entry.blob.read_bytes()
    copy.write_bytes(b"rewritten by what ran in the chroot")
    assert hashlib.sha256(entry.blob.read_bytes()).hexdigest() == entry.sha256 and entry.blob.stat().st_mode == blob_mode
