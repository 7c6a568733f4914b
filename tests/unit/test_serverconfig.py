"""The native lanes' serving contract: server-config.json, release-spec.json and the flag translation."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.formats.lanes import REPO_ROOT, load_lanes
from pipeline.formats.serverconfig import (
    REQUIRED_GATES,
    check_release_spec,
    config_sha256,
    load_release_spec,
    load_server_config,
    server_arguments,
)
from pipeline.util.jsonio import canonical_bytes

LANES_DIR = REPO_ROOT / "packaging" / "windows" / "lanes"
CONTROLLER = REPO_ROOT / "packaging" / "windows" / "Control-Release.ps1"
CONFIGS = {short: LANES_DIR / f"rtx{short}" / "server-config.json" for short in ("4090", "3090")}
SPECS = {short: LANES_DIR / f"rtx{short}" / "release-spec.json" for short in ("4090", "3090")}

# The identity of each configuration is the SHA-256 of its exact bytes.  A change
# to either file must be deliberate: update these pins in the same commit.
PINNED_SHA256 = {
    "4090": "46b602c52c055f3a59aaaf6de0cdc127fd1b3908c69faa4c5e468e125870800f",
    "3090": "e758aa2b29ca4e466f44d70f1f6353416de9e73a232ecaa194ddbe37c4a7b793",
}

MODEL_SHA256 = "81f924d440c27261d820c19a9f8d45794c5aee410f8a68bd358133fa8c0375da"
BINARY_SHA256 = "ab" * 32
STATE_ROOT = "C:\\ProgramData\\NInfer\\qwen38-4090-native"
KEY_FILE = STATE_ROOT + "\\secrets\\api-key"


def shipped(short: str = "4090") -> dict:
    return json.loads(CONFIGS[short].read_text(encoding="utf-8"))


def write_config(tmp_path: Path, document: dict, name: str = "server-config.json") -> Path:
    path = tmp_path / name
    path.write_bytes(canonical_bytes(document))
    return path


def mutated(tmp_path: Path, change, short: str = "4090") -> Path:
    document = shipped(short)
    change(document)
    return write_config(tmp_path, document)


def refusal(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_server_config(path)
    return caught.value


def arguments_for(config, **overrides):
    values = dict(
        api_key_file=KEY_FILE,
        binary_sha256=BINARY_SHA256,
        artifact_sha256=config.model.artifact_sha256,
        config_sha256=config.sha256,
        release_instance_id=f"{config.deployment_profile}-0123456789ab",
        state_root=STATE_ROOT,
    )
    values.update(overrides)
    return server_arguments(config, **values)


# --- the shipped files -----------------------------------------------------------------


@pytest.mark.parametrize("short", ["4090", "3090"])
def test_shipped_config_loads_and_is_byte_canonical(short):
    path = CONFIGS[short]
    data = path.read_bytes()
    config = load_server_config(path)
    assert data == canonical_bytes(json.loads(data))
    assert not data.startswith(b"\xef\xbb\xbf") and b"\r" not in data and data.endswith(b"}\n")
    assert config.sha256 == config_sha256(path) == hashlib.sha256(data).hexdigest()
    assert config.sha256 == PINNED_SHA256[short]


def test_shipped_config_key_set_is_schema_4():
    document = shipped("4090")
    assert sorted(document) == [
        "artifact_type", "auth", "context_cache", "deployment_profile", "engine", "lane", "listen", "model",
        "runtime_host", "schema_version", "session_checkpoint", "speculative", "telemetry", "vision",
    ]  # fmt: skip
    assert document["artifact_type"] == "ninfer_windows_server_config"
    assert document["schema_version"] == 4


SEED = {
    # value in the v0.13.1 notes: (RTX 4090, RTX 3090)
    "extra_device_state_slots": (2, 4),
    "prefill_chunk_tokens": (2048, 1024),
    "shared_host_budget_bytes": (15506063360, 12284837888),
    "admission_headroom_mib": (640, 768),
    "gpu_keep_warm_ms": (60000, 0),
    "serving_power_limit_watts": (None, 300),
    "deployment_profile": ("qwen38-4090-native-v0.7.0-beta.2", "qwen38-3090-native-v0.7.0-beta.2"),
}


@pytest.mark.parametrize("short,column", [("4090", 0), ("3090", 1)])
def test_shipped_config_carries_the_seed_serving_contract(short, column):
    config = load_server_config(CONFIGS[short])
    assert config.lane == f"rtx{short}-windows-native"
    assert config.deployment_profile == SEED["deployment_profile"][column]
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 18082)
    assert (config.auth.scheme, config.auth.required, config.auth.key_source) == ("bearer", True, "file")
    assert config.auth.minimum_key_bytes == 32
    cache = config.context_cache
    assert (cache.max_context_tokens, cache.kv_capacity_tokens, cache.kv_dtype) == (131072, 131072, "int8")
    assert cache.extra_device_state_slots == SEED["extra_device_state_slots"][column]
    assert cache.shared_host_budget_bytes == SEED["shared_host_budget_bytes"][column]
    engine = config.engine
    assert (engine.max_concurrency, engine.pending_timeout_ms) == (1, 30000)
    assert engine.prefill_chunk_tokens == SEED["prefill_chunk_tokens"][column]
    assert engine.admission_headroom_mib == SEED["admission_headroom_mib"][column]
    assert engine.gpu_keep_warm_ms == SEED["gpu_keep_warm_ms"][column]
    spec = config.speculative
    assert (spec.backend, spec.draft_tokens, spec.lm_head_draft, spec.dflash2) == ("mtp", 3, True, False)
    checkpoint = config.session_checkpoint
    assert checkpoint.required is True and checkpoint.require_origin_auth is True
    assert checkpoint.directory == "cache/{release_instance_id}/session-checkpoints-v3"
    assert checkpoint.checkpoint_schema_version == 3
    assert config.vision.enabled is False
    assert config.runtime_host.serving_power_limit_watts == SEED["serving_power_limit_watts"][column]
    assert config.runtime_host.gpu_binding == "uuid"
    model = config.model
    assert model.public_id == "q38-ninfer"
    assert model.repository == "https://huggingface.co/neroued/Qwen3.8-27B-NInfer"
    assert model.revision == "1cbd84e7221e51186bd7f093a149912d2489625b"
    assert (model.artifact_name, model.artifact_bytes) == ("qwen3_8_27b.ninfer", 20437521664)
    assert model.artifact_sha256 == MODEL_SHA256
    assert model.local_file_name == "qwen3_8_27b-v3.ninfer"
    assert model.container_version == 3
    # The seed's shared budget in MiB, as the notes print it.
    assert cache.shared_host_budget_bytes / 2**20 == (14787.734375, 11715.734375)[column]


def _flatten(document, prefix=""):
    items = {}
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            items.update(_flatten(value, name + "."))
        else:
            items[name] = value
    return items


def test_lane_configs_differ_exactly_where_the_seed_says():
    left, right = _flatten(shipped("4090")), _flatten(shipped("3090"))
    assert set(left) == set(right)
    differing = {key for key in left if left[key] != right[key]}
    assert differing == {
        "lane",
        "deployment_profile",
        "context_cache.extra_device_state_slots",
        "context_cache.shared_host_budget_bytes",
        "engine.prefill_chunk_tokens",
        "engine.admission_headroom_mib",
        "engine.gpu_keep_warm_ms",
        "runtime_host.serving_power_limit_watts",
    }


@pytest.mark.parametrize("short", ["4090", "3090"])
def test_shipped_release_spec_matches_lane_and_config(short):
    lanes = load_lanes()
    lane = lanes[f"rtx{short}-windows-native"]
    spec = check_release_spec(SPECS[short], lane)
    data = SPECS[short].read_bytes()
    assert data == canonical_bytes(json.loads(data))
    assert spec.gpu["cuda_architecture"] == {"4090": "sm_89", "3090": "sm_86"}[short]
    assert spec.gpu["cmake_cuda_architecture"] == {"4090": "89", "3090": "86"}[short]
    assert spec.gpu["compute_capability"] == {"4090": "8.9", "3090": "8.6"}[short]
    assert spec.gpu["minimum_driver_major"] == 580
    assert spec.source == {
        "repository": "https://github.com/alphastorm/ninfer.git",
        "commit": "7a25cd72f490183e4113f1e84e68e36d653ddd28",
        "upstream_base": "64d10fbf9f8e6bfc79ab0570b94674c5b9997929",
    }
    assert spec.component["version"] == "0.7.0"
    assert spec.lifecycle["task_name"] == f"NInfer-Qwen38-{short}-Native"
    assert spec.lifecycle["state_root"] == f"C:/ProgramData/NInfer/qwen38-{short}-native"
    assert spec.lifecycle["state_pointers"] == ["prepared_release", "active_release", "previous_release"]
    assert spec.lifecycle["graceful_stop_timeout_seconds"] == 900
    assert spec.lifecycle["host_memory_floor_mib"] == {"4090": 32768, "3090": None}[short]
    assert spec.lifecycle["power_limit_watts"] == {"4090": None, "3090": 300}[short]
    assert list(spec.required_gates) == REQUIRED_GATES and len(REQUIRED_GATES) == 11
    assert spec.model == load_server_config(CONFIGS[short]).model


# --- refusals: each for its own reason ----------------------------------------------------


@pytest.mark.parametrize(
    "host,reason",
    [
        ("0.0.0.0", "binds every network interface"),
        ("::", "binds every network interface"),
        ("192.168.1.20", "exposes the server beyond this machine"),
        ("100.64.0.7", "exposes the server beyond this machine"),
        ("localhost", "host name is resolved"),
        ("127.0.0.2", "exposes the server beyond this machine"),
    ],
)
def test_refuses_non_loopback_listen_host(tmp_path, host, reason):
    error = refusal(mutated(tmp_path, lambda d: d["listen"].__setitem__("host", host)))
    assert error.field == "listen.host"
    assert error.found == host
    message = str(error)
    assert "is not a loopback address" in message and reason in message
    assert "expected '127.0.0.1' or '::1'" in message
    assert "server-config.json" in message


def test_accepts_ipv6_loopback(tmp_path):
    config = load_server_config(mutated(tmp_path, lambda d: d["listen"].__setitem__("host", "::1")))
    assert config.listen.host == "::1"


def test_refuses_auth_turned_off(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["auth"].__setitem__("required", False)))
    assert error.field == "auth.required"
    assert "turns authentication off" in str(error) and "found False" in str(error)


@pytest.mark.parametrize("scheme", ["basic", "none", "Bearer"])
def test_refuses_non_bearer_auth(tmp_path, scheme):
    error = refusal(mutated(tmp_path, lambda d: d["auth"].__setitem__("scheme", scheme)))
    assert error.field == "auth.scheme"
    assert f"found {scheme!r}" in str(error) and "expected 'bearer'" in str(error)


def test_refuses_key_on_command_line(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["auth"].__setitem__("key_source", "argument")))
    assert error.field == "auth.key_source"
    assert "visible to every local process" in str(error)


@pytest.mark.parametrize("minimum", [31, 16, 0])
def test_refuses_short_minimum_key(tmp_path, minimum):
    error = refusal(mutated(tmp_path, lambda d: d["auth"].__setitem__("minimum_key_bytes", minimum)))
    assert error.field == "auth.minimum_key_bytes"
    assert f"found {minimum}" in str(error) and "expected at least 32" in str(error)


def test_refuses_origin_auth_false(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["session_checkpoint"].__setitem__("require_origin_auth", False)))
    assert error.field == "session_checkpoint.require_origin_auth"
    assert "without origin authentication" in str(error)
    assert "--session-checkpoint-require-origin-auth" in str(error)


def test_refuses_origin_auth_missing(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["session_checkpoint"].pop("require_origin_auth")))
    assert error.field == "session_checkpoint.require_origin_auth"
    assert "is missing, so checkpoints would be accepted without origin authentication" in str(error)
    assert "expected true (--session-checkpoint-require-origin-auth)" in str(error)


def test_refuses_optional_checkpoints(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["session_checkpoint"].__setitem__("required", False)))
    assert error.field == "session_checkpoint.required"


def test_refuses_crlf(tmp_path):
    path = tmp_path / "server-config.json"
    path.write_bytes(canonical_bytes(shipped()).replace(b"\n", b"\r\n"))
    error = refusal(path)
    assert "carriage return (CR) at line 1" in str(error)
    assert error.file == str(path)


def test_refuses_bom(tmp_path):
    path = tmp_path / "server-config.json"
    path.write_bytes(b"\xef\xbb\xbf" + canonical_bytes(shipped()))
    error = refusal(path)
    assert "byte-order mark" in str(error)


@pytest.mark.parametrize(
    "render,line",
    [
        (lambda d: json.dumps(d, sort_keys=True, indent=4) + "\n", lambda lines, lane: 2),
        (lambda d: json.dumps(dict(reversed(list(d.items()))), indent=2) + "\n", lambda lines, lane: 2),
        (lambda d: json.dumps(d, sort_keys=True, indent=2), lambda lines, lane: lines + 1),
        (lambda d: json.dumps(d, sort_keys=True, indent=2) + "\n\n", lambda lines, lane: lines + 2),
        (lambda d: json.dumps(d, sort_keys=True, indent=2).replace('"lane": ', '"lane":  ') + "\n", lambda lines, lane: lane),
    ],
    ids=["indent-4", "unsorted-keys", "no-final-newline", "extra-newline", "extra-space"],
)
def test_refuses_non_canonical_bytes(tmp_path, render, line):
    path = tmp_path / "server-config.json"
    document = shipped()
    path.write_text(render(document), encoding="utf-8", newline="\n")
    assert path.read_bytes() != canonical_bytes(document)
    error = refusal(path)
    canonical_lines = canonical_bytes(document).decode().splitlines()
    lane_line = canonical_lines.index('  "lane": "rtx4090-windows-native",') + 1
    assert "is not byte-canonical JSON" in str(error)
    assert f"first difference at line {line(len(canonical_lines), lane_line)}" in str(error)
    assert "canonical_bytes" in str(error)


def test_canonical_shipped_bytes_identity_changes_with_any_byte(tmp_path):
    document = shipped()
    document["engine"]["pending_timeout_ms"] = 30001
    path = write_config(tmp_path, document)
    assert load_server_config(path).sha256 != PINNED_SHA256["4090"]


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda d: d.__setitem__("extra", 1), "extra"),
        (lambda d: d["engine"].__setitem__("max_private_continuations", 8), "engine.max_private_continuations"),
        (lambda d: d["model"].__setitem__("weights_id", "x"), "model.weights_id"),
        (lambda d: d["listen"].__setitem__("allowed_host_classes", ["loopback"]), "listen.allowed_host_classes"),
    ],
)
def test_refuses_unknown_keys(tmp_path, change, field):
    error = refusal(mutated(tmp_path, change))
    assert error.field == field
    assert "unknown key" in str(error)


@pytest.mark.parametrize(
    "directory,reason",
    [
        ("/var/ninfer/checkpoints/{release_instance_id}", "must be relative to the state root"),
        ("C:/ProgramData/NInfer/{release_instance_id}", "must be relative to the state root"),
        ("cache/../../{release_instance_id}/x", "escapes its root with '..'"),
        ("../cache/{release_instance_id}", "escapes its root with '..'"),
        ("cache\\{release_instance_id}\\session-checkpoints-v3", "must use '/' as separator"),
        ("cache/session-checkpoints-v3", "must contain the placeholder {release_instance_id}"),
        ("cache/{release_instance_id}/{release_instance_id}", "must contain the placeholder {release_instance_id}"),
        ("cache//{release_instance_id}", "empty or unsafe path segment"),
    ],
)
def test_refuses_unsafe_checkpoint_directory(tmp_path, directory, reason):
    error = refusal(mutated(tmp_path, lambda d: d["session_checkpoint"].__setitem__("directory", directory)))
    assert error.field == "session_checkpoint.directory"
    assert reason in str(error)
    assert error.found == directory


def test_refuses_unsafe_request_log(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["telemetry"].__setitem__("request_log_jsonl", "../logs/{release_instance_id}/r.jsonl")))
    assert error.field == "telemetry.request_log_jsonl"
    assert "escapes its root" in str(error)


@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("artifact_sha256", MODEL_SHA256.upper(), "is not a SHA-256"),
        ("artifact_sha256", MODEL_SHA256[:-1], "is not a SHA-256"),
        ("artifact_sha256", "sha256:" + MODEL_SHA256, "is not a SHA-256"),
        ("revision", "1cbd84e7221e51186bd7f093a149912d2489625", "is not a full 40-hex commit"),
        ("revision", "main", "is not a full 40-hex commit"),
        ("repository", "https://github.com/neroued/Qwen3.8-27B-NInfer", "is not a Hugging Face model repository URL"),
        ("local_file_name", "../qwen3_8_27b-v3.ninfer", "is not a plain .ninfer file name"),
        ("artifact_name", "qwen3_8_27b.gguf", "is not a .ninfer file name"),
    ],
)
def test_refuses_malformed_model_binding(tmp_path, key, value, reason):
    error = refusal(mutated(tmp_path, lambda d: d["model"].__setitem__(key, value)))
    assert error.field == f"model.{key}"
    assert reason in str(error)


def test_refuses_inconsistent_model_url(tmp_path):
    def change(document):
        document["model"]["artifact_url"] = document["model"]["artifact_url"].replace("1cbd84e7", "0cbd84e7")

    error = refusal(mutated(tmp_path, change))
    assert error.field == "model.artifact_url"
    assert "does not match repository, revision and artifact name" in str(error)
    assert "/resolve/1cbd84e7221e51186bd7f093a149912d2489625b/qwen3_8_27b.ninfer" in str(error)


def test_refuses_url_when_revision_changes_alone(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["model"].__setitem__("revision", "0" * 40)))
    assert error.field == "model.artifact_url"


@pytest.mark.parametrize(
    "change,field,text",
    [
        (lambda d: d["speculative"].__setitem__("dflash2", True), "speculative.dflash2", "DFlash2"),
        (lambda d: d["speculative"].__setitem__("backend", "dflash"), "speculative.backend", "expected 'mtp'"),
        (lambda d: d["vision"].__setitem__("enabled", True), "vision.enabled", "no native lane claims"),
        (lambda d: d["engine"].__setitem__("prefill_chunk_tokens", 1000), "engine.prefill_chunk_tokens", "multiple of 128"),
        (lambda d: d["context_cache"].__setitem__("kv_capacity_tokens", 65536), "context_cache.kv_capacity_tokens", "cannot hold"),
        (lambda d: d["context_cache"].__setitem__("kv_dtype", "fp8"), "context_cache.kv_dtype", "int8 or bf16"),
        (lambda d: d["engine"].__setitem__("max_concurrency", True), "engine.max_concurrency", "wrong type"),
        (lambda d: d["engine"].__setitem__("max_concurrency", 0), "engine.max_concurrency", "invalid value"),
        (lambda d: d["runtime_host"].__setitem__("gpu_binding", "index"), "runtime_host.gpu_binding", "UUID binding"),
        (lambda d: d["runtime_host"].__setitem__("serving_power_limit_watts", True), "runtime_host.serving_power_limit_watts", "invalid value"),
        (lambda d: d.__setitem__("schema_version", 3), "schema_version", "unsupported schema version"),
        (lambda d: d.__setitem__("deployment_profile", "qwen38-3090-native-v0.7.0-beta.2"), "deployment_profile", "another GPU"),
        (lambda d: d["listen"].__setitem__("port", 80), "listen.port", "invalid value"),
    ],
)
def test_refuses_other_contract_violations(tmp_path, change, field, text):
    error = refusal(mutated(tmp_path, change))
    assert error.field == field
    assert text in str(error)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["listen"].__setitem__("host", "0.0.0.0"),
        lambda d: d["auth"].__setitem__("minimum_key_bytes", 8),
        lambda d: d["session_checkpoint"].__setitem__("directory", "/abs/{release_instance_id}"),
        lambda d: d["model"].__setitem__("revision", "main"),
        lambda d: d["vision"].__setitem__("enabled", True),
    ],
    ids=["host", "key-bytes", "directory", "revision", "vision"],
)
def test_refusal_message_names_file_field_found_expected_and_fix(tmp_path, change):
    error = refusal(mutated(tmp_path, change))
    message = str(error)
    assert error.file == str(tmp_path / "server-config.json")
    assert f"server-config.json: {error.field}: " in message
    assert "(found " in message and "; expected " in message and "Fix: " in message


# --- the flag translation -------------------------------------------------------------------


def test_server_arguments_for_the_4090_lane():
    config = load_server_config(CONFIGS["4090"])
    instance = "qwen38-4090-native-v0.7.0-beta.2-0123456789ab"
    assert arguments_for(config) == [
        STATE_ROOT + "\\models\\qwen3_8_27b-v3.ninfer",
        "--host", "127.0.0.1",
        "--port", "18082",
        "--api-key-file", KEY_FILE,
        "--model-id", "q38-ninfer",
        "--deployment-profile", "qwen38-4090-native-v0.7.0-beta.2",
        "--binary-sha256", BINARY_SHA256,
        "--artifact-sha256", MODEL_SHA256,
        "--config-sha256", PINNED_SHA256["4090"],
        "--max-context", "131072",
        "--kv-capacity", "131072",
        "--kv-dtype", "int8",
        "--prefill-chunk", "2048",
        "--spec", "mtp",
        "--draft-tokens", "3",
        "--lm-head-draft",
        "--max-concurrency", "1",
        "--pending-timeout-ms", "30000",
        "--device-state-slots", "2",
        "--host-budget-bytes", "15506063360",
        "--admission-headroom-mib", "640",
        "--gpu-keep-warm-ms", "60000",
        "--session-checkpoint-dir", STATE_ROOT + f"\\cache\\{instance}\\session-checkpoints-v3",
        "--session-checkpoint-require-origin-auth",
        "--request-log-jsonl", STATE_ROOT + f"\\logs\\{instance}\\requests.jsonl",
        "--stop-event", "Global\\NInfer-qwen38-4090-native-v0.7.0-beta.2-stop",
    ]  # fmt: skip


def test_server_arguments_for_the_3090_lane_differ_in_the_seed_values():
    config = load_server_config(CONFIGS["3090"])
    arguments = arguments_for(config)

    def value(flag):
        return arguments[arguments.index(flag) + 1]

    assert value("--device-state-slots") == "4"
    assert value("--prefill-chunk") == "1024"
    assert value("--host-budget-bytes") == "12284837888"
    assert value("--admission-headroom-mib") == "768"
    assert value("--gpu-keep-warm-ms") == "0"
    assert value("--config-sha256") == PINNED_SHA256["3090"]
    assert "--lm-head-draft" in arguments and "--session-checkpoint-require-origin-auth" in arguments
    assert "--api-key" not in arguments  # the key itself never reaches the command line


def test_server_arguments_without_state_root_are_relative():
    config = load_server_config(CONFIGS["4090"])
    arguments = arguments_for(config, state_root=None)
    assert arguments[0] == "models\\qwen3_8_27b-v3.ninfer"
    assert arguments[arguments.index("--session-checkpoint-dir") + 1].startswith("cache\\qwen38-4090-native-v0.7.0-beta.2-")


def test_lm_head_draft_flag_follows_the_config(tmp_path):
    config = load_server_config(mutated(tmp_path, lambda d: d["speculative"].__setitem__("lm_head_draft", False)))
    assert "--lm-head-draft" not in arguments_for(config)


@pytest.mark.parametrize(
    "overrides,field,text",
    [
        ({"artifact_sha256": "0" * 64}, "artifact_sha256", "differs from the configuration's pinned model"),
        ({"config_sha256": "0" * 64}, "config_sha256", "is not the SHA-256 of this configuration's bytes"),
        ({"binary_sha256": "xyz"}, "binary_sha256", "is not a SHA-256"),
        ({"release_instance_id": "../escape"}, "release_instance_id", "is not a release instance id"),
        ({"release_instance_id": "a/b"}, "release_instance_id", "is not a release instance id"),
        ({"api_key_file": ""}, "api_key_file", "is empty"),
    ],
)
def test_server_arguments_refuse_inconsistent_identity(overrides, field, text):
    config = load_server_config(CONFIGS["4090"])
    with pytest.raises(InputError) as caught:
        arguments_for(config, **overrides)
    assert caught.value.field == field
    assert text in str(caught.value)


def _powershell_translation() -> list[tuple[str, str | None, str | None]]:
    """(flag, section variable, config key) per flag, in order, from Get-ServerArgumentList."""
    import tree_sitter_powershell
    from tree_sitter import Language, Parser

    source = CONTROLLER.read_bytes()
    tree = Parser(Language(tree_sitter_powershell.language())).parse(source)
    functions = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "function_statement":
            name = next(c for c in node.children if c.type == "function_name")
            if name.text.decode() == "Get-ServerArgumentList":
                functions.append(node)
        stack.extend(node.children)
    assert len(functions) == 1, "Control-Release.ps1 must define Get-ServerArgumentList exactly once"
    body = functions[0].text.decode()
    entries = []
    for line in body.splitlines():
        flag = re.search(r"\$arguments\.Add\('(--[a-z0-9-]+)'\)", line)
        if not flag:
            continue
        source_key = re.search(r"Get-Field \$(\w+) '(\w+)'", line)
        entries.append((flag.group(1), *(source_key.groups() if source_key else (None, None))))
    return entries


@pytest.mark.parametrize("short", ["4090", "3090"])
def test_python_and_powershell_translations_agree(short):
    config = load_server_config(CONFIGS[short])
    python_arguments = arguments_for(config)
    python_flags = [argument for argument in python_arguments if argument.startswith("--")]
    entries = _powershell_translation()
    powershell_flags = [flag for flag, _section, _key in entries]
    # Same flags, same order, no duplicates.
    assert powershell_flags == python_flags
    assert set(powershell_flags) == set(python_flags)
    assert len(set(python_flags)) == len(python_flags)
    # Each value the PowerShell reads from a config key is what Python passes for that flag.
    document = shipped(short)
    sections = {"listen": "listen", "cache": "context_cache", "engine": "engine", "speculative": "speculative", "model": "model"}
    templates = {"checkpoint": "session_checkpoint", "telemetry": "telemetry"}
    instance = f"{config.deployment_profile}-0123456789ab"
    checked = 0
    for flag, variable, key in entries:
        if variable is None:
            continue
        value = python_arguments[python_arguments.index(flag) + 1]
        if variable in templates:
            relative = document[templates[variable]][key].replace("{release_instance_id}", instance)
            assert value == STATE_ROOT + "\\" + relative.replace("/", "\\"), flag
        else:
            assert value == str(document[sections[variable]][key]), flag
        checked += 1
    assert checked == 15


def test_translation_covers_the_contract_flags():
    required = {
        "--host", "--port", "--api-key-file", "--model-id", "--max-context", "--kv-capacity", "--kv-dtype",
        "--prefill-chunk", "--spec", "--draft-tokens", "--lm-head-draft", "--max-concurrency", "--pending-timeout-ms",
        "--device-state-slots", "--host-budget-bytes", "--admission-headroom-mib", "--gpu-keep-warm-ms",
        "--session-checkpoint-dir", "--session-checkpoint-require-origin-auth", "--deployment-profile",
        "--binary-sha256", "--artifact-sha256", "--config-sha256",
    }  # fmt: skip
    flags = {flag for flag, _s, _k in _powershell_translation()}
    assert required <= flags
    # Beyond the contract: the request log (served-binary proof) and the stop event.
    assert flags - required == {"--request-log-jsonl", "--stop-event"}
    # Flags the product retired or that would weaken the contract never appear.
    text = CONTROLLER.read_text(encoding="utf-8")
    for retired in ("--max-private-continuations", "--host-kv-mib", "--host-state-slots", "--vision", "--api-key'"):
        assert retired not in text


# --- release-spec cross-checks --------------------------------------------------------------


def spec_copy(tmp_path: Path, change=None, short: str = "4090") -> Path:
    document = json.loads(SPECS[short].read_text(encoding="utf-8"))
    if change is not None:
        change(document)
    (tmp_path / "release-spec.json").write_bytes(canonical_bytes(document))
    (tmp_path / "server-config.json").write_bytes(CONFIGS[short].read_bytes())
    return tmp_path / "release-spec.json"


def spec_refusal(path: Path, lane) -> InputError:
    with pytest.raises(InputError) as caught:
        check_release_spec(path, lane)
    return caught.value


@pytest.fixture(scope="module")
def lane4090():
    return load_lanes()["rtx4090-windows-native"]


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"cuda_architecture": "86"}, "gpu.cmake_cuda_architecture"),
        ({"compute_capability": "8.6"}, "gpu.compute_capability"),
        ({"gpu_name": "NVIDIA GeForce RTX 3090"}, "gpu.name"),
        ({"minimum_driver_major": 575}, "gpu.minimum_driver_major"),
        ({"source_commit": "eecb437f" + "0" * 32}, "source.commit"),
        ({"upstream_base": "0" * 40}, "source.upstream_base"),
        ({"version": "0.7.1"}, "component.version"),
        ({"tag_pattern": "v{version}-qwen38-4090-durable.{n}"}, "component.tag_pattern"),
    ],
)
def test_release_spec_refuses_lane_disagreement(tmp_path, lane4090, overrides, field):
    error = spec_refusal(spec_copy(tmp_path), lane4090.with_overrides(**overrides))
    assert error.field == field
    assert "release-spec.json" in str(error)


def test_release_spec_refuses_other_lane(tmp_path):
    lane3090 = load_lanes()["rtx3090-windows-native"]
    error = spec_refusal(spec_copy(tmp_path), lane3090)
    assert error.field == "lane"
    assert "rtx4090-windows-native" in str(error)


def test_release_spec_refuses_other_beta_profile(tmp_path, lane4090):
    error = spec_refusal(spec_copy(tmp_path), lane4090.with_overrides(beta=3))
    assert error.field == "deployment_profile"
    assert "qwen38-4090-native-v0.7.0-beta.3" in str(error)


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda d: d["model"].__setitem__("artifact_sha256", "0" * 64), "model.artifact_sha256"),
        (lambda d: d["model"].__setitem__("artifact_bytes", 18210531328), "model.artifact_bytes"),
        (lambda d: d["model"].__setitem__("local_file_name", "qwen3_8_27b.ninfer"), "model.local_file_name"),
        (lambda d: d["lifecycle"].__setitem__("power_limit_watts", 300), "lifecycle.power_limit_watts"),
        (lambda d: d["gpu"].__setitem__("cuda_architecture", "sm_86"), "gpu.cuda_architecture"),
        (lambda d: d["gpu"].__setitem__("class", "rtx-3090"), "gpu.class"),
        (lambda d: d["lifecycle"].__setitem__("task_name", "NInfer-Qwen38-3090-Native"), "lifecycle.task_name"),
    ],
)
def test_release_spec_refuses_config_disagreement(tmp_path, lane4090, change, field):
    error = spec_refusal(spec_copy(tmp_path, change), lane4090)
    assert error.field == field


@pytest.mark.parametrize(
    "change,field,text",
    [
        (lambda d: d["qualification"]["required_gates"].pop(), "qualification.required_gates", "eleven gates"),
        (lambda d: d["qualification"]["required_gates"].reverse(), "qualification.required_gates", "eleven gates"),
        (lambda d: d["lifecycle"].__setitem__("state_pointers", ["active_release"]), "lifecycle.state_pointers", "pointers"),
        (lambda d: d["lifecycle"].__setitem__("graceful_stop_timeout_seconds", 0), "lifecycle.graceful_stop_timeout_seconds", "invalid"),
        (lambda d: d["lifecycle"].__setitem__("managed_stop", "terminate"), "lifecycle.managed_stop", "stop-event"),
        (lambda d: d["source"].__setitem__("commit", "7a25cd72"), "source.commit", "40-hex"),
        (lambda d: d["lifecycle"].__setitem__("uninstall", True), "lifecycle.uninstall", "unknown key"),
    ],
)
def test_release_spec_refuses_malformed_spec(tmp_path, lane4090, change, field, text):
    path = spec_copy(tmp_path, change)
    with pytest.raises(InputError) as caught:
        load_release_spec(path)
    assert caught.value.field == field
    assert text in str(caught.value)


def test_release_spec_must_be_canonical(tmp_path, lane4090):
    path = spec_copy(tmp_path)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=1, sort_keys=True) + "\n", encoding="utf-8", newline="\n")
    error = spec_refusal(path, lane4090)
    assert "is not byte-canonical JSON" in str(error)


def test_release_spec_uses_the_given_config_path(tmp_path, lane4090):
    spec = spec_copy(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "server-config.json").write_bytes(CONFIGS["3090"].read_bytes())
    with pytest.raises(InputError) as caught:
        check_release_spec(spec, lane4090, config_path=other / "server-config.json")
    assert caught.value.field == "lane"
    assert copy.copy(check_release_spec(spec, lane4090, config_path=CONFIGS["4090"])).lane == "rtx4090-windows-native"


def test_release_spec_needs_a_frozen_lane_commit(tmp_path, lane4090):
    error = spec_refusal(spec_copy(tmp_path), lane4090.with_overrides(source_commit=None))
    assert error.field == "source.commit"
    assert error.file == str(lane4090.file)
    assert "no frozen source commit" in str(error)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("context_cache", "max_context_tokens", 1 << 40),
        ("context_cache", "kv_capacity_tokens", 1 << 62),
        ("context_cache", "shared_host_budget_bytes", 1 << 60),
        ("context_cache", "extra_device_state_slots", 1 << 20),
        ("engine", "pending_timeout_ms", 10**12),
        ("engine", "gpu_keep_warm_ms", -1),
        ("engine", "max_concurrency", 1 << 31),
        ("engine", "admission_headroom_mib", 1 << 40),
        ("engine", "prefill_chunk_tokens", 128 << 40),
        ("runtime_host", "foreign_gpu_memory_limit_mib", 1 << 30),
        ("telemetry", "request_log_schema_version", 10**9),
        ("model", "artifact_bytes", 1 << 50),
        ("auth", "minimum_key_bytes", 1 << 20),
    ],
)
def test_sizes_and_counts_outside_their_declared_range_are_refused(tmp_path, section, key, value):
    """Each becomes a ninfer-serve flag: a value no fixed-width integer holds is refused, naming the field."""
    error = refusal(mutated(tmp_path, lambda d: d[section].__setitem__(key, value)))
    assert error.field == f"{section}.{key}"
    assert "invalid value" in error.what and f"found {value}" in str(error)


def test_a_nan_size_is_refused_by_type(tmp_path):
    error = refusal(mutated(tmp_path, lambda d: d["context_cache"].__setitem__("max_context_tokens", 1.5)))
    assert error.field == "context_cache.max_context_tokens" and "wrong type" in error.what
