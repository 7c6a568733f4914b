"""`python -m pipeline <command>`: the same stage functions nox calls.

The commands are the road's (`pipeline/road.py`: one per pipe, then the tools).
Only the chosen command's module is imported and contributes its arguments
through `register_cli(sub)`; this file only wires them, maps failures to exit codes and prints errors as
one paragraph (`error[<class>]: ...`).  A command whose module lacks a third-party dependency is an
`error[environment]`; `--help` imports no command module at all.

Front doors are named one way: the Python entry of a stage is `<verb>_lane(name, ...)` for one lane,
`<verb>_lanes(...)` for several (`<verb>_release` for the product release, `push_image`, `build_image`),
and a command's CLI handler is `run_<command>(args) -> int` (sub-actions: `run_<command>_<action>`).
Every parser takes the shared options from `add_common` (`--dist`, `--quiet`, `--json` where it reports).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from pipeline.errors import EXIT_CODE_TABLE, EnvironmentProblem, ExitCode, PipelineError, UsageError, redact
from pipeline.road import PIPES, TOOLS, commands
from pipeline.runcontext import run_context


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse usage errors -> exit 2 with our format
        raise UsageError(message, fix=f"run '{self.prog} --help'")


LANES_DIR_HELP = (
    "folder of lane files <lane>.toml (default: this checkout's runtime/lanes/), their cut ledgers in ../cuts/ beside it; "
    "a rebuild needs the lane file whose SHA-256 the set's provenance names"
)


def add_common(parser: argparse.ArgumentParser, *, dist: bool = True, json_output: bool | str = False) -> None:
    """The options every command shares, added in one place: --dist, --quiet and (for reports) --json.

    `json_output` may be the --json help text when the command's report is not simply "the report"."""
    if dist:
        parser.add_argument("--dist", type=Path, default=Path("dist"), help="output folder holding the artefact register (default: dist)")
    parser.add_argument("--lanes-dir", type=Path, default=None, metavar="DIR", help=LANES_DIR_HELP)
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")
    if json_output:
        parser.add_argument("--json", action="store_true", help=json_output if isinstance(json_output, str) else "print the report as JSON on stdout")


def beta_argument(text: str) -> int:
    """argparse type of every --beta option: the cut ledger's beta range rule (formats/cut_ledger.py: is_beta)."""
    from pipeline.formats.cut_ledger import BETA_EXPECTED, MAX_BETA, MIN_BETA, is_beta

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a beta number: {text!r} ({BETA_EXPECTED})") from None
    if not is_beta(value):
        raise argparse.ArgumentTypeError(f"beta must be {MIN_BETA}..{MAX_BETA}, found {value} (beta 0 or below names no component cut)")
    return value


def run_lanes(args: argparse.Namespace) -> int:
    """`lanes`: the lanes of runtime/lanes/*.toml, as a table or (--json) as JSON."""
    from pipeline.formats.lanes import load_lanes

    lanes = load_lanes(args.lanes_dir)
    if args.json:
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


def run_toolchain_show(args: argparse.Namespace) -> int:
    """`toolchain show`: what the lock pins."""
    from pipeline.lanework.toolchain import describe_lock

    print("\n".join(describe_lock()))
    return 0


def run_toolchain_provision(args: argparse.Namespace) -> int:
    """`toolchain provision --toolkit X.Y`: download and unpack it; prints its CUDA home."""
    from pipeline.formats.lanes import current_host_platform
    from pipeline.formats.toolchain_lock import toolchain_spec
    from pipeline.lanework.toolchain import provision

    print(provision(toolchain_spec(args.toolkit, current_host_platform())).cuda_home)
    return 0


def run_toolchain_lock(args: argparse.Namespace) -> int:
    """`toolchain lock`: re-pin the wheels from PyPI, then show the new lock."""
    from pipeline.lanework.toolchain import PINNED_TOOLS, PINNED_VERSIONS, write_lock

    write_lock(PINNED_VERSIONS, PINNED_TOOLS)
    return run_toolchain_show(args)


