"""HTTP rules shared by every client of the pipeline: loopback, schemes, redirects, bounded bodies.

One place decides:

- **loopback** (`is_loopback`): `127.0.0.0/8` and `::1` as IP addresses
  (parsed by `ipaddress`, never by a string prefix: `127.attacker.com` is a
  host name like any other) and the name `localhost`;
- **schemes** (`scheme_problem`): HTTPS, or plain HTTP to a loopback host
  (test servers); never credentials in a URL;
- **redirects** (`redirect_problem`, `open_stream`): followed by hand
  (`allow_redirects=False`) for at most `MAX_REDIRECTS` hops; never to another
  scheme; policy "none" follows none (the manifest), "same-origin" only to the
  first URL's scheme, host and port, or to the named download hosts of that
  origin (`DOWNLOAD_HOSTS`: GitHub hands release assets to its
  `*.githubusercontent.com` CDN, Hugging Face hands LFS/Xet files to
  `*.hf.co`) over HTTPS;
- **bodies** (`iter_body`, `fetch_bytes`, `BoundedAdapter`): read with
  `read1`, so a read returns as soon as any bytes arrive, and stopped the moment
  the running count passes the limit (a pin or a named cap) or the deadline
  passes; the socket timeout is the idle timeout, and a pinned download must
  keep an average of DEADLINE_FLOOR_RATE after its first `timeout` seconds
  (so a slow drip is cut off after about `timeout` seconds whatever the
  file's size).  Decoded
  (`Content-Encoding`) bytes are counted, and urllib3 decodes at most the
  bytes asked for, so a compressed answer cannot inflate past the limit;
- **deadlines** (`Deadline`, `deadlines`, `deadline_adapter`): a read timeout
  is per socket read, so a server that trickles one byte at a time (header
  bytes included, before any body arrives) defeats it.  On a session with
  `deadline_adapter` mounted, every request made inside a `with
  deadlines(...)` block ends by the soonest of those deadlines: the connect
  timeout is cut to the time left, and each socket read of the status line,
  the headers and the body gets the time left as its timeout (never more
  than the request's own read timeout), so the request fails the moment the
  deadline passes, with a `DeadlinePassed` naming the phase and the URL.
  No thread is started: the bound lives in the reads themselves.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import ipaddress
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

from pipeline.errors import IntegrityError, RemoteError

CHUNK = 1024 * 1024
MAX_REDIRECTS = 5
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
DEFAULT_PORTS = {"http": 80, "https": 443}
# The slowest average rate a pinned download may keep once --timeout has passed: after R
# bytes it may have taken timeout + R / DEADLINE_FLOOR_RATE seconds (retries included), so a
# file of N bytes gets at most timeout + N / DEADLINE_FLOOR_RATE in all.
DEADLINE_FLOOR_RATE = 256 * 1024
# Hosts an origin serves its files from by redirect (HTTPS only), as domain suffixes of the
# same organisation: GitHub release downloads go to release-assets/objects.githubusercontent.com,
# Hugging Face `resolve/` to cdn-lfs*.hf.co or cas-bridge.xethub.hf.co.
DOWNLOAD_HOSTS: dict[str, tuple[str, ...]] = {
    "github.com": (".githubusercontent.com",),
    "huggingface.co": (".huggingface.co", ".hf.co"),
}


# -- loopback and schemes -------------------------------------------------------------


def is_loopback(host: str | None, *, allow_name: bool = True) -> bool:
    """True for a loopback IP address (127.0.0.0/8, ::1) and, unless `allow_name` is false, `localhost`.

    `host` is a bare host (no port); IPv6 may be bracketed.  A name that merely
    looks like an address (`127.attacker.com`, `127.1`) is not loopback.
    """
    if not host:
        return False
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if allow_name and bare.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in ipaddress.IPv4Network("127.0.0.0/8")
    return address == ipaddress.IPv6Address("::1")


def split_authority(authority: str) -> tuple[str, int | None]:
    """`host[:port]` or `[v6][:port]` -> (host without brackets, port or None)."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port = authority.rpartition(":")
        if not sep:
            host, port = authority, ""
    return host, int(port) if port.isdigit() else None


