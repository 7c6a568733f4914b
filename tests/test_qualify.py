"""The qualify stage: lane receipts bound to exact bytes, gates against a protocol-faithful server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.identity import IDENTITY_KEYS
from pipeline.lanes import find_lane
from pipeline.qualify import GATE_ORDER, QualifyStage, load_receipt, validate_receipt
from pipeline.qualify_harness import ENDPOINT_GATES
from pipeline.stage import Context, execute
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

        from pipeline.qualify_harness import GpuSamples

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
    from pipeline.serverconfig import config_sha256

    dist = tmp_path / "dist"
    fake_build(dist, "4090")
    stage, _ = pending(dist, "4090")
    receipt = load_receipt(stage.receipt_path)
    config = Path(find_lane("4090").server_config)
    from pipeline.lanes import REPO_ROOT

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
