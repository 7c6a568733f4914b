"""The release tree `manifests/<release>/`: its input, its derivation and its renderings.

`docs/release-tree.md` is the contract; this module is its one implementation,
shared by `compose` (which writes the tree) and `verify` (which re-derives it
and reports every difference).  Nothing here is typed by hand except the
release's `release.toml`: the manifest, the qualification summary, the
compatibility authority and both Markdown renderings are computed from that
file plus the evidence bytes in the tree (lane receipts, checksum files, the
image publication receipt, the acceptance record) and the predecessor's
manifest, in one fixed order (the hash chain):

    lane receipts and checksum copies -> lane rows -> authority and summary -> manifest

`derive()` never raises for a defect in the evidence: it records a Problem
(file, field, found, expected) and carries on with null, so that `verify` can
report every error in one run and `compose` can refuse with all of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import _MISSING as _MISSING_ERR
from .errors import InputError, PipelineError
from .lanes import Lane, load_lanes
from .util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from .util.jsonio import canonical_bytes, loads_document
from .util.safepath import safe_relative
from .util.schema import Field, matches, one_of, read_table

MANIFESTS_DIR = "manifests"
RELEASE_TOML = "release.toml"
MANIFEST = "manifest.json"
SUMMARY = "qualification.json"
AUTHORITY = "compatibility.json"
AUTHORITY_MD = "COMPATIBILITY.md"
NOTES = "NOTES.md"
QUALIFICATION_DIR = "qualification"
PUBLICATION_RECEIPT = "qualification/runtime-publication.json"
ACCEPTANCE = "acceptance/external-installation.json"
BUNDLE_SUFFIX = ".sigstore.json"

MANIFEST_TYPE = "omp_ninfer_release_manifest"
SUMMARY_TYPE = "omp_ninfer_product_qualification"
AUTHORITY_TYPE = "omp_ninfer_compatibility_authority"
ACCEPTANCE_TYPE = "omp_ninfer_external_installation_acceptance"
LANE_RECEIPT_TYPE = "omp_ninfer_lane_receipt"
PUBLICATION_TYPE = "ninfer_runtime_image_publication_receipt"

PRODUCT_NAME = "OMP NInfer"
PRODUCT_REPOSITORY = "https://github.com/alphastorm/omp-ninfer"
PRODUCT_REPO_SLUG = "alphastorm/omp-ninfer"
RAW_PREFIX = f"https://raw.githubusercontent.com/{PRODUCT_REPO_SLUG}/"
NINFER_REPOSITORY = "https://github.com/alphastorm/ninfer"
RELEASE_WORKFLOW = ".github/workflows/release.yml"
OIDC_ISSUER = "https://token.actions.githubusercontent.com"

RELEASE_RE = re.compile(r"v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-beta\.[1-9][0-9]*)?")
STATES = ("draft", "candidate", "ready")
LANE_STATUSES = ("qualified", "preview", "blocked", "unsupported")
SHIPPED = ("qualified", "preview")
RECEIPT_STATUSES = ("passed", "failed", "hardware-pending")
CHANNELS = {("public", "public"), ("early-access", "invited-testers")}
LANE_MODES = ("register", "predecessor", "pins")
EXTERNAL_INSTALL = "external-install"
PINS = "pins"

# A file of a closed asset set -> the manifest row fields that bind it.
SCRIPT_FIELDS = {
    "Install-Release.ps1": "installer",
    "Control-Release.ps1": "controller",
    "Control-GpuOwner.ps1": "gpu_owner_controller",
    "Protect-StateRoot.ps1": "state_protection",
}
ROLE_FIELDS = {
    "package": "package",
    "source": "source_archive",
    "spdx": "sbom",
    "cdx": "cdx_sbom",
    "inner-sums": "inner_checksums",
    "receipt": "build_receipt",
    "outer-sums": "checksums",
}
CONTAINER_PACKAGE = "binary_archive"


def release_dir(root: Path, release: str) -> Path:
    return root / MANIFESTS_DIR / release


def repo_path(release: str, name: str) -> str:
    """The repository-relative POSIX path of a file of the tree."""
    return f"{MANIFESTS_DIR}/{release}/{name}"


def receipt_name(lane_id: str) -> str:
    return f"{QUALIFICATION_DIR}/{lane_id}.json"


def sums_name(lane_id: str) -> str:
    return f"{QUALIFICATION_DIR}/{lane_id}.SHA256SUMS"


def raw_url(commit: str, path: str) -> str:
    return f"{RAW_PREFIX}{commit}/{path}"


RAW_URL_RE = re.compile(re.escape(RAW_PREFIX) + r"(?P<commit>[0-9a-f]{40})/(?P<path>[A-Za-z0-9._/+-]+)")


def parse_raw_url(url: object) -> tuple[str, str] | None:
    if not isinstance(url, str):
        return None
    match = RAW_URL_RE.fullmatch(url)
    return (match.group("commit"), match.group("path")) if match else None


def asset_url(tag: str, name: str) -> str:
    return f"{NINFER_REPOSITORY}/releases/download/{tag}/{name}"


def signer_identity(release: str) -> str:
    return f"{PRODUCT_REPOSITORY}/{RELEASE_WORKFLOW}@refs/tags/{release}"


def package_prefix(kind: str) -> str:
    return CONTAINER_PACKAGE if kind == "container" else "package"


def role_fields(kind: str) -> list[tuple[str, str]]:
    """(role key, field prefix) for every file of a lane kind's closed set, outer sums last."""
    pairs = [(role, package_prefix(kind) if role == "package" else prefix) for role, prefix in ROLE_FIELDS.items() if role != "outer-sums"]
    if kind != "container":
        pairs += [(f"script:{name}", prefix) for name, prefix in SCRIPT_FIELDS.items()]
    return [*pairs, ("outer-sums", "checksums")]


def row_path(lane_id: str, kind: str) -> str:
    return "components.ninfer" if kind == "container" else f"components.ninfer_variants[{lane_id}]"


def sort_release_key(name: str) -> tuple:
    match = RELEASE_RE.fullmatch(name)
    if not match:
        return (-1,)
    major, minor, patch = (int(match.group(i)) for i in (1, 2, 3))
    beta = match.group(4)
    return (major, minor, patch, 0 if beta else 1, int(beta.split(".")[1]) if beta else 0)


def list_releases(root: Path) -> list[str]:
    base = root / MANIFESTS_DIR
    if not base.is_dir():
        return []
    names = [p.name for p in base.iterdir() if p.is_dir() and RELEASE_RE.fullmatch(p.name)]
    return sorted(names, key=sort_release_key)


# -- problems ---------------------------------------------------------------

_MISSING = object()


@dataclass
class Problem:
    check: str
    what: str
    file: str | None = None  # repository-relative
    field: str | None = None
    found: Any = _MISSING
    expected: Any = _MISSING
    fix: str | None = None
    why: str | None = None

    def error(self) -> InputError:
        kwargs: dict[str, Any] = {"file": self.file, "field": self.field, "fix": self.fix, "why": self.why}
        if self.found is not _MISSING:
            kwargs["found"] = self.found
        if self.expected is not _MISSING:
            kwargs["expected"] = self.expected
        return InputError(self.what, **kwargs)

    def message(self) -> str:
        return self.error().render()

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "file": self.file,
            "field": self.field,
            "found": None if self.found is _MISSING else self.found,
            "expected": None if self.expected is _MISSING else self.expected,
            "message": self.message(),
        }


@dataclass
class Problems:
    items: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def add(self, check: str, what: str, **kwargs: Any) -> None:
        self.items.append(Problem(check, what, **kwargs))

    def warn(self, check: str, what: str, **kwargs: Any) -> None:
        self.warnings.append(Problem(check, what, **kwargs))

    def add_error(self, check: str, error: PipelineError, *, file: str | None = None) -> None:
        self.items.append(
            Problem(
                check,
                error.what,
                file=file or error.file,
                field=error.field,
                found=error.found if error.found is not _MISSING_ERR else _MISSING,
                expected=error.expected if error.expected is not _MISSING_ERR else _MISSING,
                fix=error.fix,
                why=error.why,
            )
        )

    def keys(self) -> set[tuple[str | None, str | None]]:
        return {(p.file, p.field) for p in self.items}