def authority_is_loopback(authority: str, *, allow_name: bool = True) -> bool:
    """Loopback decision for a registry-style `host[:port]`."""
    return is_loopback(split_authority(authority)[0], allow_name=allow_name)


def scheme_problem(url: str) -> str | None:
    """Why `url` may not be fetched at all: not HTTPS (plain HTTP only to loopback), no host, credentials, not a URL."""
    try:
        parts = urlsplit(url)
        hostname, credentials = parts.hostname, parts.username or parts.password
    except ValueError as exc:  # an unbalanced '[' of an IPv6 host, a port that is no number
        return f"is not a valid URL ({exc})"
    if parts.scheme == "http":
        if not is_loopback(hostname):
            return "plain HTTP is not accepted (only for loopback test servers); the release must be served over HTTPS"
    elif parts.scheme != "https":
        return f"is not an HTTPS URL (scheme {parts.scheme or 'none'!r})"
    if not hostname:
        return "names no host"
    if credentials:
        return "carries credentials"
    return None


def check_scheme(url: str) -> str | None:
    """Why a release URL is refused (audit and rebuild): the shared scheme rule (HTTPS; plain HTTP only to loopback), then
    the release rules (a release URL names one immutable file: no query, fragment or dot segments)."""
    problem = scheme_problem(url)
    if problem:
        return problem
    parts = urlsplit(url)  # scheme_problem has parsed it
    if parts.query or parts.fragment:
        return "carries a query or fragment; a release URL names one immutable file"
    if "/../" in parts.path + "/" or "/./" in parts.path + "/":
        return "contains '.' or '..' path segments"
    return None


