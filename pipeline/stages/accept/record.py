"""`accept compose`: the run receipts checked against their bundles, the candidate and the document, and the
acceptance record `acceptance/external-installation.json` written and bound."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError, RefusedError, UsageError
from pipeline.formats import acceptance as fmt
from pipeline.formats.routes import Document, parameter_value_problem, scan
from pipeline.register import Artifact, Register
from pipeline.stage import Context, Stage, execute
from pipeline.stages.accept.bundle import acceptance_config
from pipeline.stages.accept.document import (
    DEFAULT_PATH,
    OUTPUT_DIR,
    RUNNER_VARIABLES,
    git_show,
    is_ancestor,
    read_json_file,
)
from pipeline.util.fs import atomic_write_bytes, read_bytes_bounded
from pipeline.util.hashing import sha256_bytes

if TYPE_CHECKING:
    from pipeline.formats.release.manifest import ReleaseManifest


@dataclass
class Loaded:
    path: Path
    data: bytes
    receipt: dict[str, Any]
    bundle_bytes: bytes
    bundle: dict[str, Any]
    bundle_file: str = ""

    @property
    def route(self) -> str:
        return self.receipt["route"]


def _change_key(text: str) -> tuple[str, str, str]:
    match = re.fullmatch(r"(?P<route>[a-z0-9][a-z0-9-]*):(?P<step>[1-9][0-9]*|removed-[1-9][0-9]*)=(?P<why>.*)", text, flags=re.S)
    if not match or not match.group("why").strip():
        raise UsageError("--document-change reads ROUTE:STEP=WHY", field="--document-change", found=text, expected="e.g. rtx5090-linux:3=the image is now read from the manifest (STEP: the step number in the current document, or removed-N for a block removed from the candidate's)")
    return match.group("route"), match.group("step"), match.group("why").strip()


def changed_blocks(old: list[str], new: list[str]) -> list[tuple[str, str, int | None, int | None]]:
    """(key, change, old index, new index) for every block that differs, keys as --document-change names them."""
    import difflib

    out: list[tuple[str, str, int | None, int | None]] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = max(i2 - i1, j2 - j1)
        for k in range(pairs):
            oi = i1 + k if i1 + k < i2 else None
            nj = j1 + k if j1 + k < j2 else None
            if nj is not None:
                out.append((str(nj + 1), "edited" if oi is not None else "added", None if oi is None else oi + 1, nj + 1))
            else:
                out.append((f"removed-{oi + 1}", "removed", oi + 1, None))
    return out


class ComposeStage(Stage):
    name = "accept"
    runs_pipes = ("compose",)  # binds the record through compose's AcceptStage (found through the road: stages are leaves)

    def __init__(self, ctx: Context, root: Path, release: str, receipts: list[Path], *, changes: list[str], bundles: list[Path], lanes_dir: Path | None) -> None:
        super().__init__(ctx)
        self.root = root
        self.release = release
        self.receipt_paths = receipts
        self.change_args = changes
        self.bundle_paths = bundles
        self.lanes_dir = lanes_dir
        self.record: dict[str, Any] | None = None
        self.record_path: Path | None = None
        self.outcome = None

    @property
    def key(self) -> str:
        return f"accept-compose:{self.release}"

    def describe(self) -> str:
        return f"compose the acceptance of {self.release}"

    def inputs(self) -> dict[str, Any]:
        assert self.record is not None
        return {"record_sha256": sha256_bytes(fmt.canonical(self.record)), "root": str(self.root.resolve())}

    def preflight(self) -> None:
        self.record = compose_record(self.root, self.release, self.receipt_paths, register=self.ctx.register, changes=self.change_args, bundles=self.bundle_paths, lanes_dir=self.lanes_dir)

    def run(self) -> list[Artifact]:
        AcceptStage = self.inner_stage_class("compose", "AcceptStage")
        assert self.record is not None
        path = self.ctx.dist / OUTPUT_DIR / self.release / "external-installation.json"
        atomic_write_bytes(path, fmt.canonical(self.record))
        self.record_path = path
        # Bound by compose's own action, so the register's release-tree entries describe the tree it leaves.
        binding = AcceptStage(Context.open(self.ctx.dist, self.lanes_dir, root=self.root), self.release, path, lanes_dir=self.lanes_dir)
        execute(binding)
        self.outcome = binding.outcome
        return [self.ctx.register.make("acceptance-record", path, stage="accept", lane=None, release=self.release, status=self.record["status"])]


def _refused(what: str, **kwargs: Any) -> RefusedError:
    return RefusedError(what, why=kwargs.pop("why", "the acceptance record is composed only from passing runs of the candidate's documented blocks"), **kwargs)


def _load_receipts(paths: list[Path], register: Register, bundles: list[Path]) -> list[Loaded]:
    by_sha: dict[str, tuple[bytes, str]] = {}
    for entry in register.query("acceptance-bundle"):
        path = register.verified_path(entry)
        by_sha[entry.sha256] = (read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what="bundle"), str(path))
    for path in bundles:
        data = read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what="bundle")
        by_sha[sha256_bytes(data)] = (data, str(path))
    loaded = []
    for path in paths:
        data, doc = read_json_file(path, "the receipt")
        receipt = fmt.validate_receipt(doc, file=str(path))
        found = by_sha.get(receipt["bundle_sha256"])
        if found is None:
            raise InputError("the bundle this receipt ran is not in the register", file=path, field="bundle_sha256", found=receipt["bundle_sha256"], fix="make the bundle with 'accept bundle' into the same --dist, or pass it with --bundle FILE")
        bundle = fmt.validate_bundle(fmt.loads_strict(found[0], file=found[1]), file=found[1])
        loaded.append(Loaded(path, data, receipt, found[0], bundle, found[1]))
    return loaded


def check_receipt(item: Loaded, host_kind: str) -> None:
    """A receipt ran exactly its bundle's steps, in order, with the document's bytes, and passed."""
    r, b, f = item.receipt, item.bundle, str(item.path)
    if r["route"] != b["route"]["id"] or r["release"] != b["release"] or r["candidate_commit"] != b["candidate_commit"] or r["kind"] != b["kind"]:
        raise _refused("the receipt does not describe its bundle", file=f, field="route", found=f"{r['route']} {r['release']} {r['candidate_commit']}", expected=f"{b['route']['id']} {b['release']} {b['candidate_commit']}")
    if (r["document"]["path"], r["document"]["sha256"]) != (b["document"]["path"], b["document"]["sha256"]):
        raise _refused("the receipt names another document than its bundle", file=f, field="document.sha256", found=f"{r['document']['path']} {r['document']['sha256']}", expected=f"{b['document']['path']} {b['document']['sha256']}")
    if r["environment"]["shell"] != b["route"]["shell"]:
        raise _refused("the receipt ran another shell than its route's", file=f, field="environment.shell", found=r["environment"]["shell"], expected=b["route"]["shell"])
    if r["status"] != "passed":
        step = r["failed_step"]
        code = next((s["exit_status"] for s in r["steps"] if s["index"] == step), None)
        raise _refused(f"route {r['route']} failed at step {step} ({r['failure']})", file=f, field=f"steps[{(step or 1) - 1}].exit_status", found=code, expected=0, fix="fix the document or the host, bundle again if the document changed, and run the route again")
    steps = b["steps"]
    if [s["index"] for s in r["steps"]] != [s["index"] for s in steps]:
        raise _refused("the receipt did not run its bundle's steps in order (a step is missing, extra or reordered)", file=f, field="steps", found=[s["index"] for s in r["steps"]], expected=[s["index"] for s in steps])
    kind = fmt.HOST_KINDS[host_kind]
    for position, (ran, step) in enumerate(zip(r["steps"], steps, strict=True)):
        where = f"steps[{position}]"
        if ran["block_sha256"] != step["sha256"]:
            raise _refused("the receipt ran another block than the bundle holds", file=f, field=f"{where}.block_sha256", found=ran["block_sha256"], expected=step["sha256"])
        if ran["requires"] != step["requires"]:
            raise _refused("the receipt's host requirement differs from the document's", file=f, field=f"{where}.requires", found=ran["requires"], expected=step["requires"])
        if ran["status"] == "passed":
            if ran["executed_sha256"] != step["sha256"]:
                raise _refused("the executed bytes differ from the document's block", file=f, field=f"{where}.executed_sha256", found=ran["executed_sha256"], expected=step["sha256"])
            if ran["exit_status"] != 0 or ran["stdout"] is None or ran["stderr"] is None:
                raise _refused("a passed step has no exit status 0 and output hashes", file=f, field=where)
            continue
        if ran["status"] == "failed":
            raise _refused(f"step {step['index']} failed", file=f, field=f"{where}.status", found="failed", expected="passed")
        # not run: allowed only for a host-only step whose capability this host lacked and the host kind does not promise
        if not step["requires"]:
            raise _refused(f"step {step['index']} was skipped, but it is not a host-only step", file=f, field=f"{where}.status", found="not-run", expected="passed")
        lacked = [cap for cap in step["requires"] if not (r["capabilities"].get(cap) or {}).get("available", False)]
        if not lacked:
            raise _refused(f"step {step['index']} was not run although the host had every capability it requires", file=f, field=f"{where}.status", found="not-run", expected="passed")
        promised = [cap for cap in lacked if cap in kind.promises]
        if promised:
            raise _refused(
                f"step {step['index']} requires {', '.join(promised)}, which host kind {kind.id} promises, but it was not run",
                file=f, field=f"{where}.status", found="not-run", expected="passed",
                why="a host-only step may stay unrun only on a host kind that does not promise its capability",
                fix="run the route on a host of that kind (release.toml [acceptance.routes] names it)",
            )
    if not r["clone"]["clean"]:
        raise _refused("the route ran in a clone with local changes", file=f, field="clone.clean", found=False, expected=True)
    if (r["host"].get("os"), r["host"].get("arch")) != (kind.os, kind.arch):
        raise _refused("the route ran on another kind of host than release.toml declares", file=f, field="host.os", found=f"{r['host'].get('os')}-{r['host'].get('arch')}", expected=f"{kind.os}-{kind.arch} ({kind.id})")
    if r["secret_values_recorded"] != 0:  # pragma: no cover - the schema already refuses it
        raise _refused("records secret values", file=f, field="secret_values_recorded")


def check_receipt_parameters(item: Loaded, document: Document) -> None:
    """The receipt's parameters are exactly the route's declared ones (a default with the document's
    value, every value of its declared kind), and its environment holds nothing but the runner's own
    variables and those parameters."""
    r, f, route_id = item.receipt, str(item.path), item.route
    declared = {p.name: p for p in document.parameters_of(route_id)}
    params = r["environment"]["parameters"]
    why = "a record can only be composed from a run of the documented text, with the route's own parameters"
    if sorted(params) != sorted(declared):
        raise _refused(f"the receipt's parameters are not those route {route_id} declares", file=f, field="environment.parameters", found=sorted(params), expected=sorted(declared), why=why, fix=f"run the route again from a bundle of {document.path}")
    for name, value in sorted(params.items()):
        held = declared[name]
        if value["source"] == "default" and (held.default is None or value["value"] != held.default):
            raise _refused(f"parameter {name} ran with a default the document does not declare", file=f, field=f"environment.parameters.{name}.value", found=value["value"], expected=held.default, why=why)
        if value["source"] == "unset" and held.required:
            raise _refused(f"the required parameter {name} was not set", file=f, field=f"environment.parameters.{name}.source", found="unset", expected="set", why=why)
        if value["source"] != "unset" and (problem := parameter_value_problem(held.kind, value["value"])) is not None:
            raise _refused(f"parameter {name} ran with a value outside the grammar its declaration states ({held.kind})", file=f, field=f"environment.parameters.{name}.value", found=value["value"], expected=problem, why=why)
    path = r["environment"]["path"]
    if r["environment"]["shell"] == "sh" and not re.fullmatch(r"(?:/[^:\0]+:)?" + re.escape(DEFAULT_PATH), path):
        raise _refused(
            "the run's PATH is not the runner's own", file=f, field="environment.path", found=path,
            expected=f"{DEFAULT_PATH}, after at most the bin folder of the runner's Python", why="a folder first on PATH decides what every command of the steps runs",
            fix="run the route again with this runner (python3 -m pipeline.stages.accept run, from the virtual environment the steps should use)",
        )
    allowed = RUNNER_VARIABLES | {name for name, value in params.items() if value["source"] != "unset"}
    extra = sorted(set(r["environment"]["variables"]) - allowed)
    if extra:
        raise _refused("the run's environment held variables that are neither the runner's nor the route's parameters", file=f, field="environment.variables", found=extra, expected="only " + ", ".join(sorted(allowed)), why=why)


@dataclass
class _RouteContext:
    """What every route's check in compose_record shares: the candidate, both documents, the changes given."""

    release: str
    candidate: str
    document: str
    old_doc: Any
    new_doc: Any
    given: dict[tuple[str, str], str]
    used_changes: set[tuple[str, str]] = field(default_factory=set)
    change_out: list[dict[str, Any]] = field(default_factory=list)


