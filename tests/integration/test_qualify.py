"""The qualify stage: lane receipts bound to exact bytes, gates against a protocol-faithful server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.formats.identity import IDENTITY_KEYS
from pipeline.formats.lanes import find_lane
from pipeline.harness.gates import ENDPOINT_GATES
from pipeline.stage import Context, execute
from pipeline.stages.qualify import GATE_ORDER, QualifyStage, load_receipt, validate_receipt
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import write_json

COMMIT = "1" * 40
UPSTREAM = "2" * 40
NOW = "2026-11-02T10:00:00Z"


class NoGpu:
    def facts(self):
        return None

    def sampling(self):
        from contextlib import nullcontext

        from pipeline.harness.gpu import GpuSamples

        return nullcontext(GpuSamples())


def fake_build(dist: Path, lane_name: str) -> dict:
    """What the build stage records, without compiling: identity, binaries, register entries."""
    lane = find_lane(lane_name)
    ctx = Context.open(dist)
    out = dist / lane.id / "build"
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    binaries = {}
    for name in lane.binaries:
        path = bin_dir / lane.binary_file(name)
        path.write_bytes(f"{lane.id}:{name}:binary\n".encode())
        binaries[path.name] = sha256_bytes(path.read_bytes())
    identity = {
        "upstream_base_sha": UPSTREAM,
        "patch_stack_sha": COMMIT,
        "build_profile": lane.build_profile(),
        "build_type": "Release",
        "cxx_compiler": "GNU-12.2.0",
        "cuda_compiler": "NVIDIA-13.1.115",
        "cuda_toolkit": "13.1.115",
        "cuda_architecture": lane.cuda_architecture,
        "source_dirty": "false",
    }
    document = {
        "artifact_type": "ninfer_release_build_identity",
        "schema_version": 2,
        "lane": lane.id,
        "component_tag": lane.tag(),
        "deployment_profile": lane.deployment_profile(),
        **identity,
        "binaries": binaries,
    }
    write_json(out / "build-identity.json", document)
    register = ctx.register
    artefacts = [
        register.make("binary", bin_dir / name, stage="build", lane=lane.id, name=f"{lane.id}/bin/{name}", binary=name.removesuffix(".exe"))
        for name in sorted(binaries)
    ]
    artefacts.append(register.make("build-identity", out / "build-identity.json", stage="build", lane=lane.id, name=f"{lane.id}/build-identity.json"))
    register.record_stage(f"build:{lane.id}", "fake", artefacts)
    return document


def pending(dist: Path, lane_name: str, **kwargs):
    lane = find_lane(lane_name)
    stage = QualifyStage(Context.open(dist), lane, gpu=kwargs.pop("gpu", NoGpu()), now=NOW, **kwargs)
    result = execute(stage)
    return stage, result


def test_hardware_pending_receipt_is_honest_and_valid(tmp_path):
    dist = tmp_path / "dist"
    build = fake_build(dist, "5090")
    stage, result = pending(dist, "5090")
    receipt = load_receipt(stage.receipt_path)
    assert receipt["status"] == "hardware-pending"
    assert receipt["gates_not_run"] == list(ENDPOINT_GATES)
    assert receipt["gates"]["gpu_smoke"]["status"] == "skipped"
    assert "no NVIDIA driver" in receipt["gates"]["gpu_smoke"]["reason"]
    assert receipt["endpoint"] is None and receipt["host"] is None
    identity = receipt["identity"]
    assert identity["source_commit"] == COMMIT
    assert identity["build_identity"] == {k: build[k] for k in IDENTITY_KEYS}
    assert identity["server_binary_sha256"] == build["binaries"]["ninfer-serve"]
    assert identity["configuration_sha256"] is None  # container lane without --config
    assert identity["model_artifact_sha256"] == "81f924d440c27261d820c19a9f8d45794c5aee410f8a68bd358133fa8c0375da"
    assert identity["package"] is None and identity["outer_checksums_sha256"] is None
    assert receipt["thresholds"] == dict(find_lane("5090").qualification)
    assert receipt["generated_utc"] == NOW and receipt["secret_values_recorded"] == 0
    entry = result.outputs[0]
    assert entry.kind == "lane-receipt" and entry.attrs == {"status": "hardware-pending", "component_tag": build["component_tag"]}
    assert stage.receipt_path == dist / "rtx5090-container" / "qualification" / "rtx5090-container.json"
    # Canonical bytes: sorted keys, LF, trailing newline.
    raw = stage.receipt_path.read_bytes()
    assert raw.endswith(b"}\n") and b"\r" not in raw
    assert raw == (json.dumps(receipt, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
    # Unchanged inputs: nothing to do.
    _stage, again = pending(dist, "5090")
    assert again.skipped


def test_windows_lane_binds_the_server_configuration(tmp_path):
    from pipeline.formats.serverconfig import config_sha256

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    stage, _ = pending(dist, "4090")
    receipt = load_receipt(stage.receipt_path)
    config = Path(find_lane("4090").server_config)
    from pipeline.formats.lanes import REPO_ROOT

    assert receipt["identity"]["configuration_sha256"] == config_sha256(REPO_ROOT / config)
    assert receipt["identity"]["server_binary_sha256"] == receipt["identity"]["binaries"]["ninfer-serve.exe"]
    assert receipt["deployment_profile"] == "qwen38-4090-native-v0.7.0-beta.2"


def test_validator_refuses_inconsistent_receipts(tmp_path):
    dist = tmp_path / "dist"
    fake_build(dist, "5090")
    stage, _ = pending(dist, "5090")
    good = load_receipt(stage.receipt_path)

    def refused(change, field):
        document = json.loads(json.dumps(good))
        change(document)
        with pytest.raises(InputError) as caught:
            validate_receipt(document, file="r.json")
        assert caught.value.field == field, caught.value.render()

    refused(lambda d: d.update(status="passed"), "status")
    refused(lambda d: d.update(extra=1), "extra")
    refused(lambda d: d["gates_not_run"].pop(), "gates")
    refused(lambda d: d.update(secret_values_recorded=1), "secret_values_recorded")
    refused(lambda d: d["identity"].update(server_binary_sha256="x"), "identity.server_binary_sha256")
    refused(lambda d: d["gates"]["gpu_smoke"].update(output="the model said this"), "gates.gpu_smoke.output")
    refused(lambda d: d["gates"]["gpu_smoke"].update(status="failed"), "status")
    assert set(GATE_ORDER) == set(good["gates"]) | set(good["gates_not_run"])


# -- against the protocol-faithful server ---------------------------------------------------

import contextlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from ninfer_fake_server import FakeNInfer, Faults  # noqa: E402

from pipeline.harness import client as harness_client  # noqa: E402
from pipeline.harness import gates as qualify_harness  # noqa: E402
from pipeline.harness import gpu as harness_gpu  # noqa: E402
from pipeline.harness.gpu import GpuSamples  # noqa: E402
from pipeline.stages.qualify import resolve_identity  # noqa: E402

KEY = "sk-omp-qualify-RECOGNISABLE-4f1c9e2a7b3d5e6f8a9b0c1d2e3f4a5b"
FAST = {  # small sizes so a fault test runs in well under a second; thresholds stay the lane's
    "advertised_prompt_tokens": 4096,
    "benchmark_prompt_tokens": 512,
    "completion_tokens": 128,
}


class FakeGpu:
    """What nvidia-smi would report on the lane's GPU (the real one runs in the gpu-marked test)."""

    def __init__(self, peak_mib: float = 22000, power_w: float = 310.5, name: str = "NVIDIA GeForce RTX 4090", cc: str = "8.9"):
        self.peak, self.power, self.name, self.cc = peak_mib, power_w, name, cc

    def facts(self):
        return {"gpu_name": self.name, "driver": "580.95.05", "cuda": "13.0", "compute_capability": self.cc,
                "memory_total_mib": 24564, "nvidia_smi": "580.95.05", "gpu_index": 0, "gpu_count": 1}

    @contextlib.contextmanager
    def sampling(self):
        samples = GpuSamples()
        samples.add(self.peak * 0.9, self.power * 0.8)
        yield samples
        samples.add(self.peak, self.power)


