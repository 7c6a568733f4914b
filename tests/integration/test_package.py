"""The package stage end to end: the 4090 set from mingw-built PE binaries, the 5090 set from a
real CUDA build, byte-reproducibility, no-op re-runs, and every refusal naming its file."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import sbomkit
from repokit import SAMPLE, make_repo
from winfixtures import (
    compile_windows_prebuilt,
    copy_lanes,
    native_identity,
    native_workspace,
    packaged_native_set,
)

from pipeline.cli import main
from pipeline.errors import BuildFailure, InputError, IntegrityError, RefusedError
from pipeline.formats.assets import asset_set, check_assets
from pipeline.formats.lanes import REPO_ROOT, find_lane, load_lane
from pipeline.lanework.binaries import inspect_binary
from pipeline.register import Register
from pipeline.stages import package as package_module
from pipeline.stages.build import build_lane
from pipeline.util.jsonio import canonical_bytes

NATIVE = "rtx4090-windows-native"


def _hashes(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _extract(package: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "xzf", str(package), "-C", str(into)], check=True)  # GNU tar reads it
    [root] = list(into.iterdir())
    return root


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return packaged_native_set(tmp_path_factory)


@pytest.mark.slow
def test_native_set_is_complete_and_its_payload_is_what_the_installer_expects(native, tmp_path):
    workspace, dist = native
    assets_dir = dist / NATIVE / "assets"
    expected = asset_set(workspace.lane)
    assert sorted(p.name for p in assets_dir.iterdir()) == expected.names()
    assert len(expected.names()) == 11

    root = _extract(assets_dir / expected.name_of("package"), tmp_path / "x")
    assert root.name == expected.package_root
    # The inner list is checked by GNU coreutils itself.
    subprocess.run(["sha256sum", "--quiet", "--strict", "-c", "SHA256SUMS.txt"], cwd=root, check=True)
    bundled = sorted(p.name for p in (root / "bin").glob("*.dll"))
    assert bundled == ["avcodec-61.dll", "avformat-61.dll", "avutil-59.dll", "cudart64_13.dll", "dstorage.dll", "dstoragecore.dll", "libcurl.dll"]
    for name in ("ninfer.exe", "ninfer-serve.exe", "ninfer_bench.exe", "LICENSE", "VERSION", "README.md", "RELEASE_NOTES.md",
                 "build-identity.json", "server-config.json", "release-spec.json", "Install-Release.ps1", "Control-Release.ps1",
                 "Control-GpuOwner.ps1", "Protect-StateRoot.ps1", "licenses/curl.txt", "licenses/LGPL-2.1-or-later.txt",
                 "licenses/third_party/tinycrc/LICENSE", "licenses/LicenseRef-NVIDIA-CUDA-EULA.txt", "licenses/LicenseRef-Microsoft-DirectStorage.txt"):
        path = root / name if "/" in name or not name.endswith(".exe") else root / "bin" / name
        assert path.is_file(), name
    assert (root / "server-config.json").read_bytes() == (workspace.contract / "server-config.json").read_bytes()
    assert (root / "VERSION").read_text() == "0.7.0-beta.2\n"
    for script in expected.scripts():
        assert (root / script).read_bytes() == (assets_dir / script).read_bytes()

    # DirectStorage's licence is the package's own LICENSE.txt the build was handed, recorded by SHA-256.
    licence = (workspace.prebuilt / "LICENSE.txt").read_bytes()
    assert (root / "licenses" / "LicenseRef-Microsoft-DirectStorage.txt").read_bytes() == licence
    identity = json.loads((root / "build-identity.json").read_text())
    assert identity["redistributable_licences"] == {"LICENSE.txt": hashlib.sha256(licence).hexdigest()}
    assert identity["runtime_dependencies"]["cudart64_13.dll"] == hashlib.sha256((root / "bin" / "cudart64_13.dll").read_bytes()).hexdigest()
    assert identity["configuration_sha256"] == hashlib.sha256((root / "server-config.json").read_bytes()).hexdigest()
    assert identity["source_archive_sha256"] == hashlib.sha256((assets_dir / expected.name_of("source")).read_bytes()).hexdigest()
    assert (root / "build-identity.json").read_bytes() == canonical_bytes(identity, indent=None)

    receipt = json.loads((assets_dir / "package-build-receipt.json").read_text())
    assert receipt["artifact_type"] == "ninfer_windows_package_build_receipt" and receipt["schema_version"] == 2
    assert (receipt["qualification_status"], receipt["secret_values_recorded"]) == ("hardware-pending", 0)
    assert receipt["config_sha256"] == identity["configuration_sha256"]
    assert receipt["model_sha256"] == json.loads((root / "server-config.json").read_text())["model"]["artifact_sha256"]
    assert receipt["binaries"]["server_sha256"] == identity["binaries"]["ninfer-serve.exe"]
    assert receipt["binaries"]["benchmark_sha256"] == identity["binaries"]["ninfer_bench.exe"]
    assert receipt["checksums"] == {"entries": 10, "filename": "SHA256SUMS", "line_ending": "LF", "role": "closed-outer-distribution-set"}
    assert receipt["support_assets"]["installer_sha256"] == hashlib.sha256((assets_dir / "Install-Release.ps1").read_bytes()).hexdigest()
    assert receipt["runtime_source_sha"] == workspace.commit and receipt["release_id"] == "qwen38-4090-native-v0.7.0-beta.2"
    with tarfile.open(assets_dir / expected.name_of("source")) as source:
        assert "third_party/inventory.json" in source.getnames()

    register = Register(dist)
    entries = register.query("package-archive", lane=NATIVE)
    assert [e.attrs["component_tag"] for e in entries] == ["v0.7.0-qwen38-4090-beta.2"]
    assert entries[0].attrs["stem"] == "ninfer-rtx4090-native-v0.7.0-beta.2"
    assert len(register.query("support-script", lane=NATIVE)) == 4


@pytest.mark.slow
def test_second_run_is_a_no_op_and_a_forced_run_is_byte_identical(native, capsys):
    workspace, dist = native
    assets_dir = dist / NATIVE / "assets"
    before = _hashes(assets_dir)
    result = workspace.package(dist)
    assert result.skipped and "up to date, nothing to do" in capsys.readouterr().err
    forced = workspace.package(dist, force=True, jobs=1)  # one thread: the bytes must not change
    assert not forced.skipped
    assert _hashes(assets_dir) == before


@pytest.mark.slow
def test_a_non_reproducible_package_is_refused_and_nothing_is_published(tmp_path_factory, tmp_path, monkeypatch):
    workspace = native_workspace(tmp_path_factory)
    dist = tmp_path / "dist"
    workspace.build(dist)
    calls = []
    original = package_module.PackageStage._render_docs

    def leaky(self, payload, *args):
        original(self, payload, *args)
        calls.append(1)
        with open(payload / "README.md", "a") as handle:  # e.g. a build counter or clock in the docs
            handle.write(f"packaged by run {len(calls)}\n")

    monkeypatch.setattr(package_module.PackageStage, "_render_docs", leaky)
    with pytest.raises(IntegrityError, match="not reproducible") as caught:
        workspace.package(dist)
    assert Path(caught.value.file).name.endswith("-rtx4090.tar.gz")
    assert not (dist / NATIVE / "assets").exists()
    assert Register(dist).query("package-archive") == []
    assert [p.name for p in (dist / NATIVE).iterdir() if p.name.startswith(".")] == []  # no staging left behind


def _lanes_with_config(workspace, tmp_path: Path, edit) -> Path:
    lanes = copy_lanes(workspace, tmp_path / "w")
    contract = tmp_path / "contract"
    shutil.copytree(workspace.contract, contract)
    edit(contract)
    lane_file = lanes / f"{NATIVE}.toml"
    lane_file.write_text(lane_file.read_text().replace(str(workspace.contract), str(contract)))
    return lanes


def _set_json(path: Path, change) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_bytes(canonical_bytes(document))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "file", "message"),
    [
        (lambda c: _set_json(c / "server-config.json", lambda d: d["listen"].update(host="0.0.0.0")), "server-config.json", "listen.host"),
        (lambda c: _set_json(c / "server-config.json", lambda d: d["auth"].update(minimum_key_bytes=16)), "server-config.json", "minimum_key_bytes"),
        (lambda c: (c / "server-config.json").write_bytes((c / "server-config.json").read_bytes().replace(b"\n", b"\r\n")), "server-config.json", "carriage return|CR"),
        (lambda c: _set_json(c / "release-spec.json", lambda d: d["source"].update(commit="0" * 40)), "release-spec.json", "source.commit"),
    ],
)
def test_a_bad_serving_contract_is_refused_before_any_work(native, tmp_path, edit, file, message):
    workspace, built = native
    dist = tmp_path / "dist"
    shutil.copytree(built, dist)
    shutil.rmtree(dist / NATIVE / "assets")
    lanes = _lanes_with_config(workspace, tmp_path, edit)
    with pytest.raises((InputError, RefusedError), match=message) as caught:
        package_module.package_lane("4090", dist=dist, lanes_dir=lanes, force=True)
    assert Path(caught.value.file).name == file
    assert not (dist / NATIVE / "assets").exists()


@pytest.mark.slow
def test_a_missing_runtime_library_is_named_before_any_work(tmp_path_factory, tmp_path):
    workspace = native_workspace(tmp_path_factory)
    prebuilt = tmp_path / "prebuilt"
    shutil.copytree(workspace.prebuilt, prebuilt)
    (prebuilt / "avutil-59.dll").unlink()
    dist = tmp_path / "dist"
    workspace.build(dist, prebuilt=prebuilt)  # the build only checks the binaries themselves
    with pytest.raises(BuildFailure, match="needs avutil-59.dll") as caught:
        workspace.package(dist)
    assert caught.value.found == "avutil-59.dll"
    assert not (dist / NATIVE / "assets").exists()


@pytest.mark.slow
def test_a_release_refuses_the_directstorage_stand_in_licence_and_names_the_file_to_give(tmp_path_factory, tmp_path):
    workspace = native_workspace(tmp_path_factory)
    stand_in = REPO_ROOT / "packaging/licenses/LicenseRef-Microsoft-DirectStorage.txt"
    prebuilt = tmp_path / "prebuilt"
    shutil.copytree(workspace.prebuilt, prebuilt)
    # A text that is not one (NUL bytes) is refused by the build, before anything is recorded.
    (prebuilt / "LICENSE.txt").write_bytes(b"MICROSOFT\0")
    with pytest.raises(InputError, match="is not a licence text") as caught:
        workspace.build(tmp_path / "bad", prebuilt=prebuilt)
    assert caught.value.file == str(prebuilt / "LICENSE.txt")
    # No licence file beside the DLLs: the build records none, and a cut that is not a rehearsal is refused.
    (prebuilt / "LICENSE.txt").unlink()
    dist = tmp_path / "dist"
    workspace.build(dist, prebuilt=prebuilt)
    assert json.loads((dist / NATIVE / "build" / "build-identity.json").read_text())["redistributable_licences"] == {}
    with pytest.raises(RefusedError, match="no licence text came with dstorage.dll") as caught:
        workspace.package(dist)
    assert caught.value.field == "package.redistributables: dstorage.dll.license_from_prebuilt"
    assert "LICENSE.txt" in caught.value.found and "beside dstorage.dll in the --prebuilt folder" in caught.value.fix
    assert caught.value.exit_code == RefusedError.exit_code
    assert not (dist / NATIVE / "assets").exists()
    # The stand-in copied in as LICENSE.txt is no licence text of the package either.
    shutil.copyfile(stand_in, prebuilt / "LICENSE.txt")
    workspace.build(dist, prebuilt=prebuilt)
    with pytest.raises(InputError, match="is the repository's stand-in") as caught:
        workspace.package(dist)
    assert Path(caught.value.file).name == "LICENSE.txt"
    assert not (dist / NATIVE / "assets").exists()


@pytest.mark.slow
def test_a_build_of_another_cut_and_a_changed_binary_are_refused(native, tmp_path):
    workspace, built = native
    dist = tmp_path / "dist"
    shutil.copytree(built, dist)
    # A new cut (beta.3 of the same commit, superseding beta.2) makes the build in the register stale.
    from pipeline.formats.cut_ledger import Publication
    from pipeline.stages.cut import cut_lane

    lanes = copy_lanes(workspace, tmp_path / "w")
    lane = load_lane(lanes / f"{NATIVE}.toml")
    ledger = lane.ledger()
    published = ledger.with_state("0.7.0", 2, state="published", publication=Publication("alphastorm/ninfer", 7, "a" * 64, "b" * 64))
    (lanes.parent / "cuts" / f"{NATIVE}.json").write_bytes(published.to_bytes())
    cut_lane("4090", source=f"{workspace.repo}@{workspace.commit}", dist=tmp_path / "cut", lanes_dir=lanes, supersede=2, reason="a fixture failure after publication", use_github=False)
    with pytest.raises(RefusedError, match="build in the register is of v0.7.0-qwen38-4090-beta.2, but the lane's current cut is v0.7.0-qwen38-4090-beta.3") as caught:
        package_module.package_lane("4090", dist=dist, lanes_dir=lanes)
    assert Path(caught.value.file).name == "build-identity.json"
    assert caught.value.exit_code == 7
    binary = dist / NATIVE / "build" / "bin" / "ninfer-serve.exe"
    binary.write_bytes(binary.read_bytes() + b"\0")
    with pytest.raises(IntegrityError, match="changed on disk") as caught:
        workspace.package(dist, force=True)
    assert caught.value.file == str(binary)


@pytest.mark.slow
def test_package_all_and_check_assets_from_the_command_line(native, tmp_path, capsys):
    workspace, built = native
    dist = tmp_path / "dist"
    shutil.copytree(built, dist)
    shutil.rmtree(dist / NATIVE / "assets")
    assert main(["package", "--all", "--dist", str(dist), "--lanes-dir", str(workspace.lanes_dir)]) == 0
    assert _hashes(dist / NATIVE / "assets") == _hashes(built / NATIVE / "assets")  # another folder, same bytes
    assert main(["check-assets", str(dist / NATIVE / "assets"), "--lanes-dir", str(workspace.lanes_dir)]) == 0
    assert "is a complete, intact asset set" in capsys.readouterr().out


def test_package_all_without_any_build_says_what_to_run(tmp_path, capsys):
    assert main(["package", "--all", "--dist", str(tmp_path / "empty")]) == 1
    assert "holds no build to package" in capsys.readouterr().err


# -- the 5090 container lane from a real CUDA build -------------------------------------

@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.network
def test_container_set_from_a_cuda_build_is_reproducible_and_checked(tmp_path, sample_repo, capsys):
    repo, _commit = sample_repo
    for dist in (tmp_path / "a", tmp_path / "b"):
        assert main(["build", "--lane", "5090", "--source", str(repo), "--rehearsal", "--dist", str(dist)]) == 0
        assert main(["package", "--lane", "5090", "--dist", str(dist)]) == 0
    a, b = tmp_path / "a" / "rtx5090-container" / "assets", tmp_path / "b" / "rtx5090-container" / "assets"
    assert _hashes(a) == _hashes(b), "two builds and packages of one commit must give the same set"
    expected = asset_set(find_lane("5090"))
    assert sorted(_hashes(a)) == expected.names() and len(expected.names()) == 7
    report = check_assets(a)
    assert report.lane == "rtx5090-container"
    root = _extract(a / expected.name_of("package"), tmp_path / "x")
    members = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert {"bin/ninfer", "bin/ninfer-serve", "LICENSE", "build-identity.json", "SHA256SUMS.txt"} <= set(members)
    assert not [m for m in members if "libcudart" in m], "the base image provides the CUDA runtime"
    for binary in ("ninfer", "ninfer-serve"):
        info = inspect_binary(root / "bin" / binary)
        assert info.runpath == ("$ORIGIN",) and not info.rpath
    receipt = json.loads((a / "package-build-receipt.json").read_text())
    assert receipt["artifact_type"] == "ninfer_container_package_build_receipt"
    assert receipt["runtime_libraries"]["provided_by_target"]["libcudart.so.13"] == "base-image"
    # The SPDX document is NTIA-conformant, the CycloneDX one valid for a second implementation, and they agree.
    spdx_path, cdx_path = a / expected.name_of("spdx"), a / expected.name_of("cdx")
    sbomkit.require_ntia(spdx_path)
    sbomkit.require_cdx_js(cdx_path)
    sbomkit.compare_twins(spdx_path, cdx_path)
    spdx = json.loads(spdx_path.read_text())
    cudart = next(p for p in spdx["packages"] if p["name"] == "libcudart.so.13")
    provider = find_lane("5090").providers["base-image"]
    assert (cudart["supplier"], cudart["versionInfo"]) == (f"Organization: {provider.supplier}", provider.version)
    toolchain = {p["name"]: p for p in spdx["packages"] if p["SPDXID"].startswith("SPDXRef-Toolchain-")}
    assert toolchain["nvidia-cuda-nvcc"]["supplier"] == "Organization: NVIDIA Corporation" and toolchain["cmake"]["supplier"].startswith("Organization: ")
    # The build's toolchain reached package through its register entry, not through the toolchain folder.
    from pipeline.formats.toolchain_record import read_record
    from pipeline.register import Register
    from pipeline.util.hashing import sha256_file

    register = Register(tmp_path / "a")
    entry = register.one("toolchain", lane="rtx5090-container", needed_by="t", produced_by="build")
    record = read_record(register.verified_path(entry))
    assert (entry.attrs["toolchain_kind"], record.kind) == ("pinned", "pinned") and entry.attrs["library_dir"] == record.library_dir
    assert Path(record.library_dir) == Path(record.root) / "site" / "nvidia" / "cu13" / "lib"
    cudart = record.libraries["libcudart.so.13"]
    assert (cudart.distribution, cudart.path) == ("nvidia-cuda-runtime", "nvidia/cu13/lib/libcudart.so.13")
    assert cudart.sha256 == sha256_file(Path(record.library_dir) / "libcudart.so.13")
    assert record.wheel_authors["cmake"] == toolchain["cmake"]["supplier"].removeprefix("Organization: ")
    capsys.readouterr()
    assert main(["package", "--lane", "5090", "--dist", str(tmp_path / "a")]) == 0
    assert "up to date, nothing to do" in capsys.readouterr().err


@pytest.mark.slow
def test_a_vendored_inventory_hash_that_differs_from_the_source_is_refused(tmp_path_factory, tmp_path):
    """The CycloneDX vendored components come from third_party/inventory.json: its hashes must be the bytes'."""
    workspace = native_workspace(tmp_path_factory)
    lanes, dist = _build_with_inventory(workspace, tmp_path, lambda inventory: inventory["components"][0]["files"][0].update(sha256="0" * 64))
    with pytest.raises(IntegrityError, match="hash mismatch: the inventory declares a SHA-256 for third_party/miniargs/LICENSE") as caught:
        package_module.package_lane("4090", dist=dist, lanes_dir=lanes)
    assert caught.value.file.endswith("source.tar!third_party/inventory.json")
    assert not (dist / NATIVE / "assets").exists()


