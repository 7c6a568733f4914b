"""`rebuild --verify`: the embedded sample's published 5090 set rebuilt from its source archive, bit for bit.

The set is made once per module (build -> package of the sample committed in its
own repository, the real pinned nvcc); each rebuild then runs in a fresh folder
from nothing but the published files and this checkout's lane file and lock.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.errors import IntegrityError, RefusedError, UsageError
from pipeline.formats import provenance as slsa
from pipeline.formats import vsa
from pipeline.formats.assets import asset_set
from pipeline.formats.lanes import DEFAULT_LANES_DIR, find_lane
from pipeline.stages.rebuild import rebuild_verify
from pipeline.util.hashing import sha256_bytes, sha256_file

LANE = "rtx5090-container"


@pytest.fixture(scope="module")
def published(tmp_path_factory, sample_repo) -> Path:
    """The sample's 5090 set as a maintainer publishes it: the seven files and the statement beside them."""
    repo, _commit = sample_repo
    dist = tmp_path_factory.mktemp("published") / "dist"
    assert main(["build", "--lane", "5090", "--source", str(repo), "--dist", str(dist)]) == 0
    assert main(["package", "--lane", "5090", "--dist", str(dist)]) == 0
    folder = tmp_path_factory.mktemp("release") / "download"
    shutil.copytree(dist / LANE / "assets", folder)
    for statement in (dist / LANE / slsa.FOLDER).iterdir():
        shutil.copyfile(statement, folder / statement.name)
    return folder


def _names(folder: Path):
    return asset_set(find_lane("5090"))


def _tamper_source(folder: Path, member: str, needle: bytes) -> None:
    """Change one byte of one source file inside the set's source archive (same length, valid tar and gzip)."""
    path = folder / _names(folder).name_of("source")
    data = bytearray(gzip.decompress(path.read_bytes()))
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as archive:
        info = archive.getmember(member)
    offset = info.offset_data + bytes(data[info.offset_data:info.offset_data + info.size]).index(needle) + 1
    data[offset] ^= 0x20  # 'e' -> 'E': one byte, inside a string literal
    path.write_bytes(gzip.compress(bytes(data), mtime=0))


@pytest.mark.cuda
@pytest.mark.slow
def test_the_published_set_is_rebuilt_bit_for_bit_from_its_source_archive(published, tmp_path, capsys):
    work = tmp_path / "rebuild"
    code = main(["rebuild", "--verify", str(published), "--lane", "5090", "--work", str(work)])
    out = capsys.readouterr().out
    assert code == 0, out
    expected = _names(published)
    summary_path = work / (expected.package_root + vsa.SUFFIX)
    summary = json.loads(summary_path.read_bytes())
    assert summary["predicateType"] == "https://slsa.dev/verification_summary/v1"
    predicate = summary["predicate"]
    assert predicate["verificationResult"] == "PASSED"
    assert predicate["verifiedLevels"] == [vsa.PASSED_LEVEL]
    assert predicate["resourceUri"] == f"https://github.com/alphastorm/ninfer/releases/download/{expected.component_tag}/"
    statement = published / slsa.set_statement_name(expected.package_root)
    assert predicate["inputAttestations"] == [{"uri": statement.name, "digest": {"sha256": sha256_file(statement)}}]
    assert {s["name"]: s["digest"]["sha256"] for s in summary["subject"]} == {n: sha256_file(published / n) for n in expected.names()}
    files = predicate["rebuild"]["files"]
    assert [f["name"] for f in files] == expected.names() and all(f["result"] == "same" for f in files)
    assert all(f["rebuilt_sha256"] == f["published_sha256"] for f in files)
    members = predicate["rebuild"]["package_members"]
    binaries = [m["name"] for m in members if m["binary"]]
    assert binaries == [f"{expected.package_root}/bin/ninfer", f"{expected.package_root}/bin/ninfer-serve"]
    assert members and all(m["result"] == "same" for m in members)
    assert {c["check"] for c in predicate["rebuild"]["checks"]} == {"published set", "provenance subjects", "source archive"}
    # The rebuild really ran from the archive in the work folder, not from the published bytes.
    rebuilt = work / "dist" / LANE / "assets"
    assert sorted(p.name for p in rebuilt.iterdir()) == expected.names()
    identity = json.loads((work / "dist" / LANE / "build" / "build-identity.json").read_text())
    assert identity["source_tar_sha256"] == sha256_bytes(gzip.decompress((published / expected.name_of("source")).read_bytes()))
    # Its own statement (same local builder) is the published one, byte for byte.
    assert (work / "dist" / LANE / slsa.FOLDER / statement.name).read_bytes() == statement.read_bytes()
    assert "PASSED: verification summary" in out and "FAIL" not in out