def lane_with(lane_name: str, **qualification):
    lane = find_lane(lane_name)
    return lane.with_overrides(qualification={**lane.qualification, **qualification})


def status_identity(ident) -> dict:
    identity = ident.identity
    return {
        **identity["build_identity"],
        "deployment_profile": ident.deployment_profile,
        "binary_sha256": identity["server_binary_sha256"],
        "config_sha256": identity["configuration_sha256"] or "c" * 64,
        "model_artifact_sha256": identity["model_artifact_sha256"],
    }


@contextlib.contextmanager
def serving(dist: Path, lane, faults: Faults | None = None, key: str = KEY):
    ident = resolve_identity(Context.open(dist), lane)
    with FakeNInfer(api_key=key, identity=status_identity(ident), faults=faults) as fake:
        yield fake


def qualify_live(dist: Path, lane, fake: FakeNInfer, *, gpu=None, hook="fake", key: str = KEY, now: str = NOW):
    stage = QualifyStage(
        Context.open(dist),
        lane,
        endpoint=fake.url,
        api_key=key,
        restart_hook=fake if hook == "fake" else hook,
        gpu=gpu if gpu is not None else FakeGpu(),
        now=now,
    )
    execute(stage, force=True)
    return load_receipt(stage.receipt_path), stage


@pytest.fixture
def quick_restart(monkeypatch):
    monkeypatch.setattr(qualify_harness, "RESTART_GRACE_SECONDS", 1.0)


def test_every_gate_passes_against_the_faithful_server_at_the_advertised_size(tmp_path, capsys):
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = find_lane("4090")
    with serving(dist, lane) as fake:
        receipt, stage = qualify_live(dist, lane, fake)
    assert receipt["status"] == "passed", receipt["status_reason"]
    assert receipt["gates_not_run"] == []
    gates = receipt["gates"]
    assert all(gates[name]["status"] == "passed" for name in ENDPOINT_GATES)
    # The Windows lane's binaries cannot run on this Linux host: the smoke gate says so.
    assert gates["gpu_smoke"]["status"] == "skipped" and "windows-x86_64" in gates["gpu_smoke"]["reason"]
    retrieval = gates["long_context_retrieval"]
    assert retrieval["prompt_tokens"] == 130048 == retrieval["target_prompt_tokens"]
    assert retrieval["exact_output"] is True and retrieval["cold"] is True
    assert retrieval["nonce"]["redacted"] is True and retrieval["output"]["redacted"] is True
    assert len(retrieval["fixture_sha256"]) == 64
    decode = gates["decode_throughput"]
    assert decode["completion_tokens"] == 1024 and decode["tokens_per_second"] >= 135.0
    assert gates["prefill_throughput"]["computed_prompt_tokens"] == 4541
    assert gates["time_to_first_token"]["seconds"] <= 2.0
    assert gates["gpu_resources"]["peak_vram_mib"] == 22000 and gates["gpu_resources"]["max_power_w"] == 310.5
    restart = gates["restart"]
    assert restart["process_replaced"] is True and restart["exact_output"] is True
    assert restart["restored_cached_input_tokens"] > 1000 and restart["post_restart_deleted_continuation_status"] == 404
    protocol = gates["protocol"]["checks"]
    assert protocol["forks"] == 2 and protocol["streaming_parity"] and protocol["surviving_descendant_continued"]
    assert gates["security"]["unauthenticated"]["POST /v1/responses"] == {"no_key": 401, "wrong_key": 401}
    assert receipt["endpoint"] == {"host": "127.0.0.1", "port": fake.port}
    assert receipt["host"]["gpu_name"] == "NVIDIA GeForce RTX 4090"
    # The fixture is deterministic: the same lane and size give the same fixture hash.
    with serving(dist, lane) as fake:
        again, _ = qualify_live(dist, lane, fake)
    assert again["gates"]["long_context_retrieval"]["fixture_sha256"] == retrieval["fixture_sha256"]
    # The key is never recorded or printed.
    captured = capsys.readouterr()
    for text in (stage.receipt_path.read_text(), (dist / "register.json").read_text(), captured.out, captured.err):
        assert KEY not in text and KEY[10:30] not in text


