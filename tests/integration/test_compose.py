"""compose: the release tree from release.toml and lane evidence; drift refused; states; stage and rebind."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from releasekit import LANE, RELEASE, acceptance_record, commit, release_toml, review_ledger, sample_release
from repokit import ROOT, git

from pipeline.errors import InputError, IntegrityError, PipelineError, RefusedError, UsageError
from pipeline.formats.lanes import load_lanes
from pipeline.formats.release.contract import verify_release
from pipeline.formats.release.names import release_dir
from pipeline.formats.release.spec import dump_toml, load_release_toml
from pipeline.stages.compose import accept_release, compose_release, promote_release, rebind, stage_release
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import canonical_bytes


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The session's sample release with a dist of this module's own: these tests compose into the register,
    and the other modules sharing the sample (the chain, status, audit) must see the register as it was made."""
    sample = sample_release(tmp_path_factory)
    dist = tmp_path_factory.mktemp("compose-dist") / "dist"
    shutil.copytree(sample.dist, dist, symlinks=True)
    return dataclasses.replace(sample, dist=dist)


def manifest_of(root: Path, name: str = RELEASE) -> dict:
    return json.loads((root / "manifests" / name / "manifest.json").read_text())


def tree_bytes(root: Path, name: str = RELEASE) -> dict[str, bytes]:
    tree = root / "manifests" / name
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


# -- the sample release, state by state --------------------------------------------------------


def test_the_tree_binds_the_lane_evidence_byte_for_byte(release, tmp_path):
    root = release.clone(tmp_path / "p", "ready")
    tree = root / "manifests" / RELEASE
    assert sorted(tree_bytes(root)) == sorted([
        "release.toml", "manifest.json", "qualification.json", "compatibility.json", "COMPATIBILITY.md", "NOTES.md",
        f"qualification/{LANE}.json", f"qualification/{LANE}.SHA256SUMS", "acceptance/external-installation.json",
        f"qualification/{LANE}.provenance.intoto.json", "reviews.toml",
    ])
    assets = release.dist / LANE / "assets"
    # The set's provenance, byte for byte as the package stage wrote it beside the set, bound by hash and pinned.
    statement = next((release.dist / LANE / "attestations").glob("*.provenance.intoto.json")).read_bytes()
    copy = tree / "qualification" / f"{LANE}.provenance.intoto.json"
    assert copy.read_bytes() == statement
    assert (tree / "qualification" / f"{LANE}.SHA256SUMS").read_bytes() == (assets / "SHA256SUMS").read_bytes()
    assert (tree / "qualification" / f"{LANE}.json").read_bytes() == (release.dist / LANE / "qualification" / f"{LANE}.json").read_bytes()
    manifest = manifest_of(root)
    row = manifest["components"]["ninfer_variants"][0]
    # Every asset URL and hash comes from the set's SHA256SUMS: none is typed.
    sums = dict(reversed(line.split("  ")) for line in (assets / "SHA256SUMS").read_text().splitlines())
    bound = {row[key].rsplit("/", 1)[1]: row[key.replace("_url", "_sha256")] for key in row if key.endswith("_url") and key != "checksums_url"}
    assert bound == sums and len(bound) == 10
    for name, digest in sums.items():
        assert sha256_bytes((assets / name).read_bytes()) == digest
        assert row[next(k for k in row if k.endswith("_url") and row[k] and row[k].endswith("/" + name))].startswith(
            f"https://github.com/alphastorm/ninfer/releases/download/{row['release_tag']}/")
    assert row["package_bytes"] == (assets / row["package_name"]).stat().st_size
    assert row["provenance"]["path"] == f"manifests/{RELEASE}/qualification/{LANE}.provenance.intoto.json"
    assert row["provenance"]["sha256"] == sha256_bytes(statement)
    assert row["provenance"]["public_url"].startswith("https://raw.githubusercontent.com/alphastorm/omp-ninfer/")
    assert {s["name"]: s["digest"]["sha256"] for s in json.loads(statement)["subject"]} == {**sums, "SHA256SUMS": sha256_bytes((assets / "SHA256SUMS").read_bytes())}
    receipt = json.loads((tree / "qualification" / f"{LANE}.json").read_text())
    assert receipt["status"] == "passed" and receipt["imported"]["source_sha256"] == sha256_bytes(release.owner_receipt.read_bytes())
    assert row["server_binary_sha256"] == receipt["identity"]["server_binary_sha256"]
    assert row["configuration_sha256"] == receipt["identity"]["configuration_sha256"]
    assert manifest["components"]["model"]["artifact_url"] == (
        "https://huggingface.co/neroued/Qwen3.8-27B-NInfer/resolve/1cbd84e7221e51186bd7f093a149912d2489625b/qwen3_8_27b.ninfer")
    assert manifest["publication"] == {"authorized": False, "blockers": [], "targets": [f"https://github.com/alphastorm/omp-ninfer/releases/tag/{RELEASE}"]}
    assert manifest["signing"]["certificate_identity"] == f"https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/{RELEASE}"
    assert manifest["signing"]["certificate_oidc_issuer"] == "https://token.actions.githubusercontent.com"
    assert manifest["qualification"]["deferred_scope"].keys() == {"rtx3090-windows-native", "rtx5090-container"}
    assert (tree / "COMPATIBILITY.md").read_text().splitlines()[2].endswith("generated, do not edit.")
    assert (tree / "NOTES.md").read_text().startswith(f"# OMP NInfer {RELEASE} — sample release made by the pipeline\n")


