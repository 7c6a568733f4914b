"""The nox front door: per-lane sessions come from the lane files, the quick and road sessions exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

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