# -- release.toml -------------------------------------------------------------

_COMMIT = Field(str, required=False, check=is_commit_hex, expected="a full 40-hex commit (omit the key when unknown)")
_SHA = Field(str, required=False, check=is_sha256_hex, expected="a lowercase 64-hex SHA-256 (omit the key when unknown)")
_BYTES = Field(int, required=False, check=lambda v: 0 < v <= 1 << 42, expected="a byte count 1..4 TiB (omit the key when unknown)")
_RELEASE = Field(str, check=lambda v: bool(RELEASE_RE.fullmatch(v)), expected="a product release 'vX.Y.Z' or 'vX.Y.Z-beta.N'")

_TOP = {
    "schema_version": Field(int, check=lambda v: v == 1, expected="1"),
    "release": _RELEASE,
    "title": Field(str, check=lambda v: 0 < len(v) <= 120 and "\n" not in v, expected="one line of at most 120 characters"),
    "channel": Field(str, check=one_of("public", "early-access"), expected="'public' or 'early-access'"),
    "audience": Field(str, check=one_of("public", "invited-testers"), expected="'public' or 'invited-testers'"),
    "predecessor": Field(str, required=False, check=lambda v: bool(RELEASE_RE.fullmatch(v)), expected="a product release 'vX.Y.Z'"),
    "summary": Field(str),
    "limitations": Field(list, items=str),
    "client": Field(dict),
    "model": Field(dict),
    "lanes": Field(dict),
    "unknown": Field(dict, required=False, default={}),
    "publication": Field(dict),
}
_CLIENT = {
    "upstream_repository": Field(str, check=matches(r"https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"), expected="an https://github.com/<owner>/<repo> URL"),
    "upstream_tag": Field(str, check=matches(r"v[0-9]+\.[0-9]+\.[0-9]+"), expected="an upstream release tag 'vX.Y.Z'"),
    "upstream_commit": _COMMIT,
    "release_id": Field(int, required=False, check=lambda v: v > 0, expected="a positive GitHub release id"),
    "published": Field(bool),
    "platforms": Field(list, items=dict),
}
_PLATFORM = {
    "platform": Field(str, check=matches(r"(windows|darwin|linux)-(x64|arm64)"), expected="e.g. 'windows-x64', 'darwin-arm64', 'linux-x64'"),
    "artifact_name": Field(str, check=matches(r"[A-Za-z0-9][A-Za-z0-9._+-]*"), expected="a bare file name"),
    "artifact_bytes": _BYTES,
    "artifact_sha256": _SHA,
}
_MODEL = {
    "repository": Field(str, check=matches(r"https://huggingface\.co/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"), expected="an https://huggingface.co/<owner>/<repo> URL"),
    "revision": _COMMIT,
    "artifact_name": Field(str, check=matches(r"[A-Za-z0-9][A-Za-z0-9._+-]*"), expected="a bare file name"),
    "artifact_bytes": _BYTES,
    "artifact_sha256": _SHA,
    "public_model_id": Field(str, required=False, check=matches(r"[a-z0-9][a-z0-9._-]*"), expected="a public model id such as 'q38-ninfer'"),
    "published": Field(bool),
}
_LANE = {
    "from": Field(str, check=one_of(*LANE_MODES), expected="'register', 'predecessor' or 'pins'"),
    "status": Field(str, check=one_of(*LANE_STATUSES), expected="qualified, preview, blocked or unsupported"),
    "published": Field(bool),
    "deferral": Field(dict, required=False),
    # pins mode
    "release_tag": Field(str, required=False, check=matches(r"v[0-9]+\.[0-9]+\.[0-9]+-[a-z0-9.-]+"), expected="a component tag such as 'v0.7.0-qwen38-4090-beta.2'"),
    "deployment_profile": Field(str, required=False, check=matches(r"[a-z0-9][a-z0-9.-]*"), expected="a deployment profile id"),
    "source_commit": _COMMIT,
    "upstream_commit": _COMMIT,
    "configuration_sha256": _SHA,
    "server_binary_sha256": _SHA,
    "package_bytes": _BYTES,
    "oci_reference": Field(str, required=False, check=matches(r"[a-z0-9.:-]+(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}"), expected="a digest-pinned image reference 'registry/repo@sha256:<64 hex>' (never a tag)"),
    "checksums_file": Field(str, required=False),
}
PIN_KEYS = ("release_tag", "deployment_profile", "source_commit", "upstream_commit", "configuration_sha256", "server_binary_sha256", "package_bytes", "oci_reference", "checksums_file")
_DEFERRAL = {
    "reason": Field(str, check=lambda v: bool(v.strip()), expected="a non-empty reason"),
    "predecessor_release": Field(str, check=lambda v: bool(RELEASE_RE.fullmatch(v)), expected="the product release users keep for this lane"),
    "route": Field(str, check=matches(r"https://\S+"), expected="an https URL of the documented route"),
    "future_condition": Field(str, required=False),
}
_PUBLICATION = {
    "targets": Field(list, items=str),
    "blockers": Field(list, items=str, required=False, default=[]),
}


@dataclass(frozen=True)
class LaneInput:
    id: str
    mode: str
    status: str
    published: bool
    deferral: dict[str, Any] | None
    pins: dict[str, Any]


@dataclass(frozen=True)
class ReleaseInput:
    path: str  # repository-relative
    sha256: str
    data: dict[str, Any]
    release: str
    title: str
    channel: str
    audience: str
    predecessor: str | None
    summary: str
    limitations: list[str]
    client: dict[str, Any]
    platforms: list[dict[str, Any]]
    model: dict[str, Any]
    lanes: dict[str, LaneInput]
    unknown: dict[str, str]
    targets: list[str]
    blockers: list[str]


