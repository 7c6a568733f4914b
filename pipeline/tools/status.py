"""`python -m pipeline status [--release vX.Y.Z] [--json | --html FILE]`: where each lane and a release stand.

One row per lane, one cell per stage of the road (cut, build, package, image, push, qualify,
publish: the component prerelease), each `done <short digest>`, `up to date`,
`stale: <which input changed>`, `missing`, `skipped: <reason>` or `refused: <message>`; then, with
`--release`, the tree's state, every blocker with the command that clears it, the acceptance
routes with their receipts, and (with GITHUB_TOKEN) GitHub's state of the release, read only.

It reads the register, the cut ledgers, the lane files and the release tree; it never runs a
stage.  Staleness is what a record can show without running the stage: its outputs changed on
disk, an entry it read was re-recorded, a file of its code changed, the lane file changed, or the
lane's current cut is another one (the facts `stage.execute` records beside the fingerprint).
Inputs only a stage's preflight can observe (host compilers, pinned tool versions) are the
stage's to judge when it runs: `up to date` here means nothing status can see has changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import PipelineError, UsageError, printable, redact
from pipeline.formats.lanes import REPO_ROOT, Lane, load_lanes
from pipeline.register import Artifact, Register, fingerprint
from pipeline.road import TOOLS
from pipeline.tools.status_model import COLUMNS, Blocker, Cell, LaneStatus, ReleaseStatus, RouteStatus, Status
from pipeline.util.hashing import sha256_file

if TYPE_CHECKING:
    from pipeline.formats.release.manifest import ReleaseManifest

IMAGE_STAGES = ("image", "push")
NATIVE_SKIP = "a native lane ships no image"  # the image stage's own skip reason
# The output whose digest names a record's result, per stage.
PRIMARY_KIND = {
    "build": "build-identity",
    "package": "outer-checksums",
    "image": "oci-layout",
    "push": "publication-receipt",
    "qualify": "lane-receipt",
    "publish": "release-publication",
}


# -- the lane cells ----------------------------------------------------------------------------

def _current_cut(lane: Lane):
    return lane.ledger().current(lane.version)


def cut_cell(lane: Lane, register: Register) -> Cell:
    refusal = register.refusals.get(f"cut:{lane.id}")
    if refusal:
        return Cell("refused", refusal["message"])
    cut = _current_cut(lane)
    if cut is None:
        return Cell("missing", f"no cut of {lane.version} in {lane.ledger_file().name}")
    reasons = []
    if cut.lane_file_sha256 and cut.lane_file_sha256 != lane.file_sha256:
        reasons.append(f"{lane.file.name} changed since {cut.tag} was cut")
    lock = _lock_digest(lane)
    if cut.toolchain_lock_sha256 and lock and cut.toolchain_lock_sha256 != lock:
        reasons.append(f"the toolchain lock's CUDA {lane.cuda_toolkit} entry changed since {cut.tag} was cut")
    if reasons:
        return Cell("stale", reasons[0], cut.source_commit, tuple(reasons))
    return Cell("done", cut.state, cut.source_commit)


def _lock_digest(lane: Lane) -> str | None:
    from pipeline.formats.cut_binding import lock_digest

    try:
        return lock_digest(lane)
    except PipelineError:
        return None  # a lock that does not pin this toolkit: the cut stage refuses it when it runs


def _belongs(key: str, lane_id: str, prefixes: tuple[str, ...], lane_of_record: str | None, outputs: list[Artifact]) -> bool:
    parts = key.split(":")
    if parts[0] not in prefixes:
        return False
    return lane_of_record == lane_id or (len(parts) > 1 and parts[1] == lane_id) or any(a.lane == lane_id for a in outputs)


class _CodeNow:
    """The current SHA-256 of pipeline files, each hashed once per status run.  Only the files a record
    names are hashed (no import graph is parsed): a new import means an edit to a file already named."""

    def __init__(self) -> None:
        self._cache: dict[str, str | None] = {}

    def changed(self, recorded: dict[str, str]) -> list[str]:
        from pipeline.codedigest import PACKAGE_ROOT

        out = []
        for path, digest in sorted(recorded.items()):
            if path not in self._cache:
                file = PACKAGE_ROOT / path
                self._cache[path] = sha256_file(file) if ".." not in Path(path).parts and file.is_file() else None
            if self._cache[path] != digest:
                out.append(path)
        return out


def _output_problems(register: Register, outputs: list[Artifact], named: list[str]) -> list[str]:
    reasons = [f"output {name} is no longer in the register" for name in named if name not in register.artifacts]
    for artifact in outputs:
        path = register.path_of(artifact)
        if not path.is_file():
            reasons.append(f"output {artifact.name} is missing on disk")
        elif path.stat().st_size != artifact.size or sha256_file(path) != artifact.sha256:
            reasons.append(f"output {artifact.name} changed on disk")
    return reasons


def _input_problems(record: dict[str, Any], register: Register, lane: Lane, stage: str, code_now: _CodeNow) -> list[str]:
    reasons = []
    for name, digest in sorted((record.get("read") or {}).items()):
        now = register.artifacts.get(name)
        if now is None:
            reasons.append(f"{name} (an input) is no longer in the register")
        elif now.sha256 != digest:
            reasons.append(f"{name} changed ({now.stage} recorded new bytes)")
    recorded_code = record.get("code") or {}
    if isinstance(recorded_code, dict) and recorded_code:
        changed = code_now.changed(recorded_code)
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            reasons.append(f"code changed: {', '.join('pipeline/' + p for p in changed[:3])}{more}")
    lane_digest = (record.get("inputs") or {}).get("lane_file_sha256")
    if lane_digest and lane_digest != fingerprint(lane.file_sha256):
        reasons.append(f"{lane.file.name} changed")
    return reasons


def _cut_problems(outputs: list[Artifact], lane: Lane) -> list[str]:
    cut = _current_cut(lane)
    made_for = sorted({a.attrs["component_tag"] for a in outputs if isinstance(a.attrs.get("component_tag"), str)})
    if cut is not None and made_for and cut.tag not in made_for:
        return [f"made for {made_for[0]}, the lane's current cut is {cut.tag}"]
    return []


def record_cell(lane: Lane, register: Register, stage: str, prefixes: tuple[str, ...], product: bool, code_now: _CodeNow) -> Cell:
    if stage in IMAGE_STAGES and lane.kind != "container":
        return Cell("skipped", NATIVE_SKIP)
    for key, refusal in sorted(register.refusals.items()):
        if _belongs(key, lane.id, prefixes, refusal.get("lane"), []):
            return Cell("refused", refusal["message"])
    found = []
    for key, record in sorted(register.stages.items()):
        outputs = [register.artifacts[n] for n in record.get("outputs", []) if n in register.artifacts]
        if _belongs(key, lane.id, prefixes, record.get("lane"), outputs):
            found.append((key, record, outputs))
    if not found:
        return Cell("missing", f"no {stage} of this lane in {register.file.name}")
    applied = [item for item in found if item[0].split(":")[0] == prefixes[0]]
    if not applied:  # publish: a plan written, never applied
        key, record, outputs = found[0]
        return Cell("missing", f"planned ({key}), not applied", outputs[0].sha256 if outputs else None)
    key, record, outputs = applied[0]
    reasons = _output_problems(register, outputs, record.get("outputs", [])) + _input_problems(record, register, lane, stage, code_now) + _cut_problems(outputs, lane)
    primary = next((a for a in outputs if a.kind == PRIMARY_KIND.get(stage)), outputs[0] if outputs else None)
    digest = None
    if primary is not None:
        digest = str(primary.attrs.get("manifest_digest", "")).removeprefix("sha256:") or primary.sha256
    if reasons:
        return Cell("stale", reasons[0], digest, tuple(reasons))
    if product and "code" not in record:  # a record made before records kept their facts: nothing to check it by
        return Cell("done", "recorded without the facts status checks; run the stage again to know", digest)
    if product:
        return Cell("up to date", "", digest)
    note = str(primary.attrs.get("status")) if primary is not None and primary.attrs.get("status") else ""
    return Cell("done", note, digest)


def lane_statuses(register: Register, lanes: dict[str, Lane]) -> list[LaneStatus]:
    code_now = _CodeNow()
    rows = []
    for lane in lanes.values():
        cells = {}
        for stage, prefixes, product in COLUMNS:
            cells[stage] = cut_cell(lane, register) if stage == "cut" else record_cell(lane, register, stage, prefixes, product, code_now)
        cut = _current_cut(lane)
        rows.append(LaneStatus(lane.id, lane.kind, lane.short_name, cut.tag if cut else None, cut.state if cut else None, cells, ci_recorded(lane, register)))
    return rows


def ci_recorded(lane: Lane, register: Register) -> str | None:
    """The CI at the lane's current cut commit where a record keeps it: the publication receipt, else the plan, else the cut
    (formats/ci_checks.py renders it); None where none recorded it (a cut without a token, nothing planned yet) or the
    lane has no current cut with a commit.  Only a record of exactly that commit counts: a plan or receipt of an earlier
    cut says nothing about this one's CI."""
    from pipeline.formats import publication_plan as plans
    from pipeline.formats.ci_checks import summary

    cut = _current_cut(lane)
    commit = cut.source_commit if cut is not None else None
    if commit is None:
        return None
    for kind, reader, where in (("release-publication", plans.read_receipt, "receipt"), ("publication-plan", plans.read_plan, "plan")):
        for entry in register.query(kind, lane=lane.id):
            try:
                document = reader(register.verified_path(entry))  # the bytes the register recorded, else skipped
                block = document.get("ci") if where == "receipt" else document["observed"].get("ci")
                if isinstance(block, dict) and block.get("sha") == commit:
                    return f"{summary(block, file=entry.name, field='ci')} (publication {where})"
            except (PipelineError, OSError):
                continue  # a missing or changed record: the publish cell says so
    for entry in register.query("cut", lane=lane.id):
        block = entry.attrs.get("ci")
        if isinstance(block, dict) and block.get("sha") == commit:
            try:
                return f"{summary(block, file=entry.name, field='ci')} (cut)"
            except PipelineError:
                return None
    return None