def test_states_follow_the_evidence(release, tmp_path):
    pending = manifest_of(release.clone(tmp_path / "a", "draft-pending"))
    row = pending["components"]["ninfer_variants"][0]
    assert (pending["status"], row["status"], row["installable"], row["qualification"]["status"]) == ("draft", "preview", False, "hardware-pending")
    assert pending["qualification"]["runtime_release_eligible"] is False
    draft = manifest_of(release.clone(tmp_path / "b", "draft"))
    assert draft["components"]["ninfer_variants"][0]["qualification"]["status"] == "passed"
    assert [b.split(":")[0] for b in draft["publication"]["blockers"]] == ["external-install", "reviews", "pins"]
    assert draft["reviews"] is None  # required from v0.13.2 on, not bound yet
    candidate = manifest_of(release.clone(tmp_path / "c", "candidate"))
    assert candidate["status"] == "candidate" and candidate["qualification"]["external_installation_passed"] is False
    accepted = manifest_of(release.clone(tmp_path / "d", "accepted"))
    assert accepted["status"] == "candidate" and accepted["qualification"]["acceptance"]["candidate_commit"] == release.commits["candidate"]
    assert [b.split(":")[0] for b in accepted["publication"]["blockers"]] == ["reviews", "pins"]
    # The councils' closed reviews are bound by the first rebind after the ledger was committed.
    pinned_once = release.clone(tmp_path / "r", "pin-1")
    ledger = pinned_once / "manifests" / RELEASE / "reviews.toml"
    assert manifest_of(pinned_once)["reviews"]["sha256"] == sha256_bytes(ledger.read_bytes())
    assert "reviews" not in [b.split(":")[0] for b in manifest_of(pinned_once)["publication"]["blockers"]]
    ready = manifest_of(release.clone(tmp_path / "e", "ready"))
    urls = [ready["qualification"]["public_url"], ready["compatibility"]["public_url"], ready["qualification"]["acceptance"]["public_url"],
            ready["components"]["ninfer_variants"][0]["qualification"]["public_url"], ready["reviews"]["public_url"]]
    assert all(url.startswith("https://raw.githubusercontent.com/alphastorm/omp-ninfer/") for url in urls)
    # The pin dance: evidence is pinned at the first pin commit, the records that embed its URLs at the next.
    first, second = release.commits["reviewed"], release.commits["pin-1"]
    assert f"/{first}/" in urls[2] and f"/{first}/" in urls[3] and urls[4].endswith(f"/{first}/manifests/{RELEASE}/reviews.toml")
    assert f"/{second}/" in urls[0] and f"/{second}/" in urls[1]


def test_compose_keeps_a_committed_statement_that_differs_only_in_who_ran_the_build(release, tmp_path):
    """The release workflow re-composes the committed tree from its own register and diffs it: a statement
    made in CI names another builder and run, and that alone must not rewrite the committed copy."""
    root = release.clone(tmp_path / "p", "draft")
    copy = root / "manifests" / RELEASE / "qualification" / f"{LANE}.provenance.intoto.json"
    registered = copy.read_bytes()
    document = json.loads(registered)
    document["predicate"]["runDetails"]["builder"]["id"] = f"https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/{RELEASE}"
    document["predicate"]["runDetails"]["metadata"] = {"invocationId": "https://github.com/alphastorm/omp-ninfer/actions/runs/42/attempts/1"}
    copy.write_bytes(canonical_bytes(document))
    rebind(root, RELEASE, lanes=load_lanes(release.lanes_dir))
    committed = copy.read_bytes()
    assert verify_release(root, RELEASE, lanes_dir=release.lanes_dir).valid
    outcome = compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert copy.read_bytes() == committed and outcome.written == []
    # What was built is bound: a copy that states other dependencies is replaced by the register's statement.
    document["predicate"]["buildDefinition"]["resolvedDependencies"][0]["uri"] = "git+https://example.invalid/other.git@" + "0" * 40
    copy.write_bytes(canonical_bytes(document))
    compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert copy.read_bytes() == registered
    assert verify_release(root, RELEASE, lanes_dir=release.lanes_dir).valid


