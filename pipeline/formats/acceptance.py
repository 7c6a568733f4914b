"""Documented-route acceptance documents: bundle, run receipt, composed acceptance record.

* **Bundle** (`omp_ninfer_acceptance_bundle`): one route of a route document, ready to
  run: every step's exact bytes, SHA-256, line range, shell and host requirement; the
  document's path, SHA-256 and the commit its bytes were read from; for a release route
  the release, the candidate commit and the candidate manifest's SHA-256; the route's
  host kind and parameters.  Made by `accept bundle`.
* **Run receipt** (`omp_ninfer_acceptance_run_receipt`): what `accept run` did with one
  bundle: per step the block SHA-256, the SHA-256 of the bytes actually executed,
  status, exit status, elapsed time and SHA-256 + byte count of stdout and stderr
  (never their content: the runner streams each step's output to a file of its work
  folder and keeps at most its last `OUTPUT_TAIL_BYTES` in memory, to show a failing
  step's end); the capabilities probed; the host's facts; the clone's commit;
  `secret_values_recorded: 0`.
* **Acceptance record** (`omp_ninfer_external_installation_acceptance`, the file
  `manifests/<release>/acceptance/external-installation.json` of docs/release-tree.md),
  extended with `documented_routes`: per route the bundle and receipt hashes and step
  counts, the document's hashes and every `document_change`.  Made by `accept compose`.

A bundle is data anyone could have edited, so its names never steer a path or the shell:
`release` follows the release-name grammar (`vX.Y.Z`, `vX.Y.Z-beta.N`), `document.path` is a
safe relative path, parameter names pass `routes.parameter_name_problem` (no `BASH_ENV`,
`PATH`, `LD_*` ...), and `check_against_document` refuses a bundle whose steps or parameters
are not byte for byte the route document's (the runner and compose both apply it to the
document read from git at the bundle's commit).

Only the standard library is used (the runner reads and writes these on an owner's
host from a plain clone).  JSON is read strictly: bounded size and nesting, duplicate
keys, NaN and infinities refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pipeline.errors import InputError, IntegrityError
from pipeline.formats.routes import (
    CAPABILITIES,
    OWNED_FIX,
    PARAMETER_KINDS,
    Document,
    is_mirror_url,
    parameter_name_problem,
    parameter_value_problem,
)
from pipeline.util.hashing import is_commit_hex, is_sha256_hex
from pipeline.util.jsonio import loads_object
from pipeline.util.safepath import relpath_problem
from pipeline.util.schema import Field, matches, one_of, read_table

BUNDLE_TYPE = "omp_ninfer_acceptance_bundle"
RECEIPT_TYPE = "omp_ninfer_acceptance_run_receipt"
RECORD_TYPE = "omp_ninfer_external_installation_acceptance"  # the one declaration (verify and compose check it)
SCHEMA_VERSION = 1
BUNDLE_KINDS = ("release-route", "runbook")
STEP_STATUSES = ("passed", "failed", "not-run")
MAX_JSON_BYTES = 4 << 20
MAX_DEPTH = 32
OUTPUT_TAIL_BYTES = 64 * 1024  # what the runner keeps in memory of one step's output (the rest is only on disk)


@dataclass(frozen=True)
class HostKind:
    id: str
    os: str  # platform.system().lower()
    arch: str  # normalised platform.machine()
    promises: tuple[str, ...]  # capabilities a host of this kind must have: their steps must run there
    description: str


HOST_KINDS: dict[str, HostKind] = {
    kind.id: kind
    for kind in (
        HostKind("linux-x86_64", "linux", "x86_64", (), "any x86-64 Linux host (a CI machine); host-only steps run only where the host has their capability"),
        HostKind("linux-x86_64-nvidia", "linux", "x86_64", ("gpu", "network", "oci-engine"), "the lane's Linux host: NVIDIA GPU and driver, an OCI engine, network"),
        HostKind("windows-x86_64", "windows", "x86_64", (), "any x86-64 Windows host"),
        HostKind("windows-x86_64-nvidia", "windows", "x86_64", ("gpu", "network"), "the lane's native Windows 11 host: NVIDIA GPU and driver, network"),
        HostKind("windows-x86_64-wsl2-nvidia", "windows", "x86_64", ("gpu", "network", "oci-engine"), "Windows 11 + WSL2 with Docker and the NVIDIA runtime"),
    )
}
DEFAULT_HOST_KIND = {"sh": "linux-x86_64", "powershell": "windows-x86_64"}
ARCH_ALIASES = {"amd64": "x86_64", "x86_64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


# -- strict JSON ----------------------------------------------------------------------------------

def loads_strict(data: bytes, *, file: str, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from hostile bytes through the one strict reader (bounded, no BOM, no duplicate keys, no NaN, shallow)."""
    return loads_object(data, source=file, max_bytes=max_bytes, max_depth=MAX_DEPTH, strict_bytes=True)