def register_toolchain_cli(sub) -> None:
    parser = sub.add_parser("toolchain", help="show, provision or re-pin the CUDA toolchains")
    action = parser.add_subparsers(dest="toolchain_action", required=True)
    show = action.add_parser("show", help="list what the lock pins")
    show.set_defaults(func=run_toolchain_show)
    prov = action.add_parser("provision", help="download and unpack a pinned toolchain")
    prov.add_argument("--toolkit", required=True, help="CUDA toolkit line, e.g. 13.1")
    prov.set_defaults(func=run_toolchain_provision)
    lock = action.add_parser("lock", help="re-pin the wheels from PyPI (maintainers; writes runtime/toolchain.lock.json)")
    lock.set_defaults(func=run_toolchain_lock)
    for command in (show, prov, lock):
        add_common(command, dist=False)


def run_sbom_validate(args: argparse.Namespace) -> int:
    """`sbom validate FILE...`: one line per document that validates (the first that does not raises)."""
    from pipeline.formats.sbom import validate_file

    for path in args.files:
        print(validate_file(path))
    return 0


def register_sbom_cli(sub) -> None:
    parser = sub.add_parser("sbom", help="validate SPDX 2.3 / CycloneDX 1.6 documents")
    action = parser.add_subparsers(dest="sbom_action", required=True)
    validate = action.add_parser("validate", help="validate *.spdx.json with spdx-tools and *.cdx.json against the CycloneDX 1.6 schema")
    validate.add_argument("files", nargs="+", type=Path)
    add_common(validate, dist=False)
    validate.set_defaults(func=run_sbom_validate)


def register_cli(sub) -> None:
    """The tools whose command code lives here (road.TOOLS names pipeline.cli for them): lanes, toolchain, sbom.
    Their handlers import their modules only when run; formats and plumbing carry no command code."""
    lanes = sub.add_parser("lanes", help=TOOLS["lanes"][1])
    add_common(lanes, dist=False, json_output="print the lanes as JSON")
    lanes.set_defaults(func=run_lanes)
    register_toolchain_cli(sub)
    register_sbom_cli(sub)


def _selected(argv: list[str]) -> str | None:
    """The command named on the line (the first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def _missing_dependency(command: str, error: ImportError) -> EnvironmentProblem:
    from pipeline.formats.lanes import REPO_ROOT

    missing = error.name or str(error)
    # An auditor's install (the release's auditor-requirements.txt) carries what `audit` needs and no more; every other
    # command may need the rebuild or maintainer extras, all of them in the release lock (bundled in the wheel too).
    release_lock = REPO_ROOT / "requirements" / "release.txt"
    return EnvironmentProblem(
        f"the '{command}' command cannot start: it needs the module {missing!r}, which this Python cannot import ({error})",
        why="this Python environment lacks one of the pipeline's dependencies (pyproject.toml): an auditor's install holds "
        "only what 'audit' needs, or the installation is incomplete",
        fix=f"install the release lock into this environment ('{sys.executable} -m pip install --require-hashes --no-deps -r {release_lock}'), "
        "or run it in the pipeline's environment ('nox' makes .nox/pipeline-env); 'python -m pipeline --help' works without them",
    )


def _is_own_module(error: ImportError) -> bool:
    """An import of the pipeline's own code failed: a bug (or a broken checkout), not a missing dependency."""
    return (error.name or "").partition(".")[0] == "pipeline"


def _load_command(command: str, module_name: str):
    """The command's module; a third-party dependency it lacks is an environment problem, never a traceback."""
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        if _is_own_module(error):
            raise
        raise _missing_dependency(command, error) from None


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
        module = sys.modules[__name__] if module_name == __name__ else _load_command(chosen, module_name)
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
    except ImportError as error:
        if _is_own_module(error):
            _report_bug(error)
            raise
        # A dependency the command imports lazily (e.g. requests when its first request is made).
        problem = _missing_dependency(_selected(sys.argv[1:] if argv is None else argv) or "pipeline", error)
        sys.stderr.write(f"error[{problem.label}]: {problem.render()}\n")
        return int(problem.exit_code)
    except Exception as error:  # a bug: say so, without secrets
        _report_bug(error)
        raise


def _report_bug(error: BaseException) -> None:
    sys.stderr.write(f"internal error: {redact(repr(error))}\n(this is a bug in the pipeline; please report it with the command line)\n")


if __name__ == "__main__":
    sys.exit(main())
