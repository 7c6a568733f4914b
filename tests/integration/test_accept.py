"""Stage `accept`: bundle a documented route, run it exactly as written, compose the acceptance record.

Runner tests use a small route document in a git repository of their own (runbook bundles);
compose's refusals use a candidate of the sample release (tests/kits/acceptkit.py: light_candidate)
with a small route document; the documented Linux routes of docs/QUICKSTART.md run for real on
a candidate made by the pipeline (acceptkit.container_candidate) at the end of this file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from acceptkit import LIGHT_DOCUMENT, acceptance_toml, commit, light_candidate
from releasekit import review_ledger
from repokit import ROOT, git

from pipeline.errors import (
    EnvironmentProblem,
    InputError,
    IntegrityError,
    PipelineError,
    RefusedError,
    UsageError,
)
from pipeline.formats.acceptance import canonical, loads_strict, validate_receipt
from pipeline.register import Register
from pipeline.stages.accept import RunOptions, compose_record, make_bundle, run_bundle

SECRET = "sk-accept-test-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the runner on a small document --------------------------------------------------------------

RUNBOOK = """# Runbook

```parameters
GREETING: text = hello
[TOKEN]: text
```

## Route `session`: one shell session

```sh
X=41
cd docs
echo "$GREETING ${OMP_TEST_SECRET:-absent}"
```

```sh
test "$X" = 41 && test "$(basename "$PWD")" = docs
if read -r line; then echo "stdin had $line"; else echo "stdin at eof"; fi
printf '%s\\n' "${TOKEN:-no token}" | wc -c
env | cut -d= -f1 | sort
```

```sh requires=gpu
nvidia-smi -L
```

```sh
echo done >&2
```

## Route `fails`: a failing block stops the route

```sh
echo one
```

```sh
echo "failing now" >&2
false
echo unreachable
```

```sh
echo never
```

## Route `exits`: exit ends the session

```sh
exit 0
```

```sh
echo never
```

## Route `slow`: a step that hangs

```sh
sleep 30
```

## Route `granted`: network is granted, not probed

```sh requires=network
echo online
```
"""


@pytest.fixture
def runbook(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "RUNBOOK.md").write_text(RUNBOOK)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "config", "core.autocrlf", "false")
    commit(repo, "runbook")
    return repo


def bundle_of(repo: Path, route: str) -> bytes:
    return canonical(make_bundle(repo, release=None, route_id=route, document="docs/RUNBOOK.md"))


def test_a_route_runs_in_one_session_with_stdin_at_eof_and_a_clean_environment(runbook, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_TEST_SECRET", SECRET)  # inherited by the runner, never by the route
    data = bundle_of(runbook, "session")
    receipt = run_bundle(data, "b.json", RunOptions(clone=runbook, work=tmp_path / "work", keep_work=True))
    assert receipt["status"] == "passed" and receipt["failed_step"] is None
    assert [s["status"] for s in receipt["steps"]] == ["passed", "passed", "not-run", "passed"]
    bundle = loads_strict(data, file="b")
    for ran, step in zip(receipt["steps"], bundle["steps"], strict=True):
        assert ran["block_sha256"] == step["sha256"]
        if ran["status"] == "passed":
            assert ran["executed_sha256"] == step["sha256"] and ran["exit_status"] == 0
    out1 = (tmp_path / "work" / "step-001.stdout").read_bytes()
    assert out1 == b"hello absent\n"  # the secret was not inherited
    assert receipt["steps"][0]["stdout"] == {"sha256": sha(out1), "bytes": len(out1)}
    out2 = (tmp_path / "work" / "step-002.stdout").read_text().splitlines()
    assert out2[0] == "stdin at eof" and out2[1].strip() == str(len("no token\n"))
    # bash adds PWD, OLDPWD, SHLVL and _ itself; nothing else reaches the route
    assert set(out2[2:]) - {"PWD", "OLDPWD", "SHLVL", "_"} == set(receipt["environment"]["variables"])
    assert set(receipt["environment"]["variables"]) == {"GREETING", "HOME", "LANG", "LC_ALL", "PATH", "TERM", "TMPDIR", "TZ"}
    gpu = receipt["steps"][2]
    assert gpu["requires"] == ["gpu"] and gpu["reason"].startswith("host-only: requires gpu")
    assert receipt["capabilities"]["gpu"]["available"] is False
    assert receipt["clone"] == {"commit": git(runbook, "rev-parse", "HEAD"), "clean": True}
    validate_receipt(receipt, file="receipt")


def test_a_runner_in_a_process_with_over_a_thousand_open_files_still_runs_the_route(runbook, tmp_path):
    """A long-lived process (a test worker, a service) may hold over 1,023 descriptors, so the session's status pipe
    gets a number select() refuses ('filedescriptor out of range in select()', as CI once showed); the runner waits
    with poll/epoll instead."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"this host allows only {hard} open files per process")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100) if hard == resource.RLIM_INFINITY else min(max(soft, 1100), hard), hard))
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        receipt = run_bundle(bundle_of(runbook, "session"), "b.json", RunOptions(clone=runbook, work=tmp_path / "work"))
        assert receipt["status"] == "passed", receipt["steps"]
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_secret_in_the_environment_never_reaches_the_receipt(runbook, tmp_path):
    """The runner's own environment holds the secret (as a CI job's would); the receipt has no trace of it,
    and the output hash shows the route never saw it."""
    bundle = tmp_path / "session.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "session"))
    env = dict(os.environ, OMP_TEST_SECRET=SECRET, PIPELINE_REGISTRY_PASSWORD=SECRET, GITHUB_TOKEN=SECRET)
    out = tmp_path / "receipt.json"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--dist", str(tmp_path / "dist"), "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert SECRET.encode() not in data and SECRET[-16:].encode() not in data
    assert SECRET not in result.stdout + result.stderr
    receipt = json.loads(data)
    assert receipt["steps"][0]["stdout"]["sha256"] == sha(b"hello absent\n")
    assert receipt["secret_values_recorded"] == 0
    assert "OMP_TEST_SECRET" not in receipt["environment"]["variables"]
    # ... and it is recorded in the register of --dist
    entry = Register(tmp_path / "dist").query("acceptance-receipt")[0]
    assert entry.sha256 == sha(data) and entry.attrs["status"] == "passed" and entry.attrs["route"] == "session"


def test_two_runs_of_one_bundle_differ_only_in_times_and_host_facts(runbook, tmp_path):
    data = bundle_of(runbook, "session")
    first = run_bundle(data, "b", RunOptions(clone=runbook))
    second = run_bundle(data, "b", RunOptions(clone=runbook))

    def without_times_and_host(receipt):
        receipt = copy.deepcopy(receipt)
        for key in ("started_at", "finished_at", "host", "capabilities"):
            receipt.pop(key)
        for step in receipt["steps"]:
            step.pop("elapsed_s")
        return receipt

    assert without_times_and_host(first) == without_times_and_host(second)
    assert first["steps"][1]["stdout"]["sha256"] == second["steps"][1]["stdout"]["sha256"]
    assert first["host"] == second["host"]  # the same host, so the facts agree too


