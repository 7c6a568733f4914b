"""The audit report: what `python -m pipeline audit` found, as recorded in the register.

`<dist>/audit/<release>.json`, register kind `audit-report`: the document
`audit --json` prints (every item with its result and reason, the verdict,
bytes and seconds), plus its type and schema.  An audit observes public URLs
at one moment, so the report is a record of that observation, not a
reproducible build output: the register keeps the latest one per audited
manifest.  Written with sorted keys and LF (`pipeline.util.jsonio`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import InputError, redact_document
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import expect_document_type, read_json_object, write_json
from pipeline.util.safepath import component_problem

REPORT_TYPE = "omp_ninfer_audit_report"
SCHEMA_VERSION = 1
FOLDER = "audit"
RESULTS = ("ok", "fail", "skip")
REQUIRED = ("manifest", "release", "status", "passed", "verdict", "items", "failed")


def report_name(release: object, source: str) -> str:
    """`<release>.json`, or a name derived from the manifest's source when it named no usable release."""
    if isinstance(release, str) and release and component_problem(release) is None:
        return f"{release}.json"
    return f"unreadable-manifest-{sha256_bytes(source.encode('utf-8'))[:16]}.json"


def write_report(dist: Path, report: dict[str, Any]) -> Path:
    """Write the report document (from `AuditReport.to_json()`) under `<dist>/audit/`, atomically."""
    path = dist / FOLDER / report_name(report.get("release"), str(report.get("manifest")))
    write_json(path, redact_document({"artifact_type": REPORT_TYPE, "schema_version": SCHEMA_VERSION, **report}))  # no URL's password
    return path


def read_report(path: Path) -> dict[str, Any]:
    """A recorded audit report, checked: its type, schema, the fields a reader relies on and each item's result."""
    document = read_json_object(path)
    expect_document_type(document, REPORT_TYPE, SCHEMA_VERSION, source=path, what="an audit report", fix="run 'python -m pipeline audit' again")
    for key in REQUIRED:
        if key not in document:
            raise InputError("audit report lacks a field", file=path, field=key)
    items = document["items"]
    if not isinstance(items, list) or not isinstance(document["passed"], bool):
        raise InputError("audit report's items or verdict are malformed", file=path, field="items", expected="a list of items and a boolean 'passed'")
    for index, item in enumerate(items):
        if not isinstance(item, dict) or item.get("result") not in RESULTS or not isinstance(item.get("item"), str):
            raise InputError("audit report holds a malformed item", file=path, field=f"items[{index}]", expected="{item, kind, result: ok|fail|skip, reason}")
    failed = sum(1 for item in items if item["result"] == "fail")
    if failed != document["failed"] or document["passed"] != (bool(items) and failed == 0):
        raise InputError("audit report's verdict disagrees with its items", file=path, field="passed", found={"passed": document["passed"], "failed": document["failed"]}, expected=f"{failed} failed items")
    return document
