"""The image definition's base licence text: read bounded, refused clearly when it is not text."""

from __future__ import annotations

import pytest

from pipeline.errors import InputError
from pipeline.formats import image_definition


def test_a_base_licence_text_that_is_not_utf8_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(image_definition, "REPO_ROOT", tmp_path)
    (tmp_path / "packaging" / "licenses").mkdir(parents=True)
    text = tmp_path / "packaging" / "licenses" / "LicenseRef-NVIDIA-Deep-Learning-Container-License.txt"
    base = {"license": "LicenseRef-NVIDIA-Deep-Learning-Container-License", "license_file": "packaging/licenses/LicenseRef-NVIDIA-Deep-Learning-Container-License.txt"}
    text.write_bytes(b"NVIDIA terms\n")
    assert image_definition._base_license(base, file="containers/x.toml") == (base["license"], base["license"], "NVIDIA terms\n")
    text.write_bytes(b"NVIDIA \xff terms\n")
    with pytest.raises(InputError, match="is not UTF-8 text") as info:
        image_definition._base_license(base, file="containers/x.toml")
    assert info.value.file == base["license_file"] and info.value.found == "byte 7"


def _source(uri: str, suite: str) -> image_definition.PackageSource:
    return image_definition.PackageSource(uri, suite, ("main",), "containers/keys/k.gpg", "0" * 64, ("A" * 40,), b"")


@pytest.mark.parametrize(("suite", "release"), [
    ("trixie", "trixie"), ("trixie-security", "trixie"), ("trixie-updates", "trixie"),
    # backports are newer upstream versions built for the release, and proposed-updates is the next point
    # release not yet accepted: neither ships the release's own builds, so the drift check sees them as their own suite
    ("trixie-backports", "trixie-backports"), ("trixie-proposed-updates", "trixie-proposed-updates"), ("bookworm-backports", "bookworm-backports"),
])
def test_only_security_and_updates_suites_are_the_release_itself(suite, release):
    snapshot = "https://snapshot.debian.org/archive/debian/20260101T000000Z"
    base = image_definition.PackageBase(("libc6",), (_source(snapshot, suite),))
    assert base.releases() == {(release, "20260101T000000Z")}
    assert image_definition.PackageBase(("libc6",), (_source("https://deb.debian.org/debian", suite),)).releases() == {(release, None)}
