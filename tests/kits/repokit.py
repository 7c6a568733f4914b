"""The checkout and its sample runtime for tests: paths, git with a fixed identity and date, the shared folder.

Every kit and test imports these from here (tests/kits is on sys.path; tests/conftest.py puts it there),
never from conftest.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/kits/repokit.py -> the repository root
TESTS = ROOT / "tests"
KITS = TESTS / "kits"
FIXTURES = TESTS / "fixtures"  # data files of the kits (C sources of the Windows PE fixtures)
SAMPLE = ROOT / "runtime" / "sample"
SHARED = ROOT.parent / "shared"
# Real Sigstore bundles and the public-good trust roots (public test data, carried by the repository: its README
# names their origin and licence), so that a plain clone runs the tests of the real verifier.
SIGSTORE_VECTORS = FIXTURES / "sigstore-vectors"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sample Author",
    "GIT_AUTHOR_EMAIL": "sample@example.invalid",
    "GIT_COMMITTER_NAME": "Sample Author",
    "GIT_COMMITTER_EMAIL": "sample@example.invalid",
    "GIT_AUTHOR_DATE": "2026-11-01T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-11-01T12:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def edited_lane(tmp_path: Path, lane_id: str, old: str, new: str) -> Path:
    """A copy of runtime/lanes/<lane_id>.toml in tmp_path/lanes with the first `old` replaced by `new` (LF, as stored)."""
    from pipeline.formats.lanes import DEFAULT_LANES_DIR

    directory = tmp_path / "lanes"
    directory.mkdir(exist_ok=True)
    text = (DEFAULT_LANES_DIR / f"{lane_id}.toml").read_text(encoding="utf-8")
    assert old in text, f"fixture text {old!r} not in lane file"
    target = directory / f"{lane_id}.toml"
    target.write_text(text.replace(old, new, 1), encoding="utf-8", newline="\n")
    return target


def git(repo: Path, *args: str, date: str | None = None) -> str:
    """git in `repo` with the fixed identity; every commit at GIT_ENV's date unless `date` (ISO 8601) says another."""
    env = dict(os.environ, **GIT_ENV, HOME=str(repo.parent))
    if date is not None:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    result = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def make_repo(path: Path, source: Path | None = None) -> str:
    """A git repository with `source`'s files committed at a fixed date; returns the commit."""
    path.mkdir(parents=True, exist_ok=True)
    if source is not None:
        shutil.copytree(source, path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("build", "build-*", "__pycache__"))
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "core.autocrlf", "false")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "sample runtime")
    return git(path, "rev-parse", "HEAD")


def have_nvcc() -> bool:
    return shutil.which("nvcc") is not None


def shared_or_skip(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the workplace's shared reference folder is not beside this checkout")
    return path


def missing_dependency(message: str) -> NoReturn:
    """A tool or library a test needs is not installed: an error where CI is set (.ci/run installs
    everything the suite needs, so a skip there would hide a broken setup), a skip with its reason elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, and CI must have every test dependency")
    pytest.skip(message)
