"""Job: the review ledger's gate over the published ledger (`formats/review_ledger.py`)."""

from __future__ import annotations

from pipeline.errors import PipelineError
from pipeline.formats.release.manifest import ReleaseManifest
from pipeline.formats.release.names import review_ledger_required
from pipeline.stages.audit.model import Fetched, Item, word
from pipeline.stages.audit.session import AuditSession


def audit_reviews(auditor: AuditSession, manifest: ReleaseManifest, fetched: list[Fetched]) -> None:
    """The review ledger's gate (formats/review_ledger.py) over the published ledger: its bytes were checked
    against `reviews.sha256` with the other records; here every review must be closed, no in-scope P0/P1
    confirmed or unresolved, every deferred finding tracked, every reviewed digest one the manifest binds.
    FAIL at status ready; at draft or candidate the councils may still be at work (SKIP naming what holds)."""
    from pipeline.formats.review_ledger import bound_ledger

    release = str(manifest.release)
    label = "review ledger gate"
    if not manifest.has("reviews") and not review_ledger_required(release):
        auditor.add(Item(label, None, f"made before the review ledger ({release} binds no reviews)", "record"))
        return
    entry = manifest.value("reviews")
    result = next((r for r in fetched if r.binding.field == "reviews.public_url"), None)
    if isinstance(entry, dict) and (result is None or result.error or result.path is None or not auditor.matches(result)):
        auditor.add(Item(label, False if manifest.status == "ready" else None, "the bound ledger could not be read at its URL with its SHA-256 (see the review ledger line)", "record"))
        return
    try:
        data = result.path.read_bytes() if result is not None and result.path is not None else None
        ledger, failures = bound_ledger(manifest, data, release=release, origin=str(entry.get("public_url")) if isinstance(entry, dict) else "manifest.json")
    except PipelineError as error:
        auditor.add(Item(label, False, error.render(), "record"))
        return
    if not failures:
        assert ledger is not None
        auditor.add(Item(label, True, f"{len(ledger.reviews)} reviews closed; no in-scope P0/P1 open; {len(ledger.deferred())} deferred, each tracked; every reviewed digest is bound; every bound artefact is reviewed", "record"))
        return
    text = "; ".join(failure.what for failure in failures)
    ready = manifest.status == "ready"
    auditor.add(Item(label, False if ready else None, text if ready else f"status {word(manifest.status)}: {text}", "record"))