def origin(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # not a URL: an origin nothing else shares
        return "", "", None
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


def redirect_problem(first: str, target: str, policy: str) -> str | None:
    """Why a redirect from a fetch of `first` to `target` may not be followed (None: follow it)."""
    if policy == "none":
        return "this document is fetched from its own URL only, redirects are not followed"
    if policy != "same-origin":
        raise ValueError(f"unknown redirect policy {policy!r}")
    scheme, host, port = origin(first)
    to_scheme, to_host, to_port = origin(target)
    if to_scheme != scheme:
        return f"it changes the scheme from {scheme} to {to_scheme or 'none'}"
    problem = scheme_problem(target)
    if problem:
        return problem
    if (to_host, to_port) == (host, port):
        return None
    if to_scheme == "https" and any(to_host.endswith(suffix) for suffix in DOWNLOAD_HOSTS.get(host, ())):
        return None
    return f"it leaves the origin {scheme}://{host}:{port} for {to_host}:{to_port}"


# -- bodies ---------------------------------------------------------------------------


def deadline_for(timeout: float, size: int | None) -> float:
    """Seconds an item may take in all: the timeout, plus a pinned size at DEADLINE_FLOOR_RATE."""
    return timeout + (size or 0) / DEADLINE_FLOOR_RATE


def paced_deadline(started: float, timeout: float, ends: float, received: int = 0) -> Callable[[int], float]:
    """The deadline (a `time.monotonic()` value) after `count` more bytes: `timeout` plus the
    bytes received so far at DEADLINE_FLOOR_RATE, never later than `ends`."""
    return lambda count: min(ends, started + timeout + (received + count) / DEADLINE_FLOOR_RATE)


class DeadlinePassed(RemoteError):
    """An item ran past its overall deadline (its bytes so far may be a valid prefix)."""


def deadline_passed(label: str, url: str, count: int, phase: str | None = None) -> DeadlinePassed:
    """An item's own deadline passed: in its body (or between attempts) after `count` bytes, or in `phase` (connect, headers)."""
    where = f"{phase} {url}" if phase in (CONNECTING, HEADERS) else f"after {count} bytes"
    return DeadlinePassed(
        f"download of {label} ran past its deadline {where}",
        file=url,
        why="--timeout bounds the silence between bytes and, with retries, the whole download: after its first --timeout seconds a download must average 256 KiB/s (a server that drips bytes slowly is cut off)",
        fix="run the command again (partial bytes of a pinned file are resumed), or raise --timeout for a slow network",
    )


class Deadline:
    """A time by which a run of requests must end: `seconds` after `started` (default: now), plus, when
    `paced`, the bytes counted with `earn` at DEADLINE_FLOOR_RATE, never later than `latest`.

    `what` names it in the error (`"the audit's overall deadline of 5 s"`); `why` and `fix` go with it.
    Safe to share between threads (parallel downloads earn time together).
    """

    def __init__(
        self,
        seconds: float,
        *,
        what: str,
        why: str | None = None,
        fix: str | None = None,
        paced: bool = False,
        started: float | None = None,
        latest: float | None = None,
        received: int = 0,
        on_pass: Callable[[str, str], DeadlinePassed] | None = None,
    ) -> None:
        self.seconds = seconds
        self.started = time.monotonic() if started is None else started
        self.what = what
        self.why = why
        self.fix = fix
        self.paced = paced
        self.latest = latest
        self.received = received
        self.on_pass = on_pass  # builds the error instead of `what`'s sentence
        self._lock = threading.Lock()

    def ends(self) -> float:
        """The deadline now, as a `time.monotonic()` value."""
        ends = self.started + self.seconds + (self.received / DEADLINE_FLOOR_RATE if self.paced else 0.0)
        return ends if self.latest is None else min(ends, self.latest)

    def remaining(self) -> float:
        return self.ends() - time.monotonic()

    def passed(self) -> bool:
        return self.remaining() <= 0

    def earn(self, count: int) -> None:
        with self._lock:
            self.received += count

    def error(self, phase: str, url: str) -> DeadlinePassed:
        """`<what> passed <phase> <url>`, e.g. phase "while reading the headers of"."""
        if self.on_pass is not None:
            return self.on_pass(phase, url)
        earned = ""
        if self.paced and self.received >= DEADLINE_FLOOR_RATE // 10:  # a tenth of a second or more
            earned = f" (plus {self.received / DEADLINE_FLOOR_RATE:.1f} s earned by the {self.received} bytes received)"
        return DeadlinePassed(f"{self.what}{earned} passed {phase} {url}", file=url, why=self.why, fix=self.fix)


CONNECTING = "while connecting to"
HEADERS = "while reading the headers of"
BODY = "while reading the body of"
BEFORE = "before requesting"

_scope = threading.local()  # .limits: the deadlines of this thread's requests; .url: the request being sent


@contextlib.contextmanager
def deadlines(*limits: Deadline | None) -> Iterator[None]:
    """Within the block, this thread's requests on a session with `deadline_adapter` end by every one of `limits`."""
    previous = getattr(_scope, "limits", ())
    _scope.limits = previous + tuple(limit for limit in limits if limit is not None)
    try:
        yield
    finally:
        _scope.limits = previous


def _active() -> tuple[Deadline, ...]:
    return getattr(_scope, "limits", ())


def _soonest(limits: tuple[Deadline, ...]) -> Deadline:
    return min(limits, key=lambda limit: limit.ends())


class _DeadlineReader(io.RawIOBase):
    """The raw stream under an `http.client` response: every socket read is bounded by the time its deadlines leave."""

    def __init__(self, sock, limits: tuple[Deadline, ...], url: str) -> None:
        super().__init__()
        self._io = sock.makefile("rb", buffering=0)  # holds a reference of the socket, as http.client's own file does
        self._sock = sock
        self._limits = limits
        self._timeout = sock.gettimeout()  # the request's read timeout (urllib3 set it before the response)
        self.url = url
        self.phase = HEADERS

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._io.fileno()

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while True:
            limit = _soonest(self._limits)
            remaining = limit.remaining()
            if remaining <= 0:
                raise limit.error(self.phase, self.url)
            bounded = self._timeout is None or remaining < self._timeout
            if bounded:
                self._sock.settimeout(remaining)
            try:
                return self._sock.recv_into(buffer)
            except TimeoutError:
                if not bounded:
                    raise  # the request's own read timeout: the caller's to retry
                if _soonest(self._limits).passed():
                    raise _soonest(self._limits).error(self.phase, self.url) from None
                # a paced deadline moved on while this read waited (parallel downloads earned time): read on
            finally:
                if bounded:
                    self._sock.settimeout(self._timeout)

    def close(self) -> None:
        if not self.closed:
            self._io.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    """An `http.client` response whose status line, headers and body are read through `_DeadlineReader`."""

    def __init__(self, sock, debuglevel: int = 0, method: str | None = None, url: str | None = None) -> None:
        super().__init__(sock, debuglevel, method, url)
        self._deadline_reader: _DeadlineReader | None = None
        limits = _active()
        _scope.phase = HEADERS  # the request is sent: what follows is the answer
        if limits:
            plain = self.fp
            self._deadline_reader = _DeadlineReader(sock, limits, getattr(_scope, "url", "") or "the request")
            self.fp = io.BufferedReader(self._deadline_reader)
            plain.close()

    def begin(self) -> None:
        super().begin()
        if self._deadline_reader is not None:
            self._deadline_reader.phase = BODY


_POOLS: dict[str, Any] = {}


def _pool_classes() -> dict[str, Any]:
    """urllib3 connection pools whose connections read responses through `_DeadlineResponse`."""
    if not _POOLS:
        import urllib3

        class DeadlineHTTPConnection(urllib3.connection.HTTPConnection):
            response_class = _DeadlineResponse

        class DeadlineHTTPSConnection(urllib3.connection.HTTPSConnection):
            response_class = _DeadlineResponse

        class DeadlineHTTPPool(urllib3.HTTPConnectionPool):
            ConnectionCls = DeadlineHTTPConnection

        class DeadlineHTTPSPool(urllib3.HTTPSConnectionPool):
            ConnectionCls = DeadlineHTTPSConnection

        _POOLS.update({"http": DeadlineHTTPPool, "https": DeadlineHTTPSPool})
    return _POOLS


def deadline_adapter():
    """A `requests` transport adapter that applies the `deadlines` of the calling thread to each request.

    Outside a `deadlines` block it is an ordinary adapter.  Inside one, a
    request is refused without I/O once the soonest deadline has passed, its
    connect timeout is cut to the time left, and its status line, headers and
    body are read through `_DeadlineReader`; a failure after the deadline
    passed is a `DeadlinePassed` naming the phase (connect, headers, body).
    """
    import requests

    class DeadlineAdapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = _pool_classes()

        def proxy_manager_for(self, proxy, **proxy_kwargs):
            manager = super().proxy_manager_for(proxy, **proxy_kwargs)
            manager.pool_classes_by_scheme = _pool_classes()
            return manager

        def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):  # type: ignore[override]
            limits = _active()
            if not limits:
                return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
            limit = _soonest(limits)
            remaining = limit.remaining()
            if remaining <= 0:
                raise limit.error(BEFORE, request.url)
            if timeout is None or isinstance(timeout, int | float | tuple):
                connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
                # The connect timeout also bounds the TLS handshake and sending the request (each in all).
                timeout = (remaining if connect is None or connect > remaining else connect, read)
            _scope.url, _scope.phase = request.url, CONNECTING
            try:
                return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies)
            except requests.RequestException:
                limit = _soonest(limits)
                if limit.passed():
                    raise limit.error(getattr(_scope, "phase", HEADERS), request.url) from None
                raise
            finally:
                _scope.url = _scope.phase = None

    return DeadlineAdapter()


