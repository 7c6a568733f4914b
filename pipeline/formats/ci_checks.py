"""CI at an exact commit: GitHub's check runs and combined status, the required-checks declaration, the gate rule.

Three documents, one owner:

- GitHub's check-runs answer (`GET /repos/{o}/{r}/commits/{sha}/check-runs?filter=all`, paginated:
  `{"total_count", "check_runs": [{"id", "name", "head_sha", "status", "conclusion", "html_url",
  "started_at", "app": {"slug"}}]}`) and the combined status (`GET /repos/{o}/{r}/commits/{sha}/status`,
  paginated: `{"state", "sha", "total_count", "statuses": [{"context", "state", "target_url"}]}`), parsed
  into the frozen `CiState`: every page bounded and shape-checked, an answer in another shape a
  `RemoteError` naming the endpoint and the field, never guessed at.
- The product repository's declaration of its required checks, `.github/required-checks.toml`
  (`schema_version = 1`, `required_checks = ["name", ...]`), read from the exact commit being published.
  (A runtime lane declares its own in `[source] required_checks`, read by `formats/lanes.py` with
  `check_names` below.)
- The `ci` block a publication plan binds (`observed.ci`) and its receipt copies: `CiState.to_json()` of the
  required names only, so a check re-run or finishing between the dry run and the apply changes the plan's
  observed state and `github-unchanged` refuses.

The gate (`refusals`, `require_green`): every required name must be reported at exactly the commit and
concluded `success`.  A name needs a check run of that `name` posted by the app `REQUIRED_APP` (`github-actions`:
anyone with `checks: write` can post a run of any name, so a run of another app never counts; where it is the only
run of the name the refusal names it).  A commit status whose `context` is the name does not satisfy it alone, but
where present it must be `success` too.  Of the name's runs by that app the latest counts -- the highest id (GitHub
numbers runs in creation order; a re-run is a new run) -- and it must be `completed` with conclusion `success`;
`neutral`, `skipped`, `stale`, `failure`, `cancelled`, `timed_out`, `action_required`, `startup_failure`, or
any status other than `completed` (queued, in_progress, waiting, requested, pending) is refused.  A run of the name
whose `head_sha` is not the commit, anywhere in the answer, is refused (a check of a parent or a branch says nothing
about this commit, and an answer mixing commits is not this commit's CI).  A
status context must be `success` (`pending`, `failure`, `error` refused).  A name without a run by the app is
missing; the refusal lists the names GitHub did report at the commit.  Both answers' `total_count` must equal what
their pages held.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pipeline.errors import InputError, RefusedError, RemoteError, quoted
from pipeline.util.hashing import is_commit_hex
from pipeline.util.jsonio import loads_toml

REQUIRED_CHECKS_FILE = ".github/required-checks.toml"
REQUIRED_APP = "github-actions"  # the app whose check runs a required name counts (anyone with checks: write can post a run of any name)
MAX_REPORTED_SHOWN = 20  # the names reported at a commit that a "missing" refusal lists
MAX_REQUIRED = 50
MAX_NAME = 200
MAX_URL = 2000
MAX_RUNS = 5000  # all pages together: far more than one commit's CI
RUN_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
CONCLUSIONS = ("success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required", "stale", "startup_failure")
STATUS_STATES = ("success", "pending", "failure", "error")
COMBINED_STATES = ("success", "pending", "failure", "error")
_NAME_RE = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


@dataclass(frozen=True)
class CheckRun:
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    html_url: str | None
    app: str | None  # the app's slug, e.g. github-actions

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "head_sha": self.head_sha, "status": self.status, "conclusion": self.conclusion, "html_url": self.html_url, "app": self.app}


@dataclass(frozen=True)
class CommitStatus:
    context: str
    state: str
    target_url: str | None

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context, "state": self.state, "target_url": self.target_url}


@dataclass(frozen=True)
class CiState:
    """What GitHub reports for one commit: every check run and the latest status of every context."""

    repository: str
    sha: str
    check_runs: tuple[CheckRun, ...]
    statuses: tuple[CommitStatus, ...]
    complete: bool = True  # False: a recorded block, which keeps only the required names' runs and statuses

    def latest(self, name: str) -> CheckRun | None:
        """The run of `name` that counts: the highest id (a re-run is a new, later run) among the runs the required
        app (`REQUIRED_APP`) posted; a run of the same name posted by another app never counts."""
        runs = [r for r in self.check_runs if r.name == name and r.app == REQUIRED_APP]
        return max(runs, key=lambda r: r.id) if runs else None

    def other_apps(self, name: str) -> list[CheckRun]:
        """The runs of `name` posted by another app than `REQUIRED_APP` (ignored by the gate, named in its refusal)."""
        return [r for r in self.check_runs if r.name == name and r.app != REQUIRED_APP]

    def reported_names(self) -> list[str]:
        """Every check run name and status context reported at the commit, sorted."""
        return sorted({r.name for r in self.check_runs} | {s.context for s in self.statuses})

    def status(self, context: str) -> CommitStatus | None:
        return next((s for s in self.statuses if s.context == context), None)

    def for_names(self, names: tuple[str, ...]) -> CiState:
        """Only what the required names are reported by: what a plan binds."""
        wanted = set(names)
        return CiState(self.repository, self.sha, tuple(r for r in self.check_runs if r.name in wanted), tuple(s for s in self.statuses if s.context in wanted), complete=False)

    def to_json(self, required: tuple[str, ...]) -> dict[str, Any]:
        mine = self.for_names(required)
        return {
            "repository": self.repository,
            "sha": self.sha,
            "required": sorted(required),
            "check_runs": [r.to_json() for r in sorted(mine.check_runs, key=lambda r: (r.name, r.id))],
            "statuses": [s.to_json() for s in sorted(mine.statuses, key=lambda s: s.context)],
        }


# -- required names ----------------------------------------------------------------------

def check_names(value: Any, *, file: str, field: str) -> tuple[str, ...]:
    """A declaration's list of required check names: a non-empty list of distinct, printable names."""
    fix = 'list the exact GitHub Actions job (check run) names, e.g. required_checks = ["build", "test"]'
    if not isinstance(value, list) or not value or len(value) > MAX_REQUIRED:
        raise InputError("is not a list of required check names", file=file, field=field, found=value if not isinstance(value, list) else f"{len(value)} names",
                         expected=f"1..{MAX_REQUIRED} names", why="a publication is gated on the CI these name at its exact commit", fix=fix)
    for index, name in enumerate(value):
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name != name.strip():
            raise InputError("is not a check name", file=file, field=f"{field}[{index}]", found=name, expected=f"1..{MAX_NAME} printable characters, no surrounding spaces", fix=fix)
    if len(set(value)) != len(value):
        raise InputError("names a check twice", file=file, field=field, found=value, fix=fix)
    return tuple(value)


