"""A real OCI registry for tests: Debian's `docker-registry` (distribution 2.8) on 127.0.0.1.

`RegistryServer` starts `docker-registry serve <config>` on a free port with a
filesystem store in a temporary folder (optionally with htpasswd basic auth),
waits until `GET /v2/` answers, and stops the process it started by its PID.
`FaultProxy` sits in front of it and injects the failures the push stage must
survive or refuse: a 5xx in the middle of a blob upload, a rewritten
`Docker-Content-Digest`.  This kit is a plugin of the suite (tests/conftest.py: pytest_plugins).
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from repokit import missing_dependency

CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {data}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
{auth}"""

AUTH = """\
auth:
  htpasswd:
    realm: omp-ninfer-test
    path: {htpasswd}
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require_tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"'{name}' is not installed (Debian package {package}); .ci/run installs it")
    return found


def bcrypt_hash(password: str) -> str:
    """An htpasswd bcrypt hash through the system's libcrypt (libxcrypt), without extra packages."""
    try:
        library = ctypes.CDLL("libcrypt.so.1")
    except OSError:
        missing_dependency("libcrypt.so.1 is not available to make an htpasswd file (Debian: libcrypt1)")
    library.crypt_gensalt.restype = ctypes.c_char_p
    library.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    library.crypt.restype = ctypes.c_char_p
    library.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = library.crypt_gensalt(b"$2b$", 5, None, 0)
    hashed = library.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2"):
        missing_dependency("this libcrypt cannot make bcrypt hashes (libxcrypt's libcrypt1 can)")
    return hashed.decode()


@dataclass
class RegistryServer:
    root: Path
    users: dict[str, str] | None = None
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RegistryServer:
        binary = require_tool("docker-registry", "docker-registry")
        self.root.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.users:
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text("".join(f"{user}:{bcrypt_hash(password)}\n" for user, password in self.users.items()))
            auth = AUTH.format(htpasswd=htpasswd)
        for _attempt in range(5):
            self.port = free_port()
            config = self.root / "config.yml"
            config.write_text(CONFIG.format(data=self.root / "data", port=self.port, auth=auth))
            log = open(self.root / "registry.log", "ab")  # noqa: SIM115 - owned by the process
            self.process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log, start_new_session=True)
            log.close()
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                    connection.request("GET", "/v2/")
                    status = connection.getresponse().status
                    connection.close()
                    if status in (200, 401):
                        return self
                except OSError:
                    time.sleep(0.1)
            self.stop()
        raise RuntimeError(f"docker-registry did not start; see {self.root / 'registry.log'}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def get(self, path: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """A raw request straight to the registry (bypassing any proxy), for assertions."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        connection.close()
        return response.status, dict(response.getheaders()), body

    def tags(self, repository: str) -> list[str]:
        status, _headers, body = self.get(f"/v2/{repository}/tags/list")
        if status == 404:
            return []
        import json

        return list(json.loads(body).get("tags") or [])

    def has_manifest(self, repository: str, digest: str) -> bool:
        accept = "application/vnd.oci.image.manifest.v1+json"
        return self.get(f"/v2/{repository}/manifests/{digest}", method="HEAD", headers={"Accept": accept})[0] == 200


@dataclass
class ProxyRule:
    """Answer matching requests with a fault `times` times (then pass them through)."""

    method: str
    path_contains: str
    times: int
    # "fail-500": read the body, answer 500 without forwarding; "rewrite-digest": forward, then
    # change Docker-Content-Digest; "corrupt-body": forward, then flip one byte of the answer.
    action: str
    seen: int = 0


@dataclass
class FaultProxy:
    target_port: int
    rules: list[ProxyRule] = field(default_factory=list)
    log: list[tuple[str, str, int]] = field(default_factory=list)
    port: int = 0
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                rule = next(
                    (r for r in proxy.rules if r.method == self.command and r.path_contains in self.path and r.seen < r.times),
                    None,
                )
                if rule is not None and rule.action == "fail-500":
                    rule.seen += 1
                    proxy.log.append((self.command, self.path, 500))
                    payload = b'{"errors":[{"code":"UNKNOWN","message":"injected failure in the middle of the upload"}]}'
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.target_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "content-length", "transfer-encoding")}
                if body or self.command in ("PUT", "POST", "PATCH"):
                    headers["Content-Length"] = str(len(body))
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                if rule is not None and rule.action == "corrupt-body" and data and response.status == 200:
                    rule.seen += 1
                    data = bytes([data[0] ^ 0x20]) + data[1:]
                proxy.log.append((self.command, self.path, response.status))
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() in ("connection", "transfer-encoding", "content-length"):
                        continue
                    if key.lower() == "docker-content-digest" and rule is not None and rule.action == "rewrite-digest":
                        rule.seen += 1
                        value = "sha256:" + "0" * 64
                    self.send_header(key, value)
                # A HEAD answer has no body but announces the length of the GET body.
                self.send_header("Content-Length", response.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                upstream.close()

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = do_HEAD = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def requests(self, method: str, contains: str = "") -> list[tuple[str, str, int]]:
        return [entry for entry in self.log if entry[0] == method and contains in entry[1]]


# -- fixtures (this kit is a plugin of the suite: tests/conftest.py pytest_plugins) ----

@pytest.fixture(scope="session")
def registry_server(tmp_path_factory) -> Iterator[RegistryServer]:
    """One docker-registry for the session; tests use their own repository names."""
    server = RegistryServer(tmp_path_factory.mktemp("registry")).start()
    yield server
    server.stop()


@pytest.fixture
def auth_registry(tmp_path) -> Iterator[RegistryServer]:
    """A registry with htpasswd basic auth: user 'pusher', password in `.users`."""
    server = RegistryServer(tmp_path / "auth-registry", users={"pusher": "pw-" + os.urandom(8).hex()}).start()
    yield server
    server.stop()


@pytest.fixture
def fault_proxy(registry_server) -> Iterator[Callable[..., FaultProxy]]:
    proxies: list[FaultProxy] = []

    def make(*rules: ProxyRule) -> FaultProxy:
        proxy = FaultProxy(registry_server.port, list(rules)).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        with contextlib.suppress(Exception):
            proxy.stop()
