"""The qualification gates: each one judges one property of a live NInfer endpoint.

`pipeline/stages/qualify.py` owns the stage, the receipt and its schema; this
module owns what is judged (the client and SSE reader are in `client.py`, the
prompts in `fixtures.py`, the GPU monitor in `gpu.py`).  Every gate returns a
`Gate` (status passed, failed or skipped, a one-sentence reason, and the
numbers it measured).  Nothing that could carry content (model outputs, the
planted nonce, prompts) leaves a gate except as `{"redacted": true, "sha256":
...}`.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.errors import UsageError, redact
from pipeline.formats.identity import IDENTITY_KEYS
from pipeline.harness.client import (
    ChatResult,
    Client,
    GateFailure,
    local_non_loopback_addresses,
    response_text,
    tcp_accepts,
    usage_int,
)
from pipeline.harness.fixtures import continuation_fixture, needle_fixture, size_fixture
from pipeline.harness.gpu import GpuMonitor, GpuSamples
from pipeline.infra import net
from pipeline.util.hashing import sha256_bytes

HARNESS_NAME = "omp-ninfer-qualify"
HARNESS_VERSION = "1.0.0"

# Every gate, in the order the harness runs them.
GATE_ORDER = (
    "gpu_smoke",
    "identity",
    "security",
    "protocol",
    "long_context_retrieval",
    "decode_throughput",
    "prefill_throughput",
    "time_to_first_token",
    "gpu_resources",
    "restart",
)
# The gates that need a live endpoint; every one must pass for a passed receipt.
ENDPOINT_GATES = GATE_ORDER[1:]
GATE_STATUSES = ("passed", "failed", "skipped")

# Fraction of the advertised prompt size the measured prompt may differ by.
PROMPT_SIZE_TOLERANCE = 0.01
RESTART_GRACE_SECONDS = 60.0
_SELFTEST_LINE = re.compile(
    r'selftest: ok device="(?P<device>[^"]*)" compute_capability=(?P<cc>[0-9]+\.[0-9]+) '
    r"cuda_architecture=(?P<arch>[0-9a-z]+) elements=(?P<elements>[0-9]+) "
    r"max_abs_error=(?P<error>\S+) crc32=(?P<crc>[0-9a-f]{8})"
)


def redacted(text: str) -> dict[str, Any]:
    """How anything that could carry content is recorded."""
    return {"redacted": True, "sha256": sha256_bytes(text.encode("utf-8"))}


@dataclass
class Gate:
    status: str
    reason: str
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in GATE_STATUSES:
            raise ValueError(f"gate status {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        return {**self.data, "status": self.status, "reason": self.reason}


def passed(reason: str, **data: Any) -> Gate:
    return Gate("passed", reason, data)


def failed(reason: str, **data: Any) -> Gate:
    return Gate("failed", reason, data)


def skipped(reason: str, **data: Any) -> Gate:
    return Gate("skipped", reason, data)


def contains_exactly(text: str, word: str) -> bool:
    return re.search(rf"(?<![0-9A-Za-z]){re.escape(word)}(?![0-9A-Za-z])", text) is not None


# -- restart hooks --------------------------------------------------------------


class RestartHook(Protocol):
    def describe(self) -> str: ...

    def restart(self) -> None:
        """Stop the serving process and start it again (may return before it is ready)."""


class CommandRestartHook:
    """`--restart-command`: a shell command that stops and restarts the server process."""

    def __init__(self, command: str, timeout: float = 900.0) -> None:
        if not command.strip():
            raise UsageError("--restart-command is empty", fix="give the command that restarts the server, e.g. 'docker restart ninfer'")
        self.command = command
        self.timeout = timeout

    def describe(self) -> str:
        return f"command {shlex.split(self.command)[0]!r}"

    def restart(self) -> None:
        try:
            result = subprocess.run(self.command, shell=True, capture_output=True, text=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise GateFailure(f"the restart command did not finish within {self.timeout:.0f} s") from None
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
            raise GateFailure(f"the restart command exited with status {result.returncode}: {redact(tail[0])[:200]}")


# -- the gates ---------------------------------------------------------------------------


@dataclass
class Expected:
    """What the runtime must report: the package's identity (see qualify.py)."""

    build_identity: dict[str, str]
    deployment_profile: str
    server_binary_sha256: str
    configuration_sha256: str | None
    model_artifact_sha256: str
    public_model_id: str | None = None


