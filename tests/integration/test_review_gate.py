"""The review ledger on the sample release: the gate to ready and to publication, verify, notes, status and diff."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from releasekit import LANE, RELEASE, commit, review_ledger, sample_release

from pipeline.errors import IntegrityError, PipelineError, RefusedError
from pipeline.formats.lanes import load_lanes
from pipeline.formats.release.contract import verify_release
from pipeline.formats.release.manifest import review_subjects
from pipeline.stages.compose import promote_release, rebind

LEDGER = f"manifests/{RELEASE}/reviews.toml"
OPEN_P0 = {"NR-1": {"severity": "P0", "scope": "in", "state": "confirmed", "disposition": "The installer deletes the state root on rollback."}}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return sample_release(tmp_path_factory)


def manifest_of(root: Path) -> dict:
    return json.loads((root / "manifests" / RELEASE / "manifest.json").read_text())


def reviewed_and_pinned(release, root: Path, ledger: str) -> list[str]:
    """Record `ledger` on the accepted candidate, commit, and pin until no 'pins' blocker is left; the blockers left."""
    (root / LEDGER).write_text(ledger)
    commit(root, "reviews recorded")
    lanes = load_lanes(release.lanes_dir)
    for step in range(4):
        outcome = rebind(root, RELEASE, pin="HEAD", lanes=lanes)
        commit(root, f"pin {step}")
        if not any(b.startswith("pins:") for b in outcome.blockers):
            break
    return outcome.blockers


def test_a_release_with_an_open_in_scope_p0_cannot_become_ready(release, tmp_path):
    root = release.clone(tmp_path / "p", "accepted")
    candidate = release.commits["candidate"]
    blockers = reviewed_and_pinned(release, root, review_ledger(manifest_of(root), candidate, findings=OPEN_P0))
    assert blockers == [f"reviews: the native-runtime review's finding NR-1 (P0, in scope) is confirmed; fix it (state \"fixed\"), refute it or defer it with a tracking issue in {LEDGER}; "
                        "an in-scope P0/P1 that is confirmed or unresolved holds the release"]
    # A candidate may keep it (the councils review the candidate) and verifies as one.
    assert verify_release(root, RELEASE, lanes_dir=release.lanes_dir).valid
    with pytest.raises(RefusedError) as caught:
        promote_release(root, RELEASE, "ready", lanes_dir=release.lanes_dir)
    assert "native-runtime" in caught.value.what and "NR-1" in caught.value.what and manifest_of(root)["status"] == "candidate"
    # Fixed, the release goes on.
    fixed = {"NR-1": {**OPEN_P0["NR-1"], "state": "fixed", "disposition": "Fixed in the candidate's installer; re-reviewed."}}
    assert reviewed_and_pinned(release, root, review_ledger(manifest_of(root), candidate, findings=fixed)) == []
    promote_release(root, RELEASE, "ready", lanes_dir=release.lanes_dir)
    commit(root, "ready")
    assert verify_release(root, RELEASE, require="ready", check_pins=True, lanes_dir=release.lanes_dir).valid


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"state": "open"}, "the native-runtime review is open"),
        ({"findings": {"NR-2": {"severity": "P1", "scope": "in", "state": "unresolved", "disposition": "Not reproduced yet."}}}, "finding NR-2 (P1, in scope) is unresolved"),
        ({"findings": {"NR-3": {"severity": "P2", "scope": "in", "state": "deferred", "disposition": "Later."}}}, "finding NR-3 is deferred without a tracking issue"),
        ({"reviewed": {f"set:{LANE}": "0" * 64}}, f"reviewed set:{LANE} 000000000000, but the release binds"),
        ({"reviewed": {"manifest-candidate": "1" * 40}}, "reviewed manifest-candidate 111111111111"),
        ({"reviewed": {"image:rtx5090-container": "sha256:" + "2" * 64}}, "names image:rtx5090-container sha256:222222222222, which the release does not bind"),
    ],
)
def test_each_refusal_names_the_review_the_finding_and_the_fix(release, tmp_path, change, words):
    root = release.clone(tmp_path / "p", "accepted")
    blockers = reviewed_and_pinned(release, root, review_ledger(manifest_of(root), release.commits["candidate"], **change))
    assert len(blockers) == 1 and blockers[0].startswith("reviews: ") and words in blockers[0] and LEDGER in blockers[0], blockers
    with pytest.raises(RefusedError) as caught:
        promote_release(root, RELEASE, "ready", lanes_dir=release.lanes_dir)
    assert words in caught.value.what


def test_a_trivial_ledger_does_not_clear_the_gate_the_reviews_must_cover_what_the_release_binds(release, tmp_path):
    root = release.clone(tmp_path / "p", "accepted")
    trivial = (f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n\n[reviews.x]\nstate = "closed"\n'
               f'disposition = "Looked."\n\n[reviews.x.reviewed]\nmanifest-candidate = "{release.commits["candidate"]}"\n')
    blockers = reviewed_and_pinned(release, root, trivial)
    subjects = sorted(label for label in review_subjects(manifest_of(root)) if label != "manifest-candidate")
    assert subjects and [b.split(" ", 6)[5] for b in blockers] == subjects, blockers  # 'reviews: no closed review covers <label> ...'
    assert all(b.startswith("reviews: no closed review covers ") and LEDGER in b for b in blockers)
    with pytest.raises(RefusedError) as caught:
        promote_release(root, RELEASE, "ready", lanes_dir=release.lanes_dir)
    assert f"no closed review covers {subjects[0]}" in caught.value.what


def test_release_toml_may_require_councils_and_a_missing_one_holds_the_release(release, tmp_path):
    root = release.clone(tmp_path / "p", "accepted")
    spec = root / "manifests" / RELEASE / "release.toml"
    spec.write_text(spec.read_text() + '\n[reviews]\ncouncils = ["native-runtime", "product-tooling", "security"]\n')
    blockers = reviewed_and_pinned(release, root, review_ledger(manifest_of(root), release.commits["candidate"]))
    assert blockers == [f"reviews: the security council, which release.toml requires, recorded no review; record its review as [reviews.security] in {LEDGER}, "
                        "or remove it from reviews.councils in release.toml if the release does not need it"]
    spec.write_text(spec.read_text().replace(', "security"', ""))
    commit(root, "security is not required")
    assert reviewed_and_pinned(release, root, review_ledger(manifest_of(root), release.commits["candidate"])) == []


def test_status_and_diff_show_a_malformed_ledger_as_a_problem_naming_the_field(release, tmp_path):
    from pipeline.register import Register
    from pipeline.tools.diff import compare
    from pipeline.tools.diff_sources import load_source
    from pipeline.tools.status import release_status

    before = release.clone(tmp_path / "a", "ready")
    root = release.clone(tmp_path / "p", "ready")
    (root / LEDGER).write_text((root / LEDGER).read_text().replace('state = "closed"', 'state = "half"', 1))
    status = release_status(root, RELEASE, Register(release.dist), load_lanes(release.lanes_dir))
    assert status.reviews.startswith(f"the review ledger cannot be read: manifests/{RELEASE}/reviews.toml: reviews.native-runtime.state: ")
    assert "found 'half'" in status.reviews and f"Fix: correct it (docs/review-ledger.md), then python -m pipeline compose rebind --release {RELEASE}." in status.reviews
    changes = [c for c in compare(load_source(str(before / "manifests" / RELEASE)), load_source(str(root / "manifests" / RELEASE))) if c.section == "review ledger"]
    (problem,) = [c for c in changes if c.path == "problem"]
    assert problem.change == "added" and "reviews.native-runtime.state" in problem.new


def test_verify_names_a_changed_ledger_byte(release, tmp_path):
    root = release.clone(tmp_path / "p", "ready")
    path = root / LEDGER
    path.write_bytes(path.read_bytes().replace(b"Closed without", b"closed without", 1))
    report = verify_release(root, RELEASE, require="ready", check_pins=True, lanes_dir=release.lanes_dir)
    assert not report.valid
    fields = {(p.file, p.field) for p in report.problems.items}
    assert (f"manifests/{RELEASE}/manifest.json", "reviews.sha256") in fields
    # A ledger removed from a tree whose release requires it is named too.
    path.unlink()
    report = verify_release(root, RELEASE, require="ready", lanes_dir=release.lanes_dir)
    assert any(p.field == "reviews.path" or p.field == "reviews" for p in report.problems.items), [p.message() for p in report.problems.items]


def test_the_notes_render_the_reviews_and_the_deferred_items(release, tmp_path):
    notes = (release.clone(tmp_path / "p", "ready") / "manifests" / RELEASE / "NOTES.md").read_text()
    gates = notes.split("## Remaining release gates", 1)[1]
    assert "### Reviews" in gates and "- **native-runtime** (closed): Closed without remediation" in gates and "- **product-tooling** (closed)" in gates
    assert f"set:{LANE} `" in gates and f"manifest-candidate `{release.commits['candidate'][:12]}`" in gates
    assert "### Deferred items\n\n- None." in gates
    # With a deferred finding: its disposition under the review, its tracking issue under Deferred items.
    root = release.clone(tmp_path / "d", "accepted")
    deferred = {"NR-7": {"severity": "P2", "scope": "in", "state": "deferred", "disposition": "Reachability not reproduced.", "tracking_issue": "#88"}}
    reviewed_and_pinned(release, root, review_ledger(manifest_of(root), release.commits["candidate"], findings=deferred))
    notes = (root / "manifests" / RELEASE / "NOTES.md").read_text()
    assert "  - NR-7: P2, in scope, deferred, tracked in #88: Reachability not reproduced." in notes
    assert "### Deferred items\n\n- NR-7 (native-runtime, P2): #88" in notes


def test_status_shows_the_councils_and_each_review_blocker_with_its_fix(release, tmp_path):
    from pipeline.register import Register
    from pipeline.tools.status import release_status

    root = release.clone(tmp_path / "p", "accepted")
    reviewed_and_pinned(release, root, review_ledger(manifest_of(root), release.commits["candidate"], findings=OPEN_P0, state="open"))
    status = release_status(root, RELEASE, Register(release.dist), load_lanes(release.lanes_dir))
    assert status.reviews.startswith("native-runtime open (holding: NR-1), product-tooling closed; ledger ") and status.reviews.endswith(" bound")
    fixes = [b.fix for b in status.blockers if b.text.startswith("reviews: ")]
    assert len(fixes) == 2 and all(f.startswith(f"record the councils' reviews and dispositions in {LEDGER}") and f.endswith(f"compose rebind --release {RELEASE}") for f in fixes)
    # An edit the manifest does not bind yet shows as such.
    (root / LEDGER).write_text((root / LEDGER).read_text().replace('state = "open"', 'state = "closed"'))
    assert release_status(root, RELEASE, Register(release.dist), load_lanes(release.lanes_dir)).reviews.endswith("not bound yet: run compose rebind")


def test_diff_shows_a_changed_finding(release, tmp_path):
    from pipeline.tools.diff import compare
    from pipeline.tools.diff_sources import load_source

    before = release.clone(tmp_path / "a", "ready")
    after = release.clone(tmp_path / "b", "accepted")
    deferred = {"NR-7": {"severity": "P2", "scope": "in", "state": "deferred", "disposition": "Reachability not reproduced.", "tracking_issue": "#88"}}
    reviewed_and_pinned(release, after, review_ledger(manifest_of(after), release.commits["candidate"], findings=deferred))
    changes = [c for c in compare(load_source(str(before / "manifests" / RELEASE)), load_source(str(after / "manifests" / RELEASE))) if c.section == "review ledger"]
    paths = {c.path: c for c in changes}
    assert paths["councils.native-runtime.findings.NR-7"].change == "added" and paths["councils.native-runtime.findings.NR-7"].new["tracking_issue"] == "#88"
    assert paths["binding.sha256"].change == "changed"


def test_publish_gate_reviews_refuses_an_open_p0_and_a_changed_ledger(release, tmp_path):
    from pipeline.formats.release.manifest import parse_manifest
    from pipeline.stages.publish.product import _review_gate

    def model(document: dict):
        return parse_manifest(json.dumps(document).encode(), source="manifest.json")

    root = release.clone(tmp_path / "p", "ready")
    manifest = manifest_of(root)
    data = (root / LEDGER).read_bytes()
    assert "2 reviews closed (native-runtime, product-tooling)" in _review_gate(model(manifest), lambda rel: data if rel == LEDGER else None, RELEASE)()
    with pytest.raises(IntegrityError) as caught:
        _review_gate(model(manifest), lambda rel: data.replace(b"closed", b"open", 1), RELEASE)()
    assert caught.value.field == "reviews.sha256"
    # A manifest that binds a ledger holding an open in-scope P0 (only a hand-made ready tree could): refused by name.
    from pipeline.util.hashing import sha256_bytes

    held = review_ledger(manifest, release.commits["candidate"], findings=OPEN_P0).encode()
    forged = {**manifest, "reviews": {**manifest["reviews"], "sha256": sha256_bytes(held)}}
    with pytest.raises(RefusedError) as refused:
        _review_gate(model(forged), lambda rel: held, RELEASE)()
    assert refused.value.field == "reviews.native-runtime.findings.NR-1" and "NR-1 (P0, in scope) is confirmed" in refused.value.what
    assert isinstance(refused.value, PipelineError) and "compose rebind" in refused.value.fix
    shutil.rmtree(root)
