"""`rebuild --verify`: the embedded sample's published 5090 set rebuilt from its source archive, bit for bit.

The set is made once per module (build -> package of the sample committed in its
own repository, the real pinned nvcc); each rebuild then runs in a fresh folder
from nothing but the published files and this checkout's lane file and lock.
The sample is no cut's commit, so that set is a rehearsal of the 5090 lane's
current cut (its names); a second set is built as a real cut, which is then
superseded: the rebuild still makes it as that cut, not the current one.
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
from pipeline.errors import InputError, IntegrityError, RefusedError, UsageError
from pipeline.formats import provenance as slsa
from pipeline.formats import sbom, vsa
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
    # The sample repository is no cut's commit: a rehearsal of the lane's current cut, as the other build tests.
    assert main(["build", "--lane", "5090", "--source", str(repo), "--rehearsal", "--dist", str(dist)]) == 0
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
    assert {c["check"] for c in predicate["rebuild"]["checks"]} == {"published set", "provenance subjects", "source archive", "cut", "build host"}
    assert predicate["rebuild"]["host_drift"] == [] and "likely_cause" not in predicate["rebuild"]
    # The rebuild really ran from the archive in the work folder, not from the published bytes.
    rebuilt = work / "dist" / LANE / "assets"
    assert sorted(p.name for p in rebuilt.iterdir()) == expected.names()
    identity = json.loads((work / "dist" / LANE / "build" / "build-identity.json").read_text())
    assert identity["source_tar_sha256"] == sha256_bytes(gzip.decompress((published / expected.name_of("source")).read_bytes()))
    # Built as the set was: a rehearsal under the current cut's names, as its provenance and packaged identity say.
    recorded = slsa.read_statement(statement.read_bytes(), origin="s").document["predicate"]["buildDefinition"]["internalParameters"]["cut"]
    current = find_lane("5090").ledger().current("0.7.0")
    assert recorded == {"n": current.n, "tag": expected.component_tag, "commit": current.source_commit, "rehearsal": True}
    assert predicate["rebuild"]["cut"] == identity["cut"] == recorded
    with tarfile.open(published / expected.name_of("package")) as archive:
        assert json.loads(archive.extractfile(f"{expected.package_root}/build-identity.json").read())["cut"] == recorded
    assert "a rehearsal of " + expected.component_tag in next(c["detail"] for c in predicate["rebuild"]["checks"] if c["check"] == "cut")
    # Its own statement (same local builder) is the published one, byte for byte.
    assert (work / "dist" / LANE / slsa.FOLDER / statement.name).read_bytes() == statement.read_bytes()
    assert "PASSED: verification summary" in out and "FAIL" not in out


@pytest.mark.cuda
@pytest.mark.slow
def test_the_sets_build_host_dependencies_are_in_its_identity_both_sboms_and_provenance(published):
    import sbomkit
    from packageurl import PackageURL

    expected = _names(published)
    with tarfile.open(published / expected.name_of("package")) as archive:
        identity = json.loads(archive.extractfile(f"{expected.package_root}/build-identity.json").read())
    [recorded] = identity["host_dependencies"]
    assert identity["host_environment"]["declared_by"] == "source:host-dependencies.toml"
    distribution = identity["host_environment"]["os_release"]["ID"]  # debian here, ubuntu on an Ubuntu host
    supplier = f"{distribution.capitalize()} (package {recorded['debian_package']})"
    # CycloneDX: a build-only component (scope excluded), the version found, the owning Debian package as its purl.
    cdx = json.loads((published / expected.name_of("cdx")).read_bytes())
    [compiler] = [c for c in cdx["components"] if c["name"] == "c++"]
    assert compiler["scope"] == "excluded" and compiler["description"] == "build host dependency (compiled against, not shipped); origin debian"
    assert compiler["version"] == recorded["version"] and compiler["supplier"]["name"] == supplier
    purl = compiler["purl"]
    parsed = PackageURL.from_string(purl)  # percent-encoded as the purl spec says (g++ is g%2B%2B)
    assert (parsed.type, parsed.namespace, parsed.name, parsed.version) == ("deb", distribution, recorded["debian_package"], recorded["debian_version"])
    assert compiler["bom-ref"] == purl == parsed.to_string()
    # SPDX: the same package, a build dependency of the archive (not contained in it).
    spdx_path = published / expected.name_of("spdx")
    spdx = json.loads(spdx_path.read_bytes())
    [package] = [p for p in spdx["packages"] if p["name"] == "c++"]
    assert package["versionInfo"] == recorded["version"] and package["supplier"] == f"Organization: {supplier}"
    assert [r["referenceLocator"] for r in package["externalRefs"] if r["referenceType"] == "purl"] == [purl]
    relations = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"]) for r in spdx["relationships"]}
    root = sbom.SPDX_PACKAGE_ID
    assert {(root, "HAS_PREREQUISITE", package["SPDXID"]), (package["SPDXID"], "BUILD_DEPENDENCY_OF", root)} <= relations
    assert not [r for r in relations if r[2] == package["SPDXID"] and r[1] == "CONTAINS"]
    # The two documents agree component by component (the host dependency included), and both conform.
    assert sbomkit.compare_twins(spdx_path, published / expected.name_of("cdx")) == len(spdx["packages"])
    sbomkit.require_ntia(spdx_path)
    sbomkit.require_cdx_js(published / expected.name_of("cdx"))
    statement = slsa.read_statement((published / slsa.set_statement_name(expected.package_root)).read_bytes(), origin="s")
    host = statement.dependency("build-host:tool:c++")
    assert host["uri"] == purl  # the same purl in the provenance as in both SBOMs
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
    assert summary["predicate"]["verificationResult"] == "FAILED" and summary["predicate"]["verifiedLevels"] == ["FAILED"]
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
        # the report is named relative to the summary (no folder of this machine in what an auditor keeps)
        assert not Path(package_report["report"]).is_absolute()
        report = outcome.summary_path.parent / package_report["report"]
        assert package_report["exit_code"] == 1 and report.read_text().count("bin/ninfer")
    # Again with a statement recording another host compiler, built anyway: the FAILED summary names the drift as the likely cause.
    drifted, again = _statement_with_compiler(tampered, tmp_path, "99.1.0"), tmp_path / "again.vsa.intoto.json"
    assert main(["rebuild", "--verify", str(tampered), "--lane", "5090", "--work", str(tmp_path / "again"), "--no-diffoscope",
                 "--provenance", str(drifted), "--allow-host-drift", "--summary", str(again)]) == 5
    rebuild = json.loads(again.read_bytes())["predicate"]["rebuild"]
    assert [(d["dependency"], d["differs_in"]) for d in rebuild["host_drift"]] == [("c++ (tool)", "version")]
    assert rebuild["likely_cause"].startswith("the build host differs from the recorded one: c++ (tool) ") and "instead of 99.1.0" in rebuild["likely_cause"]


@pytest.mark.cuda
@pytest.mark.slow
def test_build_from_a_source_archive_refuses_one_that_is_not_the_provenances(published, tmp_path):
    tampered = tmp_path / "tampered"
    shutil.copytree(published, tampered)
    _tamper_source(tampered, "src/cli.cpp", b'"error: ')
    expected = _names(published)
    statement = published / slsa.set_statement_name(expected.package_root)
    code = main(["build", "--lane", "5090", "--source-archive", str(tampered / expected.name_of("source")), "--provenance", str(statement), "--rehearsal", "--dist", str(tmp_path / "dist")])
    assert code == 5
    assert not (tmp_path / "dist" / LANE / "build").exists()
    from pipeline.lanework.source import archive_source
    from pipeline.stage import Context
    from pipeline.stages.build import BuildStage

    # The archive's commit is the sample's, no cut's: a rehearsal, so only the archive can be refused.

    with pytest.raises(IntegrityError, match="not the tar the provenance names"):
        BuildStage(Context.open(tmp_path / "d2"), find_lane("5090"), source=archive_source(tampered / expected.name_of("source"), statement), rehearsal=True).preflight()
    # The untouched archive is accepted, its identity taken from the provenance and checked.
    stage = BuildStage(Context.open(tmp_path / "d3"), find_lane("5090"), source=archive_source(published / expected.name_of("source"), statement), rehearsal=True)
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


# -- the cut the set was built as ------------------------------------------------------


def _statement_with_cut(published: Path, into: Path, cut) -> Path:
    """A copy of the set's statement whose recorded cut is `cut` (the subjects still bind the set)."""
    source = published / slsa.set_statement_name(_names(published).package_root)
    document = json.loads(source.read_bytes())
    internal = document["predicate"]["buildDefinition"]["internalParameters"]
    if cut is None:
        del internal["cut"]
    else:
        internal["cut"] = cut
    path = into / source.name
    path.write_bytes(slsa.statement_bytes(document))
    return path