def load_release_toml(root: Path, release: str, lanes: dict[str, Lane]) -> ReleaseInput:
    """Read and check `manifests/<release>/release.toml`; raises InputError naming the key."""
    from .util.fs import read_bytes_bounded
    from .util.jsonio import MAX_TOML_BYTES, loads_toml

    rel = repo_path(release, RELEASE_TOML)
    path = root / rel
    file = rel
    if not path.is_file():
        raise InputError("file does not exist", file=file, fix="write the release input (docs/release-tree.md) or stage the release from its predecessor")
    raw = read_bytes_bounded(path, MAX_TOML_BYTES, what="release.toml")
    data = loads_toml(raw, source=file)
    top = read_table(data, _TOP, file=file)
    if top["release"] != release:
        raise InputError("names another release than its folder", file=file, field="release", found=top["release"], expected=repr(release))
    if (top["channel"], top["audience"]) not in CHANNELS:
        raise InputError("channel and audience do not pair", file=file, field="audience", found=f"{top['channel']}/{top['audience']}", expected="public/public or early-access/invited-testers")
    if top["predecessor"] is not None and sort_release_key(top["predecessor"]) >= sort_release_key(release):
        raise InputError("the predecessor must be an earlier release", file=file, field="predecessor", found=top["predecessor"], expected=f"a release before {release}")
    client = read_table(top["client"], _CLIENT, file=file, prefix="client")
    platforms = [read_table(item, _PLATFORM, file=file, prefix=f"client.platforms[{i}]") for i, item in enumerate(client["platforms"])]
    names = [p["platform"] for p in platforms]
    if not platforms or len(set(names)) != len(names):
        raise InputError("client platforms must be a non-empty list of distinct platforms", file=file, field="client.platforms", found=names)
    model = read_table(top["model"], _MODEL, file=file, prefix="model")
    lane_inputs: dict[str, LaneInput] = {}
    if not top["lanes"]:
        raise InputError("a release needs at least one lane", file=file, field="lanes", expected="[lanes.<lane id>] tables")
    for lane_id in sorted(top["lanes"]):
        prefix = f"lanes.{lane_id}"
        if lane_id not in lanes:
            raise InputError("names an unknown lane", file=file, field=prefix, found=lane_id, expected="one of " + ", ".join(sorted(lanes)))
        entry = read_table(top["lanes"][lane_id], _LANE, file=file, prefix=prefix)
        deferral = read_table(entry["deferral"], _DEFERRAL, file=file, prefix=f"{prefix}.deferral") if entry["deferral"] is not None else None
        pins = {key: entry[key] for key in PIN_KEYS if entry[key] is not None}
        if entry["from"] != "pins" and pins:
            key = sorted(pins)[0]
            raise InputError(
                f"pins are only read in pins mode (this lane is from = {entry['from']!r})",
                file=file,
                field=f"{prefix}.{key}",
                why="register and predecessor lanes take every value from bytes or from the predecessor row",
                fix="remove the key, or set from = 'pins'",
            )
        if entry["from"] == "pins" and entry["status"] in SHIPPED and "release_tag" not in pins:
            raise InputError("a shipped pins-mode lane needs its component tag", file=file, field=f"{prefix}.release_tag", expected=f"e.g. {lanes[lane_id].tag()!r}")
        if "oci_reference" in pins and lanes[lane_id].kind != "container":
            raise InputError("only the container lane has an image", file=file, field=f"{prefix}.oci_reference")
        if entry["from"] == "predecessor" and top["predecessor"] is None:
            raise InputError("a lane rebound from the predecessor needs 'predecessor'", file=file, field=f"{prefix}.from", fix="set predecessor = 'vX.Y.Z' at the top")
        if "release_tag" in pins:
            _check_tag(lanes[lane_id], pins["release_tag"], file=file, field=f"{prefix}.release_tag")
        if "checksums_file" in pins:  # compose reads it: a file of this repository, never one of the host
            safe_relative(pins["checksums_file"], root, file=file, field=f"{prefix}.checksums_file", hidden=True, what="the repository",
                          expected="a repository-relative path of the downloaded SHA256SUMS, e.g. evidence/<lane>/SHA256SUMS")
        lane_inputs[lane_id] = LaneInput(lane_id, entry["from"], entry["status"], entry["published"], deferral, pins)
    unknown = top["unknown"] or {}
    for key, value in unknown.items():
        if not isinstance(value, str) or not value.strip():
            raise InputError("must be a non-empty reason", file=file, field=f"unknown.{key}", found=value)
    publication = read_table(top["publication"], _PUBLICATION, file=file, prefix="publication")
    for index, blocker in enumerate(publication["blockers"]):
        if ": " not in blocker:
            raise InputError("a blocker reads '<subject>: <reason>'", file=file, field=f"publication.blockers[{index}]", found=blocker)
    return ReleaseInput(
        path=rel,
        sha256=sha256_bytes(raw),
        data=data,
        release=release,
        title=top["title"],
        channel=top["channel"],
        audience=top["audience"],
        predecessor=top["predecessor"],
        summary=top["summary"],
        limitations=list(top["limitations"]),
        client=client,
        platforms=sorted(platforms, key=lambda p: p["platform"]),
        model=model,
        lanes=lane_inputs,
        unknown=dict(unknown),
        targets=list(publication["targets"]),
        blockers=list(publication["blockers"]),
    )


def _check_tag(lane: Lane, tag: str, *, file: str, field: str) -> None:
    """A component tag must be one of the lane's tags (any version, its GPU words)."""
    words = lane.tag_pattern.replace("{version}", "").replace("{n}", "")
    pattern = re.escape(lane.tag_pattern).replace(re.escape("{version}"), r"[0-9]+\.[0-9]+\.[0-9]+").replace(re.escape("{n}"), r"[1-9][0-9]*")
    if not re.fullmatch(pattern, tag):
        raise InputError("is not a tag of this lane", file=file, field=field, found=tag, expected=f"the lane's pattern {lane.tag_pattern!r} ({words.strip('-.')})")


# -- TOML output (for `compose stage`) ------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\n" in value and '"""' not in value and "\\" not in value and not any(ord(c) < 32 and c != "\n" for c in value):
            return '"""\n' + value + '"""'
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list) and all(not isinstance(v, dict) for v in value):
        if not value:
            return "[]"
        inner = ",\n".join("  " + _toml_value(v) for v in value)
        return "[\n" + inner + ",\n]"
    raise TypeError(f"cannot write {type(value).__name__} as a TOML value")


def dump_toml(document: dict[str, Any], *, header: str = "") -> str:
    """The subset of TOML that release.toml uses: tables, arrays of tables, scalars, lists."""
    out: list[str] = [header] if header else []

    def emit(table: dict[str, Any], path: list[str]) -> None:
        table = {k: v for k, v in table.items() if v is not None}  # TOML has no null: an absent key is null
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(i, dict) for i in v))}
        for key, value in scalars.items():
            out.append(f"{_toml_key(key)} = {_toml_value(value)}")
        for key, value in table.items():
            if isinstance(value, dict):
                has_scalars = any(not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(i, dict) for i in v)) for v in value.values())
                if has_scalars or not value:
                    out.append("")
                    out.append("[" + ".".join(_toml_key(p) for p in [*path, key]) + "]")
                emit(value, [*path, key])
            elif isinstance(value, list) and value and all(isinstance(i, dict) for i in value):
                for item in value:
                    out.append("")
                    out.append("[[" + ".".join(_toml_key(p) for p in [*path, key]) + "]]")
                    emit(item, [*path, key])

    emit(document, [])
    return "\n".join(out).strip("\n") + "\n"


# -- reading evidence ------------------------------------------------------------

def read_evidence_json(root: Path, rel: str, problems: Problems, check: str) -> dict[str, Any] | None:
    path = root / rel
    if not path.is_file():
        problems.add(check, "file does not exist", file=rel, fix="run 'python -m pipeline compose' to copy the evidence into the tree")
        return None
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf") or b"\r" in data:
        problems.add(check, "holds a byte-order mark or a carriage return", file=rel, expected="UTF-8 without BOM, LF line endings")
        return None
    try:
        document = loads_document(data, source=rel)
    except InputError as exc:
        problems.add(check, exc.what, file=rel)
        return None
    if not isinstance(document, dict):
        problems.add(check, "must hold a JSON object", file=rel, found=type(document).__name__)
        return None
    return document


def file_sha256(root: Path, rel: str | None) -> str | None:
    if not rel:
        return None
    path = root / rel
    return sha256_bytes(path.read_bytes()) if path.is_file() else None




@dataclass
class ReceiptFacts:
    """What a lane receipt binds, read by its field names (pipeline/qualify.py)."""

    lane: Any
    component_tag: Any
    deployment_profile: Any
    status: Any
    source_commit: Any
    upstream_commit: Any
    patch_stack_sha: Any
    server_binary_sha256: Any
    configuration_sha256: Any
    model_artifact_sha256: Any
    package_name: Any
    package_sha256: Any
    package_bytes: Any
    outer_checksums_sha256: Any
    gates: dict[str, Any]
    secret_values_recorded: Any


def receipt_facts(doc: dict[str, Any]) -> ReceiptFacts:
    identity = doc.get("identity") if isinstance(doc.get("identity"), dict) else {}
    build = identity.get("build_identity") if isinstance(identity.get("build_identity"), dict) else {}
    package = identity.get("package") if isinstance(identity.get("package"), dict) else {}
    gates = doc.get("gates") if isinstance(doc.get("gates"), dict) else {}
    return ReceiptFacts(
        lane=doc.get("lane"),
        component_tag=doc.get("component_tag"),
        deployment_profile=doc.get("deployment_profile"),
        status=doc.get("status"),
        source_commit=identity.get("source_commit"),
        upstream_commit=build.get("upstream_base_sha"),
        patch_stack_sha=build.get("patch_stack_sha"),
        server_binary_sha256=identity.get("server_binary_sha256"),
        configuration_sha256=identity.get("configuration_sha256"),
        model_artifact_sha256=identity.get("model_artifact_sha256"),
        package_name=package.get("name"),
        package_sha256=package.get("sha256"),
        package_bytes=package.get("bytes"),
        outer_checksums_sha256=identity.get("outer_checksums_sha256"),
        gates={name: (gate.get("status") if isinstance(gate, dict) else gate) for name, gate in sorted(gates.items())},
        secret_values_recorded=doc.get("secret_values_recorded"),
    )


