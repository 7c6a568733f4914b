"""Job: GitHub's own release attestation of each release asset the audit hashed (`infra/attestations.py`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from pipeline.infra import attestations
from pipeline.stages.audit.model import GITHUB_API, Fetched, Item
from pipeline.stages.audit.session import AuditSession


def audit_release_attestations(auditor: AuditSession, fetched: list[Fetched], cache: Path) -> None:
    """GitHub's own attestation of each file this audit hashed that is a GitHub release asset
    (pipeline/infra/attestations.py: the real gh verifies it; SKIP where gh, a token or immutability is missing)."""
    groups = attestations.release_asset_groups([(r.binding.url, r.path) for r in fetched if r.path is not None])
    for (slug, tag), files in sorted(groups.items()):
        answer, problem = auditor.api_json(f"{GITHUB_API}/repos/{slug}/releases/tags/{quote(tag, safe='')}", cache / "api", what=f"release {tag}")
        immutable, unread = attestations.immutability(answer, problem, tag=tag)
        for name, ok, reason in attestations.audit_release(files, repository=slug, tag=tag, immutable=immutable, gh=attestations.find_gh(),
                                                           trusted_root=auditor.github_trusted_root, unread=unread):
            auditor.add(Item(name, ok, reason, "github-attestation", {"repository": slug, "tag": tag}))