# -- the release ---------------------------------------------------------------------------------

def release_status(root: Path, release: str, register: Register, lanes: dict[str, Lane]) -> ReleaseStatus:
    from pipeline.formats.release.names import release_dir
    from pipeline.formats.release.spec import load_release_toml
    from pipeline.formats.release.tree import blocker_fix, read_tree

    tree = read_tree(release_dir(root, release), shown=f"manifests/{release}")
    manifest = tree.manifest
    spec = load_release_toml(root, release, lanes)
    container = next((lane.id for lane in lanes.values() if lane.kind == "container"), None)
    status = ReleaseStatus(release, str(manifest.status))
    status.blockers = [Blocker(b, blocker_fix(b, release, manual=b in spec.blockers, container_lane=container)) for b in manifest.blockers()]
    qualification = manifest.section("qualification")
    acceptance = qualification.get("acceptance") if isinstance(qualification.get("acceptance"), dict) else None
    if acceptance:
        status.acceptance = f"{acceptance.get('status')} (record {str(acceptance.get('sha256') or '')[:12]})"
    status.reviews = reviews_line(manifest, tree.reviews) if tree.reviews_problem is None else f"the review ledger cannot be read: {tree.reviews_problem}"
    for route_id, route in sorted(((spec.acceptance or {}).get("routes") or {}).items()):
        receipts = tuple(f"{a.attrs.get('status')} {a.sha256[:12]}" for a in register.query("acceptance-receipt", route=route_id))
        status.routes.append(RouteStatus(route_id, route["host"], route["lane"], receipts))
    status.refusals = [(key, r["message"]) for key, r in sorted(register.refusals.items()) if release in key.split(":")[1:]]
    return status