def _preflight(published: Path, work: Path, *, statement: Path | None = None, lanes: Path | None = None):
    from pipeline.stage import Context
    from pipeline.stages.rebuild import RebuildStage

    stage = RebuildStage(Context.open(work / "dist", lanes), find_lane("5090", lanes), published=published, resource_uri=None, statement_path=statement)
    stage.preflight()
    return stage


@pytest.mark.cuda
@pytest.mark.slow
def test_the_recorded_cut_is_checked_before_anything_is_built(published, tmp_path):
    """The preflight reads the cut from the provenance: malformed, another set's, or a cut build this ledger does not hold."""
    recorded = slsa.read_statement((published / slsa.set_statement_name(_names(published).package_root)).read_bytes(), origin="s")
    cut = recorded.document["predicate"]["buildDefinition"]["internalParameters"]["cut"]
    stage = _preflight(published, tmp_path / "a")
    assert stage.cut.to_json() == cut and stage.cut.rehearsal
    assert [c.ok for c in stage.checks if c.name == "cut"] == [True]
    with pytest.raises(InputError, match="records no cut binding") as info:
        _preflight(published, tmp_path / "b", statement=_statement_with_cut(published, tmp_path, None))
    assert info.value.field == "predicate.buildDefinition.internalParameters.cut"
    other = dict(cut, n=cut["n"] + 1, tag=find_lane("5090").tag(cut["n"] + 1))
    with pytest.raises(UsageError, match="the provenance's cut is not the set's"):
        _preflight(published, tmp_path / "c", statement=_statement_with_cut(published, tmp_path, other))
    with pytest.raises(InputError, match="is not lane rtx5090-container's tag"):
        _preflight(published, tmp_path / "d", statement=_statement_with_cut(published, tmp_path, dict(cut, tag="v9.9.9-beta.1")))
    source_commit = recorded.external["source_commit"]
    with pytest.raises(InputError, match="a cut build of another commit than its source"):
        _preflight(published, tmp_path / "e", statement=_statement_with_cut(published, tmp_path, dict(cut, rehearsal=False, commit="f" * 40)))
    # Claimed a cut build of its own commit, but the ledger's cut of that number names no such commit: the cut check fails.
    claimed = _preflight(published, tmp_path / "f", statement=_statement_with_cut(published, tmp_path, dict(cut, rehearsal=False, commit=source_commit)))
    [check] = [c for c in claimed.checks if c.name == "cut"]
    assert not check.ok and f"but the set was built as that cut from {source_commit}" in check.detail


