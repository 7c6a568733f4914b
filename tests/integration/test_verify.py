"""verify: the release contract on the repository (issue 6).

The subject is a real sample release made by the pipeline (tests/kits/releasekit.py)
and the checked-in real trees manifests/v0.13.0 and manifests/v0.13.1.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from releasekit import LANE, RELEASE, sample_release
from repokit import ROOT, git

from pipeline.formats.release.contract import verify_release
from pipeline.formats.release.names import blocker_subject
from pipeline.util.jsonio import canonical_bytes


@pytest.fixture(scope="session")
def release(tmp_path_factory):
    return sample_release(tmp_path_factory)


@pytest.fixture
def ready(release, tmp_path):
    """A private clone of the sample product repository at its ready commit."""
    return release.clone(tmp_path / "product", "ready")


def run(root: Path, release, *args: str, **kwargs):
    return verify_release(root, kwargs.pop("name", RELEASE), lanes_dir=release.lanes_dir, **kwargs)


def errors(report) -> list[tuple[str, str | None, str | None]]:
    return [(p.check, p.file, p.field) for p in report.problems.items]


def edit_manifest(root: Path, change) -> None:
    path = root / "manifests" / RELEASE / "manifest.json"
    document = json.loads(path.read_text())
    change(document)
    path.write_bytes(canonical_bytes(document))


def cli(root: Path, release, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", "--root", str(root), "--lanes-dir", str(release.lanes_dir), *args],
        cwd=ROOT, capture_output=True, text=True,
    )


# -- the sample release -------------------------------------------------------------------------


def test_the_sample_release_made_by_the_pipeline_passes_require_ready_with_pins(release, ready):
    report = run(ready, release, require="ready", check_pins=True)
    assert report.valid, [p.message() for p in report.problems.items]
    assert report.status == "ready"
    # Signing happens in the release workflow after the ready commit: not an error, said plainly.
    assert {p.check for p in report.problems.warnings} == {"signatures"}
    result = cli(ready, release, "--release", RELEASE, "--require-ready", "--check-pins")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"verify {RELEASE} (ready)"
    assert all(line.startswith(("OK:   ", "warning: ")) for line in lines[1:-1])
    assert lines[-1].startswith(f"VALID: {RELEASE} is a valid ready release tree")


def test_json_output_and_exit_codes(release, ready):
    result = cli(ready, release, "--json")
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert set(document) == {"release", "status", "valid", "errors", "warnings"}
    assert (document["release"], document["status"], document["valid"], document["errors"]) == (RELEASE, "ready", True, [])
    assert result.stdout == json.dumps(document, indent=2, sort_keys=True) + "\n"
    usage = cli(ready, release, "--require-ready", "--require-installable")
    assert usage.returncode == 2 and "not allowed with" in usage.stderr
    traversal = cli(ready, release, "--release", "../../etc")
    assert traversal.returncode == 2 and "--release" in traversal.stderr
    edit_manifest(ready, lambda m: m["publication"].update(authorized=True))
    failed = cli(ready, release, "--json")
    assert failed.returncode == 1
    document = json.loads(failed.stdout)
    assert document["valid"] is False
    error = next(e for e in document["errors"] if e["field"] == "publication.authorized")
    assert set(error) == {"check", "file", "field", "found", "expected", "message"}
    assert error["found"] is True and error["file"] == f"manifests/{RELEASE}/manifest.json"


def test_verify_records_its_report_in_the_register_and_always_runs(release, ready):
    from pipeline.formats.release.contract import REPORT_TYPE
    from pipeline.register import Register
    from pipeline.util.hashing import sha256_bytes

    assert cli(ready, release, "--release", RELEASE, "--check-pins").returncode == 0
    register = Register(ready / "dist")  # without --dist: the repository's own dist/
    entry = register.one("verification-report", needed_by="t", produced_by="verify")
    assert (entry.path, entry.attrs) == (f"verify/{RELEASE}.json", {"release": RELEASE, "valid": True, "status": "ready"})
    document = json.loads(register.verified_path(entry).read_bytes())
    assert (document["artifact_type"], document["valid"], document["check_pins"], document["require"]) == (REPORT_TYPE, True, True, None)
    tree = ready / "manifests" / RELEASE
    assert document["tree"] == {p.relative_to(ready).as_posix(): sha256_bytes(p.read_bytes()) for p in sorted(tree.rglob("*")) if p.is_file()}
    first = register.stages[f"verify:{RELEASE}"]
    # An observation, never "up to date": a second run with the same inputs runs, and a tree edited
    # meanwhile is reported invalid in the register too.
    edit_manifest(ready, lambda m: m["publication"].update(authorized=True))
    dist = ready.parent / "elsewhere"
    failed = cli(ready, release, "--release", RELEASE, "--check-pins", "--dist", str(dist))
    assert failed.returncode == 1
    again = Register(dist).one("verification-report", needed_by="t", produced_by="verify")
    assert again.attrs["valid"] is False and json.loads((dist / again.path).read_bytes())["errors"]
    assert cli(ready, release, "--release", RELEASE, "--check-pins").returncode == 1
    rerun = Register(ready / "dist")
    assert rerun.stages[f"verify:{RELEASE}"]["fingerprint"] == first["fingerprint"]
    assert rerun.one("verification-report", needed_by="t", produced_by="verify").attrs["valid"] is False


def test_a_release_name_is_vX_Y_Z_or_beta_N_and_nothing_else(release, ready):
    """docs/release-tree.md names a release 'vX.Y.Z or vX.Y.Z-beta.N'; one grammar, used by every command."""
    from pipeline.formats.release.names import RELEASE_RE, sort_release_key

    for good in ("v0.13.1", "v1.0.0", "v10.0.2-beta.1", "v0.0.0-beta.12"):
        assert RELEASE_RE.fullmatch(good), good
    for bad in ("v1.0.0-rc.1", "v1.0.0-beta.0", "v01.0.0", "v1.0", "1.0.0", "v1.0.0-beta", "v1.0.0+build.1", "v1.0.0-beta.1.2", "v1.0.0/x"):
        assert not RELEASE_RE.fullmatch(bad), bad
    assert sort_release_key("v1.0.0-beta.2") < sort_release_key("v1.0.0") < sort_release_key("v1.0.1-beta.1")
    for command in (["verify", "--root", str(ready)], ["compose", "--root", str(ready)], ["compose", "promote", "--to", "ready", "--root", str(ready)]):
        result = subprocess.run([sys.executable, "-m", "pipeline", *command, "--release", "v1.0.0-rc.1"], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 2 and "is not a product release name" in result.stderr, (command, result.stderr)
    assert not (ready / "dist").exists(), "a refused name writes nothing"


def test_git_missing_is_an_environment_problem(ready, monkeypatch, tmp_path):
    from pipeline.errors import EnvironmentProblem, ExitCode
    from pipeline.infra.git import GitObjects, GitUnavailable, git_show

    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    with pytest.raises(GitUnavailable) as caught:
        git_show(ready, "HEAD", "README.md")
    assert isinstance(caught.value, EnvironmentProblem) and caught.value.exit_code == ExitCode.ENVIRONMENT
    assert "git is not installed" in caught.value.render() and "install git" in caught.value.render()
    with pytest.raises(GitUnavailable), GitObjects(ready) as objects:
        objects.has_commit("0" * 40)


def test_the_default_release_is_the_newest_tree(release, ready):
    (ready / "manifests" / "v0.9.0").mkdir()
    report = verify_release(ready, None, lanes_dir=release.lanes_dir)
    assert report.release == RELEASE


def test_every_state_of_the_sample_release_verifies_as_itself(release, tmp_path):
    for state, status in (("draft-pending", "draft"), ("draft", "draft"), ("candidate", "candidate"), ("accepted", "candidate"), ("pinned", "candidate")):
        root = release.clone(tmp_path / state, state)
        report = run(root, release)
        assert report.valid and report.status == status, (state, [p.message() for p in report.problems.items])
        installable = run(root, release, require="installable")
        assert installable.valid == (status == "candidate"), (state, errors(installable))
        not_ready = run(root, release, require="ready")
        assert not not_ready.valid
        assert ("states", f"manifests/{RELEASE}/manifest.json", "status") in errors(not_ready)


# -- every single-byte change is caught ---------------------------------------------------------


def _positions(size: int, count: int, rng: random.Random) -> list[int]:
    picks = {0, size - 1, size // 2}
    while len(picks) < min(size, count):
        picks.add(rng.randrange(size))
    return sorted(picks)


def _flip_every_file(release, tmp_path: Path, per_file: int, seed: int) -> int:
    root = release.clone(tmp_path / "flip", "ready")
    tree = root / "manifests" / RELEASE
    files = sorted(p for p in tree.rglob("*") if p.is_file())
    assert len(files) == 11, files  # reviews.toml included: a changed ledger byte fails too
    rng = random.Random(seed)
    checked = 0
    for path in files:
        original = path.read_bytes()
        rel = path.relative_to(root).as_posix()
        for position in _positions(len(original), per_file, rng):
            flipped = bytearray(original)
            flipped[position] ^= rng.choice([0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF, rng.randrange(1, 256)])
            path.write_bytes(bytes(flipped))
            try:
                report = run(root, release, require="ready", check_pins=True)
            finally:
                path.write_bytes(original)
            assert not report.valid, f"a change of byte {position} of {rel} went unnoticed"
            named = [p for p in report.problems.items if p.file == rel or rel in p.message()]
            assert named, f"byte {position} of {rel}: errors do not name the file: {[p.message() for p in report.problems.items]}"
            checked += 1
    assert run(root, release, require="ready", check_pins=True).valid
    return checked


def test_a_single_byte_change_in_any_file_of_the_release_tree_is_caught(release, tmp_path):
    assert _flip_every_file(release, tmp_path, per_file=8, seed=20261105) >= 11 * 3


@pytest.mark.slow
def test_single_byte_changes_are_caught_at_many_positions(release, tmp_path):
    assert _flip_every_file(release, tmp_path, per_file=48, seed=7) > 300


# -- drift cases ----------------------------------------------------------------------------------


def test_a_hand_edited_hash_is_named_with_found_and_expected(release, ready):
    where = f"components.ninfer_variants[{LANE}].package_sha256"
    original = {}

    def change(m):
        row = m["components"]["ninfer_variants"][0]
        original["value"] = row["package_sha256"]
        row["package_sha256"] = "0" * 64

    edit_manifest(ready, change)
    report = run(ready, release)
    problem = next(p for p in report.problems.items if p.field == where)
    assert problem.file == f"manifests/{RELEASE}/manifest.json"
    assert problem.found == "0" * 64 and problem.expected == original["value"]
    assert "SHA256SUMS" in problem.message()


def test_a_sums_line_that_differs_from_the_manifest_row_is_named(release, ready):
    sums = ready / "manifests" / RELEASE / "qualification" / f"{LANE}.SHA256SUMS"
    lines = sums.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.endswith("Install-Release.ps1\n"))
    lines[index] = "f" * 64 + lines[index][64:]
    sums.write_text("".join(lines))
    report = run(ready, release)
    fields = errors(report)
    assert ("checksums", f"manifests/{RELEASE}/manifest.json", f"components.ninfer_variants[{LANE}].installer_sha256") in fields
    assert ("hashes", f"manifests/{RELEASE}/manifest.json", f"components.ninfer_variants[{LANE}].checksums_sha256") in fields


def test_the_checked_in_set_must_stay_closed(release, ready):
    sums = ready / "manifests" / RELEASE / "qualification" / f"{LANE}.SHA256SUMS"
    sums.write_text(sums.read_text() + "a" * 64 + "  zz-extra.dll\n")
    report = run(ready, release)
    assert any(p.check == "checksums" and p.field == "zz-extra.dll" for p in report.problems.items)
    stray = ready / "manifests" / RELEASE / "qualification" / "notes.txt"
    stray.write_text("left behind\n")
    report = run(ready, release)
    assert ("tree", f"manifests/{RELEASE}/qualification/notes.txt", None) in errors(report)


def test_a_receipt_for_other_bytes_is_named(release, ready):
    receipt = ready / "manifests" / RELEASE / "qualification" / f"{LANE}.json"
    document = json.loads(receipt.read_text())
    document["identity"]["package"]["sha256"] = "e" * 64
    receipt.write_bytes(canonical_bytes(document))
    report = run(ready, release)
    assert ("receipts", f"manifests/{RELEASE}/qualification/{LANE}.json", "identity.package.sha256") in errors(report)
    assert ("hashes", f"manifests/{RELEASE}/manifest.json", f"components.ninfer_variants[{LANE}].qualification.sha256") in errors(report)


def _restate(ready: Path, change) -> tuple[str, str]:
    """Rewrite the tree's copy of the set provenance and rebind its hash, as a forger who edits both would."""
    rel = f"manifests/{RELEASE}/qualification/{LANE}.provenance.intoto.json"
    path = ready / rel
    document = json.loads(path.read_text())
    change(document)
    path.write_bytes(canonical_bytes(document))
    from pipeline.util.hashing import sha256_bytes

    edit_manifest(ready, lambda m: m["components"]["ninfer_variants"][0]["provenance"].update(sha256=sha256_bytes(path.read_bytes())))
    return rel, f"components.ninfer_variants[{LANE}].provenance"


