"""A loopback stand-in for GitHub's REST API: everything `cut` and `publish` touch.

It keeps GitHub's observable behaviour (../shared/reference/publication-anchors.md §1):
releases with drafts that get-by-tag never returns (404) and that only a
listing with push access shows; a second published release for a tag refused
with 422 `already_exists` on `tag_name`, while a second *draft* for the same tag
is accepted (as GitHub does, which is how duplicate drafts happen); assets
uploaded to an uploads path with `?name=`, `Content-Type` and `Content-Length`
required, carrying `state`, `size` and `digest` (`sha256:…`), a duplicate name
answered 422 `already_exists` on `name`, and special characters renamed; git
refs for tags (`Reference already exists` on a second create; read without a token, as
GitHub serves a public repository's `git/ref/tags/…` and `git/tags/…`); pagination
with a `link` header (`per_page` default 30, max 100); rate-limit headers on
every answer and 403 secondary limits with `retry-after`; immutable releases
(once published, assets cannot be added or deleted: 422 "Cannot upload assets
to an immutable release", and the tag cannot move); a token without the
workflow scope answered 404 on a write whose commit changes
`.github/workflows/`; request ids in `x-github-request-id`; an asset renamed by
`PATCH` (special characters renamed as on upload); a published release made a
draft again when it is not immutable (422 when it is).

It answers for the token in hand: a `Token(permissions={...})` is an Actions
`github.token` or a fine-grained token carrying exactly those permissions (and
`metadata: read`); an endpoint it may not use answers GitHub's 403 body
`Resource not accessible by integration` (`_PERMISSIONS`: the immutable-releases
setting needs `administration: read`, which no Actions job can be given).
`workflow_job_permissions` reads a job's `permissions:` from a workflow file and
`documented_token_permissions` a secret's declared permissions from the docs, so
tests never type them a second time.

Fault switches (`StandIn.faults`), each consumed when it fires:
`upload_502_starter` (a 502 mid-upload that leaves an empty `starter` asset),
`upload_reset_after_landing` (the upload lands, then the connection is reset
before any answer), `secondary_limit` (403 with `retry-after`, request not
applied), `publish_5xx` (5xx on the publish call, applied or not),
`primary_limit` (n answers 403 with `x-ratelimit-remaining: 0` until
`x-ratelimit-reset`), `hang_on_write` (the k-th write is applied or not, then
the answer is held until the client is killed: kill -9 tests), `rename_upload`
({requested name: stored name}: GitHub keeps the upload under another name),
`rename_asset` (the same for an asset's rename by PATCH),
`reject_release` (the next create-release answers 422 with these `errors[]`,
each with its `message`, as GitHub's custom validation errors do),
`enable_immutable_after_publish` (the repository switches immutable releases on
right after the next publish: that release stays mutable, as on GitHub), and
`malformed` ({path: body}: GETs of that path answer 200 with that body, e.g. a release
without an id, a list of strings, a ref as a list, assets as numbers), and
`on_write` (a callable run before the k-th write, e.g. a stranger adding a draft
or an asset between the dry run and the apply's first write), and `ci_rerun_after_read`
((name, conclusion): right after the next check-runs answer, the check is re-run and the new
run concludes so: a re-run that flips between a dry run and its apply).

CI at a commit (`GET …/commits/{sha}/check-runs`, `checks: read`; `GET …/commits/{sha}/status`,
`statuses: read`) in GitHub's documented shapes: check runs newest first, `filter=latest` (the
default: the latest run per name) or `all`, `check_name`, `total_count`, paginated by `per_page`/`page`
with a `link` header; the combined status keeps the latest status per context and its `state` is
`failure` when any is failure/error, `pending` when any is pending or there is none, else `success`.
Tests arrange CI with `add_check_run` (a failing run, a pending one, a re-run: a second run of the
same name, a check on a parent commit only: a run added to the parent), `add_status` and `pass_checks`
(every named check green at a commit: the kit helper that tests which publish or cut seed).  `secondary_limit`
takes `retry-after` as seconds or as an HTTP date.  Tests arrange a second draft for
a tag, a tag that points elsewhere, or a scope-less token through the state
methods (`add_release`, `set_ref`, `tokens`).

The server binds 127.0.0.1, stops by itself after `lifetime` seconds and
after `max_requests` requests.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

DOCS = "https://docs.github.com/rest"
SECONDARY = ("You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
             "If you reach out to GitHub Support for help, please include the request ID {rid}.")


@dataclass
class Asset:
    id: int
    release_id: int
    name: str
    label: str | None
    content_type: str
    state: str  # "starter" | "open" | "uploaded"
    data: bytes = b""
    created_at: str = ""

    @property
    def size(self) -> int:
        return len(self.data) if self.state == "uploaded" else 0

    @property
    def digest(self) -> str | None:
        return "sha256:" + hashlib.sha256(self.data).hexdigest() if self.state == "uploaded" else None


@dataclass
class Release:
    id: int
    tag_name: str
    target_commitish: str
    name: str | None
    body: str | None
    draft: bool
    prerelease: bool
    make_latest: str
    created_at: str
    published_at: str | None = None
    immutable: bool = False
    asset_ids: list[int] = field(default_factory=list)


LEVELS = {"none": 0, "read": 1, "write": 2}


@dataclass
class Token:
    """A token and what it may do.  `permissions=None` is a broad classic token (its `scopes`, `push`);
    `permissions={name: "read" | "write"}` is a token that carries exactly those permissions, named as a
    workflow's `permissions:` or a fine-grained token's repository permissions name them (`contents`,
    `actions`, `administration`, `workflows`, ...): an Actions `github.token` or a fine-grained token.  Such a
    token always has `metadata: read` (GitHub grants it to every one), never reports `x-oauth-scopes`, and an
    endpoint it may not use answers GitHub's 403 `Resource not accessible by integration`."""

    scopes: tuple[str, ...] = ("repo", "workflow")
    push: bool = True
    classic: bool = True  # classic tokens report x-oauth-scopes; installation tokens do not
    permissions: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.permissions is not None:
            unknown = {k: v for k, v in self.permissions.items() if v not in LEVELS}
            assert not unknown, f"a permission is read, write or none: {unknown}"
            self.permissions = {"metadata": "read", **self.permissions}
            self.push = self.permissions.get("contents") == "write"
            self.classic = False

    def may(self, permission: str, level: str) -> bool:
        if self.permissions is None:
            return True
        return LEVELS[self.permissions.get(permission, "none")] >= LEVELS[level]

    def may_change_workflows(self) -> bool:
        """A write on a commit that changes .github/workflows/ needs the classic `workflow` scope, or the
        `workflows: write` permission (which an Actions `github.token` can never carry)."""
        if self.permissions is not None:
            return self.may("workflows", "write")
        return "workflow" in self.scopes


