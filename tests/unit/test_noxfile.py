"""The nox front door: per-lane sessions come from the lane files, the quick and road sessions exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from repokit import ROOT

from pipeline.dev.env import LaneRow, lane_table
from pipeline.formats.lanes import DEFAULT_LANES_DIR, load_lanes

PER_LANE = ("cut", "publish", "build", "package", "qualify")


def _sessions() -> list[str]:
    done = subprocess.run([sys.executable, "-m", "nox", "--list", "-f", str(ROOT / "noxfile.py")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    names = []
    for line in done.stdout.splitlines():
        if line[:2] in ("* ", "- "):
            names.append(line[2:].split(" -> ")[0].strip())
    return names


def test_the_per_lane_sessions_are_the_lane_files_short_names():
    sessions = _sessions()
    shorts = {lane.short_name for lane in load_lanes().values()}
    assert shorts == {"5090", "4090", "3090"}  # the lane files this checkout has
    for verb in PER_LANE:
        found = {name.removeprefix(f"{verb}-") for name in sessions if name.startswith(f"{verb}-") and name.removeprefix(f"{verb}-").isdigit()}
        assert found == shorts, f"{verb}-<short> sessions: {sorted(found)}"
    for name in ("tests", "tests-unit", "release", "fuzz", "lint", "image", "package", "qualify", "publish-release"):
        assert name in sessions
    # Nothing about a lane is typed into the noxfile: no lane id appears in it.
    text = (ROOT / "noxfile.py").read_text()
    assert [lane.id for lane in load_lanes().values() if lane.id in text] == []


def test_lane_table_reads_the_lanes_folder_it_is_given(tmp_path):
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    shutil.copyfile(DEFAULT_LANES_DIR / "rtx4090-windows-native.toml", lanes / "rtx4090-windows-native.toml")
    assert lane_table(lanes) == [LaneRow("rtx4090-windows-native", "4090", "windows-native")]
    assert [row.short_name for row in lane_table()] == [lane.short_name for lane in load_lanes().values()]


def test_lane_table_needs_only_the_standard_library():
    """The noxfile imports it with whatever Python runs nox: -S leaves site-packages out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "from pipeline.dev.env import lane_table; print(' '.join(row.short_name for row in lane_table()))"
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(lane.short_name for lane in load_lanes().values())


def test_a_broken_lane_file_leaves_the_other_sessions_working(tmp_path):
    """A lane file being edited must not take `nox -s lint tests` down with it."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "pipeline", copy / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "runtime" / "lanes", copy / "runtime" / "lanes")
    shutil.copyfile(ROOT / "noxfile.py", copy / "noxfile.py")
    shutil.copyfile(ROOT / "pyproject.toml", copy / "pyproject.toml")
    broken = copy / "runtime" / "lanes" / "rtx3090-windows-native.toml"
    broken.write_text(broken.read_text().replace('short_name = "3090"', 'short_name = "30x0"'), newline="\n")  # LF on every platform
    done = subprocess.run([sys.executable, "-m", "nox", "--list", "-f", str(copy / "noxfile.py")],
                          capture_output=True, text=True, timeout=120, cwd=copy, check=False)
    assert done.returncode == 0, done.stderr
    assert "warning: no per-lane sessions: error[input]:" in done.stderr and "rtx3090-windows-native.toml: short_name" in done.stderr
    assert "* tests" in done.stdout and "* lint" in done.stdout and "build-4090" not in done.stdout


def _readme_commands() -> list[str]:
    """The commands of the README's first shell block (its two front-door commands)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_opens_with_two_commands_and_ci_runs_the_second_exactly():
    main_job, tests = _readme_commands()
    assert "-s build-5090 package qualify-5090" in main_job and tests.endswith("-s tests")
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]
    assert ci[-1] == tests, f".ci/run ends with {ci[-1]!r}, the README's test command is {tests!r}"


def test_the_readme_commands_never_pip_install_into_the_system_python():
    """Debian's and Ubuntu's system Python refuse that (PEP 668, externally-managed-environment)."""
    for command in _readme_commands():
        steps = [step.strip() for step in command.split("&&")]
        venv = steps[0].split()
        assert venv[:3] == ["python3", "-m", "venv"] and len(venv) == 4, f"{command!r} does not start by making nox's own environment"
        folder = venv[3]
        assert folder.startswith(".nox/"), f"nox's environment {folder!r} is not under the git-ignored .nox/"
        assert steps[1].startswith(f"{folder}/bin/pip install ") and steps[2].startswith(f"{folder}/bin/nox "), command
        assert not any(step.startswith(("python3 -m pip", "pip ", "pip3 ")) for step in steps), command