def deadline_session(session=None):
    """`session` (default: a new `requests.Session`) with `deadline_adapter` mounted for HTTP and HTTPS."""
    import requests

    session = session if session is not None else requests.Session()
    adapter = deadline_adapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _over(limit: int, what: str, label: str, url: str, pinned: bool) -> Exception:
    if pinned:
        return IntegrityError(
            f"the server sent more than the {limit} bytes pinned for {label}",
            file=url,
            why="the file at this URL is not the pinned one (or the server streams without end); the download was stopped at the pin",
            fix="do not use this file; check the pin and the URL",
        )
    return RemoteError(
        f"the answer for {label} is larger than the {limit} bytes allowed for {what}",
        file=url,
        why="an unpinned document has a fixed size cap so that a hostile or broken server cannot fill memory or disk",
        fix="check the URL; a real document of this kind is far smaller",
    )


def check_length(response, limit: int | None, *, label: str, url: str, what: str = "it", pinned: bool = False) -> None:
    """Refuse before reading when the declared Content-Length already exceeds `limit`."""
    length = response.headers.get("Content-Length", "")
    if limit is not None and length.isdigit() and not is_encoded(response) and int(length) > limit:
        response.close()
        raise _over(limit, what, label, url, pinned)


def iter_body(
    response,
    *,
    limit: int | None,
    deadline: float | Callable[[int], float],
    label: str,
    url: str,
    what: str = "it",
    pinned: bool = False,
    chunk: int = CHUNK,
) -> Iterator[bytes]:
    """The body of a streamed response, chunk by chunk as bytes arrive.

    Stops with an error once more than `limit` bytes came (IntegrityError for a
    pin, RemoteError for a cap) or when `time.monotonic()` passes `deadline`
    (a time, or a function of the bytes read so far: `paced_deadline`).
    Connection errors propagate as `requests` exceptions (the caller retries).
    """
    check_length(response, limit, label=label, url=url, what=what, pinned=pinned)
    count = 0
    raw = response.raw
    while True:
        if time.monotonic() > (deadline(count) if callable(deadline) else deadline):
            raise deadline_passed(label, url, count)
        want = chunk if limit is None else min(chunk, limit - count + 1)
        data = _read1(raw, want)
        if not data:
            return
        count += len(data)
        if limit is not None and count > limit:
            raise _over(limit, what, label, url, pinned)
        yield data