@pytest.mark.slow
def test_a_mixed_case_purl_is_the_same_bytes_in_both_sboms_of_a_packaged_set(tmp_path_factory, tmp_path):
    """A vendored component whose inventory spells its purl as upstream does (utf8proc's is
    pkg:github/JuliaStrings/utf8proc): both SBOMs of the packaged set carry one canonical spelling,
    and agree component by component (name, version, supplier, purl, licences, copyright, hashes)."""
    workspace = native_workspace(tmp_path_factory)
    lanes, dist = _build_with_inventory(workspace, tmp_path, lambda inventory: inventory["components"][1].update(purl="pkg:github/OMP-NInfer/TinyCRC@v1.2.0"))
    package_module.package_lane("4090", dist=dist, lanes_dir=lanes)
    assets = dist / NATIVE / "assets"
    spdx_path, cdx_path = next(assets.glob("*.spdx.json")), next(assets.glob("*.cdx.json"))
    assert sbomkit.compare_twins(spdx_path, cdx_path) == 17
    spdx = [r["referenceLocator"] for p in json.loads(spdx_path.read_text())["packages"] if p["name"] == "tinycrc" for r in p["externalRefs"]]
    cdx = [c["purl"] for c in json.loads(cdx_path.read_text())["components"] if c["name"] == "tinycrc"]
    assert spdx == cdx == ["pkg:github/omp-ninfer/tinycrc@v1.2.0"]  # the github type's names are case-insensitive: lowercased
    # The payload's RELEASE_NOTES.md spells it as both SBOMs do (the one purl builder), not as the inventory typed it.
    import tarfile

    [package] = [p for p in assets.iterdir() if p.name.endswith(".tar.gz") and "source" not in p.name]
    with tarfile.open(package, "r:gz") as archive:
        member = next(m for m in archive if m.name.endswith("/RELEASE_NOTES.md"))
        notes = archive.extractfile(member).read().decode()
    assert "`pkg:github/omp-ninfer/tinycrc@v1.2.0`" in notes and "OMP-NInfer/TinyCRC" not in notes


