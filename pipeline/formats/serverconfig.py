"""The native lanes' serving contract: server-config.json and release-spec.json.

`packaging/windows/lanes/<lane>/server-config.json` (artifact type
``ninfer_windows_server_config``, schema 4) is the public server configuration
of one native Windows lane.  The native server has no configuration-file flag:
Control-Release.ps1 translates the file into ``ninfer-serve`` flags, and
`server_arguments` below is the same translation in Python (a test keeps the
two in step).  The configuration's identity is the SHA-256 of the file's exact
bytes, so the file must be byte-canonical: exactly what
`pipeline.util.jsonio.canonical_bytes` produces for its parsed content (sorted
keys, two-space indent, UTF-8 without BOM, LF, trailing newline).

Schema 4 (every section is a closed key set; unknown or missing keys are errors):

    artifact_type        "ninfer_windows_server_config"
    schema_version       4
    lane                 "rtx4090-windows-native" | "rtx3090-windows-native"
    deployment_profile   e.g. "qwen38-4090-native-v0.7.0-beta.2" (also the release id)
    listen               {host, port}
    auth                 {scheme "bearer", required true, key_source "file", minimum_key_bytes >= 32}
    engine               {max_concurrency, pending_timeout_ms, prefill_chunk_tokens,
                          admission_headroom_mib, gpu_keep_warm_ms}
    context_cache        {max_context_tokens, kv_capacity_tokens, kv_dtype,
                          extra_device_state_slots, shared_host_budget_bytes}
    speculative          {backend "mtp", draft_tokens, lm_head_draft, dflash2 false}
    session_checkpoint   {required true, require_origin_auth true, directory, checkpoint_schema_version}
    telemetry            {request_log_jsonl, request_log_schema_version, status_schema_version}
    runtime_host         {gpu_binding "uuid", foreign_gpu_memory_limit_mib, serving_power_limit_watts}
    vision               {enabled false}
    model                {public_id, repository, revision, artifact_name, artifact_url,
                          artifact_bytes, artifact_sha256, local_file_name, container_version}

Listen host policy: only the loopback literals ``127.0.0.1`` and ``::1`` are
accepted.  A host *name* such as ``localhost`` is refused: it is resolved
through the hosts file at bind time, may bind another family than the client
uses, and can be redirected off the machine; ``0.0.0.0``/``::`` bind every
interface.  The controller and the GPU-owner policy assume a loopback-only,
authenticated endpoint.

Relative path templates (``session_checkpoint.directory``,
``telemetry.request_log_jsonl``) resolve against the lane's state root and must
contain the literal ``{release_instance_id}`` once; the controller substitutes
the installed release's instance id at launch time (the file itself is never
rewritten, so its hash stays the identity).

`check_release_spec` cross-checks ``release-spec.json`` (artifact type
``ninfer_windows_release_spec``, schema 3) against a `pipeline.formats.lanes.Lane`
and against the server configuration beside it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any, NoReturn

from pipeline.errors import InputError
from pipeline.formats.lanes import CUDA_ARCHITECTURES, Lane
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import canonical_bytes, check_text_hygiene, loads_document
from pipeline.util.schema import Field, read_table

SERVER_CONFIG_TYPE = "ninfer_windows_server_config"
SERVER_CONFIG_SCHEMA = 4
RELEASE_SPEC_TYPE = "ninfer_windows_release_spec"
RELEASE_SPEC_SCHEMA = 3

LOOPBACK_HOSTS = ("127.0.0.1", "::1")
MINIMUM_KEY_BYTES = 32
INSTANCE_PLACEHOLDER = "{release_instance_id}"
KV_DTYPES = ("int8", "bf16")  # what ninfer-serve's --kv-dtype accepts
STATE_POINTERS = ["prepared_release", "active_release", "previous_release"]
STOP_EVENT_TEMPLATE = "Global\\NInfer-{release_id}-stop"
REQUIRED_GATES = [
    "neutral-deterministic-build",
    "private-marker-scan",
    "deterministic-package",
    "clean-and-managed-install",
    "authenticated-real-client-protocol",
    "advertised-context-retrieval",
    "process-restart-session-continuation",
    "state-security",
    "omp-client-end-to-end",
    "bounded-gpu-performance-at-qualified-cap",
    "owner-state-restoration",
]

_LANE_ID = re.compile(r"rtx([0-9]{4})-windows-native")
_PROFILE = re.compile(r"qwen38-([0-9]{4})-native-v[0-9]+\.[0-9]+\.[0-9]+(?:-beta\.[1-9][0-9]*)?")
_INSTANCE_ID = re.compile(r"[a-z0-9][a-z0-9.-]{0,140}")
_HF_REPOSITORY = re.compile(r"https://huggingface\.co/[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.ninfer")
_TEMPLATE_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*|\{release_instance_id\}")


def _int_in(low: int, high: int):
    """An integer (never a bool) in low..high: every size and count becomes a ninfer-serve flag, parsed into a fixed-width integer."""
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


MIB_MAX = 1 << 20  # 1 TiB in MiB
TOKENS_MAX = 1 << 27  # 134M tokens: far beyond any context, well inside a 32-bit flag
MS_MAX = 86_400_000  # one day
SCHEMA_MAX = 1000


def _optional_watts(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 1000)


_CONFIG_TOP = {
    "artifact_type": Field(str),
    "schema_version": Field(int),
    "lane": Field(str),
    "deployment_profile": Field(str),
    "listen": Field(dict),
    "auth": Field(dict),
    "engine": Field(dict),
    "context_cache": Field(dict),
    "speculative": Field(dict),
    "session_checkpoint": Field(dict),
    "telemetry": Field(dict),
    "runtime_host": Field(dict),
    "vision": Field(dict),
    "model": Field(dict),
}
_LISTEN = {
    "host": Field(str),
    "port": Field(int, check=lambda v: 1024 <= v <= 65535, expected="a TCP port 1024..65535"),
}
_AUTH = {
    "scheme": Field(str),
    "required": Field(bool),
    "key_source": Field(str),
    "minimum_key_bytes": Field(int, check=lambda v: v <= 4096, expected="a key length of at most 4096 bytes (and at least 32)"),
}
_ENGINE = {
    "max_concurrency": Field(int, check=_int_in(1, 1024), expected="a number of concurrent requests 1..1024"),
    "pending_timeout_ms": Field(int, check=_int_in(1, MS_MAX), expected=f"milliseconds 1..{MS_MAX}"),
    "prefill_chunk_tokens": Field(int, check=_int_in(-TOKENS_MAX, TOKENS_MAX), expected=f"a positive multiple of 128 up to {TOKENS_MAX}"),
    "admission_headroom_mib": Field(int, check=_int_in(0, MIB_MAX), expected=f"MiB 0..{MIB_MAX}"),
    "gpu_keep_warm_ms": Field(int, check=_int_in(0, MS_MAX), expected=f"milliseconds 0..{MS_MAX} (0 disables keep-warm)"),
}
_CONTEXT_CACHE = {
    "max_context_tokens": Field(int, check=_int_in(1, TOKENS_MAX), expected=f"a token count 1..{TOKENS_MAX}"),
    "kv_capacity_tokens": Field(int, check=_int_in(1, TOKENS_MAX), expected=f"a token count 1..{TOKENS_MAX}"),
    "kv_dtype": Field(str, check=lambda v: v in KV_DTYPES, expected=" or ".join(KV_DTYPES)),
    "extra_device_state_slots": Field(int, check=_int_in(0, 1024), expected="extra slots 0..1024 (not total requests)"),
    "shared_host_budget_bytes": Field(int, check=_int_in(1, 1 << 44), expected="a byte count 1..16 TiB"),
}
_SPECULATIVE = {
    "backend": Field(str),
    "draft_tokens": Field(int, check=lambda v: 1 <= v <= 7, expected="1..7 draft tokens"),
    "lm_head_draft": Field(bool),
    "dflash2": Field(bool),
}
_SESSION_CHECKPOINT = {
    "required": Field(bool),
    "require_origin_auth": Field(bool),
    "directory": Field(str),
    "checkpoint_schema_version": Field(int, check=_int_in(1, SCHEMA_MAX), expected=f"a schema number 1..{SCHEMA_MAX}"),
}
_TELEMETRY = {
    "request_log_jsonl": Field(str),
    "request_log_schema_version": Field(int, check=_int_in(1, SCHEMA_MAX), expected=f"a schema number 1..{SCHEMA_MAX}"),
    "status_schema_version": Field(int, check=_int_in(1, SCHEMA_MAX), expected=f"a schema number 1..{SCHEMA_MAX}"),
}
_RUNTIME_HOST = {
    "gpu_binding": Field(str),
    "foreign_gpu_memory_limit_mib": Field(int, check=_int_in(1, MIB_MAX), expected=f"MiB 1..{MIB_MAX}"),
    "serving_power_limit_watts": Field(
        (int, type(None)), check=_optional_watts, expected="null (none declared) or an integer 100..1000 W"
    ),
}
_VISION = {"enabled": Field(bool)}
_MODEL = {
    "public_id": Field(str),
    "repository": Field(str),
    "revision": Field(str),
    "artifact_name": Field(str),
    "artifact_url": Field(str),
    "artifact_bytes": Field(int, check=_int_in(1, 1 << 42), expected="the artifact's size in bytes (1..4 TiB)"),
    "artifact_sha256": Field(str),
    "local_file_name": Field(str),
    "container_version": Field(int, check=_int_in(1, SCHEMA_MAX), expected=f"a model container version 1..{SCHEMA_MAX}"),
}

_SPEC_TOP = {
    "artifact_type": Field(str),
    "schema_version": Field(int),
    "lane": Field(str),
    "gpu": Field(dict),
    "component": Field(dict),
    "source": Field(dict),
    "model": Field(dict),
    "lifecycle": Field(dict),
    "qualification": Field(dict),
}
_SPEC_GPU = {
    "name": Field(str),
    "class": Field(str),
    "cuda_architecture": Field(str),
    "cmake_cuda_architecture": Field(str),
    "compute_capability": Field(str),
    "minimum_driver_major": Field(int, check=_int_in(1, 9999), expected="a driver branch 1..9999 such as 580"),
}
_SPEC_COMPONENT = {"repository": Field(str), "version": Field(str), "tag_pattern": Field(str)}
_SPEC_SOURCE = {"repository": Field(str), "commit": Field(str), "upstream_base": Field(str)}
_SPEC_LIFECYCLE = {
    "task_name": Field(str),
    "state_root": Field(str),
    "state_pointers": Field(list, items=str),
    "managed_stop": Field(str),
    "stop_event_name": Field(str),
    "graceful_stop_timeout_seconds": Field(int, check=lambda v: 1 <= v <= 3600, expected="1..3600 seconds"),
    "host_memory_floor_mib": Field(
        (int, type(None)),
        check=lambda v: v is None or _int_in(1, MIB_MAX)(v),
        expected=f"null (no floor) or MiB 1..{MIB_MAX}",
    ),
    "power_limit_watts": Field((int, type(None)), check=_optional_watts, expected="null (none declared) or 100..1000 W"),
}
_SPEC_QUALIFICATION = {"required_gates": Field(list, items=str)}


@dataclass(frozen=True)
class Listen:
    host: str
    port: int


@dataclass(frozen=True)
class Auth:
    scheme: str
    required: bool
    key_source: str
    minimum_key_bytes: int


@dataclass(frozen=True)
class Engine:
    max_concurrency: int
    pending_timeout_ms: int
    prefill_chunk_tokens: int
    admission_headroom_mib: int
    gpu_keep_warm_ms: int


@dataclass(frozen=True)
class ContextCache:
    max_context_tokens: int
    kv_capacity_tokens: int
    kv_dtype: str
    extra_device_state_slots: int
    shared_host_budget_bytes: int


@dataclass(frozen=True)
class Speculative:
    backend: str
    draft_tokens: int
    lm_head_draft: bool
    dflash2: bool


@dataclass(frozen=True)
class SessionCheckpoint:
    required: bool
    require_origin_auth: bool
    directory: str
    checkpoint_schema_version: int


@dataclass(frozen=True)
class Telemetry:
    request_log_jsonl: str
    request_log_schema_version: int
    status_schema_version: int


@dataclass(frozen=True)
class RuntimeHost:
    gpu_binding: str
    foreign_gpu_memory_limit_mib: int
    serving_power_limit_watts: int | None


@dataclass(frozen=True)
class Vision:
    enabled: bool


@dataclass(frozen=True)
class ModelBinding:
    public_id: str
    repository: str
    revision: str
    artifact_name: str
    artifact_url: str
    artifact_bytes: int
    artifact_sha256: str
    local_file_name: str
    container_version: int


@dataclass(frozen=True)
class ServerConfig:
    path: Path
    sha256: str
    lane: str
    deployment_profile: str
    listen: Listen
    auth: Auth
    engine: Engine
    context_cache: ContextCache
    speculative: Speculative
    session_checkpoint: SessionCheckpoint
    telemetry: Telemetry
    runtime_host: RuntimeHost
    vision: Vision
    model: ModelBinding

    @property
    def release_id(self) -> str:
        return self.deployment_profile

    @property
    def stop_event_name(self) -> str:
        return STOP_EVENT_TEMPLATE.format(release_id=self.deployment_profile)


@dataclass(frozen=True)
class ReleaseSpec:
    path: Path
    sha256: str
    lane: str
    gpu: dict[str, Any]
    component: dict[str, Any]
    source: dict[str, Any]
    model: ModelBinding
    lifecycle: dict[str, Any]
    required_gates: tuple[str, ...]


_CANONICAL_FIX = "write the document with pipeline.util.jsonio.canonical_bytes (sorted keys, 2-space indent, LF, final newline)"


def _read_document(path: Path) -> tuple[bytes, dict[str, Any]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError("file does not exist", file=path) from None
    check_text_hygiene(path, data)
    document = loads_document(data, source=path)
    if not isinstance(document, dict):
        raise InputError("must hold a JSON object", file=path, found=type(document).__name__, expected="object")
    return data, document


def _require_canonical(path: Path, data: bytes, document: dict[str, Any]) -> None:
    expected = canonical_bytes(document)
    if data == expected:
        return
    found_lines = data.decode("utf-8", errors="replace").split("\n")
    expected_lines = expected.decode("utf-8").split("\n")
    end = "<end of file>"
    pairs = enumerate(itertools.zip_longest(found_lines, expected_lines, fillvalue=end), start=1)
    number, (found, wanted) = next((n, pair) for n, pair in pairs if pair[0] != pair[1])
    raise InputError(
        f"is not byte-canonical JSON (first difference at line {number})",
        file=path,
        found=found,
        expected=repr(wanted),
        why="the SHA-256 of the exact bytes is the configuration's identity, so one document has exactly one byte form",
        fix=_CANONICAL_FIX,
    )


def _table(table: Any, fields: dict[str, Field], path: Path, prefix: str) -> dict[str, Any]:
    return read_table(
        table,
        fields,
        file=str(path),
        prefix=prefix,
        fix="use exactly the schema's keys (see pipeline/serverconfig.py) and " + _CANONICAL_FIX,
    )


def _refuse(path: Path, field: str, what: str, found: Any, expected: str, *, why: str | None = None, fix: str | None = None) -> NoReturn:
    if fix is None:
        fix = f"set {field} to {expected} and write the file with pipeline.util.jsonio.canonical_bytes"
    raise InputError(what, file=path, field=field, found=found, expected=expected, why=why, fix=fix)


def _check_template(path: Path, field: str, value: str, *, suffix: str | None = None) -> None:
    """A relative, forward-slash path under the state root with one {release_instance_id}."""
    expected = "a relative path such as 'cache/{release_instance_id}/session-checkpoints-v3'"
    if value.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", value) or value.startswith("//"):
        _refuse(path, field, "must be relative to the state root, not absolute", value, expected,
                why="an absolute directory would put private session state outside the protected state root")
    if "\\" in value:
        _refuse(path, field, "must use '/' as separator", value, expected)
    segments = value.split("/")
    if any(segment in ("..", ".") for segment in segments):
        _refuse(path, field, "escapes its root with '..' or uses '.'", value, expected,
                why="a '..' segment leaves the protected state root")
    if any(not _TEMPLATE_SEGMENT.fullmatch(segment) for segment in segments):
        _refuse(path, field, "has an empty or unsafe path segment", value, expected)
    if value.count(INSTANCE_PLACEHOLDER) != 1 or INSTANCE_PLACEHOLDER not in segments:
        _refuse(path, field, f"must contain the placeholder {INSTANCE_PLACEHOLDER} exactly once, as a whole segment",
                value, expected, why="each installed release instance keeps its own state; the controller substitutes the id")
    if suffix is not None and not value.endswith(suffix):
        _refuse(path, field, f"must name a '{suffix}' file", value, f"a path ending in '{suffix}'")


def _model_binding(table: Any, path: Path, prefix: str) -> ModelBinding:
    model = _table(table, _MODEL, path, prefix)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", model["public_id"]):
        _refuse(path, f"{prefix}.public_id", "is not a public model id", model["public_id"], "lowercase letters, digits, '.', '_' or '-', e.g. 'q38-ninfer'")
    if not _HF_REPOSITORY.fullmatch(model["repository"]):
        _refuse(path, f"{prefix}.repository", "is not a Hugging Face model repository URL", model["repository"],
                "https://huggingface.co/<owner>/<name>")
    if not is_commit_hex(model["revision"]):
        _refuse(path, f"{prefix}.revision", "is not a full 40-hex commit", model["revision"],
                "40 lowercase hex digits (a pinned revision, never a branch)")
    if not _FILE_NAME.fullmatch(model["artifact_name"]):
        _refuse(path, f"{prefix}.artifact_name", "is not a .ninfer file name", model["artifact_name"], "e.g. 'qwen3_8_27b.ninfer'")
    url = f"{model['repository']}/resolve/{model['revision']}/{model['artifact_name']}"
    if model["artifact_url"] != url:
        _refuse(path, f"{prefix}.artifact_url", "does not match repository, revision and artifact name", model["artifact_url"], repr(url),
                why="the download URL must name exactly the pinned revision of the pinned repository")
    if not is_sha256_hex(model["artifact_sha256"]):
        _refuse(path, f"{prefix}.artifact_sha256", "is not a SHA-256", model["artifact_sha256"], "64 lowercase hex digits")
    if not _FILE_NAME.fullmatch(model["local_file_name"]):
        _refuse(path, f"{prefix}.local_file_name", "is not a plain .ninfer file name", model["local_file_name"],
                "a file name without directories, e.g. 'qwen3_8_27b-v3.ninfer'")
    return ModelBinding(**model)


def load_server_config(path: str | Path) -> ServerConfig:
    """Read and validate one server-config.json (schema 4); see the module docstring."""
    path = Path(path)
    data, document = _read_document(path)
    top = _table(document, _CONFIG_TOP, path, "")
    if top["artifact_type"] != SERVER_CONFIG_TYPE:
        _refuse(path, "artifact_type", "is not a native server configuration", top["artifact_type"], repr(SERVER_CONFIG_TYPE))
    if top["schema_version"] != SERVER_CONFIG_SCHEMA:
        _refuse(path, "schema_version", "has an unsupported schema version", top["schema_version"], str(SERVER_CONFIG_SCHEMA))
    lane_match = _LANE_ID.fullmatch(top["lane"])
    if not lane_match:
        _refuse(path, "lane", "is not a native lane id", top["lane"], "'rtx<NNNN>-windows-native'")
    profile_match = _PROFILE.fullmatch(top["deployment_profile"])
    if not profile_match:
        _refuse(path, "deployment_profile", "is not a native deployment profile", top["deployment_profile"],
                "'qwen38-<NNNN>-native-v<X.Y.Z>[-beta.<N>]'")
    if profile_match.group(1) != lane_match.group(1):
        _refuse(path, "deployment_profile", "names another GPU than the lane", top["deployment_profile"],
                f"a profile for the RTX {lane_match.group(1)}")

    listen = Listen(**_table(top["listen"], _LISTEN, path, "listen"))
    if listen.host not in LOOPBACK_HOSTS:
        if listen.host in ("0.0.0.0", "::"):
            why = "the wildcard address binds every network interface"
        elif ":" not in listen.host and re.search(r"[A-Za-z]", listen.host):
            why = "a host name is resolved through the hosts file at bind time and is not guaranteed to be loopback"
        else:
            why = "a non-loopback address exposes the server beyond this machine"
        _refuse(path, "listen.host", "is not a loopback address", listen.host, " or ".join(repr(h) for h in LOOPBACK_HOSTS),
                why=why, fix="serve on 127.0.0.1; remote clients reach the lane through an authenticated tunnel")

    auth = Auth(**_table(top["auth"], _AUTH, path, "auth"))
    if auth.required is not True:
        _refuse(path, "auth.required", "turns authentication off", auth.required, "true",
                why="the endpoint serves private session state; every request needs the bearer key")
    if auth.scheme != "bearer":
        _refuse(path, "auth.scheme", "is not bearer authentication", auth.scheme, "'bearer'")
    if auth.key_source != "file":
        _refuse(path, "auth.key_source", "must read the key from a file", auth.key_source, "'file'",
                why="a key on the command line is visible to every local process")
    if auth.minimum_key_bytes < MINIMUM_KEY_BYTES:
        _refuse(path, "auth.minimum_key_bytes", "allows keys that are too short", auth.minimum_key_bytes,
                f"at least {MINIMUM_KEY_BYTES}", why="checkpoint origin authentication derives its key from the bearer key")

    engine = Engine(**_table(top["engine"], _ENGINE, path, "engine"))
    if engine.prefill_chunk_tokens <= 0 or engine.prefill_chunk_tokens % 128:
        _refuse(path, "engine.prefill_chunk_tokens", "is not a positive multiple of 128", engine.prefill_chunk_tokens,
                "a positive multiple of 128 (ninfer-serve refuses other values)")

    cache = ContextCache(**_table(top["context_cache"], _CONTEXT_CACHE, path, "context_cache"))
    if cache.kv_capacity_tokens < cache.max_context_tokens:
        _refuse(path, "context_cache.kv_capacity_tokens", "cannot hold the advertised context", cache.kv_capacity_tokens,
                f"at least max_context_tokens ({cache.max_context_tokens})")

    speculative = Speculative(**_table(top["speculative"], _SPECULATIVE, path, "speculative"))
    if speculative.backend != "mtp":
        _refuse(path, "speculative.backend", "is not the native lanes' speculative backend", speculative.backend, "'mtp'")
    if speculative.dflash2:
        _refuse(path, "speculative.dflash2", "enables DFlash2, which the native lanes do not ship", True, "false")

    if isinstance(top["session_checkpoint"], dict) and "require_origin_auth" not in top["session_checkpoint"]:
        _refuse(path, "session_checkpoint.require_origin_auth",
                "is missing, so checkpoints would be accepted without origin authentication", None,
                "true (--session-checkpoint-require-origin-auth)",
                why="the product profiles require authenticated checkpoint origin; the flag must not be dropped")
    checkpoint = SessionCheckpoint(**_table(top["session_checkpoint"], _SESSION_CHECKPOINT, path, "session_checkpoint"))
    if checkpoint.required is not True:
        _refuse(path, "session_checkpoint.required", "makes session checkpoints optional", checkpoint.required, "true",
                why="the configured checkpoint directory is mandatory in the product profiles")
    if checkpoint.require_origin_auth is not True:
        _refuse(path, "session_checkpoint.require_origin_auth", "accepts checkpoints without origin authentication",
                checkpoint.require_origin_auth, "true (--session-checkpoint-require-origin-auth)",
                why="without it the server would restore unauthenticated session state")
    _check_template(path, "session_checkpoint.directory", checkpoint.directory)

    telemetry = Telemetry(**_table(top["telemetry"], _TELEMETRY, path, "telemetry"))
    _check_template(path, "telemetry.request_log_jsonl", telemetry.request_log_jsonl, suffix=".jsonl")

    runtime_host = RuntimeHost(**_table(top["runtime_host"], _RUNTIME_HOST, path, "runtime_host"))
    if runtime_host.gpu_binding != "uuid":
        _refuse(path, "runtime_host.gpu_binding", "is not a UUID binding", runtime_host.gpu_binding, "'uuid'",
                why="the native lanes share one two-GPU host; an ordinal can point at the other lane's GPU")

    vision = Vision(**_table(top["vision"], _VISION, path, "vision"))
    if vision.enabled:
        _refuse(path, "vision.enabled", "enables vision, which no native lane claims", True, "false")

    model = _model_binding(top["model"], path, "model")
    _require_canonical(path, data, document)
    return ServerConfig(
        path=path,
        sha256=sha256_bytes(data),
        lane=top["lane"],
        deployment_profile=top["deployment_profile"],
        listen=listen,
        auth=auth,
        engine=engine,
        context_cache=cache,
        speculative=speculative,
        session_checkpoint=checkpoint,
        telemetry=telemetry,
        runtime_host=runtime_host,
        vision=vision,
        model=model,
    )


def config_sha256(path: str | Path) -> str:
    """The configuration's identity: SHA-256 of the file's exact bytes."""
    try:
        return sha256_bytes(Path(path).read_bytes())
    except FileNotFoundError:
        raise InputError("file does not exist", file=path) from None


def _windows_path(state_root: str | None, relative: str) -> str:
    parts = relative.split("/")
    return str(PureWindowsPath(state_root, *parts) if state_root else PureWindowsPath(*parts))


def server_arguments(
    config: ServerConfig,
    *,
    api_key_file: str,
    binary_sha256: str,
    artifact_sha256: str,
    config_sha256: str,
    release_instance_id: str,
    state_root: str | None = None,
    model_path: str | None = None,
) -> list[str]:
    """The ninfer-serve argv (without the executable) that Control-Release.ps1 builds.

    Paths are Windows paths under `state_root` (relative to it when omitted: the
    scheduled task runs with the state root's release as working directory, but
    the controller always passes absolute paths).  The order is fixed and equal
    to the PowerShell translation.
    """
    for name, value in (("binary_sha256", binary_sha256), ("artifact_sha256", artifact_sha256), ("config_sha256", config_sha256)):
        if not is_sha256_hex(value):
            _refuse(config.path, name, "is not a SHA-256", value, "64 lowercase hex digits")
    if artifact_sha256 != config.model.artifact_sha256:
        _refuse(config.path, "artifact_sha256", "differs from the configuration's pinned model", artifact_sha256,
                config.model.artifact_sha256, why="the server would announce a model identity the configuration does not bind")
    if config_sha256 != config.sha256:
        _refuse(config.path, "config_sha256", "is not the SHA-256 of this configuration's bytes", config_sha256, config.sha256,
                why="a server must never report the identity of a configuration it was not started from")
    if not _INSTANCE_ID.fullmatch(release_instance_id) or ".." in release_instance_id:
        _refuse(config.path, "release_instance_id", "is not a release instance id", release_instance_id,
                "lowercase letters, digits, '.' and '-' (e.g. '<release-id>-<12 hex>')")
    if not api_key_file:
        _refuse(config.path, "api_key_file", "is empty", api_key_file, "the path of the bearer key file")
    model = model_path or _windows_path(state_root, f"models/{config.model.local_file_name}")
    checkpoint_dir = _windows_path(state_root, config.session_checkpoint.directory.replace(INSTANCE_PLACEHOLDER, release_instance_id))
    request_log = _windows_path(state_root, config.telemetry.request_log_jsonl.replace(INSTANCE_PLACEHOLDER, release_instance_id))
    engine = config.engine
    cache = config.context_cache
    arguments = [
        model,
        "--host", config.listen.host,
        "--port", str(config.listen.port),
        "--api-key-file", api_key_file,
        "--model-id", config.model.public_id,
        "--deployment-profile", config.deployment_profile,
        "--binary-sha256", binary_sha256,
        "--artifact-sha256", artifact_sha256,
        "--config-sha256", config_sha256,
        "--max-context", str(cache.max_context_tokens),
        "--kv-capacity", str(cache.kv_capacity_tokens),
        "--kv-dtype", cache.kv_dtype,
        "--prefill-chunk", str(engine.prefill_chunk_tokens),
        "--spec", config.speculative.backend,
        "--draft-tokens", str(config.speculative.draft_tokens),
    ]  # fmt: skip
    if config.speculative.lm_head_draft:
        arguments.append("--lm-head-draft")
    arguments += [
        "--max-concurrency", str(engine.max_concurrency),
        "--pending-timeout-ms", str(engine.pending_timeout_ms),
        "--device-state-slots", str(cache.extra_device_state_slots),
        "--host-budget-bytes", str(cache.shared_host_budget_bytes),
        "--admission-headroom-mib", str(engine.admission_headroom_mib),
        "--gpu-keep-warm-ms", str(engine.gpu_keep_warm_ms),
        "--session-checkpoint-dir", checkpoint_dir,
        "--session-checkpoint-require-origin-auth",
        "--request-log-jsonl", request_log,
        "--stop-event", config.stop_event_name,
    ]  # fmt: skip
    return arguments


def load_release_spec(path: str | Path) -> ReleaseSpec:
    """Read and validate one release-spec.json (schema 3) on its own."""
    path = Path(path)
    data, document = _read_document(path)
    top = _table(document, _SPEC_TOP, path, "")
    if top["artifact_type"] != RELEASE_SPEC_TYPE:
        _refuse(path, "artifact_type", "is not a native release spec", top["artifact_type"], repr(RELEASE_SPEC_TYPE))
    if top["schema_version"] != RELEASE_SPEC_SCHEMA:
        _refuse(path, "schema_version", "has an unsupported schema version", top["schema_version"], str(RELEASE_SPEC_SCHEMA))
    if not _LANE_ID.fullmatch(top["lane"]):
        _refuse(path, "lane", "is not a native lane id", top["lane"], "'rtx<NNNN>-windows-native'")
    gpu = _table(top["gpu"], _SPEC_GPU, path, "gpu")
    component = _table(top["component"], _SPEC_COMPONENT, path, "component")
    source = _table(top["source"], _SPEC_SOURCE, path, "source")
    for key in ("commit", "upstream_base"):
        if not is_commit_hex(source[key]):
            _refuse(path, f"source.{key}", "is not a full 40-hex commit", source[key], "40 lowercase hex digits")
    model = _model_binding(top["model"], path, "model")
    lifecycle = _table(top["lifecycle"], _SPEC_LIFECYCLE, path, "lifecycle")
    if lifecycle["state_pointers"] != STATE_POINTERS:
        _refuse(path, "lifecycle.state_pointers", "are not the installer's pointers", lifecycle["state_pointers"], repr(STATE_POINTERS))
    if lifecycle["managed_stop"] != "stop-event":
        _refuse(path, "lifecycle.managed_stop", "is not the stop-event protocol", lifecycle["managed_stop"], "'stop-event'")
    if lifecycle["stop_event_name"] != STOP_EVENT_TEMPLATE:
        _refuse(path, "lifecycle.stop_event_name", "is not the controller's event name", lifecycle["stop_event_name"], repr(STOP_EVENT_TEMPLATE))
    qualification = _table(top["qualification"], _SPEC_QUALIFICATION, path, "qualification")
    if qualification["required_gates"] != REQUIRED_GATES:
        _refuse(path, "qualification.required_gates", "are not the native qualification gates", qualification["required_gates"],
                repr(REQUIRED_GATES), why="every native release must pass the same eleven gates, in this order")
    _require_canonical(path, data, document)
    return ReleaseSpec(
        path=path,
        sha256=sha256_bytes(data),
        lane=top["lane"],
        gpu=gpu,
        component=component,
        source=source,
        model=model,
        lifecycle=lifecycle,
        required_gates=tuple(qualification["required_gates"]),
    )


def check_release_spec(spec_path: str | Path, lane: Lane, *, config_path: str | Path | None = None) -> ReleaseSpec:
    """Validate release-spec.json and cross-check it against `lane` and the server config beside it."""
    spec = load_release_spec(spec_path)
    path = spec.path
    config = load_server_config(config_path if config_path is not None else path.parent / "server-config.json")

    def differs(field: str, found: Any, expected: Any, what: str) -> None:
        if found != expected:
            _refuse(path, field, what, found, repr(expected), fix=f"make release-spec.json agree with {lane.file.name} and server-config.json")

    differs("lane", spec.lane, lane.id, "names another lane than the lane file")
    if lane.kind != "windows-native":
        _refuse(path, "lane", "belongs to a lane that is not a native Windows lane", lane.id, "a windows-native lane")
    differs("gpu.name", spec.gpu["name"], lane.gpu_name, "names another GPU than the lane")
    differs("gpu.class", spec.gpu["class"], f"rtx-{lane.short_name}", "is not the lane's GPU class")
    differs("gpu.cmake_cuda_architecture", spec.gpu["cmake_cuda_architecture"], lane.cuda_architecture,
            "is not the lane's CMake CUDA architecture")
    differs("gpu.cuda_architecture", spec.gpu["cuda_architecture"], f"sm_{lane.cuda_architecture}", "is not the lane's CUDA architecture")
    differs("gpu.compute_capability", spec.gpu["compute_capability"], lane.compute_capability, "is not the lane's compute capability")
    differs("gpu.compute_capability", spec.gpu["compute_capability"], CUDA_ARCHITECTURES.get(spec.gpu["cmake_cuda_architecture"]),
            "does not belong to the CMake CUDA architecture")
    differs("gpu.minimum_driver_major", spec.gpu["minimum_driver_major"], lane.minimum_driver_major, "is not the lane's driver floor")
    differs("component.repository", spec.component["repository"], lane.component_repository, "is not the lane's component repository")
    differs("component.version", spec.component["version"], lane.version, "is not the lane's component version")
    differs("component.tag_pattern", spec.component["tag_pattern"], lane.tag_pattern, "is not the lane's tag pattern")
    if lane.source_commit is None or lane.upstream_base is None:
        _refuse(lane.file, "source.commit", "the lane has no frozen source commit to bind", None, "a full 40-hex commit")
    differs("source.repository", spec.source["repository"], lane.source_repository, "is not the lane's source repository")
    differs("source.commit", spec.source["commit"], lane.source_commit, "is not the lane's frozen source commit")
    differs("source.upstream_base", spec.source["upstream_base"], lane.upstream_base, "is not the lane's upstream base")
    short = lane.short_name
    differs("lifecycle.task_name", spec.lifecycle["task_name"], f"NInfer-Qwen38-{short}-Native", "is not the lane's task name")
    differs("lifecycle.state_root", spec.lifecycle["state_root"], f"C:/ProgramData/NInfer/qwen38-{short}-native",
            "is not the lane's state root")

    differs("lane", spec.lane, config.lane, "names another lane than server-config.json")
    if config.deployment_profile != lane.deployment_profile():
        _refuse(config.path, "deployment_profile", "is not the lane's deployment profile", config.deployment_profile,
                repr(lane.deployment_profile()))
    for key in ModelBinding.__dataclass_fields__:
        differs(f"model.{key}", getattr(spec.model, key), getattr(config.model, key), "differs from server-config.json's model binding")
    differs("lifecycle.power_limit_watts", spec.lifecycle["power_limit_watts"], config.runtime_host.serving_power_limit_watts,
            "differs from server-config.json runtime_host.serving_power_limit_watts")
    port = lane.qualification.get("endpoint_port")
    if port is not None and port != config.listen.port:
        _refuse(config.path, "listen.port", "is not the lane's qualified endpoint port", config.listen.port, str(port))
    return spec
