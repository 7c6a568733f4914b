"""`image lock` against a self-made signed repository: signature, index hash, closure, ambiguity, virtual packages.

Every repository here is really signed (GnuPG, a key made by the test) and served over loopback
HTTP; the verifier is Debian's gpgv.  Each refusal names the file and what was found.
"""

from __future__ import annotations

import hashlib
import json
import lzma

import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.formats import apt_lock, image_definition
from pipeline.stages import image
from tests.kits.aptkit import MiniRepo, SigningKey, definition_toml, package

LANE = "rtx5090-container"


@pytest.fixture(scope="module")
def keys():
    trusted, intruder = SigningKey.make("Test Archive"), SigningKey.make("Somebody Else")
    yield trusted, intruder
    trusted.close()
    intruder.close()


@pytest.fixture
def repo(tmp_path, keys, monkeypatch):
    monkeypatch.setattr(image_definition, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("OMP_NINFER_APT_CACHE", str(tmp_path / "cache"))
    mini = MiniRepo(tmp_path / "archive", keys[0])
    mini.serve()
    yield mini
    mini.close()


UNIVERSE = [
    package("libc6", "2.36-9", Multi_Arch="same", Depends="libgcc-s1"),
    package("libc6", "2.41-12", Multi_Arch="same", Depends="libgcc-s1", Source="glibc"),
    package("libc6", "2.41-12", arch="i386", Multi_Arch="same"),
    package("libgcc-s1", "14.2.0-19", Multi_Arch="same", Pre_Depends="libc6 (>= 2.35)", Depends="gcc-14-base (= 14.2.0-19)", Source="gcc-14 (14.2.0-19)"),
    package("gcc-14-base", "14.2.0-19", Multi_Arch="same", Source="gcc-14"),
    package("libstdc++6", "14.2.0-19", Depends="libc6 (>= 2.38), libgcc-s1 (>= 4.2)", Source="gcc-14"),
    package("libavcodec61", "7:7.1.3-0+deb13u1", Depends="libc6 (>= 2.38), libzvirt", Source="ffmpeg"),
    package("libavcodec-extra61", "7:7.1.3-0+deb13u1", Provides="libavcodec61 (= 7:7.1.3-0+deb13u1)", Conflicts="libavcodec61", Source="ffmpeg"),
    package("zlib1g", "1:1.3.dfsg+really1.3.1-1", Provides="libzvirt, libz1"),
    package("tzdata", "2025b-4", arch="all"),
    package("python3", "3.13.5-1", Multi_Arch="allowed"),
    package("exim4-daemon-light", "4.98-1", Provides="mail-transport-agent"),
    package("postfix", "3.10.2-1", Provides="mail-transport-agent"),
    package("ninfer-deps", "1.0-1", Depends="libstdc++6, libavcodec61, syslog-ng | tzdata, python3:any"),
    package("needs-mta", "1.0-1", Depends="mail-transport-agent"),
]


def _definition(repo: MiniRepo, key: SigningKey, packages: list[str], *, keyring: bytes | None = None, fingerprints: list[str] | None = None):
    root = image_definition.REPO_ROOT
    (root / "containers" / "keys").mkdir(parents=True, exist_ok=True)
    keyring = keyring if keyring is not None else key.keyring
    (root / "containers" / "keys" / "test.gpg").write_bytes(keyring)
    path = root / "containers" / "trixie" / "ninfer-runtime.toml"  # where the lane's package.base_image names it
    path.parent.mkdir(exist_ok=True)
    path.write_text(definition_toml(repo.server.base, key, "containers/keys/test.gpg", packages, fingerprints=fingerprints, keyring=keyring))
    return path


def _lock(path) -> dict:
    assert image.lock_packages(LANE, definition=path) == 0
    return json.loads(apt_lock.lock_path(path).read_bytes())


def test_the_lock_holds_the_closure_with_concrete_names_over_provides_and_why_each_is_there(repo, keys, capsys):
    repo.publish(UNIVERSE)
    path = _definition(repo, keys[0], ["ninfer-deps"])
    lock = _lock(path)
    names = [p["name"] for p in lock["packages"]]
    # concrete libavcodec61 over libavcodec-extra61; the sole provider of a virtual name; arch all; :any on M-A allowed
    assert names == ["gcc-14-base", "libavcodec61", "libc6", "libgcc-s1", "libstdc++6", "ninfer-deps", "python3", "tzdata", "zlib1g"]
    by_name = {p["name"]: p for p in lock["packages"]}
    assert by_name["libc6"]["version"] == "2.41-12" and by_name["libc6"]["architecture"] == "amd64"  # the highest, of our architecture
    assert by_name["libc6"]["source_package"] == "glibc" and by_name["libgcc-s1"]["source_version"] == "14.2.0-19"
    assert by_name["zlib1g"]["why"] == {"package": "libavcodec61", "field": "Depends", "relation": "libzvirt"}
    assert by_name["libgcc-s1"]["why"] == {"package": "libstdc++6", "field": "Depends", "relation": "libgcc-s1 (>= 4.2)"}  # breadth first: the first edge met
    assert by_name["ninfer-deps"]["why"] == {"package": None, "field": "base.packages", "relation": "ninfer-deps"}
    assert by_name["tzdata"]["why"]["relation"] == "syslog-ng | tzdata"
    stanza = next(entry for entry in UNIVERSE if entry["Package"] == "libstdc++6")
    assert (by_name["libstdc++6"]["sha256"], by_name["libstdc++6"]["size"], by_name["libstdc++6"]["filename"]) == (stanza["SHA256"], int(stanza["Size"]), stanza["Filename"])
    (source,) = lock["sources"]
    assert source["signers"] == [keys[0].fingerprint]
    assert source["inrelease_sha256"] == hashlib.sha256((repo.dists / "InRelease").read_bytes()).hexdigest()
    assert source["indexes"] == [{"path": "main/binary-amd64/Packages.xz", "sha256": hashlib.sha256((repo.dists / "main/binary-amd64/Packages.xz").read_bytes()).hexdigest(),
                                  "size": (repo.dists / "main/binary-amd64/Packages.xz").stat().st_size}]
    assert apt_lock.read_lock(apt_lock.lock_path(path)).package("python3").multi_arch == "allowed"
    assert "9 packages" in capsys.readouterr().out


def test_a_virtual_package_with_two_providers_is_refused_naming_them_until_the_definition_names_one(repo, keys):
    repo.publish(UNIVERSE)
    with pytest.raises(InputError, match="several packages provide") as info:
        _lock(_definition(repo, keys[0], ["needs-mta"]))
    assert "exim4-daemon-light 4.98-1" in str(info.value.found) and "postfix 3.10.2-1" in str(info.value.found)
    assert info.value.field == "needs-mta.Depends"
    lock = _lock(_definition(repo, keys[0], ["needs-mta", "postfix"]))
    assert [p["name"] for p in lock["packages"]] == ["needs-mta", "postfix"]


def test_a_requested_virtual_name_and_a_missing_dependency_are_refused(repo, keys):
    repo.publish([*UNIVERSE, package("broken", Depends="libnothere (>= 2)")])
    with pytest.raises(InputError, match="requests a virtual package") as info:
        _lock(_definition(repo, keys[0], ["mail-transport-agent"]))
    assert "exim4-daemon-light" in info.value.expected and "postfix" in info.value.expected
    with pytest.raises(InputError, match="needs a package no source offers") as info:
        _lock(_definition(repo, keys[0], ["broken"]))
    assert "libnothere (>= 2)" in info.value.found


def test_an_inrelease_whose_signed_text_was_changed_is_refused(repo, keys):
    repo.publish(UNIVERSE)
    inrelease = repo.dists / "InRelease"
    inrelease.write_bytes(inrelease.read_bytes().replace(b"Label: Test", b"Label: Tost"))
    with pytest.raises(IntegrityError, match="not signed by a key the image definition trusts") as info:
        _lock(_definition(repo, keys[0], ["libc6"]))
    assert "bad or expired signature" in info.value.found and info.value.file.endswith("/dists/testing/InRelease")


def test_a_signature_by_a_key_in_the_keyring_but_not_listed_is_refused(repo, keys):
    trusted, intruder = keys
    repo.publish(UNIVERSE, signer=intruder)
    both = trusted.keyring + intruder.keyring  # the keyring file holds both keys; only the listed one counts
    with pytest.raises(IntegrityError, match="not signed by a key the image definition trusts") as info:
        _lock(_definition(repo, trusted, ["libc6"], keyring=both))
    assert intruder.fingerprint in info.value.found and "does not list" in info.value.found
    # the same file, the intruder's fingerprint listed: accepted (so the refusal above is the list's doing)
    lock = _lock(_definition(repo, trusted, ["libc6"], keyring=both, fingerprints=[intruder.fingerprint]))
    assert lock["sources"][0]["signers"] == [intruder.fingerprint]


def test_text_outside_the_signed_block_is_refused_before_parsing(repo, keys):
    repo.publish(UNIVERSE)
    inrelease = repo.dists / "InRelease"
    inrelease.write_bytes(inrelease.read_bytes() + b"SHA256:\n 00 1 main/binary-amd64/Packages.xz\n")
    with pytest.raises(IntegrityError, match="is not one clearsigned document") as info:
        _lock(_definition(repo, keys[0], ["libc6"]))
    assert "bytes follow its signature" in info.value.found


def test_a_packages_index_that_differs_from_the_release_hash_is_refused(repo, keys):
    repo.publish(UNIVERSE)
    index = repo.dists / "main/binary-amd64/Packages.xz"
    other = lzma.compress(b"Package: evil\n")
    index.write_bytes(other + b"\0" * (index.stat().st_size - len(other)))  # same size, other bytes
    with pytest.raises(IntegrityError, match="differs from the signed Release file") as info:
        _lock(_definition(repo, keys[0], ["libc6"]))
    assert info.value.field == "main/binary-amd64/Packages.xz" and hashlib.sha256(index.read_bytes()).hexdigest() in info.value.found


def test_a_keyring_that_does_not_match_its_pin_is_refused_before_any_download(repo, keys):
    repo.publish(UNIVERSE)
    path = _definition(repo, keys[0], ["libc6"])
    (image_definition.REPO_ROOT / "containers/keys/test.gpg").write_bytes(keys[1].keyring)
    with pytest.raises(IntegrityError, match="does not have the SHA-256 the definition pins") as info:
        _lock(path)
    assert info.value.field == "base.source[0].keyring_sha256"


def test_architecture_all_packages_in_a_separate_binary_all_index_are_found(repo, keys):
    repo.publish(UNIVERSE, split_all=True)
    lock = _lock(_definition(repo, keys[0], ["ninfer-deps"]))
    assert "tzdata" in {p["name"] for p in lock["packages"]}  # arch all, only in main/binary-all/Packages
    assert [index["path"] for index in lock["sources"][0]["indexes"]] == ["main/binary-amd64/Packages.xz", "main/binary-all/Packages.xz"]