def test_compose_and_rebind_are_idempotent(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    before = tree_bytes(root)
    outcome = compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert outcome.written == [] and tree_bytes(root) == before
    assert rebind(root, RELEASE, lanes=load_lanes(release.lanes_dir)).written == []


def test_cli_compose_runs_from_nox_arguments(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    (root / "manifests" / RELEASE / "NOTES.md").unlink()
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "compose", "--release", RELEASE, "--dist", str(release.dist), "--root", str(root), "--lanes-dir", str(release.lanes_dir)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["written"] == [f"manifests/{RELEASE}/NOTES.md"]
    assert "is draft with 3 blocker(s)" in result.stderr


# -- drift is refused, naming the file and field --------------------------------------------------


def _reregister(dist: Path, kind: str, lane: str, change) -> Path:
    """Change a registered file the way a stale stage run would (the register stays consistent)."""
    from pipeline.register import Register

    register = Register(dist)
    entry = register.one(kind, lane=lane, needed_by="test", produced_by="test")
    path = register.path_of(entry)
    document = json.loads(path.read_text())
    change(document)
    path.write_bytes(canonical_bytes(document))
    key = next(k for k, v in register.stages.items() if entry.name in v.get("outputs", []))
    outputs = [register.make(a.kind, register.path_of(a), stage=a.stage, lane=a.lane, name=a.name, **a.attrs) if a.name == entry.name else a
               for a in register.outputs_of(key)]
    register.record_stage(key, register.stages[key]["fingerprint"], outputs)
    return path


def _duplicate_status(data: bytes) -> bytes:
    """The receipt with "status": "failed" given first and its real "passed" after (last-wins JSON reads passed)."""
    text = data.decode()
    assert text.count('\n  "status": "passed",\n') == 1
    return text.replace('\n  "status": "passed",\n', '\n  "status": "failed",\n  "status": "passed",\n').encode()


def test_a_receipt_with_a_key_twice_is_refused_not_read_last_wins(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    path = _reregister(dist, "lane-receipt", LANE, lambda d: None)
    path.write_bytes(_duplicate_status(path.read_bytes()))
    _reregister_bytes(dist, "lane-receipt", LANE)  # the register agrees with the edited bytes: only the parser can catch it
    assert json.loads(path.read_bytes())["status"] == "passed"  # what a last-wins parser sees
    before = tree_bytes(root)
    with pytest.raises(InputError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert caught.value.file == str(path) and "holds the key 'status' twice in one object" in caught.value.what
    assert tree_bytes(root) == before


def test_rebind_refuses_a_tree_receipt_with_a_key_twice(release, tmp_path):
    root = release.clone(tmp_path / "p", "ready")
    receipt = root / "manifests" / RELEASE / "qualification" / f"{LANE}.json"
    receipt.write_bytes(_duplicate_status(receipt.read_bytes()))
    before = tree_bytes(root)
    with pytest.raises(PipelineError) as caught:
        rebind(root, RELEASE, lanes=load_lanes(release.lanes_dir))
    assert "holds the key 'status' twice in one object" in caught.value.render()
    assert tree_bytes(root) == before, "nothing is bound from a receipt that parsers read differently"


def test_verify_refuses_a_bound_receipt_with_a_key_twice(release, tmp_path):
    root = release.clone(tmp_path / "p", "ready")
    rel = f"manifests/{RELEASE}/qualification/{LANE}.json"
    receipt = root / rel
    receipt.write_bytes(_duplicate_status(receipt.read_bytes()))
    report = verify_release(root, RELEASE, lanes_dir=release.lanes_dir)
    assert not report.valid
    named = [p for p in report.problems.items if "holds the key 'status' twice in one object" in p.message()]
    assert named and all(p.file in (rel, str(receipt)) or rel in p.message() for p in named), [p.message() for p in report.problems.items]


def _reregister_bytes(dist: Path, kind: str, lane: str) -> None:
    from pipeline.register import Register

    register = Register(dist)
    entry = register.one(kind, lane=lane, needed_by="test", produced_by="test")
    key = next(k for k, v in register.stages.items() if entry.name in v.get("outputs", []))
    outputs = [register.make(a.kind, register.path_of(a), stage=a.stage, lane=a.lane, name=a.name, **a.attrs) if a.name == entry.name else a
               for a in register.outputs_of(key)]
    register.record_stage(key, register.stages[key]["fingerprint"], outputs)


def test_a_receipt_for_other_bytes_is_refused(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    path = _reregister(dist, "lane-receipt", LANE, lambda d: d["identity"]["package"].update(sha256="e" * 64))
    before = tree_bytes(root)
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert caught.value.file == str(path) and caught.value.field == "identity.package.sha256"
    assert caught.value.found == "e" * 64 and "other bytes" in caught.value.what
    assert tree_bytes(root) == before, "a refused compose must not write anything"


def test_a_receipt_with_another_model_or_source_is_refused(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    _reregister(dist, "lane-receipt", LANE, lambda d: d["identity"].update(model_artifact_sha256="1" * 64))
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert caught.value.field == "identity.model_artifact_sha256"
    _reregister(dist, "lane-receipt", LANE, lambda d: d["identity"]["build_identity"].update(patch_stack_sha="3" * 40))
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert caught.value.field in ("identity.model_artifact_sha256", "identity.build_identity.patch_stack_sha")


def test_a_changed_asset_in_the_register_is_refused(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    script = dist / LANE / "assets" / "Install-Release.ps1"
    script.write_bytes(script.read_bytes() + b"# tampered\n")
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert "Install-Release.ps1" in caught.value.render()


def test_rebind_refuses_a_sums_line_that_the_receipt_does_not_bind(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    sums = root / "manifests" / RELEASE / "qualification" / f"{LANE}.SHA256SUMS"
    lines = sums.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.endswith(".cdx.json\n"))
    lines[index] = "c" * 64 + lines[index][64:]
    sums.write_text("".join(lines))
    manifest_before = (root / "manifests" / RELEASE / "manifest.json").read_bytes()
    with pytest.raises(IntegrityError) as caught:
        rebind(root, RELEASE, lanes=load_lanes(release.lanes_dir))
    assert caught.value.file == f"manifests/{RELEASE}/qualification/{LANE}.json"
    assert caught.value.field == "identity.outer_checksums_sha256"
    assert (root / "manifests" / RELEASE / "manifest.json").read_bytes() == manifest_before, "nothing may be rebound to the edited line"
    # compose takes the set from the register again and the tree is whole.
    compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert verify_release(root, RELEASE, lanes_dir=release.lanes_dir).valid


def test_a_compose_refused_late_leaves_the_tree_as_it_was(release, tmp_path, monkeypatch):
    import pipeline.stages.compose as compose

    root = release.clone(tmp_path / "p", "draft-pending")  # its receipt is hardware-pending; the register's is passed
    before = tree_bytes(root)

    def refuse(*_args, **_kwargs):
        raise RefusedError("refused after the evidence was copied")

    monkeypatch.setattr(compose, "rebind", refuse)
    with pytest.raises(RefusedError):
        compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert tree_bytes(root) == before
    monkeypatch.undo()
    compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert tree_bytes(root) != before and verify_release(root, RELEASE, lanes_dir=release.lanes_dir).valid


def test_qualified_needs_a_passed_receipt(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft-pending")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    _reregister(dist, "lane-receipt", LANE, lambda d: d.update(status="hardware-pending"))
    (root / "manifests" / RELEASE / "release.toml").write_text(release_toml(release.client, status="qualified"))
    with pytest.raises(RefusedError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert caught.value.field == f"lanes.{LANE}.status" and "hardware-pending" in caught.value.what
    assert "preview" in caught.value.render()


def test_a_mutable_image_tag_or_a_seed_prefix_is_refused_in_release_toml(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "manifests", root / "manifests")
    toml = root / "manifests" / "v0.13.0" / "release.toml"
    text = toml.read_text()
    digest_ref = "ghcr.io/alphastorm/ninfer-runtime@sha256:5d10a998a42ba927dd8bbe54d928128e0d97ec7bd55d8dec2846d8681f79a4cd"
    toml.write_text(text.replace(digest_ref, "ghcr.io/alphastorm/ninfer-runtime:v0.7.0-qwen38-5090-beta.2"))
    with pytest.raises(InputError) as caught:
        compose_release(root, "v0.13.0")
    assert caught.value.field == "lanes.rtx5090-container.oci_reference" and "never a tag" in caught.value.render()
    toml.write_text(text.replace('deployment_profile = "qwen38-5090-v0.13.0"', 'deployment_profile = "qwen38-5090-v0.13.0"\nsource_commit = "6d4d0a05"'))
    with pytest.raises(InputError) as caught:
        compose_release(root, "v0.13.0")
    assert caught.value.field == "lanes.rtx5090-container.source_commit" and caught.value.found == "6d4d0a05"


def test_release_toml_is_strict(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "manifests", root / "manifests")
    toml = root / "manifests" / "v0.13.1" / "release.toml"
    text = toml.read_text()
    cases = [
        (text.replace('title = "', 'titel = "x"\ntitle = "'), "titel"),
        (text.replace('release_tag = "v0.7.0-qwen38-4090-beta.2"', 'release_tag = "v0.7.0-qwen38-3090-beta.2"'), "lanes.rtx4090-windows-native.release_tag"),
        (text.replace('[lanes.rtx5090-container]\nfrom = "predecessor"', '[lanes.rtx5090-container]\nfrom = "predecessor"\nrelease_tag = "v0.7.0-qwen38-5090-beta.2"'), "lanes.rtx5090-container.release_tag"),
        (text.replace('release = "v0.13.1"', 'release = "v0.13.2"'), "release"),
        (text.replace("[lanes.rtx4090-windows-native]", "[lanes.rtx4080-windows-native]"), "lanes.rtx4080-windows-native"),
    ]
    for changed, field in cases:
        toml.write_text(changed)
        with pytest.raises(InputError) as caught:
            load_release_toml(root, "v0.13.1", load_lanes())
        assert caught.value.field == field, changed
    toml.write_bytes(text.replace("\n", "\r\n").encode())
    with pytest.raises(InputError, match="core.autocrlf"):
        load_release_toml(root, "v0.13.1", load_lanes())


# -- promote, accept, freeze ----------------------------------------------------------------------


def test_promote_checks_the_target_state_and_moves_one_step(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    with pytest.raises(RefusedError) as caught:
        promote_release(root, RELEASE, "ready", lanes_dir=release.lanes_dir)
    assert caught.value.field == "status" and "one step at a time" in caught.value.render()
    # A client hash left out of release.toml is a null identity: candidate is refused, naming it.
    toml = root / "manifests" / RELEASE / "release.toml"
    platforms = dict(release.client["platforms"])
    name, size, _digest = platforms["linux-x64"]
    text = release_toml(release.client).replace(f'artifact_sha256 = "{_digest}"\n', "")
    toml.write_text(text)
    compose_release(root, RELEASE, dist=release.dist, lanes_dir=release.lanes_dir)
    assert verify_release(root, RELEASE, lanes_dir=release.lanes_dir).valid
    with pytest.raises(RefusedError) as caught:
        promote_release(root, RELEASE, "candidate", lanes_dir=release.lanes_dir)
    assert caught.value.field == "publication.blockers[0]"
    assert "components.omp.platforms[linux-x64].artifact_sha256" in caught.value.what
    assert manifest_of(root)["status"] == "draft"
    # The candidate cannot become ready without acceptance and pins.
    cand = release.clone(tmp_path / "c", "candidate")
    with pytest.raises(RefusedError) as caught:
        promote_release(cand, RELEASE, "ready", lanes_dir=release.lanes_dir)
    assert "external-install" in caught.value.what
    assert manifest_of(cand)["status"] == "candidate"


def test_accept_binds_only_a_passed_run_of_this_candidate(release, tmp_path):
    root = release.clone(tmp_path / "p", "candidate")
    manifest = manifest_of(root)
    record = tmp_path / "acceptance.json"

    def attempt(document) -> PipelineError:
        record.write_bytes(canonical_bytes(document))
        with pytest.raises(PipelineError) as caught:
            accept_release(root, RELEASE, record, lanes_dir=release.lanes_dir)
        return caught.value

    good = acceptance_record(manifest, release.commits["candidate"])
    other = dict(good, subject={**good["subject"], "model_sha256": "2" * 64})
    assert attempt(other).field == "subject.model_sha256"
    assert attempt(dict(good, candidate_commit=release.commits["draft"])).field == "candidate_commit"
    assert attempt(dict(good, candidate_commit="9" * 40)).field == "candidate_commit"
    assert attempt(dict(good, status="failed")).field == "status"
    assert attempt(dict(good, secret_values_recorded=1)).field == "secret_values_recorded"
    assert not (root / "manifests" / RELEASE / "acceptance").exists()
    draft = release.clone(tmp_path / "d", "draft")
    error = attempt_on(draft, record, good, release)
    assert isinstance(error, RefusedError) and error.field == "status"


def attempt_on(root: Path, record: Path, document: dict, release) -> PipelineError:
    record.write_bytes(canonical_bytes(document))
    with pytest.raises(PipelineError) as caught:
        accept_release(root, RELEASE, record, lanes_dir=release.lanes_dir)
    return caught.value


def test_a_candidates_identities_are_frozen(release, tmp_path):
    root = release.clone(tmp_path / "p", "candidate")
    toml = root / "manifests" / RELEASE / "release.toml"
    client = json.loads(json.dumps(release.client))
    name, size, _digest = client["platforms"]["windows-x64"]
    client["platforms"]["windows-x64"] = (name, size, "4" * 64)
    toml.write_text(release_toml(client))
    before = (root / "manifests" / RELEASE / "manifest.json").read_bytes()
    with pytest.raises(RefusedError) as caught:
        rebind(root, RELEASE, lanes=load_lanes(release.lanes_dir))
    assert caught.value.field == "subject.client.windows-x64" and "frozen" in caught.value.what
    assert (root / "manifests" / RELEASE / "manifest.json").read_bytes() == before
    # New evidence from the register is frozen too.
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    toml.write_text(release_toml(release.client))
    _reregister(dist, "lane-receipt", LANE, lambda d: d.update(generated_utc="2026-12-01T00:00:00Z"))
    with pytest.raises(RefusedError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert "frozen" in caught.value.what


# -- the pin dance -----------------------------------------------------------------------------------


def test_rebind_pins_only_what_a_commit_holds_and_drops_stale_pins(release, tmp_path):
    root = release.clone(tmp_path / "p", "accepted")
    lanes = load_lanes(release.lanes_dir)
    # The candidate commit predates the acceptance: the receipt and the provenance copy are there, the acceptance is not.
    outcome = rebind(root, RELEASE, pin=release.commits["candidate"], lanes=lanes)
    assert outcome.pinned == [f"manifests/{RELEASE}/qualification/{LANE}.json", f"manifests/{RELEASE}/qualification/{LANE}.provenance.intoto.json"]
    summary = manifest_of(root)["qualification"]["public_url"]
    assert summary is None
    with pytest.raises(UsageError):
        rebind(root, RELEASE, pin="no-such-rev", lanes=lanes)
    # Pinned everything, then a record changes: its pin no longer holds and is dropped.
    ready = release.clone(tmp_path / "r", "pinned")
    toml = ready / "manifests" / RELEASE / "release.toml"
    toml.write_text(toml.read_text().replace('reason = "the sample suite builds one native lane"', 'reason = "the sample suite builds exactly one native lane"'))
    outcome = rebind(ready, RELEASE, lanes=lanes)
    # The deferral is copied into the authority and the summary: both changed, both lost their pins.
    assert outcome.dropped == [f"manifests/{RELEASE}/compatibility.json", f"manifests/{RELEASE}/qualification.json"]
    assert any(b.startswith("pins: 2 records") for b in outcome.blockers)
    assert not verify_release(ready, RELEASE, lanes_dir=release.lanes_dir, require="ready").valid
    commit(ready, "reworded deferral")
    outcome = rebind(ready, RELEASE, pin="HEAD", lanes=lanes)
    assert outcome.pinned == [f"manifests/{RELEASE}/compatibility.json", f"manifests/{RELEASE}/qualification.json"]
    assert not any(b.startswith("pins") for b in outcome.blockers)


# -- stage: a new release from its predecessor --------------------------------------------------------


def test_stage_rebinds_unchanged_lanes_and_prints_the_remaining_steps(release, tmp_path, capsys):
    root = release.clone(tmp_path / "p", "ready")
    outcome = stage_release(root, RELEASE, "v1.1.0", lanes_dir=release.lanes_dir)
    new = manifest_of(root, "v1.1.0")
    old = manifest_of(root)
    assert new["status"] == "draft" and new["predecessor"] == {"release": RELEASE, "manifest_sha256": sha256_bytes((root / "manifests" / RELEASE / "manifest.json").read_bytes())}
    row, old_row = new["components"]["ninfer_variants"][0], old["components"]["ninfer_variants"][0]
    assert row["rebound_from"] == RELEASE
    assert row["qualification"]["sha256"] == old_row["qualification"]["sha256"] and row["qualification"]["public_url"] is None
    for key in ("package_sha256", "source_commit", "server_binary_sha256", "configuration_sha256", "checksums_sha256", "installer_url"):
        assert row[key] == old_row[key]
    new_tree, old_tree = root / "manifests" / "v1.1.0", root / "manifests" / RELEASE
    assert (new_tree / "qualification" / f"{LANE}.json").read_bytes() == (old_tree / "qualification" / f"{LANE}.json").read_bytes()
    # The set's provenance is carried byte for byte and bound again, unpinned until the new tree is committed.
    carried = f"qualification/{LANE}.provenance.intoto.json"
    assert (new_tree / carried).read_bytes() == (old_tree / carried).read_bytes()
    assert row["provenance"] == {"path": f"manifests/v1.1.0/{carried}", "sha256": old_row["provenance"]["sha256"], "public_url": None}
    assert not (new_tree / "acceptance").exists() and new["qualification"]["acceptance"] is None
    # The predecessor's reviews are of its own candidate: the new release starts without a ledger.
    assert not (new_tree / "reviews.toml").exists() and new["reviews"] is None
    assert [b.split(":")[0] for b in new["publication"]["blockers"]] == ["external-install", "reviews", "pins"]
    staged = tomllib.loads((new_tree / "release.toml").read_text())
    assert staged["predecessor"] == RELEASE and staged["lanes"][LANE] == {"from": "predecessor", "status": "qualified", "published": True}
    assert outcome.status == "draft"
    assert verify_release(root, "v1.1.0", lanes_dir=release.lanes_dir).valid
    # Unchanged bytes, already published: the staged release can become a candidate at once.
    promote_release(root, "v1.1.0", "candidate", lanes_dir=release.lanes_dir)
    assert manifest_of(root, "v1.1.0")["status"] == "candidate"
    with pytest.raises(RefusedError):
        stage_release(root, RELEASE, "v1.1.0", lanes_dir=release.lanes_dir)
    with pytest.raises(UsageError):
        stage_release(root, RELEASE, "v0.9.0", lanes_dir=release.lanes_dir)
    # CLI: prints the remaining steps.
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "compose", "stage", "--from", RELEASE, "--release", "v1.2.0", "--root", str(root), "--lanes-dir", str(release.lanes_dir)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "remaining steps:" in result.stderr and "compose rebind --release v1.2.0 --pin HEAD" in result.stderr


def test_a_rebound_lane_must_keep_its_receipt_bytes(release, tmp_path):
    root = release.clone(tmp_path / "p", "ready")
    stage_release(root, RELEASE, "v1.1.0", lanes_dir=release.lanes_dir)
    receipt = root / "manifests" / "v1.1.0" / "qualification" / f"{LANE}.json"
    receipt.write_bytes(receipt.read_bytes().replace(b'"status": "passed"', b'"status": "passed" ', 1))
    with pytest.raises(InputError) as caught:
        rebind(root, "v1.1.0", lanes=load_lanes(release.lanes_dir))
    assert caught.value.field == f"components.ninfer_variants[{LANE}].qualification.sha256"


def test_stage_refuses_a_predecessor_that_does_not_verify(release, tmp_path):
    root = release.clone(tmp_path / "p", "ready")
    notes = root / "manifests" / RELEASE / "NOTES.md"
    notes.write_text(notes.read_text() + "edited by hand\n")
    with pytest.raises(RefusedError) as caught:
        stage_release(root, RELEASE, "v1.1.0", lanes_dir=release.lanes_dir)
    assert caught.value.file == f"manifests/{RELEASE}/NOTES.md"
    assert not (root / "manifests" / "v1.1.0").exists()


# -- the real data: v0.13.0 and v0.13.1 from the seed ---------------------------------------------------


def test_v0_13_1_is_staged_from_v0_13_0_and_composes_from_the_seed(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "manifests", root / "manifests")
    shutil.rmtree(root / "manifests" / "v0.13.1")
    shutil.rmtree(root / "manifests" / "v0.13.0")
    (root / "manifests" / "v0.13.0").mkdir()
    shutil.copyfile(ROOT / "manifests" / "v0.13.0" / "release.toml", root / "manifests" / "v0.13.0" / "release.toml")
    compose_release(root, "v0.13.0")
    assert tree_bytes(root, "v0.13.0") == tree_bytes(ROOT, "v0.13.0"), "v0.13.0 must compose to the checked-in bytes"
    stage_release(root, "v0.13.0", "v0.13.1")
    staged = manifest_of(root, "v0.13.1")
    assert staged["components"]["ninfer"]["rebound_from"] == "v0.13.0" and staged["components"]["ninfer_variants"] == []
    # The maintainer's edit of release.toml with the seed's values, then compose: the checked-in tree, byte for byte.
    shutil.copyfile(ROOT / "manifests" / "v0.13.1" / "release.toml", root / "manifests" / "v0.13.1" / "release.toml")
    compose_release(root, "v0.13.1")
    assert tree_bytes(root, "v0.13.1") == tree_bytes(ROOT, "v0.13.1"), "v0.13.1 must compose to the checked-in bytes"


def test_v0_13_1_binds_the_seed_values_and_no_prefix():
    manifest = manifest_of(ROOT, "v0.13.1")
    comp = manifest["components"]
    assert comp["model"] == {
        "repository": "https://huggingface.co/neroued/Qwen3.8-27B-NInfer",
        "revision": "1cbd84e7221e51186bd7f093a149912d2489625b",
        "artifact_name": "qwen3_8_27b.ninfer",
        "artifact_url": "https://huggingface.co/neroued/Qwen3.8-27B-NInfer/resolve/1cbd84e7221e51186bd7f093a149912d2489625b/qwen3_8_27b.ninfer",
        "artifact_bytes": 20437521664,
        "artifact_sha256": "81f924d440c27261d820c19a9f8d45794c5aee410f8a68bd358133fa8c0375da",
        "public_model_id": None,
        "published": True,
    }
    ninfer = comp["ninfer"]
    assert ninfer["release_tag"] == "v0.7.0-qwen38-5090-beta.2" and ninfer["deployment_profile"] == "qwen38-5090-v0.13.0"
    assert ninfer["oci_reference"] == "ghcr.io/alphastorm/ninfer-runtime@sha256:5d10a998a42ba927dd8bbe54d928128e0d97ec7bd55d8dec2846d8681f79a4cd"
    assert ninfer["rebound_from"] == "v0.13.0"
    variants = {row["id"]: row for row in comp["ninfer_variants"]}
    assert variants["rtx4090-windows-native"]["configuration_sha256"] == "b21cdaf8b5edeed4e7d498edf5dbfae77a993145f1d511a8e1aa1b7bdab42950"
    assert variants["rtx3090-windows-native"]["configuration_sha256"] == "b49aad9915dd333f14cc7a3f0bb269aec124b38112e8ea984af3f569fe2dac75"
    for lane, tag in (("rtx4090-windows-native", "v0.7.0-qwen38-4090-beta.2"), ("rtx3090-windows-native", "v0.7.0-qwen38-3090-beta.2")):
        row = variants[lane]
        assert (row["release_tag"], row["source_commit"], row["upstream_commit"]) == (
            tag, "7a25cd72f490183e4113f1e84e68e36d653ddd28", "64d10fbf9f8e6bfc79ab0570b94674c5b9997929")
        assert row["package_sha256"] is None and row["server_binary_sha256"] is None
    omp = comp["omp"]
    assert (omp["upstream_tag"], omp["distribution_version"], omp["upstream_commit"]) == ("v18.12.6", "18.12.6", None)
    assert {p["platform"] for p in omp["platforms"]} == {"windows-x64", "darwin-arm64", "linux-x64"}
    # The seed's prefixes are never values: no field anywhere holds a short hex string.
    def leaves(node, path=""):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from leaves(value, f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from leaves(value, f"{path}[{index}]")
        else:
            yield path, node

    import re

    for path, value in leaves(manifest):
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{6,39}", value):
            pytest.fail(f"{path} holds a hash prefix {value!r}")
    for prefix in ("45c35e40", "6d4d0a05", "9790a004", "52dd3be7", "751d22dc", "d4377ed0"):
        assert any(prefix in b for b in manifest["publication"]["blockers"]), prefix
    assert manifest["status"] == "draft" and manifest["publication"]["authorized"] is False


def test_toml_output_round_trips_every_checked_in_input():
    for name in ("v0.13.0", "v0.13.1"):
        data = tomllib.loads((ROOT / "manifests" / name / "release.toml").read_text())
        assert tomllib.loads(dump_toml(data)) == data


def test_nothing_outside_manifests_is_written(release, tmp_path):
    root = release.clone(tmp_path / "p", "draft")
    status_before = git(root, "status", "--porcelain", "--untracked-files=all")
    assert status_before == ""
    (root / "manifests" / RELEASE / "NOTES.md").unlink()
    rebind(root, RELEASE, lanes=load_lanes(release.lanes_dir))
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert release_dir(root, RELEASE).is_dir()


# -- compose on the stage contract: its actions are stage keys, the tree is in the register ---------------


def _cli(capsys, *args: str) -> tuple[int, dict | None, str]:
    from pipeline.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err


def test_compose_records_every_file_of_the_tree_and_a_second_run_is_up_to_date(release, tmp_path, capsys):
    from pipeline.register import Register

    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    common = ["--release", RELEASE, "--dist", str(dist), "--root", str(root), "--lanes-dir", str(release.lanes_dir)]
    code, first, err = _cli(capsys, "compose", *common)
    assert code == 0 and first["written"] == [] and "done" in err, err
    register = Register(dist, repo_root=root)
    entries = {e.name: e for e in register.query("release-tree", release=RELEASE)}
    tree = root / "manifests" / RELEASE
    files = sorted(p.relative_to(root).as_posix() for p in tree.rglob("*") if p.is_file())
    assert sorted(entries) == files and sorted(register.stages["compose:" + RELEASE]["outputs"]) == files
    for name, entry in entries.items():
        assert (entry.path, entry.attrs["root"], entry.sha256, entry.size) == (name, "repository", sha256_bytes((root / name).read_bytes()), (root / name).stat().st_size)
    roles = {name.removeprefix(f"manifests/{RELEASE}/"): e.attrs["role"] for name, e in entries.items()}
    assert roles == {"release.toml": "input", "manifest.json": "manifest", "qualification.json": "summary", "compatibility.json": "authority",
                     "COMPATIBILITY.md": "rendering", "NOTES.md": "rendering", f"qualification/{LANE}.json": "receipt", f"qualification/{LANE}.SHA256SUMS": "checksums",
                     f"qualification/{LANE}.provenance.intoto.json": "provenance"}
    assert sorted(n for n, e in entries.items() if e.attrs["signed"]) == [f"manifests/{RELEASE}/manifest.json", f"manifests/{RELEASE}/qualification/{LANE}.SHA256SUMS"]
    # Unchanged inputs, intact tree: up to date, and the same answer on stdout.
    code, second, err = _cli(capsys, "compose", *common)
    assert code == 0 and second == first and "up to date" in err, err
    # A tree file edited by hand is an output that changed: compose runs and restores it.
    notes = tree / "NOTES.md"
    good = notes.read_bytes()
    notes.write_bytes(good + b"edited\n")
    interrupted = tree / ".manifest.json.k2j3h4.tmp"  # what a killed run of atomic_write_bytes leaves behind
    interrupted.write_bytes(b"{")
    code, third, err = _cli(capsys, "compose", *common)
    assert code == 0 and third["written"] == [f"manifests/{RELEASE}/NOTES.md"] and notes.read_bytes() == good
    assert not interrupted.exists() and f"removed {interrupted}" in err
    # A changed input (release.toml) runs it again, and the register follows the new bytes.
    toml = tree / "release.toml"
    toml.write_text(toml.read_text().replace('title = "sample release made by the pipeline"', 'title = "sample release, retitled"'))
    code, fourth, err = _cli(capsys, "compose", *common)
    assert code == 0 and f"manifests/{RELEASE}/NOTES.md" in fourth["written"] and "up to date" not in err
    assert Register(dist, repo_root=root).artifacts[f"manifests/{RELEASE}/release.toml"].sha256 == sha256_bytes(toml.read_bytes())


def test_each_action_is_a_stage_key_and_transitions_are_decided_every_time(release, tmp_path, capsys):
    from pipeline.register import Register

    root = release.clone(tmp_path / "p", "draft")
    common = ["--release", RELEASE, "--root", str(root), "--lanes-dir", str(release.lanes_dir)]
    # Without --dist the run is recorded in the repository's own dist/ (never imported from).
    code, outcome, err = _cli(capsys, "compose", "promote", "--to", "candidate", *common)
    assert code == 0 and outcome["status"] == "candidate", err
    register = Register(root / "dist", repo_root=root)
    manifest = register.artifacts[f"manifests/{RELEASE}/manifest.json"]
    assert "compose-promote:" + RELEASE in register.stages and manifest.attrs["action"] == "promote"
    assert manifest.sha256 == sha256_bytes((root / "manifests" / RELEASE / "manifest.json").read_bytes())
    # A second promotion to the same status is refused as before, not "up to date".
    code, outcome, err = _cli(capsys, "compose", "promote", "--to", "candidate", *common)
    assert code == 7 and outcome is None and "cannot promote from candidate to candidate" in err
    code, outcome, err = _cli(capsys, "compose", "rebind", *common)
    assert code == 0 and outcome["written"] == [] and "compose-rebind:" + RELEASE in Register(root / "dist", repo_root=root).stages
    # A refused compose names the missing register, as before: evidence is read only from a --dist named.
    code, outcome, err = _cli(capsys, "compose", *common)
    assert code == 1 and "lanes built by this pipeline need the artefact register" in err


def test_compose_reads_the_package_archive_entry_of_the_register(release, tmp_path):
    from pipeline.register import Register

    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    register = Register(dist)
    package = register.one("package-archive", lane=LANE, needed_by="t", produced_by="t")
    source = register.one("source-archive", lane=LANE, needed_by="t", produced_by="t")
    key = next(k for k, v in register.stages.items() if package.name in v["outputs"])
    # The entry names another file of the checked set: a package archive that is not the set's package.
    swapped = [register.make("package-archive", register.path_of(source), stage=a.stage, lane=a.lane, name=a.name, **a.attrs) if a.name == package.name else a
               for a in register.outputs_of(key)]
    register.record_stage(key, register.stages[key]["fingerprint"], swapped)
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert (caught.value.file, caught.value.field) == (str(dist / "register.json"), f"{package.name}.path")
    # No package-archive entry at all: compose says which stage makes it.
    register.record_stage(key, register.stages[key]["fingerprint"], [a for a in register.outputs_of(key) if a.name != package.name])
    with pytest.raises(InputError, match="has no package-archive entry for lane"):
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)


def test_the_release_road_composes_and_verifies_only_with_a_release(release, tmp_path):
    import argparse

    from pipeline.stage import Context, Skip
    from pipeline.stages import compose as compose_stage
    from pipeline.stages import verify as verify_stage

    root = release.clone(tmp_path / "p", "draft")
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)
    ctx = Context.open(dist, release.lanes_dir, root=root)
    for module in (compose_stage, verify_stage):
        with pytest.raises(Skip, match="no --release given"):
            module.release_plan(ctx, [], argparse.Namespace(release=None, lanes_dir=release.lanes_dir))
    options = argparse.Namespace(release=RELEASE, lanes_dir=release.lanes_dir)
    results = [step() for module in (compose_stage, verify_stage) for _label, step in module.release_plan(ctx, [], options)]
    assert [(r.key, r.skipped) for r in results] == [("compose:" + RELEASE, False), ("verify:" + RELEASE, False)]
    again = [step() for module in (compose_stage, verify_stage) for _label, step in module.release_plan(ctx, [], options)]
    assert [(r.key, r.skipped) for r in again] == [("compose:" + RELEASE, True), ("verify:" + RELEASE, False)]  # verify always observes
    # A tree that does not verify stops the road with the first error named.
    (root / "manifests" / RELEASE / "stray.txt").write_text("x")
    (_label, step), = verify_stage.release_plan(ctx, [], options)
    with pytest.raises(InputError, match="does not verify .*stray.txt"):
        step()


# -- the container lane: build -> package -> image -> push -> qualify -> compose -> ready ----------------


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.registry
def test_a_two_lane_release_with_the_pushed_image_reaches_ready(release, tmp_path, sample_repo, registry_server, private_oci_cache):
    """The native lane of the sample release plus the container lane compiled from the sample,
    packaged, built into an image and pushed by digest.  Without a GPU driver here the container
    lane's receipt stays hardware-pending (the harness runs the packaged selftest for real), so the
    lane ships as a preview, deferred with its reason, and the release is ready on the native lane."""
    import imagekit
    from releasekit import qualify_pending

    from pipeline.cli import main
    from pipeline.formats.lanes import load_lane
    from pipeline.lanework.toolchain import for_lane
    from pipeline.util import ui

    lane_id = "rtx5090-container"
    lane = load_lane(release.lanes_dir / f"{lane_id}.toml")
    repo_path, source_commit = sample_repo
    dist = tmp_path / "dist"
    shutil.copytree(release.dist, dist)  # the native lane, already qualified on the owner's hardware
    common = ["--dist", str(dist), "--lanes-dir", str(release.lanes_dir)]
    assert main(["build", "--lane", "5090", "--source", f"{repo_path}@{source_commit}", "--rehearsal", *common]) == 0
    assert main(["package", "--lane", lane_id, *common]) == 0
    cudart = for_lane(lane, "pinned").library_dir / "libcudart.so.13"
    base = imagekit.build_base_layout(tmp_path / "cuda-base", cudart=cudart.resolve())
    imagekit.push_base(base, registry_server.host, "nvidia/cuda-test")
    definition = tmp_path / "definition.toml"
    definition.write_text(imagekit.definition_text(f"{registry_server.host}/nvidia/cuda-test", base.index_digest))
    assert main(["image", "--lane", lane_id, "--definition", str(definition), *common]) == 0
    target = f"{registry_server.host}/alphastorm/ninfer-runtime"
    assert main(["push", "--registry", target, *common]) == 0
    config = tmp_path / "server-config.json"  # the container lane's configuration identity: a file the receipt binds
    config.write_bytes(canonical_bytes({"deployment_profile": lane.deployment_profile(), "max_context": 131072, "port": 8080}))
    ui.set_quiet(True)
    qualify_pending(dist, lane, config=config)

    root = release.clone(tmp_path / "product", "empty")
    toml = root / "manifests" / RELEASE / "release.toml"
    toml.parent.mkdir(parents=True)
    lanes = {LANE: "qualified", lane_id: "qualified"}
    toml.write_text(release_toml(release.client, register=lanes))
    with pytest.raises(RefusedError) as caught:  # a hardware-pending receipt cannot make a lane qualified
        compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    assert caught.value.field == f"lanes.{lane_id}.status"
    lanes[lane_id] = "preview"
    toml.write_text(release_toml(release.client, register=lanes, preview_reason="RTX 5090 hardware qualification pending: the receipt is hardware-pending"))
    # Only the lane's own publication receipt is evidence: one recorded for another lane is never used.
    import dataclasses

    from pipeline.register import Register

    foreign = tmp_path / "foreign"
    shutil.copytree(dist, foreign)
    register = Register(foreign)
    pushed = register.one("publication-receipt", lane=lane_id, needed_by="test", produced_by="push")
    key = next(k for k, v in register.stages.items() if pushed.name in v["outputs"])
    register.record_stage(key, register.stages[key]["fingerprint"], [dataclasses.replace(a, lane=LANE) if a.name == pushed.name else a for a in register.outputs_of(key)])
    before = tree_bytes(root)
    with pytest.raises(InputError) as caught:
        compose_release(root, RELEASE, dist=foreign, lanes_dir=release.lanes_dir)
    assert caught.value.file == f"manifests/{RELEASE}/qualification/runtime-publication.json" and tree_bytes(root) == before
    compose_release(root, RELEASE, dist=dist, lanes_dir=release.lanes_dir)
    manifest = manifest_of(root)
    row = manifest["components"]["ninfer"]
    publication = json.loads((root / "manifests" / RELEASE / "qualification" / "runtime-publication.json").read_text())
    assert row["oci_reference"] == publication["image_reference"] and row["oci_reference"].startswith(target + "@sha256:")
    assert row["oci_manifest_digest"] == publication["image_digest"]
    assert row["binary_archive_sha256"] == publication["binary_sha256"] and row["source_commit"] == source_commit
    assert row["configuration_sha256"] == sha256_bytes(config.read_bytes())
    assert (row["status"], row["installable"], row["qualification"]["status"]) == ("preview", False, "hardware-pending")
    assert [b.split(":")[0] for b in manifest["publication"]["blockers"]] == ["external-install", "reviews", "pins"]
    # The image's provenance is copied beside the set's: its one subject is the pushed manifest digest.
    image_statement = json.loads((root / row["image_provenance"]["path"]).read_text())
    assert [s["digest"]["sha256"] for s in image_statement["subject"]] == [row["oci_manifest_digest"].removeprefix("sha256:")]
    assert row["image_provenance"]["path"] == f"manifests/{RELEASE}/qualification/{lane_id}.image.provenance.intoto.json"
    set_statement = json.loads((root / row["provenance"]["path"]).read_text())
    assert set_statement["predicate"]["buildDefinition"]["externalParameters"]["source_commit"] == source_commit
    commit(root, "draft")

    # A publication receipt with a mutable tag, or for another archive, is drift: refused, naming file and field.
    drifted = tmp_path / "drift"
    shutil.copytree(dist, drifted)
    repo_tag = f"{target}:{lane.tag()}"
    path = _reregister(drifted, "publication-receipt", lane_id, lambda d: d.update(image_reference=repo_tag))
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=drifted, lanes_dir=release.lanes_dir)
    assert caught.value.file == str(path) and caught.value.field == "image_reference" and caught.value.found == repo_tag
    _reregister(drifted, "publication-receipt", lane_id, lambda d: d.update(image_reference=publication["image_reference"], binary_sha256="b" * 64))
    with pytest.raises(IntegrityError) as caught:
        compose_release(root, RELEASE, dist=drifted, lanes_dir=release.lanes_dir)
    assert caught.value.field == "binary_sha256"

    promote_release(root, RELEASE, "candidate", lanes_dir=release.lanes_dir)
    candidate = commit(root, "candidate")
    record = tmp_path / "acceptance.json"
    record.write_bytes(canonical_bytes(acceptance_record(manifest_of(root), candidate)))
    accept_release(root, RELEASE, record, lanes_dir=release.lanes_dir)
    commit(root, "accepted")
    # The councils reviewed both sets and the pushed image: their ledger binds the image by its digest.
    (root / "manifests" / RELEASE / "reviews.toml").write_text(review_ledger(manifest_of(root), candidate))
    assert f'"image:{lane_id}" = "{row["oci_manifest_digest"]}"' in (root / "manifests" / RELEASE / "reviews.toml").read_text()
    commit(root, "reviewed")
    for step in range(3):
        outcome = rebind(root, RELEASE, pin="HEAD", lanes=load_lanes(release.lanes_dir))
        commit(root, f"pin {step}")
        if not outcome.blockers:
            break
    promote_release(root, RELEASE, "ready", lanes_dir=release.lanes_dir)
    commit(root, "ready")
    ui.set_quiet(False)
    report = verify_release(root, RELEASE, require="ready", check_pins=True, lanes_dir=release.lanes_dir)
    assert report.valid, [p.message() for p in report.problems.items]
    ready = manifest_of(root)
    assert ready["components"]["ninfer"]["publication_receipt"]["public_url"].endswith(f"/manifests/{RELEASE}/qualification/runtime-publication.json")
    assert ready["qualification"]["deferred_scope"][lane_id]["reason"].startswith("RTX 5090 hardware qualification pending")
    # The image lives on a test registry, outside the product's repositories: said, not hidden.
    assert any(p.check == "images" for p in report.problems.warnings)


@pytest.mark.parametrize(
    ("value", "reason"),
    [("/etc/passwd", "is an absolute path"), ("../../outside/SHA256SUMS", "has a '..' segment"), ("evidence\\SHA256SUMS", "(the separator is '/')"), ("link/SHA256SUMS", "resolves outside the repository")],
    ids=["absolute", "dotdot", "backslash", "symlink"],
)
def test_a_pinned_checksums_file_outside_the_repository_is_refused_when_release_toml_is_read(tmp_path, value, reason):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "manifests", root / "manifests")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SHA256SUMS").write_text("0" * 64 + "  x\n")
    (root / "link").symlink_to(outside, target_is_directory=True)
    toml = root / "manifests" / "v0.13.1" / "release.toml"
    text = toml.read_text()
    marker = 'configuration_sha256 = "b21cdaf8b5edeed4e7d498edf5dbfae77a993145f1d511a8e1aa1b7bdab42950"\n'
    assert marker in text
    toml.write_text(text.replace(marker, marker + f"checksums_file = {json.dumps(value)}\n"))
    with pytest.raises(InputError) as caught:
        load_release_toml(root, "v0.13.1", load_lanes())
    assert (caught.value.file, caught.value.field) == ("manifests/v0.13.1/release.toml", "lanes.rtx4090-windows-native.checksums_file")
    assert reason in caught.value.render()
