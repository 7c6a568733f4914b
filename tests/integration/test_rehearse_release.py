"""release.yml rehearsed as committed by a real Actions runner (act, host mode): the jobs this host can run.

`python -m pipeline rehearse` (what `nox -s rehearse` runs) on this checkout's HEAD, as the push of the
release tag v0.13.1 (its tree is committed in manifests/), with the action stand-ins of tests/kits/actions/.
The in-suite rehearsal runs `preflight` and `tests` as written: the locked install from PyPI, `pip check`, the
build-environment outputs, `verify --check-pins` of the committed tree; then the CI entry point (.ci/run) and
`nox -s tests` on the declared subset `rehearsal` (PIPELINE_TEST_SUBSET through act's environment file, so
the suite does not run itself, this test included, inside its own rehearsal), whose test-run receipt, uploaded
as the workflow's `test-run-receipt` artifact, names that subset by its file's SHA-256.  The jobs after
`preflight` on the build side need the Linux build job, whose container host mode cannot give and whose set-up
would rewrite this host's apt sources; the rehearsal refuses them on a host that is not disposable
(tests/unit/test_rehearse_workflow.py), and docs/RELEASING.md ("Rehearse before you tag") says what the
rehearsal cannot show.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest
from repokit import ROOT, git

from pipeline.dev.rehearse_workflow import load_workflow, rehearsal_copy
from pipeline.errors import RefusedError
from pipeline.formats.test_receipt import Selection, parse_test_receipt, require_green_for
from pipeline.formats.test_subset import read_subset

pytestmark = [pytest.mark.slow, pytest.mark.network]


def test_preflight_and_the_tests_job_on_the_declared_subset_run_as_committed(tmp_path):
    work = tmp_path / "rehearsal"
    done = subprocess.run([sys.executable, "-m", "pipeline", "rehearse", "--release", "v0.13.1", "--job", "tests",
                           "--test-subset", "rehearsal", "--work", str(work), "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    report = json.loads(done.stdout)
    assert report["jobs"] == {"preflight": "success", "tests": "success"}
    assert report["passed"] is True
    # act times a job from its log's timestamps (whole seconds), the rehearsal the whole run: one second of rounding
    for job in ("preflight", "tests"):
        assert 0 < report["job_seconds"][job] <= report["seconds"] + 1.0
    _, changes = rehearsal_copy(load_workflow(ROOT / ".github" / "workflows" / "release.yml"), work / "supply")
    assert report["substitutions"] == [change.line() for change in changes]
    assert len(report["substitutions"]) == 3
    for line in report["substitutions"]:
        assert f"substitution: {line}" in done.stderr
    log = (work / "act.log").read_text(encoding="utf-8")
    # the stand-ins ran at the pinned SHAs, and the job read the committed tree of the tag
    assert "checked out refs/tags/v0.13.1 at " in log
    assert "Successfully set up CPython (3.11." in log
    assert "VALID: v0.13.1 is a valid draft release tree" in log
    assert "::set-output:: debian_suite=bookworm" in log or "debian_suite=bookworm" in log

    # The tests job ran the declared subset, not the suite, and its receipt (the artifact the publish job
    # downloads) says so: the rehearsed commit, the subset by name and the SHA-256 of its file, green.
    subset = read_subset(ROOT, "rehearsal")
    assert report["test_subset"] == f"rehearsal ({subset.path}, sha256 {subset.sha256})"
    archive = work / "artifacts" / "1" / "test-run-receipt" / "test-run-receipt.zip"
    with zipfile.ZipFile(archive) as uploaded:
        assert uploaded.namelist() == ["test-run-receipt.json"]
        receipt = parse_test_receipt(uploaded.read("test-run-receipt.json"), file=archive)
    commit = git(ROOT, "rev-parse", "HEAD")
    assert report["commit"] == receipt.commit == commit and receipt.tree == git(ROOT, "rev-parse", "HEAD^{tree}")
    assert receipt.dirty is False
    assert receipt.selection == Selection("subset", "rehearsal", subset.sha256)
    assert receipt.passed > 0 and receipt.failed == receipt.errors == 0
    assert f"PIPELINE_TEST_SUBSET=rehearsal: the declared subset {subset.path} (sha256 {subset.sha256}), not the whole suite" in log
    # Green, but a subset: the publication gate takes it only where the caller says why (the stand-in world).
    tree = git(ROOT, "rev-parse", "HEAD^{tree}")
    with pytest.raises(RefusedError, match="not of the whole suite"):
        require_green_for(receipt, commit=commit, tree=tree)
    require_green_for(receipt, commit=commit, tree=tree, subset_allowed="the rehearsal's stand-in world")