def test_a_failing_block_stops_the_route_and_the_receipt_names_the_step_and_exit_status(runbook, tmp_path):
    bundle = tmp_path / "fails.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "fails"))
    result = subprocess.run([sys.executable, "-m", "pipeline", "accept", "run", str(bundle), "--clone", str(runbook), "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert "FAIL: route fails: step 2: exit status 1" in result.stderr
    receipt = json.loads(Path(json.loads(result.stdout)["receipt"]).read_bytes())
    assert (receipt["status"], receipt["failed_step"], receipt["failure"]) == ("failed", 2, "exit status 1")
    assert [(s["status"], s["exit_status"]) for s in receipt["steps"]] == [("passed", 0), ("failed", 1), ("not-run", None)]
    assert receipt["steps"][2]["reason"] == "not run: step 2 failed"
    assert receipt["steps"][1]["stderr"] == {"sha256": sha(b"failing now\n"), "bytes": len(b"failing now\n")}


def test_exit_in_a_step_ends_the_session_and_fails_the_route(runbook):
    receipt = run_bundle(bundle_of(runbook, "exits"), "b", RunOptions(clone=runbook))
    assert receipt["failed_step"] == 1 and "ended the shell session" in receipt["failure"]
    assert [s["status"] for s in receipt["steps"]] == ["failed", "not-run"]


def test_a_step_that_runs_too_long_is_stopped(runbook):
    receipt = run_bundle(bundle_of(runbook, "slow"), "b", RunOptions(clone=runbook, step_timeout=1))
    assert receipt["status"] == "failed" and receipt["failure"] == "timed out after 1 s (the session was stopped)"
    assert receipt["steps"][0]["exit_status"] is None and receipt["steps"][0]["elapsed_s"] < 15


def test_network_runs_only_when_granted_and_a_capability_can_be_denied(runbook):
    data = bundle_of(runbook, "granted")
    without = run_bundle(data, "b", RunOptions(clone=runbook))
    assert without["steps"][0]["status"] == "not-run" and without["capabilities"]["network"] == {"available": False, "how": "not-granted", "command": None, "exit_status": None}
    granted = run_bundle(data, "b", RunOptions(clone=runbook, grants=["network"]))
    assert granted["steps"][0]["status"] == "passed" and granted["capabilities"]["network"]["how"] == "granted"
    denied = run_bundle(bundle_of(runbook, "session"), "b", RunOptions(clone=runbook, denies=["gpu"]))
    assert denied["capabilities"]["gpu"] == {"available": False, "how": "denied", "command": None, "exit_status": None}


def test_parameters_are_declared_recorded_by_value_and_checked(runbook):
    data = bundle_of(runbook, "session")
    receipt = run_bundle(data, "b", RunOptions(clone=runbook, parameters={"GREETING": "hi"}, offered={"TOKEN": "t", "OTHER": "ignored"}))
    assert receipt["environment"]["parameters"] == {"GREETING": {"source": "set", "value": "hi"}, "TOKEN": {"source": "set", "value": "t"}}
    assert receipt["steps"][0]["stdout"]["sha256"] == sha(b"hi absent\n")
    with pytest.raises(UsageError) as caught:
        run_bundle(data, "b", RunOptions(clone=runbook, parameters={"UNDECLARED": "x"}))
    assert caught.value.field == "--set" and caught.value.found == "UNDECLARED"


def test_the_runner_refuses_a_dirty_clone_and_a_tampered_bundle(runbook):
    data = bundle_of(runbook, "session")
    (runbook / "stray.txt").write_text("local change\n")
    with pytest.raises(RefusedError) as caught:
        run_bundle(data, "b", RunOptions(clone=runbook))
    assert "local changes" in caught.value.render()
    (runbook / "stray.txt").unlink()
    doc = json.loads(data)
    doc["steps"][0]["text"] = "echo tampered\n"
    with pytest.raises(InputError) as caught:
        run_bundle(canonical(doc), "b.json", RunOptions(clone=runbook))
    assert caught.value.field == "steps[0].sha256"
    duplicate = data.replace(b'"kind": "runbook"', b'"kind": "runbook",\n  "kind": "runbook"')
    with pytest.raises(InputError) as caught:
        run_bundle(duplicate, "b.json", RunOptions(clone=runbook))
    assert "duplicate key" in caught.value.render()


def test_accept_bundle_refuses_a_step_that_shows_other_than_bash_reads_it(tmp_path):
    """What a reviewer sees must be what bash runs: a right-to-left override makes `rm -rf ~` look like part of
    a quoted string.  `accept bundle` names the route, step, line, column and the character by its code point."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "RUNBOOK.md").write_text("# R\n\n## Route `install`: install\n\n```sh\necho one\n```\n\n```sh\necho 'done \u202e; rm -rf ~ #'\n```\n")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    commit(repo, "r")
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "accept", "bundle", "--document", "docs/RUNBOOK.md", "--route", "install", "--root", str(repo), "--dist", str(tmp_path / "dist")],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "error[input]: docs/RUNBOOK.md: line 10: step 2 of route install holds U+202E RIGHT-TO-LEFT OVERRIDE at line 10, column 12" in result.stderr, result.stderr
    assert "\u202e" not in result.stderr and "\\u202e" in result.stderr  # shown escaped, never as the character itself
    assert not (tmp_path / "dist" / "acceptance").exists()


def test_a_powershell_bundle_runs_on_windows_only(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "RUNBOOK.md").write_text("# R\n\n## Route `win`: w\n\n```powershell\nWrite-Output 'one'\n```\n")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    commit(repo, "r")
    data = canonical(make_bundle(repo, release=None, route_id="win", document="docs/RUNBOOK.md"))
    with pytest.raises(EnvironmentProblem) as caught:
        run_bundle(data, "b.json", RunOptions(clone=repo))
    assert caught.value.field == "route.host_kind" and caught.value.expected == "windows-x86_64"


def test_the_runner_needs_only_the_standard_library():
    """`python3 -S` (no site-packages): importing the runner pulls in no third-party module,
    and it runs a bundle from a plain clone."""
    script = (
        "import sys\n"
        "import pipeline.stages.accept\n"
        "third = sorted(m for m in sys.modules if m.split('.')[0] not in sys.stdlib_module_names and m.split('.')[0] not in ('pipeline', '__main__'))\n"
        "heavy = sorted(m for m in sys.modules if m.startswith('pipeline.') and m.rsplit('.', 1)[1] in ('compose', 'verify', 'release', 'audit', 'sign', 'winscripts', 'oci', 'sbom'))\n"
        "print(third, heavy)\n"
    )
    result = subprocess.run([sys.executable, "-S", "-E", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] []"
    broken = subprocess.run([sys.executable, "-S", "-E", "-c", "import requests"], cwd=ROOT, capture_output=True, text=True)
    assert broken.returncode != 0  # -S really hides site-packages, so the check above means something


def test_the_runner_runs_a_bundle_with_python_minus_S(runbook, tmp_path):
    bundle = tmp_path / "b.json"
    bundle.write_bytes(bundle_of(runbook, "session"))
    result = subprocess.run([sys.executable, "-S", "-E", "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "passed"


# -- a bundle is data: only the document's text runs ---------------------------------------------------


def forge(data: bytes, change) -> bytes:
    """The bundle with `change` applied and every step's sha256 and size recomputed (a careful forger)."""
    doc = json.loads(data)
    change(doc)
    for step in doc["steps"]:
        step["sha256"] = sha(step["text"].encode())
        step["bytes"] = len(step["text"].encode())
    return canonical(doc)


def refused_run(data: bytes, clone: Path, work: Path, marker: Path, **options) -> PipelineError:
    """run_bundle refuses before anything runs: no work folder, no marker file."""
    with pytest.raises(PipelineError) as caught:
        run_bundle(data, "forged.bundle.json", RunOptions(clone=clone, work=work, **options))
    assert not marker.exists(), "a refused bundle ran code"
    assert not work.exists(), "a refused bundle made its work folder"
    return caught.value


def test_a_bundle_whose_steps_are_not_the_documents_text_is_refused_before_anything_runs(runbook, tmp_path):
    data = bundle_of(runbook, "session")
    first = json.loads(data)["steps"][0]
    marker = tmp_path / "marker"
    touch = f"touch {marker}\n"
    cases = [
        # (what the forger changed, line of the document named, found, expected)
        (lambda d: d["steps"][0].update(text=touch), first["line_start"], f"touch {marker}", "X=41"),
        (lambda d: d["steps"][0].update(text=d["steps"][0]["text"].replace("X=41\n", "X=41 \n")), first["line_start"], "X=41 ", "X=41"),
        (lambda d: d["steps"][0].update(text=d["steps"][0]["text"].replace("cd docs", f"cd docs; touch {marker}")), first["line_start"] + 1, f"cd docs; touch {marker}", "cd docs"),
        (lambda d: d["steps"][0].update(text=d["steps"][0]["text"] + touch), first["line_end"] + 1, f"touch {marker}", "(no line: the block ends)"),
    ]
    for change, line, found, expected in cases:
        error = refused_run(forge(data, change), runbook, tmp_path / "work", marker)
        assert isinstance(error, IntegrityError) and error.exit_code == 5, error.render()
        assert (error.file, error.field, error.found, error.expected) == ("docs/RUNBOOK.md", f"line {line}", found, expected), error.render()
        assert "step 1 of route session is not the document's block" in error.render() and "Fix: make the bundle again" in error.render()
    # a step added, a step dropped, a host-only step made unconditional
    extra = {**first, "index": 5, "text": touch, "line_start": 90, "line_end": 90}
    for change, words in (
        (lambda d: d["steps"].append(dict(extra)), "step 5 of route session is not in the document"),
        (lambda d: d["steps"].pop(), "the bundle lacks step 4"),
        (lambda d: d["steps"][2].update(requires=[]), "another host requirement"),
    ):
        error = refused_run(forge(data, change), runbook, tmp_path / "work", marker)
        assert isinstance(error, IntegrityError) and words in error.render(), error.render()
    # the document itself is the bundle's: its hash is checked before it is parsed
    doc = json.loads(data)
    doc["document"]["sha256"] = "a" * 64
    error = refused_run(canonical(doc), runbook, tmp_path / "work", marker)
    assert isinstance(error, IntegrityError) and error.field == "sha256" and error.expected == "a" * 64


def test_a_bundle_cannot_change_the_routes_parameters(runbook, tmp_path):
    data = bundle_of(runbook, "session")
    marker = tmp_path / "marker"
    # a changed default runs the forger's value; an undeclared name is not the route's
    error = refused_run(forge(data, lambda d: d["parameters"][0].update(default=f"$(touch {marker})")), runbook, tmp_path / "work", marker)
    assert isinstance(error, IntegrityError) and (error.file, error.field) == ("docs/RUNBOOK.md", "line 4") and "parameter GREETING differs from its declaration" in error.render()
    error = refused_run(forge(data, lambda d: d["parameters"].append({"name": "EXTRA", "kind": "text", "default": "x", "required": False})), runbook, tmp_path / "work", marker)
    assert isinstance(error, IntegrityError) and (error.file, error.field, error.found) == ("forged.bundle.json", "parameters[2].name", "EXTRA")
    assert "does not declare" in error.render() and "GREETING, TOKEN" in error.render()
    # a changed kind widens the grammar of a value: not the document's declaration either
    error = refused_run(forge(data, lambda d: d["parameters"][1].update(kind="path")), runbook, tmp_path / "work", marker)
    assert isinstance(error, IntegrityError) and "parameter TOKEN differs from its declaration" in error.render() and "kind path" in error.render()
    # names the runner or bash owns: refused by the bundle's reader, whatever the document says
    for name in ("BASH_ENV", "ENV", "PATH", "IFS", "SHELLOPTS", "PS4", "PROMPT_COMMAND", "HOME", "TMPDIR", "LC_ALL"):
        error = refused_run(forge(data, lambda d, n=name: d["parameters"].append({"name": n, "kind": "text", "default": "x", "required": False})), runbook, tmp_path / "work", marker)
        assert isinstance(error, InputError) and error.exit_code == 1, (name, error.render())
        assert (error.field, error.found) == ("parameters[2].name", name) and "cannot be a parameter" in error.render() and "Fix: rename the parameter" in error.render(), error.render()
    # BASH_ENV really is what it looks like: bash expands and sources it before the first step
    probe = subprocess.run(["bash", "--noprofile", "--norc", "-c", "true"], env={"PATH": os.environ["PATH"], "BASH_ENV": f"$(touch {marker})"}, check=False)
    assert probe.returncode == 0 and marker.exists()


# The names: each passed the old deny list, and each makes a program the steps start run code or
# fetch from elsewhere (tar, git, pip, curl, cmake, the pipeline's Sigstore seam).
UNDECLARED = {
    "TAR_OPTIONS": "--checkpoint=1 --checkpoint-action=exec=touch {marker}",
    "XDG_CONFIG_HOME": "{config}",
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "CMAKE_CXX_COMPILER_LAUNCHER": "{launcher}",
    "PIPELINE_TEST_SIGSTORE": "1",
    "BASH_ENV": "{launcher}",
    "LD_PRELOAD": "/tmp/x.so",
}


def test_a_run_takes_only_the_parameters_its_document_declares(runbook, tmp_path):
    """An allow list: `--set` of any name the route does not declare is refused before anything runs,
    whatever the name, with the route's declared names in the message; nothing ran, no receipt."""
    marker = tmp_path / "marker"
    config = tmp_path / "xdg"
    (config / "git").mkdir(parents=True)
    (config / "git" / "config").write_text(f"[core]\n\tfsmonitor = touch {marker}\n")
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(f"touch {marker}\n")
    bundle = tmp_path / "session.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "session"))
    for name, value in UNDECLARED.items():
        value = value.format(marker=marker, config=config, launcher=launcher)
        with pytest.raises(UsageError) as caught:
            run_bundle(bundle.read_bytes(), "b", RunOptions(clone=runbook, parameters={name: value}, work=tmp_path / "work"))
        assert (caught.value.field, caught.value.found) == ("--set", name) and "does not declare" in caught.value.render() and "GREETING, TOKEN" in caught.value.render()
        assert not (tmp_path / "work").exists() and not marker.exists(), name
        result = subprocess.run(
            [sys.executable, "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--set", f"{name}={value}", "--dist", str(tmp_path / "dist")],
            cwd=ROOT, capture_output=True, text=True,
        )
        assert result.returncode == 2 and f"error[usage]: --set: --set names a variable the route does not declare (found {name!r}" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and not marker.exists() and not (tmp_path / "dist" / "acceptance").exists(), name
    # the same names in a --parameters file: offered, and not taken (the route takes only its own)
    offered = tmp_path / "accept.env"
    offered.write_text("".join(f"{name}={value.format(marker=marker, config=config, launcher=launcher)}\n" for name, value in UNDECLARED.items()) + "GREETING=hi\n")
    out = tmp_path / "receipt.json"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--parameters", str(offered), "--dist", str(tmp_path / "dist"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    receipt = json.loads(out.read_bytes())
    assert receipt["environment"]["parameters"]["GREETING"] == {"source": "set", "value": "hi"}
    assert set(receipt["environment"]["variables"]) == {"GREETING", "HOME", "LANG", "LC_ALL", "PATH", "TERM", "TMPDIR", "TZ"}
    assert not marker.exists()


def test_a_document_declaring_a_programs_variable_still_takes_only_values_of_its_grammar(tmp_path):
    """The issue's case on 5796fcc: a route declared [TAR_OPTIONS] (past the deny list), `--set
    TAR_OPTIONS=--checkpoint-action=exec=...` made tar run code and the receipt passed.  A declaration now
    states a grammar, and no kind but the options kinds (which name each option they allow) takes an option."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "RUNBOOK.md").write_text("# R\n\n## Route `pack`: pack\n\n```parameters\n[TAR_OPTIONS]: text\n```\n\n```sh\ntar -cf \"$TMPDIR/x.tar\" docs\n```\n")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    commit(repo, "r")
    data = canonical(make_bundle(repo, release=None, route_id="pack", document="docs/RUNBOOK.md"))
    marker = tmp_path / "marker"
    script = tmp_path / "action.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    hostile = f"--checkpoint=1 --checkpoint-action=exec={script}"
    with pytest.raises(UsageError) as caught:
        run_bundle(data, "b", RunOptions(clone=repo, parameters={"TAR_OPTIONS": hostile}, work=tmp_path / "work"))
    assert caught.value.field == "--set TAR_OPTIONS" and caught.value.found == hostile and "not starting with '-'" in caught.value.render()
    assert not marker.exists() and not (tmp_path / "work").exists()
    # the probe: tar really runs the action it is given, so the refusal is what kept the marker away
    subprocess.run(["tar", "-cf", str(tmp_path / "probe.tar"), "-C", str(repo), "docs"], env={"PATH": os.environ["PATH"], "TAR_OPTIONS": hostile}, check=True)
    assert marker.exists()


def test_a_hostile_variable_of_the_callers_environment_never_reaches_the_shell(runbook, tmp_path):
    """The runner's own environment holds what would run code in the steps' programs; the shell starts from
    the environment the runner builds (routes.RUNNER_ENVIRONMENT) and its PATH is fixed."""
    marker = tmp_path / "marker"
    launcher = tmp_path / "evil-bin"
    launcher.mkdir()
    (launcher / "wc").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (launcher / "wc").chmod(0o755)
    (tmp_path / "bash-env.sh").write_text(f"touch {marker}\n")
    bundle = tmp_path / "session.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "session"))
    env = dict(os.environ, BASH_ENV=str(tmp_path / "bash-env.sh"), ENV=str(tmp_path / "bash-env.sh"), TAR_OPTIONS=f"--checkpoint-action=exec=touch {marker}",
               XDG_CONFIG_HOME=str(tmp_path), PATH=f"{launcher}:{os.environ['PATH']}", GREETING="inherited", TOKEN="inherited")
    out = tmp_path / "receipt.json"
    work = tmp_path / "work"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--dist", str(tmp_path / "dist"), "--out", str(out), "--work", str(work), "--keep-work"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    receipt = json.loads(out.read_bytes())
    names = (work / "step-002.stdout").read_text().splitlines()[2:]
    assert set(names) - {"PWD", "OLDPWD", "SHLVL", "_"} == {"GREETING", "HOME", "LANG", "LC_ALL", "PATH", "TERM", "TMPDIR", "TZ"}
    assert receipt["environment"]["parameters"] == {"GREETING": {"source": "default", "value": "hello"}, "TOKEN": {"source": "unset", "value": None}}
    assert receipt["environment"]["path"] == f"{os.path.dirname(os.path.abspath(sys.executable))}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_home_and_tmpdir_are_fresh_on_every_run_even_in_a_work_folder_used_before(tmp_path):
    """A --work folder is the operator's: a `.gitconfig` planted where an earlier run had its HOME would make git
    run `core.fsmonitor` in the steps.  Each run makes new HOME and TMPDIR folders inside it."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "RUNBOOK.md").write_text("# R\n\n## Route `status`: status\n\n```sh\ngit status --porcelain\nprintf '%s\\n' \"$HOME\" \"$TMPDIR\"\n```\n")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    commit(repo, "r")
    data = canonical(make_bundle(repo, release=None, route_id="status", document="docs/RUNBOOK.md"))
    marker = tmp_path / "marker"
    work = tmp_path / "work"
    first = run_bundle(data, "b", RunOptions(clone=repo, work=work, keep_work=True))
    assert first["status"] == "passed"
    home, tmp = (work / "step-001.stdout").read_text().split()
    assert Path(home).parent == work and Path(tmp).parent == work and home != tmp
    hook = f"[core]\n\tfsmonitor = touch {marker}\n"
    for planted in (Path(home), work / "home"):
        planted.mkdir(exist_ok=True)
        (planted / ".gitconfig").write_text(hook)
    second = run_bundle(data, "b", RunOptions(clone=repo, work=work, keep_work=True))
    assert second["status"] == "passed" and not marker.exists()
    again_home, again_tmp = (work / "step-001.stdout").read_text().split()
    assert again_home not in (home, str(work / "home")) and again_tmp != tmp and not any(Path(again_home).iterdir())
    # the probe: git really runs the planted hook with that HOME, so the fresh folder is what kept it away
    subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], env={"PATH": os.environ["PATH"], "HOME": home}, check=True, capture_output=True)
    assert marker.exists()


