"""The rules compose and verify both apply to a release tree: states, acceptance, differences.

- `state_problems`: the rules of a status (docs/release-tree.md, States): what
  may stay null, which blockers a draft, a candidate and a ready tree may hold;
- `acceptance_problems` / `documented_route_problems`: what an external-installation
  acceptance record must bind to count for a release (its subject is the manifest's
  `acceptance_subject`), and the arithmetic of its documented routes;
- `diff`: every leaf difference between two JSON values (rows matched by id),
  how verify names a hand edit and compose names what a frozen tree would change;
- `row_field` / `row_kind`: where each lane row lives (the rows themselves are
  pipeline/formats/release/manifest.py's).

Each rule returns tuples (field, found, expected, what) or the like and never
raises: the caller decides whether a violation is a refusal (compose) or a
reported error (verify).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pipeline.formats.acceptance import RECORD_TYPE as ACCEPTANCE_TYPE
from pipeline.formats.lanes import Lane
from pipeline.formats.release.derive import Derived
from pipeline.formats.release.manifest import (
    acceptance_subject,
    lane_row,
    lane_rows,
    section,
)
from pipeline.formats.release.manifest import blockers as manifest_blockers
from pipeline.formats.release.names import EXTERNAL_INSTALL, PINS, REVIEWS_SUBJECT, blocker_subject, row_path
from pipeline.formats.release.problems import _MISSING
from pipeline.util.hashing import is_commit_hex, is_sha256_hex


def row_field(row: dict[str, Any], lanes: dict[str, Lane]) -> str:
    """The manifest field path of a row (`components.ninfer` or `components.ninfer_variants[<id>]`)."""
    lane = lanes.get(row.get("id"))
    kind = lane.kind if lane else ("container" if "binary_archive_sha256" in row else "windows-native")
    return row_path(str(row.get("id")), kind)


def row_kind(row: dict[str, Any], lanes: dict[str, Lane]) -> str:
    """The lane kind of a row: from the lane file, else from the row's own fields (an unknown lane)."""
    lane = lanes.get(row.get("id"))
    return lane.kind if lane else ("container" if "binary_archive_sha256" in row else "windows-native")


def diff(found: Any, expected: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    """Leaf differences between two JSON values; lists of rows are matched by id/platform."""
    if isinstance(found, dict) and isinstance(expected, dict):
        for key in sorted(set(found) | set(expected)):
            sub = f"{path}.{key}" if path else key
            if key not in found:
                out.append((sub, "(missing)", expected[key]))
            elif key not in expected:
                out.append((sub, found[key], "(no such field)"))
            else:
                diff(found[key], expected[key], sub, out)
        return
    if isinstance(found, list) and isinstance(expected, list):
        key = next((k for k in ("id", "platform") if expected and all(isinstance(e, dict) and k in e for e in expected)), None)
        if key and all(isinstance(f, dict) and key in f for f in found):
            f_map = {str(f[key]): f for f in found}
            e_map = {str(e[key]): e for e in expected}
            if list(f_map) != list(e_map) and set(f_map) == set(e_map):
                out.append((path, list(f_map), list(e_map)))
            for name in sorted(set(f_map) | set(e_map)):
                sub = f"{path}[{name}]"
                if name not in f_map:
                    out.append((sub, "(missing)", e_map[name]))
                elif name not in e_map:
                    out.append((sub, f_map[name], "(no such row)"))
                else:
                    diff(f_map[name], e_map[name], sub, out)
            return
        if len(found) == len(expected):
            for index, (f, e) in enumerate(zip(found, expected, strict=True)):
                diff(f, e, f"{path}[{index}]", out)
            return
    if found != expected or type(found) is not type(expected):
        out.append((path, found, expected))


def abbreviate(value: Any) -> Any:
    """A value short enough for an error message (objects and lists as JSON, cut at 200 characters)."""
    if isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True)
        return text if len(text) <= 200 else text[:197] + "..."
    return value