def workflow_job_permissions(workflow: Path, job: str) -> dict[str, str]:
    """A job's `permissions:` as the workflow file declares them (the job's own, else the workflow's), so a test
    gives the stand-in's token exactly what `github.token` carries in that job; never typed a second time."""
    import yaml

    doc = yaml.safe_load(workflow.read_text(encoding="utf-8"))
    declared = doc["jobs"][job].get("permissions", doc.get("permissions"))
    if declared is None or isinstance(declared, str):  # read-all / write-all / the repository default: not what a job here declares
        raise AssertionError(f"{workflow.name} job {job} declares no explicit permissions map: {declared!r}")
    return {str(k): str(v) for k, v in declared.items()}


def documented_token_permissions(document: Path, secret: str) -> dict[str, str]:
    """The permissions a document declares for a secret's fine-grained token, from its one line
    "`SECRET` carries exactly `{name: level, ...}`" (docs/cuts-and-publication.md)."""
    found = re.findall(rf"`{re.escape(secret)}` carries exactly `\{{([^}}]*)\}}`", document.read_text(encoding="utf-8"))
    if len(found) != 1:
        raise AssertionError(f"{document.name} must declare {secret}'s permissions exactly once, found {len(found)}")
    pairs = [item.split(":") for item in found[0].split(",") if item.strip()]
    return {name.strip(): level.strip() for name, level in pairs}


def declared_checks(root: Path, commit: str) -> tuple[str, ...]:
    """The checks a product commit's `.github/required-checks.toml` requires, read by its owner as `publish --release` reads them."""
    import subprocess

    from pipeline.formats.ci_checks import REQUIRED_CHECKS_FILE, read_required_checks

    shown = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{REQUIRED_CHECKS_FILE}"], capture_output=True, check=False)
    return read_required_checks(shown.stdout if shown.returncode == 0 else None, source=f"{commit}:{REQUIRED_CHECKS_FILE}")


class FakeClock:
    """The GitHub client's injected clock for tests: waits are recorded and advance the time, nothing sleeps."""

    def __init__(self) -> None:
        self.t = 1_900_000_000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


class _Reset(Exception):
    """Drop the connection with a TCP reset instead of answering."""


class _Hold(Exception):
    """Keep the connection open, unanswered, until the client goes away."""