# -- hostile lane files and inventories: package writes nothing outside dist ---------------------


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>") for p in sorted(root.rglob("*"))}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        # Before: the archive, source, SBOMs and payload were written two folders above dist/<lane>/.
        ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "../../../escaped-v{version}-beta.{n}"', "component.stem_pattern"),
        ('release_id_pattern = "qwen38-4090-native-v{version}-beta.{n}"', 'release_id_pattern = "../escaped-{n}"', "component.release_id_pattern"),
        # Before: the host file was bundled into the published package as licenses/<name>.
        ('license_file = "packaging/licenses/curl.txt"', 'license_file = "{host}"', "package.redistributables[7].license_file"),
        ('license_file = "packaging/licenses/curl.txt"', 'license_file = "packaging/licenses/../../../../../../../../../../..{host}"', "package.redistributables[7].license_file"),
    ],    ids=["stem-dotdot", "release-id-dotdot", "licence-absolute", "licence-dotdot"],
)
def test_a_hostile_lane_file_is_refused_before_package_writes_anything(native, tmp_path, old, new, field):
    workspace, built = native
    dist = tmp_path / "dist"
    shutil.copytree(built, dist)
    shutil.rmtree(dist / NATIVE / "assets")
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("a private file of the packaging host\n")
    lanes = tmp_path / "lanes"
    shutil.copytree(workspace.lanes_dir, lanes)
    lane_file = lanes / f"{NATIVE}.toml"
    text = lane_file.read_text()
    assert old in text
    lane_file.write_text(text.replace(old, new.replace("{host}", str(host_file)), 1))
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as caught:
        package_module.package_lane("4090", dist=dist, lanes_dir=lanes, force=True)
    assert (caught.value.file, caught.value.field) == (str(lane_file), field)
    assert "is not a safe name" in caught.value.what or "outside its placeholders" in caught.value.what
    assert _snapshot(tmp_path) == before  # not one byte anywhere: refused when the lane file was read
    assert main(["package", "--lane", "4090", "--dist", str(dist), "--lanes-dir", str(lanes), "--quiet"]) == 1
    assert _snapshot(tmp_path) == before