def acceptance_problems(doc: dict[str, Any], manifest: dict[str, Any], release: str, required_routes: list[str] | None = None) -> list[tuple[str, Any, Any, str]]:
    """(field, found, expected, what) for every way an acceptance record fails to bind this release."""
    out: list[tuple[str, Any, Any, str]] = []
    if doc.get("artifact_type") != ACCEPTANCE_TYPE:
        out.append(("artifact_type", doc.get("artifact_type"), ACCEPTANCE_TYPE, "is not an external-installation acceptance record"))
    if doc.get("schema_version") != 1:
        out.append(("schema_version", doc.get("schema_version"), 1, "has an unsupported schema version"))
    if doc.get("release") != release:
        out.append(("release", doc.get("release"), release, "accepts another release"))
    if doc.get("status") not in ("passed", "failed"):
        out.append(("status", doc.get("status"), "passed or failed", "has an unknown status"))
    if not is_commit_hex(doc.get("candidate_commit")):
        out.append(("candidate_commit", doc.get("candidate_commit"), "a full 40-hex commit", "does not name the accepted candidate commit"))
    if not isinstance(doc.get("as_of"), str) or not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", doc.get("as_of") or ""):
        out.append(("as_of", doc.get("as_of"), "an ISO date YYYY-MM-DD", "has no date"))
    if doc.get("secret_values_recorded") != 0:
        out.append(("secret_values_recorded", doc.get("secret_values_recorded"), 0, "records secret values"))
    subject = acceptance_subject(manifest)
    differences: list[tuple[str, Any, Any]] = []
    diff(doc.get("subject"), subject, "subject", differences)
    for name, found, expected in differences:
        out.append((name, found, expected, "ran other bytes than the manifest binds"))
    if "documented_routes" in doc:
        out += documented_route_problems(doc, required_routes)
    elif required_routes:
        out.append(("documented_routes", None, "the routes " + ", ".join(required_routes), "release.toml [acceptance] requires documented routes, but the record does not bind their runs (make it with 'python -m pipeline accept compose')"))
    return out


def documented_route_problems(doc: dict[str, Any], required_routes: list[str] | None) -> list[tuple[str, Any, Any, str]]:
    """The record's documented routes agree with themselves (and cover release.toml's required routes).

    `accept compose` writes them (pipeline/stages/accept/record.py); the receipts themselves are not in the tree,
    so what can be re-checked here is the arithmetic and the names.
    """
    out: list[tuple[str, Any, Any, str]] = []
    dr = doc.get("documented_routes")
    if not isinstance(dr, dict) or not isinstance(dr.get("routes"), dict) or not isinstance(dr.get("document"), dict):
        return [("documented_routes", abbreviate(dr), "an object with document and routes", "is not a documented-routes record")]
    routes = dr["routes"]
    if sorted(routes) != sorted(doc.get("routes") or {}):
        out.append(("routes", sorted(doc.get("routes") or {}), sorted(routes), "names other routes than documented_routes.routes"))
    if required_routes is not None and sorted(routes) != sorted(required_routes):
        out.append(("documented_routes.routes", sorted(routes), sorted(required_routes), "does not accept exactly the routes release.toml [acceptance] requires"))
    total = ran = 0
    for route_id, row in sorted(routes.items()):
        where = f"documented_routes.routes.{route_id}"
        if not isinstance(row, dict):
            out.append((where, abbreviate(row), "an object", "is not a route row"))
            continue
        if doc.get("status") == "passed" and (row.get("status") != "passed" or (doc.get("routes") or {}).get(route_id) != "passed"):
            out.append((f"{where}.status", row.get("status"), "passed", "a passed acceptance needs every route passed"))
        for key in ("bundle_sha256", "receipt_sha256", "document_sha256"):
            if not is_sha256_hex(row.get(key)):
                out.append((f"{where}.{key}", row.get(key), "a SHA-256", "does not bind its bundle, receipt or document by hash"))
        steps, steps_run, not_run = row.get("steps"), row.get("steps_run"), row.get("host_only_not_run")
        if not (isinstance(steps, int) and isinstance(steps_run, int) and isinstance(not_run, list)) or steps_run + len(not_run) != steps or steps < 1:
            out.append((f"{where}.steps", steps, f"steps_run ({steps_run}) + host-only not run ({len(not_run) if isinstance(not_run, list) else not_run})", "does not add up"))
            continue
        total += steps
        ran += steps_run
    if (dr.get("blocks_total"), dr.get("blocks_run")) != (total, ran):
        out.append(("documented_routes.blocks_total", [dr.get("blocks_total"), dr.get("blocks_run")], [total, ran], "does not add up over the routes"))
    for index, change in enumerate(dr.get("document_change") or []):
        if not isinstance(change, dict) or change.get("route") not in routes or not str(change.get("why") or "").strip():
            out.append((f"documented_routes.document_change[{index}]", abbreviate(change), "a route of the record and why it changed", "is not a document_change entry"))
    document = dr["document"]
    if not is_sha256_hex(document.get("sha256_at_candidate")) or not isinstance(document.get("path"), str):
        out.append(("documented_routes.document", abbreviate(document), "path and sha256_at_candidate", "does not name the route document by hash"))
    return out


