"""The two Markdown renderings of a release tree: COMPATIBILITY.md and NOTES.md.

Both are generated from the derived records (never edited); verify compares
them byte for byte with what it derives.
"""

from __future__ import annotations

from typing import Any

from pipeline.formats.lanes import Lane
from pipeline.formats.release.manifest import component_lane_rows
from pipeline.formats.release.names import AUTHORITY, PRODUCT_NAME, RELEASE_TOML
from pipeline.formats.release.spec import ReleaseInput
from pipeline.formats.review_ledger import Ledger, short_digest


def _short(value: Any, n: int = 12) -> str:
    return f"`{value[:n]}`" if isinstance(value, str) and value else "not bound"


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).replace("|", "\\|")


def render_authority(authority: dict[str, Any]) -> str:
    lines = [
        f"# Compatibility: {PRODUCT_NAME} {authority['product_release']}",
        "",
        f"Generated from `{AUTHORITY}` (authority `{authority['authority_id']}`) by `python -m pipeline compose`; generated, do not edit.",
        "",
        "## Deployment profiles",
        "",
        "| Profile | Lane | Status | Installable | Server binary | Configuration | Model | Image or package | Receipt |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in authority["profiles"]:
        image = p["image_reference"] or (f"package {_short(p['package_sha256'])}" if p["package_sha256"] else None)
        receipt = _short(p["receipt"]["sha256"]) if p["receipt"] else "not bound"
        lines.append(
            f"| `{p['id']}` | {p['lane']} | {p['status']} | {_cell(p['installable'])} | {_short(p['server_binary_sha256'])} | "
            f"{_short(p['configuration_sha256'])} | {_short(p['model_sha256'])} | {_cell(image)} | {receipt} |"
        )
    if not authority["profiles"]:
        lines.append("| — | — | — | — | — | — | — | — | — |")
    lines += [
        "",
        "## Runtime variants",
        "",
        "| Lane | GPU | CUDA | Status | Installable | Component tag | Package | Deferral |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in authority["runtime_variants"]:
        deferral = v["deferral"]["reason"] if v["deferral"] else None
        package = f"{v['package_name']} ({_short(v['package_sha256'])})" if v["package_name"] else None
        lines.append(
            f"| {v['id']} | {v['gpu']} | {v['cuda_architecture']} | {v['status']} | {_cell(v['installable'])} | "
            f"{_cell(v['release_tag'])} | {_cell(package)} | {_cell(deferral)} |"
        )
    lines += ["", "Status values: qualified, preview, blocked, unsupported. No silent cloud fallback on any lane.", ""]
    return "\n".join(lines)


def superseded_lines(rows: list[dict[str, Any]], lanes: dict[str, Lane]) -> list[str]:
    """Cuts superseded on the way to each shipped component tag, from the lanes' cut ledgers.

    Only cuts superseded by a cut up to the shipped one are rendered: the ledger is append-only
    and a supersession never changes once recorded, so the rendering of a release never changes
    when later cuts are made."""
    lines = []
    for row in rows:
        lane = lanes.get(row["id"])
        tag = row.get("release_tag")
        if lane is None or not isinstance(tag, str) or not lane.tag_regex().fullmatch(tag):
            continue
        shipped = lane.beta_from_tag(tag)
        ledger = lane.ledger()
        for cut in ledger.cuts:
            if cut.version != lane.version or cut.state != "superseded" or (cut.superseded_by or 0) > shipped:
                continue
            successor = ledger.entry(cut.version, cut.superseded_by or 0)
            at = f" at {cut.source_commit}" if cut.source_commit else f" (source commit not recorded in full: {cut.unknown.get('source_commit', 'unknown')})"
            then = f"`{successor.tag}`" + (f" at {successor.source_commit}" if successor.source_commit else "") if successor else f"beta.{cut.superseded_by}"
            lines.append(f"- {row['id']}: `{cut.tag}`{at} was published, then superseded by {then}: {cut.reason.rstrip('.')}. Its tag and assets stay published; it is not this release.")
    return lines


def review_lines(ledger: Ledger) -> list[str]:
    """NOTES.md's account of the review ledger: each council, its disposition and what it reviewed by digest,
    its findings with their dispositions, and the deferred items with the issues that track them."""
    lines = ["", "### Reviews", "", f"Bound in the review ledger `{ledger.path}` (SHA-256 `{ledger.sha256}`).", ""]
    for review in ledger.reviews:
        reviewed = ", ".join(f"{label} `{short_digest(digest)}`" for label, digest in review.reviewed)
        lines.append(f"- **{review.council}** ({review.state}): {_cell(review.disposition)} Reviewed: {reviewed}.")
        for f in review.findings:
            tracked = f", tracked in {f.tracking_issue}" if f.tracking_issue else ""
            lines.append(f"  - {f.id}: {f.severity}, {f.scope} scope, {f.state}{tracked}: {_cell(f.disposition)}")
    deferred = ledger.deferred()
    lines += ["", "### Deferred items", ""]
    lines += [f"- {f.id} ({council}, {f.severity}): {f.tracking_issue or 'no tracking issue'}" for council, f in deferred] or ["- None."]
    return lines


def render_notes(manifest: dict[str, Any], rt: ReleaseInput, summary: dict[str, Any], lanes: dict[str, Lane] | None = None, ledger: Ledger | None = None) -> str:
    release = manifest["release"]
    comp = manifest["components"]
    lines = [
        f"# {PRODUCT_NAME} {release} — {rt.title}",
        "",
        f"Status: **{manifest['status']}**. Generated by `python -m pipeline compose` from `{RELEASE_TOML}` and the bound evidence; do not edit.",
        "",
        rt.summary.strip(),
        "",
        "## Support boundary",
        "",
    ]
    lines += [f"- {item}" for item in rt.limitations] or ["- No limitation recorded."]
    lines += ["", "## Composition", "", "| Lane / client | Component | Status | Qualification |", "| --- | --- | --- | --- |"]
    rows = component_lane_rows(comp)
    for row in rows:
        lane_summary = summary["lanes"].get(row["id"], {})
        receipt = lane_summary.get("receipt", {})
        qual = f"receipt {receipt.get('status')} ({_short(receipt.get('sha256'))})" if receipt.get("sha256") else "receipt not bound"
        if row["rebound_from"]:
            qual += f"; rebound unchanged from {row['rebound_from']}"
        lines.append(f"| {row['id']} | {_cell(row['release_tag'])} | {row['status']} | {qual} |")
    for lane_id, deferral in sorted(manifest["qualification"]["deferred_scope"].items()):
        if not any(row["id"] == lane_id for row in rows):
            lines.append(f"| {lane_id} | — | deferred | {deferral['reason']} (keep {deferral['predecessor_release']}) |")
    omp = comp["omp"]
    lines.append(f"| Oh My Pi | unmodified upstream {omp['upstream_tag']} ({_short(omp['upstream_commit'], 8)}) | {'published' if omp['published'] else 'not published'} | {len(omp['platforms'])} platform binaries |")
    superseded = superseded_lines(rows, lanes or {})
    if superseded:
        lines += ["", "## Superseded cuts", "", *superseded]
    model = comp["model"]
    lines += [
        "",
        "## Model",
        "",
        f"- Repository: {model['repository']}",
        f"- Revision: {_cell(model['revision'])}",
        f"- Artifact: {model['artifact_name']}, {_cell(model['artifact_bytes'])} bytes",
        f"- SHA-256: {_cell(model['artifact_sha256'])}",
    ]
    image = comp["ninfer"]["oci_reference"] if comp["ninfer"] else None
    if image:
        lines += ["", "## Container image", "", f"- {image}"]
    blockers = manifest["publication"]["blockers"]
    lines += ["", "## Remaining release gates", ""]
    lines += [f"- {b}" for b in blockers] or ["- None: the release is technically cuttable. Publication is a separate act of the release lead."]
    if ledger is not None:
        lines += review_lines(ledger)
    lines += [
        "",
        "## Verify",
        "",
        "```sh",
        f"python -m pipeline verify --release {release}" + (" --require-ready --check-pins" if manifest["status"] == "ready" else ""),
        "```",
        "",
    ]
    return "\n".join(lines)

