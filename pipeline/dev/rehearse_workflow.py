"""What the rehearsal reads from a workflow file: its jobs, pinned actions, artifacts and wiring, and the copy act runs.

`python -m pipeline.dev.rehearse` (pipeline/dev/rehearse.py) runs `.github/workflows/release.yml` as committed
with a real Actions runner (act).  This module holds the parts that need no runner:

- `load_workflow`: the file with YAML 1.2's booleans (YAML 1.1 would read the key `on` as True);
- `pinned_actions`: every `uses:` of the file, each one of the four JavaScript actions the kit stands in
  for, pinned by a full commit SHA; anything else is refused (it could not be fetched here);
- `rehearsal_copy`: the copy act runs and the list of its mechanical substitutions (a job's `container:`
  dropped; a Windows job whose artifacts are supplied instead of built), and `unlisted_changes`, which
  compares the copy with the file key by key so that nothing else can differ;
- `wiring_problems`: every downloaded artifact has exactly one producer, every produced artifact is
  consumed or a declared deliverable, every `needs.X.outputs.Y` names a job the job needs and an output
  X sets, and each job's permissions are the least its steps use.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import InputError

# The JavaScript actions the workflows pin, each replaced by the composite stand-in of tests/kits/actions/<name>/.
STANDIN_ACTIONS = ("actions/checkout", "actions/setup-python", "actions/upload-artifact", "actions/download-artifact")
USES = re.compile(r"^(?P<action>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@(?P<sha>[0-9a-f]{40})$")
NEEDS_OUTPUT = re.compile(r"\$\{\{\s*needs\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)\s*\}\}")
MATRIX_VALUE = re.compile(r"\$\{\{\s*matrix\.([A-Za-z0-9_-]+)\s*\}\}")
# Artifacts a release run leaves for people rather than for a later job: each with the reason it exists.
DELIVERABLES = {
    "release-status": "the status page a release engineer reads when a job failed",
    "release-tree": "the rebuilt release tree, for a reviewer to compare with the committed one",
    "cut-ledger-*": "each lane's cut ledger after publication, committed back to the repository by a person",
}
# What each write permission is for, recognised from the job's run: lines (the least privilege rule).
WRITE_USES = {
    "id-token": re.compile(r"python -m pipeline sign\b"),
    "packages": re.compile(r"python -m pipeline push\b"),
    "contents": re.compile(r"python -m pipeline publish --release\b"),
}
# The keys of a job whose change the rehearsal never makes (the issue: never a run: step, needs, if, env or output).
FROZEN_JOB_KEYS = ("needs", "if", "env", "outputs", "permissions", "strategy", "environment", "timeout-minutes", "defaults")


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 booleans: only true/false (so `on:` stays the key "on")."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


class _Dumper(yaml.SafeDumper):
    """Block scalars for scripts, so the copy act runs reads like the file it copies."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _text)


def load_workflow(path: Path) -> dict[str, Any]:
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass
    except (OSError, yaml.YAMLError) as problem:
        raise InputError(f"{path}: cannot read the workflow: {problem}", fix="fix the YAML (actionlint names the line)") from None
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), dict):
        raise InputError(f"{path}: a workflow is a mapping with `jobs:`; found {type(document).__name__}",
                               fix="point the rehearsal at a GitHub Actions workflow file")
    return document


def dump_workflow(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)


def job_steps(document: dict[str, Any]):
    for job_id, job in document["jobs"].items():
        for index, step in enumerate(job.get("steps") or []):
            yield job_id, index, step


def pinned_actions(*documents: dict[str, Any]) -> dict[str, str]:
    """action -> the one SHA every `uses:` of these workflows pins it at; anything the kit cannot stand in for is refused."""
    pins: dict[str, str] = {}
    for document in documents:
        for job_id, index, step in job_steps(document):
            uses = step.get("uses")
            if uses is None:
                continue
            match = USES.match(str(uses))
            if match is None or match["action"] not in STANDIN_ACTIONS:
                raise InputError(
                    f"job {job_id}, step {index + 1}: uses {uses!r}; the rehearsal stands in only for "
                    f"{', '.join(STANDIN_ACTIONS)} pinned by a full commit SHA",
                    fix="pin the action by its 40-hex commit, or add a stand-in for it to tests/kits/actions/")
            known = pins.setdefault(match["action"], match["sha"])
            if known != match["sha"]:
                raise InputError(f"{match['action']} is pinned at two commits ({known} and {match['sha']})",
                                       fix="pin one commit of each action throughout the workflows")
    return pins


@dataclass(frozen=True)
class Substitution:
    job: str
    key: str  # the job key the copy changes
    what: str
    why: str

    def line(self) -> str:
        return f"{self.job}: {self.what} ({self.why})"