@dataclass
class GateRun:
    """One qualification run against one endpoint: what the gates share (the client, the lane's
    thresholds, the expected identity, the samples and the one benchmark stream three gates judge)."""

    client: Client
    lane_id: str
    thresholds: dict[str, Any]
    expected: Expected
    gpu: GpuMonitor
    restart_hook: RestartHook | None = None
    model: str | None = None
    deleted_response: str | None = None
    samples: GpuSamples = field(default_factory=GpuSamples)
    benchmark: ChatResult | None = None
    benchmark_data: dict[str, Any] = field(default_factory=dict)
    benchmark_error: str | None = None


def served_identity(status: dict[str, Any]) -> dict[str, Any]:
    build = status.get("build") if isinstance(status.get("build"), dict) else status
    return {
        "build_identity": {key: build.get(key) for key in IDENTITY_KEYS},
        "deployment_profile": status.get("deployment_profile"),
        "server_binary_sha256": status.get("binary_sha256", status.get("server_binary_sha256")),
        "configuration_sha256": status.get("config_sha256", status.get("configuration_sha256")),
        "model_artifact_sha256": status.get("model_artifact_sha256", status.get("artifact_sha256")),
    }


def gate_identity(run: GateRun) -> Gate:
    client = run.client
    health = client.health()
    if health != 200:
        return failed(f"GET /health answered {health}, expected 200 (the model is not resident)", health_status=health)
    status = client.status()
    served = served_identity(status)
    expected = run.expected
    mismatches: list[dict[str, Any]] = []

    def compare(name: str, found: Any, want: Any) -> None:
        if found != want:
            mismatches.append({"field": name, "found": found, "expected": want})

    for key in IDENTITY_KEYS:
        value = served["build_identity"][key]
        if isinstance(value, bool):
            value = "true" if value else "false"
        compare(f"build_identity.{key}", value, expected.build_identity.get(key))
    compare("deployment_profile", served["deployment_profile"], expected.deployment_profile)
    compare("server_binary_sha256", served["server_binary_sha256"], expected.server_binary_sha256)
    if expected.configuration_sha256 is not None:
        compare("configuration_sha256", served["configuration_sha256"], expected.configuration_sha256)
    compare("model_artifact_sha256", served["model_artifact_sha256"], expected.model_artifact_sha256)
    data = {
        "served": served,
        "configuration_bound": expected.configuration_sha256 is not None,
        "status_schema_version": status.get("status_schema_version"),
        "mismatches": mismatches,
    }
    if mismatches:
        first = mismatches[0]
        more = f" (and {len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
        return failed(f"the runtime serves other bytes: {first['field']} is {first['found']!r}, the package's is {first['expected']!r}{more}", **data)
    reason = "status endpoint reports this package's build identity, binary, model and deployment profile"
    reason += ", and its configuration" if expected.configuration_sha256 is not None else " (no configuration bound for this lane)"
    return passed(reason, **data)


_SECURITY_PROBES = (
    ("GET", "/v1/models", None),
    ("GET", "/v1/ninfer/status", None),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 1}),
    ("POST", "/v1/responses", {"input": "Reply with OK.", "max_output_tokens": 1, "store": False}),
)


def gate_security(run: GateRun) -> Gate:
    client = run.client
    matrix: dict[str, dict[str, int]] = {}
    problems: list[str] = []
    for method, path, body in _SECURITY_PROBES:
        if body is not None and run.model:
            body = {**body, "model": run.model}
        row = {}
        for label, key in (("no_key", None), ("wrong_key", client.wrong_key)):
            response = client.request(method, path, key=key, body=body, timeout=120)
            row[label] = response.status_code
            response.close()
            if response.status_code != 401:
                problems.append(f"{method} {path} with {label.replace('_', ' ')} answered {response.status_code}, expected 401")
        matrix[f"{method} {path}"] = row
    authorised = client.request("GET", "/v1/models", timeout=60).status_code
    if authorised != 200:
        problems.append(f"GET /v1/models with the key answered {authorised}, expected 200")
    status = client.status()
    listen = status.get("listen") if isinstance(status.get("listen"), dict) else {}
    reported_host = listen.get("host")
    # IP addresses only: a host name (even `localhost`) does not prove where a server listens.
    reported_loopback = net.is_loopback(reported_host, allow_name=False)
    if reported_host is None:
        problems.append("the status endpoint does not report its listen address")
    elif not reported_loopback:
        problems.append(f"the server reports it listens on {reported_host}, not a loopback address")
    endpoint_loopback = net.is_loopback(client.host, allow_name=False)
    if not endpoint_loopback:
        problems.append(f"the endpoint host {client.host} is not a loopback address")
    reachable: list[str] = []
    addresses: list[str] = []
    if endpoint_loopback:
        addresses = local_non_loopback_addresses()
        reachable = [a for a in addresses if tcp_accepts(a, client.port)]
        if reachable:
            problems.append(f"port {client.port} also accepts connections on {', '.join(reachable)}")
    data = {
        "unauthenticated": matrix,
        "authorised_status": authorised,
        "reported_listen_host": reported_host,
        "reported_listen_loopback": reported_loopback,
        "endpoint_loopback": endpoint_loopback,
        "non_loopback_probe": {"addresses_tried": len(addresses), "reachable": reachable},
    }
    if problems:
        return failed(problems[0] + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""), problems=problems, **data)
    return passed("every probe without a key or with a wrong key got 401; the server listens on loopback only", **data)