@pytest.fixture(scope="module")
def cut_set(tmp_path_factory, sample_repo):
    """The sample's 5090 set built as a real cut (the next beta of its commit, in a copied ledger), then published and superseded."""
    from pipeline.formats.cut_ledger import Publication
    from pipeline.formats.lanes import REPO_ROOT
    from pipeline.stages.cut import cut_lane

    repo, commit = sample_repo
    root = tmp_path_factory.mktemp("cut-set")
    lanes = root / "lanes"
    shutil.copytree(DEFAULT_LANES_DIR, lanes)
    shutil.copytree(REPO_ROOT / "runtime" / "cuts", root / "cuts")  # beside lanes/, as runtime/cuts is
    cut_lane("5090", source=f"{repo}@{commit}", dist=root / "cut-a", lanes_dir=lanes, use_github=False)
    lane = find_lane("5090", lanes)
    cut = lane.ledger().current(lane.version)
    assert cut.source_commit == commit and cut.state == "cut"
    dist = root / "dist"
    assert main(["build", "--lane", "5090", "--source", str(repo), "--dist", str(dist), "--lanes-dir", str(lanes)]) == 0  # no rehearsal: the cut's commit
    assert main(["package", "--lane", "5090", "--dist", str(dist), "--lanes-dir", str(lanes)]) == 0
    folder = root / "download"
    shutil.copytree(dist / LANE / "assets", folder)
    for statement in (dist / LANE / slsa.FOLDER).iterdir():
        shutil.copyfile(statement, folder / statement.name)
    ledger = lane.ledger().with_state(lane.version, cut.n, state="published", publication=Publication("alphastorm/ninfer", 7, "a" * 64, "b" * 64))
    (root / "cuts" / f"{LANE}.json").write_bytes(ledger.to_bytes())
    cut_lane("5090", source=f"{repo}@{commit}", dist=root / "cut-b", lanes_dir=lanes, supersede=cut.n, reason="a fixture failure after publication", use_github=False)
    assert find_lane("5090", lanes).ledger().current(lane.version).n == cut.n + 1
    return folder, lanes, cut.n, commit