def _candidate_of(root: Path, manifest_rel: str, current: ReleaseManifest, loaded: list[Loaded], config: Any) -> tuple[str, bytes, ReleaseManifest]:
    """The one candidate commit every receipt ran on, its manifest bytes and document: checked against the current tree."""
    from pipeline.formats.release.manifest import parse_manifest

    candidates = sorted({item.bundle["candidate_commit"] for item in loaded})
    if len(candidates) != 1:
        raise _refused("the receipts ran on different candidates", field="candidate_commit", found=candidates, expected="one candidate commit")
    candidate = candidates[0]
    held = git_show(root, candidate, manifest_rel)
    if held is None:
        raise _refused("the candidate commit is not in this repository or does not hold the release", field="candidate_commit", found=candidate, fix="fetch it (git fetch) or run the routes on a candidate of this repository")
    cand_manifest = parse_manifest(held, source=f"{candidate[:12]}:{manifest_rel}", check_type=False, strict_bytes=True)
    if cand_manifest.status != "candidate":
        raise _refused("the receipts' commit is not a candidate of this release", field="candidate_commit", found=candidate, expected=f"a commit whose {manifest_rel} has status candidate")
    if cand_manifest.acceptance_subject() != current.acceptance_subject():
        raise _refused("the candidate bound other identities than the current manifest", file=manifest_rel, field="components", found=candidate)
    for item in loaded:
        if item.receipt["clone"]["commit"] != candidate:
            raise _refused("the route ran in a clone of another commit than the candidate", file=str(item.path), field="clone.commit", found=item.receipt["clone"]["commit"], expected=candidate)
        if item.bundle["manifest"]["sha256"] != sha256_bytes(held):
            raise _refused("the bundle was made from another manifest than the candidate's", file=str(item.path), field="manifest.sha256", found=item.bundle["manifest"]["sha256"], expected=sha256_bytes(held))
        if item.bundle["document"]["path"] != config.document:
            raise _refused("the bundle is of another document than release.toml names", file=str(item.path), field="document.path", found=item.bundle["document"]["path"], expected=config.document)

    return candidate, held, cand_manifest


