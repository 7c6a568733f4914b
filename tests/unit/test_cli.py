"""The front door: `python -m pipeline --help` needs nothing but the standard library, every command
registers its own parser with the common options, and a missing dependency is an environment error."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from repokit import ROOT

from pipeline import cli
from pipeline.errors import ExitCode
from pipeline.road import PIPES, commands


def _python(*args: str, isolated: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """This interpreter; with `isolated`, without site-packages (-S): the standard library and this checkout only."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, *(["-S"] if isolated else []), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=cwd or ROOT, check=False)


_MODULES_AFTER_HELP = """
import json, sys
before = set(sys.modules)
from pipeline import cli
try:
    cli.main(['--help'])
except SystemExit as stop:
    code = stop.code
else:
    code = 'no exit'
print(json.dumps({"code": code, "new": sorted(set(sys.modules) - before), "stdlib": sorted(sys.stdlib_module_names)}))
"""


def test_help_imports_no_stage_and_no_third_party_library():
    done = _python("-c", _MODULES_AFTER_HELP)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == 0
    stdlib = set(report["stdlib"])
    new = report["new"]
    ours = [name for name in new if name == "pipeline" or name.startswith("pipeline.")]
    foreign = [name for name in new if name not in ours and name.partition(".")[0].lstrip("_") not in stdlib and name.partition(".")[0] not in stdlib]
    assert foreign == [], f"--help imported third-party modules: {foreign}"
    heavy = [name for name in ours if name.startswith(("pipeline.stages", "pipeline.harness", "pipeline.dev", "pipeline.infra", "pipeline.formats"))]
    assert heavy == [], f"--help imported stage or plumbing modules: {heavy}"
    assert "pipeline.cli" in ours and "pipeline.road" in ours  # the check looked at the right process


def test_help_and_a_missing_dependency_without_site_packages():
    """A Python without the pipeline's dependencies: --help and the standard-library commands work, a
    command whose module needs a missing library says so as error[environment] (exit 3), no traceback."""
    helped = _python("-m", "pipeline", "--help", isolated=True)
    assert helped.returncode == 0, helped.stderr
    for pipe in PIPES:
        assert pipe.name in helped.stdout
    assert "Traceback" not in helped.stderr
    lanes = _python("-m", "pipeline", "lanes", "--json", isolated=True)
    assert lanes.returncode == 0, lanes.stderr
    assert {row["id"] for row in json.loads(lanes.stdout)} >= {"rtx5090-container", "rtx4090-windows-native"}
    broken = _python("-m", "pipeline", "push", "--registry", "127.0.0.1:5000/alphastorm/ninfer-runtime", isolated=True)
    assert broken.returncode == ExitCode.ENVIRONMENT, (broken.stdout, broken.stderr)
    assert broken.stderr.startswith("error[environment]: the 'push' command cannot start: it needs the module 'requests'")
    assert "Fix: " in broken.stderr and "--help' works without them" in broken.stderr
    assert "Traceback" not in broken.stderr and broken.stdout == ""


def test_a_command_whose_module_fails_to_import_is_an_environment_error(tmp_path, monkeypatch, capsys):
    """In process: a command module that imports a library this environment lacks (a real failing import)."""
    (tmp_path / "omp_ninfer_ghost_command.py").write_text("import omp_ninfer_no_such_dependency  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    table = {**commands(), "ghost": ("omp_ninfer_ghost_command", "a command whose dependency is missing")}
    monkeypatch.setattr(cli, "commands", lambda: table)
    assert cli.main(["ghost", "--dist", str(tmp_path / "dist")]) == ExitCode.ENVIRONMENT
    err = capsys.readouterr().err
    assert err.startswith("error[environment]: the 'ghost' command cannot start: it needs the module 'omp_ninfer_no_such_dependency'")
    assert "Traceback" not in err and not (tmp_path / "dist").exists()
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    assert "ghost" in capsys.readouterr().out and "omp_ninfer_ghost_command" not in sys.modules


def test_a_broken_module_of_the_pipeline_itself_is_a_bug_not_an_environment_problem(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pipeline.stages.cut", None)
    with pytest.raises(ImportError):
        cli.main(["cut", "--lane", "5090", "--source", "x@" + "1" * 40])
    err = capsys.readouterr().err
    assert err.startswith("internal error: ") and "error[environment]" not in err


def _leaves(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(name, parser)]
    found = []
    for action in subs:
        for child, sub in action.choices.items():
            found += _leaves(sub, f"{name} {child}")
    return found


@pytest.mark.parametrize("command", list(commands()))
def test_every_command_registers_its_parser_with_the_common_options(command):
    parser = cli.build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    own = sub.choices[command]
    assert own.add_help, f"{command}: its module registered no parser (only the --help placeholder is there)"
    for name, leaf in _leaves(own, command):
        options = {option: action for action in leaf._actions for option in action.option_strings}
        assert "--quiet" in options and isinstance(options["--quiet"], argparse._StoreTrueAction), f"'{name}' lacks --quiet"
        if "--json" in options:
            assert isinstance(options["--json"], argparse._StoreTrueAction), f"'{name}': --json is not a switch"
        if "--dist" in options and command not in ("compose", "verify"):
            # compose and verify work on a tree under --root: their default dist is <root>/dist (None until --root is known)
            assert options["--dist"].default == Path("dist"), f"'{name}': --dist defaults to {options['--dist'].default!r}"


def test_print_lanes_is_gone_in_favour_of_the_lanes_command(capsys):
    assert cli.main(["--print-lanes"]) == ExitCode.USAGE
    assert "unrecognized arguments: --print-lanes" in capsys.readouterr().err
    assert cli.main(["lanes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(row["id"] for row in rows) == sorted(p.stem for p in (ROOT / "runtime" / "lanes").glob("*.toml"))