@pytest.mark.cuda
@pytest.mark.slow
def test_a_set_built_as_a_cut_is_rebuilt_as_that_cut_after_it_was_superseded(cut_set, tmp_path):
    folder, lanes, n, commit = cut_set
    lane = find_lane("5090", lanes)
    expected = asset_set(lane, n)
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(slsa.SUFFIX)) == expected.names()
    outcome = rebuild_verify(str(folder), lane_name="5090", lanes_dir=lanes, work=tmp_path / "rebuild")
    assert outcome.passed, [(c.name, c.detail) for c in outcome.checks if not c.ok] + outcome.differing
    summary = json.loads(outcome.summary_path.read_bytes())
    binding = {"n": n, "tag": lane.tag(n), "commit": commit, "rehearsal": False}
    assert summary["predicate"]["rebuild"]["cut"] == binding
    [check] = [c for c in outcome.checks if c.name == "cut"]
    assert check.ok and f"{lane.tag(n)} at {commit}, superseded" in check.detail and f"superseded by beta.{n + 1}" in check.detail
    identity = json.loads((tmp_path / "rebuild" / "dist" / LANE / "build" / "build-identity.json").read_text())
    assert identity["cut"] == binding and identity["component_tag"] == lane.tag(n)  # not the current cut's names
    # A checkout whose ledger does not record that cut cannot confirm it: the cut check fails before anything is built.
    bare = tmp_path / "bare"
    shutil.copytree(lanes, bare / "lanes")
    shutil.copytree(DEFAULT_LANES_DIR.parent / "cuts", bare / "cuts")
    stage = _preflight(folder, tmp_path / "w2", lanes=bare / "lanes")
    [check] = [c for c in stage.checks if c.name == "cut"]
    assert not check.ok and f"records no cut {lane.tag(n)}" in check.detail


# -- the manifest route downloads only the set the manifest binds (issue 18) ---------------------------


def _served_set(server, *, foreign: dict[str, bytes] | None = None):
    """Stand-in bytes for each file of the 5090 set, on the stand-in release, and a manifest row binding them."""
    expected = asset_set(find_lane("5090"))
    prefix = f"/alphastorm/ninfer/releases/download/{expected.component_tag}/"
    files = {name: f"stand-in {name}\n".encode() for name in expected.names() if name != "SHA256SUMS"}
    listed = {**files, **(foreign or {})}
    sums = "".join(f"{sha256_bytes(data)}  {name}\n" for name, data in sorted(listed.items())).encode()
    for name, data in {**listed, "SHA256SUMS": sums, slsa.set_statement_name(expected.package_root): b"{}"}.items():
        server.files[prefix + name] = data
    row = {
        "id": LANE,
        "release_tag": expected.component_tag,
        "repository": server.url("/alphastorm/ninfer"),
        "checksums_url": server.url(prefix + "SHA256SUMS"),
        "checksums_sha256": sha256_bytes(sums),
    }
    return expected, prefix, files, row


def _download(server, row, tmp_path: Path, name: str = "w"):
    from pipeline.stages.rebuild import _download_set

    server.files["/manifest.json"] = json.dumps({"release": "v1.0.0", "components": {"ninfer": row, "ninfer_variants": []}}).encode()
    (tmp_path / name).mkdir()
    return _download_set(server.url("/manifest.json"), find_lane("5090"), tmp_path / name)


def test_a_manifest_set_downloads_exactly_the_lanes_files_each_pinned(tmp_path):
    from test_audit import ReleaseServer

    server = ReleaseServer()
    try:
        expected, prefix, files, row = _served_set(server)
        package = expected.name_of("package")
        row["binary_archive_sha256"], row["binary_archive_url"], row["binary_archive_bytes"] = sha256_bytes(files[package]), server.url(prefix + package), len(files[package])
        folder = _download(server, row, tmp_path)
        assert sorted(p.name for p in folder.iterdir()) == expected.names()
        requested = {path for path, _range in server.log}
        assert requested == {"/manifest.json", *(prefix + n for n in expected.names()), prefix + slsa.set_statement_name(expected.package_root)}
        # A pinned size is the bound: a longer package at that URL is refused.
        server.files[prefix + package] = files[package] + b"x"
        with pytest.raises(IntegrityError):
            _download(server, row, tmp_path, "longer")
    finally:
        server.close()