def _read1(raw, amount: int) -> bytes:
    import requests
    import urllib3

    try:
        return raw.read1(amount, decode_content=True)
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.exceptions.ConnectionError(exc) from None
    except (urllib3.exceptions.ProtocolError, urllib3.exceptions.DecodeError) as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from None
    except OSError as exc:  # a socket timeout or reset that urllib3 did not wrap
        raise requests.exceptions.ConnectionError(exc) from None


_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20})")


def is_encoded(response) -> bool:
    """Whether the answer carries a Content-Encoding: its lengths and ranges count the encoded bytes, not the file's."""
    return response.headers.get("Content-Encoding", "identity").lower() not in ("", "identity")


def range_headers(start: int, end: int | None = None) -> dict[str, str]:
    """The request headers of bytes START..END-1 (END None: to the end) of the file itself: `identity`, since a
    range of a compressed representation would count (and total) its compressed bytes."""
    return {"Range": f"bytes={start}-{'' if end is None else end - 1}", "Accept-Encoding": "identity"}


def content_range(response) -> tuple[int, int, int] | None:
    """A 206 answer's `Content-Range: bytes START-END/TOTAL` as (start, end exclusive, total); None when
    it is absent or malformed (`*` totals, several ranges, an end before its start or past the total)."""
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    if match is None:
        return None
    start, last, total = (int(group) for group in match.groups())
    return (start, last + 1, total) if start <= last < total else None


def read_body(response, *, limit: int, deadline: float, label: str, url: str, what: str = "it") -> bytes:
    """The whole (capped) body of a streamed response."""
    try:
        return b"".join(iter_body(response, limit=limit, deadline=deadline, label=label, url=url, what=what))
    finally:
        response.close()