def reviews_line(manifest: ReleaseManifest, reviews: dict[str, Any] | None) -> str:
    """The review ledger in one line: each council's state and the findings that hold the release, and whether
    the ledger in the tree is the one the manifest binds (an edit shows until `compose rebind` binds it)."""
    entry = manifest.value("reviews")
    if not manifest.has("reviews"):
        return "not required (made before the review ledger)"
    if reviews is None:
        return "no review ledger in the tree" + (" (but the manifest binds one)" if isinstance(entry, dict) else "")
    councils = []
    for council, review in reviews["reviews"].items():
        holding = [fid for fid, f in review["findings"].items() if f["blocking"]]
        councils.append(f"{council} {review['state']}" + (f" (holding: {', '.join(holding)})" if holding else ""))
    bound = isinstance(entry, dict) and entry.get("sha256") == reviews["sha256"]
    return f"{', '.join(councils) or 'no review recorded'}; ledger {reviews['sha256'][:12]} " + ("bound" if bound else "not bound yet: run compose rebind")


def github_state(release: str, lanes: list[LaneStatus], lane_files: dict[str, Lane], token: str) -> dict[str, Any]:
    """GitHub's state of the product release and of each lane's current component prerelease (read only)."""
    from pipeline.formats.release.names import PRODUCT_REPO_SLUG
    from pipeline.infra.github import GitHub, repository_of

    def one(repository: str, tag: str) -> dict[str, Any]:
        found = GitHub(repository, token).release_by_tag(tag)
        if found is None:
            return {"repository": repository, "tag": tag, "state": "not published"}
        state = "draft" if found.get("draft") else "prerelease" if found.get("prerelease") else "published"
        return {"repository": repository, "tag": tag, "state": state, "immutable": found.get("immutable") is True, "release_id": found.get("id")}

    product = one(PRODUCT_REPO_SLUG, release) if release else None
    components = {row.lane: one(repository_of(lane_files[row.lane].component_repository), row.cut_tag) for row in lanes if row.cut_tag}
    return {"product": product, "components": components}