def test_a_name_the_set_does_not_have_is_refused_before_anything_is_downloaded(tmp_path):
    """Four foreign names in the set's SHA256SUMS (each could be 2 GiB): refused naming them, none fetched, nothing in --work."""
    from test_audit import ReleaseServer

    server = ReleaseServer()
    try:
        foreign = {f"extra-{i}.bin": bytes(64 * 1024) for i in range(4)}
        expected, prefix, _files, row = _served_set(server, foreign=foreign)
        with pytest.raises(IntegrityError, match="does not list exactly the lane's set") as info:
            _download(server, row, tmp_path)
        assert all(name in info.value.render() for name in foreign)
        requested = {path for path, _range in server.log}
        assert requested == {"/manifest.json", prefix + "SHA256SUMS"}
        assert sorted(p.name for p in (tmp_path / "w" / "published").iterdir()) == ["SHA256SUMS"]
    finally:
        server.close()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("source_archive_sha256", "0" * 64, "binds other bytes for"),
    ("source_archive_url", "https://elsewhere.example/x.tar.gz", "at another URL"),
    ("binary_archive_bytes", "12", "impossible size"),
])
def test_a_row_that_binds_other_bytes_than_the_sums_is_refused_before_the_download(tmp_path, field, value, message):
    from test_audit import ReleaseServer

    server = ReleaseServer()
    try:
        _expected, prefix, _files, row = _served_set(server)
        row[field] = value
        with pytest.raises(IntegrityError, match=message) as info:
            _download(server, row, tmp_path)
        assert info.value.field == f"components.ninfer.{field}"
        assert {path for path, _range in server.log} == {"/manifest.json", prefix + "SHA256SUMS"}
    finally:
        server.close()


# -- the summary of a set packaged from prebuilt binaries (no CUDA needed) ----------------------

def _published_native_set(tmp_path_factory, tmp_path: Path):
    """(workspace, folder): the 4090 set made from mingw binaries as it is published, its statement beside it."""
    from winfixtures import packaged_native_set

    workspace, dist = packaged_native_set(tmp_path_factory)
    folder = tmp_path / "download"
    shutil.copytree(dist / workspace.lane.id / "assets", folder)
    for statement in (dist / workspace.lane.id / slsa.FOLDER).iterdir():
        shutil.copyfile(statement, folder / statement.name)
    return workspace, folder


@pytest.mark.slow
def test_a_failed_rebuild_states_the_failed_level_and_the_summary_names_no_local_folder(tmp_path_factory, tmp_path):
    """The 4090 set made from mingw binaries, rebuilt from a copy of those binaries with one byte of a bundled
    DLL changed: FAILED with SLSA's VSA level for it, and no folder of this machine in the summary."""
    workspace, folder = _published_native_set(tmp_path_factory, tmp_path)
    lane = workspace.lane
    changed = tmp_path / "changed-prebuilt"
    shutil.copytree(workspace.prebuilt, changed)
    dll = changed / "libcurl.dll"
    data = bytearray(dll.read_bytes())
    data[-1] ^= 0x01  # the last byte of the last section's padding: still a valid PE, other bytes
    dll.write_bytes(bytes(data))
    outcome = rebuild_verify(str(folder), lane_name=lane.id, lanes_dir=workspace.lanes_dir, work=tmp_path / "work", prebuilt=changed, use_diffoscope=False)
    raw = outcome.summary_path.read_bytes()
    for local in (str(tmp_path), str(workspace.root), str(Path.home())):
        assert local.encode() not in raw, f"the summary names the local folder {local}"
    predicate = json.loads(raw)["predicate"]
    assert (predicate["verificationResult"], predicate["verifiedLevels"]) == ("FAILED", [vsa.FAILED_LEVEL]) == ("FAILED", ["FAILED"])
    assert any(m["name"].endswith("/bin/libcurl.dll") and m["result"] == "differs" for m in predicate["rebuild"]["package_members"])
    # The published folder lies outside the work folder: left out, as the work folder itself.
    assert "published_from" not in predicate["rebuild"] and "work_folder" not in predicate["rebuild"]
    binaries = next(c for c in predicate["rebuild"]["checks"] if c["check"] == "binaries")
    assert "--prebuilt folder" in binaries["detail"]