def open_stream(
    session,
    url: str,
    *,
    timeout: float,
    redirects: str,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    label: str | None = None,
):
    """GET `url` (streamed), following redirects by `redirects` policy; returns the final response.

    Raises RemoteError for a redirect the policy refuses; `requests`
    exceptions propagate for connection failures.
    """
    import requests

    label = label or url
    current = url
    sent = dict(headers or {})
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            response = session.get(current, headers=sent, params=params, stream=True, timeout=timeout, allow_redirects=False)
        except requests.RequestException:
            raise  # the caller's to retry or report
        except ValueError as exc:  # requests parses a redirect's Location even when it does not follow it
            raise RemoteError(f"the server redirected {label} to an invalid URL ({exc})", file=current) from None
        if response.status_code not in REDIRECT_STATUS:
            return response
        location = response.headers.get("Location")
        response.close()
        if not location:
            raise RemoteError(f"the server answered HTTP {response.status_code} without a Location for {label}", file=current)
        try:
            target = urljoin(current, location)
        except ValueError as exc:  # a Location that is no URL (an unbalanced '[')
            raise RemoteError(f"the server redirected {label} to an invalid URL {location[:200]!r} ({exc})", file=current) from None
        problem = redirect_problem(url, target, redirects)
        if problem:
            raise RemoteError(
                f"refused to follow the redirect of {label} to {target}",
                file=url,
                why=problem,
                fix="fetch the file from where it really lives (or use --mirror for a copy you trust)",
            )
        if origin(target) != origin(current):
            sent.pop("Authorization", None)  # credentials never travel to another host
        params = None  # the Location carries the full target
        current = target
    raise RemoteError(f"more than {MAX_REDIRECTS} redirects for {label}", file=url, fix="check the URL")


def fetch_bytes(
    session,
    url: str,
    *,
    cap: int,
    timeout: float,
    what: str,
    redirects: str = "none",
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    label: str | None = None,
    accept_status: Callable[[int], bool] = lambda status: status == 200,
) -> tuple[Any, bytes]:
    """GET a small unpinned document: (response, body) with the body capped at `cap` bytes and `timeout` overall."""
    import requests

    label = label or url
    deadline = time.monotonic() + timeout
    try:
        response = open_stream(session, url, timeout=timeout, redirects=redirects, headers=headers, params=params, label=label)
        if not accept_status(response.status_code):
            response.close()
            return response, b""
        return response, read_body(response, limit=cap, deadline=deadline, label=label, url=url, what=what)
    except requests.RequestException as exc:
        raise RemoteError(f"cannot fetch {label}: {type(exc).__name__}", file=url, fix="check the network and the URL, then run the command again") from None


# -- a session-wide bound (for clients whose requests we do not issue ourselves) ----------


def bounded_adapter(*, cap: int, timeout: float, scheme: str | None = None):
    """A `requests` transport adapter: a default timeout, bodies of non-streamed answers capped at `cap`
    bytes (and read within `timeout` overall), and no request to a scheme other than `scheme`.

    Mount it on a session whose requests a library makes (oras-py's token and
    manifest requests, the qualification harness): redirects that requests
    follows pass through it too.
    """
    import requests

    class BoundedAdapter(requests.adapters.HTTPAdapter):
        def __init__(self) -> None:
            super().__init__(max_retries=0)

        def send(self, request, stream=False, timeout=None, **kwargs):  # type: ignore[override]
            if scheme is not None and urlsplit(request.url).scheme != scheme:
                raise RemoteError(
                    f"refused a request to {urlsplit(request.url).scheme}://{urlsplit(request.url).netloc}",
                    why=f"this client talks {scheme.upper()} only: a redirect never changes the scheme",
                )
            timeout = timeout if timeout is not None else default_timeout
            response = super().send(request, stream=True, timeout=timeout, **kwargs)
            if not stream:
                deadline = time.monotonic() + (timeout[-1] if isinstance(timeout, tuple) else timeout)
                label = f"{request.method} {urlsplit(request.url).netloc}{urlsplit(request.url).path}"
                try:
                    body = b"".join(iter_body(response, limit=cap, deadline=deadline, label=label, url=request.url, what="an answer of this client"))
                except BaseException:
                    response.close()
                    raise
                response._content = body
                response._content_consumed = True
                response.raw.release_conn()
            return response

    default_timeout = timeout
    return BoundedAdapter()


