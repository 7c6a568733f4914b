"""What the rehearsal reads from the workflows before act runs them (pipeline/dev/rehearse_workflow.py).

- The copy act runs differs from the committed release.yml / ci.yml only by the substitutions it lists
  (the Linux build's `container:` dropped, the Windows jobs supplied instead of run), and any other
  difference (a run: step, needs, if, env, an output, an artifact name) is named;
- the wiring checks hold on the committed workflows and name what breaks in a scratch copy: an artifact
  renamed (the missing producer and the orphaned upload), a second producer, an output nobody sets, a
  write permission no step uses, a publish without the permission it needs.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repokit import ROOT

from pipeline.dev.rehearse_workflow import (
    dump_workflow,
    load_workflow,
    pinned_actions,
    planned_jobs,
    rehearsal_copy,
    unlisted_changes,
    wiring_problems,
)
from pipeline.errors import EnvironmentProblem, InputError

WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = load_workflow(WORKFLOWS / "release.yml")
CI = load_workflow(WORKFLOWS / "ci.yml")
SUPPLY = Path("/supply")


def test_the_copy_of_release_yml_lists_exactly_its_substitutions_and_changes_nothing_else():
    rehearsed, changes = rehearsal_copy(RELEASE, SUPPLY)
    container = RELEASE["jobs"]["build-linux"]["container"]["image"]
    assert [change.line() for change in changes] == [
        "build-windows: runs-on windows-latest -> ubuntu-latest (host mode cannot run a Windows runner)",
        "build-windows: supplied instead of run: its upload paths copied from the supply folder, then its own "
        "upload-artifact steps as written (no Windows runner here)",
        f"build-linux: container {container} dropped (act's host mode has no Docker API; the host is that container's distribution release)",
    ]
    assert unlisted_changes(RELEASE, rehearsed, changes) == []
    for job_id, job in RELEASE["jobs"].items():
        for key in ("needs", "if", "env", "outputs", "permissions", "strategy"):
            assert rehearsed["jobs"][job_id].get(key) == job.get(key), f"{job_id}.{key}"
        if job_id != "build-windows":
            assert rehearsed["jobs"][job_id]["steps"] == job["steps"], job_id
    assert load_workflow.__module__  # the copy act reads is the same document once dumped and read back
    assert yaml.safe_load(dump_workflow(rehearsed))["jobs"] == rehearsed["jobs"]


def test_the_supplied_windows_job_copies_the_paths_its_own_upload_names_and_uploads_them_as_written():
    rehearsed, _ = rehearsal_copy(RELEASE, SUPPLY)
    original_upload = [step for step in RELEASE["jobs"]["build-windows"]["steps"] if "upload-artifact@" in str(step.get("uses"))]
    supply, *uploads = rehearsed["jobs"]["build-windows"]["steps"]
    assert uploads == original_upload  # name, path, if-no-files-found: untouched
    for path in original_upload[0]["with"]["path"].split():
        assert f'cp -R "$SUPPLY/{path.rstrip("/")}" "{path.rstrip("/")}"' in supply["run"]
    assert supply["env"] == {"SUPPLY": str(SUPPLY)}


def test_ci_yml_is_rehearsed_with_its_windows_unit_job_supplied():
    rehearsed, changes = rehearsal_copy(CI, SUPPLY)
    assert {(change.job, change.key) for change in changes} == {("unit-windows", "runs-on"), ("unit-windows", "steps")} or \
        not [job for job in CI["jobs"].values() if "upload-artifact" in str(job)]


@pytest.mark.parametrize("job_id, key, value", [
    ("package", "needs", ["build-linux"]),
    ("verify", "if", "${{ always() }}"),
    ("preflight", "outputs", {}),
    ("build-linux", "env", {}),
])
def test_a_change_no_substitution_lists_is_named(job_id, key, value):
    rehearsed, changes = rehearsal_copy(RELEASE, SUPPLY)
    rehearsed["jobs"][job_id][key] = value
    assert f"{job_id}.{key}" in unlisted_changes(RELEASE, rehearsed, changes)


def test_a_changed_run_step_or_artifact_name_is_named():
    rehearsed, changes = rehearsal_copy(RELEASE, SUPPLY)
    rehearsed["jobs"]["compose"]["steps"][4]["run"] += "\ntrue\n"
    rehearsed["jobs"]["image"]["steps"][-1]["with"]["name"] = "dist-image-2"
    assert {"compose.steps", "image.steps", "image: artifact names"} <= set(unlisted_changes(RELEASE, rehearsed, changes))


def test_the_committed_workflows_are_wired_and_pin_only_actions_the_kit_stands_in_for():
    assert wiring_problems(RELEASE) == []
    assert wiring_problems(CI) == []
    assert set(pinned_actions(RELEASE, CI)) == {"actions/checkout", "actions/setup-python", "actions/upload-artifact", "actions/download-artifact"}


def _renamed(document: dict, job_id: str, old: str, new: str) -> dict:
    scratch = copy.deepcopy(document)
    for step in scratch["jobs"][job_id]["steps"]:
        if "upload-artifact@" in str(step.get("uses")) and step["with"]["name"] == old:
            step["with"]["name"] = new
            return scratch
    raise AssertionError(f"{job_id} uploads no {old}")


def test_a_renamed_artifact_names_the_missing_producer_and_the_orphan(tmp_path):
    scratch = _renamed(RELEASE, "package", "dist-package", "dist-packaged")
    problems = wiring_problems(scratch)
    assert "artifact dist-package, downloaded by image, has no producer (no upload-artifact names it)" in problems
    assert "artifact dist-packaged, uploaded by package, is neither downloaded nor a declared deliverable" in problems
    # and the rehearsal refuses such a file before anything runs, naming the same producer
    path = tmp_path / "release.yml"
    path.write_text(dump_workflow(scratch), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pipeline", "rehearse", "--workflow", str(path), "--release", "v0.13.1",
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == InputError.exit_code
    assert "artifact dist-package, downloaded by image, has no producer" in done.stderr
    assert not (tmp_path / "work").exists()


def test_two_producers_an_unset_output_and_a_download_from_a_job_not_needed_are_named():
    scratch = _renamed(RELEASE, "image", "dist-image", "dist-package")
    scratch["jobs"]["preflight"]["outputs"].pop("debian_suite")
    scratch["jobs"]["qualify"]["needs"] = "image"
    problems = wiring_problems(scratch)
    assert "artifact dist-package has 2 producers (package, image); a download needs exactly one" in problems
    assert "build-linux reads needs.preflight.outputs.debian_suite, an output preflight does not set" in problems
    assert any(line.startswith("artifact dist-push: qualify downloads it but does not (transitively) need push") for line in problems)


def test_permissions_are_the_least_the_steps_use():
    scratch = copy.deepcopy(RELEASE)
    scratch["jobs"]["verify"]["permissions"]["id-token"] = "write"
    scratch["jobs"]["publish"]["permissions"]["contents"] = "read"
    scratch["jobs"]["tests"].pop("permissions")
    problems = wiring_problems(scratch)
    assert "verify has id-token: write, which none of its steps uses" in problems
    assert "publish runs `python -m pipeline publish --release\\b` without contents: write" in problems
    assert "tests does not declare its permissions" in problems


def test_an_action_the_kit_does_not_stand_in_for_is_refused():
    scratch = copy.deepcopy(RELEASE)
    scratch["jobs"]["verify"]["steps"].append({"uses": "actions/cache@" + "a" * 40})
    with pytest.raises(InputError, match="actions/cache@a{40}"):
        pinned_actions(scratch)
    scratch["jobs"]["verify"]["steps"][-1] = {"uses": "actions/checkout@v7"}
    with pytest.raises(InputError, match="pinned by a full commit SHA"):
        pinned_actions(scratch)


def test_a_job_brings_what_it_needs_and_a_job_without_its_container_is_refused_on_a_host_that_is_not_disposable(tmp_path):
    assert planned_jobs(RELEASE, "preflight") == {"preflight"}
    assert planned_jobs(RELEASE, "package") == {"package", "build-windows", "build-linux", "preflight"}
    assert planned_jobs(RELEASE, None) == set(RELEASE["jobs"])
    with pytest.raises(InputError, match="no job 'nope'"):
        planned_jobs(RELEASE, "nope")
    done = subprocess.run([sys.executable, "-m", "pipeline", "rehearse", "--release", "v0.13.1", "--job", "package",
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == EnvironmentProblem.exit_code
    assert "job build-linux would run, without its container, as this host's root user" in done.stderr
    assert "--disposable-host" in done.stderr
    assert not (tmp_path / "work").exists()


def test_every_input_the_workflows_give_an_action_is_one_its_stand_in_declares():
    kit = ROOT / "tests" / "kits" / "actions"
    declared = {f"actions/{folder.name}": set(yaml.safe_load((folder / "action.yml").read_text())["inputs"])
                for folder in kit.iterdir() if (folder / "action.yml").is_file()}
    assert set(declared) == {"actions/checkout", "actions/setup-python", "actions/upload-artifact", "actions/download-artifact"}
    for document in (RELEASE, CI):
        for job_id, job in document["jobs"].items():
            for step in job.get("steps", []):
                if "uses" in step:
                    action = step["uses"].split("@", 1)[0]
                    unknown = set(step.get("with") or {}) - declared[action]
                    assert not unknown, f"{job_id}: {action} is given {sorted(unknown)}, which its stand-in would ignore"


def test_a_release_that_is_not_a_release_name_is_refused_before_anything_is_made(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pipeline", "rehearse", "--release", "v1.0;touch x", "--job", "preflight",
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == InputError.exit_code
    assert "--release: is not a release name (found 'v1.0;touch x'; expected vX.Y.Z or vX.Y.Z-beta.N)" in done.stderr
    assert not (tmp_path / "work").exists()


def test_the_jobs_get_this_machines_tls_trust_and_nothing_else_of_the_callers(tmp_path, monkeypatch):
    """A host behind a TLS-inspecting proxy names its CA in SSL_CERT_FILE / NODE_EXTRA_CA_CERTS / PIP_CERT: the jobs'
    pip, npm and git must trust it (file paths, not credentials); the caller's tokens and PIPELINE_* never pass."""
    from pipeline.dev import rehearse

    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/certs/proxy-ca.pem")
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", "/etc/ssl/certs/proxy-ca.pem")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_callers0123456789")
    monkeypatch.setenv("PIPELINE_TEST_SUBSET", "rehearsal")
    monkeypatch.setenv("HOME", str(tmp_path / "caller-home"))
    environment = rehearse.act_environment(tmp_path / "work", {"EXTRA": "1"})
    assert environment["SSL_CERT_FILE"] == environment["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/certs/proxy-ca.pem"
    assert "GITHUB_TOKEN" not in environment and "PIPELINE_TEST_SUBSET" not in environment
    assert environment["HOME"] == str(tmp_path / "work" / "home") and environment["EXTRA"] == "1"
    assert set(environment) <= {*rehearse.PASSED_VARIABLES, *rehearse.TRUST_VARIABLES, "HOME", "TMPDIR",
                                "ACT_DISABLE_VERSION_CHECK", "EXTRA"}