def test_the_verification_summary_states_the_level_of_either_result():
    levels = {passed: json.loads(vsa.summary(subjects={"a": "0" * 64}, resource_uri="https://x/", provenance_name="p", provenance_sha256="1" * 64,
                                             passed=passed, rebuild={}, time_verified="2026-01-01T00:00:00Z"))["predicate"]["verifiedLevels"] for passed in (True, False)}
    assert levels == {True: ["OMP_NINFER_BIT_FOR_BIT_REBUILD"], False: ["FAILED"]}


@pytest.mark.slow
def test_a_lane_file_other_than_the_provenances_is_refused_before_anything_is_built(tmp_path_factory, tmp_path, capsys):
    """One comment line added to the 4090 lane file: another SHA-256 than the provenance names, refused in preflight
    (exit 4, nothing built), naming both digests and --lanes-dir; `--help` documents --lanes-dir."""
    from winfixtures import copy_lanes

    workspace, folder = _published_native_set(tmp_path_factory, tmp_path)
    lane = workspace.lane
    lanes = copy_lanes(workspace, tmp_path / "other")
    changed = lanes / f"{lane.id}.toml"
    changed.write_text(changed.read_text() + "# a comment the set was not built with\n")
    work = tmp_path / "work"
    with pytest.raises(RefusedError) as caught:
        rebuild_verify(str(folder), lane_name=lane.id, lanes_dir=lanes, work=work, prebuilt=workspace.prebuilt)
    assert (caught.value.found, caught.value.expected) == (sha256_file(changed), lane.file_sha256)
    assert "--lanes-dir DIR" in caught.value.fix and lane.file_sha256 in caught.value.fix
    assert not (work / "dist" / lane.id / "assets").exists()
    for command in ("build", "package", "rebuild"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--lanes-dir DIR" in capsys.readouterr().out, f"{command} --help does not document --lanes-dir"


# -- this host against the recorded build host ---------------------------------------------


def _statement_with_compiler(published: Path, into: Path, version: str) -> Path:
    """A copy of the set's statement recording another host C++ compiler version (the subjects still bind the set)."""
    source = published / slsa.set_statement_name(_names(published).package_root)
    document = json.loads(source.read_bytes())
    [compiler] = [d for d in document["predicate"]["buildDefinition"]["resolvedDependencies"] if d["name"] == "build-host:tool:c++"]
    compiler["annotations"]["version"] = version
    path = into / source.name
    path.write_bytes(slsa.statement_bytes(document))
    return path


@pytest.mark.cuda
@pytest.mark.slow
def test_a_statement_recording_another_compiler_is_refused_in_preflight_naming_the_difference(published, tmp_path, capsys):
    import time

    from pipeline.errors import EnvironmentProblem
    from pipeline.stage import Context
    from pipeline.stages.rebuild import RebuildStage

    same = _preflight(published, tmp_path / "same")  # the host the set was built on: nothing differs
    [check] = [c for c in same.checks if c.name == "build host"]
    assert check.ok and same.host_drift == []
    statement = _statement_with_compiler(published, tmp_path, "99.1.0")
    started = time.monotonic()
    code = main(["rebuild", "--verify", str(published), "--lane", "5090", "--provenance", str(statement), "--work", str(tmp_path / "w"), "--no-diffoscope"])
    err = capsys.readouterr().err
    assert code == 3 and time.monotonic() - started < 30
    assert "differs from the one the set was built on in 1 build-host dependency" in err
    assert "c++ (tool): recorded 99.1.0 (Debian package" in err and "apt-get install" in err and "--allow-host-drift" in err
    assert not (tmp_path / "w" / "build").exists()  # nothing was compiled
    # --allow-host-drift: the preflight lets it build and the stage records the drift for the summary.
    stage = RebuildStage(Context.open(tmp_path / "d" / "dist"), find_lane("5090"), published=published, resource_uri=None, statement_path=statement, allow_host_drift=True)
    stage.preflight()
    [drift] = stage.host_drift
    assert drift["dependency"] == "c++ (tool)" and drift["recorded"].startswith("99.1.0") and drift["differs_in"] == "version"
    with pytest.raises(EnvironmentProblem):
        RebuildStage(Context.open(tmp_path / "e" / "dist"), find_lane("5090"), published=published, resource_uri=None, statement_path=statement).preflight()