def test_a_declared_parameter_outside_its_grammar_is_refused_naming_parameter_value_and_grammar(runbook, tmp_path):
    bundle = tmp_path / "session.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "session"))
    marker = tmp_path / "marker"
    for value, shown in ((f"--checkpoint-action=exec=touch {marker}", repr(f"--checkpoint-action=exec=touch {marker}")), ("hi\u202e", "'hi\\u202e'"), ("a\x1b[2Kb", "'a\\x1b[2Kb'")):
        with pytest.raises(UsageError) as caught:
            run_bundle(bundle.read_bytes(), "b", RunOptions(clone=runbook, parameters={"GREETING": value}, work=tmp_path / "work"))
        text = caught.value.render()
        assert caught.value.field == "--set GREETING" and caught.value.found == value, text
        assert "the value of parameter GREETING is not a text" in text and f"found {shown}" in text and "expected printable text on one line" in text, text
        assert not (tmp_path / "work").exists()
    # through the command, from a --parameters file: a clear error naming the file and line, never a traceback
    params = tmp_path / "accept.env"
    params.write_text("# values\nTOKEN=a-b\nGREETING=--version\n")
    result = subprocess.run([sys.executable, "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--parameters", str(params), "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and "error[usage]: --parameters: the value of parameter GREETING is not a text (found '--version'; expected printable text" in result.stderr, result.stderr
    assert not marker.exists() and not (tmp_path / "dist" / "acceptance").exists()


def test_a_nul_or_non_utf8_in_a_parameters_value_is_a_clear_error(runbook, tmp_path):
    bundle = tmp_path / "session.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "session"))
    for content, words, field in (
        (b"GREETING=hi\x00there\n", "the value of GREETING holds a NUL character (found 'hi\\\\0there'", "line 1"),
        (b"# ok\nTOKEN=\xff\n", "is not UTF-8", "line 2"),
        (b"TOKEN\n", "--parameters takes NAME=VALUE", "line 1"),
    ):
        params = tmp_path / "accept.env"
        params.write_bytes(content)
        result = subprocess.run([sys.executable, "-m", "pipeline.stages.accept", "run", str(bundle), "--clone", str(runbook), "--parameters", str(params), "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode in (1, 2) and f"{params}: {field}: {words}" in result.stderr and "Traceback" not in result.stderr, result.stderr
    # a NUL through the API (an argv cannot hold one): refused, not a ValueError of subprocess
    from pipeline.stages.accept import _parameters

    with pytest.raises(UsageError) as caught:
        _parameters([("--set", "GREETING=a\0b")])
    assert "holds a NUL character" in caught.value.render()
    with pytest.raises(UsageError) as caught:
        run_bundle(bundle.read_bytes(), "b", RunOptions(clone=runbook, parameters={"GREETING": "a\0b"}))
    assert caught.value.field == "--set GREETING"


def test_the_release_and_document_path_of_a_bundle_never_leave_dist_or_the_clone(runbook, tmp_path):
    data = bundle_of(runbook, "session")
    outside = tmp_path / "outside"
    head = git(runbook, "rev-parse", "HEAD")

    def cli(bundle: bytes) -> subprocess.CompletedProcess:
        path = tmp_path / "hostile.bundle.json"
        path.write_bytes(bundle)
        return subprocess.run([sys.executable, "-m", "pipeline", "accept", "run", str(path), "--clone", str(runbook), "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)

    release_route = {"kind": "release-route", "candidate_commit": head, "manifest": {"path": "manifests/v1.0.0/manifest.json", "sha256": "0" * 64, "status": "candidate"}}
    for change, field, words in (
        (lambda d: d.update(release=str(outside)), "release", "a runbook bundle names no release"),
        (lambda d: d.update(release_route, release=str(outside)), "release", "is not a product release name"),
        (lambda d: d.update(release_route, release="../x"), "release", "is not a product release name"),
        (lambda d: d.update(release_route, release="v1.0.0/../../x"), "release", "is not a product release name"),
        (lambda d: d["document"].update(path="/etc/passwd"), "document.path", "is not a path inside the clone: it is an absolute path"),
        (lambda d: d["document"].update(path="../../x"), "document.path", "has a '..' segment"),
        (lambda d: d["document"].update(path="docs/../../x"), "document.path", "has a '..' segment"),
    ):
        result = cli(forge(data, change))
        assert result.returncode == 1, (field, result.stderr)
        assert f"error[input]: {tmp_path / 'hostile.bundle.json'}: {field}: " in result.stderr and words in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert not outside.exists() and not (tmp_path / "x").exists() and not (tmp_path / "dist" / "acceptance").exists()
    # A document committed as a symbolic link to a file outside the clone is not read.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(runbook), str(clone)], check=True)
    (clone / "docs" / "LINK.md").symlink_to("/etc/passwd")
    linked = commit(clone, "a link")
    passwd = Path("/etc/passwd").read_bytes()
    forged = forge(data, lambda d: d["document"].update(path="docs/LINK.md", commit=linked, sha256=sha(passwd), bytes=len(passwd)))
    error = refused_run(forged, clone, tmp_path / "work", tmp_path / "marker")
    assert isinstance(error, InputError) and error.field == "document.path" and "is a symbolic link, not a regular file" in error.render()
    # A document commit the clone does not have.
    error = refused_run(forge(data, lambda d: d["document"].update(commit="1" * 40)), runbook, tmp_path / "work", tmp_path / "marker")
    assert isinstance(error, InputError) and error.field == "document.commit" and "does not have the document's commit" in error.render()


def test_a_step_printing_300_mib_keeps_the_runners_memory_bounded(runbook, tmp_path):
    """The output goes to a file and is hashed in chunks: the runner's peak RSS stays far below the output's size."""
    repo = tmp_path / "big"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "RUNBOOK.md").write_text("# R\n\n## Route `big`: a loud step\n\n```sh\ndd if=/dev/zero bs=1048576 count=300 status=none\necho tail-of-stderr >&2\n```\n")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    commit(repo, "big")
    bundle = tmp_path / "big.bundle.json"
    bundle.write_bytes(canonical(make_bundle(repo, release=None, route_id="big", document="docs/RUNBOOK.md")))
    receipt = tmp_path / "receipt.json"
    script = (
        # VmHWM is this process's own high-water mark: ru_maxrss keeps the forking parent's RSS across exec (a large
        # xdist worker read as a runner holding 1.4 GiB)
        "from pipeline.stages.accept import main\n"
        f"code = main(['run', {str(bundle)!r}, '--clone', {str(repo)!r}, '--dist', {str(tmp_path / 'dist')!r}, '--out', {str(receipt)!r}, '--quiet'])\n"
        "peak = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
        "print('PEAK', peak, code)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    _word, peak_kib, code = result.stdout.split()[-3:]
    assert code == "0"
    assert int(peak_kib) < 256 * 1024, f"peak RSS {int(peak_kib) // 1024} MiB"
    step = json.loads(receipt.read_bytes())["steps"][0]
    digest = hashlib.sha256()
    for _ in range(300):
        digest.update(bytes(1 << 20))
    assert step["stdout"] == {"sha256": digest.hexdigest(), "bytes": 300 << 20}
    assert step["stderr"] == {"sha256": sha(b"tail-of-stderr\n"), "bytes": 15}


def test_a_failing_step_shows_the_end_of_its_stderr(runbook, tmp_path):
    bundle = tmp_path / "fails.bundle.json"
    bundle.write_bytes(bundle_of(runbook, "fails"))
    result = subprocess.run([sys.executable, "-m", "pipeline", "accept", "run", str(bundle), "--clone", str(runbook), "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert "the end of step-002.stderr:" in result.stderr and "  | failing now" in result.stderr


# -- bundle: static checks against the candidate manifest --------------------------------------------


@pytest.fixture(scope="module")
def light(tmp_path_factory):
    return light_candidate(tmp_path_factory.mktemp("light"), tmp_path_factory)


def manifest_of(root: Path, release: str) -> dict:
    return json.loads((root / "manifests" / release / "manifest.json").read_bytes())


def with_document(light, tmp_path, document: str, routes: dict[str, str] | None = None):
    """A candidate of the light release whose route document is `document` (committed before the candidate)."""
    from pipeline.formats.lanes import load_lanes
    from pipeline.stages.compose import promote_release, rebind
    from pipeline.util import ui

    root = light.clone(tmp_path / "product", "draft")
    (root / light.document).write_text(document)
    if routes is not None:
        toml = root / "manifests" / light.release / "release.toml"
        text = toml.read_text()
        toml.write_text(text[: text.index("\n[acceptance]")] + acceptance_toml(routes, document=light.document))
        ui.set_quiet(True)
        rebind(root, light.release, lanes=load_lanes(light.lanes_dir))
    commit(root, "document")
    ui.set_quiet(True)
    promote_release(root, light.release, "candidate", lanes_dir=light.lanes_dir)
    ui.set_quiet(False)
    return root, commit(root, "candidate")


STATIC_REFUSALS = [
    ("podman pull ghcr.io/alphastorm/ninfer-runtime:v0.7.0-qwen38-5090-beta.2", "names an image by tag"),
    ("skopeo inspect docker://ghcr.io/alphastorm/ninfer-runtime:stable", "names an image by tag"),
    ("curl -fsSLO https://github.com/can1357/oh-my-pi/releases/latest/download/omp-linux-x64", "latest"),
    ("curl -fsSLO https://example.com/omp-linux-x64", "unpinned URL"),
    ("echo 81f924d440c27261d820c19a9f8d45794c5aee410f8a68bd358133fa8c0375d0", "SHA-256 the manifest does not hold"),
    ("git checkout 0123456789abcdef0123456789abcdef01234567", "commit the manifest does not hold"),
    ("python3 -m pipeline verify --release v9.9.9", "version or tag that differs"),
    ("python3 -m pipeline.stages.accept pinned components.ninfer.oci_reference", "null (not bound yet)"),
    ("python3 -m pipeline.stages.accept pinned components.nonsense", "does not exist"),
    ("curl -o pkg \"$(python3 -m pipeline.stages.accept pinned 'components.ninfer_variants[rtx4090-windows-native].package_url')\"", "without its SHA-256"),
]


@pytest.fixture(scope="module")
def static_candidate(light, tmp_path_factory):
    """One candidate whose document holds a route per refused line (route case-N, the bad line at its line 3)."""
    parts = ["# R\n\n## Route `first`: one\n\n```sh\necho one\n```\n\n## Route `second`: two\n\n```sh\necho two\n```\n"]
    lines = {}
    for number, (line, _words) in enumerate(STATIC_REFUSALS):
        head = sum(part.count("\n") for part in parts)
        parts.append(f"\n## Route `case-{number}`: case {number}\n\n```sh\necho start\n{line}\n```\n")
        lines[number] = head + 6
    root, candidate = with_document(light, tmp_path_factory.mktemp("static"), "".join(parts))
    return root, candidate, lines


@pytest.mark.parametrize(("number", "words"), [(n, w) for n, (_l, w) in enumerate(STATIC_REFUSALS)], ids=[w for _l, w in STATIC_REFUSALS])
def test_bundle_refuses_a_block_that_is_not_pinned_by_the_manifest(light, static_candidate, number, words):
    root, candidate, lines = static_candidate
    with pytest.raises(InputError) as caught:
        make_bundle(root, release=light.release, route_id=f"case-{number}", candidate=candidate, lanes_dir=light.lanes_dir)
    assert words in caught.value.render()
    assert caught.value.file == light.document and caught.value.field == f"line {lines[number]}"
    assert (root / light.document).read_text().split("\n")[lines[number] - 1] == STATIC_REFUSALS[number][0]


def test_bundle_accepts_the_manifest_own_values_and_powershell_51_only(light, tmp_path):
    manifest = manifest_of(light.root, light.release)
    row = next(r for r in manifest["components"]["ninfer_variants"] if r["id"] == "rtx4090-windows-native")
    document = (
        "# R\n\n## Route `first`: one\n\n```sh\n"
        f"echo {row['package_sha256']} {row['release_tag']} {row['package_url']}\n"
        "curl -o pkg \"$(python3 -m pipeline.stages.accept pinned 'components.ninfer_variants[rtx4090-windows-native].package_url')\"\n"
        "python3 -m pipeline.stages.accept pinned 'components.ninfer_variants[rtx4090-windows-native].package_sha256'\n"
        "```\n\n## Route `second`: two\n\n```sh\necho two\n```\n\n"
        "## Route `win`: three\n\n```powershell\n$a = $null\n$b = $a ?? 'fallback'\ncmd1 && cmd2\n```\n"
    )
    root, candidate = with_document(light, tmp_path, document)
    bundle = make_bundle(root, release=light.release, route_id="first", candidate=candidate, lanes_dir=light.lanes_dir)
    assert bundle["checks"]["pinned_fields"] == ["components.ninfer_variants[rtx4090-windows-native].package_sha256", "components.ninfer_variants[rtx4090-windows-native].package_url"]
    assert bundle["candidate_commit"] == candidate and bundle["document"]["commit"] == candidate
    assert bundle["manifest"]["sha256"] == sha(git_bytes(root, candidate, f"manifests/{light.release}/manifest.json"))
    with pytest.raises(InputError) as caught:
        make_bundle(root, release=light.release, route_id="win", candidate=candidate, lanes_dir=light.lanes_dir)
    message = caught.value.render()
    assert "is not Windows PowerShell 5.1" in message and caught.value.field in ("line 21", "line 22")


def git_bytes(root: Path, rev: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(root), "show", f"{rev}:{path}"], capture_output=True, check=True).stdout


def test_bundle_refuses_a_commit_that_is_not_a_candidate(light):
    with pytest.raises(RefusedError) as caught:
        make_bundle(light.root, release=light.release, route_id="first", candidate=light.commits["draft"], lanes_dir=light.lanes_dir)
    assert caught.value.field == "status" and caught.value.found == "draft"


# -- compose: the record, and every refusal --------------------------------------------------------


def run_routes(root: Path, release: str, routes: list[str], tmp_path: Path, lanes_dir: Path, *, candidate: str | None = None, document_at: str | None = None, options: dict | None = None) -> tuple[list[Path], list[Path]]:
    """Bundle and run each route in a fresh clone of the candidate; returns (receipt files, bundle files)."""
    candidate = candidate or git(root, "rev-parse", "HEAD")
    clone = tmp_path / f"clone-{len(list(tmp_path.glob('clone-*')))}"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    git(clone, "checkout", "-q", candidate)
    receipts, bundles = [], []
    for route in routes:
        bundle = make_bundle(root, release=release, route_id=route, candidate=candidate, document_at=document_at, lanes_dir=lanes_dir)
        data = canonical(bundle)
        receipt = run_bundle(data, route, RunOptions(clone=clone, **(options or {})))
        name = f"{route}-{sha(data)[:8]}"
        (tmp_path / f"{name}.bundle.json").write_bytes(data)
        (tmp_path / f"{name}.receipt.json").write_bytes(canonical(receipt))
        receipts.append(tmp_path / f"{name}.receipt.json")
        bundles.append(tmp_path / f"{name}.bundle.json")
    return receipts, bundles


def compose(root, light, receipts, bundles, tmp_path, changes=()):
    return compose_record(root, light.release, receipts, register=Register(tmp_path / "no-dist"), changes=list(changes), bundles=bundles, lanes_dir=light.lanes_dir)


def test_the_receipts_compose_into_the_record_that_moves_the_release_to_ready(light, tmp_path):
    from pipeline.cli import main
    from pipeline.formats.lanes import load_lanes
    from pipeline.formats.release.contract import verify_release
    from pipeline.stages.compose import promote_release, rebind
    from pipeline.util import ui

    root = light.clone(tmp_path / "product")
    receipts, bundles = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)
    dist = tmp_path / "dist"
    args = ["accept", "compose", "--release", light.release, *map(str, receipts), "--root", str(root), "--dist", str(dist), "--lanes-dir", str(light.lanes_dir), "--quiet"]
    args += [item for b in bundles for item in ("--bundle", str(b))]
    assert main(args) == 0
    tree = root / "manifests" / light.release / "acceptance" / "external-installation.json"
    record = json.loads(tree.read_bytes())
    assert tree.read_bytes() == (dist / "acceptance" / light.release / "external-installation.json").read_bytes()
    assert record["status"] == "passed" and record["candidate_commit"] == light.commits["candidate"]
    assert record["routes"] == {"first": "passed", "second": "passed"}
    routes = record["documented_routes"]["routes"]
    assert (routes["first"]["steps"], routes["first"]["steps_run"], [s["index"] for s in routes["first"]["host_only_not_run"]]) == (3, 2, [3])
    assert routes["first"]["receipt_sha256"] == sha(receipts[0].read_bytes()) and routes["second"]["bundle_sha256"] == sha(bundles[1].read_bytes())
    assert (record["documented_routes"]["blocks_total"], record["documented_routes"]["blocks_run"]) == (4, 3)
    assert record["limitations"] == ["route first: 1 of 3 blocks are host-only (gpu) and were not run on host kind linux-x86_64"]
    manifest = manifest_of(root, light.release)
    assert manifest["qualification"]["acceptance"]["sha256"] == sha(tree.read_bytes()) and manifest["qualification"]["external_installation_passed"] is True
    assert Register(dist).query("acceptance-record")[0].attrs == {"release": light.release, "status": "passed"}
    # the same receipts compose into the same bytes
    again = compose(root, light, receipts, bundles, tmp_path)
    assert canonical(again) == tree.read_bytes()
    # ... and the release moves to ready with no hand-made record
    ui.set_quiet(True)
    commit(root, "acceptance bound")
    # the councils' closed reviews of the candidate, which ready needs too
    (root / "manifests" / light.release / "reviews.toml").write_text(review_ledger(manifest, record["candidate_commit"]))
    commit(root, "reviews recorded")
    for step in range(4):
        outcome = rebind(root, light.release, pin="HEAD", lanes=load_lanes(light.lanes_dir))
        commit(root, f"pin {step}")
        if not any(b.startswith("pins:") for b in outcome.blockers):
            break
    promote_release(root, light.release, "ready", lanes_dir=light.lanes_dir)
    ui.set_quiet(False)
    commit(root, "ready")
    report = verify_release(root, light.release, require="ready", check_pins=True, lanes_dir=light.lanes_dir)
    assert report.valid, [p.message() for p in report.problems.items]


def refused(root, light, receipts, bundles, tmp_path, changes=()) -> PipelineError:
    with pytest.raises(PipelineError) as caught:
        compose(root, light, receipts, bundles, tmp_path, changes)
    return caught.value


def tampered(receipt: Path, change) -> Path:
    doc = json.loads(receipt.read_bytes())
    change(doc)
    path = receipt.with_name("tampered-" + receipt.name)
    path.write_bytes(canonical(doc))
    return path


def test_compose_refuses_receipts_that_did_not_run_the_candidates_blocks_exactly(light, tmp_path):
    root = light.clone(tmp_path / "product")
    (first, second), bundles = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)
    other = light.commits["draft"]

    def swap(doc):
        doc["steps"][0], doc["steps"][1] = doc["steps"][1], doc["steps"][0]

    cases = [
        (lambda d: d["clone"].update(commit=other), "clone.commit", "another commit than the candidate"),
        (lambda d: d["document"].update(sha256_in_clone="0" * 64), "document.sha256_in_clone", "the clone's document differs"),
        (swap, "steps", "in order"),
        (lambda d: d["steps"].pop(1), "steps", "in order"),
        (lambda d: d["steps"][1].update(status="not-run", exit_status=None, stdout=None, stderr=None), "steps[1].status", "not a host-only step"),
        (lambda d: d["steps"][0].update(executed_sha256="e" * 64), "steps[0].executed_sha256", "executed bytes differ"),
        (lambda d: d["steps"][0].update(block_sha256="b" * 64), "steps[0].block_sha256", "another block"),
        (lambda d: d["capabilities"]["gpu"].update(available=True), "steps[2].status", "had every capability"),
        (lambda d: d["host"].update(os="darwin"), "host.os", "another kind of host"),
    ]
    for change, field, words in cases:
        error = refused(root, light, [tampered(first, change), second], bundles, tmp_path)
        assert isinstance(error, RefusedError), (field, error)
        assert error.field == field and words in error.render(), (field, error.render())
    error = refused(root, light, [first], bundles, tmp_path)
    assert "required routes have no receipt" in error.render() and error.expected == ["first", "second"]
    error = refused(root, light, [first, second, first], bundles, tmp_path)
    assert "more than one receipt" in error.render()


def test_compose_refuses_a_record_of_anything_but_the_documented_text_and_parameters(light, tmp_path):
    """The issue's case: every block byte-identical, a BASH_ENV parameter ran code, and compose wrote a passed
    record.  Now the bundle, the receipt's parameters and its environment are checked against the document."""
    from pipeline.cli import main

    root = light.clone(tmp_path / "product")
    (first, second), (first_bundle, second_bundle) = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)

    def forged_pair(change_bundle, change_receipt=lambda d: None) -> tuple[Path, Path]:
        data = forge(first_bundle.read_bytes(), change_bundle)
        bundle = tmp_path / f"forged-{sha(data)[:8]}.bundle.json"
        bundle.write_bytes(data)
        steps = json.loads(data)["steps"]

        def change(d):
            d["bundle_sha256"] = sha(data)
            for ran, step in zip(d["steps"], steps, strict=True):
                ran["block_sha256"] = step["sha256"]
                if ran["status"] == "passed":
                    ran["executed_sha256"] = step["sha256"]
            change_receipt(d)

        return tampered(first, change), bundle

    bash_env = {"name": "BASH_ENV", "kind": "path", "default": "/tmp/marker.sh", "required": False}
    tar_options = {"name": "TAR_OPTIONS", "kind": "audit-options", "default": "--jobs 1", "required": False}
    cases = [
        # a replaced block, its hash recomputed in the bundle and the receipt
        (lambda b: b["steps"][1].update(text="touch /tmp/marker\n"), lambda r: None, IntegrityError, "line 15", "step 2 of route first is not the document's block"),
        (lambda b: b["steps"][1].update(text=b["steps"][1]["text"].replace("\n", " \n")), lambda r: None, IntegrityError, "line 15", "is not the document's block"),
        # a parameter the document does not declare, or a changed default
        (lambda b: b["parameters"].append({"name": "EXTRA", "kind": "text", "default": "x", "required": False}), lambda r: None, IntegrityError, "parameters[1].name", "does not declare"),
        (lambda b: b["parameters"][0].update(default="bonjour"), lambda r: None, IntegrityError, "line 4", "parameter GREETING differs"),
        (lambda b: b["parameters"][0].update(kind="path"), lambda r: None, IntegrityError, "line 4", "parameter GREETING differs"),
        # BASH_ENV in the bundle: bash's own variable, refused by name; TAR_OPTIONS: the document does not declare it
        (lambda b: b["parameters"].append(bash_env), lambda r: None, InputError, "parameters[1].name", "cannot be a parameter"),
        (lambda b: b["parameters"].append(tar_options), lambda r: None, IntegrityError, "parameters[1].name", "does not declare"),
        (lambda b: b["parameters"][0].update(default="esc\x1b[2K"), lambda r: None, InputError, "parameters[0].default", "outside its grammar"),
        # the bundle is the document's, the receipt says it ran with more
        (lambda b: None, lambda r: r["environment"]["parameters"].update(EXTRA={"source": "set", "value": "x"}), RefusedError, "environment.parameters", "not those route first declares"),
        (lambda b: None, lambda r: r["environment"]["parameters"].update(BASH_ENV={"source": "set", "value": "$(touch /tmp/marker)"}), InputError, "environment.parameters.BASH_ENV", "cannot be a parameter"),
        (lambda b: None, lambda r: r["environment"]["parameters"].update(TAR_OPTIONS={"source": "set", "value": tar_options["default"]}), RefusedError, "environment.parameters", "not those route first declares"),
        (lambda b: None, lambda r: r["environment"]["parameters"].update(HOME={"source": "set", "value": "/tmp"}), InputError, "environment.parameters.HOME", "cannot be a parameter"),
        (lambda b: None, lambda r: r["environment"]["parameters"]["GREETING"].update(source="set", value="hi\u202e"), RefusedError, "environment.parameters.GREETING.value", "outside the grammar its declaration states"),
        (lambda b: None, lambda r: r["environment"]["variables"].append("BASH_ENV"), RefusedError, "environment.variables", "neither the runner's nor the route's parameters"),
        # a folder before the runner's on PATH (what --path did) decides what every command runs
        (lambda b: None, lambda r: r["environment"].update(path="/tmp/evil-bin:" + r["environment"]["path"]), RefusedError, "environment.path", "the run's PATH is not the runner's own"),
        (lambda b: None, lambda r: r["environment"]["parameters"]["GREETING"].update(value="bonjour"), RefusedError, "environment.parameters.GREETING.value", "a default the document does not declare"),
        (lambda b: None, lambda r: r["environment"].update(shell="powershell"), RefusedError, "environment.shell", "another shell"),
    ]
    for change_bundle, change_receipt, kind, field, words in cases:
        receipt, bundle = forged_pair(change_bundle, change_receipt)
        error = refused(root, light, [receipt, second], [bundle, second_bundle], tmp_path)
        assert isinstance(error, kind) and error.field == field and words in error.render(), (field, error.render())
    # through the command: a non-zero exit and no record
    receipt, bundle = forged_pair(lambda b: b["parameters"].append(bash_env), lambda r: r["environment"]["parameters"].update(BASH_ENV={"source": "default", "value": bash_env["default"]}))
    dist = tmp_path / "dist"
    args = ["accept", "compose", "--release", light.release, str(receipt), str(second), "--bundle", str(bundle), "--bundle", str(second_bundle), "--root", str(root), "--dist", str(dist), "--lanes-dir", str(light.lanes_dir), "--quiet"]
    assert main(args) == 1
    assert not (root / "manifests" / light.release / "acceptance" / "external-installation.json").exists() and not (dist / "acceptance").exists()
    assert compose(root, light, [first, second], [first_bundle, second_bundle], tmp_path)["status"] == "passed"  # the untouched pair still composes


def test_compose_refuses_a_failed_route_naming_its_step_and_exit_status(light, tmp_path):
    root, candidate = with_document(light, tmp_path, LIGHT_DOCUMENT, routes={"first": "linux-x86_64", "third": "linux-x86_64"})
    receipts, bundles = run_routes(root, light.release, ["first", "third"], tmp_path, light.lanes_dir)
    failed = json.loads(receipts[1].read_bytes())
    assert (failed["failed_step"], failed["steps"][1]["exit_status"]) == (2, 3)
    error = refused(root, light, receipts, bundles, tmp_path)
    assert isinstance(error, RefusedError)
    assert "route third failed at step 2 (exit status 3)" in error.render() and error.field == "steps[1].exit_status" and error.found == 3


def test_a_host_only_step_must_run_where_the_host_kind_promises_its_capability(light, tmp_path):
    root, _ = with_document(light, tmp_path, LIGHT_DOCUMENT, routes={"first": "linux-x86_64-nvidia", "second": "linux-x86_64"})
    receipts, bundles = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)
    error = refused(root, light, receipts, bundles, tmp_path)
    assert "requires gpu, which host kind linux-x86_64-nvidia promises" in error.render() and error.field == "steps[2].status"


def test_a_block_edited_after_the_candidate_needs_a_document_change_and_a_rerun(light, tmp_path):
    root = light.clone(tmp_path / "product")
    receipts, bundles = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)
    # Edit one block of route `first` and the prose; commit the document after the candidate.
    text = (root / light.document).read_text()
    (root / light.document).write_text(text.replace("printf 'two\\n'", "printf 'two, edited\\n'").replace("# Sample routes", "# Sample routes (prose edited)"))
    edited = commit(root, "quickstart: edit a block of route first")
    error = refused(root, light, receipts, bundles, tmp_path)
    assert isinstance(error, RefusedError) and "block 2 of route first changed since the candidate (edited) without a document_change" in error.render()
    assert error.field == "line 15"
    # An entry alone is not enough: the changed block must run again.
    error = refused(root, light, receipts, bundles, tmp_path, changes=["first:2=the example output wording"])
    assert "need a re-run from the current document" in error.render()
    # A change entry must name a block that changed.
    rerun, rerun_bundles = run_routes(root, light.release, ["first"], tmp_path, light.lanes_dir, candidate=light.commits["candidate"], document_at=edited)
    with pytest.raises(UsageError) as caught:
        compose(root, light, [rerun[0], receipts[1]], [*bundles, *rerun_bundles], tmp_path, changes=["first:2=wording", "first:1=not changed"])
    assert caught.value.field == "--document-change" and caught.value.found == ["first:1"]
    record = compose(root, light, [rerun[0], receipts[1]], [*bundles, *rerun_bundles], tmp_path, changes=["first:2=the example output wording"])
    (change,) = record["documented_routes"]["document_change"]
    assert (change["route"], change["step"], change["change"], change["why"]) == ("first", "2", "edited", "the example output wording")
    assert change["old_sha256"] != change["new_sha256"] and change["rerun_receipt_sha256"] == sha(rerun[0].read_bytes())
    assert record["documented_routes"]["document"]["sha256_current"] != record["documented_routes"]["document"]["sha256_at_candidate"]
    # a prose-only edit needs nothing
    root2 = light.clone(tmp_path / "product2")
    (root2 / light.document).write_text((root2 / light.document).read_text().replace("# Sample routes", "# Sample routes, reworded"))
    commit(root2, "prose only")
    assert compose(root2, light, receipts, bundles, tmp_path)["documented_routes"]["document_change"] == []


def test_compose_refuses_a_receipt_of_another_document_or_release_state(light, tmp_path):
    root = light.clone(tmp_path / "product")
    receipts, bundles = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)
    # A bundle whose document hash the candidate does not have.
    doc = json.loads(bundles[0].read_bytes())
    doc["document"]["sha256"] = "d" * 64
    forged = tmp_path / "forged.bundle.json"
    forged.write_bytes(canonical(doc))
    receipt = tampered(receipts[0], lambda d: d.update(bundle_sha256=sha(forged.read_bytes())))
    error = refused(root, light, [receipt, receipts[1]], [forged, bundles[1]], tmp_path)
    assert "names another document than its bundle" in error.render() and error.field == "document.sha256"
    receipt = tampered(receipts[0], lambda d: (d.update(bundle_sha256=sha(forged.read_bytes())), d["document"].update(sha256="d" * 64)))
    error = refused(root, light, [receipt, receipts[1]], [forged, bundles[1]], tmp_path)
    assert "does not have the bundle's hash" in error.render() and error.field == "document.sha256"
    # A release that is no longer a candidate.
    draft = light.clone(tmp_path / "draft", "draft")
    error = refused(draft, light, receipts, bundles, tmp_path)
    assert error.field == "status" and error.found == "draft"


def test_a_hand_made_record_is_refused_where_release_toml_requires_documented_routes(light, tmp_path):
    from releasekit import acceptance_record

    from pipeline.stages.compose import accept_release

    root = light.clone(tmp_path / "product")
    record = tmp_path / "hand-made.json"
    record.write_bytes(canonical(acceptance_record(manifest_of(root, light.release), light.commits["candidate"])))
    with pytest.raises(PipelineError) as caught:
        accept_release(root, light.release, record, lanes_dir=light.lanes_dir)
    assert caught.value.field == "documented_routes" and "accept compose" in caught.value.render()


def test_verify_rechecks_the_documented_routes_of_the_bound_record(light, tmp_path):
    from pipeline.formats.release.contract import verify_release
    from pipeline.stages.compose import accept_release

    root = light.clone(tmp_path / "product")
    receipts, bundles = run_routes(root, light.release, ["first", "second"], tmp_path, light.lanes_dir)
    path = tmp_path / "record.json"
    path.write_bytes(canonical(compose(root, light, receipts, bundles, tmp_path)))
    accept_release(root, light.release, path, lanes_dir=light.lanes_dir)
    assert verify_release(root, light.release, lanes_dir=light.lanes_dir).valid
    tree = root / "manifests" / light.release / "acceptance" / "external-installation.json"
    for change, field in (
        (lambda d: d["documented_routes"].update(blocks_run=4), "documented_routes.blocks_total"),
        (lambda d: d["documented_routes"]["routes"]["first"].update(steps_run=3), "documented_routes.routes.first.steps"),
        (lambda d: d["documented_routes"]["document"].update(sha256_at_candidate="a" * 64), "documented_routes.document.sha256_at_candidate"),
        (lambda d: d["routes"].pop("second"), "routes"),
    ):
        doc = json.loads(path.read_bytes())
        change(doc)
        tree.write_bytes(canonical(doc))
        report = verify_release(root, light.release, lanes_dir=light.lanes_dir)
        fields = {p.field for p in report.problems.items if p.check == "acceptance"}
        assert field in fields, (field, [p.message() for p in report.problems.items])
