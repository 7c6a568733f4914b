"""A small, careful client of GitHub's REST API for the publication stages.

Only what `cut` and `publish` need: repository facts, tags (git refs), releases
(drafts are found by listing: get-by-tag never returns one), release assets on
the uploads host, the rate limit and the repository's immutable-releases
setting.  The rules it keeps (../shared/reference/publication-anchors.md §1):

- The token comes from the environment only (`GITHUB_TOKEN`, else `GH_TOKEN`),
  is registered with `errors.register_secret` so no error, log or record can
  show it, and is sent only to the configured API and uploads origins (https,
  or http on a loopback address for the test stand-in).
- The API is `PIPELINE_GITHUB_API`, else the runner's `GITHUB_API_URL` (GitHub
  Enterprise Server, the rehearsal's stand-in), else api.github.com; uploads go
  to `PIPELINE_GITHUB_UPLOADS`, else the uploads host of that API (`api_url`,
  `uploads_url`).
- Rate limits: a 403/429 that is a rate limit waits what `retry-after` says when
  given (delay-seconds or an HTTP date), until `x-ratelimit-reset` when `x-ratelimit-remaining` is 0, and
  otherwise at least 60 s with exponential back-off; then retries (a limited
  request was not processed, so a retry is safe).  All waiting goes through an
  injectable clock and is bounded in total.
- Content-creating calls (POST/PATCH/PUT/DELETE, uploads) go one at a time and
  at least `write_interval` seconds apart (GitHub: 80 content-creating
  requests per minute).
- A write that fails ambiguously -- timeout, connection reset, 5xx -- is never
  retried here: it raises `Ambiguous`, and the caller lists what GitHub holds
  before it decides (an upload that landed answers a blind retry with 422
  `already_exists`).  Reads are retried with back-off, bounded.
- An error keeps GitHub's own words: `message`, every `errors[].message` (or
  its resource/field/code) and `documentation_url` (`error_text`).
- Response bodies are read with a size bound; pagination follows the `link`
  header's `rel="next"` on the same origin, bounded in pages.
"""

from __future__ import annotations

import datetime
import email.utils
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pipeline.errors import RefusedError, RemoteError, UsageError, redact, register_secret
from pipeline.util.hashing import sha256_bytes, sha256_file

API = "https://api.github.com"
UPLOADS = "https://uploads.github.com"
API_VERSION = "2022-11-28"
TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN")
MAX_JSON_BYTES = 8 * 1024 * 1024
MAX_PAGES = 50
PER_PAGE = 100
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MIN_WRITE_INTERVAL = 0.75


class Clock:
    """Wall time and sleeping; tests pass a fake whose sleep only advances its time."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class GitHubError(RemoteError):
    """GitHub answered with a status the caller did not expect."""

    def __init__(self, what: str, *, status: int, body: Any, request_id: str | None, **kwargs: Any) -> None:
        self.status = status
        self.body = body
        self.request_id = request_id
        super().__init__(what, **kwargs)

    def error_codes(self) -> list[str]:
        errors = self.body.get("errors") if isinstance(self.body, dict) else None
        return [e.get("code") for e in errors or [] if isinstance(e, dict) and isinstance(e.get("code"), str)]


class Ambiguous(RemoteError):
    """A write whose outcome is unknown (timeout, connection reset, 5xx): list before retrying."""

    def __init__(self, what: str, *, status: int | None = None, request_id: str | None = None, **kwargs: Any) -> None:
        self.status = status
        self.request_id = request_id
        super().__init__(what, **kwargs)


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]
    request_id: str | None
    links: dict[str, str] = field(default_factory=dict)


def token_from_env() -> str | None:
    for name in TOKEN_VARIABLES:
        value = os.environ.get(name)
        if value:
            register_secret(value)
            return value
    return None


def repository_of(url: str) -> str:
    """'https://github.com/owner/name' -> 'owner/name'."""
    match = re.fullmatch(r"https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?", url)
    if not match:
        raise UsageError("is not a GitHub repository URL", found=url, expected="https://github.com/<owner>/<name>")
    return f"{match.group(1)}/{match.group(2)}"


API_VARIABLES = ("PIPELINE_GITHUB_API", "GITHUB_API_URL")  # in precedence order, after an explicit argument
UPLOADS_VARIABLE = "PIPELINE_GITHUB_UPLOADS"


def api_url(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The REST API's base URL: `explicit`, else PIPELINE_GITHUB_API (an operator's override), else GITHUB_API_URL
    (what an Actions runner sets: https://api.github.com, `https://HOST/api/v3` on GitHub Enterprise Server, or the
    rehearsal's stand-in), else https://api.github.com.  No trailing slash."""
    environ = os.environ if environ is None else environ
    chosen = explicit or next((environ[name] for name in API_VARIABLES if environ.get(name)), None) or API
    return chosen.rstrip("/")


