"""Reading the evidence a release tree binds: copied records, checksum files, pins, the predecessor's rows.

The evidence files of a tree are written by other stages (lane receipts,
outer SHA256SUMS, the image publication receipt, the acceptance record);
these readers never raise for a defect in them: they record a Problem and
return None, so that derivation carries on with null.  The receipts' own
fields are read by pipeline/formats/receipts.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.lanes import Lane
from pipeline.formats.release.manifest import evidence_records, lane_row
from pipeline.formats.release.names import SCRIPT_FIELDS
from pipeline.formats.release.problems import Problems
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import loads_document


def read_evidence_json(root: Path, rel: str, problems: Problems, check: str) -> dict[str, Any] | None:
    path = root / rel
    if not path.is_file():
        problems.add(check, "file does not exist", file=rel, fix="run 'python -m pipeline compose' to copy the evidence into the tree")
        return None
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf") or b"\r" in data:
        problems.add(check, "holds a byte-order mark or a carriage return", file=rel, expected="UTF-8 without BOM, LF line endings")
        return None
    try:
        document = loads_document(data, source=rel)
    except InputError as exc:
        problems.add(check, exc.what, file=rel)
        return None
    if not isinstance(document, dict):
        problems.add(check, "must hold a JSON object", file=rel, found=type(document).__name__)
        return None
    return document


def file_sha256(root: Path, rel: str | None) -> str | None:
    if not rel:
        return None
    path = root / rel
    return sha256_bytes(path.read_bytes()) if path.is_file() else None



def classify_asset(name: str, kind: str) -> str | None:
    """The role key of a closed-set file name (independent of the lane file's current version)."""
    if name == "SHA256SUMS":
        return "outer-sums"
    if name == "package-build-receipt.json":
        return "receipt"
    if name in SCRIPT_FIELDS:
        return f"script:{name}" if kind != "container" else None
    for suffix, role in (("-source.tar.gz", "source"), (".tar.gz", "package"), (".spdx.json", "spdx"), (".cdx.json", "cdx"), (".SHA256SUMS", "inner-sums")):
        if name.endswith(suffix):
            return role
    return None


def expected_names(lane: Lane, tag: str | None) -> dict[str, str] | None:
    """role key -> file name of the lane's set for this tag, when the lane file still describes the tag."""
    if not tag:
        return None
    try:
        beta = lane.beta_from_tag(tag)
        from pipeline.formats.assets import asset_set  # the package stage's naming rules (one place)
    except (InputError, ImportError):
        return None
    names: dict[str, str] = {}
    for asset in asset_set(lane, beta).assets:
        key = f"script:{asset.name}" if asset.role == "support-script" else asset.role
        names[key] = asset.name
    return names


def collect_pins(manifest: dict[str, Any] | None) -> dict[str, str]:
    """Every record path -> its pinned raw URL, as the current manifest records them."""
    return {record.path: record.public_url for record in evidence_records(manifest) if isinstance(record.path, str) and isinstance(record.public_url, str)}


def predecessor_row(pred_manifest: dict[str, Any] | None, lane_id: str) -> dict[str, Any] | None:
    return lane_row(pred_manifest, lane_id)

