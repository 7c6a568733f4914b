"""Deriving a release tree: every derived record from release.toml and the evidence, in one fixed order.

Nothing in a tree is typed by hand except `release.toml`: the manifest, the
qualification summary, the compatibility authority and both Markdown
renderings are computed from that file plus the evidence bytes in the tree
(lane receipts, checksum files, the image publication receipt, the
acceptance record) and the predecessor's manifest, in one fixed order (the
hash chain):

    lane receipts and checksum copies -> lane rows -> authority and summary -> manifest

`derive()` never raises for a defect in the evidence: it records a Problem
(file, field, found, expected) and carries on with null, so that `verify` can
report every error in one run and `compose` can refuse with all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError
from pipeline.formats.assets import parse_sums
from pipeline.formats.lanes import Lane, load_lanes
from pipeline.formats.receipts import LANE_RECEIPT_STATUSES, ReceiptFacts, publication_facts, receipt_facts
from pipeline.formats.release.evidence import (
    classify_asset,
    collect_pins,
    expected_names,
    file_sha256,
    predecessor_row,
    read_evidence_json,
)
from pipeline.formats.release.manifest import component_lane_rows, review_subjects
from pipeline.formats.release.names import (
    ACCEPTANCE,
    AUTHORITY,
    AUTHORITY_MD,
    AUTHORITY_TYPE,
    BUNDLE_SUFFIX,
    EXTERNAL_INSTALL,
    MANIFEST,
    MANIFEST_TYPE,
    NINFER_REPOSITORY,
    NOTES,
    OIDC_ISSUER,
    PINS,
    PRODUCT_NAME,
    PRODUCT_REPOSITORY,
    PUBLICATION_RECEIPT,
    REVIEWS_SUBJECT,
    ROW_RECORDS,
    STATES,
    SUMMARY,
    SUMMARY_TYPE,
    asset_url,
    component_publication_name,
    evidence_promise,
    image_provenance_name,
    package_prefix,
    parse_raw_url,
    provenance_name,
    receipt_name,
    repo_path,
    review_ledger_required,
    role_fields,
    row_path,
    signer_identity,
    split_image_reference,
    sums_name,
)
from pipeline.formats.release.problems import Problems
from pipeline.formats.release.render import render_authority, render_notes
from pipeline.formats.release.spec import SHIPPED, LaneInput, ReleaseInput, load_release_toml
from pipeline.formats.review_ledger import Ledger, gate_failures, ledger_path, read_ledger
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import canonical_bytes


@dataclass
class Derived:
    release: ReleaseInput | None
    manifest: dict[str, Any] | None
    summary: dict[str, Any] | None
    authority: dict[str, Any] | None
    authority_md: str | None
    notes: str | None
    # repository path -> why the file belongs to the tree (every file of a closed tree)
    files: dict[str, str] = field(default_factory=dict)
    # null install-relevant identities: manifest field path
    nulls: list[str] = field(default_factory=list)
    derived_blockers: list[str] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)
    ledger: Ledger | None = None  # the review ledger the tree binds (formats/review_ledger.py), when it holds one


@dataclass(frozen=True)
class DerivedReviews:
    required: bool  # the manifest carries `reviews` (every release after v0.13.1)
    entry: dict[str, Any] | None  # {path, sha256, public_url} of the bound ledger
    ledger: Ledger | None
    blockers: list[str]


def _pin(pins: dict[str, str], path: str | None) -> str | None:
    if not path:
        return None
    url = pins.get(path)
    parsed = parse_raw_url(url)
    return url if parsed and parsed[1] == path else None


def _derive_acceptance(root: Path, release: str, pins: dict[str, str], problems: Problems, files: dict[str, str]) -> dict[str, Any] | None:
    """The manifest's acceptance entry from the tree's acceptance record, when there is one."""
    acceptance_rel = repo_path(release, ACCEPTANCE)
    if not (root / acceptance_rel).exists():
        return None
    files[acceptance_rel] = "acceptance"
    record = read_evidence_json(root, acceptance_rel, problems, "acceptance")
    if record is None:
        return None
    candidate = record.get("candidate_commit")
    return {
        "path": acceptance_rel,
        "sha256": file_sha256(root, acceptance_rel),
        "public_url": _pin(pins, acceptance_rel),
        "status": record.get("status") if record.get("status") in ("passed", "failed") else None,
        "candidate_commit": candidate if is_commit_hex(candidate) else None,
    }


def _derive_reviews(root: Path, release: str, pins: dict[str, str], problems: Problems, files: dict[str, str], bound: dict[str, str],
                    councils: tuple[str, ...]) -> DerivedReviews:
    """The manifest's `reviews` entry and the `reviews: ...` blockers from the tree's review ledger.

    Trees of the releases before the ledger existed carry neither (their manifests never change); a
    ledger that cannot be read is a problem (compose refuses it, verify reports it) and holds the release.
    """
    if not review_ledger_required(release):
        return DerivedReviews(False, None, None, [])
    rel = ledger_path(release)
    try:
        ledger = read_ledger(root, release)
    except PipelineError as error:
        problems.add_error("input", error)
        files[rel] = "input"
        return DerivedReviews(True, None, None, [f"{REVIEWS_SUBJECT}: the review ledger {rel} cannot be read: {error.field + ': ' if error.field else ''}{error.what}; correct it (docs/review-ledger.md)"])
    if ledger is not None:
        files[rel] = "input"
    entry = None if ledger is None else {"path": rel, "sha256": ledger.sha256, "public_url": _pin(pins, rel)}
    blockers = [f"{REVIEWS_SUBJECT}: {failure.text()}" for failure in gate_failures(ledger, bound, release=release, councils=councils)]
    return DerivedReviews(True, entry, ledger, blockers)


def _unpinned_records(manifest: dict[str, Any], authority_rel: str, shipped_rows: list[dict[str, Any]], acceptance: dict[str, Any] | None) -> list[str]:
    """The tree's records whose raw URL is not pinned yet.  Pins come last in the chain: a record's raw URL
    can only name a commit holding its bytes."""
    records = [(manifest["qualification"]["summary"], manifest["qualification"]["public_url"]), (authority_rel, manifest["compatibility"]["public_url"])]
    for row in shipped_rows:
        if row["qualification"]["summary"]:
            records.append((row["qualification"]["summary"], row["qualification"]["public_url"]))
        for key in ROW_RECORDS:
            if isinstance(row.get(key), dict):
                records.append((row[key]["path"], row[key]["public_url"]))
    if acceptance:
        records.append((acceptance["path"], acceptance["public_url"]))
    if isinstance(manifest.get("reviews"), dict):
        records.append((manifest["reviews"]["path"], manifest["reviews"]["public_url"]))
    return sorted({path for path, url in records if url is None})


def _pin_blocker(release: str, unpinned: list[str]) -> str:
    prefix = repo_path(release, "")
    return (
        f"{PINS}: {len(unpinned)} records have no raw URL pinned at a commit yet ({', '.join(p.removeprefix(prefix) for p in unpinned)}); "
        f"commit the tree, then run 'python -m pipeline compose rebind --release {release} --pin COMMIT' until none remain"
    )


def derive(
    root: Path,
    release: str,
    problems: Problems,
    *,
    lanes: dict[str, Lane] | None = None,
    current: dict[str, Any] | None = None,
    status: str | None = None,
    pins: dict[str, str] | None = None,
) -> Derived:
    """Compute every derived file of the tree from release.toml and the evidence in it."""
    lanes = lanes or load_lanes()
    files: dict[str, str] = {}
    try:
        rt = load_release_toml(root, release, lanes)
    except PipelineError as error:
        problems.add_error("input", error)
        return Derived(None, None, None, None, None, None, files)
    files[rt.path] = "input"
    pins = collect_pins(current) if pins is None else pins
    if status is None:
        status = current.get("status") if isinstance(current, dict) and current.get("status") in STATES else "draft"

    # predecessor
    pred_manifest = None
    predecessor = None
    if rt.predecessor:
        pred_rel = repo_path(rt.predecessor, MANIFEST)
        pred_manifest = read_evidence_json(root, pred_rel, problems, "input")
        predecessor = {"release": rt.predecessor, "manifest_sha256": file_sha256(root, pred_rel)}

    client = _derive_client(rt)
    model = _derive_model(rt)
    rows: dict[str, dict[str, Any]] = {}
    receipts: dict[str, ReceiptFacts] = {}
    for lane_id, li in rt.lanes.items():
        if li.status not in SHIPPED:
            continue
        row, facts = _derive_row(root, rt, li, lanes[lane_id], pred_manifest, pins, model, problems, files)
        rows[lane_id] = row
        if facts is not None:
            receipts[lane_id] = facts

    container_rows = [lane_id for lane_id in rows if lanes[lane_id].kind == "container"]
    if len(container_rows) > 1:
        problems.add("input", "a release has at most one container lane", file=rt.path, found=container_rows)
    components = {
        "omp": client,
        "model": model,
        "ninfer": rows[container_rows[0]] if container_rows else None,
        "ninfer_variants": [rows[k] for k in sorted(rows) if lanes[k].kind != "container"],
    }

    acceptance = _derive_acceptance(root, release, pins, problems, files)
    accepted = bool(acceptance and acceptance["status"] == "passed")
    reviews = _derive_reviews(root, release, pins, problems, files, review_subjects({"components": components, "qualification": {"acceptance": acceptance}}),
                              rt.review_councils)

    nulls = null_identities(components, lanes)
    derived_blockers = _blockers(rt, nulls, components, accepted) + reviews.blockers
    blockers = derived_blockers + [b for b in rt.blockers if b not in derived_blockers]

    deferred = {lane_id: li.deferral for lane_id, li in rt.lanes.items() if li.deferral is not None}
    shipped_rows = list(rows.values())
    qualified_rows = [row for row in shipped_rows if row["status"] == "qualified"]
    eligible = bool(qualified_rows) and all(row["qualification"]["status"] == "passed" for row in qualified_rows)

    summary = _summary(rt, rows, receipts, deferred, acceptance, accepted, eligible, blockers)
    summary_rel = repo_path(release, SUMMARY)
    summary_bytes = canonical_bytes(summary)
    authority = _authority(rt, rows, lanes, model, deferred)
    authority_rel = repo_path(release, AUTHORITY)
    authority_bytes = canonical_bytes(authority)
    authority_md = render_authority(authority)
    for rel, why in ((summary_rel, "summary"), (authority_rel, "authority"), (repo_path(release, AUTHORITY_MD), "rendering"), (repo_path(release, NOTES), "rendering"), (repo_path(release, MANIFEST), "manifest")):
        files[rel] = why

    primary = rows[container_rows[0]] if container_rows else (shipped_rows[0] if shipped_rows else None)
    signed = [repo_path(release, MANIFEST)] + sorted(row["checksums_path"] for row in shipped_rows if row.get("checksums_path"))
    manifest = {
        "artifact_type": MANIFEST_TYPE,
        "schema_version": 1,
        "release": release,
        "status": status,
        "channel": rt.channel,
        "audience": rt.audience,
        "product": {"name": PRODUCT_NAME, "repository": PRODUCT_REPOSITORY, "title": rt.title},
        "predecessor": predecessor,
        "inputs": {"release_toml": rt.path, "release_toml_sha256": rt.sha256},
        "components": components,
        "runtime_identity": None
        if primary is None
        else {
            "lane": primary["id"],
            "public_model_id": model["public_model_id"],
            "deployment_profile": primary["deployment_profile"],
            "configuration_sha256": primary["configuration_sha256"],
            "server_binary_sha256": primary["server_binary_sha256"],
            "model_artifact_sha256": model["artifact_sha256"],
            "source_commit": primary["source_commit"],
        },
        "compatibility": {
            "authority_id": authority["authority_id"],
            "path": authority_rel,
            "sha256": sha256_bytes(authority_bytes),
            "public_url": _pin(pins, authority_rel),
        },
        "qualification": {
            "summary": summary_rel,
            "summary_sha256": sha256_bytes(summary_bytes),
            "public_url": _pin(pins, summary_rel),
            "runtime_release_eligible": eligible,
            "external_installation_passed": accepted,
            "acceptance": acceptance,
            "deferred_scope": deferred,
        },
        "installation": {
            "silent_cloud_fallback": False,
            "lanes": {lane_id: rows[lane_id]["installable"] if lane_id in rows else False for lane_id in sorted(rt.lanes)},
        },
        "limitations": list(rt.limitations),
        "signing": _signing(release, signed),
        "publication": {"authorized": False, "targets": list(rt.targets), "blockers": list(blockers)},
    }
    if reviews.required:  # absent (not null) in trees made before the ledger, so released manifests never change
        manifest["reviews"] = reviews.entry
    unpinned = _unpinned_records(manifest, authority_rel, shipped_rows, acceptance)
    if unpinned:
        pin_blocker = _pin_blocker(release, unpinned)
        manifest["publication"]["blockers"].append(pin_blocker)
        derived_blockers = [*derived_blockers, pin_blocker]
    notes = render_notes(manifest, rt, summary, lanes=lanes, ledger=reviews.ledger)
    return Derived(rt, manifest, summary, authority, authority_md, notes, files, nulls, derived_blockers, unpinned, reviews.ledger)


def _signing(release: str, signed: list[str]) -> dict[str, Any]:
    """The expected signer, the signed files and the evidence promise (`signing.evidence`, docs/release-tree.md)."""
    signing: dict[str, Any] = {
        "certificate_identity": signer_identity(release),
        "certificate_oidc_issuer": OIDC_ISSUER,
        "bundle_suffix": BUNDLE_SUFFIX,
        "signed_files": signed,
    }
    promise = evidence_promise(release)
    if promise is not None:  # absent (not null) in trees made before it, so released manifests never change
        signing["evidence"] = promise
    return signing


def _derive_client(rt: ReleaseInput) -> dict[str, Any]:
    c = rt.client
    tag = c["upstream_tag"]
    return {
        "distribution_kind": "upstream-release",
        "upstream_repository": c["upstream_repository"],
        "upstream_tag": tag,
        "upstream_commit": c["upstream_commit"],
        "distribution_version": tag[1:],
        "release_id": c["release_id"],
        "published": c["published"],
        "platforms": [
            {
                "platform": p["platform"],
                "artifact_name": p["artifact_name"],
                "artifact_url": f"{c['upstream_repository']}/releases/download/{tag}/{p['artifact_name']}",
                "artifact_bytes": p["artifact_bytes"],
                "artifact_sha256": p["artifact_sha256"],
            }
            for p in rt.platforms
        ],
    }


def _derive_model(rt: ReleaseInput) -> dict[str, Any]:
    m = rt.model
    return {
        "repository": m["repository"],
        "revision": m["revision"],
        "artifact_name": m["artifact_name"],
        "artifact_url": f"{m['repository']}/resolve/{m['revision']}/{m['artifact_name']}" if m["revision"] else None,
        "artifact_bytes": m["artifact_bytes"],
        "artifact_sha256": m["artifact_sha256"],
        "public_model_id": m["public_model_id"],
        "published": m["published"],
    }


def _empty_row(lane: Lane, li: LaneInput) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": lane.id,
        "status": li.status,
        "installable": li.status == "qualified",
        "published": li.published,
        "rebound_from": None,
        "repository": NINFER_REPOSITORY,
        "release_tag": None,
        "deployment_profile": None,
        "source_commit": None,
        "upstream_commit": None,
        "server_binary_sha256": None,
        "configuration_sha256": None,
        "model_artifact_sha256": None,
        "checksums_path": None,
        "qualification": {"summary": None, "sha256": None, "public_url": None, "status": None},
    }
    pkg = package_prefix(lane.kind)
    row[f"{pkg}_name"] = None
    row[f"{pkg}_bytes"] = None
    for _role, prefix in role_fields(lane.kind):
        row[f"{prefix}_url"] = None
        row[f"{prefix}_sha256"] = None
    if lane.kind == "container":
        row.update({"oci_repository": None, "oci_reference": None, "oci_manifest_digest": None, "publication_receipt": None})
    return row


def _derive_row(
    root: Path,
    rt: ReleaseInput,
    li: LaneInput,
    lane: Lane,
    pred_manifest: dict[str, Any] | None,
    pins: dict[str, str],
    model: dict[str, Any],
    problems: Problems,
    files: dict[str, str],
) -> tuple[dict[str, Any], ReceiptFacts | None]:
    release = rt.release
    where = row_path(lane.id, lane.kind)
    row = _empty_row(lane, li)
    pkg = package_prefix(lane.kind)
    receipt_rel = repo_path(release, receipt_name(lane.id))
    sums_rel = repo_path(release, sums_name(lane.id))
    pub_rel = repo_path(release, PUBLICATION_RECEIPT)
    facts: ReceiptFacts | None = None

    if li.mode == "predecessor":
        old = predecessor_row(pred_manifest, lane.id)
        if old is None:
            problems.add("input", "the predecessor ships no row for this lane, so nothing can be rebound unchanged", file=rt.path, field=f"lanes.{lane.id}.from", found="predecessor", expected="'register' or 'pins' for a lane new in this release")
            return row, None
        for key in row:
            if key in old and key not in ("id", "status", "installable", "published", "rebound_from", "checksums_path", "qualification", "publication_receipt"):
                row[key] = old[key]
        row["rebound_from"] = rt.predecessor
        old_receipt_sha = (old.get("qualification") or {}).get("sha256") if isinstance(old.get("qualification"), dict) else None
        if old_receipt_sha:
            files[receipt_rel] = "receipt"
            actual = file_sha256(root, receipt_rel)
            if actual != old_receipt_sha:
                problems.add("receipts", "a rebound-unchanged receipt must be the predecessor's bytes", file=receipt_rel, field=f"{where}.qualification.sha256", found=actual, expected=old_receipt_sha, fix=f"copy {repo_path(rt.predecessor or '', receipt_name(lane.id))} byte for byte (compose stage does)")
            doc = read_evidence_json(root, receipt_rel, problems, "receipts")
            facts = receipt_facts(doc) if doc is not None else None
            row["qualification"] = {"summary": receipt_rel, "sha256": actual, "public_url": _pin(pins, receipt_rel), "status": facts.status if facts else None}
        if old.get("checksums_sha256"):
            files[sums_rel] = "checksums"
            row["checksums_path"] = sums_rel
            actual = file_sha256(root, sums_rel)
            if actual != old["checksums_sha256"]:
                problems.add("checksums", "a rebound-unchanged checksum copy must be the predecessor's bytes", file=sums_rel, field=f"{where}.checksums_sha256", found=actual, expected=old["checksums_sha256"])
        _bind_provenance(root, release, row, lane, pins, files, problems, required=False, old=old)
        _bind_component_publication(root, release, rt.path, row, lane, li, pins, files, problems, old=old)
        old_pub = old.get("publication_receipt")
        if lane.kind == "container" and isinstance(old_pub, dict) and old_pub.get("sha256"):
            files[pub_rel] = "publication"
            actual = file_sha256(root, pub_rel)
            if actual != old_pub["sha256"]:
                problems.add("hashes", "a rebound-unchanged publication receipt must be the predecessor's bytes", file=pub_rel, field=f"{where}.publication_receipt.sha256", found=actual, expected=old_pub["sha256"])
            row["publication_receipt"] = {"path": pub_rel, "sha256": actual, "public_url": _pin(pins, pub_rel)}
        if facts is not None and model["artifact_sha256"] and facts.model_artifact_sha256 != model["artifact_sha256"]:
            problems.add("receipts", "the rebound-unchanged lane was qualified with another model than this release binds", file=receipt_rel, field="identity.model_artifact_sha256", found=facts.model_artifact_sha256, expected=model["artifact_sha256"], fix="requalify the lane with the release's model (from = 'register'), or keep the predecessor's model")
        return row, facts

    if li.mode == "pins":
        p = li.pins
        row["release_tag"] = p.get("release_tag")
        row["deployment_profile"] = p.get("deployment_profile")
        row["source_commit"] = p.get("source_commit")
        row["upstream_commit"] = p.get("upstream_commit")
        row["configuration_sha256"] = p.get("configuration_sha256")
        row["server_binary_sha256"] = p.get("server_binary_sha256")
        row[f"{pkg}_bytes"] = p.get("package_bytes")
        row["model_artifact_sha256"] = model["artifact_sha256"]
        if lane.kind == "container" and p.get("oci_reference"):
            _set_image(row, p["oci_reference"])
        if p.get("checksums_file"):
            files[sums_rel] = "checksums"
            if not (root / sums_rel).is_file():
                problems.add("checksums", "the copy of the bound checksum file is missing", file=sums_rel, fix="run 'python -m pipeline compose' to copy checksums_file into the tree")
            else:
                _bind_sums(root, row, lane, sums_rel, problems)
        else:
            _bind_names(row, lane)
        if (root / receipt_rel).exists():
            files[receipt_rel] = "receipt"
            doc = read_evidence_json(root, receipt_rel, problems, "receipts")
            facts = receipt_facts(doc) if doc is not None else None
            row["qualification"] = {"summary": receipt_rel, "sha256": file_sha256(root, receipt_rel), "public_url": _pin(pins, receipt_rel), "status": facts.status if facts else None}
        return row, facts

    # register mode: everything from the evidence copied into the tree
    files[receipt_rel] = "receipt"
    files[sums_rel] = "checksums"
    _bind_provenance(root, release, row, lane, pins, files, problems, required=True)
    _bind_component_publication(root, release, rt.path, row, lane, li, pins, files, problems)
    doc = read_evidence_json(root, receipt_rel, problems, "receipts")
    if doc is not None:
        facts = receipt_facts(doc)
        row["qualification"] = {"summary": receipt_rel, "sha256": file_sha256(root, receipt_rel), "public_url": _pin(pins, receipt_rel), "status": facts.status if facts.status in LANE_RECEIPT_STATUSES else None}
        row["release_tag"] = facts.component_tag if isinstance(facts.component_tag, str) else None
        row["deployment_profile"] = facts.deployment_profile if isinstance(facts.deployment_profile, str) else None
        row["source_commit"] = facts.source_commit if is_commit_hex(facts.source_commit) else None
        row["upstream_commit"] = facts.upstream_commit if is_commit_hex(facts.upstream_commit) else None
        row["server_binary_sha256"] = facts.server_binary_sha256 if is_sha256_hex(facts.server_binary_sha256) else None
        row["configuration_sha256"] = facts.configuration_sha256 if is_sha256_hex(facts.configuration_sha256) else None
        row["model_artifact_sha256"] = facts.model_artifact_sha256 if is_sha256_hex(facts.model_artifact_sha256) else None
        row[f"{pkg}_bytes"] = facts.package_bytes if isinstance(facts.package_bytes, int) and not isinstance(facts.package_bytes, bool) and facts.package_bytes > 0 else None
    if (root / sums_rel).is_file():
        _bind_sums(root, row, lane, sums_rel, problems)
    else:
        problems.add("checksums", "the copy of the lane's outer SHA256SUMS is missing", file=sums_rel, fix="run 'python -m pipeline compose --dist DIR' to copy it from the register")
    if lane.kind == "container":
        files[pub_rel] = "publication"
        pub = read_evidence_json(root, pub_rel, problems, "images")
        if pub is not None:
            pf = publication_facts(pub)
            row["publication_receipt"] = {"path": pub_rel, "sha256": file_sha256(root, pub_rel), "public_url": _pin(pins, pub_rel)}
            if split_image_reference(pf.image_reference):
                _set_image(row, pf.image_reference)
            else:
                problems.add("images", "the image reference is not pinned by digest", file=pub_rel, field="image_reference", found=pf.image_reference, expected="'<registry>/<repository>@sha256:<64 hex>' (a tag can move)")
    return row, facts




def _bind_provenance(
    root: Path,
    release: str,
    row: dict[str, Any],
    lane: Lane,
    pins: dict[str, str],
    files: dict[str, str],
    problems: Problems,
    *,
    required: bool,
    old: dict[str, Any] | None = None,
) -> None:
    """The row's records of its provenance copies ({path, sha256, public_url}), as for the publication receipt.

    A register lane must have its set's statement (compose copies it); a rebound lane
    carries its predecessor's copies byte for byte. Trees made before statements existed
    bind none, so the keys are absent rather than null (their manifests stay as they are).
    """
    where = row_path(lane.id, lane.kind)
    names = [("provenance", provenance_name(lane.id))]
    if lane.kind == "container":
        names.append(("image_provenance", image_provenance_name(lane.id)))
    for key, name in names:
        _bind_record(root, release, row, where, key, name, pins, files, problems, required=required and key == "provenance", old=old, role="provenance")


def _bind_component_publication(root: Path, release: str, rt_path: str, row: dict[str, Any], lane: Lane, li: LaneInput, pins: dict[str, str], files: dict[str, str], problems: Problems, *, old: dict[str, Any] | None = None) -> None:
    """The row's record of its component publication receipt, when the component was published by `publish`.

    The receipt is the evidence for `published`: a copy with `published = false` is a contradiction.
    """
    _bind_record(root, release, row, row_path(lane.id, lane.kind), "component_publication", component_publication_name(lane.id), pins, files, problems, required=False, old=old, role="publication")
    record = row.get("component_publication")
    if record is not None and not li.published:
        problems.add("publication", f"the component's publication receipt is bound ({record['path']}), but release.toml says the lane is not published", file=rt_path, field=f"lanes.{lane.id}.published", found=False, expected=True, fix="set published = true in release.toml")


def _bind_record(
    root: Path,
    release: str,
    row: dict[str, Any],
    where: str,
    key: str,
    name: str,
    pins: dict[str, str],
    files: dict[str, str],
    problems: Problems,
    *,
    required: bool,
    old: dict[str, Any] | None,
    role: str,
) -> None:
    """One optional row record {path, sha256, public_url} of a byte copy in the tree."""
    rel = repo_path(release, name)
    previous = old.get(key) if isinstance(old, dict) and isinstance(old.get(key), dict) else None
    if not (root / rel).is_file():
        if required or previous is not None:
            fix = "run 'python -m pipeline compose --dist DIR' to copy it from the register" if required else "copy it byte for byte from the predecessor's tree (compose stage does)"
            problems.add(role, f"the lane's {key.replace('_', ' ')} copy is missing", file=rel, field=f"{where}.{key}", expected=f"the file {rel}", fix=fix)
        return
    files[rel] = role
    actual = file_sha256(root, rel)
    if previous is not None and previous.get("sha256") != actual:
        problems.add(role, f"a rebound-unchanged {key.replace('_', ' ')} copy must be the predecessor's bytes", file=rel, field=f"{where}.{key}.sha256", found=actual, expected=previous.get("sha256"))
    row[key] = {"path": rel, "sha256": actual, "public_url": _pin(pins, rel)}


def _set_image(row: dict[str, Any], reference: str) -> None:
    split = split_image_reference(reference)
    if split:
        row["oci_repository"], row["oci_manifest_digest"] = split
        row["oci_reference"] = reference


def _bind_names(row: dict[str, Any], lane: Lane) -> None:
    """The package name and URL from the lane's naming rules, when no checksum file is bound.

    Only the package: the other files of a published set are known from its
    SHA256SUMS alone (older cuts had other shapes), so they stay null until it is bound.
    """
    names = expected_names(lane, row["release_tag"])
    if not names or "package" not in names:
        return
    pkg = package_prefix(lane.kind)
    row[f"{pkg}_name"] = names["package"]
    row[f"{pkg}_url"] = asset_url(row["release_tag"], names["package"])


def _bind_sums(root: Path, row: dict[str, Any], lane: Lane, sums_rel: str, problems: Problems) -> None:
    """Every asset URL and SHA-256 of the row from the tree copy of the outer SHA256SUMS."""
    data = (root / sums_rel).read_bytes()
    row["checksums_path"] = sums_rel
    row["checksums_sha256"] = sha256_bytes(data)
    tag = row["release_tag"]
    if tag:
        row["checksums_url"] = asset_url(tag, "SHA256SUMS")
    try:
        entries = parse_sums(data, file=sums_rel)
    except PipelineError as error:
        problems.add_error("checksums", error, file=sums_rel)
        return
    expected = expected_names(lane, tag)
    by_role: dict[str, str] = {}
    for name in entries:
        role = classify_asset(name, lane.kind)
        if expected is not None:
            role = next((key for key, value in expected.items() if value == name), None)
        if role is None or role == "outer-sums":
            problems.add("checksums", "lists a file that is not part of the lane's closed asset set", file=sums_rel, field=name, found=name, expected="only " + ", ".join(sorted(v for k, v in (expected or {}).items() if k != "outer-sums")) if expected else "package, source, SBOMs, inner sums, build receipt (and the four scripts on native lanes)")
            continue
        if role in by_role:
            problems.add("checksums", "lists two files of the same role", file=sums_rel, field=name, found=[by_role[role], name])
            continue
        by_role[role] = name
    wanted = [role for role, _ in role_fields(lane.kind) if role != "outer-sums"]
    for role in wanted:
        if role not in by_role:
            want = (expected or {}).get(role, role.removeprefix("script:"))
            problems.add("checksums", "the closed asset set lacks a file", file=sums_rel, field=want, expected=f"a line for {want}")
    pkg = package_prefix(lane.kind)
    row[f"{pkg}_name"] = by_role.get("package")
    for role, prefix in role_fields(lane.kind):
        if role in by_role:
            name = by_role[role]
            row[f"{prefix}_sha256"] = entries[name]
            row[f"{prefix}_url"] = asset_url(tag, name) if tag else None


# Install-relevant identities: a null here is a blocker (and forbids candidate).
def null_identities(components: dict[str, Any], lanes: dict[str, Lane]) -> list[str]:
    nulls: list[str] = []
    omp = components["omp"]
    if omp["upstream_commit"] is None:
        nulls.append("components.omp.upstream_commit")
    for p in omp["platforms"]:
        for key in ("artifact_bytes", "artifact_sha256"):
            if p[key] is None:
                nulls.append(f"components.omp.platforms[{p['platform']}].{key}")
    model = components["model"]
    for key in ("revision", "artifact_url", "artifact_bytes", "artifact_sha256"):
        if model[key] is None:
            nulls.append(f"components.model.{key}")
    rows = component_lane_rows(components)
    for row in rows:
        lane = lanes[row["id"]]
        where = row_path(row["id"], lane.kind)
        pkg = package_prefix(lane.kind)
        keys = ["release_tag", "deployment_profile", "source_commit", "upstream_commit", "server_binary_sha256", "configuration_sha256", "model_artifact_sha256", f"{pkg}_name", f"{pkg}_bytes"]
        for _role, prefix in role_fields(lane.kind):
            keys += [f"{prefix}_url", f"{prefix}_sha256"]
        if lane.kind == "container":
            keys += ["oci_reference", "publication_receipt"]
        for key in keys:
            if row.get(key) is None:
                nulls.append(f"{where}.{key}")
        if row["qualification"]["sha256"] is None:
            nulls.append(f"{where}.qualification")
    return nulls


def _covering_key(path: str, keys: Iterable[str]) -> str | None:
    best = None
    for key in keys:
        covers = path == key or path.startswith(key + ".") or path.startswith(key + "[")
        if covers and (best is None or len(key) > len(best)):
            best = key
    return best

def _blockers(rt: ReleaseInput, nulls: list[str], components: dict[str, Any], accepted: bool) -> list[str]:
    """Blockers derived from the data: grouped null identities, unpublished components, acceptance."""
    groups: dict[str, list[str]] = {}
    for path in nulls:
        key = _covering_key(path, rt.unknown) or path
        groups.setdefault(key, []).append(path)
    out: list[str] = []
    for key, paths in groups.items():
        reason = rt.unknown.get(key, "not bound yet")
        if len(paths) == 1 and paths[0] == key:
            out.append(f"{key}: {reason}")
        else:
            fields = ", ".join(p[len(key):].lstrip(".") for p in paths)
            out.append(f"{key}: {reason} (null: {fields})")
    unpublished = []
    if not components["omp"]["published"]:
        unpublished.append("components.omp")
    if not components["model"]["published"]:
        unpublished.append("components.model")
    rows = component_lane_rows(components)
    for row in rows:
        if not row["published"]:
            unpublished.append("components.ninfer" if row is components["ninfer"] else f"components.ninfer_variants[{row['id']}]")
    for subject in unpublished:
        out.append(f"{subject}.published: the component release is not published yet (publish it, then set published = true in release.toml)")
    if not accepted:
        out.append(f"{EXTERNAL_INSTALL}: no passed external-installation acceptance is bound (run the documented routes on the candidate, then 'compose accept')")
    return out


def unknown_keys_unused(rt: ReleaseInput, nulls: list[str]) -> list[str]:
    return [key for key in rt.unknown if not any(_covering_key(path, [key]) for path in nulls)]


def _summary(rt, rows, receipts, deferred, acceptance, accepted, eligible, blockers) -> dict[str, Any]:
    lanes_out: dict[str, Any] = {}
    for lane_id, row in sorted(rows.items()):
        pkg = "binary_archive" if "binary_archive_sha256" in row else "package"
        facts = receipts.get(lane_id)
        lanes_out[lane_id] = {
            "status": row["status"],
            "release_tag": row["release_tag"],
            "deployment_profile": row["deployment_profile"],
            "source_commit": row["source_commit"],
            "server_binary_sha256": row["server_binary_sha256"],
            "configuration_sha256": row["configuration_sha256"],
            "model_artifact_sha256": row["model_artifact_sha256"],
            "package_sha256": row[f"{pkg}_sha256"],
            "rebound_from": row["rebound_from"],
            "receipt": {
                "path": row["qualification"]["summary"],
                "sha256": row["qualification"]["sha256"],
                "public_url": row["qualification"]["public_url"],
                "status": row["qualification"]["status"],
                "gates": facts.gates if facts else {},
            },
        }
    return {
        "artifact_type": SUMMARY_TYPE,
        "schema_version": 2,
        "release": rt.release,
        "status": "runtime-release-eligible" if eligible else "incomplete",
        "publication_authorized": False,
        "external_installation_qualified": accepted,
        "lanes": lanes_out,
        "deferred_scope": deferred,
        "acceptance": acceptance,
        "remaining_release_gates": list(blockers),
    }


def _authority(rt: ReleaseInput, rows, lanes: dict[str, Lane], model, deferred) -> dict[str, Any]:
    profiles = []
    variants = []
    for lane_id in sorted(rt.lanes):
        li = rt.lanes[lane_id]
        lane = lanes[lane_id]
        row = rows.get(lane_id)
        pkg = package_prefix(lane.kind)
        receipt = {"path": row["qualification"]["summary"], "sha256": row["qualification"]["sha256"], "url": row["qualification"]["public_url"]} if row else None
        if row and row["deployment_profile"]:
            profiles.append(
                {
                    "id": row["deployment_profile"],
                    "lane": lane_id,
                    "status": row["status"],
                    "installable": row["installable"],
                    "configuration_sha256": row["configuration_sha256"],
                    "server_binary_sha256": row["server_binary_sha256"],
                    "model_sha256": row["model_artifact_sha256"],
                    "image_reference": row.get("oci_reference") if lane.kind == "container" else None,
                    "package_sha256": row[f"{pkg}_sha256"],
                    "receipt": receipt,
                }
            )
        variants.append(
            {
                "id": lane_id,
                "status": li.status,
                "installable": li.status == "qualified",
                "silent_cloud_fallback": False,
                "gpu": lane.gpu_name,
                "cuda_architecture": f"sm_{lane.cuda_architecture}",
                "platform": lane.asset_platform,
                "release_tag": row["release_tag"] if row else None,
                "source_commit": row["source_commit"] if row else None,
                "package_name": row[f"{pkg}_name"] if row else None,
                "package_url": row[f"{pkg}_url"] if row else None,
                "package_sha256": row[f"{pkg}_sha256"] if row else None,
                "package_bytes": row[f"{pkg}_bytes"] if row else None,
                "model_url": model["artifact_url"],
                "model_sha256": model["artifact_sha256"],
                "model_bytes": model["artifact_bytes"],
                "qualification_receipt": receipt,
                "deferral": deferred.get(lane_id),
            }
        )
    return {
        "artifact_type": AUTHORITY_TYPE,
        "schema_version": 1,
        "authority_id": f"omp-ninfer-{rt.release}",
        "product_release": rt.release,
        "profiles": sorted(profiles, key=lambda p: p["id"]),
        "runtime_variants": variants,
    }