def uploads_url(api: str, explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The release-asset uploads base: `explicit`, else PIPELINE_GITHUB_UPLOADS, else derived from the API URL:
    https://uploads.github.com for api.github.com; `https://HOST/api/uploads` for a GitHub Enterprise Server API
    `https://HOST/api/v3` (GitHub's documented layout); `<api>/uploads` for any other API (the stand-ins serve
    uploads there).  The token then never goes to a host other than the API's (or GitHub's own uploads host)."""
    environ = os.environ if environ is None else environ
    chosen = explicit or environ.get(UPLOADS_VARIABLE)
    if chosen:
        return chosen.rstrip("/")
    api = api.rstrip("/")
    if api == API:
        return UPLOADS
    if api.endswith("/api/v3"):
        return api[: -len("/v3")] + "/uploads"
    return api + "/uploads"


def is_loopback_url(url: str) -> bool:
    """True for a URL on this machine (127.0.0.1, localhost, ::1): the suite's and the rehearsal's stand-ins."""
    return urlsplit(url).hostname in LOOPBACK


def _origin(url: str, *, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK):
        return f"{parts.scheme}://{parts.netloc}"
    raise UsageError(
        f"the {what} URL must use https (http only on a loopback address)",
        found=url,
        why="the token travels with every request",
        fix="set PIPELINE_GITHUB_API / GITHUB_API_URL / PIPELINE_GITHUB_UPLOADS to https URLs, or leave them unset",
    )


def _is_rate_limited(status: int, headers: dict[str, str], body: Any) -> bool:
    if status not in (403, 429):
        return False
    if status == 429 or "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0":
        return True
    message = body.get("message", "") if isinstance(body, dict) else ""
    return "rate limit" in str(message).lower()


def _is_digits(value: str) -> bool:
    """ASCII digits only: str.isdigit() is also true of '²' and other digits float() refuses."""
    return value.isascii() and value.isdigit()


def _retry_after_seconds(value: str | None, now: float) -> float | None:
    """`Retry-After` as delay-seconds or as an HTTP date (RFC 9110 §10.2.3); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if _is_digits(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def _clip(value: Any, limit: int = 300) -> str:
    return redact(" ".join(str(value).split()))[:limit]


def error_text(body: Any) -> str:
    """GitHub's own words from an error body: `message`, every `errors[]` entry (its `message`, else
    resource/field/code) and `documentation_url`, each bounded, as ' (message) [e1; e2] see URL'."""
    if not isinstance(body, dict):
        return ""
    message = _clip(body.get("message", "")) if body.get("message") else ""
    details = []
    for entry in (body.get("errors") if isinstance(body.get("errors"), list) else [])[:10]:
        if isinstance(entry, dict):
            words = " ".join(str(entry[k]) for k in ("resource", "field", "code") if isinstance(entry.get(k), str) and entry[k])
            said = _clip(entry["message"]) if isinstance(entry.get("message"), str) and entry["message"] else ""
            details.append(f"{words}: {said}" if words and said else (said or words))
        elif isinstance(entry, str):  # GitHub sometimes lists bare strings
            details.append(_clip(entry))
    docs = body.get("documentation_url")
    text = f" ({message})" if message else ""
    text += f" [{'; '.join(d for d in details if d)}]" if any(details) else ""
    if isinstance(docs, str) and docs.startswith("https://"):
        text += f" see {_clip(docs, 200)}"
    return text


def _shaped_value(body: Any, endpoint: str, *, keys: dict[str, type] | None = None, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON object from GitHub whose named keys, where present (and `required` ones always), have their documented
    types; else a RemoteError naming the endpoint and the field (an answer in another shape is never guessed at)."""
    if not isinstance(body, dict):
        raise RemoteError(f"{endpoint}: GitHub answered something that is not a JSON object", field=endpoint, found=type(body).__name__, expected="object",
                          why="an answer in another shape than GitHub's documented one is not guessed at", fix="run again; if it persists, check GitHub's status")
    for key in required:
        if body.get(key) is None:
            raise RemoteError(f"{endpoint}: GitHub answered an object without {key!r}", field=key, found=sorted(str(k) for k in body)[:20],
                              why="an answer in another shape than GitHub's documented one is not guessed at")
    for key, kind in (keys or {}).items():
        value = body.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise RemoteError(f"{endpoint}: GitHub answered a {key!r} that is not a {kind.__name__}", field=key, found=_clip(value, 80), expected=kind.__name__,
                              why="an answer in another shape than GitHub's documented one is not guessed at")
    return body


def _shaped(reply: Reply, endpoint: str, *, keys: dict[str, type] | None = None) -> dict[str, Any]:
    return _shaped_value(reply.body, endpoint, keys=keys)


def body_sha256(body: str | None) -> str:
    """The SHA-256 of a release body's UTF-8 text; GitHub answers an empty body as null, so null is the empty text."""
    return sha256_bytes((body or "").encode("utf-8"))


def _release_shape(body: Any, endpoint: str) -> dict[str, Any]:
    release = _shaped_value(body, endpoint, keys={"id": int, "tag_name": str, "name": str, "body": str, "draft": bool, "prerelease": bool, "immutable": bool, "upload_url": str, "assets": list})
    if not isinstance(release.get("id"), int) or release["id"] <= 0:
        raise RemoteError(f"{endpoint}: GitHub answered a release without a numeric id", field="id", found=_clip(release.get("id"), 80), expected="a positive integer")
    return release


def _object_of(body: Any) -> dict[str, Any]:
    """A git ref's or tag's `object`, {} for any other shape (a list, a string, a missing key)."""
    obj = body.get("object") if isinstance(body, dict) else None
    return obj if isinstance(obj, dict) else {}


class GitHub:
    def __init__(
        self,
        repository: str,
        token: str | None,
        *,
        api: str | None = None,
        uploads: str | None = None,
        clock: Clock | None = None,
        max_attempts: int = 6,
        max_wait: float = 1800.0,
        write_interval: float = 1.0,
        timeout: tuple[float, float] = (10.0, 120.0),
        on_reply: Callable[[str, str, Reply], None] | None = None,
    ) -> None:
        import requests

        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repository):
            raise UsageError("is not a repository 'owner/name'", found=repository)
        self.repository = repository
        self.token = token
        if token:
            register_secret(token)
        self.api = api_url(api)
        self.uploads = uploads_url(self.api, uploads)
        self._origins = {_origin(self.api, what="API"), _origin(self.uploads, what="uploads")}
        self.clock = clock or Clock()
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        interval = os.environ.get("PIPELINE_GITHUB_WRITE_INTERVAL")
        if interval is not None:
            try:
                write_interval = float(interval)
            except ValueError:
                raise UsageError("is not a number of seconds", field="PIPELINE_GITHUB_WRITE_INTERVAL", found=interval) from None
        if not is_loopback_url(self.api):
            write_interval = max(MIN_WRITE_INTERVAL, write_interval)  # GitHub: 80 content-creating requests a minute
        self.write_interval = write_interval
        self.timeout = timeout
        self.on_reply = on_reply
        self.waited = 0.0
        self.requests = 0
        self.scopes: set[str] | None = None  # from x-oauth-scopes (classic tokens only)
        self.immutable_unknown: str | None = None  # why the immutable-releases setting could not be read (a 403), once seen
        self._write_lock = threading.Lock()
        self._last_write = -1e18
        self._session = requests.Session()
        self._session.trust_env = False  # no proxy or netrc credentials from the environment

    # -- transport ---------------------------------------------------------------
    def _headers(self, url: str, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "omp-ninfer-pipeline",
        }
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        if self.token and origin in self._origins:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def wait_for_write_slot(self) -> None:
        """Sleep out the spacing the next content-creating call would sleep, now: a caller that checks GitHub's
        state right before a write spends the spacing before its check, so nothing but the check's own round trip
        lies between what it saw and the write (publish: GitHub has no conditional publish)."""
        with self._write_lock:
            gap = self.clock.now() - self._last_write
            if gap < self.write_interval:
                self.clock.sleep(self.write_interval - gap)

    def _wait(self, seconds: float, why: str) -> None:
        seconds = max(0.0, seconds)
        if self.waited + seconds > self.max_wait:
            raise RemoteError(
                f"GitHub asked to wait {seconds:.0f} s more ({why}); the total wait would pass {self.max_wait:.0f} s",
                why="the rate limit is exhausted for longer than this run waits",
                fix="run the same command again later; it resumes from GitHub's state",
            )
        from pipeline.util import ui

        ui.info(f"github: {why}; waiting {seconds:.0f} s")
        self.waited += seconds
        self.clock.sleep(seconds)

    def _read(self, response) -> Any:
        chunks, size = [], 0
        for chunk in response.iter_content(65536):
            size += len(chunk)
            if size > MAX_JSON_BYTES:
                response.close()
                raise RemoteError("GitHub's answer is larger than any answer this client expects", found=f"> {MAX_JSON_BYTES} bytes")
            chunks.append(chunk)
        data = b"".join(chunks)
        if not data:
            return None
        from pipeline.errors import InputError
        from pipeline.util.jsonio import loads_document

        try:
            return loads_document(data, source="GitHub's answer", max_bytes=MAX_JSON_BYTES)
        except InputError:  # an error page, not JSON: keep its start as the message
            return {"message": data[:200].decode("utf-8", "replace")}

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        body: Callable[[], Any] | None = None,
        headers: dict[str, str] | None = None,
        expect: tuple[int, ...] = (200,),
    ) -> Reply:
        """One API call with the retry rules above; `url` is a path under the API or a full URL."""
        import requests

        if not url.startswith(("http://", "https://")):
            url = self.api + url
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        if origin not in self._origins:
            raise RemoteError("refused to send a request outside the configured GitHub origins", found=origin, expected=sorted(self._origins))
        write = method != "GET"
        what = f"{method} {urlsplit(url).path}"
        attempt = 0
        while True:
            attempt += 1
            self.requests += 1
            lock = self._write_lock if write else _NoLock()
            with lock:
                if write:
                    gap = self.clock.now() - self._last_write
                    if gap < self.write_interval:
                        self.clock.sleep(self.write_interval - gap)
                try:
                    data = body() if body is not None else None
                    try:
                        response = self._session.request(
                            method, url, params=params, json=json_body, data=data,
                            headers=self._headers(url, headers), timeout=self.timeout, allow_redirects=False, stream=True,
                        )
                        payload = self._read(response)
                    finally:
                        if data is not None and hasattr(data, "close"):
                            data.close()
                except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
                    if write:
                        self._last_write = self.clock.now()
                        raise Ambiguous(
                            f"{what}: the connection failed before GitHub's answer arrived ({type(exc).__name__})",
                            why="the request may or may not have been applied",
                        ) from None
                    if attempt >= self.max_attempts:
                        raise RemoteError(f"{what}: GitHub could not be reached ({redact(str(exc))[:200]})", fix="check the network and run again") from None
                    self._wait(min(60.0, 2.0 ** attempt), f"{what} failed to connect")
                    continue
                if write:
                    self._last_write = self.clock.now()
            lower = {k.lower(): v for k, v in response.headers.items()}
            reply = Reply(response.status_code, payload, lower, lower.get("x-github-request-id"), {k: v.get("url", "") for k, v in response.links.items()})
            if "x-oauth-scopes" in lower:
                self.scopes = {s.strip() for s in lower["x-oauth-scopes"].split(",") if s.strip()}
            if self.on_reply is not None:
                self.on_reply(method, urlsplit(url).path, reply)
            if _is_rate_limited(reply.status, lower, payload):
                if attempt >= self.max_attempts + 4:
                    raise RemoteError(f"{what}: still rate limited after {attempt} attempts", fix="run again later; it resumes from GitHub's state")
                retry_after = _retry_after_seconds(lower.get("retry-after"), self.clock.now())
                if retry_after is not None:
                    delay, why = retry_after, "rate limited (retry-after)"
                elif lower.get("x-ratelimit-remaining") == "0" and _is_digits(lower.get("x-ratelimit-reset", "")):
                    delay, why = float(lower["x-ratelimit-reset"]) - self.clock.now() + 1.0, "primary rate limit exhausted (x-ratelimit-reset)"
                else:  # a secondary limit without a hint: at least a minute, then exponential
                    delay, why = max(60.0, 60.0 * 2 ** (attempt - 1)), "secondary rate limit"
                self._wait(delay, why)
                continue
            if reply.status >= 500:
                if write:
                    raise Ambiguous(f"{what}: GitHub answered {reply.status}", status=reply.status, request_id=reply.request_id, why="a 5xx on a write may still have applied it")
                if attempt >= self.max_attempts:
                    raise GitHubError(f"{what}: GitHub answered {reply.status} {attempt} times", status=reply.status, body=payload, request_id=reply.request_id, fix="run again later")
                self._wait(min(60.0, 2.0 ** attempt), f"{what} answered {reply.status}")
                continue
            if reply.status not in expect:
                raise self._error(what, reply)
            return reply

    def _error(self, what: str, reply: Reply) -> GitHubError:
        text = f"{what}: GitHub answered {reply.status}" + error_text(reply.body)
        if reply.request_id:
            text += f", request id {reply.request_id}"
        fix = None
        if reply.status == 401:
            fix = "set GITHUB_TOKEN to a valid token"
        elif reply.status in (403, 404):
            fix = "check that the token may write releases of this repository (and has the workflow scope when the commit changes .github/workflows/)"
        return GitHubError(text, status=reply.status, body=reply.body, request_id=reply.request_id, fix=fix)

    def paginate(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]:
        url: str | None = self.api + path
        query = {"per_page": PER_PAGE, **(params or {})}
        for _ in range(MAX_PAGES):
            assert url is not None
            reply = self.request("GET", url, params=query)
            if not isinstance(reply.body, list):
                raise RemoteError(f"GET {path}: GitHub answered something that is not a list", found=type(reply.body).__name__)
            yield from reply.body
            url, query = reply.links.get("next"), None
            if not url:
                return
        raise RemoteError(f"GET {path}: more than {MAX_PAGES} pages", why="far more entries than a release repository holds")

    def paginate_object(self, path: str, params: dict[str, Any] | None = None, *, expect: tuple[int, ...] = (200,)) -> list[Any]:
        """Every page of a paginated answer that is an object (check runs, a combined status), bounded in pages."""
        url: str | None = self.api + path
        query = {"per_page": PER_PAGE, **(params or {})}
        pages = []
        for _ in range(MAX_PAGES):
            assert url is not None
            reply = self.request("GET", url, params=query, expect=expect)
            pages.append(_shaped(reply, path))
            url, query = reply.links.get("next"), None
            if not url:
                return pages
        raise RemoteError(f"GET {path}: more than {MAX_PAGES} pages", why="far more entries than one commit's CI reports")

    def check_run_pages(self, sha: str) -> tuple[list[Any], str]:
        """GitHub's check-runs answer for exactly `sha` (every run, re-runs included: `filter=all`), every page as
        sent, with the endpoint that names it; parsed by its owner (formats/ci_checks.py: `read_ci_state`)."""
        return self._ci_pages(sha, "check-runs", {"filter": "all"})

    def status_pages(self, sha: str) -> tuple[list[Any], str]:
        """GitHub's combined-status answer for exactly `sha`, every page as sent, with the endpoint that names it."""
        return self._ci_pages(sha, "status", None)

    def _ci_pages(self, sha: str, answer: str, params: dict[str, Any] | None) -> tuple[list[Any], str]:
        """Needs `checks: read` (check runs) and `statuses: read` (an Actions job's `permissions:`); GitHub's 403
        names the missing one."""
        if not re.fullmatch(r"[0-9a-f]{40}", sha or ""):
            raise UsageError("CI is read at a full commit only", found=sha, expected="40 hex")
        path = f"{self._repo}/commits/{sha}/{answer}"
        try:
            pages = self.paginate_object(path, params)
        except GitHubError as exc:
            if exc.status == 403:
                exc.fix = "give the job (or token) `checks: read` and `statuses: read` (.github/workflows/release.yml permissions)"
                exc.args = (exc.render(),)
            raise
        return pages, f"GET {path}"

    # -- repository ------------------------------------------------------------------
    @property
    def _repo(self) -> str:
        return f"/repos/{self.repository}"

    def repo(self) -> dict[str, Any]:
        return _shaped(self.request("GET", self._repo), self._repo)

    def rate_limit(self) -> dict[str, Any]:
        limits = _shaped(self.request("GET", "/rate_limit"), "/rate_limit", keys={"resources": dict})
        core = (limits.get("resources") or {}).get("core")
        if core is not None:  # what publish reads: resources.core.{remaining, reset}
            _shaped_value(core, "/rate_limit resources.core", keys={"limit": int, "remaining": int, "reset": int})
        return limits

    def commit(self, sha: str) -> dict[str, Any] | None:
        path = f"{self._repo}/commits/{sha}"
        reply = self.request("GET", path, expect=(200, 404, 422))
        if reply.status != 200:
            return None
        commit = _shaped(reply, path, keys={"files": list})
        for index, entry in enumerate(commit.get("files") or []):  # what publish reads: files[].filename
            _shaped_value(entry, f"{path} files[{index}]", keys={"filename": str})
        return commit

    def immutable_releases(self) -> bool | None:
        """Whether the repository enables immutable releases: True, False (GitHub's 404), or None when the token may
        not read the setting.  GitHub documents the endpoint as needing admin read access, which an Actions
        `github.token` never has (there is no `administration` permission to give a job): its 403 is an unknown
        setting, not a refusal.  The reason is kept in `immutable_unknown` and warned once per client; the caller
        then reads immutability from the published release's own `immutable` field."""
        path = f"{self._repo}/immutable-releases"
        reply = self.request("GET", path, expect=(200, 403, 404))
        if reply.status == 403:
            if self.immutable_unknown is None:
                self.immutable_unknown = f"the token may not read {path} (GitHub answered 403{error_text(reply.body)}; it needs admin read access)"
                from pipeline.util import ui

                ui.warn(f"immutable-releases setting unknown: {self.immutable_unknown}; immutability is read from the published release's own `immutable` field")
            return None
        return reply.status == 200 and isinstance(reply.body, dict) and reply.body.get("enabled") is True

    # -- tags -------------------------------------------------------------------------
    def tag_commit(self, tag: str) -> str | None:
        """The commit a tag names (annotated tags dereferenced), or None when the tag is absent."""
        reply = self.request("GET", f"{self._repo}/git/ref/tags/{quote(tag, safe='')}", expect=(200, 404))
        if reply.status == 404:
            return None
        obj = _object_of(reply.body)
        for _ in range(4):
            if obj.get("type") == "commit" and isinstance(obj.get("sha"), str) and re.fullmatch(r"[0-9a-f]{40}", obj["sha"]):
                return obj["sha"]
            if obj.get("type") != "tag" or not isinstance(obj.get("sha"), str) or not re.fullmatch(r"[0-9a-f]{40}", obj["sha"]):
                break
            obj = _object_of(self.request("GET", f"{self._repo}/git/tags/{obj['sha']}").body)
        raise RemoteError(f"the tag {tag} does not name a commit", found=_clip(obj.get("type"), 80), why="GitHub answered a ref in another shape than a tag of a commit")

    def tag_names(self, prefix: str) -> list[str]:
        refs = self.paginate(f"{self._repo}/git/matching-refs/tags/{quote(prefix, safe='')}")
        return sorted(r["ref"].removeprefix("refs/tags/") for r in refs if isinstance(r, dict) and isinstance(r.get("ref"), str))

    def create_tag(self, tag: str, sha: str) -> Reply:
        return self.request("POST", f"{self._repo}/git/refs", json_body={"ref": f"refs/tags/{tag}", "sha": sha}, expect=(201,))

    # -- releases -----------------------------------------------------------------------
    def releases(self) -> list[dict[str, Any]]:
        path = f"{self._repo}/releases"
        return [_release_shape(r, path) for r in self.paginate(path)]

    def release_by_tag(self, tag: str) -> dict[str, Any] | None:
        path = f"{self._repo}/releases/tags/{quote(tag, safe='')}"
        reply = self.request("GET", path, expect=(200, 404))
        return _release_shape(reply.body, path) if reply.status == 200 else None

    def latest_release_id(self) -> int | None:
        """The id of the release GitHub marks latest (`make_latest`), or None when there is none."""
        path = f"{self._repo}/releases/latest"
        reply = self.request("GET", path, expect=(200, 404))
        return _release_shape(reply.body, path)["id"] if reply.status == 200 else None

    def release(self, release_id: int) -> dict[str, Any] | None:
        path = f"{self._repo}/releases/{int(release_id)}"
        reply = self.request("GET", path, expect=(200, 404))
        return _release_shape(reply.body, path) if reply.status == 200 else None

    def create_release(self, payload: dict[str, Any]) -> Reply:
        path = f"{self._repo}/releases"
        reply = self.request("POST", path, json_body=payload, expect=(201,))
        _release_shape(reply.body, path)
        return reply

    def update_release(self, release_id: int, payload: dict[str, Any]) -> Reply:
        path = f"{self._repo}/releases/{int(release_id)}"
        reply = self.request("PATCH", path, json_body=payload, expect=(200,))
        _release_shape(reply.body, path)
        return reply

    def assets(self, release_id: int) -> list[dict[str, Any]]:
        path = f"{self._repo}/releases/{int(release_id)}/assets"
        shape = {"id": int, "name": str, "size": int, "state": str, "digest": str, "browser_download_url": str}
        return [_shaped_value(a, path, keys=shape, required=("id", "name", "size")) for a in self.paginate(path)]

    def rename_asset(self, asset_id: int, name: str) -> Reply:
        """PATCH a release asset's name (GitHub's "update a release asset"); the answer names what GitHub kept."""
        path = f"{self._repo}/releases/assets/{int(asset_id)}"
        reply = self.request("PATCH", path, json_body={"name": name}, expect=(200,))
        _shaped(reply, path, keys={"id": int, "name": str, "size": int, "state": str, "digest": str})
        return reply

    def delete_asset(self, asset_id: int) -> Reply:
        return self.request("DELETE", f"{self._repo}/releases/assets/{int(asset_id)}", expect=(204, 404))

    def upload_asset(self, release: dict[str, Any], name: str, path: Path, *, size: int, content_type: str) -> Reply:
        template = str(release.get("upload_url") or "")
        url = template.split("{", 1)[0]
        if not url.startswith(self.uploads + "/"):
            raise RemoteError("the release's upload URL is not on the configured uploads host", found=url, expected=self.uploads + "/…")
        return self.request(
            "POST",
            url,
            params={"name": name},
            body=lambda: open(path, "rb"),  # reopened on each attempt
            headers={"Content-Type": content_type, "Content-Length": str(size)},
            expect=(201,),
        )

    def tag_state(self, tag: str) -> dict[str, Any]:
        """What GitHub holds for `tag`, normalized (the facts a publication plan binds, docs/cuts-and-publication.md):
        the tag ref's commit (or None), every release and draft of the tag with its assets and the SHA-256 of its
        body, and the repository's immutable-releases setting (None when the token may not read it).  A malformed answer is a RemoteError, never a traceback."""
        releases = []
        for release in self.releases():  # every entry shaped as a release (an id), or a RemoteError
            if release.get("tag_name") != tag:
                continue
            rid = release["id"]
            assets = []
            for asset in self.assets(rid):
                name, size = asset.get("name"), asset.get("size")
                if not isinstance(name, str) or not isinstance(size, int):
                    raise RemoteError(f"GitHub listed an asset of release {rid} without a name or size", field="assets", found=_clip(asset, 80))
                digest, state = asset.get("digest"), asset.get("state")
                assets.append({"name": name, "size": size, "digest": digest if isinstance(digest, str) else None, "state": state if isinstance(state, str) else None})
            releases.append({
                "id": rid,
                "name": release.get("name") if isinstance(release.get("name"), str) else None,
                "body_sha256": body_sha256(release.get("body")),
                "draft": release.get("draft") is True,
                "prerelease": release.get("prerelease") is True,
                "immutable": release.get("immutable") is True,
                "assets": sorted(assets, key=lambda a: (a["name"], a["size"], a["digest"] or "", a["state"] or "")),
            })
        return {"read": True, "tag": self.tag_commit(tag), "immutable_releases": self.immutable_releases(), "releases": sorted(releases, key=lambda r: r["id"])}

    def download_sha256(self, url: str, dest: Path, *, max_bytes: int) -> tuple[str, int]:
        """Fetch a published asset (no token: public URLs) into `dest`, bounded; return (sha256, size)."""
        import requests

        _origin(url, what="download")
        with requests.get(url, stream=True, timeout=self.timeout, headers={"User-Agent": "omp-ninfer-pipeline", "Accept": "application/octet-stream"}) as response:
            if response.status_code != 200:
                raise RemoteError(f"GET {url}: answered {response.status_code}", fix="check that the release is published and public")
            size = 0
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as handle:
                for chunk in response.iter_content(1 << 20):
                    size += len(chunk)
                    if size > max_bytes:
                        raise RemoteError(f"GET {url}: larger than the planned {max_bytes} bytes")
                    handle.write(chunk)
        return sha256_file(dest), size


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_exc: object) -> None:
        return None


def require_token(what: str) -> str:
    token = token_from_env()
    if not token:
        raise RefusedError(
            f"{what} needs a GitHub token and none is set",
            field="GITHUB_TOKEN",
            why="the token is read from the environment only, never from arguments or files",
            fix="export GITHUB_TOKEN (in the release workflow: env GITHUB_TOKEN: ${{ github.token }}) and run again",
        )
    return token