@pytest.mark.cuda
@pytest.mark.slow
def test_the_sets_build_host_dependencies_are_in_its_identity_cyclonedx_and_provenance(published):
    expected = _names(published)
    cdx = json.loads((published / expected.name_of("cdx")).read_bytes())
    [compiler] = [c for c in cdx["components"] if c["name"] == "c++"]
    properties = {p["name"]: p["value"] for p in compiler["properties"]}
    assert properties["omp-ninfer:role"] == "build-host-dependency" and compiler["scope"] == "excluded"
    with tarfile.open(published / expected.name_of("package")) as archive:
        identity = json.loads(archive.extractfile(f"{expected.package_root}/build-identity.json").read())
    [recorded] = identity["host_dependencies"]
    assert compiler["version"] == recorded["version"] and properties["omp-ninfer:debian-package"] == recorded["debian_package"]
    assert identity["host_environment"]["declared_by"] == "source:host-dependencies.toml"
    statement = slsa.read_statement((published / slsa.set_statement_name(expected.package_root)).read_bytes(), origin="s")
    host = statement.dependency("build-host:tool:c++")
    distribution = identity["host_environment"]["os_release"]["ID"]  # debian here, ubuntu on an Ubuntu host
    assert host["uri"] == f"pkg:deb/{distribution}/{recorded['debian_package']}@{recorded['debian_version']}"
    assert host["annotations"]["version"] == recorded["version"]


@pytest.mark.cuda
@pytest.mark.slow
def test_a_one_byte_change_in_the_source_archive_fails_naming_the_binaries(published, tmp_path):
    tampered = tmp_path / "tampered"
    shutil.copytree(published, tampered)
    _tamper_source(tampered, "src/cli.cpp", b'"error: ')
    outcome = rebuild_verify(str(tampered), lane_name="5090", work=tmp_path / "rebuild")
    assert not outcome.passed
    summary = json.loads(outcome.summary_path.read_bytes())
    assert summary["predicate"]["verificationResult"] == "FAILED" and summary["predicate"]["verifiedLevels"] == []
    root = _names(tampered).package_root
    assert f"{root}/bin/ninfer" in outcome.differing_members and f"{root}/bin/ninfer-serve" in outcome.differing_members
    assert _names(tampered).name_of("package") in outcome.differing
    failed = [(c.name, c.detail) for c in outcome.checks if not c.ok]
    source = [detail for name, detail in failed if name == "source archive"]
    assert any("the source archive is not the tar the provenance names" in d for d in source)
    assert any("do not hash to the commit's tree" in d for d in source)
    assert {"provenance subjects", "published set"} <= {name for name, _ in failed}
    reports = summary["predicate"]["rebuild"]["diffoscope"]
    if shutil.which("diffoscope"):
        package_report = next(r for r in reports if r["file"] == _names(tampered).name_of("package"))
        assert package_report["exit_code"] == 1 and Path(package_report["report"]).read_text().count("bin/ninfer")
    assert main(["rebuild", "--verify", str(tampered), "--lane", "5090", "--work", str(tmp_path / "again"), "--no-diffoscope"]) == 5


