"""The suite runs inside a GitHub Actions job (the release workflow's `tests` job) as it runs anywhere else.

tests/conftest.py removes the runner's ambient job environment before any test starts; these tests hold
that rule to what the pipeline reads.  tests/integration/test_actions_job.py runs a part of the suite under a
runner's environment to show the whole path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from actions_env import RUNNER, is_ambient, scrub

from pipeline.formats import provenance as slsa


def test_no_ambient_job_variable_reaches_a_test_and_ci_stays():
    assert not [name for name in os.environ if is_ambient(name)]
    assert slsa.builder()["builder"]["id"] == slsa.LOCAL_BUILDER  # the default reader sees this process's environment


@pytest.mark.parametrize("name", ["GITHUB_ACTIONS", "GITHUB_WORKFLOW_REF", "GITHUB_TOKEN", "GH_TOKEN", "RUNNER_TEMP", "ACTIONS_RUNTIME_TOKEN",
                                  "ACT", "PIPELINE_RELEASE", "PIPELINE_DIST", "PIPELINE_BUILD_CACHE", "PIPELINE_TEST_SIGSTORE",
                                  "SOURCE_DATE_EPOCH", "OMP_NINFER_BUILD_CONTAINER"])
def test_each_job_variable_the_pipeline_reads_is_ambient(name):
    assert is_ambient(name)


def test_the_suites_own_knobs_and_ci_are_kept():
    environ = {**RUNNER, "PIPELINE_TEST_RECEIPT": "dist/test-run-receipt.json", "PIPELINE_TEST_WORKERS": "2", "PATH": "/usr/bin", "HOME": "/home/runner"}
    removed = scrub(environ)
    assert environ == {"CI": "true", "PIPELINE_TEST_RECEIPT": "dist/test-run-receipt.json", "PIPELINE_TEST_WORKERS": "2", "PATH": "/usr/bin", "HOME": "/home/runner"}
    assert removed == sorted(name for name in RUNNER if name != "CI")


def test_every_job_variable_named_in_the_pipeline_is_ambient():
    """Each GITHUB_*/RUNNER_*/ACTIONS_* name the pipeline's source spells (what a release job's environment decides) is removed."""
    root = Path(__file__).resolve().parents[2] / "pipeline"
    named = set()
    for path in root.rglob("*.py"):
        named |= set(re.findall(r"""["']((?:GITHUB|RUNNER|ACTIONS)_[A-Z_]+)["']""", path.read_text("utf-8")))
    assert {"GITHUB_ACTIONS", "GITHUB_WORKFLOW_REF", "GITHUB_RUN_ID"} <= named  # the pattern finds what it must
    assert sorted(name for name in named if not is_ambient(name)) == []