class StandIn:
    def __init__(self, repository: str = "alphastorm/ninfer", *, rate_limit: int = 5000, lifetime: float = 600.0, max_requests: int = 50_000) -> None:
        self.repository = repository
        self.tokens: dict[str, Token] = {}
        self.commits: dict[str, list[str]] = {}  # sha -> files it changes
        self.refs: dict[str, str] = {}  # tag -> commit
        self.releases: dict[int, Release] = {}
        self.assets: dict[int, Asset] = {}
        self.check_runs: dict[str, list[dict[str, Any]]] = {}  # sha -> runs, in creation order
        self.statuses: dict[str, list[dict[str, Any]]] = {}  # sha -> statuses, in creation order
        self.immutable_enabled = False
        self.latest_id: int | None = None
        self.faults: dict[str, Any] = {}
        self.rate_limit = rate_limit
        self.remaining = rate_limit
        self.reset_at = 1_900_000_000
        self.log: list[tuple[str, str, int]] = []  # (method, path, status)
        self.writes = 0
        self.lifetime = lifetime
        self.max_requests = max_requests
        self.hold_event = threading.Event()
        self._lock = threading.RLock()
        self._ids = itertools.count(1001)
        self._requests = itertools.count(1)
        self._times = itertools.count(0)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._release_holds = threading.Event()

    # -- life ------------------------------------------------------------------
    def __enter__(self) -> StandIn:
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._release_holds.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            server, self._server = self._server, None
            threading.Thread(target=server.shutdown, daemon=True).start()
            server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def uploads(self) -> str:
        return self.url + "/uploads"

    def env(self, token: str) -> dict[str, str]:
        return {"PIPELINE_GITHUB_API": self.url, "PIPELINE_GITHUB_UPLOADS": self.uploads, "GITHUB_TOKEN": token}

    # -- state the tests arrange ---------------------------------------------------
    def add_commit(self, sha: str, files: list[str] | None = None) -> None:
        with self._lock:
            self.commits[sha] = list(files or ["README.md"])

    def set_ref(self, tag: str, sha: str) -> None:
        with self._lock:
            self.refs[tag] = sha

    def add_release(self, tag: str, *, draft: bool = True, prerelease: bool = True, target: str = "main", name: str | None = None) -> Release:
        with self._lock:
            release = Release(next(self._ids), tag, target, name or tag, "", draft, prerelease, "false", self._time())
            if not draft:
                release.published_at = self._time()
                release.immutable = self.immutable_enabled
            self.releases[release.id] = release
            return release

    def add_asset(self, release: Release, name: str, data: bytes, *, state: str = "uploaded", content_type: str = "application/octet-stream") -> Asset:
        with self._lock:
            asset = Asset(next(self._ids), release.id, name, None, content_type, state, data if state == "uploaded" else b"", self._time())
            self.assets[asset.id] = asset
            release.asset_ids.append(asset.id)
            return asset

    def add_check_run(self, sha: str, name: str, *, conclusion: str | None = "success", status: str = "completed", app: str = "github-actions") -> dict[str, Any]:
        """A check run of `name` at `sha` (a re-run is simply a later run of the same name: a higher id)."""
        with self._lock:
            run_id = next(self._ids)
            started = self._time()
            run = {
                "id": run_id, "name": name, "node_id": f"CR_{run_id}", "head_sha": sha, "external_id": "",
                "url": f"{self.url}/repos/{self.repository}/check-runs/{run_id}",
                "html_url": f"https://github.com/{self.repository}/actions/runs/{run_id}/job/{run_id}",
                "details_url": f"https://github.com/{self.repository}/actions/runs/{run_id}/job/{run_id}",
                "status": status, "conclusion": conclusion if status == "completed" else None,
                "started_at": started, "completed_at": self._time() if status == "completed" else None,
                "output": {"title": None, "summary": None, "text": None, "annotations_count": 0, "annotations_url": ""},
                "check_suite": {"id": 1}, "app": {"id": 15368, "slug": app, "name": "GitHub Actions" if app == "github-actions" else app},
                "pull_requests": [],
            }
            self.check_runs.setdefault(sha, []).append(run)
            return run

    def add_status(self, sha: str, context: str, state: str = "success", target_url: str | None = None) -> dict[str, Any]:
        with self._lock:
            status_id = next(self._ids)
            status = {"url": f"{self.url}/repos/{self.repository}/statuses/{sha}", "avatar_url": None, "id": status_id, "node_id": f"SC_{status_id}",
                      "state": state, "description": f"{context} {state}", "target_url": target_url or f"https://ci.example.org/{context}/{status_id}",
                      "context": context, "created_at": self._time(), "updated_at": self._time()}
            self.statuses.setdefault(sha, []).append(status)
            return status

    def pass_checks(self, sha: str, names: tuple[str, ...] | list[str]) -> None:
        """Every named check concluded `success` at exactly `sha`: what a test that cuts or publishes seeds (a name whose
        latest run there already succeeded gets no new run, so seeding twice changes nothing)."""
        for name in names:
            runs = [r for r in self.check_runs.get(sha, []) if r["name"] == name]
            if not runs or runs[-1]["conclusion"] != "success":
                self.add_check_run(sha, name)

    def releases_for(self, tag: str) -> list[Release]:
        return [r for r in self.releases.values() if r.tag_name == tag]

    def assets_of(self, release: Release) -> list[Asset]:
        return [self.assets[i] for i in release.asset_ids if i in self.assets]

    def _time(self) -> str:
        seconds = next(self._times)
        return f"2026-11-10T{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"

    # -- JSON shapes -------------------------------------------------------------------
    def release_json(self, release: Release) -> dict[str, Any]:
        base = f"{self.url}/repos/{self.repository}/releases/{release.id}"
        return {
            "url": base,
            "html_url": f"{self.url}/{self.repository}/releases/tag/{quote(release.tag_name)}",
            "assets_url": base + "/assets",
            "upload_url": f"{self.uploads}/repos/{self.repository}/releases/{release.id}/assets{{?name,label}}",
            "tarball_url": f"{self.url}/repos/{self.repository}/tarball/{quote(release.tag_name)}",
            "zipball_url": f"{self.url}/repos/{self.repository}/zipball/{quote(release.tag_name)}",
            "id": release.id,
            "node_id": f"RE_{release.id}",
            "tag_name": release.tag_name,
            "target_commitish": release.target_commitish,
            "name": release.name,
            "body": release.body,
            "draft": release.draft,
            "prerelease": release.prerelease,
            "immutable": release.immutable,
            "created_at": release.created_at,
            "published_at": release.published_at,
            "author": {"login": "release-bot", "id": 1},
            "assets": [self.asset_json(a) for a in self.assets_of(release)],
        }

    def asset_json(self, asset: Asset) -> dict[str, Any]:
        release = self.releases[asset.release_id]
        return {
            "url": f"{self.url}/repos/{self.repository}/releases/assets/{asset.id}",
            "browser_download_url": f"{self.url}/{self.repository}/releases/download/{quote(release.tag_name)}/{quote(asset.name)}",
            "id": asset.id,
            "node_id": f"RA_{asset.id}",
            "name": asset.name,
            "label": asset.label,
            "state": asset.state,
            "content_type": asset.content_type,
            "size": asset.size,
            "digest": asset.digest,
            "download_count": 0,
            "created_at": asset.created_at,
            "updated_at": asset.created_at,
            "uploader": {"login": "release-bot", "id": 1},
        }