def gate_protocol(run: GateRun) -> Gate:
    client, model = run.client, run.model or ""
    checks: dict[str, Any] = {}
    statuses: dict[str, int] = {}
    data: dict[str, Any] = {"checks": checks, "statuses": statuses}
    first, second_a, second_b = (secrets.token_hex(4) for _ in range(3))
    words = {"first": f"alpha{first}", "fork_a": f"bravo{second_a}", "fork_b": f"delta{second_b}"}
    session, other_session = "qualify-" + secrets.token_hex(12), "qualify-" + secrets.token_hex(12)

    def create(label: str, text: str, *, previous: str | None = None, sess: str | None = session, expect: int = 200) -> dict[str, Any] | None:
        response = client.respond(model, text, session=sess, previous=previous, max_tokens=32, timeout=300)
        statuses[label] = response.status_code
        if response.status_code != expect:
            response.close()
            raise GateFailure(f"{label}: POST /v1/responses answered {response.status_code}, expected {expect}")
        if expect != 200:
            response.close()
            return None
        document = client.json_of(response, "POST /v1/responses")
        if not isinstance(document.get("id"), str) or not document["id"]:
            raise GateFailure(f"{label}: the response has no id")
        return document

    try:
        listing = client.expect_json("GET", "/v1/models", timeout=60)
        ids = [m.get("id") for m in listing.get("data") or [] if isinstance(m, dict)]
        checks["models_listed"] = bool(ids) and (model in ids)
        if not checks["models_listed"]:
            raise GateFailure(f"GET /v1/models does not list the model {model!r}")
        parent = create("parent", f"Remember the first code word: {words['first']}. Reply with OK.")
        assert parent is not None
        recall = create("continuation", "What is the first code word? Reply with the word only.", previous=parent["id"])
        assert recall is not None
        checks["stateful_continuation"] = contains_exactly(response_text(recall), words["first"])
        if not checks["stateful_continuation"]:
            raise GateFailure("a continuation with previous_response_id did not recall the parent's content")
        # Two forks of one parent, each remembering a word in its own slot: each must recall its
        # own word and neither may see its sibling's.
        fork_a = create("fork_a", f"Remember the second code word: {words['fork_a']}. Reply with OK.", previous=parent["id"])
        fork_b = create("fork_b", f"Remember the third code word: {words['fork_b']}. Reply with OK.", previous=parent["id"])
        assert fork_a is not None and fork_b is not None
        recalls = {}
        for label, fork, slot in (("a_own", fork_a, "second"), ("b_own", fork_b, "third"), ("a_sibling", fork_a, "third"), ("b_sibling", fork_b, "second")):
            answer = create(f"fork_{label}", f"What is the {slot} code word? Reply with the word only.", previous=fork["id"])
            assert answer is not None
            recalls[label] = response_text(answer)
        checks["forks"] = 2
        checks["fork_isolation"] = (
            contains_exactly(recalls["a_own"], words["fork_a"]) and contains_exactly(recalls["b_own"], words["fork_b"])
            and not contains_exactly(recalls["a_sibling"], words["fork_b"]) and not contains_exactly(recalls["b_sibling"], words["fork_a"])
        )
        if not checks["fork_isolation"]:
            raise GateFailure("two forks of one parent did not keep their own state (a fork lost its word or saw its sibling's)")
        fetched = client.request("GET", f"/v1/responses/{parent['id']}", timeout=60)
        statuses["retrieve"] = fetched.status_code
        if fetched.status_code != 200 or client.json_of(fetched, "GET /v1/responses/{id}").get("id") != parent["id"]:
            raise GateFailure(f"GET /v1/responses/{{id}} answered {fetched.status_code} for a stored response")
        # Another session of the same principal must neither continue nor see this state.
        create("cross_session_continuation", "What is the first code word? Reply with the word only.", previous=parent["id"], sess=other_session, expect=404)
        checks["cross_session_continuation_refused"] = True
        isolated = create("isolated_session", "What is the first code word? Reply with the word only.", sess=other_session)
        assert isolated is not None
        checks["isolated_private_state_miss"] = not contains_exactly(response_text(isolated), words["first"])
        if not checks["isolated_private_state_miss"]:
            raise GateFailure("a new session recalled another session's private content")
        deleted = client.request("DELETE", f"/v1/responses/{parent['id']}", timeout=60)
        statuses["parent_delete"] = deleted.status_code
        if deleted.status_code != 200:
            raise GateFailure(f"DELETE /v1/responses/{{id}} answered {deleted.status_code}, expected 200")
        gone = client.request("GET", f"/v1/responses/{parent['id']}", timeout=60)
        statuses["deleted_retrieve"] = gone.status_code
        if gone.status_code != 404:
            raise GateFailure(f"GET of a deleted response answered {gone.status_code}, expected 404")
        create("deleted_continuation", "What is the first code word?", previous=parent["id"], expect=404)
        run.deleted_response = parent["id"]
        survivor = create("surviving_descendant", "What is the first code word? Reply with the word only.", previous=fork_a["id"])
        assert survivor is not None
        checks["surviving_descendant_continued"] = contains_exactly(response_text(survivor), words["first"])
        if not checks["surviving_descendant_continued"]:
            raise GateFailure("a fork lost its inherited state when its parent was deleted")
        prompt = "Write a numbered list of twelve everyday objects, one per line."
        plain = client.chat(model, prompt, max_tokens=64, stream=False, timeout=300)
        streamed = client.chat(model, prompt, max_tokens=64, stream=True, timeout=300)
        statuses["chat"], statuses["chat_stream"] = plain.status, streamed.status
        if plain.status != 200 or streamed.status != 200:
            raise GateFailure(f"chat completions answered {plain.status} (plain) and {streamed.status} (streaming)")
        checks["sse_well_formed"] = streamed.well_formed
        checks["streaming_parity"] = plain.text == streamed.text and bool(plain.text)
        data["non_streaming_output"] = redacted(plain.text)
        data["streaming_output"] = redacted(streamed.text)
        if not streamed.well_formed:
            raise GateFailure("the SSE stream is malformed (a non-data line, invalid JSON, or no final [DONE])")
        if not checks["streaming_parity"]:
            raise GateFailure("the streamed text differs from the non-streamed text of the same request")
    except GateFailure as problem:
        return failed(str(problem), **data)
    return passed(
        "continuation, two isolated forks, deletion (404 afterwards), cross-session isolation and streaming parity hold",
        **data,
    )


