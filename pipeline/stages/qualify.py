"""Stage `qualify`: evidence that the exact packaged bytes work on the lane's GPU.

    python -m pipeline qualify --lane <id> | --all [--endpoint URL --api-key-file F
                               [--restart-command CMD]] [--import RECEIPT] [--config FILE]
                               [--runtime-library-dir DIR] [--gpu-index N] [--dist DIR]

For each lane the stage resolves the package's identity from the artefact
register (the build's `build-identity.json`; once the package stage has run,
the package archive itself, whose payload binaries, build identity and server
configuration are re-hashed, plus the outer `SHA256SUMS`), then writes one
**lane receipt** in one of three ways:

* no endpoint: an honest ``hardware-pending`` receipt listing every gate that
  was not run; on a host with an NVIDIA driver the packaged ``ninfer-serve
  --selftest`` still runs as the GPU smoke gate;
* ``--endpoint URL --api-key-file F``: the harness (`pipeline.harness`: gates, client, fixtures, gpu)
  runs every gate against the live runtime; an identity mismatch fails the
  whole receipt and the remaining gates are not run.  A live run is an
  observation, not a function of files, so it always runs (never "up to date");
* ``--import RECEIPT``: binds a receipt produced on the owner's hardware after
  checking that its identity equals this package's field by field; otherwise it
  is refused naming the field, what the receipt says and what the package is.

A run that reaches no runtime never replaces a receipt that already holds
hardware evidence (passed or failed) for the same identity; ``--force`` does.
The CLI exits 0 for passed and hardware-pending receipts and 1 when a receipt
failed, so a release job stops on a failed qualification.

Lane receipt, schema 1
----------------------
File ``<dist>/<lane>/qualification/<lane>.json``, canonical JSON (UTF-8
without BOM, sorted keys, two-space indent, LF, trailing newline); registered
as kind ``lane-receipt`` with attrs ``status`` and ``component_tag``.  Compose
copies it byte for byte.  Fields (closed set; ``imported`` only on imports):

``artifact_type``           ``"omp_ninfer_lane_receipt"``
``schema_version``          ``1``
``lane``                    lane id, e.g. ``"rtx4090-windows-native"``
``component_tag``           e.g. ``"v0.7.0-qwen38-4090-beta.2"`` (from build-identity.json)
``deployment_profile``      e.g. ``"qwen38-4090-native-v0.7.0-beta.2"``
``status``                  ``"passed"`` | ``"failed"`` | ``"hardware-pending"``
``status_reason``           one sentence: why this status (failed / skipped / not-run gates)
``generated_utc``           ``"YYYY-MM-DDTHH:MM:SSZ"``: the only wall-clock field
``harness``                 ``{name: "omp-ninfer-qualify", version: "1.0.0", code_sha256}``
                            (code_sha256: pipeline.codedigest of this stage and every pipeline module it imports)
``endpoint``                ``{host, port}`` of the runtime qualified, or null (none reached)
``identity``                the exact bytes the receipt is about:
    ``source_commit``           40-hex (the build identity's patch_stack_sha)
    ``build_identity``          the nine ``--version`` keys: upstream_base_sha,
                                patch_stack_sha, build_profile, build_type, cxx_compiler,
                                cuda_compiler, cuda_toolkit, cuda_architecture, source_dirty
    ``server_binary_sha256``    64-hex of ``ninfer-serve`` (``.exe`` on Windows lanes)
    ``binaries``                ``{file name: 64-hex}`` of every packaged binary
    ``configuration_sha256``    64-hex of the packaged ``server-config.json`` (Windows lanes);
                                container lane: null unless ``--config FILE`` names one
    ``model_artifact_sha256``   64-hex of the pinned model artifact (Windows: the config's
                                ``model.artifact_sha256``; container: the lane file's
                                ``qualification.model_artifact_sha256``)
    ``package``                 ``{name, sha256, bytes}`` of the package archive, or null
                                when the package stage has not run
    ``outer_checksums_sha256``  64-hex of the outer ``SHA256SUMS``, or null (not packaged)
``host``                    ``{gpu_name, driver, cuda, compute_capability, memory_total_mib,
                            nvidia_smi, gpu_index, gpu_count}`` from nvidia-smi, or null
``thresholds``              the lane file's ``[qualification]`` table, copied
``gates``                   ``{name: gate}``; gate = ``{status: "passed"|"failed"|"skipped",
                            reason: str, ...measured numbers}``
``gates_not_run``           names of the gates that were not attempted, in gate order
``secret_values_recorded``  ``0``
``imported``                ``{source_sha256, imported_from}`` (SHA-256 and file name of the
                            receipt as produced on the owner's hardware; the written
                            receipt is that document plus this field, canonical)

Every gate name of `GATE_ORDER` appears in exactly one of ``gates`` and
``gates_not_run``; ``gpu_smoke`` is always in ``gates``.  Anything that could
carry content (model outputs, the nonce, prompts) is ``{"redacted": true,
"sha256": <64-hex of the UTF-8 text>}``; the API key never appears.

Gates (`GATE_ORDER`) and their main numbers:

``gpu_smoke``               packaged ``ninfer-serve --selftest`` on this host's GPU: line,
                            device, compute_capability, cuda_architecture, max_abs_error,
                            crc32, lane_device; skipped without a driver or when the
                            binaries are for another platform or GPU generation
``identity``                status endpoint vs package: served {...}, mismatches [{field,
                            found, expected}]
``security``                401 without / with a wrong key on models, status, chat and
                            responses; reported listen host loopback; no answer on this
                            host's non-loopback addresses
``protocol``                checks {models_listed, stateful_continuation, forks: 2,
                            fork_isolation, cross_session_continuation_refused,
                            isolated_private_state_miss, surviving_descendant_continued,
                            sse_well_formed, streaming_parity}, statuses {...}
``long_context_retrieval``  prompt_tokens, target_prompt_tokens, fixture_sha256, nonce
                            (redacted), output (redacted), exact_output, elapsed_seconds
``decode_throughput``       tokens_per_second, completion_tokens, decode_seconds
``prefill_throughput``      tokens_per_second, computed_prompt_tokens, prefill_seconds
``time_to_first_token``     seconds
``gpu_resources``           peak_vram_mib, max_power_w, samples (nvidia-smi)
``restart``                 restart_seconds, process_replaced, restored_cached_input_tokens,
                            exact_output, post_restart_deleted_continuation_status

Status rules (checked by `validate_receipt`, also on import):
``passed``            every endpoint gate passed and gpu_smoke did not fail;
``hardware-pending``  no runtime was reached: every endpoint gate is in gates_not_run and
                      no gate failed (``endpoint`` is null);
``failed``            anything else: a gate failed, or a runtime was reached and a gate was
                      skipped or not run (an identity mismatch leaves the rest not run).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.codedigest import code_digest
from pipeline.errors import ExitCode, InputError, IntegrityError, UsageError, redact, register_secret
from pipeline.formats.assets import check_registered_set
from pipeline.formats.identity import IDENTITY_KEYS
from pipeline.formats.lanes import REPO_ROOT, Lane, current_host_platform
from pipeline.formats.receipts import LANE_RECEIPT_SCHEMA, LANE_RECEIPT_STATUSES, LANE_RECEIPT_TYPE
from pipeline.harness.client import Client, GateFailure
from pipeline.harness.gates import (
    ENDPOINT_GATES,
    GATE_ORDER,
    GATE_STATUSES,
    HARNESS_NAME,
    HARNESS_VERSION,
    CommandRestartHook,
    Expected,
    Gate,
    GateRun,
    RestartHook,
    gate_gpu_smoke,
    is_content_key,
    run_endpoint_gates,
    served_identity,
)
from pipeline.harness.gpu import GpuMonitor, NvidiaSmi
from pipeline.infra.safetar import SafeTar
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.util import ui
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes, sha256_file
from pipeline.util.jsonio import (
    MAX_DOCUMENT_BYTES,
    canonical_bytes,
    loads_object,
    read_json_object,
    write_json,
)
from pipeline.util.safepath import safe_component

MAX_PACKAGE_DOCUMENT_BYTES = 16 * 1024 * 1024  # a top-level JSON member of the package read into memory
SERVER_BINARY = "ninfer-serve"
_FIELDS = frozenset({
    "artifact_type", "schema_version", "lane", "component_tag", "deployment_profile", "status", "status_reason",
    "generated_utc", "harness", "endpoint", "identity", "host", "thresholds", "gates", "gates_not_run",
    "secret_values_recorded",
})
_IDENTITY_FIELDS = (
    "source_commit", "build_identity", "server_binary_sha256", "binaries", "configuration_sha256",
    "model_artifact_sha256", "package", "outer_checksums_sha256",
)
_HOST_FIELDS = frozenset({"gpu_name", "driver", "cuda", "compute_capability", "memory_total_mib", "nvidia_smi", "gpu_index", "gpu_count"})
_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def harness_code_sha256() -> str:
    """The harness's code: this stage and every pipeline module it uses (the harness gates among them)."""
    return code_digest(__name__)


