"""`manifests/<release>/release.toml`: the one hand-written input of a release tree.

`load_release_toml` reads and checks it key by key (docs/release-tree.md,
"release.toml"), raising an InputError that names the key; `dump_toml` writes
the subset of TOML it uses (for `compose stage`, which starts a release from
its predecessor's input).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.lanes import Lane
from pipeline.formats.release.names import RELEASE_RE, RELEASE_TOML, repo_path, sort_release_key
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.safepath import safe_relative
from pipeline.util.schema import Field, matches, one_of, read_table

LANE_STATUSES = ("qualified", "preview", "blocked", "unsupported")
SHIPPED = ("qualified", "preview")
CHANNELS = {("public", "public"), ("early-access", "invited-testers")}
LANE_MODES = ("register", "predecessor", "pins")

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
    "acceptance": Field(dict, required=False),
    "reviews": Field(dict, required=False),
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
_REVIEWS = {
    "councils": Field(list, items=str, expected="the councils whose review the ledger must record, e.g. [\"native-runtime\", \"product-tooling\"]"),
}
_ROUTE_DOCUMENT = r"(?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.md"
_ACCEPTANCE = {
    "document": Field(str, required=False, default="docs/QUICKSTART.md", check=lambda v: bool(re.fullmatch(_ROUTE_DOCUMENT, v)) and ".." not in v.split("/"), expected="a repository-relative Markdown path such as docs/QUICKSTART.md"),
    "routes": Field(dict),
}
_ACCEPTANCE_ROUTE = {
    "host": Field(str, expected="a host kind (pipeline/formats/acceptance.py HOST_KINDS), e.g. linux-x86_64-nvidia"),
    "lane": Field(str, required=False),
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
    # [acceptance]: the route document and the routes the release requires, each with its host kind
    acceptance: dict[str, Any] | None = None
    # [reviews] councils: the councils whose review the ledger must record (docs/review-ledger.md)
    review_councils: tuple[str, ...] = ()


def load_release_toml(root: Path, release: str, lanes: dict[str, Lane]) -> ReleaseInput:
    """Read and check `manifests/<release>/release.toml`; raises InputError naming the key."""
    from pipeline.util.fs import read_bytes_bounded
    from pipeline.util.jsonio import MAX_TOML_BYTES, loads_toml

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
            raise InputError("a shipped pins-mode lane needs its component tag", file=file, field=f"{prefix}.release_tag", expected=f"e.g. {lanes[lane_id].tag(lanes[lane_id].beta or 1)!r}")
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
    acceptance = _read_acceptance(top["acceptance"], file, lanes, lane_inputs) if top["acceptance"] is not None else None
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
        acceptance=acceptance,
        review_councils=_read_review_councils(top["reviews"], file, release) if top["reviews"] is not None else (),
    )


def _read_review_councils(table: Any, file: str, release: str) -> tuple[str, ...]:
    """[reviews] councils = [...]: the councils the release's review ledger must hold (docs/review-ledger.md)."""
    from pipeline.formats.release.names import review_ledger_required
    from pipeline.formats.review_ledger import COUNCIL_RE, MAX_REVIEWS

    if not review_ledger_required(release):
        raise InputError("a release made before the review ledger requires no councils", file=file, field="reviews", fix="remove the [reviews] table")
    councils = read_table(table, _REVIEWS, file=file, prefix="reviews")["councils"]
    if not councils or len(councils) > MAX_REVIEWS or len(set(councils)) != len(councils):
        raise InputError("must name each required council once", file=file, field="reviews.councils", found=councils, expected=f"1-{MAX_REVIEWS} distinct council names")
    for index, council in enumerate(councils):
        if not re.fullmatch(COUNCIL_RE, council):
            raise InputError("is not a council name", file=file, field=f"reviews.councils[{index}]", found=council, expected=f"lower-case letters, digits and '-' ({COUNCIL_RE})")
    return tuple(sorted(councils))


def _read_acceptance(table: Any, file: str, lanes: dict[str, Lane], lane_inputs: dict[str, LaneInput]) -> dict[str, Any]:
    """[acceptance]: the routes a release requires (docs/release-tree.md, Documented routes)."""
    from pipeline.formats.acceptance import HOST_KINDS

    values = read_table(table, _ACCEPTANCE, file=file, prefix="acceptance")
    if not values["routes"]:
        raise InputError("declares no route", file=file, field="acceptance.routes", expected="[acceptance.routes.<route id>] tables")
    routes: dict[str, dict[str, Any]] = {}
    for route_id in sorted(values["routes"]):
        prefix = f"acceptance.routes.{route_id}"
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}", route_id):
            raise InputError("is not a route id", file=file, field=prefix, found=route_id, expected="lower-case letters, digits and '-' (the id in '## Route `<id>`: ...')")
        entry = read_table(values["routes"][route_id], _ACCEPTANCE_ROUTE, file=file, prefix=prefix)
        if entry["host"] not in HOST_KINDS:
            raise InputError("names an unknown host kind", file=file, field=f"{prefix}.host", found=entry["host"], expected="one of " + ", ".join(HOST_KINDS))
        lane = entry["lane"]
        if lane is not None and (lane not in lanes or lane not in lane_inputs):
            raise InputError("names a lane the release does not have", file=file, field=f"{prefix}.lane", found=lane, expected="one of " + ", ".join(sorted(lane_inputs)))
        routes[route_id] = {"host": entry["host"], "lane": lane}
    return {"document": values["document"], "routes": routes}


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