def _upload_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for step in job.get("steps") or [] if str(step.get("uses", "")).startswith("actions/upload-artifact@")]


def _supply_step(job_id: str, job: dict[str, Any], supply: Path) -> dict[str, Any]:
    """Copy each path an upload step of the job names from the supply folder (the paths read from the file, never typed)."""
    lines = []
    for step in _upload_steps(job):
        for path in str((step.get("with") or {}).get("path", "")).splitlines():
            path = path.strip().rstrip("/")
            if path:
                lines.append(f'mkdir -p "$(dirname "{path}")" && cp -R "$SUPPLY/{path}" "{path}"')
    if not lines:  # nothing another job reads: the job is not run, and the run's log says so
        return {"name": f"rehearsal: {job_id} not run (no {job.get('runs-on')} runner here; it uploads nothing)", "shell": "bash",
                "run": f"echo \"::warning::{job_id} was not run by the rehearsal: no {job.get('runs-on')} runner in host mode\"\n"}
    return {"name": f"rehearsal: supply {job_id}'s upload paths from {supply}", "shell": "bash",
            "env": {"SUPPLY": str(supply)},
            "run": "set -eu\ntest -d \"$SUPPLY\" || { echo \"::error::no supply folder $SUPPLY (rehearse --supply DIR)\"; exit 1; }\n" + "\n".join(lines) + "\n"}


def rehearsal_copy(document: dict[str, Any], supply: Path) -> tuple[dict[str, Any], list[Substitution]]:
    """The copy act runs in host mode, and every change it makes (each one listed, nothing else changed)."""
    rehearsed = copy.deepcopy(document)
    changes: list[Substitution] = []
    for job_id, job in rehearsed["jobs"].items():
        if "container" in job:
            image = job["container"]["image"] if isinstance(job["container"], dict) else job["container"]
            del job["container"]
            changes.append(Substitution(job_id, "container", f"container {image} dropped",
                                        "act's host mode has no Docker API; the host is that container's distribution release"))
        runs_on = str(job.get("runs-on", ""))
        if runs_on.startswith("windows-"):
            if supply is None:
                raise InputError(f"job {job_id} runs on {runs_on}, which host mode cannot run",
                                       fix="pass --supply DIR with the Windows build's upload paths (the mingw --prebuilt fixture)")
            job["steps"] = [_supply_step(job_id, job, supply), *_upload_steps(job)]
            job["runs-on"] = "ubuntu-latest"
            changes.append(Substitution(job_id, "runs-on", f"runs-on {runs_on} -> ubuntu-latest", "host mode cannot run a Windows runner"))
            if _upload_steps(document["jobs"][job_id]):
                what = "supplied instead of run: its upload paths copied from the supply folder, then its own upload-artifact steps as written"
            else:
                what = "not run (it uploads nothing another job reads): one step that says so in the run's log"
            changes.append(Substitution(job_id, "steps", what, "no Windows runner here"))
    return rehearsed, changes


def unlisted_changes(original: dict[str, Any], rehearsed: dict[str, Any], changes: list[Substitution]) -> list[str]:
    """Every difference between the file and the copy that no listed substitution accounts for (none is allowed)."""
    listed = {(change.job, change.key) for change in changes}
    problems = [f"top-level {key}" for key in set(original) | set(rehearsed)
                if key != "jobs" and original.get(key) != rehearsed.get(key)]
    if set(original["jobs"]) != set(rehearsed["jobs"]):
        problems.append(f"jobs {sorted(set(original['jobs']) ^ set(rehearsed['jobs']))}")
    for job_id, job in original["jobs"].items():
        other = rehearsed["jobs"].get(job_id, {})
        for key in set(job) | set(other):
            if job.get(key) != other.get(key) and (job_id, key) not in listed:
                problems.append(f"{job_id}.{key}")
        for key in FROZEN_JOB_KEYS:
            if job.get(key) != other.get(key):
                problems.append(f"{job_id}.{key} (never changed by a substitution)")
        kept = {str(step.get("with", {}).get("name")) for step in _upload_steps(other)}
        if {str(step.get("with", {}).get("name")) for step in _upload_steps(job)} != kept:
            problems.append(f"{job_id}: artifact names")
    return sorted(set(problems))


def _matrix_values(job: dict[str, Any], text: str) -> list[str]:
    """A name with `${{ matrix.K }}` expanded over the job's matrix (one value per row)."""
    found = MATRIX_VALUE.search(text)
    if found is None:
        return [text]
    values = ((job.get("strategy") or {}).get("matrix") or {}).get(found.group(1))
    if not isinstance(values, list):
        return [text]
    return [MATRIX_VALUE.sub(str(value), text) for value in values]