def gate_long_context(run: GateRun) -> Gate:
    client, model = run.client, run.model or ""
    target = int(run.thresholds["advertised_prompt_tokens"])
    seed = f"{run.lane_id}:needle:{target}"
    salt = secrets.token_hex(8)
    fixture, counted, probes = size_fixture(lambda words: needle_fixture(seed, words, salt), target, lambda text: client.count_tokens(model, text))
    assert fixture.nonce is not None
    data: dict[str, Any] = {
        "target_prompt_tokens": target,
        "fixture_sha256": fixture.fixture_sha256,
        "fixture": {**fixture.describe(), "calibration_probes": probes, "counted_prompt_tokens": counted},
        "nonce": redacted(fixture.nonce),
    }
    started = time.perf_counter()
    with run.gpu.sampling() as samples:
        response = client.respond(model, fixture.text, session="qualify-" + secrets.token_hex(12), max_tokens=32, store=False)
    elapsed = time.perf_counter() - started
    run.samples.extend(samples)
    data["elapsed_seconds"] = round(elapsed, 3)
    data["http_status"] = response.status_code
    if response.status_code != 200:
        response.close()
        return failed(f"the {target}-token retrieval request answered {response.status_code}", **data)
    document = client.json_of(response, "POST /v1/responses")
    output = response_text(document)
    usage = document.get("usage") or {}
    prompt_tokens = usage_int(usage, "input_tokens")
    cached = usage_int(usage, "input_tokens_details", "cached_tokens")
    exact = contains_exactly(output, fixture.nonce)
    data.update(
        prompt_tokens=prompt_tokens,
        completion_tokens=usage_int(usage, "output_tokens"),
        cached_tokens=cached,
        cold=cached in (0, None),
        output=redacted(output),
        exact_output=exact,
    )
    if prompt_tokens is None:
        return failed("the retrieval response reports no usage.input_tokens", **data)
    if abs(prompt_tokens - target) > target * PROMPT_SIZE_TOLERANCE:
        return failed(f"the prompt had {prompt_tokens} tokens, not the advertised {target} (tolerance {PROMPT_SIZE_TOLERANCE:.0%})", **data)
    if not exact:
        return failed(f"the planted nonce was not recalled exactly at {prompt_tokens} prompt tokens", **data)
    return passed(f"exact recall of the planted nonce at {prompt_tokens} prompt tokens in {elapsed:.2f} s", **data)


