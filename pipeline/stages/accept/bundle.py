"""`accept bundle`: one route of the release's route document at the candidate commit, checked and bound to the
candidate manifest, written as a bundle."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, RefusedError, UsageError, redact
from pipeline.formats import acceptance as fmt
from pipeline.formats.routes import Document, scan
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.stages.accept.document import (
    DEFAULT_DOCUMENT,
    OUTPUT_DIR,
    git_show,
    is_ancestor,
    resolve_commit,
)
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes


@dataclass
class RouteConfig:
    document: str
    routes: dict[str, dict[str, Any]]  # route id -> {"host": kind, "lane": lane or None}


def acceptance_config(rt: Any) -> RouteConfig | None:
    table = getattr(rt, "acceptance", None)
    if not table:
        return None
    return RouteConfig(document=table["document"], routes=table["routes"])


def _refuse_findings(document: str, findings: list[tuple[int, str, str, str]], lead: str) -> None:
    if not findings:
        return
    for line, what, found, expected in findings[1:]:
        sys.stderr.write(redact(f"error: {document}: line {line}: {what} (found {found!r}; expected {expected})\n"))
    line, what, found, expected = findings[0]
    more = f" (and {len(findings) - 1} more listed above)" if len(findings) > 1 else ""
    raise InputError(f"{lead}: {what}{more}", file=document, field=f"line {line}", found=found, expected=expected, fix="edit the block so it reads the value from the manifest (pinned FIELD), by digest, never by tag")


def powershell_findings(step: Any) -> list[tuple[int, str, str, str]]:
    from pipeline.infra.powershell import check_powershell51_source

    out = []
    for problem in check_powershell51_source(step.text.encode("utf-8"), name="step"):
        match = re.match(r"step:(\d+):(\d+): (.*)", problem)
        if match:
            out.append((step.line_start + int(match.group(1)) - 1, "is not Windows PowerShell 5.1: " + match.group(3), f"column {match.group(2)}", "syntax Windows PowerShell 5.1 parses and runs"))
        else:
            out.append((step.line_start, "is not Windows PowerShell 5.1: " + problem, step.info, "syntax Windows PowerShell 5.1 parses and runs"))
    return out


def static_findings(document: Document, route_id: str, *, manifest: dict[str, Any] | None, release: str | None) -> tuple[list[tuple[int, str, str, str]], list[str]]:
    route = document.route(route_id)
    findings: list[tuple[int, str, str, str]] = []
    fields: list[str] = []
    for step in route.steps:
        block, used = fmt.check_block(step.text, step.line_start, manifest=manifest, release=release)
        findings += [(f.line, f.what, f.found, f.expected) for f in block]
        fields += used
        if step.shell == "powershell":
            findings += powershell_findings(step)
    for url_field, sha_field in fmt.unpaired_urls(fields, manifest):
        line = next(s.line_start + offset for s in route.steps for offset, text in enumerate(s.text.split("\n")) if url_field in text)
        findings.append((line, "reads an asset URL without its SHA-256 (an unpinned asset)", url_field, f"the route also reads {sha_field} and checks the download against it"))
    return sorted(findings), sorted(set(fields))


def make_bundle(
    root: Path,
    *,
    release: str | None,
    route_id: str,
    document: str | None = None,
    candidate: str = "HEAD",
    document_at: str | None = None,
    lanes_dir: Path | None = None,
) -> dict[str, Any]:
    """The bundle of one route (see the module docstring).  Raises on every refusal."""
    if release is None:
        if document is None:
            raise UsageError("a runbook bundle names its document", field="--document", expected="e.g. --document docs/RELEASING.md")
        at = resolve_commit(root, document_at or "HEAD", "--document-at")
        data = git_show(root, at, document)
        if data is None:
            raise InputError("the document is not in that commit", file=document, field="--document-at", found=at, fix="commit it first")
        doc = scan(data, document)
        route = doc.route(route_id)
        findings, fields = static_findings(doc, route_id, manifest=None, release=None)
        _refuse_findings(document, findings, f"route {route_id} cannot be bundled")
        return _bundle_document("runbook", None, None, None, document, data, at, doc, route_id, fmt.DEFAULT_HOST_KIND[route.shell], None, False, fields)

    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.manifest import parse_manifest
    from pipeline.formats.release.names import MANIFEST, repo_path
    from pipeline.formats.release.spec import load_release_toml

    lanes = load_lanes(lanes_dir)
    rt = load_release_toml(root, release, lanes)
    config = acceptance_config(rt)
    document = document or (config.document if config else DEFAULT_DOCUMENT)
    commit = resolve_commit(root, candidate, "--candidate")
    manifest_rel = repo_path(release, MANIFEST)
    held = git_show(root, commit, manifest_rel)
    if held is None:
        raise RefusedError("the candidate commit does not hold the release's manifest", file=manifest_rel, field="--candidate", found=commit)
    # check_type off: accept refuses what is not a candidate by its status, as before the manifest had an owner
    manifest = parse_manifest(held, source=f"{commit[:12]}:{manifest_rel}", check_type=False, strict_bytes=True)
    if manifest.status != "candidate":
        raise RefusedError("routes are bundled on a candidate commit", file=manifest_rel, field="status", found=manifest.status, expected="candidate", why="acceptance is evidence for the exact candidate bytes", fix=f"python -m pipeline compose promote --release {release} --to candidate, commit, and bundle on that commit")
    current_path = root / manifest_rel
    if current_path.is_file():
        current = parse_manifest(current_path.read_bytes(), source=manifest_rel, check_type=False, strict_bytes=True)
        if current.acceptance_subject() != manifest.acceptance_subject():
            raise RefusedError("the working tree's manifest binds other identities than the candidate", file=manifest_rel, field="components", fix="stage a new release for new bytes")
    at = commit if document_at is None else resolve_commit(root, document_at, "--document-at")
    if at != commit and not is_ancestor(root, commit, at):
        raise RefusedError("--document-at must be the candidate or a commit after it", field="--document-at", found=at, expected=f"a descendant of {commit}")
    data = git_show(root, at, document)
    if data is None:
        raise InputError("the document is not in the commit", file=document, field="--document-at" if document_at else "--candidate", found=at, fix="commit the document (docs/QUICKSTART.md) before the candidate")
    working = root / document
    if working.is_file() and working.read_bytes() != data:
        ui.warn(f"{document} in the working tree differs from {at[:12]}; the bundle takes the committed bytes")
    doc = scan(data, document)
    route = doc.route(route_id)
    declared = (config.routes.get(route_id) if config else None) or {}
    host = declared.get("host") or fmt.DEFAULT_HOST_KIND[route.shell]
    lane = declared.get("lane")
    if fmt.HOST_KINDS[host].os == "windows" and route.shell != "powershell" or fmt.HOST_KINDS[host].os != "windows" and route.shell != "sh":
        raise InputError("the route's shell does not run on its host kind", file=rt.path, field=f"acceptance.routes.{route_id}.host", found=host, expected="a windows-* host for powershell routes, linux-* for sh routes")
    # the whole document: a block may name any field path of it, and no literal may spell out any of its values
    findings, fields = static_findings(doc, route_id, manifest=dict(manifest.document), release=release)
    _refuse_findings(document, findings, f"route {route_id} cannot be bundled")
    bundle = _bundle_document("release-route", release, commit, {"path": manifest_rel, "sha256": sha256_bytes(held), "status": "candidate"}, document, data, at, doc, route_id, host, lane, bool(declared), fields)
    return bundle


def _bundle_document(kind, release, candidate, manifest, document, data, at, doc: Document, route_id, host, lane, required, fields) -> dict[str, Any]:
    route = doc.route(route_id)
    return {
        "artifact_type": fmt.BUNDLE_TYPE,
        "schema_version": fmt.SCHEMA_VERSION,
        "kind": kind,
        "release": release,
        "candidate_commit": candidate,
        "manifest": manifest,
        "document": {"path": document, "sha256": sha256_bytes(data), "bytes": len(data), "commit": at},
        "route": {"id": route.id, "title": route.title, "heading_line": route.heading_line, "shell": route.shell, "host_kind": host, "lane": lane, "required": required},
        "parameters": [{"name": p.name, "kind": p.kind, "default": p.default, "required": p.required} for p in doc.parameters_of(route_id)],
        "steps": [
            {"index": s.index, "shell": s.shell, "requires": list(s.requires), "line_start": s.line_start, "line_end": s.line_end, "sha256": s.sha256, "bytes": s.bytes, "text": s.text}
            for s in route.steps
        ],
        "checks": {
            "pinned_fields": fields,
            "powershell51": "passed" if route.shell == "powershell" else "not-applicable",
            "literals": "checked against the candidate manifest" if manifest else "no hash or commit typed by hand",
        },
    }


class BundleStage(Stage):
    name = "accept"

    def __init__(self, ctx: Context, root: Path, *, release: str | None, route: str, document: str | None, candidate: str, document_at: str | None, lanes_dir: Path | None) -> None:
        super().__init__(ctx)
        self.root = root
        self.release = release
        self.route = route
        self.args = {"document": document, "candidate": candidate, "document_at": document_at, "lanes_dir": lanes_dir}
        self.bundle: dict[str, Any] | None = None
        self.path: Path | None = None

    @property
    def key(self) -> str:
        return f"accept-bundle:{self.release or 'runbook'}:{self.route}"

    def describe(self) -> str:
        return f"bundle route {self.route}"

    def preflight(self) -> None:
        self.bundle = make_bundle(self.root, release=self.release, route_id=self.route, **self.args)
        where = self.release or "runbook"
        self.path = self.ctx.dist / OUTPUT_DIR / where / "bundles" / f"{self.route}.bundle.json"

    def inputs(self) -> dict[str, Any]:
        assert self.bundle is not None
        return {"bundle_sha256": sha256_bytes(fmt.canonical(self.bundle))}

    def run(self) -> list[Artifact]:
        assert self.bundle is not None and self.path is not None
        atomic_write_bytes(self.path, fmt.canonical(self.bundle))
        return [self.ctx.register.make("acceptance-bundle", self.path, stage="accept", lane=self.bundle["route"]["lane"], route=self.route, bundle_kind=self.bundle["kind"], release=self.release)]
