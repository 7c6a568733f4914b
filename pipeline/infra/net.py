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
  bytes asked for, so a compressed answer cannot inflate past the limit.
"""

from __future__ import annotations

import ipaddress
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


def deadline_passed(label: str, url: str, count: int) -> DeadlinePassed:
    return DeadlinePassed(
        f"download of {label} ran past its deadline after {count} bytes",
        file=url,
        why="--timeout bounds the silence between bytes and, with retries, the whole download: after its first --timeout seconds a download must average 256 KiB/s (a server that drips bytes slowly is cut off)",
        fix="run the command again (partial bytes of a pinned file are resumed), or raise --timeout for a slow network",
    )


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
    encoded = response.headers.get("Content-Encoding", "identity").lower() not in ("", "identity")
    if limit is not None and length.isdigit() and not encoded and int(length) > limit:
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