def run_benchmark(run: GateRun) -> None:
    """One streamed request of the lane's fixed prompt and completion size; feeds three gates."""
    client, model = run.client, run.model or ""
    target = int(run.thresholds["benchmark_prompt_tokens"])
    completion = int(run.thresholds["completion_tokens"])
    seed = f"{run.lane_id}:benchmark:{target}"
    salt = secrets.token_hex(8)
    try:
        fixture, counted, probes = size_fixture(lambda words: continuation_fixture(seed, words, salt), target, lambda text: client.count_tokens(model, text))
        run.benchmark_data = {
            "fixture_sha256": fixture.fixture_sha256,
            "fixture": {**fixture.describe(), "calibration_probes": probes, "counted_prompt_tokens": counted},
            "target_prompt_tokens": target,
        }
        with run.gpu.sampling() as samples:
            run.benchmark = client.chat(model, fixture.text, max_tokens=completion, stream=True)
        run.samples.extend(samples)
    except GateFailure as problem:
        run.benchmark_error = str(problem)


def _benchmark_problem(run: GateRun) -> str | None:
    if run.benchmark_error:
        return run.benchmark_error
    result = run.benchmark
    if result is None:
        return "the benchmark did not run"
    if result.status != 200:
        return f"the benchmark request answered {result.status}"
    if not result.well_formed:
        return "the benchmark's SSE stream is malformed"
    if result.first_token_at is None:
        return "the benchmark stream carried no content"
    return None


def _threshold(run: GateRun, key: str, *, integer: bool = False) -> float:
    """A gate's threshold: finite and positive, or the gate fails (a NaN compares false with everything,
    so 'below a NaN minimum' would never fail and the gate would pass whatever was measured)."""
    value = run.thresholds.get(key)
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or not math.isfinite(value) or value <= 0:
        raise GateFailure(f"the lane's threshold {key} is {value!r}, not a finite positive {'integer' if integer else 'number'}: nothing can be judged against it")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class Throughput:
    """One phase's measurement on the benchmark stream: `tokens` over `seconds`, described as `over`."""

    tokens: int
    seconds: float
    over: str  # what the rate was measured over, for the reason line


def _throughput_gate(
    run: GateRun,
    *,
    phase: str,
    threshold_key: str,
    measure: Callable[[ChatResult, dict[str, Any]], Throughput | str],
    with_fixture_on_problem: bool = False,
) -> Gate:
    """The shape decode and prefill share: the benchmark stream, a tokens-per-second threshold, a rate.

    `measure` records what it read into `data` and returns the measurement, or why there is none
    (the gate fails with that reason and the data so far)."""
    problem = _benchmark_problem(run)
    threshold = _threshold(run, threshold_key)
    if problem:
        return failed(problem, threshold_tokens_per_second=threshold, **(run.benchmark_data if with_fixture_on_problem else {}))
    result = run.benchmark
    assert result is not None and result.first_token_at is not None
    data: dict[str, Any] = {"threshold_tokens_per_second": threshold}
    measured = measure(result, data)
    if isinstance(measured, str):
        return failed(measured, **data)
    rate = measured.tokens / measured.seconds
    data.update({f"{phase}_seconds": round(measured.seconds, 4), "tokens_per_second": round(rate, 2)})
    if not rate >= threshold:  # fails closed: a comparison with NaN is false
        return failed(f"{phase} ran at {rate:.2f} tokens/s, below the lane's {threshold:g}", **data)
    return passed(f"{phase} ran at {rate:.2f} tokens/s over {measured.over} (threshold {threshold:g})", **data)


