"""The release workflow's `tests` job: part of the suite run as a GitHub Actions runner runs it.

A runner hands every step GITHUB_ACTIONS=true, the workflow's identity and the workflow's own `env:`
(PIPELINE_RELEASE, PIPELINE_DIST); before tests/kits/actions_env.py kept them out, the suite under that
environment refused its own Sigstore stand-in, stated the workflow as the builder of every test statement
and refused every cached build.  This runs the tests those broke, nested, under a runner's environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from actions_env import RUNNER

ROOT = Path(__file__).resolve().parents[2]
SELECTION = [
    "tests/unit/test_actions_environment.py",  # nothing ambient reaches a test; the local builder
    "tests/unit/test_compile_cache.py",  # the release job's identity refuses a cache: tests set it up themselves
    "tests/unit/test_sigstore_standin.py",  # the stand-in of this run works with GITHUB_ACTIONS=true, a foreign one never
    "tests/integration/test_provenance.py",  # statements state the builder the test sets up
]


@pytest.mark.slow
def test_the_suite_passes_under_a_runners_job_environment(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "PIPELINE_TEST_RECEIPT"}  # a nested run writes no receipt
    environ.update(RUNNER)
    environ.update({
        "GITHUB_WORKSPACE": str(ROOT), "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_ENV": str(tmp_path / "env"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        "GITHUB_TOKEN": "ghs_jobTokenThatNoTestMayUse000000000000", "PIPELINE_BUILD_CACHE": str(tmp_path / "cache"),
        "ACTIONS_ID_TOKEN_REQUEST_URL": "https://token.invalid/", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "notatoken",
    })
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *SELECTION],
                          cwd=ROOT, env=environ, capture_output=True, text=True, timeout=900)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