DOWNLOAD_BACKOFF_SECONDS = 0.5  # before the first retry of a download; doubled for each further one


class DownloadItem:
    """One download's URL, bounds and failure rules, shared by its single stream (`transfer`) or its parallel ranges (`ranges`).

    Every request of the item goes through `open` (`open_stream`: the one redirect, scheme and
    host rule), inside `scope` (the item's and the caller's deadlines bound every socket read of the
    calling thread), and is retried by `may_retry` (backoff, never past a deadline).
    """

    def __init__(self, url: str, label: str, http, *, timeout: float, seconds: float, retries: int, redirects: str, overall: Deadline | None) -> None:
        self.url, self.label, self.http = url, label, http
        self.timeout, self.retries, self.redirects, self.overall = timeout, retries, redirects, overall
        self.started = time.monotonic()
        self.held = 0  # bytes of the file on disk now (named when the deadline passes)
        # `timeout`, plus the bytes received in this call (a prefix from an earlier run earns no
        # time) at the floor rate, never after `seconds`.
        self.deadline = Deadline(timeout, what=f"download of {label}", started=self.started, latest=self.started + seconds, paced=True,
                                     on_pass=lambda phase, where: deadline_passed(label, where, self.held, phase))

    def scope(self):
        """This thread's requests end by the item's deadline and the caller's overall one."""
        return deadlines(self.overall, self.deadline)

    def late(self, phase: str) -> Exception | None:
        """The error of a deadline that has passed (the overall one first), else None."""
        if self.overall is not None and self.overall.passed():
            return self.overall.error(phase, self.url)
        return self.deadline.error(phase, self.url) if self.deadline.passed() else None

    def soonest(self) -> float:
        return min(self.deadline.ends(), self.overall.ends()) if self.overall is not None else self.deadline.ends()

    def earn(self, count: int) -> None:
        self.deadline.earn(count)
        if self.overall is not None:
            self.overall.earn(count)

    def may_retry(self, attempt: int) -> bool:
        """After failed attempt `attempt` (from 1): sleep the backoff and say True, or False when none is
        left (by --retries, or because a deadline would pass during the backoff: then the failure
        itself is reported, not the deadline)."""
        delay = DOWNLOAD_BACKOFF_SECONDS * 2 ** (attempt - 1)
        if attempt > self.retries or time.monotonic() + delay > self.soonest():
            return False
        time.sleep(delay)
        return True

    def open(self, headers: dict[str, str]):
        return open_stream(self.http, self.url, headers=headers, timeout=self.timeout, redirects=self.redirects, label=self.label)

    def refused(self, status: int) -> RemoteError | None:
        """The final error of an answer no retry can change (None: 200, 206, 416, 429 and 5xx)."""
        if status in (404, 410, 401, 403):
            return RemoteError(
                f"the server answered HTTP {status} for {self.label}",
                file=self.url,
                why="the asset is not published at this URL (or is not public)",
                fix="check that the release and asset exist and are public",
            )
        if status not in (200, 206, 416, 429) and status < 500:
            return RemoteError(f"unexpected HTTP {status} for {self.label}", file=self.url)
        return None

    def unreachable(self, exc: Exception, attempts: int) -> RemoteError:
        return RemoteError(
            f"cannot download {self.label}: {type(exc).__name__}",
            file=self.url,
            why=f"{attempts} attempts failed; the server is unreachable or the connection broke",
            fix="check the network and the URL, then run the command again (partial bytes are kept and resumed)",
        )
