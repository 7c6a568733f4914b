"""A small protocol-faithful NInfer server for the qualification tests.

It speaks what the harness speaks (see pipeline/harness/client.py): `/health`,
`/v1/models`, `/v1/chat/completions` (JSON and chunked SSE), `/v1/responses`
with `previous_response_id`, `prompt_cache_key` sessions, forks, `GET`/`DELETE
/v1/responses/{id}`, `/v1/responses/input_tokens`, and `/v1/ninfer/status`,
behind bearer authentication.  Its "model" is deterministic: tokens are
whitespace-separated words; it remembers "code words" and finds a planted
"archive verification number" anywhere in its context (so a 130,048-token
needle works), and otherwise continues with words derived from a hash of the
context, exactly `max_tokens` of them, paced at a configurable decode rate.

Every behaviour a gate checks can be broken with a `Faults` switch, so each
gate can be made to fail for the reason it exists.  Responses persist in a
`State` that survives `restart()` (the durable checkpoint store), unless the
fault says otherwise; run as a script it keeps that state in a JSON file, so a
real process can be stopped and started by `--restart-command`:

    python tests/kits/ninfer_fake_server.py start -- --port P --api-key-file K --identity J --state S --pidfile F
    python tests/kits/ninfer_fake_server.py restart --pidfile F
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

WORDS = ("river", "stone", "lamp", "cloud", "garden", "paper", "window", "engine", "forest", "signal", "copper", "harbor")
PER_MESSAGE_TOKENS = 3


@dataclass
class Faults:
    status_overrides: dict[str, Any] = field(default_factory=dict)  # wrong binary/config/model/profile/build key
    auth_disabled: bool = False  # no key needed
    accept_any_key: bool = False  # any non-empty key accepted
    report_bind: str | None = None  # what the status endpoint says it listens on
    bind_all: bool = False  # really listen on 0.0.0.0
    broken_continuation: bool = False  # previous_response_id accepted but its context ignored
    shared_forks: bool = False  # forks append to their parent's context (state leaks between forks)
    delete_noop: bool = False  # DELETE answers 200 but keeps the response
    session_leak: bool = False  # prompt_cache_key not enforced
    stream_differs: bool = False  # streamed text differs from the non-streamed text
    stream_no_done: bool = False  # SSE stream without the final [DONE]
    wrong_nonce: bool = False  # recalls a number off by one
    context_window: int | None = None  # only the last N tokens are "seen" (long prompts lose the nonce)
    count_tokens_missing: bool = False  # no /v1/responses/input_tokens
    short_completion: int | None = None  # stop after N tokens
    decode_tokens_per_second: float = 20000.0
    prefill_tokens_per_second: float = 5_000_000.0
    first_token_delay: float = 0.0  # extra latency before the first streamed token
    restart_fails: bool = False  # the process does not come back
    restart_loses_state: bool = False  # responses are gone after a restart
    restart_same_instance: bool = False  # the process is not really replaced
    restart_delay: float = 0.0


@dataclass
class Stored:
    id: str
    principal: str
    session: str | None
    messages: list[dict[str, str]]  # the full context including this response's output
    output: str
    input_tokens: int
    output_tokens: int

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class State:
    """The durable response store (what session checkpoints hold)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.responses: dict[str, Stored] = {}
        if path is not None and path.exists():
            for item in json.loads(path.read_text()):
                self.responses[item["id"]] = Stored(**item)

    def save(self) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps([r.to_json() for r in self.responses.values()]))
            os.replace(tmp, self.path)


