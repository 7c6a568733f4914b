"""The environment a GitHub Actions job hands its steps, and the rule that keeps it out of the tests.

The release workflow's `tests` job runs this suite on a runner: every step there sees
GITHUB_ACTIONS=true, the workflow's identity (GITHUB_WORKFLOW_REF, GITHUB_REPOSITORY, ...), the
runner's folders and the workflow's own `env:` (PIPELINE_RELEASE, PIPELINE_DIST).  The pipeline
reads those as facts of a release job (the provenance's builder, the compile-cache refusal, the
image's source annotation), so a test that inherited them would test the release job's identity
instead of the environment it sets up itself.  `tests/conftest.py` calls `scrub()` before any test
or worker starts; a test that wants an Actions job sets its variables itself (`monkeypatch.setenv`,
or `RUNNER` below).  `CI` stays: it turns a missing tool's skip into an error.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# Set by the runner (GITHUB_*, RUNNER_*, ACTIONS_*; ACT by act), or facts the pipeline records (the build
# container and Debian snapshot a Linux build names, SOURCE_DATE_EPOCH), or a token.
AMBIENT_PREFIXES = ("GITHUB_", "RUNNER_", "ACTIONS_", "GH_", "PIPELINE_")
AMBIENT_NAMES = frozenset({"ACT", "SOURCE_DATE_EPOCH", "OMP_NINFER_BUILD_CONTAINER", "OMP_NINFER_DEBIAN_SNAPSHOT"})
# The suite's own knobs, set by nox or a developer for the test run itself (never read by the pipeline).
SUITE_KNOBS = frozenset({"PIPELINE_TEST_RECEIPT", "PIPELINE_TEST_SUBSET", "PIPELINE_TEST_WORKERS", "PIPELINE_FUZZ_SECONDS",
                         "PIPELINE_FUZZ_SCRATCH"})

# What a runner hands the release workflow's `tests` job (values shaped as GitHub documents them).
RUNNER = {
    "CI": "true",
    "GITHUB_ACTIONS": "true",
    "GITHUB_ACTOR": "maintainer",
    "GITHUB_API_URL": "https://api.github.com",
    "GITHUB_EVENT_NAME": "push",
    "GITHUB_JOB": "tests",
    "GITHUB_REF": "refs/tags/v0.13.1",
    "GITHUB_REF_NAME": "v0.13.1",
    "GITHUB_REF_TYPE": "tag",
    "GITHUB_REPOSITORY": "alphastorm/omp-ninfer",
    "GITHUB_REPOSITORY_OWNER": "alphastorm",
    "GITHUB_RUN_ATTEMPT": "1",
    "GITHUB_RUN_ID": "123456789",
    "GITHUB_RUN_NUMBER": "7",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
    "GITHUB_WORKFLOW": "release",
    "GITHUB_WORKFLOW_REF": "alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.13.1",
    "PIPELINE_DIST": "dist",
    "PIPELINE_RELEASE": "v0.13.1",
    "RUNNER_ARCH": "X64",
    "RUNNER_OS": "Linux",
}


def is_ambient(name: str) -> bool:
    if name in SUITE_KNOBS:
        return False
    return name in AMBIENT_NAMES or name.startswith(AMBIENT_PREFIXES)


def scrub(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Remove the ambient job environment from `environ`; the names removed, sorted."""
    removed = sorted(name for name in environ if is_ambient(name))
    for name in removed:
        del environ[name]
    return removed