def test_the_provenance_copy_must_describe_exactly_the_bound_set(release, ready):
    rel, _where = _restate(ready, lambda d: d["subject"][0]["digest"].update(sha256="0" * 64))
    report = run(ready, release)
    named = [p for p in report.problems.items if p.check == "provenance" and p.file == rel]
    assert named and named[0].field.startswith("subject ") and named[0].found == "0" * 64, [p.message() for p in report.problems.items]
    rel, _where = _restate(ready, lambda d: d["subject"].pop())
    report = run(ready, release)
    assert ("provenance", rel, "subject") in errors(report)


def test_the_provenance_copy_must_name_the_rows_lane_cut_and_commit(release, ready):
    for key, value in (("lane", "rtx3090-windows-native"), ("component_tag", "v0.7.0-qwen38-4090-beta.99"), ("source_commit", "f" * 40)):
        clone = release.clone(ready.parent / f"p-{key}", "ready")
        rel, _where = _restate(clone, lambda d, key=key, value=value: d["predicate"]["buildDefinition"]["externalParameters"].update({key: value}))
        report = run(clone, release)
        assert ("provenance", rel, f"predicate.buildDefinition.externalParameters.{key}") in errors(report), (key, errors(report))


def test_the_provenance_copy_is_bound_by_hash_and_required(release, ready):
    rel = f"manifests/{RELEASE}/qualification/{LANE}.provenance.intoto.json"
    path = ready / rel
    original = path.read_bytes()
    document = json.loads(original)
    document["predicate"]["runDetails"]["builder"]["id"] = "https://example.invalid/forged-builder"
    path.write_bytes(canonical_bytes(document))  # subjects unchanged: only the bound hash catches it
    report = run(ready, release)
    assert ("hashes", f"manifests/{RELEASE}/manifest.json", f"components.ninfer_variants[{LANE}].provenance.sha256") in errors(report)
    path.unlink()
    report = run(ready, release)
    assert any(p.check == "provenance" and p.file == rel and "missing" in p.what for p in report.problems.items), errors(report)