def _route_row(root: Path, item: Loaded, route_id: str, declared: dict[str, Any], context: _RouteContext) -> dict[str, Any]:
    """One required route's row of the record, after checking its receipt against the documents; records its
    changed blocks in the context."""
    candidate, old_doc, new_doc, document, given, release = context.candidate, context.old_doc, context.new_doc, context.document, context.given, context.release
    used_changes, change_out = context.used_changes, context.change_out
    check_receipt(item, declared["host"])
    if item.bundle["route"]["host_kind"] != declared["host"]:
        raise _refused("the bundle's host kind differs from release.toml's", file=str(item.path), field="route.host_kind", found=item.bundle["route"]["host_kind"], expected=declared["host"])
    if route_id not in new_doc.routes or route_id not in old_doc.routes:
        raise _refused("a required route is missing from the document", file=document, field=route_id)
    old_steps = [s.sha256 for s in old_doc.routes[route_id].steps]
    new_steps = [s.sha256 for s in new_doc.routes[route_id].steps]
    ran_steps = [s["sha256"] for s in item.bundle["steps"]]
    doc_commit = item.bundle["document"]["commit"]
    shown = git_show(root, doc_commit, document)
    if shown is None or sha256_bytes(shown) != item.bundle["document"]["sha256"]:
        raise _refused("the document at the bundle's commit does not have the bundle's hash", file=str(item.path), field="document.sha256", found=None if shown is None else sha256_bytes(shown), expected=item.bundle["document"]["sha256"])
    at_commit = scan(shown, document)  # hashed above, before it is parsed
    fmt.check_against_document(item.bundle, at_commit, file=item.bundle_file or str(item.path), where=f"commit {doc_commit[:12]}")
    check_receipt_parameters(item, at_commit)
    if doc_commit == candidate:
        if item.receipt["document"]["sha256_in_clone"] != item.bundle["document"]["sha256"]:
            raise _refused("the clone's document differs from the bundle's", file=str(item.path), field="document.sha256_in_clone", found=item.receipt["document"]["sha256_in_clone"], expected=item.bundle["document"]["sha256"])
    elif not is_ancestor(root, candidate, doc_commit):
        raise _refused("the bundle's document commit does not follow the candidate", file=str(item.path), field="document.commit", found=doc_commit, expected=f"{candidate} or a later commit")
    changed = changed_blocks(old_steps, new_steps)
    for key, change, old_index, new_index in changed:
        why = given.get((route_id, key))
        if why is None:
            raise _refused(
                f"block {key} of route {route_id} changed since the candidate ({change}) without a document_change",
                file=document, field=f"line {new_doc.routes[route_id].steps[new_index - 1].line_start}" if new_index else route_id,
                fix=f"say which and why: --document-change {route_id}:{key}=WHY, and run the route again from the current document (accept bundle --document-at HEAD)",
            )
        used_changes.add((route_id, key))
        old_step = old_doc.routes[route_id].steps[old_index - 1] if old_index else None
        new_step = new_doc.routes[route_id].steps[new_index - 1] if new_index else None
        change_out.append({
            "route": route_id,
            "step": key,
            "change": change,
            "old_sha256": old_step.sha256 if old_step else None,
            "old_lines": [old_step.line_start, old_step.line_end] if old_step else None,
            "new_sha256": new_step.sha256 if new_step else None,
            "new_lines": [new_step.line_start, new_step.line_end] if new_step else None,
            "why": given[(route_id, key)],
            "rerun_receipt_sha256": sha256_bytes(item.data),
        })
    if ran_steps != new_steps:
        if changed:
            raise _refused(f"route {route_id} changed since the candidate: its changed blocks need a re-run from the current document", file=str(item.path), field="bundle_sha256", fix=f"python -m pipeline accept bundle --release {release} --route {route_id} --document-at HEAD, then accept run in a clone of the candidate")
        raise _refused(f"the receipt ran other blocks than route {route_id} of the document", file=str(item.path), field="steps")
    ran = sum(1 for s in item.receipt["steps"] if s["status"] == "passed")
    not_run = [
        {"index": s["index"], "requires": s["requires"], "lines": [b["line_start"], b["line_end"]], "reason": s["reason"]}
        for s, b in zip(item.receipt["steps"], item.bundle["steps"], strict=True) if s["status"] == "not-run"
    ]
    return {
        "status": "passed",
        "title": item.bundle["route"]["title"],
        "host_kind": declared["host"],
        "lane": declared.get("lane"),
        "bundle_sha256": item.receipt["bundle_sha256"],
        "receipt_sha256": sha256_bytes(item.data),
        "document_sha256": item.bundle["document"]["sha256"],
        "steps": len(item.bundle["steps"]),
        "steps_run": ran,
        "host_only_not_run": not_run,
        "parameters": {name: p.get("value") for name, p in sorted(item.receipt["environment"]["parameters"].items()) if p.get("source") == "set"},
        "host": {"os": item.receipt["host"]["os"], "arch": item.receipt["host"]["arch"], "gpus": item.receipt["host"]["gpus"]},
        "finished_at": item.receipt["finished_at"],
    }


