"""Stage `verify`: check a release tree `manifests/<release>/` against the release contract.

    python -m pipeline verify [--release vX.Y.Z] [--require-installable | --require-ready]
                              [--check-pins] [--json] [--root PATH] [--dist DIR]

The checks are the contract's (`pipeline.formats.release.contract`, every
group listed there); this stage runs them on the tree as it is now (an
observation of the repository and its git history, so it always runs, never
"up to date") and records the report in the register: `<dist>/verify/<release>.json`,
kind `verification-report` (default dist: `<root>/dist`).  Every error is
collected before the verdict (exit 0 valid, 1 errors, 2 usage); each names the
file, the field, the value found and the value expected.

Human output: one `OK:`/`FAIL:` line per check group on stderr, then a verdict;
`--json` prints `{release, status, valid, errors, warnings}` on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.lanes import REPO_ROOT, load_lanes
from pipeline.formats.release.contract import (
    GROUPS,
    Report,
    Verifier,
    report_document,
    resolve_release,
    tree_digests,
)
from pipeline.register import Artifact
from pipeline.runcontext import run_context
from pipeline.stage import Context, Skip, Stage, StageResult, execute
from pipeline.util import ui
from pipeline.util.jsonio import write_json

REPORTS_DIR = "verify"  # under the dist: one report per release


class VerifyStage(Stage):
    """One verification of one release tree (key `verify:<release>`), recorded as its report."""

    name = "verify"
    always_runs = True  # it observes a tree and git history, which change without any input file of ours changing

    def __init__(self, ctx: Context, release: str | None, *, require: str | None = None, check_pins: bool = False, lanes_dir: Path | None = None) -> None:
        super().__init__(ctx)
        self.root = ctx.repo_root
        self.release = resolve_release(self.root, release)
        self.require = require
        self.check_pins = check_pins
        self.lanes_dir = lanes_dir
        self.report: Report | None = None

    @property
    def key(self) -> str:
        return f"verify:{self.release}"

    @property
    def report_path(self) -> Path:
        return self.ctx.dist / REPORTS_DIR / f"{self.release}.json"

    def describe(self) -> str:
        return f"verify {self.release}"

    def leftovers(self) -> list[tuple[Path, tuple[str, ...]]]:
        return [(self.report_path.parent, (f".{self.report_path.name}.*.tmp",))]  # write_json's temporary name

    def inputs(self) -> dict[str, Any]:
        return {"root": str(self.root.resolve()), "release": self.release, "require": self.require, "check_pins": self.check_pins}

    def run(self) -> list[Artifact]:
        tree = tree_digests(self.root, self.release)
        report = Verifier(self.root, self.release, lanes=load_lanes(self.lanes_dir), require=self.require, check_pins=self.check_pins).run()
        self.report = report
        write_json(self.report_path, report_document(report, require=self.require, check_pins=self.check_pins, tree=tree))
        return [self.ctx.register.make("verification-report", self.report_path, stage=self.name, lane=None, release=self.release, valid=report.valid, status=report.status)]


STAGE = VerifyStage


def print_report(report: Report, stream=None) -> None:
    stream = stream or sys.stderr
    by_group: dict[str, list] = {}
    for problem in report.problems.items:
        by_group.setdefault(problem.check, []).append(problem)
    titles = dict(GROUPS)
    shown = [g for g, _ in GROUPS if g in report.groups or g in by_group]
    ui.result(f"verify {report.release} ({report.status or 'unknown status'})", stream)
    for group in shown:
        problems = by_group.get(group, [])
        if problems:
            ui.result(f"FAIL: {titles[group]} ({len(problems)} error{'s' if len(problems) != 1 else ''})", stream)
            for problem in problems:
                ui.result(f"      error: {problem.message()}", stream)
        else:
            ui.result(f"OK:   {titles[group]}", stream)
    for warning in report.problems.warnings:
        ui.result(f"warning: {warning.message()}", stream)
    errors = len(report.problems.items)
    if report.valid:
        note = f"; {report.blockers} blocker(s) remain, --require-ready lists them" if report.blockers else ""
        ui.result(f"VALID: {report.release} is a valid {report.status} release tree ({len(report.problems.warnings)} warnings{note})", stream)
    else:
        ui.result(f"INVALID: {report.release}: {errors} error{'s' if errors != 1 else ''} ({len(report.problems.warnings)} warnings)", stream)


def verify(ctx: Context, release: str | None, *, require: str | None = None, check_pins: bool = False, lanes_dir: Path | None = None) -> tuple[Report, StageResult]:
    """Run the stage; its report, and the result recorded in the register."""
    stage = VerifyStage(ctx, release, require=require, check_pins=check_pins, lanes_dir=lanes_dir)
    result = execute(stage)
    assert stage.report is not None
    return stage.report, result


def run_cli(args: argparse.Namespace) -> int:
    require = "ready" if args.require_ready else "installable" if args.require_installable else None
    resolve_release(args.root, args.release)  # a bad name is a usage error before anything is written
    ctx = Context.open(args.dist or Path(args.root) / "dist", args.lanes_dir, root=args.root)
    # stderr is the report (OK:/FAIL: lines, then the verdict): the stage's bookkeeping lines stay out of it.
    with run_context(quiet=True):
        report, _result = verify(ctx, args.release, require=require, check_pins=args.check_pins, lanes_dir=args.lanes_dir)
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        print_report(report)
    return 0 if report.valid else 1


def release_plan(ctx: Context, lanes: list, options: argparse.Namespace) -> list:
    """`release`: verify the composed tree of `--release`; a tree that does not verify stops the road."""
    release = getattr(options, "release", None)
    if not release:
        raise Skip("no --release given")

    def step() -> StageResult:
        report, result = verify(ctx, release, lanes_dir=options.lanes_dir)
        if not report.valid:
            first = report.problems.items[0]
            raise InputError(
                f"the release tree does not verify ({len(report.problems.items)} errors; first: {first.message()})",
                file=ctx.dist / REPORTS_DIR / f"{release}.json",
                fix=f"python -m pipeline verify --release {release} lists every error",
            )
        return result

    return [(release, step)]


def register_cli(sub) -> None:
    parser = sub.add_parser(
        "verify",
        help="check a release tree manifests/<release>/ against the release contract",
        description="Check a release tree against the release contract (docs/release-tree.md). Exit 0 valid, 1 errors, 2 usage.",
    )
    parser.add_argument("--release", help="release to verify, e.g. v0.13.1 (default: the newest under manifests/)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--require-installable", action="store_true", help="require status candidate or ready and their rules")
    mode.add_argument("--require-ready", action="store_true", help="require status ready, its rules and valid Sigstore bundles")
    parser.add_argument("--check-pins", action="store_true", help="re-hash every pinned raw URL's bytes from local git history (fails closed on a missing commit)")
    parser.add_argument("--json", action="store_true", help="print {release, status, valid, errors, warnings} as JSON on stdout")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root holding manifests/ (default: this checkout)")
    parser.add_argument("--dist", type=Path, default=None, help="output folder whose register records the report (default: ROOT/dist)")
    parser.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=run_cli)