def _validation(resource: str, field_name: str, code: str = "already_exists") -> dict[str, Any]:
    return {"message": "Validation Failed", "errors": [{"resource": resource, "code": code, "field": field_name}], "documentation_url": f"{DOCS}/releases/releases#create-a-release", "status": "422"}


def forbidden(documentation_url: str) -> dict[str, Any]:
    """GitHub's answer to a token that may not use an endpoint (an Actions `github.token` or a fine-grained token
    without the permission): 403 with exactly these three keys."""
    return {"message": "Resource not accessible by integration", "documentation_url": documentation_url, "status": "403"}


CHECK_RUNS_DOCS = f"{DOCS}/checks/runs#list-check-runs-for-a-git-reference"
COMBINED_STATUS_DOCS = f"{DOCS}/commits/statuses#get-the-combined-status-for-a-specific-reference"
IMMUTABLE_RELEASES_DOCS = f"{DOCS}/repos/repos#check-if-immutable-releases-are-enabled-for-a-repository"

# (method, path under /repos/{owner}/{repo}) -> the permission and level GitHub's REST reference names for it, and its page.
# `metadata: read` covers the repository itself; every release, tag and commit endpoint is `contents`; the
# immutable-releases setting is `administration: read` ("admin read access to the repository").
_PERMISSIONS: tuple[tuple[str, str, str, str, str], ...] = (
    ("GET", r"", "metadata", "read", f"{DOCS}/repos/repos#get-a-repository"),
    ("GET", r"/immutable-releases", "administration", "read", IMMUTABLE_RELEASES_DOCS),
    ("GET", r"/commits/[^/]+", "contents", "read", f"{DOCS}/commits/commits#get-a-commit"),
    ("GET", r"/commits/[^/]+/check-runs", "checks", "read", CHECK_RUNS_DOCS),
    ("GET", r"/commits/[^/]+/status", "statuses", "read", COMBINED_STATUS_DOCS),
    ("GET", r"/git/(ref/tags/.+|matching-refs/tags/.*|tags/[^/]+)", "contents", "read", f"{DOCS}/git/refs#get-a-reference"),
    ("POST", r"/git/refs", "contents", "write", f"{DOCS}/git/refs#create-a-reference"),
    ("GET", r"/releases(/latest|/tags/.+|/\d+|/\d+/assets|/assets/\d+)?", "contents", "read", f"{DOCS}/releases/releases#list-releases"),
    ("POST", r"/releases", "contents", "write", f"{DOCS}/releases/releases#create-a-release"),
    ("PATCH", r"/releases/\d+", "contents", "write", f"{DOCS}/releases/releases#update-a-release"),
    ("PATCH", r"/releases/assets/\d+", "contents", "write", f"{DOCS}/releases/assets#update-a-release-asset"),
    ("DELETE", r"/releases/assets/\d+", "contents", "write", f"{DOCS}/releases/assets#delete-a-release-asset"),
)


def _permission_for(method: str, path: str, repo: str) -> tuple[str, str, str] | None:
    """What a permission-carrying token needs for this request; None for what needs none (/rate_limit, downloads)."""
    if path.startswith(f"/uploads{repo}/releases/"):
        return ("contents", "write", f"{DOCS}/releases/assets#upload-a-release-asset")
    if not path.startswith(repo):
        return None
    rest = path[len(repo):]
    for verb, pattern, permission, level, docs in _PERMISSIONS:
        if verb == method and re.fullmatch(pattern, rest):
            return (permission, level, docs)
    return ("contents", "write" if method != "GET" else "read", DOCS)  # anything else under the repository


def _not_found() -> dict[str, Any]:
    return {"message": "Not Found", "documentation_url": DOCS, "status": "404"}