def state_problems(manifest: dict[str, Any], derived: Derived, status: str, lanes: dict[str, Lane]) -> list[tuple[str, str, Any, Any]]:
    """Violations of the rules of `status` (docs/release-tree.md, States): (field, what, found, expected)."""
    out: list[tuple[str, str, Any, Any]] = []
    blockers = manifest_blockers(manifest)
    subjects = [blocker_subject(b) for b in blockers]
    manual = set(derived.release.blockers) if derived.release else set()
    for path in derived.nulls:
        named = any(path == s or path.startswith(s + ".") or path.startswith(s + "[") for s in subjects)
        if not named:
            out.append((path, "is null but no blocker names it", None, "a value, or a blocker '<field>: <reason>'"))
    if status == "draft":
        if not blockers:
            out.append(("publication.blockers", "a draft must list what blocks it", [], "at least one blocker"))
        return out
    if status == "candidate":
        for index, blocker in enumerate(blockers):
            # the councils review the candidate, so its review blockers remain until the ledger clears them
            if blocker_subject(blocker) not in (EXTERNAL_INSTALL, PINS, REVIEWS_SUBJECT) and blocker not in manual:
                out.append((f"publication.blockers[{index}]", f"blocker (a candidate binds every install identity, published): {blocker}", _MISSING, _MISSING))
        qual = section(manifest, "qualification")
        acc = section(manifest, "qualification.acceptance")
        if acc.get("status") != "passed":
            if EXTERNAL_INSTALL not in subjects:
                out.append(("publication.blockers", f"a candidate keeps an '{EXTERNAL_INSTALL}: ...' blocker until a passed acceptance is bound", subjects, f"a blocker '{EXTERNAL_INSTALL}: ...'"))
            if qual.get("external_installation_passed") is not False:
                out.append(("qualification.external_installation_passed", "a candidate without a passed acceptance cannot claim external installation", qual.get("external_installation_passed"), False))
    if status == "ready":
        for index, blocker in enumerate(blockers):
            out.append((f"publication.blockers[{index}]", f"blocker: {blocker}", _MISSING, _MISSING))
    for row in lane_rows(manifest):
        where = row_field(row, lanes)
        q = section(row, "qualification")
        if row.get("status") == "qualified" and q.get("sha256") is not None and q.get("status") != "passed":
            out.append((f"{where}.qualification.status", "a qualified lane needs a passed receipt", q.get("status"), "passed"))
    if status == "ready" and derived.release is not None:
        for lane_id, li in sorted(derived.release.lanes.items()):
            row = lane_row(manifest, lane_id)
            passed = row is not None and row.get("status") == "qualified" and (row.get("qualification") or {}).get("status") == "passed"
            receipt_field = f"{row_path(lane_id, lanes[lane_id].kind)}.qualification" if lane_id in lanes else None
            named = receipt_field is not None and any(receipt_field == sub or receipt_field.startswith(sub + ".") or receipt_field.startswith(sub + "[") for sub in subjects)
            if not passed and li.deferral is None and not named:
                out.append((f"qualification.deferred_scope.{lane_id}", "a lane that is not qualified must be deferred explicitly at ready", None, f"a [lanes.{lane_id}.deferral] with reason, predecessor release and route in release.toml"))
        acc = section(manifest, "qualification").get("acceptance")
        if EXTERNAL_INSTALL not in subjects and (not isinstance(acc, dict) or acc.get("status") != "passed"):
            out.append(("qualification.acceptance", "ready needs a passed external-installation acceptance", abbreviate(acc), "a passed record bound by 'compose accept'"))
        if not any(r.get("status") == "qualified" for r in lane_rows(manifest)):
            out.append(("components", "ready needs at least one qualified lane", None, "a qualified lane"))
    return out