def harness_block() -> dict[str, str]:
    return {"name": HARNESS_NAME, "version": HARNESS_VERSION, "code_sha256": harness_code_sha256()}


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- receipt validation (also what compose uses to read a receipt) -------------------


def _bad(file: Any, field: str, what: str, found: Any = None, expected: str | None = None) -> InputError:
    kwargs: dict[str, Any] = {"file": file, "field": field}
    if found is not None:
        kwargs["found"] = found
    if expected is not None:
        kwargs["expected"] = expected
    return InputError(f"lane receipt {what}", **kwargs)


def _check_redaction(node: Any, path: str, file: Any) -> None:
    if isinstance(node, dict):
        if "redacted" in node:
            if set(node) != {"redacted", "sha256"} or node["redacted"] is not True or not is_sha256_hex(node["sha256"]):
                raise _bad(file, path, "has a malformed redacted value", node, '{"redacted": true, "sha256": <64-hex>}')
            return
        for key, value in node.items():
            where = f"{path}.{key}"
            if is_content_key(key) and isinstance(value, (str, list)):
                raise _bad(file, where, "records content in the clear", type(value).__name__, '{"redacted": true, "sha256": ...}')
            _check_redaction(value, where, file)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_redaction(value, f"{path}[{index}]", file)


def validate_receipt(document: Any, *, file: Any = None) -> dict[str, Any]:
    """Check a lane receipt against schema 1 and its status rules; return it."""
    if not isinstance(document, dict):
        raise _bad(file, "(top level)", "is not a JSON object")
    if document.get("artifact_type") != LANE_RECEIPT_TYPE:
        raise _bad(file, "artifact_type", "has the wrong artifact type", document.get("artifact_type"), repr(LANE_RECEIPT_TYPE))
    if document.get("schema_version") != LANE_RECEIPT_SCHEMA:
        raise _bad(file, "schema_version", "has an unsupported schema version", document.get("schema_version"), "1")
    allowed = _FIELDS | {"imported"}
    unknown = sorted(set(document) - allowed)
    if unknown:
        raise _bad(file, unknown[0], "has an unknown field", unknown[0], "only the fields of schema 1")
    missing = sorted(_FIELDS - set(document))
    if missing:
        raise _bad(file, missing[0], "lacks a required field")
    for key in ("lane", "component_tag", "deployment_profile", "status_reason"):
        if not isinstance(document[key], str) or not document[key]:
            raise _bad(file, key, "must be a non-empty string", document[key])
    status = document["status"]
    if status not in LANE_RECEIPT_STATUSES:
        raise _bad(file, "status", "has an unknown status", status, " | ".join(LANE_RECEIPT_STATUSES))
    if not isinstance(document["generated_utc"], str) or not _UTC.fullmatch(document["generated_utc"]):
        raise _bad(file, "generated_utc", "is not a UTC timestamp", document["generated_utc"], "YYYY-MM-DDTHH:MM:SSZ")
    harness = document["harness"]
    if not isinstance(harness, dict) or set(harness) != {"name", "version", "code_sha256"} or not is_sha256_hex(harness.get("code_sha256")):
        raise _bad(file, "harness", "must be {name, version, code_sha256}", harness)
    endpoint = document["endpoint"]
    if endpoint is not None and (not isinstance(endpoint, dict) or set(endpoint) != {"host", "port"}):
        raise _bad(file, "endpoint", "must be {host, port} or null", endpoint)
    _validate_identity(document["identity"], file)
    host = document["host"]
    if host is not None and (not isinstance(host, dict) or not set(host) <= _HOST_FIELDS or "gpu_name" not in host):
        raise _bad(file, "host", "must be the nvidia-smi facts or null", host)
    if not isinstance(document["thresholds"], dict) or not document["thresholds"]:
        raise _bad(file, "thresholds", "must copy the lane's [qualification] table", document["thresholds"])
    if document["secret_values_recorded"] != 0:
        raise _bad(file, "secret_values_recorded", "must be 0", document["secret_values_recorded"], "0")
    gates, not_run = document["gates"], document["gates_not_run"]
    if not isinstance(gates, dict) or not isinstance(not_run, list):
        raise _bad(file, "gates", "must be an object and gates_not_run a list")
    for name in list(gates) + list(not_run):
        if name not in GATE_ORDER:
            raise _bad(file, f"gates.{name}", "names an unknown gate", name, ", ".join(GATE_ORDER))
    overlap = set(gates) & set(not_run)
    if overlap:
        raise _bad(file, "gates_not_run", "lists a gate that also has a result", sorted(overlap)[0])
    absent = [name for name in GATE_ORDER if name not in gates and name not in not_run]
    if absent:
        raise _bad(file, "gates", "lacks a gate (every gate is either in gates or in gates_not_run)", absent[0])
    if not_run != [name for name in GATE_ORDER if name in not_run]:
        raise _bad(file, "gates_not_run", "is not in gate order", not_run)
    if "gpu_smoke" not in gates:
        raise _bad(file, "gates.gpu_smoke", "is missing (the GPU smoke gate always has a result)")
    for name, gate in gates.items():
        if not isinstance(gate, dict) or gate.get("status") not in GATE_STATUSES or not isinstance(gate.get("reason"), str):
            raise _bad(file, f"gates.{name}", "must be {status: passed|failed|skipped, reason, ...}", gate)
    _check_redaction(gates, "gates", file)
    any_failed = any(g["status"] == "failed" for g in gates.values())
    endpoint_all_passed = all(gates.get(n, {}).get("status") == "passed" for n in ENDPOINT_GATES)
    if status == "passed" and not (endpoint_all_passed and gates["gpu_smoke"]["status"] != "failed"):
        bad = next((n for n in GATE_ORDER if gates.get(n, {}).get("status") != "passed" and n != "gpu_smoke"), "gpu_smoke")
        raise _bad(file, "status", f"says passed but gate {bad} did not pass", status)
    if status == "hardware-pending":
        if endpoint is not None or any(n in gates for n in ENDPOINT_GATES):
            raise _bad(file, "status", "says hardware-pending but a runtime was qualified", status)
        if any_failed:
            raise _bad(file, "status", "says hardware-pending but a gate failed", status, "failed")
    if status == "failed" and not any_failed and endpoint is None:
        raise _bad(file, "status", "says failed but no gate failed and no runtime was reached", status, "hardware-pending")
    if "imported" in document:
        imported = document["imported"]
        if not isinstance(imported, dict) or set(imported) != {"source_sha256", "imported_from"} or not is_sha256_hex(imported.get("source_sha256")):
            raise _bad(file, "imported", "must be {source_sha256, imported_from}", imported)
    return document