WRONG = "0" * 64


@pytest.mark.parametrize(
    ("faults", "gates", "reason", "sizes"),
    [
        (Faults(status_overrides={"binary_sha256": WRONG}), ["identity"], "server_binary_sha256", {}),
        (Faults(status_overrides={"config_sha256": WRONG}), ["identity"], "configuration_sha256", {}),
        (Faults(status_overrides={"model_artifact_sha256": WRONG}), ["identity"], "model_artifact_sha256", {}),
        (Faults(status_overrides={"deployment_profile": "qwen38-4090-native-v0.6.10-beta.1"}), ["identity"], "deployment_profile", {}),
        (Faults(status_overrides={"cuda_architecture": "86"}), ["identity"], "build_identity.cuda_architecture", {}),
        (Faults(auth_disabled=True), ["security"], "with no key answered 200", {}),
        (Faults(accept_any_key=True), ["security"], "with wrong key answered 200", {}),
        (Faults(report_bind="0.0.0.0"), ["security"], "listens on 0.0.0.0", {}),
        # A broken continuation also breaks continuing a session after a restart.
        (Faults(broken_continuation=True), ["protocol", "restart"], "did not recall the parent", {}),
        (Faults(shared_forks=True), ["protocol"], "saw its sibling's", {}),
        (Faults(delete_noop=True), ["protocol"], "GET of a deleted response answered 200", {}),
        (Faults(session_leak=True), ["protocol"], "cross_session_continuation: POST /v1/responses answered 200, expected 404", {}),
        (Faults(stream_differs=True), ["protocol"], "streamed text differs", {}),
        # The benchmark streams too, so a malformed stream also leaves nothing to measure.
        (Faults(stream_no_done=True), ["protocol", "decode_throughput", "prefill_throughput", "time_to_first_token"], "SSE stream is malformed", {}),
        (Faults(wrong_nonce=True), ["long_context_retrieval"], "not recalled exactly", {}),
        (Faults(context_window=2048), ["long_context_retrieval"], "not recalled exactly", {}),
        (Faults(decode_tokens_per_second=60.0), ["decode_throughput"], "below the lane's 135", {}),
        (Faults(short_completion=100), ["decode_throughput"], "stopped after 100 of 128 tokens", {}),
        # Slow prefill (still inside the 2 s first-token budget for the 512-token benchmark prompt).
        (Faults(prefill_tokens_per_second=400.0), ["prefill_throughput"], "below the lane's 1900", {"advertised_prompt_tokens": 1024}),
        # A long first-token wait over a prompt large enough that prefill still clears its threshold.
        (Faults(first_token_delay=2.2), ["time_to_first_token"], "above the lane's 2 s", {"benchmark_prompt_tokens": 8192}),
        (Faults(restart_fails=True), ["restart"], "did not answer /health", {}),
        (Faults(restart_loses_state=True), ["restart"], "after the restart answered 404", {}),
        (Faults(restart_same_instance=True), ["restart"], "process was not replaced", {}),
        (Faults(restart_delay=1.5), ["restart"], "above the lane's 1 s", {}),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_fault_fails_its_gate(tmp_path, quick_restart, faults, gates, reason, sizes):
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = lane_with("4090", **{**FAST, **sizes}, max_restart_seconds=1.0)
    with serving(dist, lane, faults) as fake:
        receipt, _ = qualify_live(dist, lane, fake)
    assert receipt["status"] == "failed"
    first = gates[0]
    result = receipt["gates"][first]
    assert result["status"] == "failed", result
    assert reason in result["reason"], result["reason"]
    assert receipt["status_reason"].startswith(f"gate {first} failed")
    failed = [name for name, g in receipt["gates"].items() if g["status"] == "failed"]
    assert sorted(failed) == sorted(gates)
    if first == "identity":
        # A mismatch fails the whole receipt: nothing is measured against other bytes.
        assert receipt["gates_not_run"] == list(ENDPOINT_GATES[1:])
        assert result["mismatches"][0]["field"] == reason and result["mismatches"][0]["found"] in (WRONG, "86", "qwen38-4090-native-v0.6.10-beta.1")
    else:
        assert receipt["gates_not_run"] == []
    # Every other endpoint gate still passed: each fault breaks exactly what it should.
    assert all(receipt["gates"][n]["status"] == "passed" for n in receipt["gates"] if n not in gates and n != "gpu_smoke")


def test_a_non_loopback_bind_is_found_by_probing(tmp_path):
    addresses = harness_client.local_non_loopback_addresses()
    if not addresses:
        pytest.skip("this host has no non-loopback address to probe")
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = lane_with("4090", **FAST)
    # The server lies (reports 127.0.0.1) but really listens on every interface.
    with serving(dist, lane, Faults(bind_all=True, report_bind="127.0.0.1")) as fake:
        receipt, _ = qualify_live(dist, lane, fake)
    security = receipt["gates"]["security"]
    assert security["status"] == "failed" and "also accepts connections" in security["reason"]
    assert security["non_loopback_probe"]["reachable"]


def test_missing_vram_samples_or_restart_hook_cannot_pass(tmp_path, quick_restart):
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = lane_with("4090", **FAST)
    with serving(dist, lane) as fake:
        receipt, _ = qualify_live(dist, lane, fake, gpu=NoGpu(), hook=None)
    assert receipt["status"] == "failed"
    assert receipt["gates"]["gpu_resources"]["status"] == "skipped"
    assert receipt["gates"]["restart"]["status"] == "skipped" and "--restart-command" in receipt["gates"]["restart"]["reason"]
    assert "required gate gpu_resources did not pass" in receipt["status_reason"]
    with serving(dist, lane) as fake:
        over, _ = qualify_live(dist, lane, fake, gpu=FakeGpu(peak_mib=23900))
    assert over["gates"]["gpu_resources"]["status"] == "failed" and "above the lane's 23500 MiB" in over["gates"]["gpu_resources"]["reason"]


def test_fixture_sizing_uses_the_servers_counter_or_reports_the_miss(tmp_path):
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = lane_with("4090", **FAST)
    with serving(dist, lane, Faults(count_tokens_missing=True)) as fake:
        receipt, _ = qualify_live(dist, lane, fake)
    retrieval = receipt["gates"]["long_context_retrieval"]
    assert retrieval["fixture"]["counted_prompt_tokens"] is None
    assert retrieval["status"] == "failed" and "not the advertised 4096" in retrieval["reason"]


def test_unreachable_endpoint_gives_an_honest_pending_receipt(tmp_path, capsys):
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = find_lane("4090")
    with serving(dist, lane) as fake:
        url = fake.url
    stage = QualifyStage(Context.open(dist), lane, endpoint=url, api_key=KEY, gpu=FakeGpu(), now=NOW)
    execute(stage, force=True)
    receipt = load_receipt(stage.receipt_path)
    assert receipt["status"] == "hardware-pending" and receipt["endpoint"] is None
    assert "did not answer" in receipt["status_reason"] and receipt["gates_not_run"] == list(ENDPOINT_GATES)
    assert "did not answer" in capsys.readouterr().err


def test_the_endpoint_needs_a_key(tmp_path):
    from pipeline.errors import UsageError

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    with pytest.raises(UsageError, match="--api-key-file"):
        execute(QualifyStage(Context.open(dist), find_lane("4090"), endpoint="http://127.0.0.1:9", gpu=NoGpu()))


# -- import ------------------------------------------------------------------------------------


def owner_receipt(tmp_path: Path, lane_name: str = "4090", faults: Faults | None = None) -> Path:
    """A receipt made on the 'owner's hardware' (another dist) by the harness against the test server."""
    owner = tmp_path / "owner-dist"
    fake_build(owner, lane_name)
    lane = find_lane(lane_name)
    with serving(owner, lane, faults) as fake:
        _receipt, stage = qualify_live(owner, lane, fake, now="2026-11-03T08:00:00Z")
    target = tmp_path / f"{lane.id}-owner.json"
    target.write_bytes(stage.receipt_path.read_bytes())
    return target


def test_import_binds_a_receipt_for_the_same_bytes(tmp_path):
    source = owner_receipt(tmp_path)
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    stage, _ = pending(dist, "4090")
    assert load_receipt(stage.receipt_path)["status"] == "hardware-pending"
    stage, result = pending(dist, "4090", import_path=source)
    receipt = load_receipt(stage.receipt_path)
    original = json.loads(source.read_text())
    assert receipt["status"] == "passed"
    assert receipt["imported"] == {"source_sha256": sha256_bytes(source.read_bytes()), "imported_from": source.name}
    assert {k: v for k, v in receipt.items() if k != "imported"} == original
    assert result.outputs[0].attrs["status"] == "passed"
    # A later run that reaches no runtime keeps the hardware evidence for these bytes ...
    stage, result = pending(dist, "4090")
    assert load_receipt(stage.receipt_path)["status"] == "passed"
    assert result.outputs[0].attrs["status"] == "passed"
    stage = QualifyStage(Context.open(dist), find_lane("4090"), endpoint="http://127.0.0.1:9", api_key=KEY, gpu=NoGpu(), now=NOW)
    execute(stage, force=True)
    assert load_receipt(stage.receipt_path)["status"] == "passed"
    # ... unless told to replace it.
    stage, result = pending(dist, "4090", force=True)
    assert load_receipt(stage.receipt_path)["status"] == "hardware-pending"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["identity"].update(server_binary_sha256="e" * 64), "identity.server_binary_sha256"),
        (lambda d: d["identity"]["binaries"].update({"ninfer.exe": "e" * 64}), "identity.binaries.ninfer.exe"),
        (lambda d: d["identity"].update(source_commit="3" * 40), "identity.source_commit"),
        (lambda d: d["identity"].update(configuration_sha256="e" * 64), "identity.configuration_sha256"),
        (lambda d: d["identity"].update(model_artifact_sha256="e" * 64), "identity.model_artifact_sha256"),
        (lambda d: d["identity"].update(package={"name": "other.tar.gz", "sha256": "e" * 64, "bytes": 10}), "identity.package"),
        (lambda d: d.update(component_tag="v0.7.0-qwen38-4090-beta.1"), "component_tag"),
        (lambda d: d["thresholds"].update(min_decode_tokens_per_second=100.0), "thresholds.min_decode_tokens_per_second"),
    ],
)
def test_import_refuses_a_receipt_for_other_bytes(tmp_path, change, field):
    from pipeline.errors import IntegrityError

    source = owner_receipt(tmp_path)
    document = json.loads(source.read_text())
    change(document)
    source.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    with pytest.raises(IntegrityError) as caught:
        pending(dist, "4090", import_path=source)
    assert caught.value.field == field
    message = caught.value.render()
    assert str(source.name) in message and "found" in message and "expected" in message
    assert not (dist / "rtx4090-windows-native" / "qualification").exists()


