"""The cut ledger: every component cut of one lane, as data (`runtime/cuts/<lane-id>.json`).

A cut is one `beta.N` of a lane's component version: the tag, the full source
commit, the SHA-256 of the lane file and the digest of the lane's toolchain
lock entry it was cut with, and its state -- `cut` (recorded, not yet
published), `published` (a prerelease of the runtime repository holds it),
`superseded` (published, then replaced by a later cut: reason and successor
recorded).  A tag or asset is never deleted or moved, so N is never reused.

    {"artifact_type": "omp_ninfer_cut_ledger", "schema_version": 1, "lane": "<lane id>",
     "cuts": [{"version", "n", "tag", "state", "origin", "source_commit", "lane_file_sha256",
               "toolchain_lock_sha256", "unknown", "publication", "superseded_by", "reason"}...],
     "external": [{"version", "n", "tag", "seen"}...]}

`origin` is `cut` for a cut recorded by `python -m pipeline cut` (every
binding present) or `record` for history entered from published release
notes, where a fact the notes do not state is null and `unknown` says why (a
hash prefix is never a value).  `external` holds numbers used outside this
ledger (a tag on GitHub or in a checkout, or history the repository knows
nothing else about): they count for N, so no number is ever reused, and they
close what would otherwise be a gap.

The loader refuses: an unknown or missing key, N < 1, a tag that is not the
lane's pattern for (version, N) (so `beta.0` and `beta.01` cannot appear), a
duplicate, a gap (for each version, cuts and external numbers together are
exactly 1..max), unsorted entries, a state without its record (a superseded
cut without reason or a later successor), and a cut made by the pipeline with
a missing binding.  `check_append_only` refuses a new ledger that drops or
changes an entry of the old one or moves a state backwards.  The file is
canonical JSON (sorted keys, LF), so it diffs and hashes stably.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, RefusedError
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import canonical_bytes, parse_strict

ARTIFACT_TYPE = "omp_ninfer_cut_ledger"
SCHEMA_VERSION = 1
STATES = ("cut", "published", "superseded")
ORIGINS = ("cut", "record")
SEEN = ("github-release", "github-tag", "checkout-tag", "history")
# Beta numbers: the component's beta.N; 0 or a negative number is never a cut.  One range: a lane renders its
# names (pipeline/formats/lanes.py) for every N a ledger may hold, and only those.
MIN_BETA = 1
MAX_BETA = 99999
MAX_BYTES = 4 * 1024 * 1024
VERSION_RE = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
BINDINGS = ("source_commit", "lane_file_sha256", "toolchain_lock_sha256")
CUT_KEYS = frozenset({"version", "n", "tag", "state", "origin", *BINDINGS, "unknown", "publication", "superseded_by", "reason"})
PUBLICATION_KEYS = frozenset({"repository", "release_id", "plan_sha256", "receipt_sha256"})
EXTERNAL_KEYS = frozenset({"version", "n", "tag", "seen"})
TOP_KEYS = frozenset({"artifact_type", "schema_version", "lane", "cuts", "external"})

TagFor = Callable[[str, int], str]


def version_key(version: str) -> tuple[int, int, int]:
    match = VERSION_RE.fullmatch(version)
    assert match, version
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


@dataclass(frozen=True)
class Publication:
    repository: str  # owner/name
    release_id: int
    plan_sha256: str
    receipt_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "release_id": self.release_id, "plan_sha256": self.plan_sha256, "receipt_sha256": self.receipt_sha256}


@dataclass(frozen=True)
class Cut:
    version: str
    n: int
    tag: str
    state: str
    origin: str
    source_commit: str | None
    lane_file_sha256: str | None
    toolchain_lock_sha256: str | None
    unknown: dict[str, str] = field(default_factory=dict)
    publication: Publication | None = None
    superseded_by: int | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "n": self.n,
            "tag": self.tag,
            "state": self.state,
            "origin": self.origin,
            "source_commit": self.source_commit,
            "lane_file_sha256": self.lane_file_sha256,
            "toolchain_lock_sha256": self.toolchain_lock_sha256,
            "unknown": dict(sorted(self.unknown.items())),
            "publication": self.publication.to_json() if self.publication else None,
            "superseded_by": self.superseded_by,
            "reason": self.reason,
        }

    def binding(self) -> tuple[Any, ...]:
        """What a cut is: never changes once recorded."""
        return (self.version, self.n, self.tag, self.origin, self.source_commit, self.lane_file_sha256, self.toolchain_lock_sha256, tuple(sorted(self.unknown.items())))


@dataclass(frozen=True)
class External:
    version: str
    n: int
    tag: str
    seen: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "n": self.n, "tag": self.tag, "seen": self.seen}


@dataclass(frozen=True)
class Ledger:
    lane: str
    cuts: tuple[Cut, ...] = ()
    external: tuple[External, ...] = ()

    # -- questions ---------------------------------------------------------
    def used(self, version: str) -> set[int]:
        return {c.n for c in self.cuts if c.version == version} | {e.n for e in self.external if e.version == version}

    def highest(self, version: str) -> int:
        return max(self.used(version), default=0)

    def entry(self, version: str, n: int) -> Cut | None:
        for cut in self.cuts:
            if cut.version == version and cut.n == n:
                return cut
        return None

    def current(self, version: str) -> Cut | None:
        """The lane's current cut of `version`: the highest N that is cut or published."""
        live = [c for c in self.cuts if c.version == version and c.state in ("cut", "published")]
        return max(live, key=lambda c: c.n) if live else None

    # -- new ledgers (the old one is never edited in place) ------------------
    def _sorted(self, cuts: list[Cut], external: list[External]) -> Ledger:
        return Ledger(
            self.lane,
            tuple(sorted(cuts, key=lambda c: (version_key(c.version), c.n))),
            tuple(sorted(external, key=lambda e: (version_key(e.version), e.n))),
        )

    def with_external(self, items: list[External]) -> Ledger:
        known = {(e.version, e.n) for e in self.external} | {(c.version, c.n) for c in self.cuts}
        new = [e for e in items if (e.version, e.n) not in known]
        return self._sorted(list(self.cuts), [*self.external, *new])

    def with_cut(self, cut: Cut) -> Ledger:
        return self._sorted([*self.cuts, cut], list(self.external))

    def with_state(self, version: str, n: int, **changes: Any) -> Ledger:
        cuts = [replace(c, **changes) if (c.version, c.n) == (version, n) else c for c in self.cuts]
        return self._sorted(cuts, list(self.external))

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact_type": ARTIFACT_TYPE,
            "schema_version": SCHEMA_VERSION,
            "lane": self.lane,
            "cuts": [c.to_json() for c in self.cuts],
            "external": [e.to_json() for e in self.external],
        }

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.to_json())

    @property
    def digest(self) -> str:
        return sha256_bytes(self.to_bytes())