@dataclass
class PublicationFacts:
    image_reference: Any
    image_digest: Any
    binary_name: Any
    binary_sha256: Any
    source_commit: Any
    component_tag: Any
    secret_free: Any


def publication_facts(doc: dict[str, Any]) -> PublicationFacts:
    """Field names of `ninfer_runtime_image_publication_receipt` (anchor §12; pipeline/push.py)."""
    archive = doc.get("binary_archive") if isinstance(doc.get("binary_archive"), dict) else {}
    return PublicationFacts(
        image_reference=doc.get("image_reference"),
        image_digest=doc.get("image_digest", doc.get("digest")),
        binary_name=doc.get("binary_asset", archive.get("name")),
        binary_sha256=doc.get("binary_sha256", archive.get("sha256")),
        source_commit=doc.get("source_commit"),
        component_tag=doc.get("release_tag", doc.get("component_tag")),
        secret_free=doc.get("secret_free"),
    )


IMAGE_REF_RE = re.compile(r"(?P<repo>[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+)@(?P<digest>sha256:[0-9a-f]{64})")


def split_image_reference(reference: object) -> tuple[str, str] | None:
    if not isinstance(reference, str):
        return None
    match = IMAGE_REF_RE.fullmatch(reference)
    return (match.group("repo"), match.group("digest")) if match else None


# -- checksum files ---------------------------------------------------------------

def classify_asset(name: str, kind: str) -> str | None:
    """The role key of a closed-set file name (independent of the lane file's current version)."""
    if name == "SHA256SUMS":
        return "outer-sums"
    if name == "package-build-receipt.json":
        return "receipt"
    if name in SCRIPT_FIELDS:
        return f"script:{name}" if kind != "container" else None
    for suffix, role in (("-source.tar.gz", "source"), (".tar.gz", "package"), (".spdx.json", "spdx"), (".cdx.json", "cdx"), (".SHA256SUMS", "inner-sums")):
        if name.endswith(suffix):
            return role
    return None


def expected_names(lane: Lane, tag: str | None) -> dict[str, str] | None:
    """role key -> file name of the lane's set for this tag, when the lane file still describes the tag."""
    if not tag:
        return None
    try:
        beta = lane.beta_from_tag(tag)
        from .assets import asset_set  # the package stage's naming rules (one place)
    except (InputError, ImportError):
        return None
    names: dict[str, str] = {}
    for asset in asset_set(lane, beta).assets:
        key = f"script:{asset.name}" if asset.role == "support-script" else asset.role
        names[key] = asset.name
    return names


def parse_sums_bytes(data: bytes, *, file: str) -> dict[str, str]:
    """Strict `<64 hex>  <name>` lines (pipeline.assets.parse_sums); raises IntegrityError."""
    from .assets import parse_sums

    return parse_sums(data, file=file)


# -- derivation ---------------------------------------------------------------------

@dataclass
class Derived:
    release: ReleaseInput | None
    manifest: dict[str, Any] | None
    summary: dict[str, Any] | None
    authority: dict[str, Any] | None
    authority_md: str | None
    notes: str | None
    # repository path -> why the file belongs to the tree (every file of a closed tree)
    files: dict[str, str] = field(default_factory=dict)
    # null install-relevant identities: manifest field path
    nulls: list[str] = field(default_factory=list)
    derived_blockers: list[str] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)


def _pin(pins: dict[str, str], path: str | None) -> str | None:
    if not path:
        return None
    url = pins.get(path)
    parsed = parse_raw_url(url)
    return url if parsed and parsed[1] == path else None


def collect_pins(manifest: dict[str, Any] | None) -> dict[str, str]:
    """Every record path -> its pinned raw URL, as the current manifest records them."""
    pins: dict[str, str] = {}
    if not isinstance(manifest, dict):
        return pins

    def take(node: Any, path_key: str, url_key: str) -> None:
        if isinstance(node, dict) and isinstance(node.get(path_key), str) and isinstance(node.get(url_key), str):
            pins[node[path_key]] = node[url_key]

    qual = manifest.get("qualification")
    if isinstance(qual, dict):
        take(qual, "summary", "public_url")
        take(qual.get("acceptance"), "path", "public_url")
    take(manifest.get("compatibility"), "path", "public_url")
    for row in _manifest_rows(manifest):
        if isinstance(row, dict):
            take(row.get("qualification"), "summary", "public_url")
            take(row.get("publication_receipt"), "path", "public_url")
    return pins


def _manifest_rows(manifest: dict[str, Any]) -> list[Any]:
    """The lane rows of a manifest (components.ninfer, then components.ninfer_variants), as written:
    entries of any type, nothing for a field of the wrong type (verify reports the shapes)."""
    components = manifest.get("components") if isinstance(manifest.get("components"), dict) else {}
    variants = components.get("ninfer_variants")
    return [components.get("ninfer"), *(variants if isinstance(variants, list) else [])]


def predecessor_row(pred_manifest: dict[str, Any] | None, lane_id: str) -> dict[str, Any] | None:
    if not isinstance(pred_manifest, dict):
        return None
    for row in _manifest_rows(pred_manifest):
        if isinstance(row, dict) and row.get("id") == lane_id:
            return row
    return None


