"""Talking to an OCI distribution registry, on top of oras-py's primitives.

oras-py gives the pieces: the registry client and its `requests` session,
container URL building, the token and basic auth backends (Docker config
`auths`, credential helpers and credential stores included) and upload-session
`Location` handling.  This module adds what publication needs and oras-py
does not do:

- **bounded retries with backoff, and timeouts.** oras-py's `do_request`
  retries any exception five times with sleeps of 3, 5, 11, 29 and 83 s and
  never times out; here every request has a timeout, connection failures and
  429/5xx answers are retried `retries` times with exponential backoff, and
  then a RemoteError names the registry and the request;
- **digests are verified.** oras-py hashes nothing it pulls; every manifest
  and blob read through this module is hashed and compared with the digest
  it was asked for;
- **exact bytes.** manifests are PUT as the exact bytes given (never
  re-serialised) and the registry's `Docker-Content-Digest` is returned for
  the caller to compare;
- **blob uploads restart cleanly.** a monolithic upload (POST, then PUT of the
  whole blob, streamed from disk) that fails with a 5xx or a broken
  connection abandons its session and restarts that blob from byte 0;
- **credentials** come only from the environment (`PIPELINE_REGISTRY_USERNAME`
  and `PIPELINE_REGISTRY_PASSWORD`, for the push registry) or the standard
  Docker config file (`$DOCKER_CONFIG/config.json`, else
  `~/.docker/config.json`); every secret is registered with
  `errors.register_secret`, so no message or log line can show it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from pipeline.errors import InputError, IntegrityError, RemoteError, UsageError, register_secret
from pipeline.infra import image_reference, net
from pipeline.infra.net import authority_is_loopback
from pipeline.infra.oci import ACCEPT_ANY_MANIFEST, CHUNK, Descriptor, is_digest
from pipeline.util import ui
from pipeline.util.jsonio import expect_list, expect_object, loads_document, loads_object, read_json_object

ENV_USERNAME = "PIPELINE_REGISTRY_USERNAME"
ENV_PASSWORD = "PIPELINE_REGISTRY_PASSWORD"

RETRIES = 4
BACKOFF_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0
TIMEOUT_SECONDS = 60.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Caps of unstreamed answers (blobs stream and are bounded by their descriptor's size).
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # manifests (the OCI distribution spec's 4 MiB), token answers, tag lists
MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_DOCKER_CONFIG_BYTES = 1024 * 1024

# Docker Hub's names: what people write, and the host that serves the API.
DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_CONFIG_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")

# distribution's reference grammar lives in one place (pipeline/infra/image_reference.py).
REPOSITORY = image_reference.REPOSITORY
TAG = image_reference.TAG
_HOST = image_reference.HOST


# -- names ----------------------------------------------------------------

@dataclass(frozen=True)
class Repository:
    """A repository on a registry: `host[:port]/path`."""

    host: str  # as written by the user (docker.io, ghcr.io, 127.0.0.1:5000)
    path: str  # repository path (alphastorm/ninfer-runtime; library/ubuntu on Docker Hub)
    plain_http: bool = False

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.host in DOCKER_HUB_NAMES else self.host

    @property
    def name(self) -> str:
        return f"{self.host}/{self.path}"

    @property
    def scheme(self) -> str:
        return "http" if self.plain_http else "https"

    def at(self, digest: str) -> str:
        return f"{self.name}@{digest}"


_looks_like_host = image_reference.looks_like_host


def parse_push_target(value: str, *, plain_http: bool | None = None) -> Repository:
    """`HOST[:PORT]/REPO` as given to `push --registry`: no scheme, credentials, tag or digest."""
    text = value.strip()
    if "://" in text:
        raise UsageError(
            "the registry is named without a URL scheme",
            field="--registry",
            found=text.split("://", 1)[0] + "://…",
            expected="HOST[:PORT]/REPO, e.g. ghcr.io/alphastorm/ninfer-runtime",
            fix="drop the scheme; plain HTTP is used for loopback registries or with --plain-http",
        )
    host, _, path = text.partition("/")
    if "@" in host:
        # user:password@host — never echo it: register what stands before '@' as a secret.
        register_secret(host.rsplit("@", 1)[0])
        raise UsageError(
            "the registry argument carries credentials",
            field="--registry",
            found="[REDACTED]@" + host.rsplit("@", 1)[1],
            expected="HOST[:PORT]/REPO without user or password",
            why="command lines end up in shell history, process lists and CI logs",
            fix=f"set {ENV_USERNAME} and {ENV_PASSWORD} in the environment, or run 'docker login {host.rsplit('@', 1)[1]}'",
        )
    if not path or not _looks_like_host(host) or not _HOST.fullmatch(host):
        raise UsageError(
            "the registry must name a host and a repository",
            field="--registry",
            found=text,
            expected="HOST[:PORT]/REPO, e.g. ghcr.io/alphastorm/ninfer-runtime or 127.0.0.1:5000/alphastorm/ninfer-runtime",
        )
    if "@" in path or ":" in path:
        raise UsageError(
            "the registry argument names a tag or digest",
            field="--registry",
            found=text,
            expected="HOST[:PORT]/REPO only",
            why="the digest comes from the image built by the image stage and the tag from the lane (or --tag)",
            fix="drop the ':tag' or '@sha256:…' part; use --tag to choose the tag",
        )
    if not REPOSITORY.fullmatch(path):
        raise UsageError(
            "is not a valid repository path",
            field="--registry",
            found=path,
            expected="lowercase path components of [a-z0-9] separated by '.', '_', '__' or '-', joined by '/'",
        )
    if host in DOCKER_HUB_NAMES and "/" not in path:
        path = f"library/{path}"
    return Repository(host, path, authority_is_loopback(host) if plain_http is None else plain_http)


def parse_repository(value: str, *, origin: str, field_name: str) -> Repository:
    """A repository as written in a definition file (`nvidia/cuda`, `docker.io/nvidia/cuda`, `127.0.0.1:5000/x`)."""
    first, _, rest = value.partition("/")
    if rest and _looks_like_host(first):
        host, path = first, rest
    else:
        host, path = "docker.io", value
    if not REPOSITORY.fullmatch(path) or (host != "docker.io" and not _HOST.fullmatch(host)):
        raise InputError(
            "is not a repository name",
            file=origin,
            field=field_name,
            found=value,
            expected="[HOST[:PORT]/]PATH without tag or digest, e.g. docker.io/nvidia/cuda",
        )
    if host in DOCKER_HUB_NAMES and "/" not in path:
        path = f"library/{path}"
    return Repository(host, path, authority_is_loopback(host))


# -- credentials ------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    username: str
    basic: str  # base64("user:password"), the form oras-py's auth backends hold
    source: str

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"Credentials(username={self.username!r}, source={self.source!r})"


def docker_config_path() -> Path:
    directory = os.environ.get("DOCKER_CONFIG")
    return Path(directory) / "config.json" if directory else Path.home() / ".docker" / "config.json"


def _from_basic(basic: str, source: str) -> Credentials:
    register_secret(basic)
    try:
        user, _, password = base64.b64decode(basic).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        raise InputError("holds an 'auth' value that is not base64 of user:password", file=source) from None
    register_secret(password)
    return Credentials(user, basic, source)


def credentials_for(host: str, *, use_environment: bool) -> Credentials | None:
    """Credentials for `host`: the environment (push registry only), else the Docker config file."""
    if use_environment:
        user = os.environ.get(ENV_USERNAME, "")
        password = os.environ.get(ENV_PASSWORD, "")
        register_secret(password)
        if user or password:
            if not (user and password):
                missing = ENV_PASSWORD if user else ENV_USERNAME
                raise InputError(
                    f"{missing} is not set while its partner is",
                    field=missing,
                    expected=f"both {ENV_USERNAME} and {ENV_PASSWORD}, or neither (then the Docker config file is used)",
                )
            basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            register_secret(basic)
            return Credentials(user, basic, f"environment ({ENV_USERNAME}, {ENV_PASSWORD})")
    path = docker_config_path()
    if not path.is_file():
        return None
    try:
        config = read_json_object(path, strict_bytes=False, max_bytes=MAX_DOCKER_CONFIG_BYTES)
    except OSError as exc:
        raise InputError(f"Docker config file is not readable ({type(exc).__name__})", file=path, fix="repair it or run 'docker login' again") from None
    for key in ("auths", "credHelpers"):
        expect_object(config.get(key) or {}, source=path, field=key)
    for auth in (config.get("auths") or {}).values():
        if isinstance(auth, dict) and isinstance(auth.get("auth"), str):
            register_secret(auth["auth"])
    import oras.auth

    backend = oras.auth.get_auth_backend("basic")
    backend._basic_auth = None
    backend._auth_config = {
        "auths": dict(config.get("auths") or {}),
        "credsStore": config.get("credsStore"),
        "credHelpers": dict(config.get("credHelpers") or {}),
    }
    keys = DOCKER_HUB_CONFIG_KEYS if host in DOCKER_HUB_NAMES else (host, f"https://{host}", f"http://{host}")
    for key in keys:
        if backend._load_auth(key) and backend._basic_auth:
            return _from_basic(backend._basic_auth, str(path))
    return None


# -- the client -------------------------------------------------------------

def _oras_registry_class():
    import oras.provider

    class _Registry(oras.provider.Registry):
        # oras-py wraps do_request in a retry decorator (5 attempts, sleeps up to 83 s, on
        # any exception); the client below retries with its own bounds instead.
        do_request = oras.provider.Registry.do_request.__wrapped__

    return _Registry


def _strict_token_backend(session, plain_http: bool):
    """oras-py's token (OAuth2) backend, with the token service's answer read by the strict JSON reader.

    oras-py parses it with `response.json()` and calls `.get` on whatever came
    back: a list or a duplicate-key answer would be a traceback or read
    last-wins.  The request logic is oras-py's (`oras/auth/token.py`).
    """
    import oras.auth.token

    class StrictTokenAuth(oras.auth.token.TokenAuth):
        def _token_of(self, response, realm: str) -> str | None:
            if response.status_code != 200:
                return None
            where = f"the token service {urlsplit(realm).netloc}"
            document = loads_object(response.content, source=where, max_bytes=MAX_ANSWER_BYTES)
            token = document.get("token") or document.get("access_token")
            if token is not None and not isinstance(token, str):
                raise InputError("answered a token that is not a string", file=where, field="token", found=type(token).__name__, expected="string")
            if token:
                register_secret(token)
            return token or None

        def request_token(self, h):
            if not h.realm:
                # oras-py would call .startswith on None: a challenge without a realm names no token service.
                raise RemoteError(
                    "the registry's bearer challenge names no token service (no realm)",
                    field="WWW-Authenticate",
                    expected='Bearer realm="https://<token service>",service="<registry>"',
                    why="the registry asks for a token but does not say where to get one",
                    fix="check the registry's address (a proxy or a broken registry answers like this)",
                )
            params: dict[str, str] = {}
            headers: dict[str, str] = {}
            if h.service:
                params["service"] = h.service
                headers.update({"Service": h.service, "Accept": "application/json", "User-Agent": "oras-py"})
            if not h.realm.startswith("http"):
                h.realm = f"{self.prefix}://{h.realm}"
            if h.scope:
                params["scope"] = h.scope
            if getattr(self, "_basic_auth", None):
                headers["Authorization"] = f"Basic {self._basic_auth}"
            return self._token_of(self.session.get(h.realm, headers=headers, params=params, verify=self._tls_verify), h.realm)

        def request_anonymous_token(self, h):
            if not h.realm:
                return None
            params = {key: value for key, value in (("service", h.service), ("scope", h.scope)) if value}
            return self._token_of(self.session.request("GET", h.realm, params=params, verify=self._tls_verify), h.realm)

    backend = StrictTokenAuth()
    backend.session = session
    backend.prefix = "http" if plain_http else "https"
    backend._tls_verify = True
    return backend


class _Body:
    """A file streamed as a request body, counting bytes as they go out."""

    def __init__(self, path: Path, size: int, progress: Callable[[int], None] | None) -> None:
        self.handle = open(path, "rb")  # noqa: SIM115 - closed by the uploader
        self.size = size
        self.progress = progress
        self.sent = 0

    def __len__(self) -> int:
        return self.size

    def read(self, amount: int = -1) -> bytes:
        data = self.handle.read(CHUNK if amount is None or amount < 0 else amount)
        self.sent += len(data)
        if self.progress and data:
            self.progress(len(data))
        return data

    def close(self) -> None:
        self.handle.close()


def registry_error_text(response: requests.Response) -> str:
    """The registry's own words from an OCI error body (`errors[].code/message`)."""
    try:
        if getattr(response, "_content", b"") is False:  # a streamed answer not read yet: read a bounded part
            body = net.read_body(response, limit=MAX_ERROR_BODY_BYTES, deadline=time.monotonic() + TIMEOUT_SECONDS, label="an error answer", url=response.url)
        else:
            body = response.content
        document = loads_document(body, source=response.url or "the registry's answer")
        errors = document.get("errors") if isinstance(document, dict) else None
        if isinstance(errors, list):
            parts = [f"{e.get('code', '?')}: {e.get('message', '')}".strip() for e in errors if isinstance(e, dict)]
            return "; ".join(parts)[:300]
    except (InputError, RemoteError, requests.RequestException):
        pass  # not an OCI error body (or an unreadable one): fall back to the HTTP reason
    return (response.reason or "").strip()