def compose_record(root: Path, release: str, receipt_paths: list[Path], *, register: Register, changes: list[str], bundles: list[Path], lanes_dir: Path | None) -> dict[str, Any]:
    """The acceptance record, after every check (docs/release-tree.md, Acceptance record)."""
    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.manifest import parse_manifest
    from pipeline.formats.release.names import MANIFEST, repo_path
    from pipeline.formats.release.spec import load_release_toml

    lanes = load_lanes(lanes_dir)
    rt = load_release_toml(root, release, lanes)
    config = acceptance_config(rt)
    if config is None or not config.routes:
        raise InputError("release.toml declares no acceptance routes", file=rt.path, field="acceptance.routes", expected="[acceptance.routes.<route>] tables with host = '<host kind>'", fix="declare the routes the release requires (docs/release-tree.md)")
    manifest_rel = repo_path(release, MANIFEST)
    current_path = root / manifest_rel
    if not current_path.is_file():
        raise InputError("the release has no manifest", file=manifest_rel)
    current = parse_manifest(current_path.read_bytes(), source=manifest_rel, check_type=False, strict_bytes=True)
    if current.status != "candidate":
        raise _refused("acceptance is composed for a candidate", file=manifest_rel, field="status", found=current.status, expected="candidate")
    if not receipt_paths:
        raise UsageError("no receipts given", field="RECEIPT", expected="one receipt per required route: " + ", ".join(config.routes))
    loaded = _load_receipts(receipt_paths, register, bundles)
    for item in loaded:
        if item.bundle["kind"] != "release-route" or item.bundle["release"] != release:
            raise _refused("the receipt is not a run of a route of this release", file=str(item.path), field="release", found=item.bundle["release"], expected=release)
    candidate, held, cand_manifest = _candidate_of(root, manifest_rel, current, loaded, config)
    document = config.document
    at_candidate = git_show(root, candidate, document)
    if at_candidate is None:
        raise _refused("the document is not in the candidate commit", file=document, field="candidate_commit", found=candidate)
    working = root / document
    now = working.read_bytes() if working.is_file() else None
    if now is None:
        raise InputError("the route document is missing from the working tree", file=document)
    old_doc = scan(at_candidate, document)
    new_doc = scan(now, document)
    given: dict[tuple[str, str], str] = {}
    for text in changes:
        route, step, why = _change_key(text)
        if (route, step) in given:
            raise UsageError("names one block twice", field="--document-change", found=f"{route}:{step}")
        given[(route, step)] = why

    by_route: dict[str, list[Loaded]] = {}
    for item in loaded:
        by_route.setdefault(item.route, []).append(item)
    extra = sorted(set(by_route) - set(config.routes))
    if extra:
        raise _refused("receipts of routes release.toml does not require", field="acceptance.routes", found=extra, expected=sorted(config.routes), fix="declare them in release.toml [acceptance.routes] or leave them out")
    missing = sorted(set(config.routes) - set(by_route))
    if missing:
        raise _refused("required routes have no receipt", file=rt.path, field="acceptance.routes", found=sorted(by_route), expected=sorted(config.routes), fix="run " + ", ".join(missing) + " (accept bundle, accept run) and pass the receipts")
    routes_out: dict[str, Any] = {}
    context = _RouteContext(release, candidate, document, old_doc, new_doc, given)
    blocks_total = blocks_run = 0
    for route_id, declared in sorted(config.routes.items()):
        items = by_route[route_id]
        if len(items) != 1:
            raise _refused("a route has more than one receipt", field=route_id, found=[str(i.path) for i in items], expected="one receipt per route (the run that is accepted)")
        row = _route_row(root, items[0], route_id, declared, context)
        blocks_total += row["steps"]
        blocks_run += row["steps_run"]
        routes_out[route_id] = row
    unused = sorted(set(given) - context.used_changes)
    if unused:
        raise UsageError("--document-change names a block that did not change", field="--document-change", found=[f"{r}:{s}" for r, s in unused], expected="only changed blocks of required routes")
    limitations = []
    for route_id, row in sorted(routes_out.items()):
        if row["host_only_not_run"]:
            caps = sorted({c for s in row["host_only_not_run"] for c in s["requires"]})
            limitations.append(f"route {route_id}: {len(row['host_only_not_run'])} of {row['steps']} blocks are host-only ({', '.join(caps)}) and were not run on host kind {row['host_kind']}")
    as_of = max(row["finished_at"] for row in routes_out.values())[:10]
    return {
        "artifact_type": fmt.RECORD_TYPE,
        "schema_version": 1,
        "release": release,
        "status": "passed",
        "as_of": as_of,
        "candidate_commit": candidate,
        "subject": cand_manifest.acceptance_subject(),
        "routes": {route_id: row["status"] for route_id, row in sorted(routes_out.items())},
        "documented_routes": {
            "document": {"path": document, "sha256_at_candidate": sha256_bytes(at_candidate), "sha256_current": sha256_bytes(now)},
            "blocks_total": blocks_total,
            "blocks_run": blocks_run,
            "routes": routes_out,
            "document_change": context.change_out,
        },
        "limitations": limitations,
        "secret_values_recorded": 0,
    }
