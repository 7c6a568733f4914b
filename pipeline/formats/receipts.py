"""The lane receipt and the image publication receipt: their type strings, schema versions and readers.

Two documents that travel from the stage that writes them into the release tree:

- the **lane receipt** (`omp_ninfer_lane_receipt`, schema 1), written by
  `qualify` (pipeline/stages/qualify.py documents every field and checks the
  whole document, gates included, in `validate_receipt`), copied byte for byte
  into `manifests/<release>/qualification/<lane>.json` by `compose`;
- the **image publication receipt** (`ninfer_runtime_image_publication_receipt`,
  schema 3), written by `push` after the image is pulled back by digest, copied
  into `manifests/<release>/qualification/runtime-publication.json`.

This module is the one place their type strings and status values are
declared; every writer and reader imports them from here.  `receipt_facts` and
`publication_facts` read what a receipt binds by its field names, never
raising: compose and verify compare each fact with the bytes and report
every difference (a missing or mistyped field reads as None or as the value found).

(The *release* publication receipt of GitHub releases is another document,
owned by pipeline/formats/publication_plan.py.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LANE_RECEIPT_TYPE = "omp_ninfer_lane_receipt"
LANE_RECEIPT_SCHEMA = 1
LANE_RECEIPT_STATUSES = ("passed", "failed", "hardware-pending")

IMAGE_PUBLICATION_TYPE = "ninfer_runtime_image_publication_receipt"
IMAGE_PUBLICATION_SCHEMA = 3


@dataclass
class ReceiptFacts:
    """What a lane receipt binds, read by its field names (pipeline/stages/qualify.py)."""

    lane: Any
    component_tag: Any
    deployment_profile: Any
    status: Any
    source_commit: Any
    upstream_commit: Any
    patch_stack_sha: Any
    server_binary_sha256: Any
    configuration_sha256: Any
    model_artifact_sha256: Any
    package_name: Any
    package_sha256: Any
    package_bytes: Any
    outer_checksums_sha256: Any
    gates: dict[str, Any]
    secret_values_recorded: Any


def receipt_facts(doc: dict[str, Any]) -> ReceiptFacts:
    identity = doc.get("identity") if isinstance(doc.get("identity"), dict) else {}
    build = identity.get("build_identity") if isinstance(identity.get("build_identity"), dict) else {}
    package = identity.get("package") if isinstance(identity.get("package"), dict) else {}
    gates = doc.get("gates") if isinstance(doc.get("gates"), dict) else {}
    return ReceiptFacts(
        lane=doc.get("lane"),
        component_tag=doc.get("component_tag"),
        deployment_profile=doc.get("deployment_profile"),
        status=doc.get("status"),
        source_commit=identity.get("source_commit"),
        upstream_commit=build.get("upstream_base_sha"),
        patch_stack_sha=build.get("patch_stack_sha"),
        server_binary_sha256=identity.get("server_binary_sha256"),
        configuration_sha256=identity.get("configuration_sha256"),
        model_artifact_sha256=identity.get("model_artifact_sha256"),
        package_name=package.get("name"),
        package_sha256=package.get("sha256"),
        package_bytes=package.get("bytes"),
        outer_checksums_sha256=identity.get("outer_checksums_sha256"),
        gates={name: (gate.get("status") if isinstance(gate, dict) else gate) for name, gate in sorted(gates.items())},
        secret_values_recorded=doc.get("secret_values_recorded"),
    )


@dataclass
class PublicationFacts:
    image_reference: Any
    image_digest: Any
    binary_name: Any
    binary_sha256: Any
    source_commit: Any
    component_tag: Any
    secret_free: Any


def publication_facts(doc: dict[str, Any]) -> PublicationFacts:
    """What an image publication receipt binds (pipeline/stages/push.py writes it; older receipts used other names)."""
    archive = doc.get("binary_archive") if isinstance(doc.get("binary_archive"), dict) else {}
    return PublicationFacts(
        image_reference=doc.get("image_reference"),
        image_digest=doc.get("image_digest", doc.get("digest")),
        binary_name=doc.get("binary_asset", archive.get("name")),
        binary_sha256=doc.get("binary_sha256", archive.get("sha256")),
        source_commit=doc.get("source_commit"),
        component_tag=doc.get("release_tag", doc.get("component_tag")),
        secret_free=doc.get("secret_free"),
    )