# -- reading ------------------------------------------------------------------

def _keys(obj: Any, keys: frozenset[str], *, file: str, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InputError("must be a JSON object", file=file, field=where or None, found=type(obj).__name__, expected="object")
    unknown = sorted(set(obj) - keys)
    if unknown:
        raise InputError("unknown key", file=file, field=f"{where}.{unknown[0]}" if where else unknown[0], expected="one of " + ", ".join(sorted(keys)))
    missing = sorted(keys - set(obj))
    if missing:
        raise InputError("required key is missing", file=file, field=f"{where}.{missing[0]}" if where else missing[0])
    return obj


def _int(value: Any, *, file: str, field: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InputError("is not a valid number here", file=file, field=field, found=value, expected=f"an integer {low}..{high}")
    return value


def _check_tag(tag: Any, version: str, n: int, tag_for: TagFor | None, *, file: str, field: str) -> str:
    if not isinstance(tag, str):
        raise InputError("has the wrong type", file=file, field=field, found=tag, expected="a string")
    if re.search(r"beta\.0", tag):
        raise InputError(
            "names a beta number with a leading zero or beta.0",
            file=file,
            field=field,
            found=tag,
            expected=f"beta.{n}",
            why="component numbers count from 1 without leading zeros, so a number has exactly one tag",
        )
    if tag_for is not None and tag != tag_for(version, n):
        raise InputError("is not the lane's tag for this version and number", file=file, field=field, found=tag, expected=tag_for(version, n))
    return tag


def _parse_cut(raw: Any, index: int, tag_for: TagFor | None, file: str) -> Cut:
    where = f"cuts[{index}]"
    obj = _keys(raw, CUT_KEYS, file=file, where=where)
    version = obj["version"]
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise InputError("is not a component version", file=file, field=f"{where}.version", found=version, expected="'X.Y.Z' without leading zeros")
    n = _int(obj["n"], file=file, field=f"{where}.n", low=MIN_BETA, high=MAX_BETA)
    tag = _check_tag(obj["tag"], version, n, tag_for, file=file, field=f"{where}.tag")
    state = obj["state"]
    if state not in STATES:
        raise InputError("is not a cut state", file=file, field=f"{where}.state", found=state, expected=" | ".join(STATES))
    origin = obj["origin"]
    if origin not in ORIGINS:
        raise InputError("is not a cut origin", file=file, field=f"{where}.origin", found=origin, expected=" | ".join(ORIGINS))
    unknown = obj["unknown"]
    if not isinstance(unknown, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in unknown.items()):
        raise InputError("must map field names to reasons", file=file, field=f"{where}.unknown", found=unknown, expected="{field: non-empty reason}")
    checks = {"source_commit": is_commit_hex, "lane_file_sha256": is_sha256_hex, "toolchain_lock_sha256": is_sha256_hex}
    for name in BINDINGS:
        value = obj[name]
        if value is None:
            if origin == "cut":
                raise InputError(
                    "is null in a cut the pipeline recorded",
                    file=file,
                    field=f"{where}.{name}",
                    expected="a full hash: 'python -m pipeline cut' binds every fact",
                )
            if name not in unknown:
                raise InputError("is null without a reason", file=file, field=f"{where}.{name}", fix=f"say why in {where}.unknown.{name}, or record the full value")
        elif not checks[name](value):
            raise InputError("is not a full lowercase hex hash", file=file, field=f"{where}.{name}", found=value, expected="40 hex (commit) or 64 hex (SHA-256); a prefix is never a value")
    for name in unknown:
        if name not in BINDINGS or obj.get(name) is not None:
            raise InputError("names a field that is not null", file=file, field=f"{where}.unknown.{name}", expected="only null fields among " + ", ".join(BINDINGS))
    publication = None
    if obj["publication"] is not None:
        pub = _keys(obj["publication"], PUBLICATION_KEYS, file=file, where=f"{where}.publication")
        if not isinstance(pub["repository"], str) or not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", pub["repository"]):
            raise InputError("is not owner/name", file=file, field=f"{where}.publication.repository", found=pub["repository"])
        release_id = _int(pub["release_id"], file=file, field=f"{where}.publication.release_id", low=1, high=2**53)
        for key in ("plan_sha256", "receipt_sha256"):
            if not is_sha256_hex(pub[key]):
                raise InputError("is not a SHA-256", file=file, field=f"{where}.publication.{key}", found=pub[key])
        publication = Publication(pub["repository"], release_id, pub["plan_sha256"], pub["receipt_sha256"])
    successor, reason = obj["superseded_by"], obj["reason"]
    if state == "cut" and publication is not None:
        raise InputError("records a publication for a cut that is not published", file=file, field=f"{where}.publication", expected="null while state is 'cut'")
    if state != "cut" and origin == "cut" and publication is None:
        raise InputError(f"is {state} but records no publication", file=file, field=f"{where}.publication", why="the publish stage records its receipt when it publishes a cut")
    if state == "superseded":
        successor = _int(successor, file=file, field=f"{where}.superseded_by", low=n + 1, high=MAX_BETA)
        if not isinstance(reason, str) or not reason.strip():
            raise InputError("a superseded cut needs its reason", file=file, field=f"{where}.reason", found=reason, expected="a non-empty text")
    elif successor is not None or reason is not None:
        raise InputError("only a superseded cut has a successor and a reason", file=file, field=f"{where}.superseded_by", found=successor, expected="null")
    return Cut(version, n, tag, state, origin, obj["source_commit"], obj["lane_file_sha256"], obj["toolchain_lock_sha256"], dict(unknown), publication, successor, reason)


def _parse_external(raw: Any, index: int, tag_for: TagFor | None, file: str) -> External:
    where = f"external[{index}]"
    obj = _keys(raw, EXTERNAL_KEYS, file=file, where=where)
    version = obj["version"]
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise InputError("is not a component version", file=file, field=f"{where}.version", found=version)
    n = _int(obj["n"], file=file, field=f"{where}.n", low=MIN_BETA, high=MAX_BETA)
    tag = _check_tag(obj["tag"], version, n, tag_for, file=file, field=f"{where}.tag")
    if not isinstance(obj["seen"], str) or obj["seen"].split(":", 1)[0] not in SEEN:
        raise InputError("does not say where the number was seen", file=file, field=f"{where}.seen", found=obj["seen"], expected="'<" + "|".join(SEEN) + ">: <detail>'")
    return External(version, n, tag, obj["seen"])


def parse_ledger(data: bytes, *, file: str | os.PathLike[str], lane: str, tag_for: TagFor | None = None) -> Ledger:
    name = str(file)
    doc = _keys(parse_strict(data, file=name, max_bytes=MAX_BYTES), TOP_KEYS, file=name, where="")
    if doc["artifact_type"] != ARTIFACT_TYPE:
        raise InputError("is not a cut ledger", file=name, field="artifact_type", found=doc["artifact_type"], expected=ARTIFACT_TYPE)
    if doc["schema_version"] != SCHEMA_VERSION or isinstance(doc["schema_version"], bool):
        raise InputError("has an unsupported schema version", file=name, field="schema_version", found=doc["schema_version"], expected=SCHEMA_VERSION)
    if doc["lane"] != lane:
        raise InputError("is the ledger of another lane", file=name, field="lane", found=doc["lane"], expected=lane)
    for key in ("cuts", "external"):
        if not isinstance(doc[key], list):
            raise InputError("must be a list", file=name, field=key, found=type(doc[key]).__name__)
    cuts = [_parse_cut(raw, i, tag_for, name) for i, raw in enumerate(doc["cuts"])]
    external = [_parse_external(raw, i, tag_for, name) for i, raw in enumerate(doc["external"])]
    for key, items in (("cuts", cuts), ("external", external)):
        order = [(version_key(x.version), x.n) for x in items]
        for i in range(1, len(order)):
            if order[i] == order[i - 1]:
                raise InputError("holds the same version and number twice", file=name, field=f"{key}[{i}]", found=items[i].tag, why="a number names exactly one cut")
            if order[i] < order[i - 1]:
                raise InputError("is not sorted by version, then number", file=name, field=f"{key}[{i}]", found=items[i].tag, expected=f"after {items[i - 1].tag}")
    ledger = Ledger(lane, tuple(cuts), tuple(external))
    for version in sorted({c.version for c in cuts} | {e.version for e in external}, key=version_key):
        mine = [c.n for c in cuts if c.version == version]
        theirs = [e.n for e in external if e.version == version]
        both = sorted(set(mine) & set(theirs))
        if both:
            raise InputError("a number is both a cut and an external number", file=name, field="external", found=f"{version} beta.{both[0]}")
        used = set(mine) | set(theirs)
        missing = sorted(set(range(1, max(used) + 1)) - used)
        if missing:
            raise InputError(
                f"version {version} has a gap in its numbers",
                file=name,
                field="cuts",
                found=f"no entry for beta.{missing[0]}",
                expected=f"every number 1..{max(used)} recorded, as a cut or an external number",
                why="numbers are handed out one after another by 'python -m pipeline cut'; a gap means an entry was removed or added by hand",
            )
        for cut in (c for c in cuts if c.version == version and c.state == "superseded"):
            if ledger.entry(version, cut.superseded_by or 0) is None:
                raise InputError("names a successor that is not a cut of this ledger", file=name, field=f"cuts[{cuts.index(cut)}].superseded_by", found=cut.superseded_by)
    return ledger


def ledger_path(cuts_dir: Path, lane: str) -> Path:
    return cuts_dir / f"{lane}.json"


def load_ledger(cuts_dir: Path, lane: str, *, tag_for: TagFor | None = None) -> Ledger:
    """The lane's ledger; an absent file is an empty ledger (a lane never cut)."""
    path = ledger_path(cuts_dir, lane)
    if not path.exists():
        return Ledger(lane)
    if path.stat().st_size > MAX_BYTES:
        raise InputError("is too large to be a cut ledger", file=path, found=f"{path.stat().st_size} bytes", expected=f"at most {MAX_BYTES}")
    return parse_ledger(path.read_bytes(), file=path, lane=lane, tag_for=tag_for)


# -- writing ----------------------------------------------------------------------

_RANK = {state: rank for rank, state in enumerate(STATES)}


def check_append_only(old: Ledger, new: Ledger, *, file: str | os.PathLike[str]) -> None:
    """Refuse a new ledger that forgets, rewrites or moves back anything the old one recorded."""
    for cut in old.cuts:
        now = new.entry(cut.version, cut.n)
        if now is None:
            raise RefusedError("would remove a recorded cut", file=file, field=cut.tag, why="the ledger is append-only: a number once used stays recorded")
        if now.binding() != cut.binding():
            raise RefusedError("would change what a recorded cut binds", file=file, field=cut.tag, found=now.binding(), expected=cut.binding(), why="a cut's commit, lane file and toolchain lock are fixed when it is cut")
        if _RANK[now.state] < _RANK[cut.state]:
            raise RefusedError("would move a cut's state backwards", file=file, field=f"{cut.tag}.state", found=now.state, expected=f"{cut.state} or later")
        if cut.publication is not None and now.publication != cut.publication:
            raise RefusedError("would change a recorded publication", file=file, field=f"{cut.tag}.publication")
        if cut.state == "superseded" and (now.superseded_by, now.reason) != (cut.superseded_by, cut.reason):
            raise RefusedError("would change why or by what a cut was superseded", file=file, field=f"{cut.tag}.superseded_by")
    for ext in old.external:
        if ext not in new.external:
            raise RefusedError("would remove an external number", file=file, field=ext.tag, why="a number seen anywhere is never handed out again")


def write_ledger(cuts_dir: Path, ledger: Ledger, *, tag_for: TagFor | None = None) -> Path:
    """Write the ledger atomically after checking it against what is on disk (append-only)."""
    path = ledger_path(cuts_dir, ledger.lane)
    data = ledger.to_bytes()
    parse_ledger(data, file=path, lane=ledger.lane, tag_for=tag_for)  # never write what the loader would refuse
    old = load_ledger(cuts_dir, ledger.lane, tag_for=tag_for)
    check_append_only(old, ledger, file=path)
    atomic_write_bytes(path, data)
    return path