def _validate_identity(identity: Any, file: Any) -> None:
    if not isinstance(identity, dict) or set(identity) != set(_IDENTITY_FIELDS):
        raise _bad(file, "identity", "must hold exactly " + ", ".join(_IDENTITY_FIELDS), sorted(identity) if isinstance(identity, dict) else identity)
    if not is_commit_hex(identity["source_commit"]):
        raise _bad(file, "identity.source_commit", "is not a 40-hex commit", identity["source_commit"])
    build = identity["build_identity"]
    if not isinstance(build, dict) or list(sorted(build)) != sorted(IDENTITY_KEYS):
        raise _bad(file, "identity.build_identity", "must hold the nine build keys", build)
    for key in ("server_binary_sha256", "model_artifact_sha256"):
        if not is_sha256_hex(identity[key]):
            raise _bad(file, f"identity.{key}", "is not a 64-hex SHA-256", identity[key])
    for key in ("configuration_sha256", "outer_checksums_sha256"):
        if identity[key] is not None and not is_sha256_hex(identity[key]):
            raise _bad(file, f"identity.{key}", "is not a 64-hex SHA-256 or null", identity[key])
    binaries = identity["binaries"]
    if not isinstance(binaries, dict) or not binaries or not all(is_sha256_hex(v) for v in binaries.values()):
        raise _bad(file, "identity.binaries", "must map binary names to SHA-256", binaries)
    package = identity["package"]
    if package is not None and (
        not isinstance(package, dict) or set(package) != {"name", "sha256", "bytes"} or not is_sha256_hex(package["sha256"])
        or not isinstance(package["bytes"], int) or package["bytes"] <= 0
    ):
        raise _bad(file, "identity.package", "must be {name, sha256, bytes} or null", package)


def load_receipt(path: str | Path) -> dict[str, Any]:
    """Read and validate a lane receipt (what compose calls)."""
    return validate_receipt(read_json_object(path), file=path)


