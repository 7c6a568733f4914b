"""Shared fixtures: a git repository holding the sample runtime, output folders,
and the guard that keeps unit tests from compiling (as cibuildwheel does)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "runtime" / "sample"
SHARED = ROOT.parent / "shared"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sample Author",
    "GIT_AUTHOR_EMAIL": "sample@example.invalid",
    "GIT_COMMITTER_NAME": "Sample Author",
    "GIT_COMMITTER_EMAIL": "sample@example.invalid",
    "GIT_AUTHOR_DATE": "2026-11-01T12:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-11-01T12:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    env = dict(os.environ, **GIT_ENV, HOME=str(repo.parent))
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


@pytest.fixture(scope="session")
def sample_repo(tmp_path_factory) -> tuple[Path, str]:
    """The sample runtime committed in its own repository (a stand-in for alphastorm/ninfer)."""
    repo = tmp_path_factory.mktemp("sample-src") / "ninfer"
    commit = make_repo(repo, SAMPLE)
    return repo, commit


@pytest.fixture
def dist(tmp_path) -> Path:
    return tmp_path / "dist"


def have_nvcc() -> bool:
    return shutil.which("nvcc") is not None


@pytest.fixture(autouse=True)
def _no_compile_in_unit_tests(request, monkeypatch):
    """Unit tests must not start CMake/nvcc; only tests marked `cuda` may compile."""
    if request.node.get_closest_marker("cuda"):
        return
    from pipeline.stages import build

    def refuse(*_args, **_kwargs):
        raise AssertionError("this unit test tried to compile the runtime; mark it @pytest.mark.cuda")

    monkeypatch.setattr(build.BuildStage, "_compile", refuse)


def pytest_configure(config):
    # The test-run receipt (tests/testreceipt.py), when PIPELINE_TEST_RECEIPT names its path (nox -s tests).
    import testreceipt

    testreceipt.configure(config)


@pytest.fixture(autouse=True)
def _loud_by_default():
    """`main([..., "--quiet"])` sets a process-wide switch; no test may inherit it from another."""
    from pipeline.util import ui

    ui.set_quiet(False)
    yield


def shared_or_skip(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the workplace's shared reference folder is not beside this checkout")
    return path


# Fixtures of the image and push tests: a real docker-registry on 127.0.0.1 and a
# fault-injecting proxy in front of it (tests/registry.py), the test base image (tests/imagekit.py).
from imagekit import local_base, private_oci_cache, pushed_base  # noqa: E402, F401
from registry import auth_registry, fault_proxy, registry_server  # noqa: E402, F401