def test_paths_must_stay_inside_the_release_tree(release, ready):
    edit_manifest(ready, lambda m: m["qualification"].update(summary="manifests/../README.md"))
    report = run(ready, release)
    assert ("paths", f"manifests/{RELEASE}/manifest.json", "qualification.summary") in errors(report)


def test_urls_must_be_immutable(release, ready):
    def change(m):
        row = m["components"]["ninfer_variants"][0]
        row["sbom_url"] = row["sbom_url"].replace(row["release_tag"], "latest")
        m["components"]["model"]["artifact_url"] = m["components"]["model"]["artifact_url"].replace(m["components"]["model"]["revision"], "main")
        m["qualification"]["public_url"] = m["qualification"]["public_url"].replace("/manifests/", "/refs/heads/main/manifests/")

    edit_manifest(ready, change)
    fields = errors(run(ready, release))
    assert ("urls", f"manifests/{RELEASE}/manifest.json", f"components.ninfer_variants[{LANE}].sbom_url") in fields
    assert ("model", f"manifests/{RELEASE}/manifest.json", "components.model.artifact_url") in fields
    assert ("urls", f"manifests/{RELEASE}/manifest.json", "qualification.public_url") in fields


def test_check_pins_fails_closed_on_a_missing_commit(release, ready, tmp_path):
    edit_manifest(ready, lambda m: m["compatibility"].update(public_url=m["compatibility"]["public_url"].replace(m["compatibility"]["public_url"].split("/")[5], "0123456789abcdef0123456789abcdef01234567")))
    report = run(ready, release, check_pins=True)
    problem = next(p for p in report.problems.items if p.check == "pins")
    assert problem.field == "compatibility.public_url" and "not in local git history" in problem.what
    # A shallow clone holds no earlier commit: every pin fails closed, none is skipped.
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{release.root}", str(shallow)], check=True, capture_output=True)
    git(shallow, "fetch", "-q", "--depth", "1", "origin", release.commits["ready"])
    git(shallow, "checkout", "-q", release.commits["ready"])
    report = run(shallow, release, require="ready", check_pins=True)
    pins = [p for p in report.problems.items if p.check == "pins"]
    assert len(pins) >= 3 and all("unshallow" in p.message() for p in pins)


