"""Shared fixtures: a git repository holding the sample runtime, output folders,
and the guard that keeps unit tests from compiling (as cibuildwheel does).

The suite has two tiers, `tests/unit/` (no compiler, registry, network or GPU) and
`tests/integration/`, and one folder of kits, `tests/kits/`.  The kits are loaded one
way: this file puts tests/kits on sys.path (once, here), tests import them by name
(`from repokit import git`), and the kits that provide fixtures or hooks are this
suite's plugins (`pytest_plugins` below), so no test imports a fixture and no fixture
is re-exported from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/ itself is on sys.path too (pytest puts the folder of a rootdir conftest there): the fuzz
# tool tests/fuzz is imported as the package `fuzz`.
KITS = Path(__file__).resolve().parent / "kits"
if str(KITS) not in sys.path:
    sys.path.insert(0, str(KITS))

# The release workflow's `tests` job runs this suite on a GitHub Actions runner: its ambient job environment
# (GITHUB_ACTIONS, the workflow's identity, the workflow's own PIPELINE_* env) is removed here, before any
# test or xdist worker starts, so every test sees only what it sets up itself (tests/kits/actions_env.py).
from actions_env import scrub  # noqa: E402

AMBIENT_REMOVED = scrub()

from repokit import SAMPLE, make_repo  # noqa: E402

# imagekit: the test base image (local_base, pushed_base, private_oci_cache); registry: a real
# docker-registry on 127.0.0.1 and a fault-injecting proxy (registry_server, auth_registry, fault_proxy);
# testreceipt: the test-run receipt, when PIPELINE_TEST_RECEIPT names its path (nox -s tests).
pytest_plugins = ["imagekit", "registry", "testreceipt"]


@pytest.fixture(scope="session")
def sample_repo(tmp_path_factory) -> tuple[Path, str]:
    """The sample runtime committed in its own repository (a stand-in for alphastorm/ninfer)."""
    repo = tmp_path_factory.mktemp("sample-src") / "ninfer"
    commit = make_repo(repo, SAMPLE)
    return repo, commit


@pytest.fixture
def dist(tmp_path) -> Path:
    return tmp_path / "dist"


@pytest.fixture(autouse=True)
def _no_compile_in_unit_tests(request, monkeypatch):
    """Unit tests must not start CMake/nvcc; only tests marked `cuda` may compile."""
    if request.node.get_closest_marker("cuda"):
        return
    from pipeline.stages import build

    def refuse(*_args, **_kwargs):
        raise AssertionError("this unit test tried to compile the runtime; mark it @pytest.mark.cuda")

    monkeypatch.setattr(build.BuildStage, "_compile", refuse)


@pytest.fixture(autouse=True)
def _loud_by_default():
    """`main([..., "--quiet"])` sets a process-wide switch; no test may inherit it from another."""
    from pipeline.util import ui

    ui.set_quiet(False)
    yield