@dataclass
class UploadStats:
    uploaded_blobs: int = 0
    uploaded_bytes: int = 0
    mounted_blobs: int = 0
    present_blobs: int = 0
    present_bytes: int = 0
    restarted_uploads: int = 0


class RegistryClient:
    def __init__(
        self,
        repository: Repository,
        *,
        credentials: Credentials | None,
        retries: int = RETRIES,
        backoff: float = BACKOFF_SECONDS,
        timeout: float = TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.repository = repository
        self.credentials = credentials
        self.retries = max(0, retries)
        self.backoff = backoff
        self.sleep = sleep
        registry_class = _oras_registry_class()
        self._oras = registry_class(hostname=repository.api_host, insecure=repository.plain_http)
        # Every request of the session (oras-py's token requests included, and every redirect
        # requests follows) gets a timeout, a capped body unless streamed, and one scheme.
        adapter = net.bounded_adapter(cap=MAX_ANSWER_BYTES, timeout=timeout, scheme=repository.scheme)
        self._oras.session.mount("http://", adapter)
        self._oras.session.mount("https://", adapter)
        self._oras.auth = _strict_token_backend(self._oras.session, repository.plain_http)
        import oras.container

        self.container = oras.container.Container(repository.path, registry=repository.api_host)
        self.attempts = 0  # requests sent, for tests and reports
        self._pinged = False

    # -- low level ---------------------------------------------------------
    @property
    def where(self) -> str:
        return f"{self.repository.scheme}://{self.repository.api_host}"

    def url(self, path: str) -> str:
        return f"{self.repository.scheme}://{path}"

    def _send(self, method: str, url: str, *, headers: dict[str, str] | None, data: Any, stream: bool, raw: bool = False) -> requests.Response:
        import oras.auth

        headers = dict(headers or {})
        if raw:
            # Without oras-py's authentication handling: the API check must see the challenge.
            self.attempts += 1
            return self._oras.session.request(method, url, headers=headers, data=data, stream=stream)
        auth = self._oras.auth
        if isinstance(auth, oras.auth.BasicAuth) and getattr(auth, "_basic_auth", None):
            # Send basic credentials up front: a streamed body cannot be re-sent after a 401.
            headers["Authorization"] = f"Basic {auth._basic_auth}"
        self.attempts += 1
        try:
            response = self._oras.do_request(url, method, data=data, headers=headers, stream=stream)
            if response.status_code == 401 and getattr(auth, "token", None) and not hasattr(data, "read"):
                # A token scoped for pulling does not allow pushing: drop it and ask again.
                auth.token = None
                response.close()
                response = self._oras.do_request(url, method, data=data, headers=dict(headers), stream=stream)
        except ValueError as exc:
            # oras-py raises ValueError when it cannot answer an authentication challenge.
            raise RemoteError(
                f"the registry {self.repository.api_host} refused authentication for {method} {self._short(url)}",
                why=str(exc),
                fix=self._credentials_fix(),
            ) from None
        token = getattr(auth, "token", None)
        if token:
            register_secret(token)
        return response

    def _credentials_fix(self) -> str:
        if self.credentials is None:
            return f"set {ENV_USERNAME} and {ENV_PASSWORD}, or run 'docker login {self.repository.host}'"
        return f"check the credentials from {self.credentials.source} and that they may push to {self.repository.name}"

    def _short(self, url: str) -> str:
        return url.split("?", 1)[0].replace(f"{self.repository.scheme}://", "")

    def request(
        self,
        method: str,
        url: str,
        *,
        what: str,
        headers: dict[str, str] | None = None,
        data: Any = None,
        stream: bool = False,
        raw: bool = False,
    ) -> requests.Response:
        """One request with bounded retries on connection errors, 408/429 and 5xx."""
        attempt = 0
        while True:
            attempt += 1
            body = data() if callable(data) else data
            try:
                response = self._send(method, url, headers=headers, data=body, stream=stream, raw=raw)
            except requests.RequestException as exc:
                reason = type(exc).__name__
                if attempt > self.retries:
                    raise RemoteError(
                        f"cannot reach the registry {self.repository.api_host}: {what} failed {attempt} times ({reason})",
                        file=self.where,
                        why=f"{attempt} attempts with exponential backoff all failed; the registry is down, unreachable or not speaking {self.repository.scheme.upper()}",
                        fix=f"check that the registry at {self.where} is running and reachable, then run the command again",
                    ) from None
                self._backoff(attempt, what, reason)
                continue
            finally:
                if hasattr(body, "close"):
                    body.close()
            if response.status_code in TRANSIENT_STATUS:
                if attempt > self.retries:
                    detail = registry_error_text(response)
                    response.close()
                    raise RemoteError(
                        f"the registry {self.repository.api_host} kept answering HTTP {response.status_code} to {what}",
                        file=self.where,
                        why=f"{attempt} attempts with exponential backoff; its last answer: {detail or 'no detail'}",
                        fix="try again later; if it persists, check the registry's logs and storage",
                    )
                self._backoff(attempt, what, f"HTTP {response.status_code}")
                response.close()
                continue
            return response

    def _backoff(self, attempt: int, what: str, reason: str) -> None:
        delay = min(self.backoff * 2 ** (attempt - 1), BACKOFF_CAP_SECONDS)
        ui.warn(f"{self.repository.api_host}: {what} failed ({reason}); retry {attempt} of {self.retries} in {delay:.1f} s")
        self.sleep(delay)

    def fail(self, response: requests.Response, what: str, *, error=RemoteError, fix: str | None = None) -> RemoteError:
        status = response.status_code
        detail = registry_error_text(response)
        if status in (401, 403):
            return RemoteError(
                f"the registry {self.repository.api_host} denied {what} (HTTP {status})",
                file=self.where,
                why=detail or None,
                fix=self._credentials_fix(),
            )
        return error(
            f"the registry {self.repository.api_host} answered HTTP {status} to {what}",
            file=self.where,
            why=detail or None,
            fix=fix,
        )

    # -- session -----------------------------------------------------------
    def ping(self) -> None:
        """GET /v2/: check the API is there and pick the authentication the registry asks for."""
        if self._pinged:
            return
        import oras.auth

        url = self.url(f"{self.repository.api_host}/v2/")
        response = self.request("GET", url, what="GET /v2/ (API check)", raw=True)
        challenge = response.headers.get("WWW-Authenticate", "")
        response.close()
        if response.status_code == 401:
            scheme = challenge.split(" ", 1)[0].lower()
            if scheme == "basic":
                if self.credentials is None:
                    raise RemoteError(
                        f"the registry {self.repository.api_host} requires credentials and none were found",
                        file=self.where,
                        fix=self._credentials_fix(),
                    )
                backend = oras.auth.get_auth_backend("basic", self._oras.session, self.repository.plain_http)
                backend._basic_auth = self.credentials.basic
                self._oras.auth = backend
                check = self.request("GET", url, what="GET /v2/ (credentials check)")
                check.close()
                if check.status_code != 200:
                    raise self.fail(check, "our credentials")
            elif scheme == "bearer":
                backend = _strict_token_backend(self._oras.session, self.repository.plain_http)
                if self.credentials is not None:
                    backend._basic_auth = self.credentials.basic
                self._oras.auth = backend
            else:
                raise RemoteError(f"the registry {self.repository.api_host} asks for an unsupported authentication scheme", file=self.where, found=scheme or challenge)
        elif response.status_code != 200:
            raise RemoteError(
                f"{self.where} does not answer like an OCI distribution registry (GET /v2/ gave HTTP {response.status_code})",
                file=self.where,
                fix="check the host and port of --registry",
            )
        self._pinged = True

    # -- manifests ---------------------------------------------------------
    def get_manifest(self, reference: str, *, accept: str = ACCEPT_ANY_MANIFEST) -> tuple[bytes, str, str | None] | None:
        """(bytes, media type, Docker-Content-Digest) of a manifest or index; None when unknown.

        When `reference` is a digest, the bytes are verified against it here.
        """
        self.ping()
        url = self.url(self.container.manifest_url(reference))
        what = f"GET manifest {reference} of {self.repository.path}"
        response = self.request("GET", url, what=what, headers={"Accept": accept})
        if response.status_code == 404:
            response.close()
            return None
        if response.status_code != 200:
            raise self.fail(response, what)
        data = response.content
        header = response.headers.get("Docker-Content-Digest")
        media_type = (response.headers.get("Content-Type") or "").split(";")[0].strip()
        if is_digest(reference):
            found = "sha256:" + hashlib.sha256(data).hexdigest()
            if found != reference:
                raise IntegrityError(
                    f"the registry {self.repository.api_host} served other bytes for manifest {reference}",
                    file=self.repository.at(reference),
                    found=found,
                    expected=reference,
                    why="a manifest is addressed by the SHA-256 of its bytes (oras-py does not check this; the pipeline does)",
                )
        return data, media_type, header

    def manifest_digest(self, reference: str) -> str | None:
        """The digest a tag (or digest) currently resolves to; None when it does not exist."""
        self.ping()
        url = self.url(self.container.manifest_url(reference))
        what = f"HEAD manifest {reference} of {self.repository.path}"
        response = self.request("HEAD", url, what=what, headers={"Accept": ACCEPT_ANY_MANIFEST})
        response.close()
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self.fail(response, what)
        header = response.headers.get("Docker-Content-Digest")
        if is_digest(header):
            return header
        fetched = self.get_manifest(reference)
        return None if fetched is None else "sha256:" + hashlib.sha256(fetched[0]).hexdigest()

    def put_manifest(self, reference: str, data: bytes, media_type: str) -> str | None:
        """PUT the exact manifest bytes; return the registry's Docker-Content-Digest."""
        self.ping()
        url = self.url(self.container.manifest_url(reference))
        what = f"PUT manifest {reference} to {self.repository.path}"
        response = self.request("PUT", url, what=what, headers={"Content-Type": media_type}, data=data)
        response.close()
        if response.status_code not in (200, 201):
            raise self.fail(response, what)
        return response.headers.get("Docker-Content-Digest")

    # -- blobs -------------------------------------------------------------
    def blob_size(self, digest: str) -> int | None:
        """HEAD a blob: its size when the registry has it, None when not."""
        self.ping()
        url = self.url(self.container.get_blob_url(digest))
        what = f"HEAD blob {digest[:19]}…"
        response = self.request("HEAD", url, what=what)
        response.close()
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self.fail(response, what)
        length = response.headers.get("Content-Length", "")
        return int(length) if length.isdigit() else -1

    def fetch_blob(self, descriptor: Descriptor, target: Path | None = None, *, label: str | None = None) -> None:
        """GET a blob, hashing while it streams; write it to `target` (atomically) or only verify it."""
        self.ping()
        url = self.url(self.container.get_blob_url(descriptor.digest))
        what = f"GET blob {descriptor.digest[:19]}…"
        attempt = 0
        while True:
            attempt += 1
            response = self.request("GET", url, what=what, stream=True)
            if response.status_code != 200:
                raise self.fail(
                    response,
                    what,
                    fix="the digest may be wrong, or the blob was deleted from the registry" if response.status_code == 404 else None,
                )
            digest = hashlib.sha256()
            size = 0
            part = target.with_name(f".{target.name}.part") if target is not None else None
            bar = ui.ByteProgress(label or what, descriptor.size) if descriptor.size > 8 * CHUNK else None
            try:
                sink = open(part, "wb") if part is not None else None  # noqa: SIM115
                try:
                    for chunk in response.iter_content(CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        if size > descriptor.size:
                            break
                        if sink is not None:
                            sink.write(chunk)
                        if bar:
                            bar(len(chunk))
                finally:
                    if sink is not None:
                        sink.close()
                    response.close()
            except requests.RequestException as exc:
                if part is not None and part.exists():
                    part.unlink()
                if attempt > self.retries:
                    raise RemoteError(
                        f"download of blob {descriptor.digest} from {self.repository.api_host} broke off {attempt} times ({type(exc).__name__})",
                        file=self.where,
                        fix="run the command again",
                    ) from None
                self._backoff(attempt, what, type(exc).__name__)
                continue
            if bar:
                bar.finish()
            found = "sha256:" + digest.hexdigest()
            if found != descriptor.digest or size != descriptor.size:
                if part is not None and part.exists():
                    part.unlink()
                raise IntegrityError(
                    f"the registry {self.repository.api_host} served other bytes for blob {descriptor.digest}",
                    file=self.repository.at(descriptor.digest),
                    found=f"{found} ({size}{'+' if size > descriptor.size else ''} bytes)",
                    expected=f"{descriptor.digest} ({descriptor.size} bytes)",
                    why="blobs are addressed by the SHA-256 of their bytes (oras-py does not check this; the pipeline does)",
                )
            if part is not None and target is not None:
                os.replace(part, target)
            return

    def mount_blob(self, digest: str, source_path: str) -> bool:
        """Ask the registry to link a blob from another repository on it (no bytes move)."""
        self.ping()
        url = self.url(self.container.upload_blob_url()) + f"?mount={digest}&from={source_path}"
        response = self.request("POST", url, what=f"mount blob {digest[:19]}… from {source_path}", headers={"Content-Length": "0"})
        response.close()
        if response.status_code == 201:
            return True
        if response.status_code == 202:
            # The registry opened an ordinary upload session instead: cancel it.
            self._cancel(response)
        return False

    def _cancel(self, response: requests.Response) -> None:
        location = self._oras._get_location(response, self.container)
        if location:
            # Best effort: abandoned sessions also expire on the registry by themselves.
            with contextlib.suppress(requests.RequestException, RemoteError):
                self._send("DELETE", location, headers=None, data=None, stream=False).close()

    def upload_blob(self, path: Path, descriptor: Descriptor, *, label: str) -> int:
        """Upload one blob (POST + streamed PUT); on a 5xx or a broken connection restart it.

        Returns the number of attempts that were restarted.
        """
        import oras.utils

        self.ping()
        start_url = self.url(self.container.upload_blob_url())
        restarts = 0
        while True:
            what = f"upload of blob {descriptor.digest[:19]}… ({label})"
            opened = self.request("POST", start_url, what=f"start {what}", headers={"Content-Length": "0"})
            opened.close()
            if opened.status_code != 202:
                raise self.fail(opened, f"start {what}")
            location = self._oras._get_location(opened, self.container)
            if not location:
                raise RemoteError(f"the registry {self.repository.api_host} opened an upload without a Location", file=self.where)
            put_url = oras.utils.append_url_params(location, {"digest": descriptor.digest})
            bar = ui.ByteProgress(f"upload {label}", descriptor.size) if descriptor.size > 8 * CHUNK else None
            body = _Body(path, descriptor.size, bar)
            failure: str | None = None
            response = None
            try:
                response = self._send(
                    "PUT",
                    put_url,
                    headers={"Content-Type": "application/octet-stream", "Content-Length": str(descriptor.size)},
                    data=body if descriptor.size else b"",
                    stream=False,
                )
            except requests.RequestException as exc:
                failure = f"{type(exc).__name__} after {body.sent} of {descriptor.size} bytes"
            finally:
                body.close()
            if response is not None:
                response.close()
                if response.status_code == 201:
                    if bar:
                        bar.finish()
                    answered = response.headers.get("Docker-Content-Digest")
                    if answered and answered != descriptor.digest:
                        raise IntegrityError(
                            f"the registry {self.repository.api_host} stored blob {descriptor.digest} under another digest",
                            file=self.where,
                            found=answered,
                            expected=descriptor.digest,
                        )
                    return restarts
                detail = registry_error_text(response)
                if response.status_code in TRANSIENT_STATUS or (response.status_code == 400 and "DIGEST_INVALID" in detail):
                    failure = f"HTTP {response.status_code}{': ' + detail if detail else ''}"
                else:
                    raise self.fail(response, what)
            # The blob did not arrive whole: abandon this session and send the blob again from byte 0.
            self._cancel(opened)
            restarts += 1
            if restarts > self.retries:
                raise RemoteError(
                    f"{what} to {self.repository.api_host} failed {restarts} times",
                    file=self.where,
                    why=f"the last attempt ended with {failure}",
                    fix="check the registry's health and storage, then run push again (blobs already there are not sent again)",
                )
            delay = min(self.backoff * 2 ** (restarts - 1), BACKOFF_CAP_SECONDS)
            ui.warn(f"{self.repository.api_host}: {what} broke off ({failure}); restarting that blob from byte 0 in {delay:.1f} s (restart {restarts} of {self.retries})")
            self.sleep(delay)

    def tags(self) -> list[str]:
        self.ping()
        url = self.url(self.container.tags_url())
        response = self.request("GET", url, what=f"list tags of {self.repository.path}")
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise self.fail(response, "list tags")
        document = loads_object(response.content, source=url)
        tags = expect_list(document.get("tags") or [], source=url, field="tags")
        if not all(isinstance(tag, str) for tag in tags):
            raise InputError("lists tags that are not strings", file=url, field="tags")
        return tags


# -- anonymous pulls by digest (audit) ---------------------------------------

MAX_TOKEN_ANSWER_BYTES = 64 * 1024  # a token service's JSON answer to an anonymous pull


def bearer_challenge(header: str) -> dict[str, str] | None:
    """The parameters of a `WWW-Authenticate: Bearer realm="…",service="…",scope="…"` challenge, else None."""
    if not header.lower().startswith("bearer "):
        return None
    return dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', header[7:]))


def fetch_manifest_by_digest(host: str, name: str, digest: str, *, session, timeout: float = TIMEOUT_SECONDS) -> tuple[bytes, str]:
    """GET /v2/<name>/manifests/<digest> as an anonymous puller (audit); returns (bytes, media type).

    A 401 with a Bearer challenge is answered with the anonymous token flow
    (GHCR and Docker Hub serve public images so).  Every answer is capped
    (MAX_ANSWER_BYTES for the manifest, MAX_TOKEN_ANSWER_BYTES for the token
    service) and read within `timeout` overall through `pipeline.infra.net`,
    whose loopback rule picks plain HTTP and whose redirect rule keeps every
    request on the registry's origin.  The caller hashes the bytes against
    the digest: a mismatch is its finding, not a transport error.
    """
    scheme = "http" if authority_is_loopback(host) else "https"
    url = f"{scheme}://{host}/v2/{name}/manifests/{digest}"
    headers = {"Accept": ACCEPT_ANY_MANIFEST}

    def get(location: str, cap: int, what: str, **kwargs: Any):
        return net.fetch_bytes(session, location, cap=cap, timeout=timeout, what=what, redirects="same-origin", label=what, accept_status=lambda status: True, **kwargs)

    response, body = get(url, MAX_ANSWER_BYTES, f"manifest {digest}", headers=headers)
    if response.status_code == 401:
        challenge = bearer_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None or "realm" not in challenge:
            raise RemoteError(f"the registry {host} requires credentials for {name} (HTTP 401 without an anonymous token challenge)", file=url)
        realm = challenge["realm"]
        problem = net.scheme_problem(realm)
        if problem:
            raise RemoteError(f"the registry's token realm {realm} {problem}", file=url)
        params = {"scope": challenge.get("scope") or f"repository:{name}:pull"}
        if challenge.get("service"):
            params["service"] = challenge["service"]
        token_response, answer = get(realm, MAX_TOKEN_ANSWER_BYTES, "the registry's token answer", params=params)
        if token_response.status_code != 200:
            raise RemoteError(f"the registry's token service answered HTTP {token_response.status_code} for an anonymous pull token of {name}", file=realm)
        payload = loads_object(answer, source=realm, max_bytes=MAX_TOKEN_ANSWER_BYTES)
        token = payload.get("token") or payload.get("access_token")
        if not isinstance(token, str) or not token:
            raise RemoteError("the registry's token service returned no token", file=realm, found=sorted(payload)[:8], expected="an object with 'token' or 'access_token'")
        register_secret(token)
        response, body = get(url, MAX_ANSWER_BYTES, f"manifest {digest}", headers={**headers, "Authorization": f"Bearer {token}"})
    if response.status_code == 404:
        raise RemoteError(f"the registry has no manifest {digest} in {host}/{name} (HTTP 404)", file=url)
    if response.status_code != 200:
        raise RemoteError(f"the registry answered HTTP {response.status_code} for manifest {digest}", file=url)
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip() or "unknown"
    return body, media_type