def test_a_crlf_checkout_is_one_actionable_error(release, tmp_path):
    root = release.clone(tmp_path / "crlf", "ready")
    # What a Windows clone does without the repository's `* -text`: core.autocrlf rewrites LF to CRLF.
    git(root, "rm", "-q", ".gitattributes")
    git(root, "commit", "-q", "-m", "no attributes")
    git(root, "config", "core.autocrlf", "true")
    shutil.rmtree(root / "manifests" / RELEASE)
    git(root, "checkout", "--", f"manifests/{RELEASE}")
    manifest = (root / "manifests" / RELEASE / "manifest.json").read_bytes()
    assert b"\r\n" in manifest, "git did not rewrite the checkout; the test setup is wrong"
    report = run(root, release, require="ready", check_pins=True)
    assert len(report.problems.items) == 1
    problem = report.problems.items[0]
    assert problem.check == "line-endings" and problem.field == "core.autocrlf"
    message = problem.message()
    assert "git config core.autocrlf false" in message and "CRLF" in message


def test_private_markers_and_placeholders_are_refused(release, ready):
    from pipeline.formats.lanes import load_lanes
    from pipeline.stages.compose import rebind

    toml = ready / "manifests" / RELEASE / "release.toml"
    text = toml.read_text()
    toml.write_text(text.replace('limitations = ["Sample data', 'limitations = ["TODO: measured in /home/alice/runs", "Sample data'))
    rebind(ready, RELEASE, lanes=load_lanes(release.lanes_dir))  # text is not an install identity: not frozen
    problems = [p for p in run(ready, release).problems.items if p.check == "hygiene"]
    found = {p.found for p in problems}
    assert "TODO" in found and "/home/alice" in found
    assert {p.file for p in problems} >= {f"manifests/{RELEASE}/release.toml", f"manifests/{RELEASE}/NOTES.md", f"manifests/{RELEASE}/manifest.json"}