def collect(dist: Path, root: Path, release: str | None, *, lanes_dir: Path | None = None, token: str | None = None) -> Status:
    register = Register(dist, repo_root=root)
    lanes = load_lanes(lanes_dir)
    rows = lane_statuses(register, lanes)
    result = Status(rows)
    if release is not None:
        result.release = release_status(root, release, register, lanes)
    if token:
        github = github_state(release or "", rows, lanes, token)
        result.github = github
        if result.release is not None:
            result.release.github = github
        for row in rows:
            component = github["components"].get(row.lane)
            if component:
                row.cells["publish"] = _github_publish_cell(row.cells["publish"], component)
    return result


def _github_publish_cell(cell: Cell, component: dict[str, Any]) -> Cell:
    """GitHub's word on the lane's component prerelease is the truth about publication."""
    if component["state"] == "not published":
        return cell if cell.state in ("refused", "missing") else Cell("missing", f"{component['tag']} is not on GitHub", cell.digest)
    return Cell("done", f"{component['state']} on GitHub", cell.digest or str(component.get("release_id")))


# -- text ---------------------------------------------------------------------------------------

def render_text(status: Status) -> str:
    stages = [c[0] for c in COLUMNS]
    lines = []
    for row in status.lanes:  # one block per lane: a stage per line reads better than a very wide table
        cut = f"{row.cut_tag} ({row.cut_state})" if row.cut_tag else "(not cut)"
        lines.append(f"{row.lane}  [{row.kind}]  cut {cut}")
        if row.ci:
            lines.append(f"  {'ci':<8} {row.ci}")
        for stage in stages:
            lines.append(f"  {stage:<8} {row.cells[stage].text}")
    if status.release is not None:
        lines += _release_lines(status.release)
    if status.github and status.github.get("product") is None:
        lines.append("github: component prereleases read (see the publish column)")
    return "\n".join(lines) + "\n"


def _release_lines(release: ReleaseStatus) -> list[str]:
    lines = ["", f"release {release.release}: {release.state}", f"  acceptance: {release.acceptance}", f"  reviews: {release.reviews}"]
    for route in release.routes:
        receipts = ", ".join(route.receipts) if route.receipts else "no receipt"
        lines.append(f"  route {route.route} ({route.host}{', ' + route.lane if route.lane else ''}): {receipts}")
    for key, message in release.refusals:
        lines.append(f"  refused {key}: {message}")
    lines.append(f"  blockers: {len(release.blockers)}")
    for blocker in release.blockers:
        lines += [f"  - {blocker.text}", f"      clear: {blocker.fix}"]
    if release.github:
        product = release.github.get("product") or {}
        lines.append(f"  github {product.get('repository')} {product.get('tag')}: {product.get('state')}")
    return lines


# -- command ------------------------------------------------------------------------------------

def run_status(args: argparse.Namespace) -> int:
    from pipeline.formats.release.contract import resolve_release
    from pipeline.infra.github import token_from_env
    from pipeline.util.fs import atomic_write_bytes

    release = resolve_release(args.root, args.release) if args.release else None
    status = collect(args.dist, args.root, release, lanes_dir=args.lanes_dir, token=token_from_env())
    if args.html:
        from pipeline.tools.status_page import render_page

        try:
            atomic_write_bytes(args.html, render_page(status))
        except OSError as error:
            raise UsageError(f"the status page could not be written ({error.strerror or type(error).__name__})", file=args.html, field="--html",
                             fix="name a file in a folder you can write") from None
        if not args.quiet:
            sys.stderr.write(f"status page written to {args.html}\n")
    if args.json:
        sys.stdout.write(json.dumps(status.to_json(), indent=2, sort_keys=True) + "\n")
    elif not args.html:
        sys.stdout.write(printable(redact(render_text(status)), lines=True))  # refusal messages are read from a file
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("status", help=TOOLS["status"][1],
                            description="Where each lane and (with --release) a release stand, from the register, the cut ledgers and the release tree; "
                                        "never runs a stage. With GITHUB_TOKEN set, GitHub's publication state too (read only).")
    parser.add_argument("--release", help="also show this release tree's state, blockers and acceptance routes (e.g. v0.13.1)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root holding manifests/ (default: this checkout)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    out.add_argument("--html", type=Path, metavar="FILE", help="write the status as one self-contained HTML page")
    add_common(parser)
    parser.set_defaults(func=run_status)