def test_import_refuses_pending_receipts_and_a_receipt_carrying_the_key(tmp_path):
    from pipeline.errors import IntegrityError, register_secret

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    stage, _ = pending(dist, "4090")
    copy = tmp_path / "pending.json"
    copy.write_bytes(stage.receipt_path.read_bytes())
    with pytest.raises(InputError, match="no hardware evidence"):
        pending(dist, "4090", import_path=copy)
    source = owner_receipt(tmp_path)
    document = json.loads(source.read_text())
    document["gates"]["security"]["note"] = "key was " + KEY
    source.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    register_secret(KEY)
    with pytest.raises(IntegrityError, match="contains a secret") as caught:
        pending(dist, "4090", import_path=source)
    assert KEY not in caught.value.render()


# -- the CLI, a real server process and a real restart ------------------------------------------------

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--version*) echo "NVIDIA-SMI version  : 580.95.05"; echo "CUDA Version       : 13.0" ;;
  *memory.used*) echo "21873, 287.45" ;;
  *--query-gpu=name,driver_version,compute_cap,memory.total*) echo "NVIDIA GeForce RTX 4090, 580.95.05, 8.9, 24564" ;;
  "") echo "| NVIDIA-SMI 580.95.05    Driver Version: 580.95.05    CUDA Version: 13.0 |" ;;
  *) exit 6 ;;