def read_required_checks(data: bytes | None, *, source: str) -> tuple[str, ...]:
    """The product repository's `.github/required-checks.toml` at a commit (None: the commit holds none)."""
    fix = f'add {REQUIRED_CHECKS_FILE} with schema_version = 1 and required_checks = ["<job name>", ...] and commit it'
    if data is None:
        raise RefusedError(f"the commit declares no required checks ({REQUIRED_CHECKS_FILE})", file=source,
                           why="a product release is published only when the checks its repository requires passed at exactly the tagged commit", fix=fix)
    doc = loads_toml(data, source=source, max_bytes=64 * 1024)
    if set(doc) != {"schema_version", "required_checks"} or doc.get("schema_version") != 1:
        raise InputError("is not a required-checks declaration of schema 1", file=source, found=sorted(doc), expected="schema_version = 1 and required_checks", fix=fix)
    return check_names(doc["required_checks"], file=source, field="required_checks")


# -- GitHub's answers --------------------------------------------------------------------------

def _shape_error(endpoint: str, field: str, found: Any, expected: str) -> RemoteError:
    shown = found if isinstance(found, (int, str, type(None))) else type(found).__name__
    return RemoteError(f"{endpoint}: GitHub answered a {field} in another shape than its documented one", field=field, found=str(shown)[:120], expected=expected,
                       why="an answer in another shape than GitHub's documented one is not guessed at", fix="run again; if it persists, check GitHub's status")


