"""The GitHub Actions workflows parse and keep the hardening rules.

Parsed with PyYAML (installed with the pipeline: spdx-tools depends on it).
YAML 1.1 reads the key `on` as the boolean True, so triggers are looked up
under both.  The rules: `permissions: {}` at the top and least privilege per
job (`id-token: write` only on `sign`, `packages: write` only on `push`,
`contents: write` only on the publish gate), every action pinned by a full
commit SHA with its tag in a comment, `persist-credentials: false` on every
checkout, a timeout on every job, no event data interpolated into scripts,
and a publish gate that needs every other job.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (it comes with spdx-tools)")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
CI = WORKFLOWS / "ci.yml"
SHA_PIN = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}$")
WRITE_SCOPES = {"id-token": {"sign"}, "packages": {"push"}, "contents": {"publish"}}


def load(path: Path) -> dict:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict), f"{path} is not a YAML mapping"
    return document


def triggers(document: dict) -> dict:
    value = document.get("on", document.get(True))
    assert value is not None, "the workflow has no triggers"
    return value


def steps(document: dict):
    for job_id, job in document["jobs"].items():
        for index, step in enumerate(job.get("steps", [])):
            yield job_id, index, step


@pytest.mark.parametrize("path", [RELEASE, CI], ids=["release", "ci"])
def test_workflow_parses_and_every_job_is_hardened(path):
    document = load(path)
    assert document["permissions"] == {}, "top-level permissions must be {} (each job asks for its own)"
    for job_id, job in document["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int) and 0 < job["timeout-minutes"] <= 360, f"{job_id}: no timeout"
        permissions = job.get("permissions")
        assert isinstance(permissions, dict) and permissions, f"{job_id}: permissions must be explicit"
        assert permissions.get("contents") in ("read", "write"), f"{job_id}: contents permission missing"
        for scope, level in permissions.items():
            assert level in ("read", "write", "none"), f"{job_id}: {scope}: {level}"
            if level == "write":
                allowed = WRITE_SCOPES.get(scope, set())
                assert job_id in allowed, f"{job_id} must not have {scope}: write (only {sorted(allowed)})"


@pytest.mark.parametrize("path", [RELEASE, CI], ids=["release", "ci"])
def test_every_action_is_pinned_by_a_full_commit_sha_with_its_tag_noted(path):
    text = path.read_text(encoding="utf-8")
    document = load(path)
    uses = [(job, step["uses"]) for job, _, step in steps(document) if "uses" in step]
    assert uses, "no actions used?"
    for job, action in uses:
        assert SHA_PIN.match(action), f"{job}: {action} is not pinned by a 40-hex commit SHA"
        line = next(line for line in text.splitlines() if f"uses: {action}" in line)
        assert re.search(r"# v\d+(\.\d+)*\s*$", line), f"{job}: {action} lacks its '# vX.Y.Z' comment"
    # The same action is pinned to the same commit everywhere.
    pins: dict[str, set[str]] = {}
    for _, action in uses:
        name, sha = action.split("@")
        pins.setdefault(name, set()).add(sha)
    assert all(len(shas) == 1 for shas in pins.values()), pins


@pytest.mark.parametrize("path", [RELEASE, CI], ids=["release", "ci"])
def test_checkouts_keep_no_credentials_and_scripts_take_no_event_data(path):
    document = load(path)
    for job, index, step in steps(document):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{job} step {index}: persist-credentials must be false"
        if "run" in step:
            assert "github.event" not in step["run"], f"{job} step {index}: event data interpolated into a script (injection)"
            assert "secrets." not in step["run"], f"{job} step {index}: a secret inside a script; pass it through env"
        if step.get("uses", "").startswith("actions/upload-artifact@"):
            assert step["with"].get("if-no-files-found") == "error", f"{job} step {index}: an empty upload must fail"


def test_release_triggers_on_tags_and_by_hand():
    on = triggers(load(RELEASE))
    assert on["push"] == {"tags": ["v*"]}
    assert "workflow_dispatch" in on
    assert "pull_request" not in on and "pull_request_target" not in on


def test_release_jobs_and_their_order():
    jobs = load(RELEASE)["jobs"]
    expected = {"preflight", "build-windows", "build-linux", "package", "image", "push", "qualify", "compose", "verify", "tests", "sign", "publish"}
    assert set(jobs) == expected
    assert jobs["build-windows"]["runs-on"] == "windows-latest"
    windows = "\n".join(s.get("run", "") for s in jobs["build-windows"]["steps"])
    assert "nox -s build-4090" in windows and "nox -s build-3090" in windows
    assert 'source_4090="$(python .github/scripts/lane_source.py rtx4090-windows-native)"' in windows
    assert 'PIPELINE_SOURCE="$source_4090" nox -s build-4090' in windows  # the lane's pinned source, not the sample
    assert any("nox -s build-5090" in s.get("run", "") for s in jobs["build-linux"]["steps"])
    assert any("verify --release \"$PIPELINE_RELEASE\" --require-ready" in s.get("run", "") for s in jobs["verify"]["steps"])
    assert any("pipeline sign" in s.get("run", "") for s in jobs["sign"]["steps"])
    assert any("bash .ci/run" in s.get("run", "") for s in jobs["tests"]["steps"])
    assert jobs["sign"]["permissions"] == {"contents": "read", "id-token": "write"}
    assert jobs["push"]["permissions"] == {"contents": "read", "packages": "write"}
    assert jobs["publish"]["permissions"] == {"contents": "write"}

    def needs(job: str) -> set[str]:
        value = jobs[job].get("needs", [])
        return {value} if isinstance(value, str) else set(value)

    def ancestors(job: str) -> set[str]:
        found: set[str] = set()
        stack = list(needs(job))
        while stack:
            parent = stack.pop()
            if parent not in found:
                found.add(parent)
                stack.extend(needs(parent))
        return found

    for job in jobs:
        assert needs(job) <= set(jobs), f"{job} needs an unknown job"
        assert job not in ancestors(job), f"{job} depends on itself"
    # Order: build -> package -> image -> push -> qualify -> compose -> verify; sign after verify and tests.
    assert {"build-windows", "build-linux"} <= ancestors("package")
    assert "package" in ancestors("image") and "image" in ancestors("push") and "push" in ancestors("qualify")
    assert "qualify" in ancestors("compose") and "compose" in ancestors("verify")
    assert {"verify", "tests"} <= needs("sign")
    # The publish gate waits for every job, directly, and only on success, behind an environment.
    assert needs("publish") == expected - {"publish"}
    assert jobs["publish"].get("if") in (None, "${{ success() }}", "success()")
    assert jobs["publish"].get("environment") == "release"


def test_ci_runs_the_ci_entry_point_on_push_and_pull_requests():
    document = load(CI)
    on = triggers(document)
    assert "push" in on and "pull_request" in on
    assert "pull_request_target" not in on
    (job,) = document["jobs"].values()
    assert any(step.get("run", "").strip().endswith("bash .ci/run") for step in job["steps"])
    assert (ROOT / ".ci" / "run").is_file()


def test_lane_source_helper_prints_the_pinned_commit_or_fails(tmp_path):
    import subprocess
    import sys

    helper = ROOT / ".github" / "scripts" / "lane_source.py"
    ok = subprocess.run([sys.executable, str(helper), "rtx4090-windows-native"], cwd=ROOT, capture_output=True, text=True)
    assert ok.returncode == 0 and re.fullmatch(r"https://\S+@[0-9a-f]{40}\n", ok.stdout)
    lanes = tmp_path / "runtime" / "lanes"
    lanes.mkdir(parents=True)
    (lanes / "x.toml").write_text('[source]\nrepository = "https://github.com/a/b.git"\nnote = "prefix only"\n')
    bad = subprocess.run([sys.executable, str(helper), "x"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stdout == ""
    assert "lane x pins no full source commit" in bad.stderr and "prefix only" in bad.stderr


def test_linux_build_job_installs_the_lanes_host_dependencies_before_building():
    import subprocess
    import sys

    from pipeline.lanes import find_lane

    steps_ = load(RELEASE)["jobs"]["build-linux"]["steps"]
    runs = [s.get("run", "") for s in steps_]
    install = next(i for i, run in enumerate(runs) if "host_packages.py rtx5090-container debian" in run)
    build = next(i for i, run in enumerate(runs) if "nox -s build-5090" in run)
    assert install < build
    assert 'packages="$(python .github/scripts/host_packages.py rtx5090-container debian)"' in runs[install]
    assert "apt-get install -y -qq --no-install-recommends $packages" in runs[install]
    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    printed = subprocess.run([sys.executable, str(helper), "rtx5090-container", "debian"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    lane = find_lane("5090")
    assert printed == sorted({d.debian for d in lane.host_dependencies if d.applies_to("linux-x86_64")})
    assert {"libavformat-dev", "libcurl4-openssl-dev", "pkg-config", "g++"} <= set(printed)
    ports = subprocess.run([sys.executable, str(helper), "rtx4090-windows-native", "vcpkg"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert "ffmpeg[avcodec]" in ports and "curl" in ports and "g++" not in ports


def test_host_packages_helper_refuses_a_name_that_is_not_a_package(tmp_path):
    import subprocess
    import sys

    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    lanes = tmp_path / "runtime" / "lanes"
    lanes.mkdir(parents=True)
    (lanes / "rtx9999-container.toml").write_text('[[build.host_dependencies]]\nname = "x"\nkind = "tool"\ndebian = "x; rm -rf /"\n')
    bad = subprocess.run([sys.executable, str(helper), "rtx9999-container", "debian"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stdout == ""
    assert "build.host_dependencies[0].debian" in bad.stderr