esac
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_cli_qualifies_a_server_process_and_restarts_it_for_real(tmp_path, monkeypatch):
    import time

    import requests
    from repokit import ROOT

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    ident = resolve_identity(Context.open(dist), find_lane("4090"))
    (tmp_path / "identity.json").write_text(json.dumps(status_identity(ident)))
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(FAKE_SMI)
    (tools / "nvidia-smi").chmod(0o755)
    port = _free_port()
    pidfile = tmp_path / "server.pid"
    server = ROOT / "tests" / "kits" / "ninfer_fake_server.py"
    subprocess.run(
        [sys.executable, str(server), "start", "--", "--port", str(port), "--api-key-file", str(key_file),
         "--identity", str(tmp_path / "identity.json"), "--state", str(tmp_path / "state.json"), "--pidfile", str(pidfile)],
        check=True, timeout=30,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        assert pidfile.exists(), "the test server did not start"
        first_pid = pidfile.read_text()
        env = dict(__import__("os").environ, PATH=f"{tools}:{__import__('os').environ['PATH']}")
        command = [
            sys.executable, "-m", "pipeline", "qualify", "--lane", "4090", "--dist", str(dist),
            "--endpoint", f"http://127.0.0.1:{port}/v1", "--api-key-file", str(key_file),
            "--restart-command", f"{sys.executable} {server} restart --pidfile {pidfile}",
        ]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        receipt_path = dist / "rtx4090-windows-native" / "qualification" / "rtx4090-windows-native.json"
        assert result.returncode == 0, result.stderr
        receipt = load_receipt(receipt_path)
        assert receipt["status"] == "passed", receipt["status_reason"]
        assert pidfile.read_text() != first_pid, "the restart command replaced the process"
        assert receipt["gates"]["restart"]["process_replaced"] is True
        assert receipt["host"] == {"gpu_name": "NVIDIA GeForce RTX 4090", "driver": "580.95.05", "cuda": "13.0", "compute_capability": "8.9",
                                   "memory_total_mib": 24564, "nvidia_smi": "580.95.05", "gpu_index": 0, "gpu_count": 1}
        assert receipt["gates"]["gpu_resources"]["peak_vram_mib"] == 21873 and receipt["gates"]["gpu_resources"]["max_power_w"] == 287.45
        assert result.stdout.strip() == f"rtx4090-windows-native\tpassed\t{receipt_path}"
        for text in (result.stdout, result.stderr, receipt_path.read_text()):
            assert KEY not in text
        assert "gate restart: passed" in result.stderr
    finally:
        with contextlib.suppress(Exception):
            __import__("os").kill(int(pidfile.read_text()), 15)


def test_cli_exit_code_and_all_lanes_pick_the_served_lane(tmp_path, capsys):
    from pipeline.cli import main

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    fake_build(dist, "5090")
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    lane = find_lane("4090")
    with serving(dist, lane, Faults(status_overrides={"model_artifact_sha256": WRONG})) as fake:
        code = main(["qualify", "--all", "--dist", str(dist), "--endpoint", fake.url, "--api-key-file", str(key_file)])
    out = capsys.readouterr().out
    assert code == 1
    assert "rtx4090-windows-native\tfailed" in out and "rtx5090-container\thardware-pending" in out
    five = load_receipt(dist / "rtx5090-container" / "qualification" / "rtx5090-container.json")
    assert "serves lane rtx4090-windows-native" in five["status_reason"]


# -- the chain on the sample runtime: build -> package -> qualify (pending, then imported) -------------


@pytest.mark.slow
def test_native_chain_build_package_pending_then_import_from_the_owners_hardware(tmp_path_factory, tmp_path, capsys):
    import shutil

    from winfixtures import packaged_native_set

    from pipeline.cli import main
    from pipeline.formats.serverconfig import config_sha256

    workspace, packaged = packaged_native_set(tmp_path_factory)
    dist = tmp_path / "dist"
    shutil.copytree(packaged, dist)  # the shared packaged set stays untouched
    lane = workspace.lane
    register = Context.open(dist).register
    package = register.one("package-archive", lane=lane.id, needed_by="test", produced_by="package")
    outer = register.one("outer-checksums", lane=lane.id, needed_by="test", produced_by="package")

    stage = QualifyStage(Context.open(dist), lane, gpu=NoGpu(), now=NOW)
    execute(stage)
    receipt = load_receipt(stage.receipt_path)
    assert receipt["status"] == "hardware-pending"
    identity = receipt["identity"]
    assert identity["package"] == {"name": Path(package.path).name, "sha256": package.sha256, "bytes": package.size}
    assert identity["outer_checksums_sha256"] == outer.sha256
    assert identity["source_commit"] == workspace.commit
    assert identity["configuration_sha256"] == config_sha256(workspace.contract / "server-config.json")
    assert set(identity["binaries"]) == {"ninfer.exe", "ninfer-serve.exe", "ninfer_bench.exe"}

    # The owner's hardware holds the same bytes; the harness qualifies them against the test server.
    owner = tmp_path / "owner"
    shutil.copytree(dist, owner)
    with serving(owner, lane) as fake:
        made, owner_stage = qualify_live(owner, lane, fake, now="2026-11-03T08:00:00Z")
    assert made["status"] == "passed", made["status_reason"]
    source = tmp_path / "rtx4090-owner-receipt.json"
    source.write_bytes(owner_stage.receipt_path.read_bytes())

    capsys.readouterr()
    code = main(["qualify", "--lane", "4090", "--dist", str(dist), "--lanes-dir", str(workspace.lanes_dir), "--import", str(source)])
    assert code == 0, capsys.readouterr().err
    bound = load_receipt(stage.receipt_path)
    assert bound["status"] == "passed" and bound["imported"]["source_sha256"] == sha256_bytes(source.read_bytes())
    entry = Context.open(dist).register.one("lane-receipt", lane=lane.id, needed_by="test", produced_by="qualify")
    assert entry.attrs == {"status": "passed", "component_tag": receipt["component_tag"]}

    # The same receipt cannot be bound to a package with other bytes.
    other = tmp_path / "other"
    shutil.copytree(packaged, other)
    register = Context.open(other).register
    archive = register.path_of(register.one("package-archive", lane=lane.id, needed_by="test", produced_by="package"))
    archive.write_bytes(archive.read_bytes() + b"\0")
    capsys.readouterr()
    code = main(["qualify", "--lane", "4090", "--dist", str(other), "--lanes-dir", str(workspace.lanes_dir), "--import", str(source)])
    assert code == 5
    assert "changed on disk" in capsys.readouterr().err  # the register catches the edited archive first


@pytest.mark.slow
@pytest.mark.cuda
def test_container_chain_on_the_compiled_sample(tmp_path, sample_repo):
    """build -> package -> qualify (pending) on the real sample; the owner's run executes the packaged
    binary's selftest for real, so on a host without a driver that gate fails, honestly."""
    import shutil

    from repokit import have_nvcc

    from pipeline.lanework.source import parse_source
    from pipeline.stages.build import BuildStage
    from pipeline.stages.package import package_lane

    repo, commit = sample_repo
    dist = tmp_path / "dist"
    lane = find_lane("5090")
    execute(BuildStage(Context.open(dist), lane, source=parse_source(str(repo)), toolchain_mode="system" if have_nvcc() else "pinned", rehearsal=True))
    package_lane("5090", dist=dist)
    stage = QualifyStage(Context.open(dist), lane, gpu=NoGpu(), now=NOW)
    execute(stage)
    receipt = load_receipt(stage.receipt_path)
    assert receipt["status"] == "hardware-pending" and receipt["identity"]["source_commit"] == commit
    assert receipt["identity"]["package"]["name"] == "ninfer-qwen38-rtx5090-v0.7.0-linux-x86_64-cuda13.1.tar.gz"
    owner = tmp_path / "owner"
    shutil.copytree(dist, owner)
    with serving(owner, lane) as fake:
        made, owner_stage = qualify_live(owner, lane, fake, gpu=FakeGpu(name="NVIDIA GeForce RTX 5090", cc="12.0", peak_mib=30100))
    smoke = made["gates"]["gpu_smoke"]
    if harness_gpu.NvidiaSmi().facts() is None:
        # The packaged ninfer-serve really ran: without a driver CUDA cannot start.
        assert smoke["status"] == "failed" and "cudaGetDeviceCount failed" in smoke["reason"], smoke
        assert made["status"] == "failed"
    assert all(made["gates"][name]["status"] == "passed" for name in ENDPOINT_GATES)
    source = tmp_path / "owner-receipt.json"
    source.write_bytes(owner_stage.receipt_path.read_bytes())
    stage = QualifyStage(Context.open(dist), lane, import_path=source, gpu=NoGpu())
    result = execute(stage)
    assert load_receipt(stage.receipt_path)["status"] == made["status"]
    assert result.outputs[0].attrs["status"] == made["status"]


@pytest.mark.gpu
@pytest.mark.cuda
@pytest.mark.slow
def test_gpu_smoke_gate_runs_the_packaged_selftest_on_a_real_gpu(tmp_path):
    """On a host with an NVIDIA driver the packaged ninfer-serve --selftest must pass for real.

    QUALIFY_GPU_DIST (a dist holding a build and package for this GPU's architecture),
    QUALIFY_GPU_LANES (its lanes folder) and QUALIFY_GPU_LIBS (libcudart.so.13) point at
    binaries built elsewhere; without them the sample is built here for this GPU.
    QUALIFY_GPU_OUT, when set, receives the receipt and the selftest line.
    """
    import os
    import shutil

    from pipeline.formats.lanes import CUDA_ARCHITECTURES, load_lane
    from pipeline.stages.qualify import qualify_lanes

    facts = harness_gpu.NvidiaSmi().facts()
    if facts is None:
        pytest.skip("no NVIDIA driver on this host: nvidia-smi is absent or fails")
    dist = tmp_path / "dist"
    libs = [Path(p) for p in os.environ.get("QUALIFY_GPU_LIBS", "").split(os.pathsep) if p]
    if os.environ.get("QUALIFY_GPU_DIST"):
        shutil.copytree(os.environ["QUALIFY_GPU_DIST"], dist)
        lanes_dir = Path(os.environ["QUALIFY_GPU_LANES"])
    else:
        arch = {cc: a for a, cc in CUDA_ARCHITECTURES.items()}.get(facts["compute_capability"])
        if arch is None:
            pytest.skip(f"the sample has no CUDA architecture for compute capability {facts['compute_capability']}")
        from repokit import SAMPLE, have_nvcc, make_repo

        from pipeline.lanework.source import parse_source
        from pipeline.stages.build import BuildStage
        from pipeline.stages.package import package_lane

        lanes_dir = tmp_path / "lanes"
        lanes_dir.mkdir()
        text = find_lane("5090").file.read_text().replace('architecture = "120a"', f'architecture = "{arch}"')
        text = text.replace('compute_capability = "12.0"', f'compute_capability = "{facts["compute_capability"]}"')
        (lanes_dir / "rtx5090-container.toml").write_text(text)
        repo = tmp_path / "ninfer"
        make_repo(repo, SAMPLE)
        lane = load_lane(lanes_dir / "rtx5090-container.toml")
        execute(BuildStage(Context.open(dist), lane, source=parse_source(str(repo)), toolchain_mode="system" if have_nvcc() else "pinned", rehearsal=True))
        package_lane("5090", dist=dist, lane=lane)
    results = qualify_lanes(["5090"], dist=dist, lanes_dir=lanes_dir, library_dirs=libs)
    (_lane, status, path) = results[0]
    receipt = load_receipt(path)
    smoke = receipt["gates"]["gpu_smoke"]
    out = os.environ.get("QUALIFY_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(out) / path.name)
        Path(out, "selftest-line.txt").write_text((smoke.get("line") or smoke["reason"]) + "\n")
    assert smoke["status"] == "passed", smoke
    assert smoke["line"].startswith("selftest: ok device=") and smoke["lane_device"] is True
    assert smoke["compute_capability"] == facts["compute_capability"] == load_lane(lanes_dir / "rtx5090-container.toml").compute_capability
    assert smoke["cuda_architecture"] == receipt["identity"]["build_identity"]["cuda_architecture"]
    assert receipt["host"]["gpu_name"] == facts["gpu_name"] and status == "hardware-pending"


# -- numbers: a NaN threshold never passes a gate, and no receipt carries NaN ---------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 0, -2.5, True, "135", None])
def test_a_gate_threshold_that_is_not_a_finite_positive_number_fails_the_gate(value):
    from types import SimpleNamespace

    run = SimpleNamespace(thresholds={"min_decode_tokens_per_second": value})
    with pytest.raises(qualify_harness.GateFailure, match="not a finite positive number: nothing can be judged against it"):
        qualify_harness._threshold(run, "min_decode_tokens_per_second")
    assert qualify_harness._threshold(SimpleNamespace(thresholds={"k": 135}), "k") == 135.0
    with pytest.raises(qualify_harness.GateFailure, match="finite positive integer"):
        qualify_harness._threshold(SimpleNamespace(thresholds={"k": 2.5}), "k", integer=True)


def _benchmark_run(**thresholds):
    from types import SimpleNamespace

    from pipeline.harness.client import ChatResult

    usage = {"completion_tokens": 129, "prompt_tokens": 600, "prompt_tokens_details": {"cached_tokens": 100}}
    stream = ChatResult(200, "words", usage, elapsed=3.0, first_token_at=0.5, last_token_at=2.5, content_events=129)
    limits = {"completion_tokens": 129, "min_decode_tokens_per_second": 50, "min_prefill_tokens_per_second": 500, **thresholds}
    return SimpleNamespace(thresholds=limits, benchmark=stream, benchmark_error=None, benchmark_data={"fixture_sha256": "f" * 64, "target_prompt_tokens": 600})


def test_decode_and_prefill_judge_one_benchmark_stream_with_their_own_numbers():
    """The two throughput gates share one implementation; each keeps its own receipt fields and reasons."""
    decode = qualify_harness.gate_decode(_benchmark_run())
    assert decode.status == "passed" and decode.reason == "decode ran at 64.00 tokens/s over 129 tokens (threshold 50)"
    assert decode.to_json() == {
        "completion_tokens": 129, "requested_completion_tokens": 129, "stream_content_events": 129, "threshold_tokens_per_second": 50.0,
        "basis": "client-wall", "wall_seconds": 3.0, "decode_seconds": 2.0, "tokens_per_second": 64.0, "status": "passed", "reason": decode.reason,
    }
    prefill = qualify_harness.gate_prefill(_benchmark_run())
    assert prefill.status == "passed" and prefill.reason == "prefill ran at 1000.00 tokens/s over 500 computed prompt tokens (threshold 500)"
    assert prefill.to_json() == {
        "prompt_tokens": 600, "cached_tokens": 100, "computed_prompt_tokens": 500, "threshold_tokens_per_second": 500.0,
        "basis": "client-wall (computed prompt tokens / time to first token)", "fixture_sha256": "f" * 64,
        "prefill_seconds": 0.5, "tokens_per_second": 1000.0, "status": "passed", "reason": prefill.reason,
    }
    slow = qualify_harness.gate_decode(_benchmark_run(min_decode_tokens_per_second=100))
    assert (slow.status, slow.reason) == ("failed", "decode ran at 64.00 tokens/s, below the lane's 100")
    short = qualify_harness.gate_decode(_benchmark_run(completion_tokens=200))
    assert short.status == "failed" and "stopped after 129 of 200 tokens" in short.reason and "tokens_per_second" not in short.data
    # Without a benchmark: decode carries the fixture's description, prefill only its threshold (as before the merge).
    broken = _benchmark_run()
    broken.benchmark_error = "the benchmark request did not complete"
    assert qualify_harness.gate_decode(broken).data == {"threshold_tokens_per_second": 50.0, "fixture_sha256": "f" * 64, "target_prompt_tokens": 600}
    assert qualify_harness.gate_prefill(broken).data == {"threshold_tokens_per_second": 500.0}


def test_nan_thresholds_fail_their_gates_and_the_receipt_writer_refuses_them(tmp_path, quick_restart, monkeypatch):
    """Before: decode and TTFT reported 'passed (threshold nan)' and the receipt held a bare NaN literal."""
    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    lane = lane_with("4090", min_decode_tokens_per_second=float("nan"), max_time_to_first_token_seconds=float("nan"), **FAST)
    seen: dict[str, object] = {}
    monkeypatch.setattr(QualifyStage, "_show", lambda self, name, gate: seen.__setitem__(name, gate))
    with serving(dist, lane) as fake, pytest.raises(InputError) as caught:
        qualify_live(dist, lane, fake)
    assert seen["decode_throughput"].status == "failed" and "not a finite positive number" in seen["decode_throughput"].reason
    assert seen["time_to_first_token"].status == "failed" and "not a finite positive number" in seen["time_to_first_token"].reason
    assert seen["prefill_throughput"].status == "passed"  # its threshold is the lane's real one
    error = caught.value
    assert "refusing to write a non-finite number" in error.what
    assert error.file.endswith("qualification/rtx4090-windows-native.json") and error.field == "thresholds.max_time_to_first_token_seconds"
    assert not (dist / "rtx4090-windows-native" / "qualification").exists() or not any((dist / "rtx4090-windows-native" / "qualification").iterdir())
    assert Context.open(dist).register.query("lane-receipt") == []


def test_the_json_writer_names_the_first_non_finite_number(tmp_path):
    from pipeline.util.jsonio import canonical_bytes, compact_identity_bytes

    document = {"a": 1.5, "gates": {"decode": {"rates": [1.0, float("inf")]}}, "z": float("nan")}
    with pytest.raises(InputError) as caught:
        write_json(tmp_path / "r.json", document)
    assert (caught.value.file, caught.value.field) == (str(tmp_path / "r.json"), "gates.decode.rates[1]")
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    for writer in (canonical_bytes, compact_identity_bytes):
        with pytest.raises(InputError, match="non-finite"):
            writer({"x": -float("inf")})
    assert canonical_bytes({"x": 1e308, "y": [0.0, -0.0]}) == b'{\n  "x": 1e+308,\n  "y": [\n    0.0,\n    -0.0\n  ]\n}\n'


# A name with a '..' segment is refused by the bounded tar reader itself, as in every reader
# (tests/integration/test_safetar.py): the package is damaged or tampered with.  A device name is refused
# when it would become a file name under bin/.
@pytest.mark.parametrize(("name", "error", "field"), [
    ("top/bin/..", IntegrityError, "top/bin/.."),
    ("top/bin/..\\..\\escaped", IntegrityError, "top/bin/..\\..\\escaped"),
    ("top/bin/CON", InputError, "member top/bin/CON"),
])
def test_the_smoke_run_extraction_refuses_a_member_name_that_is_no_plain_file_name(tmp_path, name, error, field):
    import io
    import tarfile

    from pipeline.stages.qualify import _extract_bin

    package = tmp_path / "p.tar.gz"
    with tarfile.open(package, "w:gz") as tar:
        for member in ("top/bin/ninfer-serve", name):
            info = tarfile.TarInfo(member)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(error) as caught:
        _extract_bin(package, scratch, "ninfer-serve")
    assert (caught.value.file, caught.value.field) == (str(package), field)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["p.tar.gz", "scratch", "scratch/bin", "scratch/bin/ninfer-serve"]


def test_import_applies_its_cap_while_reading_a_sparse_gigabyte(tmp_path):
    """`qualify --import` of a 1 GiB sparse file: refused at the 32 MiB JSON cap, never read whole (it took 1,046 MiB RSS)."""
    import sys

    from test_source_archive import assert_refused_in_bounded_memory, run_measured

    from pipeline.util.jsonio import MAX_DOCUMENT_BYTES

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    source = tmp_path / "owner.json"
    with open(source, "wb") as out:
        out.write(b'{"status": "')
        out.truncate(1 << 30)
    result = run_measured(sys.executable, "-m", "pipeline", "qualify", "--lane", "4090", "--dist", str(dist), "--import", str(source))
    assert_refused_in_bounded_memory(result, 1, f"is larger than the {MAX_DOCUMENT_BYTES} bytes allowed for a lane receipt")
    assert result["peak_mib"] < 128, result
    assert not (dist / "rtx4090-windows-native" / "qualification").exists()