def _build_with_inventory(workspace, tmp_path: Path, change) -> tuple[Path, Path]:
    """A build of the sample whose third_party/inventory.json was edited by `change` (lanes, dist)."""
    source = tmp_path / "sample"
    shutil.copytree(SAMPLE, source, ignore=shutil.ignore_patterns("build", "build-*"))
    inventory = json.loads((source / "third_party" / "inventory.json").read_text())
    change(inventory)
    (source / "third_party" / "inventory.json").write_text(json.dumps(inventory, indent=2, sort_keys=True) + "\n")
    commit = make_repo(tmp_path / "ninfer", source)
    lanes = copy_lanes(workspace, tmp_path)  # with the cut ledgers beside it (the lane's current cut names the set)
    contract = tmp_path / "contract"
    shutil.copytree(workspace.contract, contract)
    _set_json(contract / "release-spec.json", lambda d: d["source"].update(commit=commit))
    lane_file = lanes / f"{NATIVE}.toml"
    lane_file.write_text(lane_file.read_text().replace(workspace.commit, commit).replace(str(workspace.contract), str(contract)))
    prebuilt = compile_windows_prebuilt(tmp_path / "prebuilt", native_identity(load_lane(lane_file), commit))
    dist = tmp_path / "dist"
    build_lane("4090", dist=dist, source=str(tmp_path / "ninfer"), prebuilt=prebuilt, lanes_dir=lanes, rehearsal=True)  # not the cut's commit
    return lanes, dist


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        # Before: licenses/third_party/<name>/LICENSE landed in tmp_path/escaped/, outside dist.
        (lambda inv: inv["components"][0].update(name="../../../../../../escaped"), "components[0].name", "contains a path separator"),
        (lambda inv: inv["components"][0].update(name="/tmp/escaped"), "components[0].name", "contains a path separator"),
        (lambda inv: inv["components"][0].update(name=".."), "components[0].name", "is '..'"),
        (lambda inv: inv["components"][0].update(name="aux"), "components[0].name", "Windows device name AUX"),
        (lambda inv: inv["components"][1].update(name=inv["components"][0]["name"].upper()), "components[1].name", "share a name"),
        (lambda inv: inv["components"][0].update(license_file="/etc/hostname"), "components[0].license_file", "is an absolute path"),
        (lambda inv: inv["components"][0]["files"][0].update(path="../../etc/hostname"), "components[0].files[0].path", "'..' segment"),
        (lambda inv: inv["components"].append("zlib"), "components[2]", "is not an object"),
    ],    ids=["name-dotdot", "name-absolute", "name-is-dotdot", "name-device", "name-twice", "licence-absolute", "file-dotdot", "not-an-object"],
)
def test_a_hostile_vendored_inventory_is_refused_before_package_writes_anything(tmp_path_factory, tmp_path, change, field, reason):
    workspace = native_workspace(tmp_path_factory)
    lanes, dist = _build_with_inventory(workspace, tmp_path, change)
    before = _snapshot(tmp_path)
    with pytest.raises(InputError) as caught:
        package_module.package_lane("4090", dist=dist, lanes_dir=lanes)
    assert caught.value.file.endswith("source.tar!third_party/inventory.json")
    assert caught.value.field == field and reason in caught.value.render()
    after = _snapshot(tmp_path)
    # The new files: the stage's empty lock (stage.py takes it before preflight, so two runs cannot race; never removed,
    # as deleting a lock file races too) and the refusal log naming this refusal (status shows it), with the register's
    # lock. Nothing else, inside dist or out: the register itself is untouched.
    assert after.pop(f"dist/.locks/package_{NATIVE}.lock", b"") == b""
    assert after.pop("dist/.register.lock", b"") == before.pop("dist/.register.lock", b"") == b""
    refusals = json.loads(after.pop("dist/refusals.json"))["refusals"]
    assert list(refusals) == [f"package:{NATIVE}"] and field in refusals[f"package:{NATIVE}"]["message"]
    assert after == before
    assert not (dist / NATIVE / "assets").exists()