def count(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"].split()) + PER_MESSAGE_TOKENS for m in messages)


class FakeNInfer:
    def __init__(
        self,
        *,
        api_key: str,
        identity: dict[str, Any],
        model_id: str = "q38-ninfer",
        faults: Faults | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        state: State | None = None,
    ) -> None:
        self.api_key = api_key
        self.identity = identity
        self.model_id = model_id
        self.faults = faults or Faults()
        self.host = "0.0.0.0" if self.faults.bind_all else host
        self.port = port
        self.state = state or State()
        self.instance_id = secrets.token_hex(8)
        self.httpd: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.requests_seen: list[str] = []

    # -- lifecycle (the controller the restart gate drives) ---------------
    def start(self) -> FakeNInfer:
        server = self

        class Handler(_Handler):
            fake = server

        self.httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def describe(self) -> str:
        return "in-process controller"

    def restart(self) -> None:
        self.stop()
        if self.faults.restart_fails:
            return
        if self.faults.restart_loses_state:
            self.state.responses.clear()
        if not self.faults.restart_same_instance:
            self.instance_id = secrets.token_hex(8)
        time.sleep(self.faults.restart_delay)
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeNInfer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the "model" -----------------------------------------------------------
    def generate(self, messages: list[dict[str, str]], max_tokens: int) -> list[str]:
        faults = self.faults
        question = messages[-1]["content"] if messages else ""
        seen = messages
        if faults.context_window is not None:
            text = " ".join(m["content"] for m in messages).split()
            seen = [{"role": "user", "content": " ".join(text[-faults.context_window:])}]
        context = "\n".join(m["content"] for m in seen)
        if re.search(r"Remember the \w+ code word: \S+?\.", question):
            return ["OK"]
        asked = re.search(r"What is the (\w+) code word\?", question)
        if asked:
            found = re.findall(rf"Remember the {asked.group(1)} code word: (\S+?)\.", context)
            return [found[-1]] if found else ["I", "do", "not", "know."]
        if "archive verification number" in question:
            found = re.findall(r"archive verification number is ([0-9]+)", context)
            if not found:
                return ["I", "do", "not", "know."]
            number = int(found[-1]) + (1 if faults.wrong_nonce else 0)
            return [str(number)]
        digest = hashlib.sha256(context.encode()).digest()
        limit = max_tokens if faults.short_completion is None else min(max_tokens, faults.short_completion)
        return [WORDS[(digest[i % 32] + i) % len(WORDS)] for i in range(limit)]


def _join(tokens: list[str]) -> str:
    return " ".join(tokens)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeNInfer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    # -- plumbing ----------------------------------------------------------------
    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = None
        return data if isinstance(data, dict) else {}

    def _send(self, status: int, document: Any) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")  # a restart must not leave old connections answering
        self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send(status, {"error": {"message": message, "type": kind}})

    def _principal(self) -> str | None:
        faults = self.fake.faults
        auth = self.headers.get("Authorization", "")
        key = auth[7:] if auth.startswith("Bearer ") else self.headers.get("x-api-key", "")
        if faults.auth_disabled:
            return "anonymous"
        if key == self.fake.api_key or (faults.accept_any_key and key):
            return "owner"
        return None

    def _route(self, method: str) -> None:
        fake = self.fake
        path = self.path.split("?", 1)[0]
        if path.startswith("/v1/v1/"):
            path = path[3:]
        fake.requests_seen.append(f"{method} {path}")
        body = self._body() if method == "POST" else {}
        if method == "GET" and path == "/health":
            return self._send(200, {"status": "ok"})
        principal = self._principal()
        if principal is None:
            return self._error(401, "missing or invalid API key", "authentication_error")
        if method == "GET" and path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": fake.model_id, "object": "model", "owned_by": "ninfer"}]})
        if method == "GET" and path == "/v1/ninfer/status":
            return self._send(200, self._status())
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat(body)
        if method == "POST" and path == "/v1/responses/input_tokens":
            if fake.faults.count_tokens_missing:
                return self._error(404, "not found")
            return self._send(200, {"object": "response.input_tokens", "input_tokens": count([{"role": "user", "content": str(body.get("input", ""))}])})
        if method == "POST" and path == "/v1/responses":
            return self._respond(body, principal)
        match = re.fullmatch(r"/v1/responses/([A-Za-z0-9_]+)", path)
        if match and method in ("GET", "DELETE"):
            with fake.state.lock:
                stored = fake.state.responses.get(match.group(1))
                if stored is None or stored.principal != principal:
                    return self._error(404, "response not found")
                if method == "GET":
                    return self._send(200, self._response_object(stored))
                if not fake.faults.delete_noop:
                    del fake.state.responses[stored.id]
                    fake.state.save()
                return self._send(200, {"id": stored.id, "object": "response.deleted", "deleted": True})
        return self._error(404, f"no route for {method} {path}")

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")

    # -- endpoints ---------------------------------------------------------------
    def _status(self) -> dict[str, Any]:
        fake = self.fake
        document = {
            "status_schema_version": 2,
            **fake.identity,
            "model_id": fake.model_id,
            "listen": {"host": fake.faults.report_bind or ("0.0.0.0" if fake.faults.bind_all else "127.0.0.1"), "port": fake.port},
            "auth": {"required": not fake.faults.auth_disabled},
            "instance_id": fake.instance_id,
        }
        document.update(fake.faults.status_overrides)
        return document

    def _pace(self, prompt_tokens: int, *, streaming: bool = False) -> None:
        faults = self.fake.faults
        time.sleep((faults.first_token_delay if streaming else 0.0) + prompt_tokens / faults.prefill_tokens_per_second)

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.fake
        messages = [{"role": str(m.get("role")), "content": str(m.get("content") or "")} for m in body.get("messages") or [] if isinstance(m, dict)]
        if not messages:
            return self._error(400, "messages is required")
        max_tokens = int(body.get("max_tokens") or 256)
        prompt_tokens = count(messages)
        self._pace(prompt_tokens, streaming=bool(body.get("stream")))
        tokens = fake.generate(messages, max_tokens)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(tokens), "total_tokens": prompt_tokens + len(tokens), "prompt_tokens_details": {"cached_tokens": 0}}
        finish = "length" if len(tokens) >= max_tokens else "stop"
        if not body.get("stream"):
            return self._send(200, {
                "id": "chatcmpl-" + secrets.token_hex(6), "object": "chat.completion", "model": fake.model_id,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": _join(tokens)}, "finish_reason": finish}],
                "usage": usage,
            })
        if fake.faults.stream_differs and tokens:
            tokens = [*tokens[:-1], tokens[-1] + "x"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        ident = "chatcmpl-" + secrets.token_hex(6)
        start = time.perf_counter()
        rate = fake.faults.decode_tokens_per_second
        for index, token in enumerate(tokens):
            due = start + index / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            piece = token if index == 0 else " " + token
            self._event({"id": ident, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
        self._event({"id": ident, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event({"id": ident, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        if not fake.faults.stream_no_done:
            self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, document: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(document).encode() + b"\n\n")

    def _respond(self, body: dict[str, Any], principal: str) -> None:
        fake = self.fake
        state = fake.state
        if body.get("stream"):
            return self._error(400, "streaming Responses are not supported by this test server")
        text = body.get("input")
        if isinstance(text, list):
            text = "\n".join(str(item.get("content", "")) for item in text if isinstance(item, dict))
        if not isinstance(text, str) or not text:
            return self._error(400, "input is required")
        session = body.get("prompt_cache_key")
        previous_id = body.get("previous_response_id")
        history: list[dict[str, str]] = []
        cached = 0
        parent = None
        if previous_id:
            with state.lock:
                parent = state.responses.get(previous_id)
            visible = parent is not None and parent.principal == principal and (fake.faults.session_leak or parent.session == session)
            if not visible:
                return self._error(404, f"previous response {previous_id} not found")
            assert parent is not None
            if not fake.faults.broken_continuation:
                history = list(parent.messages)
                cached = count(history)
        messages = [*history, {"role": "user", "content": text}]
        input_tokens = count(messages)
        self._pace(input_tokens - cached)
        tokens = fake.generate(messages, int(body.get("max_output_tokens") or 256))
        output = _join(tokens)
        stored = Stored("resp_" + secrets.token_hex(12), principal, session, [*messages, {"role": "assistant", "content": output}], output, input_tokens, len(tokens))
        if body.get("store", True):
            with state.lock:
                state.responses[stored.id] = stored
                if fake.faults.shared_forks and parent is not None:
                    parent.messages.extend(messages[len(history):])
                state.save()
        document = self._response_object(stored)
        document["usage"]["input_tokens_details"]["cached_tokens"] = cached
        self._send(200, document)

    def _response_object(self, stored: Stored) -> dict[str, Any]:
        return {
            "id": stored.id,
            "object": "response",
            "status": "completed",
            "model": self.fake.model_id,
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": stored.output}]}],
            "usage": {
                "input_tokens": stored.input_tokens,
                "output_tokens": stored.output_tokens,
                "total_tokens": stored.input_tokens + stored.output_tokens,
                "input_tokens_details": {"cached_tokens": 0},
            },
        }


# -- as a process: serve / restart ------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    key = Path(args.api_key_file).read_text().rstrip("\r\n")
    identity = json.loads(Path(args.identity).read_text())
    fake = FakeNInfer(api_key=key, identity=identity, port=args.port, state=State(Path(args.state)))
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    fake.start()
    Path(args.pidfile).write_text(str(os.getpid()))
    try:
        while not stopping.wait(0.1):
            pass
    finally:
        fake.stop()
        fake.state.save()
    return 0


def spawn(serve_argv: list[str], pidfile: Path) -> subprocess.Popen:
    """Start `serve` as a detached process and remember how, for `restart`."""
    Path(str(pidfile) + ".argv").write_text(json.dumps(serve_argv))
    pidfile.unlink(missing_ok=True)
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "serve", *serve_argv, "--pidfile", str(pidfile)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def _restart(args: argparse.Namespace) -> int:
    pidfile = Path(args.pidfile)
    pid = int(pidfile.read_text())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        print(f"server process {pid} did not stop", file=sys.stderr)
        return 1
    argv = json.loads(Path(str(pidfile) + ".argv").read_text())
    spawn(argv, pidfile)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--api-key-file", required=True)
    serve.add_argument("--identity", required=True, help="JSON file of the status endpoint's identity fields")
    serve.add_argument("--state", required=True, help="JSON file holding the stored responses")
    serve.add_argument("--pidfile", required=True)
    start = sub.add_parser("start", help="start `serve` detached (its parent exits, so it is nobody's child)")
    start.add_argument("serve_argv", nargs=argparse.REMAINDER)
    restart = sub.add_parser("restart")
    restart.add_argument("--pidfile", required=True)
    args = parser.parse_args(argv)
    if args.command == "start":
        argv_ = [a for a in args.serve_argv if a != "--"]
        pidfile = Path(argv_[argv_.index("--pidfile") + 1])
        del argv_[argv_.index("--pidfile"):argv_.index("--pidfile") + 2]
        spawn(argv_, pidfile)
        return 0
    return _serve(args) if args.command == "serve" else _restart(args)


if __name__ == "__main__":
    sys.exit(main())