def test_acceptance_must_bind_this_candidate(release, ready):
    path = ready / "manifests" / RELEASE / "acceptance" / "external-installation.json"
    document = json.loads(path.read_text())
    document["subject"]["model_sha256"] = "1" * 64
    document["candidate_commit"] = release.commits["draft"]
    path.write_bytes(canonical_bytes(document))
    report = run(ready, release)
    fields = {(p.check, p.field) for p in report.problems.items if p.file == f"manifests/{RELEASE}/acceptance/external-installation.json"}
    assert ("acceptance", "subject.model_sha256") in fields
    assert ("acceptance", "candidate_commit") in fields


def test_sigstore_bundles_are_checked_through_pipeline_sign(release, ready):
    from repokit import SIGSTORE_VECTORS

    vector = SIGSTORE_VECTORS / "bundle_v3_github.whl.sigstore"
    bundle = ready / "manifests" / RELEASE / "manifest.json.sigstore.json"
    bundle.write_bytes(vector.read_bytes())  # a real bundle, but for another file and signer
    report = run(ready, release, require="ready")
    problem = next(p for p in report.problems.items if p.check == "signatures")
    assert problem.file == f"manifests/{RELEASE}/manifest.json.sigstore.json"
    # Checked offline against the identity the tree declares: the vector's signer is someone else.
    assert "trailofbits/rfc8785.py" in problem.message() and f"release.yml@refs/tags/{RELEASE}" in problem.message()
    # Outside --require-ready the bundle is an allowed file of the tree, not checked.
    assert run(ready, release).valid


