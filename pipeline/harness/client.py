"""How the harness talks to the runtime under test: its HTTP client and SSE reader.

The NInfer serving protocol as the harness speaks it
----------------------------------------------------
* ``GET /health`` (no key) -> 200 when the model is resident.
* ``GET /v1/models`` -> ``{"data": [{"id": ...}]}``.
* ``POST /v1/chat/completions`` (OpenAI Chat; ``stream: true`` gives SSE
  ``data: {chat.completion.chunk}`` events ending with ``data: [DONE]``;
  ``stream_options.include_usage`` adds a final usage chunk).
* ``POST /v1/responses`` with ``previous_response_id``, ``prompt_cache_key``
  (the session capability within one API-key principal), ``store``;
  ``GET``/``DELETE /v1/responses/{id}``; ``POST /v1/responses/input_tokens``
  counts the tokens of an input (used to size fixtures exactly).
* ``GET /v1/ninfer/status`` -> the runtime's identity: the nine build keys
  (top level, or under ``build``), ``deployment_profile``, ``binary_sha256``,
  ``config_sha256``, ``model_artifact_sha256`` (``artifact_sha256`` is
  accepted), ``listen`` ``{host, port}``, and ``instance_id`` (changes with
  every process start; used to prove that a restart replaced the process).
* Bearer authentication (``Authorization: Bearer <key>``) on everything but
  ``/health``.

Every answer is bounded (size and time) and read as strict JSON; the API key
is registered as a secret before the first request, so no message, log line
or receipt can show it.  A protocol step that does not get what the protocol
requires raises `GateFailure`, which the gate turns into a failed result.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import InputError, PipelineError, UsageError, register_secret
from pipeline.infra import net
from pipeline.util.jsonio import loads_document

MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a non-streamed answer of the runtime under test
MAX_STREAM_BYTES = 64 * 1024 * 1024  # one streamed chat completion


class GateFailure(Exception):
    """A step of a gate did not get what the protocol requires."""


_USE_KEY = object()


@dataclass
class ChatResult:
    status: int
    text: str
    usage: dict[str, Any]
    elapsed: float
    first_token_at: float | None = None  # seconds after the request was sent
    last_token_at: float | None = None
    content_events: int = 0
    well_formed: bool = True
    finish_reason: str | None = None


def normalise_base(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError("--endpoint is not an http(s) URL", found=url, expected="e.g. http://127.0.0.1:18082")
    if parts.username or parts.password:
        raise UsageError("--endpoint must not carry credentials", fix="pass the key with --api-key-file")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    netloc = parts.netloc
    return f"{parts.scheme}://{netloc}{path}"


class Client:
    def __init__(self, endpoint: str, api_key: str, *, timeout: float = 1800.0) -> None:
        import requests

        self.base = normalise_base(endpoint)
        parts = urlsplit(self.base)
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        register_secret(api_key)
        self.api_key = api_key
        # A wrong key that is certainly not the right one, never recorded.
        self.wrong_key = "wrong-" + secrets.token_hex(24)
        register_secret(self.wrong_key)
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy between the harness and a loopback endpoint
        # Answers are bounded: a non-streamed body is capped and read within the request's timeout.
        adapter = net.bounded_adapter(cap=MAX_ANSWER_BYTES, timeout=timeout, scheme=parts.scheme)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def url(self, path: str) -> str:
        return self.base + path

    def headers(self, key: Any = _USE_KEY) -> dict[str, str]:
        key = self.api_key if key is _USE_KEY else key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def request(self, method: str, path: str, *, key: Any = _USE_KEY, body: Any = None, timeout: float | None = None, stream: bool = False):
        import requests

        try:
            return self.session.request(
                method,
                self.url(path),
                headers={**self.headers(key), **({"Content-Type": "application/json"} if body is not None else {})},
                data=json.dumps(body).encode("utf-8") if body is not None else None,
                timeout=(10.0, timeout or self.timeout),
                stream=stream,
            )
        except requests.RequestException as exc:
            raise GateFailure(f"{method} {path} did not complete: {type(exc).__name__}") from None
        except PipelineError as error:  # the bounded adapter refused the answer (too large, another scheme)
            raise GateFailure(f"{method} {path}: {error.what}") from None

    def json_of(self, response, what: str) -> dict[str, Any]:
        try:
            document = loads_document(response.content, source=what)
        except InputError as error:
            raise GateFailure(f"{what} answered {response.status_code} with a body that is not strict JSON ({error.what})") from None
        if not isinstance(document, dict):
            raise GateFailure(f"{what} answered with JSON that is not an object")
        return document

    def expect_json(self, method: str, path: str, *, body: Any = None, status: int = 200, timeout: float | None = None) -> dict[str, Any]:
        response = self.request(method, path, body=body, timeout=timeout)
        if response.status_code != status:
            raise GateFailure(f"{method} {path} answered {response.status_code}, expected {status}")
        return self.json_of(response, f"{method} {path}")

    def health(self, timeout: float = 10.0) -> int | None:
        """The /health status code, or None when nothing answered."""
        import requests

        try:
            return self.session.get(self.url("/health"), timeout=(5.0, timeout)).status_code
        except (requests.RequestException, PipelineError):  # nothing usable answered (or an answer over the cap)
            return None

    def status(self) -> dict[str, Any]:
        return self.expect_json("GET", "/v1/ninfer/status", timeout=60)

    def count_tokens(self, model: str, text: str) -> int | None:
        response = self.request("POST", "/v1/responses/input_tokens", body={"model": model, "input": text}, timeout=300)
        if response.status_code in (404, 405, 501):
            return None
        if response.status_code != 200:
            raise GateFailure(f"POST /v1/responses/input_tokens answered {response.status_code}")
        document = self.json_of(response, "POST /v1/responses/input_tokens")
        value = document.get("input_tokens")
        if not isinstance(value, int) or isinstance(value, bool):
            raise GateFailure("POST /v1/responses/input_tokens did not report input_tokens")
        return value

    def respond(self, model: str, text: str, *, session: str | None, previous: str | None = None, max_tokens: int = 32, store: bool = True, timeout: float | None = None):
        body: dict[str, Any] = {"model": model, "input": text, "max_output_tokens": max_tokens, "temperature": 0, "store": store}
        if previous is not None:
            body["previous_response_id"] = previous
        if session is not None:
            body["prompt_cache_key"] = session
        return self.request("POST", "/v1/responses", body=body, timeout=timeout)

    def chat(self, model: str, text: str, *, max_tokens: int, stream: bool, timeout: float | None = None) -> ChatResult:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": 0,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        start = time.perf_counter()
        response = self.request("POST", "/v1/chat/completions", body=body, timeout=timeout, stream=stream)
        if response.status_code != 200:
            response.close()
            return ChatResult(response.status_code, "", {}, time.perf_counter() - start)
        if not stream:
            document = self.json_of(response, "POST /v1/chat/completions")
            elapsed = time.perf_counter() - start
            try:
                choice = document["choices"][0]
                text_out = choice["message"]["content"] or ""
            except (KeyError, IndexError, TypeError):
                raise GateFailure("a chat completion lacks choices[0].message.content") from None
            return ChatResult(200, text_out, document.get("usage") or {}, elapsed, finish_reason=choice.get("finish_reason"))
        return read_sse(response, start)


def response_text(document: dict[str, Any]) -> str:
    """The assistant text of a Responses API object."""
    if isinstance(document.get("output_text"), str):
        return document["output_text"]
    texts = []
    for item in document.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") in ("output_text", "text") and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "".join(texts)


def usage_int(usage: dict[str, Any], *keys: str) -> int | None:
    value: Any = usage
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_sse(response, start: float) -> ChatResult:
    """Read a chat completion's SSE stream: its text, usage, token arrival times and whether it is well formed
    (only `data:` events of `chat.completion.chunk` JSON, ending with one `[DONE]`); bounded by MAX_STREAM_BYTES."""
    pieces: list[str] = []
    usage: dict[str, Any] = {}
    first = last = None
    events = 0
    done = False
    well_formed = True
    finish = None
    buffer = b""
    received = 0
    try:
        for chunk in response.iter_content(chunk_size=None):
            arrived = time.perf_counter() - start
            received += len(chunk)
            if received > MAX_STREAM_BYTES:
                raise GateFailure(f"the streamed chat completion exceeded {MAX_STREAM_BYTES} bytes")
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if not line or line.startswith(b":"):
                    continue
                if not line.startswith(b"data:"):
                    if not line.startswith((b"event:", b"id:", b"retry:")):
                        well_formed = False
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    continue
                if done:
                    well_formed = False
                try:
                    event = loads_document(payload, source="a streamed chat completion event")
                except InputError:
                    well_formed = False
                    continue
                if not isinstance(event, dict) or not isinstance(event.get("choices") or [], list):
                    well_formed = False
                    continue
                if event.get("object") not in (None, "chat.completion.chunk"):
                    well_formed = False
                if isinstance(event.get("usage"), dict) and event["usage"]:
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    delta = (choice.get("delta") or {}) if isinstance(choice, dict) else None
                    if not isinstance(delta, dict):
                        well_formed = False
                        continue
                    content = delta.get("content")
                    if content is not None and not isinstance(content, str):
                        well_formed = False
                        continue
                    if content:
                        pieces.append(content)
                        events += 1
                        if first is None:
                            first = arrived
                        last = arrived
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
    finally:
        response.close()
    return ChatResult(
        200, "".join(pieces), usage, time.perf_counter() - start, first, last, events, well_formed and done, finish
    )


# -- reachability: where else the endpoint's port answers ----------------------------------


def local_non_loopback_addresses() -> list[str]:
    """This host's own non-loopback addresses (where a 0.0.0.0 bind would also answer)."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(info[4][0])
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((probe, 9))  # UDP: no packet is sent; the kernel picks the source address
            found.add(sock.getsockname()[0])
    result = []
    for address in found:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            continue
        if not (net.is_loopback(str(ip), allow_name=False) or ip.is_unspecified or ip.is_link_local):
            result.append(str(ip))
    return sorted(result)


def tcp_accepts(address: str, port: int, timeout: float = 1.0) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
        except OSError:
            return False
        return True
