"""`python -m pipeline release`: run the pipe list in order (goreleaser's pipe runner).

    python -m pipeline release [--lane ID ...] [--through STAGE] [--skip STAGE ...]
                               [--source ...] [--registry HOST/REPO] [--release vX.Y.Z] [--dist DIR]

For each pipe of `pipeline/road.py: PIPES` up to `--through`, the stage's
module says what this run means for it (`release_plan(ctx, lanes, options)`:
one step per lane, or a typed `Skip` naming why it does not apply), and each
step goes through `stage.execute()` like the stage's own command.  Every step
prints one line: `run`, `up to date` or `skipped: <reason>`.  A failing step
stops the road with that stage's error and exit code; nothing later runs.
Irreversible stages (cut, publish) and owner-host stages (accept) never run
from here: they say so and are skipped, with the command to run instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.errors import UsageError
from pipeline.road import PIPES, Pipe
from pipeline.stage import Context, Skip, StageResult

Step = tuple[str, "Callable[[], StageResult] | Skip"]


@dataclass(frozen=True)
class Outcome:
    stage: str
    label: str
    verdict: str  # "run", "up to date" or "skipped: <reason>"


def road(through: str | None, skip: list[str]) -> list[Pipe]:
    names = [p.name for p in PIPES if not p.outsider]
    for name in [*(skip or []), *([through] if through else [])]:
        if name not in names:
            raise UsageError("names no stage of the release road", field="--through/--skip", found=name, expected="one of " + ", ".join(names))
    chosen = []
    for pipe in PIPES:
        if pipe.outsider:
            continue
        chosen.append(pipe)
        if pipe.name == through:
            break
    return chosen


def release_lanes(options: argparse.Namespace, *, emit: Callable[[Outcome], None] = lambda o: print(f"{o.stage:<8} {o.label:<24} {o.verdict}", flush=True)) -> list[Outcome]:
    """Run the road for the chosen lanes (default: every lane); `emit` gets each step's outcome as it happens."""
    from pipeline.formats.lanes import find_lane, load_lanes

    ctx = Context.open(options.dist, options.lanes_dir)
    lanes = [find_lane(name, options.lanes_dir) for name in options.lane] if options.lane else list(load_lanes(options.lanes_dir).values())
    outcomes: list[Outcome] = []
    for pipe in road(options.through, options.skip):
        if pipe.name in (options.skip or []):
            steps: list[Step] = [("-", Skip("--skip " + pipe.name))]
        else:
            ctx.register.reload()  # what the stages before this one recorded
            plan = getattr(pipe.load(), "release_plan", None)
            try:
                steps = plan(ctx, lanes, options) if plan else [("-", Skip(f"not run by 'release'; run 'python -m pipeline {pipe.name} --help'"))]
            except Skip as skipped:
                steps = [("-", skipped)]
        for label, step in steps:
            if isinstance(step, Skip):
                outcome = Outcome(pipe.name, label, f"skipped: {step.reason}")
            else:
                result = step()
                outcome = Outcome(pipe.name, label, "up to date" if result.skipped else "run")
            outcomes.append(outcome)
            emit(outcome)
    return outcomes


def run_release(args: argparse.Namespace) -> int:
    """`release`: the command line's front door to `release_lanes`; one line per step."""
    release_lanes(args)
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("release", help="run the pipe list in order: run, up to date or skipped, per stage")
    parser.add_argument("--lane", action="append", default=[], metavar="ID", help="lane id or short name (repeatable; default: every lane)")
    parser.add_argument("--through", metavar="STAGE", help="stop after this stage (e.g. qualify)")
    parser.add_argument("--skip", action="append", default=[], metavar="STAGE", help="skip this stage (repeatable)")
    parser.add_argument("--source", help="PATH[@COMMIT] or URL@COMMIT for build (default: the embedded sample runtime)")
    parser.add_argument("--toolchain", choices=("pinned", "system"), default="pinned", help="build toolchain (default: pinned)")
    parser.add_argument("--registry", help="HOST[:PORT]/REPO for push (without it push is skipped)")
    parser.add_argument("--release", help="product release vX.Y.Z for compose and verify (without it they are skipped)")
    add_common(parser)
    parser.set_defaults(func=run_release)