# -- the real trees ----------------------------------------------------------------------------------


def test_the_checked_in_trees_verify_as_drafts():
    for name in ("v0.13.0", "v0.13.1"):
        report = verify_release(ROOT, name)
        assert report.valid, [p.message() for p in report.problems.items]
        assert report.status == "draft"


def test_v0_13_1_reports_exactly_its_blockers():
    manifest = json.loads((ROOT / "manifests" / "v0.13.1" / "manifest.json").read_text())
    blockers = manifest["publication"]["blockers"]
    report = verify_release(ROOT, "v0.13.1", require="ready")
    problems = report.problems.items
    assert problems[0].field == "status" and problems[0].found == "draft"
    reported = [p.what.removeprefix("blocker: ") for p in problems[1:]]
    assert reported == blockers, "verify --require-ready must report exactly the tree's blockers"
    assert all(p.field.startswith("publication.blockers[") for p in problems[1:])
    subjects = {blocker_subject(b) for b in blockers}
    # Every seed prefix stays a blocker, never a value.
    for subject in ("components.omp.upstream_commit", "components.ninfer.source_commit", "components.ninfer.server_binary_sha256",
                    "components.ninfer.binary_archive_sha256", "components.ninfer.configuration_sha256", "external-install", "pins"):
        assert subject in subjects
    installable = verify_release(ROOT, "v0.13.1", require="installable")
    assert [p.what.removeprefix("blocker (a candidate binds every install identity, published): ") for p in installable.problems.items[1:]] == [
        b for b in blockers if blocker_subject(b) not in ("external-install", "pins", "acceptance")
    ]


def test_a_mutable_image_tag_is_refused(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "manifests", root / "manifests")

    def change(m):
        m["components"]["ninfer"]["oci_reference"] = "ghcr.io/alphastorm/ninfer-runtime:v0.7.0-qwen38-5090-beta.2"

    path = root / "manifests" / "v0.13.1" / "manifest.json"
    document = json.loads(path.read_text())
    change(document)
    path.write_bytes(canonical_bytes(document))
    report = verify_release(root, "v0.13.1")
    problem = next(p for p in report.problems.items if p.check == "images")
    assert problem.field == "components.ninfer.oci_reference" and "digest" in problem.what


# -- links: the tree verify vouches for is the repository's own ----------------------------------


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>") for p in sorted(root.rglob("*"))}