def derive(
    root: Path,
    release: str,
    problems: Problems,
    *,
    lanes: dict[str, Lane] | None = None,
    current: dict[str, Any] | None = None,
    status: str | None = None,
    pins: dict[str, str] | None = None,
) -> Derived:
    """Compute every derived file of the tree from release.toml and the evidence in it."""
    lanes = lanes or load_lanes()
    files: dict[str, str] = {}
    try:
        rt = load_release_toml(root, release, lanes)
    except PipelineError as error:
        problems.add_error("input", error)
        return Derived(None, None, None, None, None, None, files)
    files[rt.path] = "input"
    pins = collect_pins(current) if pins is None else pins
    if status is None:
        status = current.get("status") if isinstance(current, dict) and current.get("status") in STATES else "draft"

    # predecessor
    pred_manifest = None
    predecessor = None
    if rt.predecessor:
        pred_rel = repo_path(rt.predecessor, MANIFEST)
        pred_manifest = read_evidence_json(root, pred_rel, problems, "input")
        predecessor = {"release": rt.predecessor, "manifest_sha256": file_sha256(root, pred_rel)}

    client = _derive_client(rt)
    model = _derive_model(rt)
    rows: dict[str, dict[str, Any]] = {}
    receipts: dict[str, ReceiptFacts] = {}
    for lane_id, li in rt.lanes.items():
        if li.status not in SHIPPED:
            continue
        row, facts = _derive_row(root, rt, li, lanes[lane_id], pred_manifest, pins, model, problems, files)
        rows[lane_id] = row
        if facts is not None:
            receipts[lane_id] = facts

    container_rows = [lane_id for lane_id in rows if lanes[lane_id].kind == "container"]
    if len(container_rows) > 1:
        problems.add("input", "a release has at most one container lane", file=rt.path, found=container_rows)
    components = {
        "omp": client,
        "model": model,
        "ninfer": rows[container_rows[0]] if container_rows else None,
        "ninfer_variants": [rows[k] for k in sorted(rows) if lanes[k].kind != "container"],
    }

    # acceptance
    acceptance_rel = repo_path(release, ACCEPTANCE)
    acceptance = None
    if (root / acceptance_rel).exists():
        files[acceptance_rel] = "acceptance"
        record = read_evidence_json(root, acceptance_rel, problems, "acceptance")
        if record is not None:
            candidate = record.get("candidate_commit")
            acceptance = {
                "path": acceptance_rel,
                "sha256": file_sha256(root, acceptance_rel),
                "public_url": _pin(pins, acceptance_rel),
                "status": record.get("status") if record.get("status") in ("passed", "failed") else None,
                "candidate_commit": candidate if is_commit_hex(candidate) else None,
            }
    accepted = bool(acceptance and acceptance["status"] == "passed")

    nulls = _null_identities(components, lanes)
    derived_blockers = _blockers(rt, nulls, components, accepted)
    blockers = derived_blockers + [b for b in rt.blockers if b not in derived_blockers]

    deferred = {lane_id: li.deferral for lane_id, li in rt.lanes.items() if li.deferral is not None}
    shipped_rows = list(rows.values())
    qualified_rows = [row for row in shipped_rows if row["status"] == "qualified"]
    eligible = bool(qualified_rows) and all(row["qualification"]["status"] == "passed" for row in qualified_rows)

    summary = _summary(rt, rows, receipts, deferred, acceptance, accepted, eligible, blockers)
    summary_rel = repo_path(release, SUMMARY)
    summary_bytes = canonical_bytes(summary)
    authority = _authority(rt, rows, lanes, model, deferred)
    authority_rel = repo_path(release, AUTHORITY)
    authority_bytes = canonical_bytes(authority)
    authority_md = render_authority(authority)
    for rel, why in ((summary_rel, "summary"), (authority_rel, "authority"), (repo_path(release, AUTHORITY_MD), "rendering"), (repo_path(release, NOTES), "rendering"), (repo_path(release, MANIFEST), "manifest")):
        files[rel] = why

    primary = rows[container_rows[0]] if container_rows else (shipped_rows[0] if shipped_rows else None)
    signed = [repo_path(release, MANIFEST)] + sorted(row["checksums_path"] for row in shipped_rows if row.get("checksums_path"))
    manifest = {
        "artifact_type": MANIFEST_TYPE,
        "schema_version": 1,
        "release": release,
        "status": status,
        "channel": rt.channel,
        "audience": rt.audience,
        "product": {"name": PRODUCT_NAME, "repository": PRODUCT_REPOSITORY, "title": rt.title},
        "predecessor": predecessor,
        "inputs": {"release_toml": rt.path, "release_toml_sha256": rt.sha256},
        "components": components,
        "runtime_identity": None
        if primary is None
        else {
            "lane": primary["id"],
            "public_model_id": model["public_model_id"],
            "deployment_profile": primary["deployment_profile"],
            "configuration_sha256": primary["configuration_sha256"],
            "server_binary_sha256": primary["server_binary_sha256"],
            "model_artifact_sha256": model["artifact_sha256"],
            "source_commit": primary["source_commit"],
        },
        "compatibility": {
            "authority_id": authority["authority_id"],
            "path": authority_rel,
            "sha256": sha256_bytes(authority_bytes),
            "public_url": _pin(pins, authority_rel),
        },
        "qualification": {
            "summary": summary_rel,
            "summary_sha256": sha256_bytes(summary_bytes),
            "public_url": _pin(pins, summary_rel),
            "runtime_release_eligible": eligible,
            "external_installation_passed": accepted,
            "acceptance": acceptance,
            "deferred_scope": deferred,
        },
        "installation": {
            "silent_cloud_fallback": False,
            "lanes": {lane_id: rows[lane_id]["installable"] if lane_id in rows else False for lane_id in sorted(rt.lanes)},
        },
        "limitations": list(rt.limitations),
        "signing": {
            "certificate_identity": signer_identity(release),
            "certificate_oidc_issuer": OIDC_ISSUER,
            "bundle_suffix": BUNDLE_SUFFIX,
            "signed_files": signed,
        },
        "publication": {"authorized": False, "targets": list(rt.targets), "blockers": list(blockers)},
    }
    # Pins come last in the chain: a record's raw URL can only name a commit holding its bytes.
    records = [(manifest["qualification"]["summary"], manifest["qualification"]["public_url"]), (authority_rel, manifest["compatibility"]["public_url"])]
    for row in shipped_rows:
        if row["qualification"]["summary"]:
            records.append((row["qualification"]["summary"], row["qualification"]["public_url"]))
        if isinstance(row.get("publication_receipt"), dict):
            records.append((row["publication_receipt"]["path"], row["publication_receipt"]["public_url"]))
    if acceptance:
        records.append((acceptance["path"], acceptance["public_url"]))
    unpinned = sorted({path for path, url in records if url is None})
    if unpinned:
        prefix = repo_path(release, "")
        pin_blocker = (
            f"{PINS}: {len(unpinned)} records have no raw URL pinned at a commit yet ({', '.join(p.removeprefix(prefix) for p in unpinned)}); "
            f"commit the tree, then run 'python -m pipeline compose rebind --release {release} --pin COMMIT' until none remain"
        )
        manifest["publication"]["blockers"].append(pin_blocker)
        derived_blockers = [*derived_blockers, pin_blocker]
    notes = render_notes(manifest, rt, summary)
    return Derived(rt, manifest, summary, authority, authority_md, notes, files, nulls, derived_blockers, unpinned)


def _derive_client(rt: ReleaseInput) -> dict[str, Any]:
    c = rt.client
    tag = c["upstream_tag"]
    return {
        "distribution_kind": "upstream-release",
        "upstream_repository": c["upstream_repository"],
        "upstream_tag": tag,
        "upstream_commit": c["upstream_commit"],
        "distribution_version": tag[1:],
        "release_id": c["release_id"],
        "published": c["published"],
        "platforms": [
            {
                "platform": p["platform"],
                "artifact_name": p["artifact_name"],
                "artifact_url": f"{c['upstream_repository']}/releases/download/{tag}/{p['artifact_name']}",
                "artifact_bytes": p["artifact_bytes"],
                "artifact_sha256": p["artifact_sha256"],
            }
            for p in rt.platforms
        ],
    }


def _derive_model(rt: ReleaseInput) -> dict[str, Any]:
    m = rt.model
    return {
        "repository": m["repository"],
        "revision": m["revision"],
        "artifact_name": m["artifact_name"],
        "artifact_url": f"{m['repository']}/resolve/{m['revision']}/{m['artifact_name']}" if m["revision"] else None,
        "artifact_bytes": m["artifact_bytes"],
        "artifact_sha256": m["artifact_sha256"],
        "public_model_id": m["public_model_id"],
        "published": m["published"],
    }


def _empty_row(lane: Lane, li: LaneInput) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": lane.id,
        "status": li.status,
        "installable": li.status == "qualified",
        "published": li.published,
        "rebound_from": None,
        "repository": NINFER_REPOSITORY,
        "release_tag": None,
        "deployment_profile": None,
        "source_commit": None,
        "upstream_commit": None,
        "server_binary_sha256": None,
        "configuration_sha256": None,
        "model_artifact_sha256": None,
        "checksums_path": None,
        "qualification": {"summary": None, "sha256": None, "public_url": None, "status": None},
    }
    pkg = package_prefix(lane.kind)
    row[f"{pkg}_name"] = None
    row[f"{pkg}_bytes"] = None
    for _role, prefix in role_fields(lane.kind):
        row[f"{prefix}_url"] = None
        row[f"{prefix}_sha256"] = None
    if lane.kind == "container":
        row.update({"oci_repository": None, "oci_reference": None, "oci_manifest_digest": None, "publication_receipt": None})
    return row


