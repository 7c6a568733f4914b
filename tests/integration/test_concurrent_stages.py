"""Stages on one dist at once, runs killed half-way, and sets edited by hand: the register stays true.

Real processes (`python -m pipeline ...`) on real sets: the 4090 lane from the mingw-built PE
binaries (tests/kits/winfixtures.py) and, where nvcc is available, the 5090 lane compiled from the
sample with the pinned toolchain.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from winfixtures import native_workspace, packaged_native_set

from pipeline.formats.assets import OUTER_SUMS, RECEIPT, check_assets, render_sums
from pipeline.register import Register
from pipeline.stages.build import build_lane
from pipeline.util.hashing import sha256_file
from pipeline.util.jsonio import canonical_bytes

NATIVE = "rtx4090-windows-native"
CONTAINER = "rtx5090-container"


def pipeline_cmd(*args: str | Path, lanes_dir: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline", *map(str, args), "--lanes-dir", str(lanes_dir)]


def run_pipeline(*args: str | Path, lanes_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pipeline_cmd(*args, lanes_dir=lanes_dir), capture_output=True, text=True, env=env, timeout=600)


def copy_dist(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def assert_register_true(dist: Path) -> Register:
    """Every registered file exists with the recorded bytes, and every stage's outputs are registered."""
    register = Register(dist)
    for artifact in register.artifacts.values():
        register.verified_path(artifact)
    for key, record in register.stages.items():
        assert set(record["outputs"]) <= set(register.artifacts), key
    return register


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- two lanes packaged at once -------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.network
def test_two_lanes_packaged_at_once_on_one_dist_keep_both_records(tmp_path_factory, tmp_path):
    workspace = native_workspace(tmp_path_factory)
    dist = tmp_path / "dist"
    build_lane("5090", dist=dist, source=str(workspace.repo), lanes_dir=workspace.lanes_dir, rehearsal=True)  # not the 5090 cut's commit
    workspace.build(dist)
    procs = {
        lane: subprocess.Popen(pipeline_cmd("package", "--lane", lane, "--dist", dist, lanes_dir=workspace.lanes_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for lane in ("5090", "4090")
    }
    for lane, proc in procs.items():
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"package --lane {lane}:\n{err}"
    register = assert_register_true(dist)
    assert {f"package:{CONTAINER}", f"package:{NATIVE}", f"build:{CONTAINER}", f"build:{NATIVE}"} <= set(register.stages)
    for lane_id, files in ((CONTAINER, 7), (NATIVE, 11)):
        outputs = register.outputs_of(f"package:{lane_id}")
        # the closed set, and its provenance statement recorded beside it (attestations/)
        assert len([a for a in outputs if a.kind != "provenance"]) == files and [a.kind for a in outputs].count("provenance") == 1
        assets = dist / lane_id / "assets"
        check_assets(assets, lanes_dir=workspace.lanes_dir)
        assert mode(assets) == 0o755, "published folders are readable by others"
        assert sorted(p.name for p in (dist / lane_id).iterdir()) == ["assets", "attestations", "build"], "no staging folder left"
    # The register agrees with the disk: re-runs are no-ops and the next stage binds both sets.
    for lane in ("5090", "4090"):
        again = run_pipeline("package", "--lane", lane, "--dist", dist, lanes_dir=workspace.lanes_dir)
        assert again.returncode == 0 and "up to date, nothing to do" in again.stderr, again.stderr
        qualified = run_pipeline("qualify", "--lane", lane, "--dist", dist, lanes_dir=workspace.lanes_dir)
        assert qualified.returncode == 0, qualified.stderr


# -- kill -9 half-way, then a clean re-run -----------------------------------------------------

def _staging(lane_dir: Path, pattern: str) -> bool:
    return any(lane_dir.glob(pattern))


# Points of a package run, told by what it has on disk at that moment (each lasts long enough to see).
KILL_POINTS = {
    "first set staging": lambda d: _staging(d, ".assets.*.staging"),
    "first payload": lambda d: _staging(d, ".payload.*"),
    "second set": lambda d: _staging(d, ".package-b.*/assets/*.tar.gz"),
    "checking the set": lambda d: _staging(d, ".package-b.*/assets/SHA256SUMS"),
}
# The same points of a forced run over a published set (its replacement is what they interrupt).
FORCED = "forced re-package, "


def _kill_when(command: list[str], lane_dir: Path, condition, *, timeout: float = 120) -> int:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if condition(lane_dir):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.002)
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def native_runs(tmp_path_factory):
    """The 4090 lane: (workspace, a dist built but not packaged, a packaged dist, its set's hashes)."""
    workspace, packaged = packaged_native_set(tmp_path_factory)
    built = tmp_path_factory.mktemp("native-built") / "dist"
    workspace.build(built)
    clean_set = {p.name: sha256_file(p) for p in sorted((packaged / NATIVE / "assets").iterdir())}
    return workspace, built, packaged, clean_set


@pytest.mark.slow
@pytest.mark.parametrize("point", [*KILL_POINTS, FORCED + "first set staging", FORCED + "checking the set"])
def test_a_package_run_killed_half_way_is_cleaned_up_by_the_next_run(native_runs, tmp_path, point):
    workspace, built, packaged, clean_set = native_runs
    command = pipeline_cmd("package", "--lane", "4090", "--dist", tmp_path / "dist", lanes_dir=workspace.lanes_dir)
    if point.startswith(FORCED):
        dist = copy_dist(packaged, tmp_path / "dist")
        code = _kill_when([*command, "--force"], dist / NATIVE, KILL_POINTS[point.removeprefix(FORCED)])
    else:
        dist = copy_dist(built, tmp_path / "dist")
        code = _kill_when(command, dist / NATIVE, KILL_POINTS[point])
    assert code == -signal.SIGKILL, f"the run was not killed at '{point}' (exit {code})"
    assert_register_true(dist)  # whatever the moment, the register still describes the disk

    rerun = run_pipeline("package", "--lane", "4090", "--dist", dist, lanes_dir=workspace.lanes_dir)
    assert rerun.returncode == 0, rerun.stderr
    lane_dir = dist / NATIVE
    assert sorted(p.name for p in lane_dir.iterdir()) == ["assets", "attestations", "build"], "the re-run removed every leftover"
    assert sorted(p.name for p in dist.iterdir()) == sorted([".locks", ".register.lock", NATIVE, "register.json"])
    register = assert_register_true(dist)
    outputs = register.outputs_of(f"package:{NATIVE}")
    assert len([a for a in outputs if a.kind != "provenance"]) == 11 and [a.kind for a in outputs].count("provenance") == 1
    assets = lane_dir / "assets"
    assert {p.name: sha256_file(p) for p in sorted(assets.iterdir())} == clean_set, "the re-run made the same set as a clean run"
    assert mode(assets) == 0o755
    check_assets(assets, lanes_dir=workspace.lanes_dir)
    if point == "first set staging":  # once: the register and the disk agree so well that a further run is a no-op
        again = run_pipeline("package", "--lane", "4090", "--dist", dist, lanes_dir=workspace.lanes_dir)
        assert again.returncode == 0 and "up to date, nothing to do" in again.stderr, again.stderr


# -- a hand-edited set whose register was edited too -------------------------------------------

def _edit_receipt_and_register(dist: Path) -> None:
    """Change the receipt, then make SHA256SUMS and register.json agree with it (what a careful forger does)."""
    assets = dist / NATIVE / "assets"
    receipt = json.loads((assets / RECEIPT).read_text())
    receipt["qualification_status"] = "passed"
    (assets / RECEIPT).write_bytes(canonical_bytes(receipt, indent=2))
    lines = dict(reversed(line.split("  ", 1)) for line in (assets / OUTER_SUMS).read_text().splitlines())
    lines[RECEIPT] = sha256_file(assets / RECEIPT)
    (assets / OUTER_SUMS).write_bytes(render_sums(lines))
    document = json.loads((dist / "register.json").read_text())
    for entry in document["artifacts"]:
        path = dist / entry["path"]
        if path.parent == assets:
            entry["sha256"], entry["size"] = sha256_file(path), path.stat().st_size
    (dist / "register.json").write_bytes(canonical_bytes(document))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit_receipt_and_register, "qualification_status"),
        (lambda dist: (dist / NATIVE / "assets" / "NOTES.txt").write_text("added by hand\n"), "NOTES.txt"),
    ],
)
def test_qualify_refuses_a_set_that_check_assets_rejects_even_when_the_register_agrees(tmp_path_factory, tmp_path, edit, message):
    workspace, packaged = packaged_native_set(tmp_path_factory)
    control = copy_dist(packaged, tmp_path / "control")
    ok = run_pipeline("qualify", "--lane", "4090", "--dist", control, lanes_dir=workspace.lanes_dir)
    assert ok.returncode == 0, ok.stderr  # the untouched set is bound

    dist = copy_dist(packaged, tmp_path / "dist")
    edit(dist)
    assert_register_true(dist)  # the register's own hash check is satisfied ...
    refused = run_pipeline("qualify", "--lane", "4090", "--dist", dist, lanes_dir=workspace.lanes_dir)
    assert refused.returncode != 0  # ... but check-assets is not, and qualify says so
    assert "error[" in refused.stderr and message in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert "re-checking the asset set" in refused.stderr
    assert not (dist / NATIVE / "qualification").exists(), "nothing was bound"
