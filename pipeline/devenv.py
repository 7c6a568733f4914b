"""The environment the nox sessions run the pipeline in (standard library only).

nox sessions are thin: each one calls `python -m pipeline ...` in one shared
virtual environment (`.nox/pipeline-env`) that holds this project and its
pinned dependencies, re-installed only when pyproject.toml changes.  The test
session also needs Debian tools (a real registry, skopeo, umoci, mingw-w64,
patchelf); when they are missing it installs them with apt-get if it runs as
root, and otherwise stops with the exact command to run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_DIR = ROOT / ".nox" / "pipeline-env"

# tool on PATH -> Debian package that provides it
DEBIAN_TOOLS = {
    "git": "git",
    "c++": "g++",
    "openssl": "openssl",
    "curl": "curl",
    "pigz": "pigz",  # the benchmark's parallel gzip peer
    "docker-registry": "docker-registry",
    "skopeo": "skopeo",
    "umoci": "umoci",
    "x86_64-w64-mingw32-gcc": "gcc-mingw-w64-x86-64",
    "patchelf": "patchelf",
    "readelf": "binutils",
}


def _stamp() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def ensure_env(log=print) -> Path:
    python = ENV_DIR / "bin" / "python"
    stamp_file = ENV_DIR / ".installed"
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == _stamp():
        return python
    if not python.exists():
        log(f"creating the pipeline environment in {ENV_DIR}")
        venv.EnvBuilder(with_pip=True, clear=True).create(ENV_DIR)
    log("installing the pipeline and its pinned dependencies (pyproject.toml changed or first run)")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]"], check=True)
    stamp_file.write_text(_stamp())
    return python


def missing_debian_tools() -> dict[str, str]:
    return {tool: package for tool, package in DEBIAN_TOOLS.items() if shutil.which(tool) is None}


def ensure_debian_tools(log=print) -> None:
    missing = missing_debian_tools()
    if not missing:
        return
    packages = sorted(set(missing.values()))
    command = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.stderr.write(
            "error[environment]: the tests need Debian tools that are missing: "
            + ", ".join(sorted(missing))
            + f". Fix: run 'sudo apt-get update && sudo {' '.join(command)}' and start again.\n"
        )
        raise SystemExit(3)
    log("installing missing Debian tools: " + ", ".join(packages))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