def _text(value: Any, endpoint: str, field: str, *, limit: int = MAX_NAME, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > limit or not _NAME_RE.fullmatch(value[:MAX_NAME]):
        raise _shape_error(endpoint, field, value, f"a string of 1..{limit} printable characters" + (" or null" if optional else ""))
    return value


def _url(value: Any, endpoint: str, field: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_URL or not re.fullmatch(r"https?://[^\s\x00-\x1f\x7f]+", value):
        raise _shape_error(endpoint, field, value, "an http(s) URL or null")
    return value


def _check_run(entry: Any, endpoint: str, where: str) -> CheckRun:
    if not isinstance(entry, dict):
        raise _shape_error(endpoint, where, entry, "an object")
    run_id = entry.get("id")
    if not isinstance(run_id, int) or isinstance(run_id, bool) or run_id <= 0:
        raise _shape_error(endpoint, f"{where}.id", run_id, "a positive integer")
    head = entry.get("head_sha")
    if not is_commit_hex(head):
        raise _shape_error(endpoint, f"{where}.head_sha", head, "a 40-hex commit")
    status = entry.get("status")
    if status not in RUN_STATUSES:
        raise _shape_error(endpoint, f"{where}.status", status, " | ".join(RUN_STATUSES))
    conclusion = entry.get("conclusion")
    if conclusion is not None and conclusion not in CONCLUSIONS:
        raise _shape_error(endpoint, f"{where}.conclusion", conclusion, " | ".join(CONCLUSIONS) + " or null")
    app = entry.get("app")
    slug = app.get("slug") if isinstance(app, dict) else app  # GitHub's {"slug", ...}; a recorded block keeps the slug
    slug = _text(slug, endpoint, f"{where}.app.slug", optional=True)
    return CheckRun(run_id, str(_text(entry.get("name"), endpoint, f"{where}.name")), head, status, conclusion, _url(entry.get("html_url"), endpoint, f"{where}.html_url"), slug)


def parse_check_runs(pages: list[Any], *, endpoint: str) -> tuple[CheckRun, ...]:
    """Every page of the check-runs answer -> its runs; `total_count` must agree with what the pages held."""
    runs: list[CheckRun] = []
    totals = set()
    for number, page in enumerate(pages, 1):
        if not isinstance(page, dict) or not isinstance(page.get("check_runs"), list):
            raise _shape_error(endpoint, f"page {number}", page, "an object with check_runs[]")
        total = page.get("total_count")
        if not isinstance(total, int) or isinstance(total, bool) or total < 0:
            raise _shape_error(endpoint, f"page {number} total_count", total, "a count")
        totals.add(total)
        runs += [_check_run(entry, endpoint, f"check_runs[{len(runs) + i}]") for i, entry in enumerate(page["check_runs"])]
        if len(runs) > MAX_RUNS:
            raise RemoteError(f"{endpoint}: more than {MAX_RUNS} check runs", why="far more than one commit's CI")
    if len(totals) > 1 or (totals and len(runs) != totals.pop()):
        raise RemoteError(f"{endpoint}: the pages held {len(runs)} check runs, but GitHub's total_count says otherwise", field="total_count",
                          why="runs were added while the pages were read, or a page was lost", fix="run again")
    if len({r.id for r in runs}) != len(runs):
        raise RemoteError(f"{endpoint}: GitHub listed a check run twice", field="check_runs", why="runs were added while the pages were read", fix="run again")
    return tuple(runs)


def parse_statuses(pages: list[Any], *, endpoint: str, sha: str) -> tuple[CommitStatus, ...]:
    """Every page of the combined-status answer -> the latest status of each context, at exactly `sha`;
    `total_count` must agree with what the pages held (as for check runs: a truncated or lying answer is refused)."""
    statuses: dict[str, CommitStatus] = {}
    totals, read = set(), 0
    for number, page in enumerate(pages, 1):
        if not isinstance(page, dict) or not isinstance(page.get("statuses"), list):
            raise _shape_error(endpoint, f"page {number}", page, "an object with statuses[]")
        if page.get("sha") != sha:
            raise RemoteError(f"{endpoint}: GitHub answered the combined status of another commit", field="sha", found=str(page.get("sha"))[:80], expected=sha,
                              why="only the statuses of exactly this commit count")
        if page.get("state") not in COMBINED_STATES:
            raise _shape_error(endpoint, "state", page.get("state"), " | ".join(COMBINED_STATES))
        total = page.get("total_count")
        if not isinstance(total, int) or isinstance(total, bool) or total < 0:
            raise _shape_error(endpoint, f"page {number} total_count", total, "a count")
        totals.add(total)
        read += len(page["statuses"])
        for index, entry in enumerate(page["statuses"]):
            where = f"statuses[{index}]"
            if not isinstance(entry, dict):
                raise _shape_error(endpoint, where, entry, "an object")
            context = str(_text(entry.get("context"), endpoint, f"{where}.context"))
            if entry.get("state") not in STATUS_STATES:
                raise _shape_error(endpoint, f"{where}.state", entry.get("state"), " | ".join(STATUS_STATES))
            statuses.setdefault(context, CommitStatus(context, entry["state"], _url(entry.get("target_url"), endpoint, f"{where}.target_url")))  # newest first
        if len(statuses) > MAX_RUNS:
            raise RemoteError(f"{endpoint}: more than {MAX_RUNS} status contexts", why="far more than one commit's CI")
    if len(totals) > 1 or (totals and read != totals.pop()):
        raise RemoteError(f"{endpoint}: the pages held {read} statuses, but GitHub's total_count says otherwise", field="total_count",
                          why="statuses were added while the pages were read, or a page was lost", fix="run again")
    return tuple(statuses.values())


# -- the gate ------------------------------------------------------------------------------------

MISSING = "missing"  # how a refusal of a name GitHub did not report (by the required app) begins


def read_ci_state(github: Any, sha: str) -> CiState:
    """The check runs and the combined status of exactly `sha`, read through the GitHub client (infra/github.py:
    `check_run_pages`, `status_pages`: GitHub's answers as sent) and parsed here, runs first."""
    pages, endpoint = github.check_run_pages(sha)
    runs = parse_check_runs(pages, endpoint=endpoint)
    pages, endpoint = github.status_pages(sha)
    statuses = parse_statuses(pages, endpoint=endpoint, sha=sha)
    return CiState(github.repository, sha, runs, statuses)


def refusals(state: CiState, required: tuple[str, ...]) -> list[tuple[str, str, str | None]]:
    """(name, what was found, URL) for every required name that is not `success` at exactly `state.sha`: a name
    needs a check run posted by `REQUIRED_APP` whose latest run succeeded; a commit status of the same context,
    where present, must succeed too (a status alone, or another app's run, does not satisfy the name)."""
    found: list[tuple[str, str, str | None]] = []
    for name in required:
        run, status = state.latest(name), state.status(name)
        foreign = next((r for r in state.check_runs if r.name == name and r.head_sha != state.sha), None)
        if foreign is not None:  # the endpoint lists one commit's runs: a run of another commit in it is not this commit's CI
            found.append((name, f"run {foreign.id} is of the commit {foreign.head_sha}, not this one", foreign.html_url))
        elif run is None:
            found.append((name, _missing(state, name, status), None))
        elif run.status != "completed":
            found.append((name, f"run {run.id} is {run.status}", run.html_url))
        elif run.conclusion != "success":
            found.append((name, f"run {run.id} concluded {run.conclusion}", run.html_url))
        if status is not None and status.state != "success":
            found.append((name, f"its commit status is {status.state}", status.target_url))
    return found


def _missing(state: CiState, name: str, status: CommitStatus | None) -> str:
    """Why `name` has no run that counts: another app's runs, a status only, or nothing of that name at all."""
    others = state.other_apps(name)
    if others:
        latest = max(others, key=lambda r: r.id)
        app = quoted(latest.app) if latest.app else "no app"
        return f"{MISSING}: no check run by {REQUIRED_APP} at this commit; run {latest.id} of that name is posted by {app}, not {REQUIRED_APP}"
    if status is not None:
        return f"{MISSING}: no check run by {REQUIRED_APP} at this commit, only a commit status of that context (a status alone does not count)"
    if not state.complete:
        return f"{MISSING}: no check run or status of that name is reported at this commit (the record keeps only the required names)"
    names = state.reported_names()
    shown = ", ".join(quoted(n, 80) for n in names[:MAX_REPORTED_SHOWN]) + (f" (and {len(names) - MAX_REPORTED_SHOWN} more)" if len(names) > MAX_REPORTED_SHOWN else "")
    return f"{MISSING}: no check run or status of that name is reported at this commit; " + (f"GitHub reported: {shown}" if names else "GitHub reported no checks at all")


def require_green(state: CiState, required: tuple[str, ...], *, declared_in: str) -> str:
    """The gate: a one-line summary when every required check succeeded at `state.sha`, else a RefusedError
    naming the first failing check, its URL and its conclusion (and how many more)."""
    if not required:
        raise RefusedError("no required checks are declared", file=declared_in, why="a publication is gated on CI at its exact commit", fix="declare the required checks")
    bad = refusals(state, required)
    if bad:
        name, what, url = bad[0]
        more = f" (and {len(bad) - 1} more: {', '.join(n for n, _w, _u in bad[1:])})" if len(bad) > 1 else ""
        raise RefusedError(
            f"CI of {state.repository} at {state.sha} is not green: the required check {name!r} {what}" + (f", {url}" if url else "") + more,
            file=declared_in,
            field=name,
            found=what,
            expected=f"a run by {REQUIRED_APP} completed with conclusion success at exactly this commit",
            why="only a commit whose every required check passed at exactly that commit is published (not a branch, not a parent)",
            fix=(f"correct the declaration to the name the check run has (a typo, a matrix job's suffix such as 'test (ubuntu-latest)', a workflow "
                 f"not triggered on push), or push the commit so its CI runs at {state.sha[:12]}, then run the dry run again") if what.startswith(MISSING) else
                f"fix the failure and re-run the check on {state.sha[:12]} (or cut a commit whose CI passed), then run the dry run again",
        )
    ids = ", ".join(f"{n} #{run.id}" for n in required if (run := state.latest(n)) is not None)  # every name has its run here
    return f"{len(required)} required checks succeeded at {state.sha[:12]} ({ids})"


def from_recorded(value: Any, *, file: str, field: str) -> tuple[CiState, tuple[str, ...]]:
    """A `ci` block a plan or receipt binds, checked (`check_recorded`) and read back: (the state, the required names)."""
    check_recorded(value, file=file, field=field)
    endpoint = f"{file} {field}"
    runs = parse_check_runs([{"total_count": len(value["check_runs"]), "check_runs": value["check_runs"]}], endpoint=endpoint)
    statuses = parse_statuses([{"sha": value["sha"], "state": "pending", "total_count": len(value["statuses"]), "statuses": value["statuses"]}], endpoint=endpoint, sha=value["sha"])
    return CiState(value["repository"], value["sha"], runs, statuses, complete=False), tuple(value["required"])


def changes(reviewed: Any, now: Any) -> list[str]:
    """How the CI a reviewed plan saw differs from what GitHub reports now, per required name (the run that counts)."""
    if reviewed == now:
        return []
    if not isinstance(reviewed, dict) or not isinstance(now, dict):
        return [f"the CI at the commit was {'not recorded' if reviewed is None else 'recorded'} by the reviewed plan and is {'unknown' if now is None else 'reported'} now"]
    then_state, required = from_recorded(reviewed, file="the reviewed plan", field="observed.ci")
    now_state, _ = from_recorded(now, file="GitHub's answer", field="ci")
    found = []
    for name in sorted(set(required) | set(now.get("required") or [])):
        old, new = then_state.latest(name), now_state.latest(name)
        if old != new:
            was = f"run {old.id} {old.status}/{old.conclusion}" if old else "no run"
            found.append(f"the check {name!r} at {now_state.sha[:12]} is now " + (f"run {new.id} {new.status}/{new.conclusion}" if new else "absent") + f"; the reviewed plan saw {was}")
        if then_state.status(name) != now_state.status(name):
            found.append(f"the commit status {name!r} is now {getattr(now_state.status(name), 'state', 'absent')}; the reviewed plan saw {getattr(then_state.status(name), 'state', 'none')}")
    return found or [f"the CI reported at {now_state.sha[:12]} changed since the reviewed plan (a run was added or re-run)"]


def summary(value: Any, *, file: str, field: str) -> str:
    """One line of a recorded `ci` block, for people: the commit and the run (or status) that counts per required name."""
    state, required = from_recorded(value, file=file, field=field)
    parts = []
    for name in required:
        run, status = state.latest(name), state.status(name)
        text = f"{name} #{run.id} {run.conclusion or run.status}" if run else f"{name} missing"
        parts.append(text + (f" (status {status.state})" if status else ""))
    verdict = "green" if not refusals(state, required) else "NOT green"
    return f"{verdict} at {state.sha[:12]}: " + ", ".join(parts)


def check_recorded(value: Any, *, file: str, field: str) -> None:
    """The shape of a `ci` block a plan or receipt binds (`CiState.to_json`)."""
    keys = {"repository", "sha", "required", "check_runs", "statuses"}
    if not isinstance(value, dict) or set(value) != keys or not is_commit_hex(value.get("sha")) or not isinstance(value.get("repository"), str):
        raise InputError("is not a recorded CI state", file=file, field=field, found=sorted(value) if isinstance(value, dict) else type(value).__name__, expected=sorted(keys))
    check_names(value["required"], file=file, field=f"{field}.required")
    try:
        parse_check_runs([{"total_count": len(value["check_runs"]) if isinstance(value["check_runs"], list) else -1, "check_runs": value["check_runs"]}], endpoint=f"{file} {field}")
        if not isinstance(value["statuses"], list):
            raise InputError("is not a list", file=file, field=f"{field}.statuses")
        parse_statuses([{"sha": value["sha"], "state": "pending", "total_count": len(value["statuses"]), "statuses": value["statuses"]}], endpoint=f"{file} {field}", sha=value["sha"])
    except RemoteError as exc:
        raise InputError(f"is not a recorded CI state: {exc.what}", file=file, field=exc.field or field) from None
