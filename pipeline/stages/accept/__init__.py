"""Stage `accept`: the documented routes, run exactly as written, bound to the candidate.

    python -m pipeline accept bundle --release vX.Y.Z --route ROUTE [--candidate REV] [--document-at REV]
    python -m pipeline accept run BUNDLE [--clone DIR] [--set NAME=VALUE] [--parameters FILE] [--grant CAP]
    python -m pipeline accept compose --release vX.Y.Z RECEIPT... [--document-change ROUTE:STEP=WHY]
    python -m pipeline accept pinned FIELD [--release vX.Y.Z] [--mirrored]
    python -m pipeline accept routes DOCUMENT

`bundle` takes one route of the release's route document (docs/QUICKSTART.md, named in
`release.toml [acceptance]`) as it is at the candidate commit, refuses a block that
names an image by tag, anything "latest", a URL or value the candidate manifest does
not bind, a manifest field that is null, a URL read without its hash, or (PowerShell)
anything Windows PowerShell 5.1 cannot parse or run, and writes the bundle.

`run` executes a bundle's steps in order in ONE shell session (bash for `sh`; Windows
PowerShell 5.1 for `powershell`, on Windows only) from a clean clone at the candidate
commit: standard input at end of file, a clean documented environment (never the
inherited one), stop at the first failing step.  Before anything runs it reads the route
document from the clone's git at the bundle's document commit (a regular file at a safe
relative path, at most 1 MiB, hashed before it is parsed), scans it with the reader
`bundle` used, and refuses (IntegrityError, exit 5) a bundle whose steps or parameters are
not byte for byte the document's: the bundle only says which route of which document runs.
The shell starts from an environment the runner builds (routes.RUNNER_ENVIRONMENT: fresh HOME
and TMPDIR in the work folder, PATH = the runner's Python's bin folder and the system folders,
C.UTF-8, UTC) plus the route's parameters: only the names its document declares (an allow list;
`--set` of any other name is refused), each value matching the grammar its declaration states
(routes.PARAMETER_KINDS).  Host-only steps (`requires=CAP`) run
only where the host has the capability (probed, or granted with --grant) and are
recorded as not run otherwise.  Each step's output is streamed to files in the work folder;
the runner hashes them in chunks and keeps at most the last 64 KiB in memory (shown when a
step fails).  The receipt records hashes and byte counts of every step's output, never the
output itself.  The receipt is written under --dist only.  `run` and `pinned` need only the standard
library: on an owner's host, `python3 -m pipeline.stages.accept run BUNDLE` from a clone.

`compose` checks the receipts against their bundles, the candidate and the document
(each bundle's steps and parameters against the document at its commit, each receipt's
parameters and variables against the route's declaration; changed blocks need
`--document-change` and a re-run), writes the acceptance record
`acceptance/external-installation.json` and binds it as `compose accept` does.

One module per job, as goreleaser's sub-pipes (this package's `__init__` holds the CLI and `STAGE`; `__main__`
runs it for `python3 -m pipeline.stages.accept`): `document` (the route document at a commit, the host, the
constants every job shares), `pinned`, `environment` (capabilities, parameters, the clean environment),
`session` (the bash and PowerShell sessions that run the steps), `runner` (`run`: a bundle to its receipt),
`bundle` and `record` (`compose`: the receipts to the acceptance record).  Every module the runner imports
needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.errors import InputError, PipelineError, UsageError
from pipeline.formats.routes import CAPABILITIES, GRANTABLE, PARAMETER_NAME_RE, scan
from pipeline.stage import Context, execute
from pipeline.stages.accept.bundle import BundleStage, acceptance_config, make_bundle, static_findings
from pipeline.stages.accept.document import (
    DEFAULT_STEP_TIMEOUT,
    MAX_PARAMETERS_FILE_BYTES,
    OUTPUT_DIR,
    RUNNER,
    RUNNER_VARIABLES,
)
from pipeline.stages.accept.environment import RunOptions, run_environment
from pipeline.stages.accept.pinned import pinned_value
from pipeline.stages.accept.record import (
    ComposeStage,
    Loaded,
    check_receipt,
    check_receipt_parameters,
    compose_record,
)
from pipeline.stages.accept.runner import RunStage, receipt_path, run_bundle
from pipeline.util import ui
from pipeline.util.fs import read_bytes_bounded

# The names the CLI, the road and the tests use, whichever job module holds them.
__all__ = ["OUTPUT_DIR", "RUNNER", "RUNNER_VARIABLES", "STAGE", "BundleStage", "ComposeStage", "Loaded", "RunOptions", "RunStage",
           "check_receipt", "check_receipt_parameters", "compose_record", "main", "make_bundle", "receipt_path", "register_cli",
           "release_plan", "run_bundle", "run_environment", "static_findings"]


# -- CLI ---------------------------------------------------------------------------------------------

def _parameters(values: list[tuple[str, str]], *, file: Path | None = None) -> dict[str, str]:
    """NAME=VALUE pairs of --set (`file` None) or of a --parameters file ((field, text) per line): names by their
    syntax only (whether the route declares them is checked against its bundle), values without NUL."""
    flag = "--set" if file is None else "--parameters"
    out: dict[str, str] = {}
    for where, value in values:
        name, sep, content = value.partition("=")
        if not sep or not PARAMETER_NAME_RE.fullmatch(name):
            raise UsageError(f"{flag} takes NAME=VALUE", file=file, field=where, found=name or value, expected="e.g. --set OMP_NINFER_MIRROR=https://github.com/=http://127.0.0.1:8000/github.com/ (NAME: capitals, digits and '_')")
        if "\0" in content:
            raise UsageError(
                f"the value of {name} holds a NUL character", file=file, field=where, found=content.replace("\0", "\\0"), expected="a value without NUL (no environment variable can hold one)",
                fix=f"remove the NUL from the value of {name}",
            )
        if name in out:
            raise UsageError(f"{flag} names one variable twice", file=file, field=where, found=name)
        out[name] = content
    return out


def _parameters_file(path: Path) -> dict[str, str]:
    """The NAME=VALUE lines of a --parameters file (values may hold spaces; '#' starts a comment line): read bounded,
    UTF-8, LF-separated (a value may not be cut at a character str.splitlines would take for a line end)."""
    if not path.is_file():
        raise InputError("the parameters file does not exist", file=path)
    data = read_bytes_bounded(path, MAX_PARAMETERS_FILE_BYTES, what="parameters file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"is not UTF-8 ({exc.reason})", file=path, field=f"line {line}", fix="save the parameters file as UTF-8") from None
    lines = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append((f"line {number}", line))
    return _parameters(lines, file=path)


def run_accept_run(args: argparse.Namespace) -> int:
    for cap in args.grant:
        if cap not in CAPABILITIES:
            raise UsageError("--grant names an unknown capability", field="--grant", found=cap, expected=" or ".join(GRANTABLE))
    offered = _parameters_file(args.parameters) if args.parameters is not None else {}
    options = RunOptions(clone=Path(args.clone or "."), parameters=_parameters([("--set", value) for value in args.set]), offered=offered, grants=list(args.grant), denies=list(args.deny), step_timeout=args.step_timeout, work=args.work, keep_work=args.keep_work)
    ctx = Context.open(args.dist)
    stage = RunStage(ctx, Path(args.bundle), options, out=args.out)
    execute(stage, force=True)
    receipt = stage.receipt
    assert receipt is not None and stage.receipt_path is not None
    sys.stdout.write(json.dumps({"receipt": str(stage.receipt_path), "route": receipt["route"], "status": receipt["status"], "failed_step": receipt["failed_step"]}, sort_keys=True) + "\n")
    if receipt["status"] != "passed":
        ui.result(f"FAIL: route {receipt['route']}: step {receipt['failed_step']}: {receipt['failure']}", sys.stderr)
        return 1
    ui.result(f"OK: route {receipt['route']}: {sum(1 for s in receipt['steps'] if s['status'] == 'passed')} of {len(receipt['steps'])} steps passed, receipt {stage.receipt_path}", sys.stderr)
    return 0


def run_accept_pinned(args: argparse.Namespace) -> int:
    sys.stdout.write(pinned_value(args.field, release=args.release, root=Path(args.root or "."), mirrored=args.mirrored) + "\n")
    return 0


def run_accept_routes(args: argparse.Namespace) -> int:
    path = Path(args.document)
    if not path.is_file():
        raise InputError("does not exist", file=path)
    doc = scan(path.read_bytes(), args.document)
    for route in doc.routes.values():
        sys.stdout.write(f"{route.id}\t{route.shell}\t{len(route.steps)} steps\t{route.title}\n")
        for step in route.steps:
            marker = f"\trequires {','.join(step.requires)}" if step.requires else ""
            sys.stdout.write(f"  {step.index}\tlines {step.line_start}-{step.line_end}\t{step.sha256[:12]}{marker}\n")
    return 0


def _root(args: argparse.Namespace) -> Path:
    if args.root is not None:
        return Path(args.root)
    from pipeline.formats.lanes import REPO_ROOT

    return REPO_ROOT


def run_accept_bundle(args: argparse.Namespace) -> int:
    if args.release is None and args.document is None:
        raise UsageError("name the release (--release vX.Y.Z) or, for a runbook, the document (--document docs/RELEASING.md)", field="--release")
    routes = [args.route]
    if args.required:
        if args.release is None:
            raise UsageError("--required needs --release", field="--required")
        from pipeline.formats.lanes import load_lanes
        from pipeline.formats.release.spec import load_release_toml

        config = acceptance_config(load_release_toml(_root(args), args.release, load_lanes(args.lanes_dir)))
        if config is None:
            raise InputError("release.toml declares no acceptance routes", field="acceptance.routes", fix="add [acceptance.routes.<route>] tables (docs/release-tree.md)")
        routes = sorted(config.routes)
    ctx = Context.open(args.dist)
    made = []
    for route in routes:
        stage = BundleStage(ctx, _root(args), release=args.release, route=route, document=args.document, candidate=args.candidate, document_at=args.document_at, lanes_dir=args.lanes_dir)
        execute(stage)
        assert stage.bundle is not None and stage.path is not None
        made.append({"bundle": str(stage.path.resolve()), "route": route, "steps": len(stage.bundle["steps"]), "candidate_commit": stage.bundle["candidate_commit"]})
    sys.stdout.write(json.dumps(made if args.required else made[0], sort_keys=True) + "\n")
    return 0


def run_accept_compose(args: argparse.Namespace) -> int:
    ctx = Context.open(args.dist)
    stage = ComposeStage(ctx, _root(args), args.release, [Path(p) for p in args.receipts], changes=list(args.document_change), bundles=[Path(p) for p in args.bundle], lanes_dir=args.lanes_dir)
    result = execute(stage, force=True)
    assert stage.record is not None
    record = stage.record
    ui.step("accept", f"{args.release}: {len(record['routes'])} routes passed, {record['documented_routes']['blocks_run']} of {record['documented_routes']['blocks_total']} blocks run on candidate {record['candidate_commit'][:12]}")
    sys.stdout.write(json.dumps({"record": str(stage.record_path), "release": args.release, "routes": record["routes"], "skipped": result.skipped}, sort_keys=True) + "\n")
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser(
        "accept",
        help="documented-route acceptance: bundle a route, run it, compose the acceptance record",
        description="Run the documented routes (docs/QUICKSTART.md) exactly as written on the candidate and bind the result.",
    )
    actions = parser.add_subparsers(dest="accept_action", metavar="{bundle,run,compose,pinned,routes}", parser_class=type(parser))

    bundle = actions.add_parser("bundle", help="one route of the release's route document, checked, with its exact blocks")
    bundle.add_argument("--release", help="product release, e.g. v0.13.1 (omit for a runbook with --document)")
    which = bundle.add_mutually_exclusive_group(required=True)
    which.add_argument("--route", help="route id (python -m pipeline accept routes DOCUMENT lists them)")
    which.add_argument("--required", action="store_true", help="every route release.toml [acceptance.routes] requires")
    bundle.add_argument("--document", help="route document (default: release.toml [acceptance] document, else docs/QUICKSTART.md)")
    bundle.add_argument("--candidate", default="HEAD", help="the candidate commit (default HEAD; its manifest must have status candidate)")
    bundle.add_argument("--document-at", default=None, help="read the document at this commit (default: the candidate); a later commit re-runs changed blocks")
    bundle.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    add_common(bundle)
    bundle.set_defaults(func=run_accept_bundle)

    run = actions.add_parser("run", help="run a bundle in one shell session from a clean clone and write its receipt")
    run.add_argument("bundle", help="the bundle file (accept bundle wrote it)")
    run.add_argument("--clone", default=None, help="the clone to run in (default: the current folder's repository)")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a parameter the route declares, with a value of its declared kind (repeatable); any other name is refused")
    run.add_argument("--grant", action="append", default=[], metavar="CAP", help="grant a capability the runner cannot probe: network, github (repeatable)")
    run.add_argument("--deny", action="append", default=[], metavar="CAP", help="treat a capability as absent without probing it (recorded as denied; repeatable)")
    run.add_argument("--parameters", type=Path, default=None, metavar="FILE", help="NAME=VALUE lines (values may hold spaces); the route takes the names it declares, --set wins")
    run.add_argument("--step-timeout", type=float, default=DEFAULT_STEP_TIMEOUT, help=f"seconds one step may run (default {DEFAULT_STEP_TIMEOUT:g})")
    run.add_argument("--out", type=Path, default=None, help="also write the receipt here")
    run.add_argument("--work", type=Path, default=None, help="work folder (default: a fresh temporary folder; kept when a step fails)")
    run.add_argument("--keep-work", action="store_true", help="keep the work folder (step outputs) after a passing run")
    add_common(run)
    run.set_defaults(func=run_accept_run)

    compose = actions.add_parser("compose", help="check the receipts and bind the acceptance record (as compose accept does)")
    compose.add_argument("--release", required=True, help="product release, e.g. v0.13.1")
    compose.add_argument("receipts", nargs="*", help="run receipts, one per required route")
    compose.add_argument("--document-change", action="append", default=[], metavar="ROUTE:STEP=WHY", help="a block changed since the candidate: which and why (repeatable)")
    compose.add_argument("--bundle", action="append", default=[], metavar="FILE", help="a bundle not in the register (repeatable)")
    compose.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    add_common(compose)
    compose.set_defaults(func=run_accept_compose)

    pinned = actions.add_parser("pinned", help="print one value of the release manifest (for route blocks)")
    pinned.add_argument("field", help="field path, e.g. components.ninfer.oci_reference or 'components.ninfer_variants[rtx4090-windows-native].package_url'")
    pinned.add_argument("--release", default=None, help="product release (default: $OMP_NINFER_RELEASE)")
    pinned.add_argument("--mirrored", action="store_true", help="rewrite a URL through $OMP_NINFER_MIRROR (PREFIX=MIRROR ...)")
    pinned.add_argument("--root", default=None, help="the clone's top folder (default: the current folder)")
    add_common(pinned, dist=False)
    pinned.set_defaults(func=run_accept_pinned)

    routes = actions.add_parser("routes", help="list the routes and steps of a route document")
    routes.add_argument("document", help="e.g. docs/QUICKSTART.md")
    add_common(routes, dist=False)
    routes.set_defaults(func=run_accept_routes)

    def no_action(args: argparse.Namespace) -> int:
        parser.print_help()
        return int(UsageError.exit_code)

    parser.set_defaults(func=no_action)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m pipeline.stages.accept ...`: the same commands with the standard library only (run, pinned, routes)."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:
            raise UsageError(message, fix=f"run '{self.prog} --help'")

    top = _Parser(prog="python3 -m pipeline.stages.accept")
    sub = top.add_subparsers(dest="command", parser_class=_Parser)
    register_cli(sub)
    try:
        args = top.parse_args(["accept", *(sys.argv[1:] if argv is None else argv)])
        if getattr(args, "quiet", False):
            ui.set_quiet(True)
        return int(args.func(args) or 0)
    except PipelineError as error:
        sys.stderr.write(f"error[{error.label}]: {error.render()}\n")
        return int(error.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130


STAGE = RunStage


def release_plan(ctx, lanes, options) -> list:
    from pipeline.stage import Skip

    raise Skip("documented routes run on their hosts: 'python -m pipeline accept bundle|run|compose' (docs/RELEASING.md)")
