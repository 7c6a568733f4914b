"""`python -m pipeline <command>`: the same stage functions nox calls.

The commands are the road's (`pipeline/road.py`: one per pipe, then the tools).
Only the chosen command's module is imported and contributes its arguments
through `register_cli(sub)`; this file only wires them, maps failures to exit codes and prints errors as
one paragraph (`error[<class>]: ...`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from pipeline.errors import EXIT_CODE_TABLE, ExitCode, PipelineError, UsageError, redact
from pipeline.road import PIPES, TOOLS, commands
from pipeline.runcontext import run_context


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse usage errors -> exit 2 with our format
        raise UsageError(message, fix=f"run '{self.prog} --help'")


def add_common(parser: argparse.ArgumentParser, *, dist: bool = True, json_output: bool = False) -> None:
    """The options every command shares, added in one place: --dist, --quiet and (for reports) --json."""
    if dist:
        parser.add_argument("--dist", type=Path, default=Path("dist"), help="output folder holding the artefact register (default: dist)")
    parser.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")
    if json_output:
        parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")


def print_lanes(lanes_dir: Path | None, as_json: bool) -> int:
    from pipeline.formats.lanes import load_lanes

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
                "component_tag": lane.tag() if lane.beta is not None else None,
                "deployment_profile": lane.deployment_profile() if lane.beta is not None or "{n}" not in lane.deployment_profile_pattern else None,
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
            f"{lane.build_host:<16} {lane.tag() if lane.beta is not None else '(not cut yet)':<30} "
            f"{lane.deployment_profile() if lane.beta is not None or '{n}' not in lane.deployment_profile_pattern else '-'}"
        )
    return 0


def register_cli(sub) -> None:
    lanes = sub.add_parser("lanes", help=TOOLS["lanes"][1])
    lanes.add_argument("--json", action="store_true", help="print the lanes as JSON")
    lanes.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    lanes.set_defaults(func=lambda args: print_lanes(args.lanes_dir, args.json))


def _selected(argv: list[str]) -> str | None:
    """The command named on the line (the first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the module of the command named in `argv` is imported (none for --help)."""
    parser = _Parser(
        prog="python -m pipeline",
        description="OMP NInfer release pipeline. Stages in release order: " + ", ".join(p.name for p in PIPES) + ".",
        epilog="exit codes: " + "; ".join(f"{int(code)} {text}" for code, text in EXIT_CODE_TABLE),
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    table = commands()
    chosen = _selected(sys.argv[1:] if argv is None else argv)
    provided: set[str] = set()
    if chosen in table:
        module_name = table[chosen][0]
        module = sys.modules[__name__] if module_name == __name__ else importlib.import_module(module_name)
        before = set(sub.choices)
        module.register_cli(sub)
        provided = set(sub.choices) - before
    for name, (_module, summary) in table.items():
        if name not in provided:
            sub.add_parser(name, help=summary, add_help=False)  # a placeholder: its module is imported only when chosen
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return int(ExitCode.USAGE)
        # One run context per command: its quiet switch and secrets never outlive it.
        with run_context(quiet=bool(getattr(args, "quiet", False))):
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
