"""release.yml rehearsed as committed by a real Actions runner (act, host mode): the jobs this host can run.

`python -m pipeline rehearse` (what `nox -s rehearse` runs) on this checkout's HEAD, as the push of the
release tag v0.13.1 (its tree is committed in manifests/), with the action stand-ins of tests/kits/actions/.
The in-suite rehearsal runs the `preflight` job as written: the locked install from PyPI, `pip check`, the
build-environment outputs, `verify --check-pins` of the committed tree.  The jobs after it need the Linux
build job, whose container host mode cannot give and whose set-up would rewrite this host's apt sources;
the rehearsal refuses them on a host that is not disposable (tests/unit/test_rehearse_workflow.py), and
docs/RELEASING.md ("Rehearse before you tag") says what the rehearsal cannot show.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from repokit import ROOT

from pipeline.dev.rehearse_workflow import load_workflow, rehearsal_copy

pytestmark = [pytest.mark.slow, pytest.mark.network]


def test_preflight_runs_as_committed_and_the_substitutions_are_listed(tmp_path):
    work = tmp_path / "rehearsal"
    done = subprocess.run([sys.executable, "-m", "pipeline", "rehearse", "--release", "v0.13.1", "--job", "preflight",
                           "--work", str(work), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    report = json.loads(done.stdout)
    assert report["jobs"] == {"preflight": "success"}
    assert report["passed"] is True
    # act times a job from its log's timestamps (whole seconds), the rehearsal the whole run: one second of rounding
    assert 0 < report["job_seconds"]["preflight"] <= report["seconds"] + 1.0
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
