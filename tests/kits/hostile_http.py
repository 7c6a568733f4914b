"""A hostile HTTP server on 127.0.0.1 for the bounded-download tests.

Each path maps to a behaviour: a body (with or without an honest
Content-Length), an endless stream, a slow drip, a redirect, a gzip-encoded
answer, a file served by HTTP Range (`ranged`, honest or with one of
`RANGE_FAULTS`).  Every behaviour is bounded on the server side too (at most
`HARD_LIMIT` bytes, at most `TIME_LIMIT` seconds per request), the server
counts what it sent, and it stops when the test's `with` block ends.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from loopback import LoopbackServer

HARD_LIMIT = 512 * 1024 * 1024  # no behaviour sends more than this
# How a `ranged` route misbehaves: answer 200 with the whole file, shift the range it sends, claim
# another total size, send no Content-Range, hang up mid-range on the first `breaks` ranged
# requests, or redirect ranged requests after the first to `location`; `stall` sends half of every
# range and then nothing (until TIME_LIMIT), `long-body` sends each range without a Content-Length and
# with a kilobyte more than its Content-Range declares; `gzip-when-asked` serves ranges of the gzip
# representation (its own size as the total, as a compressing CDN does) to a client whose
# Accept-Encoding names gzip, `gzip-always` to every client.
RANGE_FAULTS = ("", "ignore-range", "wrong-range", "other-total", "no-content-range", "break", "redirect-later", "stall", "long-body",
                "gzip-when-asked", "gzip-always")
TIME_LIMIT = 20.0  # no request is served longer than this


@dataclass
class Route:
    kind: str  # body | endless | drip | redirect | ranged
    body: bytes = b""
    length: int | None = None  # the Content-Length sent; None: the body's own length (body) or none (streams); -1: none
    location: str = ""
    status: int = 200
    interval: float = 0.0  # seconds between drip bytes (ranged: between 64 KiB blocks)
    headers: dict[str, str] = field(default_factory=dict)
    fault: str = ""  # ranged: one of RANGE_FAULTS
    breaks: int = 0  # ranged, fault "break": how many ranged requests hang up halfway


class HostileServer(LoopbackServer):
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.sent: dict[str, int] = {}  # path -> body bytes written (all requests)
        self.requests: list[str] = []
        self.ranges: list[str] = []  # the Range header of every request to a ranged route ("" for none)
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                with server.lock:
                    server.requests.append(path)
                route = server.routes.get(path)
                if route is None:
                    return self._head(404, 0)
                started = time.monotonic()
                if route.kind == "redirect":
                    return self._head(route.status, 0, {"Location": route.location})
                if route.kind == "ranged":
                    return self._ranged(path, route)
                if route.kind == "body":
                    length = len(route.body) if route.length is None else route.length
                    self._head(route.status, None if length == -1 else length, route.headers)
                    self._write(path, route.body)
                    return
                self._head(route.status, None if route.length in (None, -1) else route.length, route.headers)
                if route.kind == "endless":
                    block = b"x" * 65536
                    while server.sent.get(path, 0) < HARD_LIMIT and time.monotonic() - started < TIME_LIMIT:
                        if not self._write(path, block):
                            return
                elif route.kind == "drip":
                    while server.sent.get(path, 0) < HARD_LIMIT and time.monotonic() - started < TIME_LIMIT:
                        if not self._write(path, b"y"):
                            return
                        time.sleep(route.interval)
                self.close_connection = True

            def _ranged(self, path: str, route: Route) -> None:
                asked = self.headers.get("Range", "")
                body, size = route.body, len(route.body)
                with server.lock:
                    server.ranges.append(asked)
                    ranged_before = sum(1 for value in server.ranges if value) - (1 if asked else 0)
                match = re.fullmatch(r"bytes=(\d+)-(\d*)", asked)
                if match is None or route.fault == "ignore-range":
                    self._head(200, size, route.headers)
                    self._write(path, body)
                    return
                if route.fault == "redirect-later" and ranged_before > 0:
                    return self._head(302, 0, {"Location": route.location})
                headers = dict(route.headers)
                if route.fault == "gzip-always" or (route.fault == "gzip-when-asked" and "gzip" in self.headers.get("Accept-Encoding", "")):
                    body = gzip.compress(body, mtime=0)
                    size = len(body)
                    headers["Content-Encoding"] = "gzip"
                start = int(match.group(1))
                end = min(size, int(match.group(2)) + 1) if match.group(2) else size
                shown = (start + 1, end) if route.fault == "wrong-range" else (start, end)
                total = size + 1 if route.fault == "other-total" else size
                if route.fault != "no-content-range":
                    headers["Content-Range"] = f"bytes {shown[0]}-{shown[1] - 1}/{total}"
                if route.fault == "long-body":
                    self._head(206, None, headers)
                    self._write(path, body[start:end] + b"x" * 1024)
                    return
                self._head(206, end - start, headers)
                if route.fault == "stall":
                    self._write(path, body[start:start + (end - start) // 2])
                    stalled = time.monotonic()
                    while time.monotonic() - stalled < TIME_LIMIT:
                        time.sleep(0.05)
                    return
                if route.fault == "break" and ranged_before < route.breaks:
                    self._write(path, body[start:start + (end - start) // 2])
                    self.close_connection = True
                    self.connection.shutdown(2)  # hang up mid-body: the client sees a short read
                    return
                if route.interval:  # paced, like a CDN's per-connection cap
                    for offset in range(start, end, 65536):
                        if not self._write(path, body[offset:min(end, offset + 65536)]):
                            return
                        time.sleep(route.interval)
                    return
                self._write(path, body[start:end])

            def _head(self, status: int, length: int | None, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                if length is not None:
                    self.send_header("Content-Length", str(length))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()

            def _write(self, path: str, data: bytes) -> bool:
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                except OSError:  # the client hung up: that is what a bounded client does
                    self.close_connection = True
                    return False
                with server.lock:
                    server.sent[path] = server.sent.get(path, 0) + len(data)
                return True

        self.serve(Handler)

    def add(self, path: str, route: Route) -> str:
        self.routes[path] = route
        return self.url(path)



@contextlib.contextmanager
def hostile_server() -> Iterator[HostileServer]:
    server = HostileServer()
    try:
        yield server
    finally:
        server.close()


def timed(call: Callable[[], object]) -> tuple[object, float]:
    started = time.monotonic()
    try:
        result: object = call()
    except Exception as exc:  # noqa: BLE001 - the caller inspects what was raised
        result = exc
    return result, time.monotonic() - started
