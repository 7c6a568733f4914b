"""tests/kits/imagekit.py's fake package follows the package stage's contract (pipeline/formats/assets.py).

The image, push and SBOM tests bind this archive instead of a real package run; were its names,
folder, register entries or payload hand-typed, they would drift from what the package stage
writes (it once registered `<lane>/<archive>` where the stage registers `<lane>/assets/<archive>`).
"""

from __future__ import annotations

import tarfile

import imagekit

from pipeline.formats.assets import ASSETS_DIR, ROLE_KINDS, asset_set, payload_required
from pipeline.formats.lanes import find_lane
from pipeline.register import Register


def _binaries(folder):
    folder.mkdir()
    out = {}
    for name in ("ninfer", "ninfer-serve"):
        (folder / name).write_bytes(f"stand-in {name}\n".encode())
        out[name] = folder / name
    return out


def test_the_fake_package_has_the_real_names_folder_entries_and_payload(tmp_path):
    lane = find_lane("5090")
    dist = tmp_path / "dist"
    archive = imagekit.write_package(dist, lane, binaries=_binaries(tmp_path / "bin"))
    expected = asset_set(lane)
    folder = dist / lane.id / ASSETS_DIR
    assert archive == folder / expected.name_of("package")
    register = Register(dist)
    entries = register.outputs_of(f"package:{lane.id}")
    assert sorted(e.name for e in entries) == sorted(f"{lane.id}/assets/{expected.name_of(role)}" for role in ("package", "source", "spdx"))
    for entry in entries:
        name = entry.name.rsplit("/", 1)[1]
        role = expected.role_of(name)
        assert (entry.kind, entry.lane, entry.stage) == (ROLE_KINDS[role], lane.id, "package")
        assert register.path_of(entry) == folder / name
        assert entry.attrs == {"component_tag": lane.tag(), "stem": expected.stem, "platform": expected.platform, "role": role}
    # What the image stage asks the register for, it finds: the one package archive of the lane, and the set's SPDX document.
    assert register.one("package-archive", lane=lane.id, needed_by="test", produced_by="package").path == archive.relative_to(dist).as_posix()
    from pipeline.formats import sbom

    spdx = register.verified_path(register.one("spdx-sbom", lane=lane.id, needed_by="test", produced_by="package"))
    sbom.verify_spdx(spdx, _payload_digests(archive), package_name=archive.name, package_sha256=register.one("package-archive", lane=lane.id, needed_by="t", produced_by="t").sha256)
    with tarfile.open(archive, "r:gz") as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    root = expected.package_root
    assert {n.split("/", 1)[0] for n in names} == {root}
    payload = {n.split("/", 1)[1] for n in names}
    assert set(payload_required(lane, ["ninfer", "ninfer-serve"])) <= payload
    assert payload - set(payload_required(lane, ["ninfer", "ninfer-serve"])) == {"licenses/miniargs.txt", "licenses/tinycrc.txt"}


def _payload_digests(archive) -> dict[str, tuple[str, str]]:
    """(SHA-256, SHA-1) of each payload file of the archive, for the SPDX check against the bytes."""
    import hashlib

    with tarfile.open(archive, "r:gz") as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return {name: (hashlib.sha256(data).hexdigest(), hashlib.sha1(data).hexdigest()) for name, data in files.items()}