def test_a_release_tree_that_is_a_link_to_a_folder_outside_the_repository_is_refused(release, ready, tmp_path):
    """Before: verify followed the link and reported VALID for bytes the repository does not hold."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tree = ready / "manifests" / RELEASE
    shutil.move(tree, elsewhere / RELEASE)
    tree.symlink_to(elsewhere / RELEASE, target_is_directory=True)
    before = _snapshot(elsewhere)
    report = run(ready, release)
    assert not report.valid
    assert errors(report) == [("tree", f"manifests/{RELEASE}", None)]
    message = report.problems.items[0].message()
    assert "the release tree is a symbolic link to a folder outside the repository" in message and str(elsewhere / RELEASE) in message
    result = cli(ready, release, "--release", RELEASE)
    assert result.returncode == 1 and "FAIL: the release tree is closed" in result.stderr
    assert _snapshot(elsewhere) == before


def test_a_release_tree_linked_to_another_tree_of_the_repository_is_refused(release, ready):
    other = ready / "manifests" / "v9.9.9"
    shutil.move(ready / "manifests" / RELEASE, other)
    (ready / "manifests" / RELEASE).symlink_to(other, target_is_directory=True)
    report = run(ready, release)
    assert errors(report) == [("tree", f"manifests/{RELEASE}", None)]
    assert "the release tree is a symbolic link (found" in report.problems.items[0].message()


def test_a_file_in_the_tree_that_links_outside_it_is_refused_before_anything_is_read(release, ready, tmp_path):
    receipt = ready / "manifests" / RELEASE / "qualification" / f"{LANE}.json"
    outside = tmp_path / "outside-receipt.json"
    outside.write_bytes(receipt.read_bytes())  # the same bytes: only the link is wrong
    receipt.unlink()
    receipt.symlink_to(outside)
    manifest = ready / "manifests" / RELEASE / "manifest.json"
    copied = tmp_path / "outside-manifest.json"
    copied.write_bytes(manifest.read_bytes())
    manifest.unlink()
    manifest.symlink_to(copied)
    report = run(ready, release)
    assert sorted(errors(report)) == [("tree", f"manifests/{RELEASE}/manifest.json", None), ("tree", f"manifests/{RELEASE}/qualification/{LANE}.json", None)]
    assert all("is a symbolic link that leaves the release tree" in p.message() for p in report.problems.items)
    assert report.status is None  # the manifest behind the link was never read


# Found by the manifest fuzzer (tests/fuzz, target 'manifest'): the readers compose and verify
# apply to the current, the predecessor's and the accepted candidate's manifest called `.get` on
# whatever a field held and used a lane id as a dict key, so a row of the wrong type (or an id
# that is a list) was an AttributeError or TypeError instead of a finding.
@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.__setitem__("components", True),
        lambda m: m["components"].__setitem__("ninfer", -1),
        lambda m: m["components"].__setitem__("ninfer_variants", 1.5),
        lambda m: m["components"]["ninfer_variants"].append(None),
        lambda m: m["components"]["ninfer_variants"][0].__setitem__("id", []),
        lambda m: m["components"]["omp"].__setitem__("platforms", [None, "x"]),
        lambda m: m["components"].__setitem__("omp", "x"),
    ],
)
def test_the_manifest_readers_of_compose_and_verify_take_any_shape(edit):
    from pipeline.formats.release.evidence import collect_pins, predecessor_row
    from pipeline.formats.release.manifest import acceptance_subject

    good = json.loads((ROOT / "manifests" / "v0.13.1" / "manifest.json").read_bytes())
    bad = json.loads(json.dumps(good))
    edit(bad)
    assert acceptance_subject(bad) != acceptance_subject(good)  # a malformed row never reads as the accepted subject
    assert isinstance(collect_pins(bad), dict)
    row = predecessor_row(bad, "rtx4090-windows-native")
    assert row is None or (isinstance(row, dict) and row["id"] == "rtx4090-windows-native")


# -- signing.evidence: derived, never hand-edited ------------------------------------------------


def test_the_evidence_promise_is_derived_and_its_removal_is_an_error(release, ready):
    manifest = json.loads((ready / "manifests" / RELEASE / "manifest.json").read_text())
    assert manifest["signing"]["evidence"] == {"bundles": "published", "statements": "published"}
    assert run(ready, release).valid
    # Removing the promise would turn audit's FAILs for missing statements and bundles into SKIPs.
    edit_manifest(ready, lambda m: m["signing"].pop("evidence"))
    report = run(ready, release)
    schema = next(p for p in report.problems.items if p.check == "schema")
    assert (schema.field, schema.found) == ("signing.evidence", "absent") and "does not carry the evidence promise" in schema.what
    assert errors(report) == [("schema", f"manifests/{RELEASE}/manifest.json", "signing.evidence")]


def test_a_tree_made_before_the_promise_cannot_gain_it_by_hand(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "manifests", root / "manifests")
    path = root / "manifests" / "v0.13.1" / "manifest.json"
    document = json.loads(path.read_text())
    assert "evidence" not in document["signing"]
    document["signing"]["evidence"] = {"bundles": "published", "statements": "published"}
    path.write_bytes(canonical_bytes(document))
    report = verify_release(root, "v0.13.1")
    schema = next(p for p in report.problems.items if p.check == "schema")
    assert schema.field == "signing.evidence" and "made before signing.evidence existed" in schema.what