def _derive_row(
    root: Path,
    rt: ReleaseInput,
    li: LaneInput,
    lane: Lane,
    pred_manifest: dict[str, Any] | None,
    pins: dict[str, str],
    model: dict[str, Any],
    problems: Problems,
    files: dict[str, str],
) -> tuple[dict[str, Any], ReceiptFacts | None]:
    release = rt.release
    where = row_path(lane.id, lane.kind)
    row = _empty_row(lane, li)
    pkg = package_prefix(lane.kind)
    receipt_rel = repo_path(release, receipt_name(lane.id))
    sums_rel = repo_path(release, sums_name(lane.id))
    pub_rel = repo_path(release, PUBLICATION_RECEIPT)
    facts: ReceiptFacts | None = None

    if li.mode == "predecessor":
        old = predecessor_row(pred_manifest, lane.id)
        if old is None:
            problems.add("input", "the predecessor ships no row for this lane, so nothing can be rebound unchanged", file=rt.path, field=f"lanes.{lane.id}.from", found="predecessor", expected="'register' or 'pins' for a lane new in this release")
            return row, None
        for key in row:
            if key in old and key not in ("id", "status", "installable", "published", "rebound_from", "checksums_path", "qualification", "publication_receipt"):
                row[key] = old[key]
        row["rebound_from"] = rt.predecessor
        old_receipt_sha = (old.get("qualification") or {}).get("sha256") if isinstance(old.get("qualification"), dict) else None
        if old_receipt_sha:
            files[receipt_rel] = "receipt"
            actual = file_sha256(root, receipt_rel)
            if actual != old_receipt_sha:
                problems.add("receipts", "a rebound-unchanged receipt must be the predecessor's bytes", file=receipt_rel, field=f"{where}.qualification.sha256", found=actual, expected=old_receipt_sha, fix=f"copy {repo_path(rt.predecessor or '', receipt_name(lane.id))} byte for byte (compose stage does)")
            doc = read_evidence_json(root, receipt_rel, problems, "receipts")
            facts = receipt_facts(doc) if doc is not None else None
            row["qualification"] = {"summary": receipt_rel, "sha256": actual, "public_url": _pin(pins, receipt_rel), "status": facts.status if facts else None}
        if old.get("checksums_sha256"):
            files[sums_rel] = "checksums"
            row["checksums_path"] = sums_rel
            actual = file_sha256(root, sums_rel)
            if actual != old["checksums_sha256"]:
                problems.add("checksums", "a rebound-unchanged checksum copy must be the predecessor's bytes", file=sums_rel, field=f"{where}.checksums_sha256", found=actual, expected=old["checksums_sha256"])
        old_pub = old.get("publication_receipt")
        if lane.kind == "container" and isinstance(old_pub, dict) and old_pub.get("sha256"):
            files[pub_rel] = "publication"
            actual = file_sha256(root, pub_rel)
            if actual != old_pub["sha256"]:
                problems.add("hashes", "a rebound-unchanged publication receipt must be the predecessor's bytes", file=pub_rel, field=f"{where}.publication_receipt.sha256", found=actual, expected=old_pub["sha256"])
            row["publication_receipt"] = {"path": pub_rel, "sha256": actual, "public_url": _pin(pins, pub_rel)}
        if facts is not None and model["artifact_sha256"] and facts.model_artifact_sha256 != model["artifact_sha256"]:
            problems.add("receipts", "the rebound-unchanged lane was qualified with another model than this release binds", file=receipt_rel, field="identity.model_artifact_sha256", found=facts.model_artifact_sha256, expected=model["artifact_sha256"], fix="requalify the lane with the release's model (from = 'register'), or keep the predecessor's model")
        return row, facts

    if li.mode == "pins":
        p = li.pins
        row["release_tag"] = p.get("release_tag")
        row["deployment_profile"] = p.get("deployment_profile")
        row["source_commit"] = p.get("source_commit")
        row["upstream_commit"] = p.get("upstream_commit")
        row["configuration_sha256"] = p.get("configuration_sha256")
        row["server_binary_sha256"] = p.get("server_binary_sha256")
        row[f"{pkg}_bytes"] = p.get("package_bytes")
        row["model_artifact_sha256"] = model["artifact_sha256"]
        if lane.kind == "container" and p.get("oci_reference"):
            _set_image(row, p["oci_reference"])
        if p.get("checksums_file"):
            files[sums_rel] = "checksums"
            if not (root / sums_rel).is_file():
                problems.add("checksums", "the copy of the bound checksum file is missing", file=sums_rel, fix="run 'python -m pipeline compose' to copy checksums_file into the tree")
            else:
                _bind_sums(root, row, lane, sums_rel, problems)
        else:
            _bind_names(row, lane)
        if (root / receipt_rel).exists():
            files[receipt_rel] = "receipt"
            doc = read_evidence_json(root, receipt_rel, problems, "receipts")
            facts = receipt_facts(doc) if doc is not None else None
            row["qualification"] = {"summary": receipt_rel, "sha256": file_sha256(root, receipt_rel), "public_url": _pin(pins, receipt_rel), "status": facts.status if facts else None}
        return row, facts

    # register mode: everything from the evidence copied into the tree
    files[receipt_rel] = "receipt"
    files[sums_rel] = "checksums"
    doc = read_evidence_json(root, receipt_rel, problems, "receipts")
    if doc is not None:
        facts = receipt_facts(doc)
        row["qualification"] = {"summary": receipt_rel, "sha256": file_sha256(root, receipt_rel), "public_url": _pin(pins, receipt_rel), "status": facts.status if facts.status in RECEIPT_STATUSES else None}
        row["release_tag"] = facts.component_tag if isinstance(facts.component_tag, str) else None
        row["deployment_profile"] = facts.deployment_profile if isinstance(facts.deployment_profile, str) else None
        row["source_commit"] = facts.source_commit if is_commit_hex(facts.source_commit) else None
        row["upstream_commit"] = facts.upstream_commit if is_commit_hex(facts.upstream_commit) else None
        row["server_binary_sha256"] = facts.server_binary_sha256 if is_sha256_hex(facts.server_binary_sha256) else None
        row["configuration_sha256"] = facts.configuration_sha256 if is_sha256_hex(facts.configuration_sha256) else None
        row["model_artifact_sha256"] = facts.model_artifact_sha256 if is_sha256_hex(facts.model_artifact_sha256) else None
        row[f"{pkg}_bytes"] = facts.package_bytes if isinstance(facts.package_bytes, int) and not isinstance(facts.package_bytes, bool) and facts.package_bytes > 0 else None
    if (root / sums_rel).is_file():
        _bind_sums(root, row, lane, sums_rel, problems)
    else:
        problems.add("checksums", "the copy of the lane's outer SHA256SUMS is missing", file=sums_rel, fix="run 'python -m pipeline compose --dist DIR' to copy it from the register")
    if lane.kind == "container":
        files[pub_rel] = "publication"
        pub = read_evidence_json(root, pub_rel, problems, "images")
        if pub is not None:
            pf = publication_facts(pub)
            row["publication_receipt"] = {"path": pub_rel, "sha256": file_sha256(root, pub_rel), "public_url": _pin(pins, pub_rel)}
            if split_image_reference(pf.image_reference):
                _set_image(row, pf.image_reference)
            else:
                problems.add("images", "the image reference is not pinned by digest", file=pub_rel, field="image_reference", found=pf.image_reference, expected="'<registry>/<repository>@sha256:<64 hex>' (a tag can move)")
    return row, facts


def _set_image(row: dict[str, Any], reference: str) -> None:
    split = split_image_reference(reference)
    if split:
        row["oci_repository"], row["oci_manifest_digest"] = split
        row["oci_reference"] = reference


def _bind_names(row: dict[str, Any], lane: Lane) -> None:
    """The package name and URL from the lane's naming rules, when no checksum file is bound.

    Only the package: the other files of a published set are known from its
    SHA256SUMS alone (older cuts had other shapes), so they stay null until it is bound.
    """
    names = expected_names(lane, row["release_tag"])
    if not names or "package" not in names:
        return
    pkg = package_prefix(lane.kind)
    row[f"{pkg}_name"] = names["package"]
    row[f"{pkg}_url"] = asset_url(row["release_tag"], names["package"])