@pytest.mark.cuda
@pytest.mark.slow
def test_build_from_a_source_archive_refuses_one_that_is_not_the_provenances(published, tmp_path):
    tampered = tmp_path / "tampered"
    shutil.copytree(published, tampered)
    _tamper_source(tampered, "src/cli.cpp", b'"error: ')
    expected = _names(published)
    statement = published / slsa.set_statement_name(expected.package_root)
    code = main(["build", "--lane", "5090", "--source-archive", str(tampered / expected.name_of("source")), "--provenance", str(statement), "--dist", str(tmp_path / "dist")])
    assert code == 5
    assert not (tmp_path / "dist" / LANE / "build").exists()
    from pipeline.stage import Context
    from pipeline.stages.build import BuildStage, archive_source

    with pytest.raises(IntegrityError, match="not the tar the provenance names"):
        BuildStage(Context.open(tmp_path / "d2"), find_lane("5090"), source=archive_source(tampered / expected.name_of("source"), statement)).preflight()
    # The untouched archive is accepted, its identity taken from the provenance and checked.
    stage = BuildStage(Context.open(tmp_path / "d3"), find_lane("5090"), source=archive_source(published / expected.name_of("source"), statement))
    stage.preflight()
    assert stage.source is not None and not stage.source.problems
    recorded = slsa.read_statement(statement.read_bytes(), origin="s")
    assert stage.source.commit == recorded.external["source_commit"]
    assert stage.source.tree == recorded.dependency("source-tree")["digest"]["gitTree"]


@pytest.mark.cuda
@pytest.mark.slow
def test_the_rebuild_refuses_other_instructions_or_another_sets_provenance(published, tmp_path):
    lanes = tmp_path / "lanes"
    shutil.copytree(DEFAULT_LANES_DIR, lanes)
    lane_file = lanes / f"{LANE}.toml"
    lane_file.write_text(lane_file.read_text().replace("max_restart_seconds = 120.0", "max_restart_seconds = 121.0"))
    with pytest.raises(RefusedError, match=f"runtime/lanes/{LANE}.toml is not the one the provenance names") as info:
        rebuild_verify(str(published), lane_name="5090", lanes_dir=lanes, work=tmp_path / "w1")
    assert "check out the pipeline at the commit" in info.value.render()
    without = tmp_path / "no-statement"
    shutil.copytree(published, without)
    (without / slsa.set_statement_name(_names(published).package_root)).unlink()
    with pytest.raises(UsageError, match="provenance statement is not there"):
        rebuild_verify(str(without), lane_name="5090", work=tmp_path / "w2")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(UsageError, match="must be new or empty"):
        rebuild_verify(str(published), lane_name="5090", work=busy)


@pytest.mark.cuda
@pytest.mark.slow
def test_a_release_manifest_names_the_set_to_download_and_rebuild(published, tmp_path):
    """The manifest route: the lane row's SHA256SUMS is fetched against its pin, every listed file against it."""
    from test_audit import ReleaseServer

    expected = _names(published)
    server = ReleaseServer()
    try:
        prefix = f"/alphastorm/ninfer/releases/download/{expected.component_tag}/"
        for path in published.iterdir():
            server.files[prefix + path.name] = path.read_bytes()
        row = {
            "id": LANE,
            "release_tag": expected.component_tag,
            "repository": server.url("/alphastorm/ninfer"),
            "checksums_url": server.url(prefix + "SHA256SUMS"),
            "checksums_sha256": sha256_file(published / "SHA256SUMS"),
        }
        manifest = {"release": "v1.0.0", "components": {"ninfer": row, "ninfer_variants": []}}
        server.files["/manifest.json"] = json.dumps(manifest).encode()
        outcome = rebuild_verify(server.url("/manifest.json"), lane_name="5090", work=tmp_path / "rebuild")
        assert outcome.passed, [c.detail for c in outcome.checks if not c.ok]
        summary = json.loads(outcome.summary_path.read_bytes())
        assert summary["predicate"]["resourceUri"] == server.url("/manifest.json")
        assert sorted(p.name for p in (tmp_path / "rebuild" / "download" / "published").iterdir()) == expected.names()
        # A SHA256SUMS that is not the pinned one stops the download before anything is built.
        row["checksums_sha256"] = "0" * 64
        server.files["/manifest.json"] = json.dumps(manifest).encode()
        with pytest.raises(IntegrityError, match="do not match the pin"):
            rebuild_verify(server.url("/manifest.json"), lane_name="5090", work=tmp_path / "again")
    finally:
        server.close()