class _Handler(BaseHTTPRequestHandler):
    standin: StandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: Any) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, payload: Any = None, *, headers: dict[str, str] | None = None, raw: bytes | None = None, content_type: str = "application/json; charset=utf-8") -> None:
        s = self.standin
        if getattr(self, "mute", False):  # a held write: applied, but its answer never leaves
            s.log.append((self.command, self.path.split("?", 1)[0], status))
            return
        data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-github-request-id", self.request_id)
        self.send_header("x-ratelimit-limit", str(s.rate_limit))
        self.send_header("x-ratelimit-remaining", str(max(0, s.remaining)))
        self.send_header("x-ratelimit-reset", str(s.reset_at))
        self.send_header("x-ratelimit-used", str(s.rate_limit - max(0, s.remaining)))
        self.send_header("x-ratelimit-resource", "core")
        token = s.tokens.get(self.token or "")
        if token is not None and token.classic:
            self.send_header("x-oauth-scopes", ", ".join(token.scopes))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        s.log.append((self.command, self.path.split("?", 1)[0], status))

    def _reset(self) -> None:
        self.standin.log.append((self.command, self.path.split("?", 1)[0], 0))
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _dispatch(self) -> None:
        s = self.standin
        number = next(s._requests)
        self.request_id = f"STANDIN:{number:06d}"
        if number > s.max_requests:
            self._send(503, {"message": "stand-in request budget spent"})
            self.close_connection = True
            return
        auth = self.headers.get("Authorization", "")
        self.token = auth.split(" ", 1)[1] if auth.lower().startswith(("bearer ", "token ")) else None
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = unquote(url.path)
        body = self._body() if self.command in ("POST", "PATCH", "PUT") else b""
        try:
            with s._lock:
                s.remaining -= 1
                self._route(path, body)
        except _Reset:
            self._reset()
        except _Hold:
            s.hold_event.set()
            s._release_holds.wait(s.lifetime)
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _dispatch

    # -- routing -----------------------------------------------------------------------
    def _route(self, path: str, body: bytes) -> None:
        s = self.standin
        repo = f"/repos/{s.repository}"
        download = re.fullmatch(rf"/{re.escape(s.repository)}/releases/download/([^/]+)/([^/]+)", path)
        if download and self.command == "GET":
            return self._download(download.group(1), download.group(2))
        malformed = s.faults.get("malformed", {})
        if self.command == "GET" and path in malformed:  # an answer in another shape than GitHub's (kept until removed)
            return self._send(200, malformed[path])
        if path == "/rate_limit" and self.command == "GET":
            core = {"limit": s.rate_limit, "remaining": max(0, s.remaining), "reset": s.reset_at, "used": s.rate_limit - max(0, s.remaining), "resource": "core"}
            return self._send(200, {"resources": {"core": core}, "rate": core})
        token = s.tokens.get(self.token or "")
        if s.faults.get("primary_limit"):  # the hourly budget is spent: every call is refused until the reset
            s.faults["primary_limit"] -= 1
            s.remaining = 0
            return self._send(403, {"message": f"API rate limit exceeded for installation ID 1. If you reach out to GitHub Support for help, please include the request ID {self.request_id}.",
                                    "documentation_url": f"{DOCS}/using-the-rest-api/rate-limits-for-the-rest-api", "status": "403"})
        if token is None and self.command == "GET" and re.fullmatch(rf"{re.escape(repo)}/git/(ref/tags/.+|tags/[0-9a-f]{{40}})", path):
            token = Token(scopes=(), push=False, classic=False)  # a public repository's tags: GitHub answers them without a token
        if token is None:
            return self._send(401, {"message": "Bad credentials", "documentation_url": DOCS, "status": "401"})
        needed = _permission_for(self.command, path, repo)
        if needed is not None and not token.may(needed[0], needed[1]):
            return self._send(403, forbidden(needed[2]))
        write = self.command != "GET"
        if write and self._secondary_limit():
            return
        if write:
            s.writes += 1
            stranger = s.faults.get("on_write")
            if stranger is not None and stranger[0] == s.writes:
                s.faults.pop("on_write")
                stranger[1](s)
        hang = s.faults.get("hang_on_write")
        hold = write and hang is not None and s.writes == hang[0]
        if hold and not hang[1]:  # killed before the write reaches GitHub
            s.faults.pop("hang_on_write")
            raise _Hold
        self.mute = hold
        uploads = f"/uploads{repo}/releases/"
        if path.startswith(uploads):
            match = re.fullmatch(r"(\d+)/assets", path[len(uploads):])
            if not match or self.command != "POST":
                return self._send(404, _not_found())
            self._upload(int(match.group(1)), body, token)
        elif not path.startswith(repo):
            return self._send(404, _not_found())
        else:
            self._repo_route(path[len(repo):], body, token)
        if hold:
            s.faults.pop("hang_on_write")
            raise _Hold

    def _secondary_limit(self) -> bool:
        s = self.standin
        fault = s.faults.get("secondary_limit")
        if not fault:
            return False
        count, retry_after = fault
        if count <= 1:
            s.faults.pop("secondary_limit")
        else:
            s.faults["secondary_limit"] = (count - 1, retry_after)
        headers = {"retry-after": str(retry_after)} if retry_after is not None else None
        self._send(403, {"message": SECONDARY.format(rid=self.request_id), "documentation_url": f"{DOCS}/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits", "status": "403"}, headers=headers)
        return True

    def _repo_route(self, rest: str, body: bytes, token: Token) -> None:
        s = self.standin
        method = self.command
        if rest == "" and method == "GET":
            return self._send(200, {"full_name": s.repository, "name": s.repository.split("/")[1], "private": False,
                                    "default_branch": "main", "permissions": {"admin": False, "push": token.push, "pull": True}})
        if rest == "/immutable-releases" and method == "GET":
            return self._send(200, {"enabled": True, "enforced_by_owner": False}) if s.immutable_enabled else self._send(404, _not_found())
        match = re.fullmatch(r"/commits/([^/]+)", rest)
        if match and method == "GET":
            sha = match.group(1)
            if sha not in s.commits:
                return self._send(422, {"message": f"No commit found for SHA: {sha}", "documentation_url": DOCS, "status": "422"})
            return self._send(200, {"sha": sha, "files": [{"filename": f, "status": "modified"} for f in s.commits[sha]]})
        match = re.fullmatch(r"/commits/([^/]+)/(check-runs|status)", rest)
        if match and method == "GET":
            return self._ci(match.group(1), match.group(2), rest)
        match = re.fullmatch(r"/git/ref/tags/(.+)", rest)
        if match and method == "GET":
            tag = match.group(1)
            if tag not in s.refs:
                return self._send(404, _not_found())
            return self._send(200, {"ref": f"refs/tags/{tag}", "node_id": "REF", "object": {"type": "commit", "sha": s.refs[tag]}})
        match = re.fullmatch(r"/git/matching-refs/tags/(.*)", rest)
        if match and method == "GET":
            items = [{"ref": f"refs/tags/{t}", "object": {"type": "commit", "sha": sha}} for t, sha in sorted(s.refs.items()) if t.startswith(match.group(1))]
            return self._page(items, f"/repos/{s.repository}{rest}")
        if rest == "/git/refs" and method == "POST":
            return self._create_ref(json.loads(body or b"{}"), token)
        if rest == "/releases" and method == "GET":
            items = [s.release_json(r) for r in sorted(s.releases.values(), key=lambda r: -r.id) if token.push or not r.draft]
            return self._page(items, f"/repos/{s.repository}/releases")
        if rest == "/releases" and method == "POST":
            return self._create_release(json.loads(body or b"{}"), token)
        if rest == "/releases/latest" and method == "GET":
            release = s.releases.get(s.latest_id or -1)
            return self._send(200, s.release_json(release)) if release else self._send(404, _not_found())
        match = re.fullmatch(r"/releases/tags/(.+)", rest)
        if match and method == "GET":
            published = [r for r in s.releases_for(match.group(1)) if not r.draft]
            return self._send(200, s.release_json(published[0])) if published else self._send(404, _not_found())
        match = re.fullmatch(r"/releases/(\d+)", rest)
        if match:
            release = s.releases.get(int(match.group(1)))
            if release is None or (release.draft and not token.push):
                return self._send(404, _not_found())
            if method == "GET":
                return self._send(200, s.release_json(release))
            if method == "PATCH":
                return self._update_release(release, json.loads(body or b"{}"), token)
        match = re.fullmatch(r"/releases/(\d+)/assets", rest)
        if match and method == "GET":
            release = s.releases.get(int(match.group(1)))
            if release is None:
                return self._send(404, _not_found())
            return self._page([s.asset_json(a) for a in s.assets_of(release)], f"/repos/{s.repository}{rest}")
        match = re.fullmatch(r"/releases/assets/(\d+)", rest)
        if match:
            asset = s.assets.get(int(match.group(1)))
            if asset is None:
                return self._send(404, _not_found())
            if method == "GET":
                return self._send(200, s.asset_json(asset))
            if method == "PATCH":  # "update a release asset": its name (special characters renamed, as on upload) or label
                release = s.releases[asset.release_id]
                if release.immutable and not release.draft:
                    return self._send(422, {"message": "Cannot modify an asset of an immutable release.", "documentation_url": DOCS, "status": "422"})
                if not token.push:
                    return self._send(403, forbidden(f"{DOCS}/releases/assets#update-a-release-asset"))
                data = json.loads(body or b"{}")
                if "name" in data:
                    name = re.sub(r"[^A-Za-z0-9._+-]", ".", str(data["name"]))
                    name = s.faults.get("rename_asset", {}).get(name, name)
                    if any(a.name == name and a.id != asset.id for a in s.assets_of(release)):
                        return self._send(422, _validation("ReleaseAsset", "name"))
                    asset.name = name
                if "label" in data:
                    asset.label = data["label"]
                return self._send(200, s.asset_json(asset))
            if method == "DELETE":
                release = s.releases[asset.release_id]
                if release.immutable and not release.draft:
                    return self._send(422, {"message": "Cannot delete asset from an immutable release.", "documentation_url": DOCS, "status": "422"})
                if not token.push:
                    return self._send(403, forbidden(f"{DOCS}/releases/releases"))
                del s.assets[asset.id]
                release.asset_ids.remove(asset.id)
                return self._send(204)
        return self._send(404, _not_found())

    def _ci(self, sha: str, what: str, rest: str) -> None:
        s = self.standin
        if sha not in s.commits and sha not in s.check_runs and sha not in s.statuses:
            return self._send(422, {"message": f"No commit found for SHA: {sha}", "documentation_url": DOCS, "status": "422"})
        if what == "check-runs":
            runs = sorted(s.check_runs.get(sha, []), key=lambda r: -r["id"])  # newest first
            if self.query.get("filter", "latest") == "latest":
                seen: set[str] = set()
                runs = [r for r in runs if not (r["name"] in seen or seen.add(r["name"]))]
            if "check_name" in self.query:
                runs = [r for r in runs if r["name"] == self.query["check_name"]]
            self._page(runs, f"/repos/{s.repository}{rest}", wrap=lambda chunk: {"total_count": len(runs), "check_runs": chunk})
            fault = s.faults.pop("ci_rerun_after_read", None)
            if fault is not None:  # the check is re-run right after this answer left
                s.add_check_run(sha, fault[0], conclusion=fault[1])
            return None
        latest: dict[str, dict[str, Any]] = {}
        for status in sorted(s.statuses.get(sha, []), key=lambda x: -x["id"]):
            latest.setdefault(status["context"], status)
        states = {x["state"] for x in latest.values()}
        combined = "failure" if states & {"failure", "error"} else ("pending" if not states or "pending" in states else "success")
        items = list(latest.values())
        return self._page(items, f"/repos/{s.repository}{rest}", wrap=lambda chunk: {
            "state": combined, "statuses": chunk, "sha": sha, "total_count": len(items),
            "repository": {"full_name": s.repository}, "commit_url": f"{s.url}/repos/{s.repository}/commits/{sha}", "url": f"{s.url}/repos/{s.repository}{rest}"})

    def _page(self, items: list[Any], path: str, *, wrap: Any = None) -> None:
        per_page = min(100, max(1, int(self.query.get("per_page", 30))))
        page = max(1, int(self.query.get("page", 1)))
        chunk = items[(page - 1) * per_page: page * per_page]
        links = []
        kept = "".join(f"&{k}={quote(v, safe='')}" for k, v in sorted(self.query.items()) if k not in ("per_page", "page"))  # GitHub's links keep the query
        last = max(1, -(-len(items) // per_page))
        if page < last:
            links.append(f'<{self.standin.url}{path}?per_page={per_page}&page={page + 1}{kept}>; rel="next"')
            links.append(f'<{self.standin.url}{path}?per_page={per_page}&page={last}{kept}>; rel="last"')
        self._send(200, wrap(chunk) if wrap is not None else chunk, headers={"link": ", ".join(links)} if links else None)

    def _needs_workflow_scope(self, sha: str | None, token: Token) -> bool:
        files = self.standin.commits.get(sha or "", [])
        return not token.may_change_workflows() and any(f.startswith(".github/workflows/") for f in files)

    def _create_ref(self, data: dict[str, Any], token: Token) -> None:
        s = self.standin
        ref, sha = str(data.get("ref", "")), data.get("sha")
        if not token.push:
            return self._send(403, forbidden(f"{DOCS}/releases/releases"))
        if self._needs_workflow_scope(sha, token):
            return self._send(404, _not_found())
        if not ref.startswith("refs/") or ref.count("/") < 2:
            return self._send(422, {"message": "Reference name must start with 'refs/' and have at least two slashes.", "status": "422"})
        if sha not in s.commits:
            return self._send(422, {"message": "Object does not exist", "status": "422"})
        tag = ref.removeprefix("refs/tags/")
        if tag in s.refs:
            return self._send(422, {"message": "Reference already exists", "documentation_url": f"{DOCS}/git/refs#create-a-reference", "status": "422"})
        s.refs[tag] = sha
        self._send(201, {"ref": ref, "node_id": "REF", "object": {"type": "commit", "sha": sha}})

    def _publishable(self, release: Release, token: Token) -> str | None:
        """Publish `release` (create its tag when absent); an error message or None."""
        s = self.standin
        if any(r.id != release.id and not r.draft for r in s.releases_for(release.tag_name)):
            return "exists"
        if release.tag_name not in s.refs:
            if release.target_commitish not in s.commits:
                return "target"
            if self._needs_workflow_scope(release.target_commitish, token):
                return "scope"
            s.refs[release.tag_name] = release.target_commitish
        elif self._needs_workflow_scope(s.refs[release.tag_name], token):
            return "scope"
        release.draft = False
        release.published_at = s._time()
        release.immutable = s.immutable_enabled
        if not release.prerelease and release.make_latest != "false":
            s.latest_id = release.id
        return None

    def _create_release(self, data: dict[str, Any], token: Token) -> None:
        s = self.standin
        if not token.push:
            return self._send(403, forbidden(f"{DOCS}/releases/releases"))
        tag = data.get("tag_name")
        if not isinstance(tag, str) or not tag:
            return self._send(422, _validation("Release", "tag_name", "missing_field"))
        rejected = s.faults.pop("reject_release", None)
        if rejected is not None:
            return self._send(422, {"message": "Validation Failed", "errors": rejected, "documentation_url": f"{DOCS}/releases/releases#create-a-release", "status": "422"})
        if any(not r.draft for r in s.releases_for(tag)):
            return self._send(422, _validation("Release", "tag_name"))
        target = str(data.get("target_commitish") or "main")
        commit = s.refs.get(tag, target)
        if self._needs_workflow_scope(commit, token):
            return self._send(404, _not_found())
        make_latest = str(data.get("make_latest", "true")).lower()
        release = Release(next(s._ids), tag, target, data.get("name"), data.get("body"), bool(data.get("draft", False)), bool(data.get("prerelease", False)), make_latest, s._time())
        s.releases[release.id] = release
        if not release.draft:
            problem = self._publishable(release, token)
            if problem is not None:
                del s.releases[release.id]
                return self._send(422, _validation("Release", "tag_name", "invalid" if problem != "exists" else "already_exists"))
        self._send(201, s.release_json(release), headers={"Location": f"{s.url}/repos/{s.repository}/releases/{release.id}"})

    def _update_release(self, release: Release, data: dict[str, Any], token: Token) -> None:
        s = self.standin
        if not token.push:
            return self._send(403, forbidden(f"{DOCS}/releases/releases"))
        published = not release.draft
        if "tag_name" in data and data["tag_name"] != release.tag_name and published and release.immutable:
            return self._send(422, {"message": "Cannot change the tag of an immutable release.", "status": "422"})
        for key in ("name", "body", "target_commitish", "tag_name"):
            if key in data:
                setattr(release, key, data[key])
        if "prerelease" in data:
            release.prerelease = bool(data["prerelease"])
        if "make_latest" in data:
            release.make_latest = str(data["make_latest"]).lower()
        fault = s.faults.get("publish_5xx") if data.get("draft") is False and release.draft else None
        if data.get("draft") is False and release.draft:
            if fault is not None and not fault[1]:  # failed before applying
                s.faults.pop("publish_5xx")
                return self._send(fault[0], raw=b"<html><body><h1>Server Error</h1></body></html>", content_type="text/html")
            problem = self._publishable(release, token)
            if problem == "scope":
                return self._send(404, _not_found())
            if problem is not None:
                return self._send(422, _validation("Release", "tag_name", "already_exists" if problem == "exists" else "invalid"))
            if s.faults.pop("enable_immutable_after_publish", None):
                s.immutable_enabled = True  # published before the switch: this release stays mutable
            if fault is not None:  # applied, then the answer was lost
                s.faults.pop("publish_5xx")
                return self._send(fault[0], raw=b"<html><body><h1>Server Error</h1></body></html>", content_type="text/html")
        elif data.get("draft") is True and published:
            if release.immutable:  # a mutable release can be made a draft again (its tag stays); an immutable one never
                return self._send(422, {"message": "Cannot convert an immutable release back to a draft.", "documentation_url": f"{DOCS}/releases/releases#update-a-release", "status": "422"})
            release.draft, release.published_at = True, None
            if s.latest_id == release.id:
                s.latest_id = None
        self._send(200, s.release_json(release))

    def _upload(self, release_id: int, body: bytes, token: Token) -> None:
        s = self.standin
        release = s.releases.get(release_id)
        if release is None:
            return self._send(404, _not_found())
        if not token.push:
            return self._send(403, forbidden(f"{DOCS}/releases/releases"))
        if release.immutable and not release.draft:
            return self._send(422, {"message": "Cannot upload assets to an immutable release.", "documentation_url": f"{DOCS}/releases/assets#upload-a-release-asset", "status": "422"})
        name = self.query.get("name")
        if not name:
            return self._send(422, _validation("ReleaseAsset", "name", "missing_field"))
        if not self.headers.get("Content-Type") or self.headers.get("Content-Length") is None:
            return self._send(400, {"message": "Content-Type and Content-Length are required", "status": "400"})
        name = re.sub(r"[^A-Za-z0-9._+-]", ".", name)  # GitHub renames special characters
        name = s.faults.get("rename_upload", {}).get(name, name)
        if any(a.name == name for a in s.assets_of(release)):
            return self._send(422, _validation("ReleaseAsset", "name"))
        asset = Asset(next(s._ids), release.id, name, self.query.get("label"), self.headers["Content-Type"], "uploaded", body, s._time())
        fault = s.faults.get("upload_502_starter")
        if fault is not None and fault in (True, name):
            s.faults.pop("upload_502_starter")
            asset.state, asset.data = "starter", b""
            s.assets[asset.id] = asset
            release.asset_ids.append(asset.id)
            return self._send(502, raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")
        s.assets[asset.id] = asset
        release.asset_ids.append(asset.id)
        fault = s.faults.get("upload_reset_after_landing")
        if fault is not None and fault in (True, name):
            s.faults.pop("upload_reset_after_landing")
            raise _Reset
        self._send(201, s.asset_json(asset))

    def _download(self, tag: str, name: str) -> None:
        s = self.standin
        for release in s.releases_for(unquote(tag)):
            if release.draft:
                continue
            for asset in s.assets_of(release):
                if asset.name == unquote(name) and asset.state == "uploaded":
                    return self._send(200, raw=asset.data, content_type="application/octet-stream")
        self._send(404, raw=b"Not Found", content_type="text/plain")