def test_the_suite_runs_on_one_xdist_worker_per_core_with_files_kept_whole():
    from pipeline.dev.env import pytest_workers_args

    assert pytest_workers_args({}, cpus=2) == ["-n", "2", "--dist", "loadfile"]
    assert pytest_workers_args({}, cpus=32) == ["-n", "4", "--dist", "loadfile"]
    assert pytest_workers_args({"PIPELINE_TEST_WORKERS": "3"}, cpus=2) == ["-n", "3", "--dist", "loadfile"]
    assert pytest_workers_args({"PIPELINE_TEST_WORKERS": "0"}, cpus=2) == ["-p", "no:xdist"]
    for bad in ("two", "-1", "65", "\u0663"):
        with pytest.raises(SystemExit) as stop:
            pytest_workers_args({"PIPELINE_TEST_WORKERS": bad}, cpus=2)
        assert stop.value.code == 2


def test_the_headline_command_stops_at_its_first_refusal(tmp_path):
    """`nox -s build-4090 package qualify` on Linux: the build's refusal (a Windows lane), and nothing after it."""
    if sys.platform != "linux":
        import pytest

        pytest.skip("the refusal under test is a Windows lane built on Linux")
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "pipeline", copy / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "runtime", copy / "runtime", ignore=shutil.ignore_patterns("sample"))
    shutil.copytree(ROOT / "packaging", copy / "packaging")  # the lane files name their licence texts there
    for name in ("noxfile.py", "pyproject.toml"):
        shutil.copyfile(ROOT / name, copy / name)
    # The sessions' shared environment, stamped as installed: this Python (no venv is made, nothing is downloaded).
    env_bin = copy / ".nox" / "pipeline-env" / "bin"
    env_bin.mkdir(parents=True)
    (env_bin / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (env_bin / "python").chmod(0o755)
    import hashlib

    (copy / ".nox" / "pipeline-env" / ".installed").write_text(hashlib.sha256((copy / "pyproject.toml").read_bytes()).hexdigest())
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIPELINE_")}
    env["PIPELINE_DIST"] = str(tmp_path / "dist")
    done = subprocess.run([sys.executable, "-m", "nox", "-f", str(copy / "noxfile.py"), "-s", "build-4090", "package", "qualify"],
                          capture_output=True, text=True, timeout=120, cwd=copy, env=env, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert output.count("error[") == 1, output  # one error block: the build's
    assert "error[environment]: runtime/lanes/rtx4090-windows-native.toml: platform.build_host: lane rtx4090-windows-native is built on a windows-x86_64 host" in output, output
    assert "failed with exit code 3" in output and "Session build-4090 failed" in output, output
    # the sessions after the refusal never ran, so their "the register holds no build" cannot hide it
    assert "Running session package" not in output and "Running session qualify" not in output, output
    assert output.rstrip().endswith("Session build-4090 failed."), output
    # and the register remembers the refusal: status shows it in the lane's build cell, without running anything
    from pipeline.tools.status import collect

    cells = {row.lane: row for row in collect(tmp_path / "dist", ROOT, None).lanes}["rtx4090-windows-native"].cells
    assert cells["build"].state == "refused" and "is built on a windows-x86_64 host" in cells["build"].detail
    assert cells["package"].state == "missing"


def test_the_pipeline_environment_installs_nothing_but_the_hash_locked_commands(tmp_path, monkeypatch):
    from pipeline.dev import env

    ran = []
    monkeypatch.setattr(env, "ENV_DIR", tmp_path / "pipeline-env")
    monkeypatch.setattr(env.venv.EnvBuilder, "create", lambda self, folder: folder.mkdir())
    monkeypatch.setattr(env.subprocess, "run", lambda command, **kwargs: ran.append([str(part) for part in command]))
    env.ensure_env(log=lambda message: None)
    python = str(tmp_path / "pipeline-env" / "bin" / "python")
    assert ran == env.locked_install_commands(python)  # the release workflow's three lines, nothing unpinned before them
    assert ran[0][3:5] == ["install", "--require-hashes"]
