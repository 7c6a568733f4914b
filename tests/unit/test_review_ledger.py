"""The review ledger's format (formats/review_ledger.py): strict, bounded reading and the one release gate."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.formats.release.manifest import ReleaseManifest, parse_manifest
from pipeline.formats.review_ledger import (
    MAX_LEDGER_BYTES,
    bound_ledger,
    gate_failures,
    parse_ledger,
    read_ledger,
)
from pipeline.util.hashing import sha256_bytes

RELEASE = "v0.14.0"
FILE = f"manifests/{RELEASE}/reviews.toml"
SET = "a" * 64
IMAGE = "sha256:" + "b" * 64
CANDIDATE = "c" * 40
BOUND = {"set:rtx4090-windows-native": SET, "image:rtx5090-container": IMAGE, "manifest-candidate": CANDIDATE}


def ledger_text(*, state: str = "closed", findings: str = "", reviewed: str | None = None, top: str = "") -> str:
    reviewed = reviewed if reviewed is not None else (
        f'"set:rtx4090-windows-native" = "{SET}"\n"image:rtx5090-container" = "{IMAGE}"\nmanifest-candidate = "{CANDIDATE}"\n'
    )
    return (
        f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n{top}\n'
        f'[reviews.native-runtime]\nstate = "{state}"\ndisposition = "Closed without remediation."\n\n'
        f"[reviews.native-runtime.reviewed]\n{reviewed}\n{findings}"
    )


def finding(fid: str = "NR-1", *, severity: str = "P0", scope: str = "in", state: str = "confirmed", tracking: str | None = None) -> str:
    extra = f'tracking_issue = "{tracking}"\n' if tracking else ""
    return f'[reviews.native-runtime.findings.{fid}]\nseverity = "{severity}"\nscope = "{scope}"\nstate = "{state}"\ndisposition = "Seen by the council."\n{extra}\n'


def parse(text: str):
    return parse_ledger(text.encode(), release=RELEASE, file=FILE)


def test_a_closed_ledger_that_binds_the_release_clears_it_and_is_a_frozen_model():
    data = ledger_text(findings=finding(severity="P2", state="deferred", tracking="#88") + finding("NR-2", severity="P1", state="refuted")).encode()
    ledger = parse_ledger(data, release=RELEASE, file=FILE)
    assert ledger.sha256 == sha256_bytes(data) and ledger.path == FILE
    (review,) = ledger.reviews
    assert (review.council, review.state, [f.id for f in review.findings]) == ("native-runtime", "closed", ["NR-1", "NR-2"])
    assert dict(review.reviewed) == BOUND
    assert [(council, f.tracking_issue) for council, f in ledger.deferred()] == [("native-runtime", "#88")]
    assert gate_failures(ledger, BOUND, release=RELEASE) == []
    with pytest.raises(AttributeError):
        review.state = "open"  # frozen


@pytest.mark.parametrize(
    ("text", "council", "finding_id", "words"),
    [
        (ledger_text(state="open"), "native-runtime", None, "review is open"),
        (ledger_text(findings=finding(state="confirmed")), "native-runtime", "NR-1", "(P0, in scope) is confirmed"),
        (ledger_text(findings=finding(severity="P1", state="unresolved")), "native-runtime", "NR-1", "(P1, in scope) is unresolved"),
        (ledger_text(findings=finding(severity="P3", state="deferred")), "native-runtime", "NR-1", "deferred without a tracking issue"),
        (ledger_text(reviewed=f'"set:rtx4090-windows-native" = "{"d" * 64}"\n'), "native-runtime", None, "but the release binds aaaaaaaaaaaa"),
        (ledger_text(reviewed=f'"set:rtx3090-windows-native" = "{SET}"\n'), "native-runtime", None, "which the release does not bind"),
        (ledger_text(reviewed=f'manifest-candidate = "{"e" * 40}"\n'), "native-runtime", None, "review of other bytes does not count"),
    ],
)
def test_each_way_the_ledger_holds_the_release_names_the_review_and_the_finding(text, council, finding_id, words):
    failure, *uncovered = gate_failures(parse(text), BOUND, release=RELEASE)
    assert (failure.council, failure.finding) == (council, finding_id)
    assert all("no closed review covers" in f.what for f in uncovered)  # what this review does not cover at the bound digest
    assert words in failure.text() and FILE in failure.text()  # the fix names the file to edit


@pytest.mark.parametrize(("severity", "scope", "state"), [("P0", "out", "confirmed"), ("P2", "in", "confirmed"), ("P0", "in", "fixed"), ("P1", "in", "refuted"), ("P0", "in", "deferred")])
def test_what_does_not_hold_the_release(severity, scope, state):
    text = ledger_text(findings=finding(severity=severity, scope=scope, state=state, tracking="alphastorm/ninfer#89" if state == "deferred" else None))
    assert gate_failures(parse(text), BOUND, release=RELEASE) == []


def test_no_ledger_or_no_review_holds_the_release():
    (missing,) = gate_failures(None, BOUND, release=RELEASE)
    assert "no review ledger is bound" in missing.what
    empty = parse(f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n[reviews]\n')
    (none,) = gate_failures(empty, BOUND, release=RELEASE)
    assert "records no review" in none.what


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (ledger_text(findings=finding(severity="P5")), "reviews.native-runtime.findings.NR-1.severity", "invalid value"),
        (ledger_text(findings=finding(scope="maybe")), "reviews.native-runtime.findings.NR-1.scope", "invalid value"),
        (ledger_text(findings=finding(state="ignored")), "reviews.native-runtime.findings.NR-1.state", "invalid value"),
        (ledger_text(findings=finding(tracking="88")), "reviews.native-runtime.findings.NR-1.tracking_issue", "invalid value"),
        (ledger_text(state="half"), "reviews.native-runtime.state", "invalid value"),
        (ledger_text(top='signed_off = true\n'), "signed_off", "unknown key"),
        (ledger_text().replace(f'release = "{RELEASE}"', 'release = "v0.13.1"'), "release", "another release"),
        (ledger_text().replace("schema_version = 1", "schema_version = 2"), "schema_version", "invalid value"),
        (ledger_text(reviewed=""), "reviews.native-runtime.reviewed", "names no artefact"),
        (ledger_text(reviewed=f'"sbom:x" = "{SET}"\n'), "reviews.native-runtime.reviewed", "unknown artefact label"),
        (ledger_text(reviewed=f'"set:rtx4090-windows-native" = "{SET.upper()}"\n'), "reviews.native-runtime.reviewed.set:rtx4090-windows-native", "digest its label needs"),
        (ledger_text(reviewed=f'"image:rtx5090-container" = "{"b" * 64}"\n'), "reviews.native-runtime.reviewed.image:rtx5090-container", "digest its label needs"),
        (ledger_text().replace("Closed without remediation.", "Closed\\u202ewithout remediation."), "reviews.native-runtime.disposition", "invalid value"),
        (ledger_text().replace("[reviews.native-runtime]", "[reviews.Native_Runtime]").replace("[reviews.native-runtime.", "[reviews.Native_Runtime."), "reviews", "not a council name"),
    ],
)
def test_a_hostile_or_malformed_ledger_is_refused_naming_the_key(text, field, words):
    with pytest.raises(InputError) as caught:
        parse(text)
    assert caught.value.file == FILE and caught.value.field == field and words in caught.value.what, caught.value.render()


def test_duplicates_crlf_and_oversize_are_refused_before_any_value_is_read():
    doubled = ledger_text() + '\n[reviews.native-runtime]\nstate = "open"\n'
    for data in (doubled.encode(), ledger_text().replace("\n", "\r\n").encode(), b"# " + b"x" * MAX_LEDGER_BYTES + b"\n" + ledger_text().encode()):
        with pytest.raises(InputError) as caught:
            parse_ledger(data, release=RELEASE, file=FILE)
        assert caught.value.file == FILE


def test_a_linked_ledger_is_refused_and_a_missing_one_is_none(tmp_path):
    tree = tmp_path / "manifests" / RELEASE
    tree.mkdir(parents=True)
    assert read_ledger(tmp_path, RELEASE) is None
    (tmp_path / "elsewhere.toml").write_text(ledger_text())
    os.symlink(tmp_path / "elsewhere.toml", tree / "reviews.toml")
    with pytest.raises(InputError) as caught:
        read_ledger(tmp_path, RELEASE)
    assert caught.value.file == FILE and "regular file" in caught.value.what


def manifest_of(document: dict) -> ReleaseManifest:
    return parse_manifest(json.dumps(document).encode(), source="manifest.json", check_type=False)


def test_the_bound_ledger_must_be_the_bytes_the_manifest_binds():
    data = ledger_text(findings=finding()).encode()
    written = {"release": RELEASE, "reviews": {"path": FILE, "sha256": sha256_bytes(data), "public_url": None},
               "components": {"ninfer": None, "ninfer_variants": [{"id": "rtx4090-windows-native", "checksums_sha256": SET}]},
               "qualification": {"acceptance": {"candidate_commit": CANDIDATE}}}
    manifest = manifest_of(written)
    ledger, failures = bound_ledger(manifest, data, release=RELEASE, origin=FILE)
    assert ledger is not None and [(f.council, f.finding) for f in failures] == [("native-runtime", "NR-1"), ("native-runtime", None)]  # and the image it names is not bound
    changed = data.replace(b"Seen by", b"seen by")
    with pytest.raises(IntegrityError) as caught:
        bound_ledger(manifest, changed, release=RELEASE, origin=FILE)
    assert caught.value.field == "reviews.sha256" and caught.value.expected == sha256_bytes(data)
    with pytest.raises(IntegrityError):
        bound_ledger(manifest, None, release=RELEASE, origin=FILE)
    assert bound_ledger(manifest_of({"release": "v0.13.1"}), None, release="v0.13.1", origin=FILE) == (None, [])  # made before the ledger
    _none, (missing,) = bound_ledger(manifest_of({**written, "reviews": None}), None, release=RELEASE, origin=FILE)
    assert "no review ledger is bound" in missing.what


# -- the reviews together cover what the release binds (issue #30 §2, hostile review) -------------


def test_a_trivial_ledger_does_not_clear_the_gate_every_bound_artefact_needs_a_closed_review():
    trivial = parse(f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n\n'
                    f'[reviews.x]\nstate = "closed"\ndisposition = "Looked."\n\n[reviews.x.reviewed]\nmanifest-candidate = "{CANDIDATE}"\n')
    failures = gate_failures(trivial, BOUND, release=RELEASE)
    assert [f.what for f in failures] == [
        "no closed review covers image:rtx5090-container sha256:bbbbbbbbbbbb, which the release binds",
        "no closed review covers set:rtx4090-windows-native aaaaaaaaaaaa, which the release binds",
    ]
    assert all(f.council is None and FILE in f.fix for f in failures)
    # an open review covers nothing: its failure and one per subject
    assert [f.what for f in gate_failures(parse(ledger_text(state="open")), BOUND, release=RELEASE)][1:] == [
        f"no closed review covers {label} {digest[:19] if digest.startswith('sha256:') else digest[:12]}, which the release binds"
        for label, digest in sorted(BOUND.items()) if label != "manifest-candidate"]


def test_the_candidate_commit_need_not_be_named_but_when_named_must_be_the_accepted_one():
    """What ships (sets, image) must be covered; the candidate commit may be missing from the ledger (written before
    the candidate's commit exists), but a review naming another candidate is a review of other bytes."""
    ships_only = parse(f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n\n'
                       f'[reviews.x]\nstate = "closed"\ndisposition = "Looked."\n\n[reviews.x.reviewed]\n'
                       f'"set:rtx4090-windows-native" = "{SET}"\n"image:rtx5090-container" = "{IMAGE}"\n')
    assert gate_failures(ships_only, BOUND, release=RELEASE) == []
    other = parse(ledger_text(reviewed=f'manifest-candidate = "{"e" * 40}"\n'))
    assert any("review of other bytes does not count" in f.fix for f in gate_failures(other, BOUND, release=RELEASE))


def test_two_councils_may_share_the_subjects_and_release_toml_may_require_councils():
    text = (f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n\n'
            f'[reviews.native-runtime]\nstate = "closed"\ndisposition = "Closed."\n\n[reviews.native-runtime.reviewed]\n"set:rtx4090-windows-native" = "{SET}"\n\n'
            f'[reviews.product-tooling]\nstate = "closed"\ndisposition = "Closed."\n\n[reviews.product-tooling.reviewed]\n'
            f'"image:rtx5090-container" = "{IMAGE}"\nmanifest-candidate = "{CANDIDATE}"\n')
    ledger = parse(text)
    assert gate_failures(ledger, BOUND, release=RELEASE, councils=("native-runtime", "product-tooling")) == []
    (missing,) = gate_failures(ledger, BOUND, release=RELEASE, councils=("native-runtime", "product-tooling", "security"))
    assert missing.council == "security" and "requires, recorded no review" in missing.what and "[reviews.security]" in missing.fix


@pytest.mark.parametrize("tracking", ["../..#1", "-/-#1", "_/.#999999999", "a-/b#1", "-a/b#1", "a--b/c#1", "o/.#1", "o/..#1", "#0", "#1000000000",
                                      "o" * 40 + "/r#1", "o/" + "r" * 101 + "#1", "o/r#01", "o/r/x#1", "o/r"])
def test_a_tracking_issue_follows_githubs_naming_rules(tracking):
    with pytest.raises(InputError) as caught:
        parse(ledger_text(findings=finding(state="deferred", tracking=tracking)))
    assert caught.value.field == "reviews.native-runtime.findings.NR-1.tracking_issue" and "product repository" in str(caught.value.expected)


@pytest.mark.parametrize("tracking", ["#1", "#999999999", "alphastorm/omp-ninfer#88", "a-b-c/d.e_f-g#2", "o" * 39 + "/" + "r" * 100 + "#3", "o/...#4", "o/.github#5"])
def test_a_tracking_issue_by_githubs_rules_is_accepted(tracking):
    (deferred,) = parse(ledger_text(findings=finding(state="deferred", tracking=tracking))).deferred()
    assert deferred[1].tracking_issue == tracking


def test_pipeline_commit_is_no_label_the_tree_records_no_pipeline_commit_to_check_it_against():
    with pytest.raises(InputError) as caught:
        parse(ledger_text(reviewed=f'pipeline-commit = "{"d" * 40}"\n'))
    assert caught.value.field == "reviews.native-runtime.reviewed" and "unknown artefact label" in caught.value.what
    assert "does not record which pipeline commit" in caught.value.why and "manifest-candidate" in str(caught.value.expected)


def _release_toml(tmp_path, release: str, reviews: str):
    """The seeded v0.13.1 input, as `release`, with a [reviews] table."""
    from repokit import ROOT

    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.spec import load_release_toml

    text = (ROOT / "manifests" / "v0.13.1" / "release.toml").read_text().replace('release = "v0.13.1"', f'release = "{release}"')
    (tmp_path / "manifests" / release).mkdir(parents=True)
    (tmp_path / "manifests" / release / "release.toml").write_text(text + reviews)
    return load_release_toml(tmp_path, release, load_lanes())


def test_release_toml_declares_the_required_councils_strictly(tmp_path):
    spec = _release_toml(tmp_path / "a", RELEASE, '\n[reviews]\ncouncils = ["product-tooling", "native-runtime"]\n')
    assert spec.review_councils == ("native-runtime", "product-tooling")
    for councils, field in (('["native-runtime", "native-runtime"]', "reviews.councils"), ("[]", "reviews.councils"), ('["Native"]', "reviews.councils[0]")):
        with pytest.raises(InputError) as caught:
            _release_toml(tmp_path / field / str(len(councils)), RELEASE, f"\n[reviews]\ncouncils = {councils}\n")
        assert caught.value.field == field, caught.value.render()
    with pytest.raises(InputError) as caught:  # a release made before the ledger requires none
        _release_toml(tmp_path / "old", "v0.13.1", '\n[reviews]\ncouncils = ["native-runtime"]\n')
    assert caught.value.field == "reviews" and "before the review ledger" in caught.value.what