@pytest.mark.slow
def test_package_refuses_a_lane_file_other_than_the_one_the_build_bound(native, tmp_path):
    """Not only N and the commit: the build's lane file (and toolchain lock entry) must be the ones package reads."""
    workspace, built = native
    dist = tmp_path / "dist"
    shutil.copytree(built, dist)
    lanes = copy_lanes(workspace, tmp_path / "w")
    lane_file = lanes / f"{NATIVE}.toml"
    lane_file.write_text(lane_file.read_text() + "# one more comment: other bytes, another lane file\n")
    with pytest.raises(RefusedError, match="the lane file is not the one the build was made with") as caught:
        package_module.package_lane("4090", dist=dist, lanes_dir=lanes, force=True)
    assert caught.value.field == "lane_file_sha256" and caught.value.file == str(lane_file)
    assert caught.value.found == load_lane(lane_file).file_sha256 and "build-identity.json lane_file_sha256" in str(caught.value.expected)


def test_a_relock_of_the_lanes_package_base_makes_the_container_set_out_of_date(tmp_path, monkeypatch):
    """The 5090 lane's base libraries (what package counts as provided, never bundled) come from its package base's
    definition and lock: both are inputs of the stage's fingerprint, so a relock or an edit re-runs package."""
    from types import SimpleNamespace

    from pipeline.formats import image_definition

    shutil.copytree(REPO_ROOT / "containers", tmp_path / "containers")
    shutil.copytree(REPO_ROOT / "packaging" / "licenses", tmp_path / "packaging" / "licenses")
    monkeypatch.setattr(image_definition, "REPO_ROOT", tmp_path)
    lane = find_lane("5090")
    assert lane.base_image == "containers/trixie/ninfer-runtime.toml"
    # the fingerprint's other inputs, held still: only the package base changes between the calls below
    stage = SimpleNamespace(lane=lane, resolution=SimpleNamespace(bundled=lambda: []), cut=None, epoch=1, level=9, inputs_used={},
                            patchelf=SimpleNamespace(provenance=lambda: {"patchelf": "pinned"}))
    before = package_module.PackageStage.inputs(stage)
    assert package_module.PackageStage.inputs(stage) == before
    assert before["base_image"]["definition"] == lane.base_image
    lock = tmp_path / "containers" / "trixie" / "ninfer-runtime.lock.json"
    document = json.loads(lock.read_bytes())
    document["packages"][0]["version"] += "+relocked"  # a relock that moved one package
    lock.write_bytes(canonical_bytes(document))
    relocked = package_module.PackageStage.inputs(stage)
    assert relocked != before and relocked["base_image"]["lock_sha256"] != before["base_image"]["lock_sha256"]
    definition = tmp_path / "containers" / "trixie" / "ninfer-runtime.toml"
    definition.write_text(definition.read_text() + "\n# reviewed again\n")
    assert package_module.PackageStage.inputs(stage)["base_image"]["definition_sha256"] != relocked["base_image"]["definition_sha256"]
