"""The loopback HTTP server the kits' fakes run on, and the URLs a document names.

`LoopbackServer.serve(handler)` starts a threaded `http.server` on 127.0.0.1 (an ephemeral
port, daemon threads); `url(path)` and `close()` are the same for every fake (the release
server of the audit tests, acceptkit's asset server, hostile_http's fault server).
"""

from __future__ import annotations

import http.server
import sys
import threading
from typing import Any


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hanging up is what bounded clients do
            super().handle_error(request, client_address)


class LoopbackServer:
    httpd: http.server.ThreadingHTTPServer
    port: int
    base: str

    def serve(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        # A short poll interval: close() returns within 0.2 s (the suite starts and stops many servers).
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def https_urls(node: Any) -> list[str]:
    """Every string of a JSON document that is an https URL, in document order."""
    if isinstance(node, dict):
        return [url for value in node.values() for url in https_urls(value)]
    if isinstance(node, list):
        return [url for value in node for url in https_urls(value)]
    return [node] if isinstance(node, str) and node.startswith("https://") else []