def canonical(document: Any) -> bytes:
    """Canonical JSON (sorted keys, indent 2, LF, trailing newline), as pipeline.util.jsonio writes it."""
    return (json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


# -- manifest field paths ("components.ninfer_variants[rtx4090-windows-native].package_url") -----

FIELD_PATH = re.compile(r"[a-z_][a-z0-9_]*(?:\[[A-Za-z0-9._-]+\])?(?:\.[a-z_][a-z0-9_]*(?:\[[A-Za-z0-9._-]+\])?)*")
_PART = re.compile(r"(?P<key>[a-z_][a-z0-9_]*)(?:\[(?P<select>[A-Za-z0-9._-]+)\])?")
SELECTOR_KEYS = ("id", "platform", "lane")
_MISSING = object()


def resolve_field(document: Any, path: str) -> Any:
    """The value at `path`, or _MISSING.  `[X]` selects the one list element whose id, platform or lane is X."""
    if not FIELD_PATH.fullmatch(path or ""):
        return _MISSING
    node = document
    for part in path.split("."):
        match = _PART.fullmatch(part)
        if node is None:
            return None  # a null parent (e.g. components.ninfer of a release without a container lane): not bound
        if match is None or not isinstance(node, dict) or match.group("key") not in node:
            return _MISSING
        node = node[match.group("key")]
        select = match.group("select")
        if select is not None:
            if not isinstance(node, list):
                return _MISSING
            found = [item for item in node if isinstance(item, dict) and any(item.get(k) == select for k in SELECTOR_KEYS)]
            if len(found) != 1:
                return _MISSING
            node = found[0]
    return node


def is_missing(value: Any) -> bool:
    return value is _MISSING


def manifest_strings(document: Any) -> set[str]:
    """Every string value of the manifest (the values a block may spell out literally)."""
    out: set[str] = set()
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            out.add(node)
    return out


# -- mirrors (OMP_NINFER_MIRROR="PREFIX=MIRROR ..."; audit --mirror has the same form) --------------

def parse_mirrors(value: str | None, *, source: str = "OMP_NINFER_MIRROR") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in (value or "").split():
        prefix, sep, target = item.partition("=")
        if not sep or not prefix or not target:
            raise InputError(f"{source} holds an entry that is not URL_PREFIX=MIRROR_PREFIX", field=source, found=item)
        for url in (prefix, target):
            if not is_mirror_url(url):
                raise InputError(f"{source} names a prefix that is neither HTTPS nor a loopback HTTP URL", field=source, found=url, expected="https://... or http://127.0.0.1:PORT/...")
        out.append((prefix, target))
    return out


def apply_mirrors(url: str, mirrors: list[tuple[str, str]]) -> str:
    for prefix, target in mirrors:
        if url.startswith(prefix):
            return target + url[len(prefix):]
    return url


# -- schemas --------------------------------------------------------------------------------------

_SHA = Field(str, check=is_sha256_hex, expected="a lowercase 64-hex SHA-256")
_SHA_OR_NULL = Field((str, type(None)), check=lambda v: v is None or is_sha256_hex(v), expected="a SHA-256 or null")
_COMMIT = Field(str, check=is_commit_hex, expected="a 40-hex commit")
_COMMIT_OR_NULL = Field((str, type(None)), check=lambda v: v is None or is_commit_hex(v), expected="a 40-hex commit or null")
_COUNT = Field(int, check=lambda v: 0 <= v < 1 << 53, expected="a byte count")
_LINE = Field(int, check=lambda v: 0 < v < 1 << 31, expected="a line number")
_ROUTE_ID = Field(str, check=matches(r"[a-z0-9][a-z0-9-]{0,62}"), expected="a route id")
_CAPS = Field(list, items=str, check=lambda v: all(c in CAPABILITIES for c in v) and v == sorted(set(v)), expected="sorted known capabilities")
_TIME = Field(str, check=matches(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z"), expected="a UTC time YYYY-MM-DDTHH:MM:SSZ")
_SECONDS = Field((int, float), check=lambda v: not isinstance(v, bool) and 0 <= v < 1e7, expected="seconds (finite, >= 0)")

BUNDLE_FIELDS = {
    "artifact_type": Field(str, check=one_of(BUNDLE_TYPE), expected=BUNDLE_TYPE),
    "schema_version": Field(int, check=lambda v: v == SCHEMA_VERSION, expected=str(SCHEMA_VERSION)),
    "kind": Field(str, check=one_of(*BUNDLE_KINDS), expected=" or ".join(BUNDLE_KINDS)),
    "release": Field((str, type(None))),
    "candidate_commit": _COMMIT_OR_NULL,
    "manifest": Field((dict, type(None))),
    "document": Field(dict),
    "route": Field(dict),
    "parameters": Field(list, items=dict),
    "steps": Field(list, items=dict),
    "checks": Field(dict),
}
BUNDLE_DOCUMENT = {"path": Field(str), "sha256": _SHA, "bytes": _COUNT, "commit": _COMMIT}
BUNDLE_MANIFEST = {"path": Field(str), "sha256": _SHA, "status": Field(str)}
BUNDLE_ROUTE = {
    "id": _ROUTE_ID,
    "title": Field(str),
    "heading_line": _LINE,
    "shell": Field(str, check=one_of("sh", "powershell"), expected="sh or powershell"),
    "host_kind": Field(str, check=lambda v: v in HOST_KINDS, expected="one of " + ", ".join(HOST_KINDS)),
    "lane": Field((str, type(None))),
    "required": Field(bool),
}
BUNDLE_PARAMETER = {
    "name": Field(str, check=matches(r"[A-Z][A-Z0-9_]{0,63}")),
    "kind": Field(str, check=lambda v: v in PARAMETER_KINDS, expected="one of " + ", ".join(PARAMETER_KINDS)),
    "default": Field((str, type(None))),
    "required": Field(bool),
}
BUNDLE_STEP = {
    "index": Field(int, check=lambda v: v > 0),
    "shell": Field(str, check=one_of("sh", "powershell")),
    "requires": _CAPS,
    "line_start": _LINE,
    "line_end": _LINE,
    "sha256": _SHA,
    "bytes": _COUNT,
    "text": Field(str),
}

RECEIPT_FIELDS = {
    "artifact_type": Field(str, check=one_of(RECEIPT_TYPE), expected=RECEIPT_TYPE),
    "schema_version": Field(int, check=lambda v: v == SCHEMA_VERSION, expected=str(SCHEMA_VERSION)),
    "bundle_sha256": _SHA,
    "kind": Field(str, check=one_of(*BUNDLE_KINDS)),
    "release": Field((str, type(None))),
    "route": _ROUTE_ID,
    "candidate_commit": _COMMIT_OR_NULL,
    "document": Field(dict),
    "clone": Field(dict),
    "status": Field(str, check=one_of("passed", "failed"), expected="passed or failed"),
    "failed_step": Field((int, type(None))),
    "failure": Field((str, type(None))),
    "steps": Field(list, items=dict),
    "environment": Field(dict),
    "capabilities": Field(dict),
    "host": Field(dict),
    "started_at": _TIME,
    "finished_at": _TIME,
    "runner": Field(dict),
    "secret_values_recorded": Field(int, check=lambda v: v == 0, expected="0"),
}
RECEIPT_DOCUMENT = {"path": Field(str), "sha256": _SHA, "sha256_in_clone": _SHA_OR_NULL}
RECEIPT_CLONE = {"commit": _COMMIT, "clean": Field(bool)}
_STREAM = Field((dict, type(None)))
RECEIPT_STEP = {
    "index": Field(int, check=lambda v: v > 0),
    "block_sha256": _SHA,
    "executed_sha256": _SHA_OR_NULL,
    "requires": _CAPS,
    "status": Field(str, check=one_of(*STEP_STATUSES), expected=", ".join(STEP_STATUSES)),
    "exit_status": Field((int, type(None))),
    "elapsed_s": Field((int, float, type(None)), check=lambda v: v is None or (not isinstance(v, bool) and 0 <= v < 1e7)),
    "stdout": _STREAM,
    "stderr": _STREAM,
    "reason": Field((str, type(None))),
}
RECEIPT_STREAM = {"sha256": _SHA, "bytes": _COUNT}
RECEIPT_ENVIRONMENT = {
    "variables": Field(list, items=str),
    "path": Field(str),
    "parameters": Field(dict),
    "shell": Field(str, check=one_of("sh", "powershell"), expected="sh or powershell"),
}
RECEIPT_PARAMETER = {"source": Field(str, check=one_of("set", "default", "unset"), expected="set, default or unset"), "value": Field((str, type(None)))}
RECEIPT_CAPABILITY = {
    "available": Field(bool),
    "how": Field(str, check=one_of("probe", "granted", "not-granted", "denied"), expected="probe, granted, not-granted or denied"),
    "command": Field((str, type(None))),
    "exit_status": Field((int, type(None))),
}


def check_release_name(value: Any, *, file: str, field: str = "release") -> None:
    """A release name from data (a path part of the runner's outputs): the release-name grammar or an InputError."""
    from pipeline.formats.release.names import RELEASE_RE  # standard library only

    if not isinstance(value, str) or not RELEASE_RE.fullmatch(value):
        raise InputError(
            "is not a product release name", file=file, field=field, found=value, expected="vX.Y.Z or vX.Y.Z-beta.N",
            why="the release names the folder the run's receipt is written to", fix="make the bundle again with 'accept bundle --release vX.Y.Z'",
        )


def check_document_path(value: Any, *, file: str, field: str = "document.path") -> None:
    problem = relpath_problem(value)
    if problem is not None:
        raise InputError(
            f"is not a path inside the clone: it {problem}", file=file, field=field, found=value, expected="a relative path such as docs/QUICKSTART.md, without '..' or a leading '/'",
            why="the runner reads the route document from the clone, never from elsewhere", fix="make the bundle again with 'accept bundle'",
        )


def check_parameter_name(name: Any, *, file: str, field: str) -> None:
    problem = parameter_name_problem(name)
    if problem is not None:
        raise InputError(
            f"names a variable that cannot be a parameter: it {problem}", file=file, field=field, found=name, expected="a name the route document declares (never HOME, PATH, TMPDIR ... that the runner sets)",
            why="the runner builds the shell's environment itself; a route's parameters only add values", fix=OWNED_FIX,
        )


def validate_bundle(doc: dict[str, Any], *, file: str) -> dict[str, Any]:
    top = read_table(doc, BUNDLE_FIELDS, file=file)
    read_table(top["document"], BUNDLE_DOCUMENT, file=file, prefix="document")
    check_document_path(top["document"]["path"], file=file)
    if top["manifest"] is not None:
        read_table(top["manifest"], BUNDLE_MANIFEST, file=file, prefix="manifest")
    route = read_table(top["route"], BUNDLE_ROUTE, file=file, prefix="route")
    if route["lane"] is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", route["lane"]):
        raise InputError("is not a lane id", file=file, field="route.lane", found=route["lane"], expected="lower-case letters, digits and '-' (e.g. rtx5090-container)")
    if top["kind"] == "runbook":
        if top["release"] is not None:
            raise InputError("a runbook bundle names no release", file=file, field="release", found=top["release"], expected="null", fix="make the bundle again with 'accept bundle --document FILE --route ROUTE'")
    elif top["release"] is not None:
        check_release_name(top["release"], file=file)
    names: set[str] = set()
    for index, parameter in enumerate(top["parameters"]):
        check_parameter_name(parameter.get("name") if isinstance(parameter, dict) else None, file=file, field=f"parameters[{index}].name")
        read_table(parameter, BUNDLE_PARAMETER, file=file, prefix=f"parameters[{index}]")
        if parameter["name"] in names:
            raise InputError("declares a parameter twice", file=file, field=f"parameters[{index}].name", found=parameter["name"])
        if parameter["default"] is not None and (problem := parameter_value_problem(parameter["kind"], parameter["default"])) is not None:
            raise InputError(f"the default of {parameter['name']} is outside its grammar", file=file, field=f"parameters[{index}].default", found=parameter["default"], expected=problem)
        names.add(parameter["name"])
    if not top["steps"]:
        raise InputError("a bundle needs at least one step", file=file, field="steps")
    import hashlib

    for index, step in enumerate(top["steps"]):
        values = read_table(step, BUNDLE_STEP, file=file, prefix=f"steps[{index}]")
        if values["index"] != index + 1:
            raise InputError("steps are numbered 1, 2, ... in order", file=file, field=f"steps[{index}].index", found=values["index"], expected=index + 1)
        encoded = values["text"].encode("utf-8")
        if hashlib.sha256(encoded).hexdigest() != values["sha256"] or len(encoded) != values["bytes"]:
            raise InputError("the step's text does not have its recorded SHA-256 and size", file=file, field=f"steps[{index}].sha256", found=hashlib.sha256(encoded).hexdigest(), expected=values["sha256"])
        if values["shell"] != route["shell"]:
            raise InputError("a step's shell differs from the route's", file=file, field=f"steps[{index}].shell", found=values["shell"], expected=route["shell"])
    if top["kind"] == "release-route" and (top["release"] is None or top["candidate_commit"] is None or top["manifest"] is None):
        raise InputError("a release-route bundle names its release, candidate commit and manifest", file=file, field="release")
    return top


def validate_receipt(doc: dict[str, Any], *, file: str) -> dict[str, Any]:
    top = read_table(doc, RECEIPT_FIELDS, file=file)
    read_table(top["document"], RECEIPT_DOCUMENT, file=file, prefix="document")
    check_document_path(top["document"]["path"], file=file)
    if top["release"] is not None:
        check_release_name(top["release"], file=file)
    read_table(top["clone"], RECEIPT_CLONE, file=file, prefix="clone")
    environment = read_table(top["environment"], RECEIPT_ENVIRONMENT, file=file, prefix="environment")
    for name, parameter in environment["parameters"].items():
        check_parameter_name(name, file=file, field=f"environment.parameters.{name}")
        values = read_table(parameter, RECEIPT_PARAMETER, file=file, prefix=f"environment.parameters.{name}")
        if (values["source"] == "unset") != (values["value"] is None):
            raise InputError("an unset parameter has no value, a set one has one", file=file, field=f"environment.parameters.{name}.value", found=values["value"])
    for index, step in enumerate(top["steps"]):
        values = read_table(step, RECEIPT_STEP, file=file, prefix=f"steps[{index}]")
        for stream in ("stdout", "stderr"):
            if values[stream] is not None:
                read_table(values[stream], RECEIPT_STREAM, file=file, prefix=f"steps[{index}].{stream}")
    for name, capability in top["capabilities"].items():
        if name not in CAPABILITIES:
            raise InputError("names an unknown capability", file=file, field=f"capabilities.{name}")
        read_table(capability, RECEIPT_CAPABILITY, file=file, prefix=f"capabilities.{name}")
    return top


def _first_difference(found: str, expected: str) -> tuple[int, str, str]:
    """(0-based line, found line, expected line) of the first line where two texts differ."""
    have, want = found.splitlines(keepends=True), expected.splitlines(keepends=True)
    for offset in range(max(len(have), len(want))):
        a = have[offset] if offset < len(have) else None
        b = want[offset] if offset < len(want) else None
        if a != b:
            shown = ["(no line: the block ends)" if x is None else x.removesuffix("\n") for x in (a, b)]
            if shown[0] == shown[1]:
                shown = [x if x is None or x.endswith("\n") else f"{x} (no final newline)" for x in (a, b)]
                shown = [str(x).removesuffix("\n") for x in shown]
            return offset, shown[0], shown[1]
    return 0, found, expected  # pragma: no cover - the texts differ somewhere


def check_against_document(bundle: dict[str, Any], document: Document, *, file: str, where: str) -> None:
    """Refuse (IntegrityError) a bundle whose route, steps or parameters are not byte for byte those of
    `document`, the route document read at the bundle's commit.  `where` names that copy in messages
    ('the clone at 1a2b3c...').  The bundle has been validated (validate_bundle)."""
    path = document.path
    route_id = bundle["route"]["id"]
    why = "a route is accepted only for the text the document holds; a bundle is data anyone could have edited"
    fix = f"make the bundle again from the document ('accept bundle --route {route_id}') and run that"
    if bundle["document"]["sha256"] != document.sha256 or bundle["document"]["bytes"] != document.bytes:
        raise IntegrityError(f"the route document in {where} is not the bundle's", file=path, field="sha256", found=document.sha256, expected=bundle["document"]["sha256"], why=why, fix=fix)
    if route_id not in document.routes:
        raise IntegrityError(f"the route document in {where} has no route {route_id}", file=path, field=f"route {route_id}", found=sorted(document.routes), expected=route_id, why=why, fix=fix)
    route = document.routes[route_id]
    if bundle["route"]["shell"] != route.shell:
        raise IntegrityError(f"route {route_id}'s shell differs from the document's", file=path, field=f"line {route.heading_line}", found=bundle["route"]["shell"], expected=route.shell, why=why, fix=fix)
    steps = bundle["steps"]
    for position, step in enumerate(steps):
        if position >= len(route.steps):
            raise IntegrityError(f"step {step['index']} of route {route_id} is not in the document (it has {len(route.steps)} steps)", file=path, field=f"line {route.end_line}", found=len(steps), expected=len(route.steps), why=why, fix=fix)
        held = route.steps[position]
        if step["text"] != held.text or step["sha256"] != held.sha256:
            offset, found, expected = _first_difference(step["text"], held.text)
            raise IntegrityError(
                f"step {step['index']} of route {route_id} is not the document's block (bundle sha256 {step['sha256'][:12]}, document {held.sha256[:12]})",
                file=path, field=f"line {held.line_start + offset}", found=found, expected=expected, why=why, fix=fix,
            )
        if list(step["requires"]) != list(held.requires) or (step["line_start"], step["line_end"]) != (held.line_start, held.line_end):
            raise IntegrityError(
                f"step {step['index']} of route {route_id} has another host requirement or line range than the document's",
                file=path, field=f"line {held.line_start}", found=f"requires {step['requires']}, lines {step['line_start']}-{step['line_end']}",
                expected=f"requires {list(held.requires)}, lines {held.line_start}-{held.line_end}", why=why, fix=fix,
            )
    if len(steps) != len(route.steps):
        missing = route.steps[len(steps)]
        raise IntegrityError(f"the bundle lacks step {missing.index} of route {route_id}", file=path, field=f"line {missing.line_start}", found=len(steps), expected=len(route.steps), why=why, fix=fix)
    declared = {p.name: p for p in document.parameters_of(route_id)}
    for index, parameter in enumerate(bundle["parameters"]):
        held_parameter = declared.get(parameter["name"])
        if held_parameter is None:
            raise IntegrityError(
                f"the bundle sets a parameter route {route_id} does not declare", file=file, field=f"parameters[{index}].name", found=parameter["name"],
                expected="one of " + (", ".join(sorted(declared)) or "(none: the route declares no parameters)") + f" ({path})", why=why, fix=fix,
            )
        if (parameter["kind"], parameter["default"], parameter["required"]) != (held_parameter.kind, held_parameter.default, held_parameter.required):
            raise IntegrityError(
                f"parameter {parameter['name']} differs from its declaration", file=path, field=f"line {held_parameter.line}",
                found=f"kind {parameter['kind']}, default {parameter['default']!r}, required {parameter['required']}",
                expected=f"kind {held_parameter.kind}, default {held_parameter.default!r}, required {held_parameter.required}", why=why, fix=fix,
            )
    if [p["name"] for p in bundle["parameters"]] != list(declared):
        raise IntegrityError(f"the bundle's parameters are not route {route_id}'s", file=file, field="parameters", found=[p["name"] for p in bundle["parameters"]], expected=list(declared), why=why, fix=fix)


# -- static checks of a block's text (release routes: against the candidate manifest) -------------

URL_RE = re.compile(r"https?://[^\s'\"<>`)\]}]+")
HEX64_RE = re.compile(r"(?<![0-9A-Fa-f])[0-9a-f]{64}(?![0-9A-Fa-f])")
HEX40_RE = re.compile(r"(?<![0-9A-Fa-f])[0-9a-f]{40}(?![0-9A-Fa-f])")
VERSION_TAG_RE = re.compile(r"(?<![A-Za-z0-9._/-])v[0-9]+\.[0-9]+\.[0-9]+(?:-[A-Za-z0-9.-]*[A-Za-z0-9])?(?![A-Za-z0-9._])")
IMAGE_TOOLS_RE = re.compile(r"\b(docker|podman|skopeo|nerdctl|crane|oras|ctr)\b")
TAGGED_IMAGE_RE = re.compile(r"(?<![A-Za-z0-9._/:$-])(?:docker://)?(?P<ref>(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9._-]+(?:/[a-z0-9._-]+)*:(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))(?![@A-Za-z0-9._:/-])")
LATEST_RE = re.compile(r"(?i)(:latest\b|/latest/|/latest\b|\blatest\.)")
MANIFEST_KEYS = ("artifact_type", "schema_version", "release", "status", "channel", "audience", "product", "predecessor", "inputs", "components", "runtime_identity", "compatibility", "qualification", "installation", "limitations", "signing", "publication")
PINNED_USE_RE = re.compile(r"\bpinned\b(?P<flags>(?:[ \t]+-{1,2}[A-Za-z-]+)*)[ \t]+['\"]?(?P<field>(?:" + "|".join(MANIFEST_KEYS) + r")(?![A-Za-z0-9_])[A-Za-z0-9_.\[\]-]*)['\"]?")
LOCAL_URL_RE = re.compile(r"https?://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?(/|$)")
_URL_FIELD = re.compile(r"(?P<stem>.+)_url$")


@dataclass
class BlockFinding:
    line: int
    what: str
    found: str
    expected: str


def check_block(step_text: str, first_line: int, *, manifest: dict[str, Any] | None, release: str | None) -> tuple[list[BlockFinding], list[str]]:
    """Findings for one block and the manifest fields it reads through `pinned`.

    Refused: an image named by tag (a mutable reference), anything 'latest', a literal
    URL that the manifest does not bind (an unpinned URL), a literal hash, commit or tag
    that the manifest does not hold (a value that differs from the manifest), and a
    `pinned FIELD` that is missing or null.  Without a manifest (a runbook), literal
    hashes and commits are refused outright: nothing is typed by hand.
    """
    findings: list[BlockFinding] = []
    fields: list[str] = []
    strings = manifest_strings(manifest) if manifest is not None else set()
    joined = " ".join(strings)
    for offset, line in enumerate(step_text.split("\n")):
        number = first_line + offset
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for match in LATEST_RE.finditer(line):
            findings.append(BlockFinding(number, "names 'latest', a moving reference", match.group(0), "a value pinned by the manifest (digest, hash, exact version)"))
        if IMAGE_TOOLS_RE.search(code):
            for match in TAGGED_IMAGE_RE.finditer(code):
                ref = match.group("ref")
                if "/" not in ref and not match.group(0).startswith("docker://"):
                    continue  # 'name:value' words that are not image references (format strings, host:port)
                if re.fullmatch(r"[0-9]+", match.group("tag")) and "/" in ref and ref.count(":") == 1 and ref.index(":") < ref.index("/"):
                    continue  # host:port/repository without a tag
                findings.append(BlockFinding(number, "names an image by tag, a mutable reference", ref, "the image by digest (components.ninfer.oci_reference, '<repository>@sha256:<64 hex>')"))
        for match in URL_RE.finditer(line):
            url = match.group(0).rstrip(".,;:")
            if LOCAL_URL_RE.match(url) or "$" in url:
                continue  # the lane's own loopback endpoint, or a URL built from pinned values
            if manifest is None:
                continue
            if url not in strings:
                findings.append(BlockFinding(number, "names a URL the manifest does not bind (an unpinned URL)", url, "a URL read from the manifest (pinned FIELD_url) with its SHA-256"))
        for match in HEX64_RE.finditer(line):
            if manifest is None or match.group(0) not in joined:
                findings.append(BlockFinding(number, "spells out a SHA-256 the manifest does not hold" if manifest is not None else "spells out a hash (nothing is typed by hand)", match.group(0), "the value read from the manifest (pinned FIELD)"))
        for match in HEX40_RE.finditer(line):
            if HEX64_RE.search(line[max(0, match.start() - 24): match.end() + 24]):
                continue
            if manifest is None or match.group(0) not in joined:
                findings.append(BlockFinding(number, "spells out a commit the manifest does not hold" if manifest is not None else "spells out a commit (nothing is typed by hand)", match.group(0), "the value read from the manifest (pinned FIELD)"))
        if manifest is not None:
            for match in VERSION_TAG_RE.finditer(code):
                if match.group(0) != release and match.group(0) not in strings:
                    findings.append(BlockFinding(number, "spells out a version or tag that differs from the manifest", match.group(0), f"{release} or a tag the manifest binds (better: $OMP_NINFER_RELEASE or pinned FIELD)"))
        for match in PINNED_USE_RE.finditer(code):
            name = match.group("field")
            if name.startswith("-"):
                continue
            fields.append(name)
            if manifest is not None:
                value = resolve_field(manifest, name)
                if is_missing(value):
                    findings.append(BlockFinding(number, "reads a manifest field that does not exist", name, "a field path of the manifest (docs/release-tree.md), e.g. components.ninfer.oci_reference"))
                elif value is None:
                    findings.append(BlockFinding(number, "reads a manifest field that is null (not bound yet)", name, "a bound value: bundle the route once the release binds it"))
                elif isinstance(value, (dict, list)):
                    findings.append(BlockFinding(number, "reads a manifest field that is not a single value", name, "a string, number or boolean field"))
    return findings, fields


def unpaired_urls(fields: list[str], manifest: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(url field, hash field) for every URL a route reads whose hash field it never reads: an unpinned asset."""
    out: list[tuple[str, str]] = []
    used = set(fields)
    for name in fields:
        match = _URL_FIELD.fullmatch(name.rsplit(".", 1)[-1])
        if not match:
            continue
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        stem = match.group("stem")
        candidates = [f"{parent}.{stem}_sha256" if parent else f"{stem}_sha256"]
        if stem == "artifact" or stem.endswith("_artifact"):
            candidates = [f"{parent}.{stem}_sha256"]
        if stem in ("public",):
            candidates = [f"{parent}.sha256", f"{parent}.summary_sha256"]
        exists = [c for c in candidates if manifest is None or not is_missing(resolve_field(manifest, c))]
        if exists and not any(c in used for c in exists):
            out.append((name, exists[0]))
    return out