def identity_differences(found: Any, expected: Any, prefix: str = "identity") -> list[tuple[str, Any, Any]]:
    """Field-by-field differences, deepest field first named with its dotted path."""
    if isinstance(found, dict) and isinstance(expected, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(found) | set(expected)):
            out += identity_differences(found.get(key), expected.get(key), f"{prefix}.{key}")
        return out
    return [] if found == expected else [(prefix, found, expected)]


# -- the package's identity ------------------------------------------------------------


@dataclass
class LaneIdentity:
    lane: Lane
    component_tag: str
    deployment_profile: str
    identity: dict[str, Any]
    public_model_id: str | None
    build_dir_binary: Path | None
    package_path: Path | None
    package_top: str | None
    library_dirs: list[Path] = field(default_factory=list)

    def expected(self) -> Expected:
        return Expected(
            build_identity=dict(self.identity["build_identity"]),
            deployment_profile=self.deployment_profile,
            server_binary_sha256=self.identity["server_binary_sha256"],
            configuration_sha256=self.identity["configuration_sha256"],
            model_artifact_sha256=self.identity["model_artifact_sha256"],
            public_model_id=self.public_model_id,
        )


def _read_package(path: Path) -> tuple[str, dict[str, bytes], dict[str, str]]:
    """The package's top folder, its top-level JSON members, and the SHA-256 of each bin/ file (streamed)."""
    members: dict[str, bytes] = {}
    hashes: dict[str, str] = {}
    tops: set[str] = set()
    with SafeTar(path) as archive:  # bounded; names that leave the archive are refused
        for member in archive:
            top, _, rest = member.name.partition("/")
            tops.add(top)
            if not member.isfile() or not rest:
                continue
            if rest.startswith("bin/"):
                digest = hashlib.sha256()
                for block in archive.chunks(member):
                    digest.update(block)
                hashes[rest] = digest.hexdigest()
            elif "/" not in rest and rest.endswith(".json"):
                members[rest] = archive.read_member(member, MAX_PACKAGE_DOCUMENT_BYTES)
    if len(tops) != 1:
        raise IntegrityError("the package archive does not have exactly one top folder", file=path, found=sorted(tops))
    return tops.pop(), members, hashes


def resolve_identity(ctx: Context, lane: Lane, *, config: Path | None = None, library_dirs: list[Path] | None = None) -> LaneIdentity:
    register = ctx.register
    build_entry = register.one("build-identity", lane=lane.id, needed_by="qualify", produced_by="build")
    build_path = register.verified_path(build_entry)
    build = read_json_object(build_path)
    missing = [k for k in (*IDENTITY_KEYS, "binaries", "component_tag", "deployment_profile") if k not in build]
    if missing:
        raise InputError("build identity lacks a field qualification binds", file=build_path, field=missing[0])
    build_identity = {k: build[k] for k in IDENTITY_KEYS}
    binaries: dict[str, str] = dict(build["binaries"])
    server_name = lane.binary_file(SERVER_BINARY)
    if server_name not in binaries:
        raise InputError("build identity names no server binary", file=build_path, field="binaries", expected=f"an entry {server_name!r}")
    component_tag, profile = build["component_tag"], build["deployment_profile"]

    package = None
    package_path = package_top = None
    packaged_config: bytes | None = None
    packages = register.query("package-archive", lane=lane.id)
    if len(packages) > 1:
        raise InputError("the register holds more than one package archive for the lane", file=register.file, found=[a.name for a in packages])
    if packages:
        entry = packages[0]
        package_path = register.verified_path(entry)
        if entry.attrs.get("component_tag") != component_tag:
            raise IntegrityError("the package is for another component tag than the build", file=package_path, field="component_tag", found=entry.attrs.get("component_tag"), expected=component_tag)
        package_top, members, bin_hashes = _read_package(package_path)
        payload_identity = members.get("build-identity.json")
        if payload_identity is None:
            raise IntegrityError("the package holds no build-identity.json", file=package_path)
        inner = loads_object(payload_identity, source=f"{package_path}!{package_top}/build-identity.json")
        for key in IDENTITY_KEYS:
            if inner.get(key) != build.get(key):
                raise IntegrityError("the package's build identity differs from the build's", file=package_path, field=f"build-identity.json: {key}", found=inner.get(key), expected=build.get(key))
        # The package may have rewritten binaries (a relative RUNPATH); it then keeps the built
        # hashes as built_binaries.  Either way the chain must lead back to this build.
        built = inner.get("built_binaries", inner.get("binaries"))
        if built != build["binaries"]:
            raise IntegrityError("the package was made from another build's binaries", file=package_path, field="build-identity.json: built_binaries", found=built, expected=build["binaries"])
        packaged = inner.get("binaries")
        if not isinstance(packaged, dict) or server_name not in packaged:
            raise IntegrityError("the package's build identity names no server binary", file=package_path, field="build-identity.json: binaries")
        for name, digest in packaged.items():
            actual = bin_hashes.get(f"bin/{name}")
            if actual is None:
                raise IntegrityError("the package lacks a binary its build identity names", file=package_path, field=f"bin/{name}")
            if actual != digest:
                raise IntegrityError("a packaged binary differs from the package's build identity", file=package_path, field=f"bin/{name}", found=actual, expected=digest)
        binaries = dict(packaged)  # the receipt binds the bytes that ship
        packaged_config = members.get("server-config.json")
        package = {"name": package_path.name, "sha256": entry.sha256, "bytes": entry.size}

    outer_sha = None
    outer = register.query("outer-checksums", lane=lane.id)
    if len(outer) > 1:
        raise InputError("the register holds more than one outer SHA256SUMS for the lane", file=register.file, found=[a.name for a in outer])
    if outer:
        register.verified_path(outer[0])
        outer_sha = outer[0].sha256
        # Bind only a set that check-assets accepts (a hand edit may have updated the register too).
        check_registered_set(register, lane, needed_by="qualify")

    configuration_sha: str | None = None
    model_sha: str | None = lane.qualification.get("model_artifact_sha256")
    public_id: str | None = lane.qualification.get("public_model_id")
    config_bytes: bytes | None = None
    config_origin = None
    if lane.server_config:
        if packaged_config is not None:
            config_bytes, config_origin = packaged_config, f"{package_path}: server-config.json"
        else:
            config_path = REPO_ROOT / lane.server_config
            config_bytes, config_origin = config_path.read_bytes(), str(config_path)
        if config is not None and sha256_bytes(config.read_bytes()) != sha256_bytes(config_bytes):
            raise IntegrityError(
                "--config differs from the lane's packaged server configuration",
                file=config,
                found=sha256_bytes(config.read_bytes()),
                expected=sha256_bytes(config_bytes),
                why="a Windows lane's configuration identity is the packaged server-config.json",
            )
    elif config is not None:
        config_bytes, config_origin = config.read_bytes(), str(config)
    if config_bytes is not None:
        configuration_sha = sha256_bytes(config_bytes)
        try:
            model = loads_object(config_bytes, source=config_origin).get("model")
        except InputError:
            model = None  # the configuration's own check reports it
        if isinstance(model, dict) and model.get("artifact_sha256"):
            if model_sha is not None and model_sha != model["artifact_sha256"]:
                raise InputError("the lane file and the server configuration bind different models", file=lane.file, field="qualification.model_artifact_sha256", found=model_sha, expected=f"{model['artifact_sha256']} ({config_origin})")
            model_sha = model["artifact_sha256"]
            public_id = model.get("public_id") or public_id
    if not model_sha or not is_sha256_hex(model_sha):
        raise InputError(
            "no model artifact SHA-256 is bound for this lane",
            file=lane.file,
            field="qualification.model_artifact_sha256",
            found=model_sha,
            fix="add the pinned model's SHA-256 to the lane file (Windows lanes take it from server-config.json)",
        )
    receipt = register.query("package-build-receipt", lane=lane.id)
    if len(receipt) == 1:
        document = read_json_object(register.verified_path(receipt[0]))
        for key, value in (("config_sha256", configuration_sha), ("model_sha256", model_sha)):
            if document.get(key) is not None and value is not None and document[key] != value:
                raise IntegrityError("the package build receipt binds other bytes", file=register.path_of(receipt[0]), field=key, found=document[key], expected=value)
    build_binary = None
    for artefact in register.query("binary", lane=lane.id, binary=SERVER_BINARY):
        build_binary = register.path_of(artefact)
    dirs = list(library_dirs or [])
    # Where the build's toolchain keeps the CUDA runtime (the build's toolchain record; none for a prebuilt import).
    toolchains = register.query("toolchain", lane=lane.id)
    if len(toolchains) > 1:
        raise InputError("the register holds more than one toolchain record for the lane", file=register.file, found=[a.name for a in toolchains])
    library_dir = toolchains[0].attrs.get("library_dir") if toolchains else None
    if isinstance(library_dir, str) and Path(library_dir).is_dir():
        dirs.append(Path(library_dir))
    identity = {
        "source_commit": build_identity["patch_stack_sha"],
        "build_identity": build_identity,
        "server_binary_sha256": binaries[server_name],
        "binaries": binaries,
        "configuration_sha256": configuration_sha,
        "model_artifact_sha256": model_sha,
        "package": package,
        "outer_checksums_sha256": outer_sha,
    }
    return LaneIdentity(lane, component_tag, profile, identity, public_id, build_binary, package_path, package_top, dirs)


