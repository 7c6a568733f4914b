"""The review ledger of a release, `manifests/<release>/reviews.toml` (`omp_ninfer_review_ledger`).

The councils that review a release candidate (e.g. native-runtime, product-tooling) record here
what they reviewed, by digest, and what they found: each finding's severity (P0-P3), scope (in /
out), state (confirmed / unresolved / refuted / fixed / deferred), disposition, and for a deferred
one the issue that tracks it.  docs/review-ledger.md is the contract.

Why TOML in the tree: the ledger is written by people (the councils' secretaries), as
`release.toml` is, so it is the tree's second hand-written input, in the same strict TOML subset
(duplicate keys are refused by the grammar, so a council or finding cannot appear twice); the
manifest binds its bytes by SHA-256 and a raw URL pinned at a commit, like every other record.

This module is the one owner: `parse_ledger` hashes the raw bytes before it parses them, reads
them bounded and strictly into a frozen `Ledger`, and refuses hostile or malformed input with an
InputError naming the file, the key, what was found and what was expected.  `gate_failures` is the
one release gate over a ledger (compose's blockers, `compose promote --to ready`, `publish
--release` and `audit` all call it): every review closed, no in-scope P0/P1 confirmed or
unresolved, every deferred finding tracked, every reviewed digest one the release binds, every
artefact the release binds covered by a closed review, every council release.toml requires present.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError
from pipeline.formats.release.names import RELEASE_RE, REVIEWS, repo_path
from pipeline.formats.routes import hidden_character
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.schema import Field, matches, one_of, read_table

if TYPE_CHECKING:
    from pipeline.formats.release.manifest import ReleaseManifest

LEDGER_TYPE = "omp_ninfer_review_ledger"
SCHEMA_VERSION = 1
MAX_LEDGER_BYTES = 256 * 1024  # a ledger of dozens of councils and hundreds of findings is far below this
MAX_REVIEWS = 32
MAX_FINDINGS = 512  # per review
MAX_TEXT = 2000  # characters of one disposition

REVIEW_STATES = ("open", "closed")
SEVERITIES = ("P0", "P1", "P2", "P3")
SCOPES = ("in", "out")
FINDING_STATES = ("confirmed", "unresolved", "refuted", "fixed", "deferred")
# The findings that hold a release: in scope, P0 or P1, and not yet refuted, fixed or deferred.
BLOCKING_SEVERITIES = ("P0", "P1")
BLOCKING_STATES = ("confirmed", "unresolved")

COUNCIL_RE = r"[a-z0-9][a-z0-9-]{0,62}"
FINDING_ID_RE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
# What a review names by digest, each under its label (docs/review-ledger.md, "Reviewed artefacts"):
#   set:<lane>          the lane's closed asset set, as the SHA-256 of its outer SHA256SUMS
#   image:<lane>        the container lane's image, as its OCI manifest digest 'sha256:<64 hex>'
#   manifest-candidate  the candidate commit whose manifest the council reviewed (40 hex)
# No label names the pipeline's commit: the tree does not record which pipeline commit built a set
# (its provenance names the builder, the pipeline's version and its requirements lock), and the
# candidate commit, where the tree and the pipeline live, is `manifest-candidate` already.
LANE_LABEL = r"(set|image):[a-z0-9][a-z0-9-]{0,62}"
COMMIT_LABELS = ("manifest-candidate",)
LABELS_TEXT = "set:<lane>, image:<lane> or manifest-candidate"
# A tracking issue: 'owner/repo#N', or '#N' for an issue of the product repository (names.py:
# PRODUCT_REPO_SLUG), by GitHub's naming rules: an owner is letters, digits and single inner hyphens,
# at most 39; a repository name is letters, digits, '.', '_' and '-', at most 100, never '.' or '..';
# an issue number is 1..999999999.
OWNER_RE = r"[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}"
REPOSITORY_NAME_RE = r"(?!\.{1,2}#)[A-Za-z0-9._-]{1,100}"
TRACKING_RE = rf"(?:{OWNER_RE}/{REPOSITORY_NAME_RE})?#[1-9][0-9]{{0,8}}"


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value.strip()) > 0 and len(value) <= MAX_TEXT and hidden_character(value, allowed="") is None


_TEXT = "one line of printable text, 1-2000 characters (no control, format or non-ASCII space characters)"
_TOP = {
    "artifact_type": Field(str, check=one_of(LEDGER_TYPE), expected=repr(LEDGER_TYPE)),
    "schema_version": Field(int, check=lambda v: v == SCHEMA_VERSION, expected=str(SCHEMA_VERSION)),
    "release": Field(str, check=lambda v: bool(RELEASE_RE.fullmatch(v)), expected="a product release 'vX.Y.Z' or 'vX.Y.Z-beta.N'"),
    "reviews": Field(dict, expected="[reviews.<council>] tables"),
}
_REVIEW = {
    "state": Field(str, check=one_of(*REVIEW_STATES), expected="'open' or 'closed'"),
    "disposition": Field(str, check=_text, expected=_TEXT),
    "reviewed": Field(dict, expected="a [reviews.<council>.reviewed] table: label = digest"),
    "findings": Field(dict, required=False, default={}, expected="[reviews.<council>.findings.<id>] tables"),
}
_FINDING = {
    "severity": Field(str, check=one_of(*SEVERITIES), expected="one of " + ", ".join(SEVERITIES)),
    "scope": Field(str, check=one_of(*SCOPES), expected="'in' or 'out'"),
    "state": Field(str, check=one_of(*FINDING_STATES), expected="one of " + ", ".join(FINDING_STATES)),
    "disposition": Field(str, check=_text, expected=_TEXT),
    "tracking_issue": Field(str, required=False, check=matches(TRACKING_RE), expected="'#N' (an issue of the product repository) or 'owner/repo#N' by GitHub's naming rules"),
}


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    scope: str
    state: str
    disposition: str
    tracking_issue: str | None

    @property
    def blocking(self) -> bool:
        """In scope, P0/P1, and neither refuted, fixed nor deferred: the release waits for it."""
        return self.scope == "in" and self.severity in BLOCKING_SEVERITIES and self.state in BLOCKING_STATES


@dataclass(frozen=True)
class Review:
    council: str
    state: str
    disposition: str
    reviewed: tuple[tuple[str, str], ...]  # (label, digest), sorted by label
    findings: tuple[Finding, ...]  # sorted by id


@dataclass(frozen=True)
class Ledger:
    release: str
    path: str  # repository-relative
    sha256: str  # of the raw bytes, taken before parsing
    reviews: tuple[Review, ...]  # sorted by council

    def deferred(self) -> list[tuple[str, Finding]]:
        return [(review.council, f) for review in self.reviews for f in review.findings if f.state == "deferred"]


def ledger_path(release: str) -> str:
    return repo_path(release, REVIEWS)


def _digest_problem(label: str, digest: Any) -> str | None:
    """Why `digest` is not the digest form of `label`, or None."""
    if label in COMMIT_LABELS:
        return None if is_commit_hex(digest) else "a full 40-hex commit"
    if re.fullmatch(LANE_LABEL, label):
        if label.startswith("set:"):
            return None if is_sha256_hex(digest) else "the lowercase 64-hex SHA-256 of the set's outer SHA256SUMS"
        ok = isinstance(digest, str) and digest.startswith("sha256:") and is_sha256_hex(digest[7:])
        return None if ok else "an OCI manifest digest 'sha256:<64 hex>'"
    return f"a label {LABELS_TEXT}"


def _read_reviewed(table: dict[str, Any], *, file: str, prefix: str) -> tuple[tuple[str, str], ...]:
    if not table:
        raise InputError("a review names no artefact it reviewed", file=file, field=prefix,
                         expected=f"label = digest entries ({LABELS_TEXT})",
                         why="a review of unnamed bytes cannot be checked against what the release binds")
    out = []
    for label, digest in sorted(table.items()):
        problem = _digest_problem(label, digest)
        if problem is not None:
            unknown_label = problem.startswith("a label")
            why = ("the tree does not record which pipeline commit built the sets, so no digest could be checked against it; "
                   "the candidate commit (tree and pipeline) is manifest-candidate") if label == "pipeline-commit" else None
            raise InputError("names an unknown artefact label" if unknown_label else "is not the digest its label needs", file=file,
                             field=prefix if unknown_label else f"{prefix}.{label}", found=label if unknown_label else digest, expected=problem, why=why,
                             fix="name what the council reviewed by the labels of docs/review-ledger.md, 'What the release binds'" if unknown_label else None)
        out.append((label, digest))
    return tuple(out)


def _read_finding(finding_id: str, table: Any, *, file: str, prefix: str) -> Finding:
    if not re.fullmatch(FINDING_ID_RE, finding_id):
        raise InputError("is not a finding id", file=file, field=prefix, found=finding_id, expected=f"letters, digits, '.', '_' or '-' ({FINDING_ID_RE})")
    where = f"{prefix}.{finding_id}"
    entry = read_table(table, _FINDING, file=file, prefix=where)
    return Finding(finding_id, entry["severity"], entry["scope"], entry["state"], entry["disposition"], entry["tracking_issue"])


def parse_ledger(data: bytes, *, release: str, file: str) -> Ledger:
    """The ledger of `release` from its raw bytes: hashed first, then read bounded and strictly.

    Raises InputError naming the file and the key for every defect: too large, not UTF-8/TOML, an
    unknown key, a wrong type or value, text a reader cannot see, another release.
    """
    from pipeline.util.jsonio import loads_toml

    digest = sha256_bytes(data)  # hash before parse: the bytes the manifest binds are the bytes read
    document = loads_toml(data, source=file, max_bytes=MAX_LEDGER_BYTES)
    top = read_table(document, _TOP, file=file, fix=f"the ledger's keys are {', '.join(sorted(_TOP))} (docs/review-ledger.md)")
    if top["release"] != release:
        raise InputError("names another release than its folder", file=file, field="release", found=top["release"], expected=repr(release))
    if len(top["reviews"]) > MAX_REVIEWS:
        raise InputError(f"holds more than {MAX_REVIEWS} reviews", file=file, field="reviews", found=len(top["reviews"]))
    reviews = []
    for council in sorted(top["reviews"]):
        if not re.fullmatch(COUNCIL_RE, council):
            raise InputError("is not a council name", file=file, field="reviews", found=council, expected=f"lower-case letters, digits and '-' ({COUNCIL_RE})")
        prefix = f"reviews.{council}"
        entry = read_table(top["reviews"][council], _REVIEW, file=file, prefix=prefix)
        findings_table = entry["findings"] or {}
        if len(findings_table) > MAX_FINDINGS:
            raise InputError(f"holds more than {MAX_FINDINGS} findings", file=file, field=f"{prefix}.findings", found=len(findings_table))
        findings = tuple(_read_finding(fid, findings_table[fid], file=file, prefix=f"{prefix}.findings") for fid in sorted(findings_table))
        reviewed = _read_reviewed(entry["reviewed"], file=file, prefix=f"{prefix}.reviewed")
        reviews.append(Review(council, entry["state"], entry["disposition"], reviewed, findings))
    return Ledger(release, file, digest, tuple(reviews))


def read_ledger(root: Path, release: str) -> Ledger | None:
    """The ledger in the tree of `release`, or None when the tree holds none; a link or a non-file is refused."""
    from pipeline.util.fs import read_bytes_bounded

    rel = ledger_path(release)
    path = root / rel
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise InputError("is not a regular file", file=rel, why="a link could make the ledger's bytes those of another file", fix="replace it by the file itself")
    return parse_ledger(read_bytes_bounded(path, MAX_LEDGER_BYTES, what="the review ledger"), release=release, file=rel)


def short_digest(digest: str) -> str:
    """A digest as a person reads it: 12 hex characters (after 'sha256:' for an OCI digest)."""
    return digest[:19] if digest.startswith("sha256:") else digest[:12]


@dataclass(frozen=True)
class GateFailure:
    """One way a ledger holds the release: which review, which finding (or None), what and the fix."""

    council: str | None
    finding: str | None
    what: str
    fix: str

    def text(self) -> str:
        return f"{self.what}; {self.fix}"


OPTIONAL_COVERAGE = frozenset({"manifest-candidate"})


def gate_failures(ledger: Ledger | None, bound: Mapping[str, str], *, release: str, councils: Sequence[str] = ()) -> list[GateFailure]:
    """Every way `ledger` keeps `release` from ready, in ledger order; [] when the reviews clear it.

    `bound` maps each artefact label to the digest the release binds (`formats/release/manifest.py:
    review_subjects`): a review of other bytes does not count, and every one of them must be covered by
    a closed review.  `councils` are those release.toml requires (`[reviews] councils`): each must have
    recorded a review.
    """
    where = ledger_path(release)
    if ledger is None:
        return [GateFailure(None, None, "no review ledger is bound", f"when the councils have reviewed the candidate, record them in {where} (docs/review-ledger.md)")]
    if not ledger.reviews:
        return [GateFailure(None, None, "the review ledger records no review", f"record each council's review in {where}")]
    out: list[GateFailure] = []
    for review in ledger.reviews:
        name = review.council
        if review.state != "closed":
            out.append(GateFailure(name, None, f"the {name} review is open", f"close it (state = \"closed\") in {where} once every finding has its disposition"))
        for finding in review.findings:
            label = f"the {name} review's finding {finding.id} ({finding.severity}, in scope)"
            if finding.blocking:
                out.append(GateFailure(name, finding.id, f"{label} is {finding.state}", f"fix it (state \"fixed\"), refute it or defer it with a tracking issue in {where}; an in-scope P0/P1 that is confirmed or unresolved holds the release"))
            if finding.state == "deferred" and finding.tracking_issue is None:
                out.append(GateFailure(name, finding.id, f"the {name} review's finding {finding.id} is deferred without a tracking issue", f"name the issue that tracks it (tracking_issue = \"#N\") in {where}"))
        for label, digest in review.reviewed:
            expected = bound.get(label)
            if expected is None:
                out.append(GateFailure(name, None, f"the {name} review names {label} {short_digest(digest)}, which the release does not bind", f"review the artefacts this release binds ({', '.join(sorted(bound)) or 'none yet'}) and record their digests in {where}"))
            elif expected != digest:
                out.append(GateFailure(name, None, f"the {name} review reviewed {label} {short_digest(digest)}, but the release binds {short_digest(expected)}", f"a review of other bytes does not count: re-review {label} at {expected} and record it in {where}"))
    return out + _coverage_failures(ledger, bound, councils, where=where)


def _coverage_failures(ledger: Ledger, bound: Mapping[str, str], councils: Sequence[str], *, where: str) -> list[GateFailure]:
    """The councils release.toml requires that recorded no review, and each artefact the release binds that no
    closed review names at its bound digest: together the reviews must cover everything the release ships."""
    recorded = {review.council for review in ledger.reviews}
    out = [GateFailure(council, None, f"the {council} council, which release.toml requires, recorded no review",
                       f"record its review as [reviews.{council}] in {where}, or remove it from reviews.councils in release.toml if the release does not need it")
           for council in councils if council not in recorded]
    covered = {(label, digest) for review in ledger.reviews if review.state == "closed" for label, digest in review.reviewed}
    for label, digest in sorted(bound.items()):
        # What ships (every set, the image) must be covered; the candidate commit may be named, and then must match,
        # but is not required: the ledger is often written for the candidate's artefacts before its commit exists.
        if label not in OPTIONAL_COVERAGE and (label, digest) not in covered:
            out.append(GateFailure(None, None, f"no closed review covers {label} {short_digest(digest)}, which the release binds",
                                   f"a council reviews it and records {label} = \"{digest}\" under its reviewed table in {where}"))
    return out


def ledger_facts(ledger: Ledger) -> dict[str, Any]:
    """The ledger as plain data (for `diff`, `status --json` and the notes), in ledger order."""
    return {
        "path": ledger.path,
        "sha256": ledger.sha256,
        "reviews": {
            review.council: {
                "state": review.state,
                "disposition": review.disposition,
                "reviewed": dict(review.reviewed),
                "findings": {
                    f.id: {"severity": f.severity, "scope": f.scope, "state": f.state, "disposition": f.disposition, "tracking_issue": f.tracking_issue,
                          "blocking": f.blocking}
                    for f in review.findings
                },
            }
            for review in ledger.reviews
        },
    }


def bound_ledger(manifest: ReleaseManifest, data: bytes | None, *, release: str, origin: str) -> tuple[Ledger | None, list[GateFailure]]:
    """The ledger a manifest binds, from the bytes found for it (at a commit, at its URL), and the gate over it.

    (None, []) for a release made before the ledger (its manifest has no `reviews`); a manifest of a later
    release without a bound ledger fails the gate.  Bytes that are missing or differ from the manifest's
    SHA-256 are an IntegrityError naming `origin` (a changed ledger byte never passes); unreadable bytes an
    InputError.  `publish --release` and `audit` call this; compose derives the same gate from the tree.
    """
    from pipeline.errors import IntegrityError
    from pipeline.formats.release.names import review_ledger_required

    if not review_ledger_required(release) and not manifest.has("reviews"):
        return None, []
    entry = manifest.value("reviews")
    bound = manifest.review_subjects()
    if not isinstance(entry, dict):
        return None, gate_failures(None, bound, release=release)
    if entry.get("path") != ledger_path(release):
        raise InputError("does not bind the release's review ledger", file=origin, field="reviews.path", found=entry.get("path"), expected=ledger_path(release))
    if data is None:
        raise IntegrityError("the review ledger the manifest binds is missing", file=origin, field="reviews.path", found=entry.get("path"),
                             fix="publish the commit that holds the ledger the manifest binds")
    digest = sha256_bytes(data)
    if digest != entry.get("sha256"):
        raise IntegrityError("the review ledger differs from the bytes the manifest binds", file=origin, field="reviews.sha256", found=digest, expected=entry.get("sha256"),
                             why="a ledger changed after it was bound (or another file) is not the councils' record for this release",
                             fix=f"restore the bound ledger, or rebind the changed one: python -m pipeline compose rebind --release {release}")
    ledger = parse_ledger(data, release=release, file=origin)
    return ledger, gate_failures(ledger, bound, release=release)
