"""`python -m pipeline <command>`: the same stage functions nox calls.

Each stage module contributes its sub-command through `register_cli(sub)`;
this file only wires them, maps failures to exit codes and prints errors as
one paragraph (`error[<class>]: ...`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path

from .errors import EXIT_CODE_TABLE, ExitCode, PipelineError, UsageError, redact
from .lanes import load_lanes
from .util import ui

# Modules that contribute commands, in pipe order.  A module that does not
# exist yet (a stage still being written) simply contributes nothing.
COMMAND_MODULES = (
    "toolchain",
    "build",
    "package",
    "sbom",
    "image",
    "push",
    "qualify",
    "compose",
    "verify",
    "audit",
    "stages.rebuild",
    "sign",
    "publish",
    "bench",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse usage errors -> exit 2 with our format
        raise UsageError(message, fix=f"run '{self.prog} --help'")


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="output folder holding the artefact register (default: dist)")
    parser.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")


def print_lanes(lanes_dir: Path | None, as_json: bool) -> int:
    lanes = load_lanes(lanes_dir)
    if as_json:
        rows = [
            {
                "id": lane.id,
                "short_name": lane.short_name,
                "kind": lane.kind,
                "gpu": lane.gpu_name,
                "cuda_architecture": lane.cuda_architecture,
                "cuda_toolkit": lane.cuda_toolkit,
                "build_host": lane.build_host,
                "component_tag": lane.tag(),
                "deployment_profile": lane.deployment_profile(),
                "binaries": list(lane.binaries),
            }
            for lane in lanes.values()
        ]
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    header = f"{'lane':<24} {'short':<6} {'arch':<6} {'cuda':<6} {'build host':<16} {'component tag':<30} deployment profile"
    print(header)
    for lane in lanes.values():
        print(
            f"{lane.id:<24} {lane.short_name:<6} {lane.cuda_architecture:<6} {lane.cuda_toolkit:<6} "
            f"{lane.build_host:<16} {lane.tag():<30} {lane.deployment_profile()}"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m pipeline",
        description="OMP NInfer release pipeline: build, package, image, push, qualify, compose, verify, audit, sign.",
        epilog="exit codes: " + "; ".join(f"{int(code)} {text}" for code, text in EXIT_CODE_TABLE),
    )
    parser.add_argument("--print-lanes", action="store_true", help="list the lanes and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    lanes = sub.add_parser("lanes", help="list the lanes (runtime/lanes/*.toml)")
    lanes.add_argument("--json", action="store_true")
    lanes.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    lanes.set_defaults(func=lambda args: print_lanes(args.lanes_dir, args.json))
    for name in COMMAND_MODULES:
        if importlib.util.find_spec(f"pipeline.{name}") is None:
            continue
        module = importlib.import_module(f"pipeline.{name}")
        if hasattr(module, "register_cli"):
            module.register_cli(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if getattr(args, "quiet", False):
            ui.set_quiet(True)
        if args.print_lanes:
            return print_lanes(None, False)
        if not getattr(args, "func", None):
            parser.print_help()
            return int(ExitCode.USAGE)
        return int(args.func(args) or 0)
    except PipelineError as error:
        sys.stderr.write(f"error[{error.label}]: {error.render()}\n")
        return int(error.exit_code)
    except BrokenPipeError:  # output piped into head and closed early
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except Exception as error:  # a bug: say so, without secrets
        sys.stderr.write(f"internal error: {redact(repr(error))}\n(this is a bug in the pipeline; please report it with the command line)\n")
        raise


if __name__ == "__main__":
    sys.exit(main())