# -- the stage -------------------------------------------------------------------------------


def _status_of(gates: dict[str, Gate], not_run: list[str], reached: bool, pending_why: str) -> tuple[str, str]:
    failed = [n for n in GATE_ORDER if n in gates and gates[n].status == "failed"]
    if failed:
        first = gates[failed[0]]
        rest = f"; also failed: {', '.join(failed[1:])}" if len(failed) > 1 else ""
        tail = f"; not run: {', '.join(not_run)}" if not_run and reached else ""
        return "failed", f"gate {failed[0]} failed: {first.reason}{rest}{tail}"
    if not reached:
        return "hardware-pending", f"{pending_why}; gates not run: {', '.join(not_run)}"
    incomplete = [n for n in ENDPOINT_GATES if n not in gates or gates[n].status != "passed"]
    if incomplete:
        name = incomplete[0]
        why = gates[name].reason if name in gates else "not run"
        return "failed", f"required gate {name} did not pass ({why}); a receipt passes only when every endpoint gate passed"
    return "passed", "every endpoint gate passed against the runtime serving these exact bytes"


class QualifyStage(Stage):
    name = "qualify"

    def __init__(
        self,
        ctx: Context,
        lane: Lane,
        *,
        endpoint: str | None = None,
        api_key: str | None = None,
        import_path: Path | None = None,
        restart_hook: RestartHook | None = None,
        config: Path | None = None,
        library_dirs: list[Path] | None = None,
        gpu: GpuMonitor | None = None,
        request_timeout: float = 1800.0,
        force: bool = False,
        now: str | None = None,
        pending_reason: str | None = None,
    ) -> None:
        super().__init__(ctx)
        self.lane = lane
        self.endpoint = endpoint
        self.api_key = api_key
        self.import_path = import_path
        self.restart_hook = restart_hook
        self.config = config
        self.library_dirs = list(library_dirs or [])
        self.gpu = gpu if gpu is not None else NvidiaSmi()
        self.request_timeout = request_timeout
        self.force = force
        self.now = now
        self.pending_reason = pending_reason
        self.ident: LaneIdentity | None = None
        self.result_status: str | None = None
        if api_key:
            register_secret(api_key)

    @property
    def key(self) -> str:
        return f"qualify:{self.lane.id}"

    def describe(self) -> str:
        return self.lane.id

    @property
    def mode(self) -> str:
        return "import" if self.import_path else "endpoint" if self.endpoint else "pending"

    @property
    def receipt_path(self) -> Path:
        return self.ctx.dist / self.lane.id / "qualification" / f"{self.lane.id}.json"

    def leftovers(self) -> list[tuple[Path, tuple[str, ...]]]:
        return [(self.receipt_path.parent, (f".{self.receipt_path.name}.*.tmp",))]  # write_json's temporary name

    def preflight(self) -> None:
        if self.import_path is not None and self.endpoint is not None:
            raise UsageError("--import and --endpoint exclude each other", fix="import a receipt or qualify a live endpoint, not both")
        if self.endpoint is not None and not self.api_key:
            raise UsageError("--endpoint needs --api-key-file", why="the NInfer endpoint is bearer-authenticated and the security gate needs the real key to tell 401 from 200")
        if self.import_path is not None and not self.import_path.is_file():
            raise InputError("the receipt to import does not exist", file=self.import_path)
        self.ident = resolve_identity(self.ctx, self.lane, config=self.config, library_dirs=self.library_dirs)
        ident = self.ident
        ui.info(f"package identity: {ident.component_tag}, ninfer-serve {ident.identity['server_binary_sha256'][:12]}, "
                f"model {ident.identity['model_artifact_sha256'][:12]}, "
                + (f"package {ident.identity['package']['name']}" if ident.identity["package"] else "not packaged yet (build identity only)"))

    def inputs(self) -> dict[str, Any]:
        assert self.ident is not None
        data: dict[str, Any] = {
            "lane": self.lane.id,
            "lane_file_sha256": self.lane.file_sha256,
            "component_tag": self.ident.component_tag,
            "deployment_profile": self.ident.deployment_profile,
            "identity": self.ident.identity,
            "harness": harness_code_sha256(),
            "mode": self.mode,
        }
        if self.mode == "import":
            assert self.import_path is not None
            data["import_sha256"] = sha256_file(self.import_path)
        elif self.mode != "endpoint":  # a live endpoint run is an observation: `always_runs`
            data["host"] = self.gpu.facts()
            data["library_dirs"] = [str(p) for p in self.ident.library_dirs]
        return data

    @property
    def always_runs(self) -> bool:  # type: ignore[override]
        return self.mode == "endpoint"

    # -- run -----------------------------------------------------------------
    def run(self) -> list[Artifact]:
        assert self.ident is not None
        if self.mode == "import":
            document = self._imported()
        else:
            document = self._qualified()
            if document["status"] == "hardware-pending" and not self.force:
                kept = self._existing_evidence()
                if kept is not None:
                    return [kept]
        return [self._write(document)]

    def _existing_evidence(self) -> Artifact | None:
        """A receipt with hardware evidence (passed or failed) for these exact bytes, if the register holds one."""
        assert self.ident is not None
        for artefact in self.ctx.register.query("lane-receipt", lane=self.lane.id):
            path = self.ctx.register.path_of(artefact)
            if not path.is_file() or sha256_file(path) != artefact.sha256:
                continue
            try:
                document = load_receipt(path)
            except InputError:
                continue
            if document["status"] != "hardware-pending" and document["identity"] == self.ident.identity:
                ui.info(f"keeping the {document['status']} receipt that already holds hardware evidence for these bytes ({path}); --force replaces it")
                self.result_status = document["status"]
                return artefact
        return None

    def _smoke(self, facts: dict[str, Any] | None) -> Gate:
        assert self.ident is not None
        ident, lane = self.ident, self.lane
        server = lane.binary_file(SERVER_BINARY)
        expected = ident.identity["server_binary_sha256"]

        def run(binary: Path | None) -> Gate:
            if binary is not None and binary.is_file() and sha256_file(binary) != expected:
                raise IntegrityError("the binary for the GPU smoke run is not the one the receipt binds", file=binary, found=sha256_file(binary), expected=expected)
            return gate_gpu_smoke(
                binary=binary,
                binary_sha256=expected,
                lane_platform=lane.target_platform,
                host_platform=current_host_platform(),
                lane_compute_capability=lane.compute_capability,
                cuda_architecture=ident.identity["build_identity"]["cuda_architecture"],
                facts=facts,
                library_dirs=ident.library_dirs,
            )

        if facts is None or lane.target_platform != current_host_platform():
            return run(None)  # skipped, with the reason
        if ident.package_path is None:
            return run(ident.build_dir_binary)
        with tempfile.TemporaryDirectory(prefix="qualify-smoke-") as scratch:
            return run(_extract_bin(ident.package_path, Path(scratch), server))

    def _qualified(self) -> dict[str, Any]:
        assert self.ident is not None
        ident, lane = self.ident, self.lane
        facts = self.gpu.facts()
        gates: dict[str, Gate] = {}
        smoke = self._smoke(facts)
        gates["gpu_smoke"] = smoke
        self._show("gpu_smoke", smoke)
        not_run = list(ENDPOINT_GATES)
        reached = False
        endpoint_block = None
        pending_why = self.pending_reason or "no NInfer runtime endpoint was given (--endpoint)"
        if self.endpoint is not None:
            assert self.api_key is not None
            client = Client(self.endpoint, self.api_key, timeout=self.request_timeout)
            endpoint_block = {"host": client.host, "port": client.port}
            if client.health() is None:
                pending_why = f"the runtime endpoint {client.host}:{client.port} did not answer"
                ui.warn(f"{pending_why}; writing a hardware-pending receipt")
                endpoint_block = None
            else:
                reached = True
                run = GateRun(
                    client=client,
                    lane_id=lane.id,
                    thresholds=dict(lane.qualification),
                    expected=ident.expected(),
                    gpu=self.gpu,
                    restart_hook=self.restart_hook,
                )
                results, not_run = run_endpoint_gates(run, self._show)
                gates.update(results)
        status, reason = _status_of(gates, not_run, reached, pending_why)
        self.result_status = status
        return {
            "artifact_type": LANE_RECEIPT_TYPE,
            "schema_version": LANE_RECEIPT_SCHEMA,
            "lane": lane.id,
            "component_tag": ident.component_tag,
            "deployment_profile": ident.deployment_profile,
            "status": status,
            "status_reason": reason,
            "generated_utc": self.now or utc_now(),
            "harness": harness_block(),
            "endpoint": endpoint_block,
            "identity": ident.identity,
            "host": facts,
            "thresholds": dict(lane.qualification),
            "gates": {name: gates[name].to_json() for name in GATE_ORDER if name in gates},
            "gates_not_run": [name for name in GATE_ORDER if name in not_run and name not in gates],
            "secret_values_recorded": 0,
        }

    def _show(self, name: str, gate: Gate) -> None:
        ui.info(f"gate {name}: {gate.status} ({gate.reason})")

    def _imported(self) -> dict[str, Any]:
        assert self.ident is not None and self.import_path is not None
        path = self.import_path
        raw = read_bytes_bounded(path, MAX_DOCUMENT_BYTES, what="lane receipt")  # the cap applies while reading, not after
        document = validate_receipt(loads_object(raw, source=path, strict_bytes=True), file=path)
        if "imported" in document:
            raise InputError("the receipt is itself an import", file=path, field="imported", fix="import the receipt as produced on the owner's hardware")
        if document["status"] == "hardware-pending":
            raise InputError("the receipt holds no hardware evidence", file=path, field="status", found="hardware-pending", expected="passed or failed", fix="qualify on the owner's hardware with --endpoint first")
        if redact(raw.decode("utf-8")) != raw.decode("utf-8"):
            raise IntegrityError("the receipt contains a secret value", file=path, why="a registered secret (the API key) appears in its bytes", fix="regenerate the receipt with the current harness")
        expected_top = {"lane": self.lane.id, "component_tag": self.ident.component_tag, "deployment_profile": self.ident.deployment_profile}
        for key, want in expected_top.items():
            if document[key] != want:
                raise IntegrityError("the receipt is for another lane or component", file=path, field=key, found=document[key], expected=want, why="a receipt binds one lane's exact bytes")
        differences = identity_differences(document["identity"], self.ident.identity)
        if differences:
            field_name, found, want = differences[0]
            raise IntegrityError(
                "the receipt was produced for other bytes than this package",
                file=path,
                field=field_name,
                found=found,
                expected=want,
                why="qualification evidence binds exact bytes; re-binding it to other bytes is forbidden",
                fix="qualify these exact bytes on the owner's hardware, or package the bytes that were qualified",
            )
        thresholds = identity_differences(document["thresholds"], dict(self.lane.qualification), "thresholds")
        if thresholds:
            field_name, found, want = thresholds[0]
            raise IntegrityError("the receipt was judged against other thresholds than the lane file's", file=path, field=field_name, found=found, expected=want)
        imported = dict(document)
        imported["imported"] = {"source_sha256": sha256_bytes(raw), "imported_from": path.name}
        self.result_status = document["status"]
        ui.info(f"imported a {document['status']} receipt generated {document['generated_utc']} by {document['harness']['name']} {document['harness']['version']}")
        return imported

    def _write(self, document: dict[str, Any]) -> Artifact:
        validate_receipt(document, file=self.receipt_path)
        data = canonical_bytes(document, file=self.receipt_path).decode("utf-8")  # refuses NaN and Infinity
        if redact(data) != data:
            raise IntegrityError("refusing to write a receipt that contains a secret value", file=self.receipt_path, why="this is a bug in the harness")
        write_json(self.receipt_path, document)
        return self.ctx.register.make(
            "lane-receipt",
            self.receipt_path,
            stage=self.name,
            lane=self.lane.id,
            name=f"{self.lane.id}/qualification/{self.lane.id}.json",
            status=document["status"],
            component_tag=document["component_tag"],
        )