def gate_decode(run: GateRun) -> Gate:
    """Decode speed: completion tokens after the first over the time between the first and the last."""

    def measure(result: ChatResult, data: dict[str, Any]) -> Throughput | str:
        wanted = int(run.thresholds["completion_tokens"])
        tokens = usage_int(result.usage, "completion_tokens")
        data.update(
            completion_tokens=tokens,
            requested_completion_tokens=wanted,
            stream_content_events=result.content_events,
            basis="client-wall",
            wall_seconds=round(result.elapsed, 3),
        )
        if tokens is None:
            return "the benchmark stream reports no usage.completion_tokens (stream_options.include_usage)"
        if tokens < wanted:
            return f"the completion stopped after {tokens} of {wanted} tokens, so decode was not measured over the fixed size"
        assert result.first_token_at is not None and result.last_token_at is not None
        seconds = result.last_token_at - result.first_token_at
        if seconds <= 0:
            return "the whole completion arrived at once; decode speed cannot be measured"
        return Throughput(tokens - 1, seconds, f"{tokens} tokens")

    return _throughput_gate(run, phase="decode", threshold_key="min_decode_tokens_per_second", measure=measure, with_fixture_on_problem=True)


def gate_prefill(run: GateRun) -> Gate:
    """Prefill speed: the prompt tokens the server computed (not cached) over the time to the first token."""

    def measure(result: ChatResult, data: dict[str, Any]) -> Throughput | str:
        prompt = usage_int(result.usage, "prompt_tokens")
        cached = usage_int(result.usage, "prompt_tokens_details", "cached_tokens") or 0
        data.update(
            prompt_tokens=prompt,
            cached_tokens=cached,
            basis="client-wall (computed prompt tokens / time to first token)",
            fixture_sha256=run.benchmark_data.get("fixture_sha256"),
        )
        if prompt is None:
            return "the benchmark stream reports no usage.prompt_tokens"
        computed = prompt - cached
        data["computed_prompt_tokens"] = computed
        if computed <= 0:
            return "the whole prompt was served from a prefix cache; prefill was not measured"
        assert result.first_token_at is not None
        if not result.first_token_at > 0:
            return "the first token arrived with the request; prefill speed cannot be measured"
        return Throughput(computed, result.first_token_at, f"{computed} computed prompt tokens")

    return _throughput_gate(run, phase="prefill", threshold_key="min_prefill_tokens_per_second", measure=measure)


def gate_ttft(run: GateRun) -> Gate:
    problem = _benchmark_problem(run)
    threshold = _threshold(run, "max_time_to_first_token_seconds")
    if problem:
        return failed(problem, threshold_seconds=threshold)
    result = run.benchmark
    assert result is not None and result.first_token_at is not None
    ttft = result.first_token_at
    data = {"seconds": round(ttft, 4), "threshold_seconds": threshold, "prompt_tokens": usage_int(result.usage, "prompt_tokens")}
    if not ttft <= threshold:
        return failed(f"the first token came after {ttft:.3f} s, above the lane's {threshold:g} s", **data)
    return passed(f"the first token came after {ttft:.3f} s (threshold {threshold:g} s)", **data)


def gate_gpu_resources(run: GateRun) -> Gate:
    threshold = _threshold(run, "max_vram_mib", integer=True)
    facts = run.gpu.facts()
    if facts is None:
        return skipped("nvidia-smi is not available on this host, so peak VRAM and power were not sampled", threshold_mib=threshold)
    samples = run.samples
    if not samples.memory_used_mib:
        return failed("nvidia-smi answered no memory samples during the benchmark and retrieval", threshold_mib=threshold)
    peak = max(samples.memory_used_mib)
    power = max(samples.power_w) if samples.power_w else None
    data = {
        "peak_vram_mib": int(peak) if float(peak).is_integer() else peak,
        "max_power_w": power,
        "samples": len(samples.memory_used_mib),
        "threshold_mib": threshold,
        "scope": "whole-GPU memory.used while the retrieval and benchmark requests ran",
    }
    if not peak <= threshold:
        return failed(f"peak VRAM was {peak:g} MiB, above the lane's {threshold} MiB", **data)
    return passed(f"peak VRAM {peak:g} MiB (threshold {threshold} MiB), max power {power if power is not None else 'n/a'} W", **data)