def artifacts(document: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(artifact -> the jobs uploading it, artifact -> the jobs downloading it), matrix names expanded."""
    produced: dict[str, list[str]] = {}
    consumed: dict[str, list[str]] = {}
    for job_id, _index, step in job_steps(document):
        uses = str(step.get("uses", ""))
        name = str((step.get("with") or {}).get("name", ""))
        job = document["jobs"][job_id]
        if uses.startswith("actions/upload-artifact@"):
            for value in _matrix_values(job, name or "artifact"):
                produced.setdefault(value, []).append(job_id)
        elif uses.startswith("actions/download-artifact@"):
            for value in _matrix_values(job, name):
                consumed.setdefault(value, []).append(job_id)
    return produced, consumed


def _is_deliverable(name: str, deliverables: dict[str, str]) -> bool:
    return any(re.fullmatch(re.escape(pattern).replace(r"\*", ".+"), name) for pattern in deliverables)


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _output_problems(document: dict[str, Any]) -> list[str]:
    problems = []
    jobs = document["jobs"]
    for job_id, job in jobs.items():
        text = yaml.safe_dump(job, sort_keys=True)
        for producer, output in sorted(set(NEEDS_OUTPUT.findall(text))):
            if producer not in _needs(job):
                problems.append(f"{job_id} reads needs.{producer}.outputs.{output} but does not need {producer}")
            elif output not in (jobs.get(producer, {}).get("outputs") or {}):
                problems.append(f"{job_id} reads needs.{producer}.outputs.{output}, an output {producer} does not set")
    return problems


def _permission_problems(document: dict[str, Any]) -> list[str]:
    problems = [] if document.get("permissions") == {} else ["the workflow's top-level permissions are not {}"]
    for job_id, job in document["jobs"].items():
        scripts = "\n".join(str(step.get("run", "")) for step in job.get("steps") or [])
        permissions = job.get("permissions")
        if not isinstance(permissions, dict):
            problems.append(f"{job_id} does not declare its permissions")
            continue
        for scope, level in permissions.items():
            rule = WRITE_USES.get(scope)
            if level == "write" and (rule is None or not rule.search(scripts)):
                problems.append(f"{job_id} has {scope}: write, which none of its steps uses")
            elif level not in ("read", "none", "write"):
                problems.append(f"{job_id} has {scope}: {level}")
        for scope, rule in WRITE_USES.items():
            if rule.search(scripts) and permissions.get(scope) != "write":
                problems.append(f"{job_id} runs `{rule.pattern}` without {scope}: write")
    return problems


def wiring_problems(document: dict[str, Any], deliverables: dict[str, str] | None = None) -> list[str]:
    """The wiring release.yml must hold for a run to get anywhere: each a sentence naming the job and the artifact."""
    deliverables = DELIVERABLES if deliverables is None else deliverables
    produced, consumed = artifacts(document)
    problems = []
    for name, readers in sorted(consumed.items()):
        writers = produced.get(name, [])
        if not writers:
            problems.append(f"artifact {name}, downloaded by {', '.join(sorted(set(readers)))}, has no producer (no upload-artifact names it)")
        elif len(writers) > 1:
            problems.append(f"artifact {name} has {len(writers)} producers ({', '.join(writers)}); a download needs exactly one")
        for reader in readers:
            if writers and not _upstream(document, reader, set(writers)):
                problems.append(f"artifact {name}: {reader} downloads it but does not (transitively) need {', '.join(writers)}")
    for name, writers in sorted(produced.items()):
        if name not in consumed and not _is_deliverable(name, deliverables):
            problems.append(f"artifact {name}, uploaded by {', '.join(writers)}, is neither downloaded nor a declared deliverable")
    return problems + _output_problems(document) + _permission_problems(document)


def planned_jobs(document: dict[str, Any], job: str | None) -> set[str]:
    """The jobs act runs for `--job JOB` (JOB and everything it needs, transitively) or for the whole workflow."""
    if job is None:
        return set(document["jobs"])
    if job not in document["jobs"]:
        raise InputError(f"the workflow has no job {job!r}", expected=", ".join(document["jobs"]), fix="name one of its jobs")
    planned, todo = set(), [job]
    while todo:
        current = todo.pop()
        if current not in planned:
            planned.add(current)
            todo.extend(_needs(document["jobs"][current]))
    return planned


def _upstream(document: dict[str, Any], job_id: str, wanted: set[str]) -> bool:
    seen: set[str] = set()
    todo = _needs(document["jobs"][job_id])
    while todo:
        current = todo.pop()
        if current in wanted:
            return True
        if current not in seen and current in document["jobs"]:
            seen.add(current)
            todo.extend(_needs(document["jobs"][current]))
    return False