def _extract_bin(package: Path, into: Path, server: str) -> Path:
    """Extract the package's bin/ folder (binaries and app-local libraries) for the smoke run."""
    target = into / "bin"
    target.mkdir(parents=True)
    with SafeTar(package) as archive:
        for member in archive:
            _top, _, rest = member.name.partition("/")
            if member.isfile() and rest.startswith("bin/") and "/" not in rest[4:]:
                out = target / safe_component(rest[4:], file=package, field=f"member {member.name}", expected="a binary or library name directly under bin/")
                with open(out, "wb") as sink:
                    for block in archive.chunks(member):
                        sink.write(block)
                out.chmod(0o755)
    return target / server


# -- front door -------------------------------------------------------------------------------


def _read_key(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except OSError:
        raise InputError("cannot read the API key file", file=path) from None
    key = raw.decode("utf-8", "replace").rstrip("\r\n")
    if not key.strip():
        raise InputError("the API key file is empty", file=path)
    register_secret(key)
    return key


def built_lanes(ctx: Context) -> list[str]:
    return sorted({a.lane for a in ctx.register.query("build-identity") if a.lane})


def qualify_lanes(
    lane_names: list[str] | None,
    *,
    dist: Path | str = "dist",
    endpoint: str | None = None,
    api_key_file: Path | None = None,
    import_path: Path | None = None,
    restart_command: str | None = None,
    restart_hook: RestartHook | None = None,
    config: Path | None = None,
    library_dirs: list[Path] | None = None,
    gpu: GpuMonitor | None = None,
    gpu_index: int = 0,
    request_timeout: float = 1800.0,
    lanes_dir: Path | None = None,
    force: bool = False,
) -> list[tuple[str, str, Path]]:
    """Qualify the named lanes (None: every built lane); returns (lane, status, receipt path)."""
    from pipeline.formats.lanes import find_lane
    from pipeline.stage import execute

    ctx = Context.open(dist, lanes_dir)
    api_key = _read_key(api_key_file)
    if restart_command:
        restart_hook = CommandRestartHook(restart_command)
    if gpu is None:
        gpu = NvidiaSmi(index=gpu_index)
    if lane_names is None:
        if import_path is not None:
            raise UsageError("--import binds one lane's receipt", fix="use --lane with --import")
        names = built_lanes(ctx)
        if not names:
            raise InputError("the register holds no build to qualify", file=ctx.register.file, fix="run the build (and package) stage first with the same --dist")
    else:
        names = lane_names
    lanes = [find_lane(name, lanes_dir) for name in names]
    served_lane: str | None = None
    if endpoint is not None and len(lanes) > 1:
        served_lane = _served_lane(ctx, lanes, endpoint, api_key, request_timeout, config, library_dirs)
    results = []
    for lane in lanes:
        use_endpoint = endpoint if served_lane is None or served_lane == lane.id else None
        pending = None
        if endpoint is not None and use_endpoint is None:
            pending = f"the endpoint serves lane {served_lane}, not this one"
        stage = QualifyStage(
            ctx,
            lane,
            endpoint=use_endpoint,
            api_key=api_key,
            import_path=import_path,
            restart_hook=restart_hook if use_endpoint else None,
            config=config if (lane.server_config is None or lane.id == served_lane or len(lanes) == 1) else None,
            library_dirs=library_dirs,
            gpu=gpu,
            request_timeout=request_timeout,
            force=force,
            pending_reason=pending,
        )
        result = execute(stage, force=force)
        status = stage.result_status
        if status is None:  # up to date: read the status back from the register
            status = result.outputs[0].attrs["status"] if result.outputs else "unknown"
        results.append((lane.id, status, stage.receipt_path))
        ui.step("qualify", f"{lane.id}: {status} -> {stage.receipt_path}")
    return results


def _served_lane(ctx, lanes, endpoint, api_key, timeout, config, library_dirs) -> str | None:
    """With --all and an endpoint: the one lane whose package the endpoint serves."""
    if not api_key:
        raise UsageError("--endpoint needs --api-key-file")
    client = Client(endpoint, api_key, timeout=timeout)
    if client.health() is None:
        return None  # every lane becomes hardware-pending, saying the endpoint did not answer
    try:
        served = served_identity(client.status())
    except GateFailure as problem:
        raise UsageError(f"cannot tell which lane the endpoint serves: {problem}", fix="use --lane") from None
    candidates = []
    for lane in lanes:
        ident = resolve_identity(ctx, lane, library_dirs=library_dirs)
        if served["deployment_profile"] == ident.deployment_profile:
            candidates.append(lane.id)
    if len(candidates) != 1:
        raise UsageError(
            "the endpoint's deployment profile matches no single built lane",
            found=served["deployment_profile"],
            expected="the deployment profile of one of " + ", ".join(lane.id for lane in lanes),
            fix="qualify the endpoint with --lane <id>",
        )
    return candidates[0]


def run_qualify(args: argparse.Namespace) -> int:
    """`qualify`: the command line's front door to `qualify_lanes`; one line per lane, exit 1 when a lane failed."""
    results = qualify_lanes(
        None if args.all else [args.lane],
        dist=args.dist,
        endpoint=args.endpoint,
        api_key_file=args.api_key_file,
        import_path=args.import_path,
        restart_command=args.restart_command,
        config=args.config,
        library_dirs=args.runtime_library_dir,
        gpu_index=args.gpu_index,
        request_timeout=args.request_timeout,
        lanes_dir=args.lanes_dir,
        force=args.force,
    )
    for lane, status, path in results:
        print(f"{lane}\t{status}\t{path}")
    return int(ExitCode.INPUT) if any(status == "failed" for _l, status, _p in results) else 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("qualify", help="qualify a lane's packaged bytes into a lane receipt (hardware-pending without a runtime)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--lane", help="lane id or short name")
    which.add_argument("--all", action="store_true", help="every lane the register holds a build of")
    parser.add_argument("--endpoint", help="URL of the live NInfer runtime serving this package, e.g. http://127.0.0.1:18082")
    parser.add_argument("--api-key-file", type=Path, help="file holding the endpoint's bearer key (never recorded)")
    parser.add_argument("--restart-command", help="shell command that stops and restarts the server process (restart gate)")
    parser.add_argument("--import", dest="import_path", type=Path, help="bind a receipt produced on the owner's hardware")
    parser.add_argument("--config", type=Path, help="container lane: the server configuration whose SHA-256 the receipt binds")
    parser.add_argument("--runtime-library-dir", type=Path, action="append", default=[], help="extra folder for the GPU smoke run's shared libraries (e.g. libcudart.so.13)")
    parser.add_argument("--gpu-index", type=int, default=0, help="nvidia-smi index of the GPU serving the lane (default 0)")
    parser.add_argument("--request-timeout", type=float, default=1800.0, help="seconds one request may take (default 1800)")
    parser.add_argument("--force", action="store_true", help="run even when inputs are unchanged; replace receipts holding hardware evidence")
    add_common(parser)
    parser.set_defaults(func=run_qualify)


__all__ = [
    "GATE_ORDER",
    "ENDPOINT_GATES",
    "QualifyStage",
    "identity_differences",
    "load_receipt",
    "qualify_lanes",
    "resolve_identity",
    "validate_receipt",
]


STAGE = QualifyStage


def release_plan(ctx: Context, lanes: list, options) -> list:
    """`release`: a lane receipt for each packaged lane (hardware-pending without a live endpoint)."""
    from pipeline.stage import Skip, execute

    steps: list = []
    for lane in lanes:
        if not ctx.register.query("package-archive", lane=lane.id) and not ctx.register.query("build-identity", lane=lane.id):
            steps.append((lane.id, Skip("no build or package of this lane in the register")))
            continue
        steps.append((lane.id, lambda lane=lane: execute(QualifyStage(ctx, lane, gpu=NvidiaSmi()))))
    return steps