def gate_restart(run: GateRun) -> Gate:
    client, model = run.client, run.model or ""
    limit = _threshold(run, "max_restart_seconds")
    hook = run.restart_hook
    if hook is None:
        return skipped("no restart hook was given (--restart-command), so process restart was not exercised", threshold_seconds=limit)
    word = f"echo{secrets.token_hex(4)}"
    session = "qualify-" + secrets.token_hex(12)
    data: dict[str, Any] = {"threshold_seconds": limit, "hook": hook.describe()}
    try:
        context = continuation_fixture(f"{run.lane_id}:restart", 1200, secrets.token_hex(8)).text
        before = client.status().get("instance_id")
        first = client.respond(model, f"{context}\n\nRemember the first code word: {word}. Reply with OK.", session=session, max_tokens=16, timeout=600)
        if first.status_code != 200:
            raise GateFailure(f"the session before the restart answered {first.status_code}")
        parent = client.json_of(first, "POST /v1/responses")["id"]
        started = time.perf_counter()
        hook.restart()
        deadline = started + limit + RESTART_GRACE_SECONDS
        ready = False
        after = None
        while time.perf_counter() < deadline:
            if client.health(timeout=5.0) == 200:
                with contextlib.suppress(GateFailure):
                    after = client.status().get("instance_id")
                    if before is None or after != before:
                        ready = True
                        break
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        data["restart_seconds"] = round(seconds, 3)
        if not ready:
            if after is not None and after == before:
                raise GateFailure("the status endpoint reports the same instance_id after the restart: the process was not replaced")
            raise GateFailure(f"the server did not answer /health within {limit + RESTART_GRACE_SECONDS:.0f} s of the restart")
        data["process_replaced"] = None if before is None else after != before
        resumed = client.respond(model, "What is the first code word? Reply with the word only.", session=session, previous=parent, max_tokens=16, timeout=600)
        data["continuation_status"] = resumed.status_code
        if resumed.status_code != 200:
            raise GateFailure(f"continuing the session after the restart answered {resumed.status_code}")
        document = client.json_of(resumed, "POST /v1/responses")
        output = response_text(document)
        data["output"] = redacted(output)
        data["exact_output"] = contains_exactly(output, word)
        data["restored_cached_input_tokens"] = usage_int(document.get("usage") or {}, "input_tokens_details", "cached_tokens")
        if run.deleted_response is not None:
            ghost = client.respond(model, "What is the first code word?", session=None, previous=run.deleted_response, max_tokens=8, timeout=120)
            data["post_restart_deleted_continuation_status"] = ghost.status_code
            ghost.close()
            if ghost.status_code != 404:
                raise GateFailure(f"a response deleted before the restart came back after it (status {ghost.status_code})")
        if not data["exact_output"]:
            raise GateFailure("the session continued after the restart did not recall its content")
        if not seconds <= limit:
            raise GateFailure(f"the restart took {seconds:.2f} s, above the lane's {limit:g} s")
    except GateFailure as problem:
        return failed(str(problem), **data)
    return passed(
        f"restarted in {data['restart_seconds']:.2f} s and continued the session with {data['restored_cached_input_tokens']} cached input tokens restored",
        **data,
    )


def run_endpoint_gates(run: GateRun, on_gate: Callable[[str, Gate], None]) -> tuple[dict[str, Gate], list[str]]:
    """Run every endpoint gate in order.  An identity mismatch stops the run: the rest are not run."""
    results: dict[str, Gate] = {}

    def attempt(name: str, function: Callable[[GateRun], Gate]) -> Gate:
        try:
            gate = function(run)
        except GateFailure as problem:
            gate = failed(str(problem))
        results[name] = gate
        on_gate(name, gate)
        return gate

    identity = attempt("identity", gate_identity)
    if identity.status != "passed":
        return results, [name for name in ENDPOINT_GATES if name not in results]
    if run.model is None:
        try:
            listing = run.client.expect_json("GET", "/v1/models", timeout=60)
            ids = [m.get("id") for m in listing.get("data") or [] if isinstance(m, dict) and m.get("id")]
        except GateFailure:
            ids = []
        run.model = run.expected.public_model_id or (ids[0] if ids else "")
    attempt("security", gate_security)
    attempt("protocol", gate_protocol)
    attempt("long_context_retrieval", gate_long_context)
    run_benchmark(run)
    attempt("decode_throughput", gate_decode)
    attempt("prefill_throughput", gate_prefill)
    attempt("time_to_first_token", gate_ttft)
    attempt("gpu_resources", gate_gpu_resources)
    attempt("restart", gate_restart)
    return results, []