def _bind_sums(root: Path, row: dict[str, Any], lane: Lane, sums_rel: str, problems: Problems) -> None:
    """Every asset URL and SHA-256 of the row from the tree copy of the outer SHA256SUMS."""
    data = (root / sums_rel).read_bytes()
    row["checksums_path"] = sums_rel
    row["checksums_sha256"] = sha256_bytes(data)
    tag = row["release_tag"]
    if tag:
        row["checksums_url"] = asset_url(tag, "SHA256SUMS")
    try:
        entries = parse_sums_bytes(data, file=sums_rel)
    except PipelineError as error:
        problems.add_error("checksums", error, file=sums_rel)
        return
    expected = expected_names(lane, tag)
    by_role: dict[str, str] = {}
    for name in entries:
        role = classify_asset(name, lane.kind)
        if expected is not None:
            role = next((key for key, value in expected.items() if value == name), None)
        if role is None or role == "outer-sums":
            problems.add("checksums", "lists a file that is not part of the lane's closed asset set", file=sums_rel, field=name, found=name, expected="only " + ", ".join(sorted(v for k, v in (expected or {}).items() if k != "outer-sums")) if expected else "package, source, SBOMs, inner sums, build receipt (and the four scripts on native lanes)")
            continue
        if role in by_role:
            problems.add("checksums", "lists two files of the same role", file=sums_rel, field=name, found=[by_role[role], name])
            continue
        by_role[role] = name
    wanted = [role for role, _ in role_fields(lane.kind) if role != "outer-sums"]
    for role in wanted:
        if role not in by_role:
            want = (expected or {}).get(role, role.removeprefix("script:"))
            problems.add("checksums", "the closed asset set lacks a file", file=sums_rel, field=want, expected=f"a line for {want}")
    pkg = package_prefix(lane.kind)
    row[f"{pkg}_name"] = by_role.get("package")
    for role, prefix in role_fields(lane.kind):
        if role in by_role:
            name = by_role[role]
            row[f"{prefix}_sha256"] = entries[name]
            row[f"{prefix}_url"] = asset_url(tag, name) if tag else None


# Install-relevant identities: a null here is a blocker (and forbids candidate).
def _null_identities(components: dict[str, Any], lanes: dict[str, Lane]) -> list[str]:
    nulls: list[str] = []
    omp = components["omp"]
    if omp["upstream_commit"] is None:
        nulls.append("components.omp.upstream_commit")
    for p in omp["platforms"]:
        for key in ("artifact_bytes", "artifact_sha256"):
            if p[key] is None:
                nulls.append(f"components.omp.platforms[{p['platform']}].{key}")
    model = components["model"]
    for key in ("revision", "artifact_url", "artifact_bytes", "artifact_sha256"):
        if model[key] is None:
            nulls.append(f"components.model.{key}")
    rows = ([components["ninfer"]] if components["ninfer"] else []) + components["ninfer_variants"]
    for row in rows:
        lane = lanes[row["id"]]
        where = row_path(row["id"], lane.kind)
        pkg = package_prefix(lane.kind)
        keys = ["release_tag", "deployment_profile", "source_commit", "upstream_commit", "server_binary_sha256", "configuration_sha256", "model_artifact_sha256", f"{pkg}_name", f"{pkg}_bytes"]
        for _role, prefix in role_fields(lane.kind):
            keys += [f"{prefix}_url", f"{prefix}_sha256"]
        if lane.kind == "container":
            keys += ["oci_reference", "publication_receipt"]
        for key in keys:
            if row.get(key) is None:
                nulls.append(f"{where}.{key}")
        if row["qualification"]["sha256"] is None:
            nulls.append(f"{where}.qualification")
    return nulls


def _covering_key(path: str, keys: Iterable[str]) -> str | None:
    best = None
    for key in keys:
        covers = path == key or path.startswith(key + ".") or path.startswith(key + "[")
        if covers and (best is None or len(key) > len(best)):
            best = key
    return best


def blocker_subject(blocker: str) -> str:
    return blocker.split(": ", 1)[0]


def _blockers(rt: ReleaseInput, nulls: list[str], components: dict[str, Any], accepted: bool) -> list[str]:
    """Blockers derived from the data: grouped null identities, unpublished components, acceptance."""
    groups: dict[str, list[str]] = {}
    for path in nulls:
        key = _covering_key(path, rt.unknown) or path
        groups.setdefault(key, []).append(path)
    out: list[str] = []
    for key, paths in groups.items():
        reason = rt.unknown.get(key, "not bound yet")
        if len(paths) == 1 and paths[0] == key:
            out.append(f"{key}: {reason}")
        else:
            fields = ", ".join(p[len(key):].lstrip(".") for p in paths)
            out.append(f"{key}: {reason} (null: {fields})")
    unpublished = []
    if not components["omp"]["published"]:
        unpublished.append("components.omp")
    if not components["model"]["published"]:
        unpublished.append("components.model")
    rows = ([components["ninfer"]] if components["ninfer"] else []) + components["ninfer_variants"]
    for row in rows:
        if not row["published"]:
            unpublished.append("components.ninfer" if row is components["ninfer"] else f"components.ninfer_variants[{row['id']}]")
    for subject in unpublished:
        out.append(f"{subject}.published: the component release is not published yet (publish it, then set published = true in release.toml)")
    if not accepted:
        out.append(f"{EXTERNAL_INSTALL}: no passed external-installation acceptance is bound (run the documented routes on the candidate, then 'compose accept')")
    return out


def unknown_keys_unused(rt: ReleaseInput, nulls: list[str]) -> list[str]:
    return [key for key in rt.unknown if not any(_covering_key(path, [key]) for path in nulls)]


def _summary(rt, rows, receipts, deferred, acceptance, accepted, eligible, blockers) -> dict[str, Any]:
    lanes_out: dict[str, Any] = {}
    for lane_id, row in sorted(rows.items()):
        pkg = "binary_archive" if "binary_archive_sha256" in row else "package"
        facts = receipts.get(lane_id)
        lanes_out[lane_id] = {
            "status": row["status"],
            "release_tag": row["release_tag"],
            "deployment_profile": row["deployment_profile"],
            "source_commit": row["source_commit"],
            "server_binary_sha256": row["server_binary_sha256"],
            "configuration_sha256": row["configuration_sha256"],
            "model_artifact_sha256": row["model_artifact_sha256"],
            "package_sha256": row[f"{pkg}_sha256"],
            "rebound_from": row["rebound_from"],
            "receipt": {
                "path": row["qualification"]["summary"],
                "sha256": row["qualification"]["sha256"],
                "public_url": row["qualification"]["public_url"],
                "status": row["qualification"]["status"],
                "gates": facts.gates if facts else {},
            },
        }
    return {
        "artifact_type": SUMMARY_TYPE,
        "schema_version": 2,
        "release": rt.release,
        "status": "runtime-release-eligible" if eligible else "incomplete",
        "publication_authorized": False,
        "external_installation_qualified": accepted,
        "lanes": lanes_out,
        "deferred_scope": deferred,
        "acceptance": acceptance,
        "remaining_release_gates": list(blockers),
    }


