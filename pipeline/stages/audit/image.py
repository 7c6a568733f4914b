"""Job: the container image's manifest, fetched by digest from its registry, hashes to the pinned digest."""

from __future__ import annotations

import hashlib
from typing import Any

from pipeline.errors import InputError, PipelineError
from pipeline.infra import net
from pipeline.stages.audit.model import Item
from pipeline.stages.audit.session import AuditSession


def audit_image(auditor: AuditSession, row: dict[str, Any]) -> None:
    reference = row.get("oci_reference")
    label = f"image {reference}"
    if not isinstance(reference, str) or not reference:
        auditor.add(Item(f"image {row.get('id') or 'container'}", False, "not bound: components.ninfer.oci_reference is null", "image"))
        return
    from pipeline.infra.image_reference import parse_digest_reference
    from pipeline.infra.registry import fetch_manifest_by_digest

    try:
        host, name, digest = parse_digest_reference(reference)
    except InputError as error:
        auditor.add(Item(label, False, error.what, "image"))
        return
    pinned = row.get("oci_manifest_digest")
    if pinned is not None and pinned != digest:
        auditor.add(Item(label, False, f"oci_manifest_digest {pinned} differs from the reference's digest {digest}", "image"))
        return
    repository = row.get("oci_repository")
    if repository is not None and repository != f"{host}/{name}":
        auditor.add(Item(label, False, f"oci_reference is not in oci_repository {repository}", "image"))
        return
    try:
        with net.deadlines(auditor.deadline):  # the registry client's requests go through this session's adapter
            body, media_type = fetch_manifest_by_digest(host, name, digest, session=auditor.http(), timeout=auditor.timeout)
    except PipelineError as error:
        auditor.add(Item(label, False, error.what, "image"))
        return
    actual = "sha256:" + hashlib.sha256(body).hexdigest()
    if actual != digest:
        auditor.add(Item(label, False, f"image digest mismatch: the registry's manifest bytes hash to {actual}", "image", {"media_type": media_type}))
        return
    auditor.add(Item(label, True, f"registry manifest ({media_type}, {len(body)} bytes) hashes to the pinned digest", "image"))