# -- the GPU smoke gate -------------------------------------------------------------------


def gate_gpu_smoke(
    *,
    binary: Path | None,
    binary_sha256: str | None,
    lane_platform: str,
    host_platform: str,
    lane_compute_capability: str,
    cuda_architecture: str,
    facts: dict[str, Any] | None,
    library_dirs: list[Path],
    timeout: float = 300.0,
) -> Gate:
    """Run the packaged `ninfer-serve --selftest` on this host's GPU and check its one line."""
    if facts is None:
        return skipped("no NVIDIA driver on this host (nvidia-smi is absent or fails), so the selftest kernel was not run")
    if lane_platform != host_platform:
        return skipped(f"the lane's binaries are {lane_platform}; this host is {host_platform}, so they cannot run here")
    if binary is None or not binary.is_file():
        return failed("the packaged ninfer-serve binary was not found")
    env = dict(os.environ)
    paths = [str(binary.parent), *(str(p) for p in library_dirs)]
    if env.get("LD_LIBRARY_PATH"):
        paths.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    started = time.perf_counter()
    try:
        result = subprocess.run([str(binary), "--selftest"], capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return failed(f"ninfer-serve --selftest did not finish within {timeout:.0f} s", binary_sha256=binary_sha256)
    except OSError as exc:
        return failed(f"ninfer-serve --selftest could not start: {exc.strerror}", binary_sha256=binary_sha256)
    seconds = round(time.perf_counter() - started, 3)
    stdout_lines = [line for line in result.stdout.splitlines() if line.strip()]
    stderr_lines = [line for line in result.stderr.splitlines() if line.strip()]
    device_cc = facts.get("compute_capability")
    lane_device = device_cc == lane_compute_capability if device_cc else None
    data: dict[str, Any] = {
        "binary": binary.name,
        "binary_sha256": binary_sha256,
        "exit_code": result.returncode,
        "seconds": seconds,
        "lane_device": lane_device,
        "device_compute_capability": device_cc,
        "lane_compute_capability": lane_compute_capability,
    }
    if result.returncode != 0:
        message = redact(stderr_lines[-1] if stderr_lines else (stdout_lines[-1] if stdout_lines else ""))[:300]
        data["error_line"] = message
        if "cannot run on device" in message and lane_device is False:
            return skipped(
                f"this host's GPU ({facts.get('gpu_name')}, compute capability {device_cc}) is not the lane's "
                f"{lane_compute_capability} and the binary carries code for cuda_architecture={cuda_architecture} only",
                **data,
            )
        return failed(f"ninfer-serve --selftest exited with status {result.returncode}: {message}", **data)
    matches = [m for m in (_SELFTEST_LINE.fullmatch(line.strip()) for line in stdout_lines) if m]
    if len(stdout_lines) != 1 or len(matches) != 1:
        return failed("ninfer-serve --selftest did not print exactly one 'selftest: ok ...' line", **data)
    match = matches[0]
    data.update(
        line=stdout_lines[0].strip(),
        device=match["device"],
        compute_capability=match["cc"],
        cuda_architecture=match["arch"],
        elements=int(match["elements"]),
        max_abs_error=float(match["error"]),
        crc32=match["crc"],
    )
    if match["arch"] != cuda_architecture:
        return failed(f"the selftest ran code for cuda_architecture={match['arch']}, the build identity says {cuda_architecture}", **data)
    return passed(f"selftest kernel ran on {match['device']} (compute capability {match['cc']}) and matched the CPU reference", **data)


def is_content_key(key: str) -> bool:
    """Receipt keys whose text values could carry content: they must be redacted objects (booleans are fine)."""
    return key in ("output", "nonce", "prompt", "text", "content", "input") or key.endswith(("_output", "_prompt", "_nonce", "_text"))