def _authority(rt: ReleaseInput, rows, lanes: dict[str, Lane], model, deferred) -> dict[str, Any]:
    profiles = []
    variants = []
    for lane_id in sorted(rt.lanes):
        li = rt.lanes[lane_id]
        lane = lanes[lane_id]
        row = rows.get(lane_id)
        pkg = package_prefix(lane.kind)
        receipt = {"path": row["qualification"]["summary"], "sha256": row["qualification"]["sha256"], "url": row["qualification"]["public_url"]} if row else None
        if row and row["deployment_profile"]:
            profiles.append(
                {
                    "id": row["deployment_profile"],
                    "lane": lane_id,
                    "status": row["status"],
                    "installable": row["installable"],
                    "configuration_sha256": row["configuration_sha256"],
                    "server_binary_sha256": row["server_binary_sha256"],
                    "model_sha256": row["model_artifact_sha256"],
                    "image_reference": row.get("oci_reference") if lane.kind == "container" else None,
                    "package_sha256": row[f"{pkg}_sha256"],
                    "receipt": receipt,
                }
            )
        variants.append(
            {
                "id": lane_id,
                "status": li.status,
                "installable": li.status == "qualified",
                "silent_cloud_fallback": False,
                "gpu": lane.gpu_name,
                "cuda_architecture": f"sm_{lane.cuda_architecture}",
                "platform": lane.asset_platform,
                "release_tag": row["release_tag"] if row else None,
                "source_commit": row["source_commit"] if row else None,
                "package_name": row[f"{pkg}_name"] if row else None,
                "package_url": row[f"{pkg}_url"] if row else None,
                "package_sha256": row[f"{pkg}_sha256"] if row else None,
                "package_bytes": row[f"{pkg}_bytes"] if row else None,
                "model_url": model["artifact_url"],
                "model_sha256": model["artifact_sha256"],
                "model_bytes": model["artifact_bytes"],
                "qualification_receipt": receipt,
                "deferral": deferred.get(lane_id),
            }
        )
    return {
        "artifact_type": AUTHORITY_TYPE,
        "schema_version": 1,
        "authority_id": f"omp-ninfer-{rt.release}",
        "product_release": rt.release,
        "profiles": sorted(profiles, key=lambda p: p["id"]),
        "runtime_variants": variants,
    }


# -- renderings -----------------------------------------------------------------------

def _short(value: Any, n: int = 12) -> str:
    return f"`{value[:n]}`" if isinstance(value, str) and value else "not bound"


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).replace("|", "\\|")


def render_authority(authority: dict[str, Any]) -> str:
    lines = [
        f"# Compatibility: {PRODUCT_NAME} {authority['product_release']}",
        "",
        f"Generated from `{AUTHORITY}` (authority `{authority['authority_id']}`) by `python -m pipeline compose`; generated, do not edit.",
        "",
        "## Deployment profiles",
        "",
        "| Profile | Lane | Status | Installable | Server binary | Configuration | Model | Image or package | Receipt |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in authority["profiles"]:
        image = p["image_reference"] or (f"package {_short(p['package_sha256'])}" if p["package_sha256"] else None)
        receipt = _short(p["receipt"]["sha256"]) if p["receipt"] else "not bound"
        lines.append(
            f"| `{p['id']}` | {p['lane']} | {p['status']} | {_cell(p['installable'])} | {_short(p['server_binary_sha256'])} | "
            f"{_short(p['configuration_sha256'])} | {_short(p['model_sha256'])} | {_cell(image)} | {receipt} |"
        )
    if not authority["profiles"]:
        lines.append("| — | — | — | — | — | — | — | — | — |")
    lines += [
        "",
        "## Runtime variants",
        "",
        "| Lane | GPU | CUDA | Status | Installable | Component tag | Package | Deferral |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in authority["runtime_variants"]:
        deferral = v["deferral"]["reason"] if v["deferral"] else None
        package = f"{v['package_name']} ({_short(v['package_sha256'])})" if v["package_name"] else None
        lines.append(
            f"| {v['id']} | {v['gpu']} | {v['cuda_architecture']} | {v['status']} | {_cell(v['installable'])} | "
            f"{_cell(v['release_tag'])} | {_cell(package)} | {_cell(deferral)} |"
        )
    lines += ["", "Status values: qualified, preview, blocked, unsupported. No silent cloud fallback on any lane.", ""]
    return "\n".join(lines)


def render_notes(manifest: dict[str, Any], rt: ReleaseInput, summary: dict[str, Any]) -> str:
    release = manifest["release"]
    comp = manifest["components"]
    lines = [
        f"# {PRODUCT_NAME} {release} — {rt.title}",
        "",
        f"Status: **{manifest['status']}**. Generated by `python -m pipeline compose` from `{RELEASE_TOML}` and the bound evidence; do not edit.",
        "",
        rt.summary.strip(),
        "",
        "## Support boundary",
        "",
    ]
    lines += [f"- {item}" for item in rt.limitations] or ["- No limitation recorded."]
    lines += ["", "## Composition", "", "| Lane / client | Component | Status | Qualification |", "| --- | --- | --- | --- |"]
    rows = ([comp["ninfer"]] if comp["ninfer"] else []) + comp["ninfer_variants"]
    for row in rows:
        lane_summary = summary["lanes"].get(row["id"], {})
        receipt = lane_summary.get("receipt", {})
        qual = f"receipt {receipt.get('status')} ({_short(receipt.get('sha256'))})" if receipt.get("sha256") else "receipt not bound"
        if row["rebound_from"]:
            qual += f"; rebound unchanged from {row['rebound_from']}"
        lines.append(f"| {row['id']} | {_cell(row['release_tag'])} | {row['status']} | {qual} |")
    for lane_id, deferral in sorted(manifest["qualification"]["deferred_scope"].items()):
        if not any(row["id"] == lane_id for row in rows):
            lines.append(f"| {lane_id} | — | deferred | {deferral['reason']} (keep {deferral['predecessor_release']}) |")
    omp = comp["omp"]
    lines.append(f"| Oh My Pi | unmodified upstream {omp['upstream_tag']} ({_short(omp['upstream_commit'], 8)}) | {'published' if omp['published'] else 'not published'} | {len(omp['platforms'])} platform binaries |")
    model = comp["model"]
    lines += [
        "",
        "## Model",
        "",
        f"- Repository: {model['repository']}",
        f"- Revision: {_cell(model['revision'])}",
        f"- Artifact: {model['artifact_name']}, {_cell(model['artifact_bytes'])} bytes",
        f"- SHA-256: {_cell(model['artifact_sha256'])}",
    ]
    image = comp["ninfer"]["oci_reference"] if comp["ninfer"] else None
    if image:
        lines += ["", "## Container image", "", f"- {image}"]
    blockers = manifest["publication"]["blockers"]
    lines += ["", "## Remaining release gates", ""]
    lines += [f"- {b}" for b in blockers] or ["- None: the release is technically cuttable. Publication is a separate act of the release lead."]
    lines += [
        "",
        "## Verify",
        "",
        "```sh",
        f"python -m pipeline verify --release {release}" + (" --require-ready --check-pins" if manifest["status"] == "ready" else ""),
        "```",
        "",
    ]
    return "\n".join(lines)


def acceptance_subject(manifest: dict[str, Any]) -> dict[str, Any]:
    """The install-relevant identities an acceptance run binds."""
    comp = manifest.get("components") if isinstance(manifest.get("components"), dict) else {}
    omp = comp.get("omp") if isinstance(comp.get("omp"), dict) else {}
    model = comp.get("model") if isinstance(comp.get("model"), dict) else {}
    lanes_out: dict[Any, Any] = {}
    container, *variants = _manifest_rows(manifest)
    for index, row in enumerate(([container] if container else []) + variants):
        if not isinstance(row, dict) or not isinstance(row.get("id"), (str, type(None))):
            # Kept as written, so that a malformed row never compares equal to a well-formed subject.
            lanes_out[f"(row {index})"] = row
            continue
        pkg = "binary_archive" if "binary_archive_sha256" in row else "package"
        lanes_out[row.get("id")] = {
            "release_tag": row.get("release_tag"),
            "package_sha256": row.get(f"{pkg}_sha256"),
            "server_binary_sha256": row.get("server_binary_sha256"),
            "configuration_sha256": row.get("configuration_sha256"),
            "oci_reference": row.get("oci_reference"),
        }
    platforms = omp.get("platforms") if isinstance(omp.get("platforms"), list) else []
    client = {}
    for index, p in enumerate(platforms):
        if isinstance(p, dict) and isinstance(p.get("platform"), (str, type(None))):
            client[p.get("platform")] = p.get("artifact_sha256")
        else:
            client[f"(platform {index})"] = p
    return {
        "client": client,
        "model_sha256": model.get("artifact_sha256"),
        "lanes": lanes_out,
    }


def rel_to_root(root: Path, path: Path) -> str:
    return PurePosixPath(path.resolve().relative_to(root.resolve()).as_posix()).as_posix()
