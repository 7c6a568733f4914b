"""The state of a download fetched as parallel ranges: which bytes of its `.part` have arrived.

`<file>.part.ranges` beside the preallocated `<file>.part` (`pipeline.infra.ranges`),
type `omp_ninfer_range_download_state`: the pinned size and SHA-256 of the file
(`sha256` null when the caller pins none) and the byte intervals `[start, end)`
written so far, sorted, disjoint and merged.  It is written (atomically) before
the `.part` is preallocated and after every piece, so a `.part` without one is
the contiguous prefix of the single-stream download.

Written only by replacing it atomically (a link planted in its place is
replaced, never written through).  Read as hostile input: one name only (a
hard link is refused), bounded in size, strict JSON, every interval inside the
pinned size and in order, and bound to the same pin; anything else is an
InputError and the caller starts the file over (it never trusts bytes a state
file it cannot check vouches for).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InputError
from pipeline.util.hashing import is_sha256_hex
from pipeline.util.jsonio import expect_document_type, expect_list, read_json_object, write_json

STATE_TYPE = "omp_ninfer_range_download_state"
SCHEMA_VERSION = 1
SUFFIX = ".ranges"
MAX_STATE_BYTES = 1 << 20  # ~40,000 intervals; a real state holds at most one per piece
KEYS = {"artifact_type", "schema_version", "size", "sha256", "received"}
FIX = "nothing to do: the download starts this file over (delete the .part and .part.ranges files to be sure)"


@dataclass(frozen=True)
class RangeState:
    size: int
    sha256: str | None
    received: tuple[tuple[int, int], ...]  # [start, end) byte intervals, sorted, disjoint, merged

    def to_json(self) -> dict:
        return {
            "artifact_type": STATE_TYPE,
            "schema_version": SCHEMA_VERSION,
            "size": self.size,
            "sha256": self.sha256,
            "received": [[start, end] for start, end in self.received],
        }


def state_path(part: Path) -> Path:
    return part.with_name(part.name + SUFFIX)


def write_state(path: Path, state: RangeState) -> None:
    write_json(path, state.to_json(), indent=None)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_state(path: Path, *, size: int, sha256: str | None) -> RangeState | None:
    """The state beside a `.part`, checked against the pin; None when there is none."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_file():
        raise InputError("the range state is not a regular file", file=path, fix=FIX)
    if path.lstat().st_nlink > 1:
        # A state is only ever written by replacing it (a file of one name): a second name is planted.
        raise InputError("the range state has another name (a hard link)", file=path, field="st_nlink", found=path.lstat().st_nlink, expected=1, fix=FIX)
    document = expect_document_type(read_json_object(path, max_bytes=MAX_STATE_BYTES), STATE_TYPE, SCHEMA_VERSION, source=path, what="range download state", fix=FIX)
    if set(document) != KEYS:
        raise InputError("the range state has unexpected fields", file=path, found=sorted(set(document) ^ KEYS), expected=sorted(KEYS), fix=FIX)
    if document["size"] != size or not _count(document["size"]):
        raise InputError("the range state belongs to a file of another size", file=path, field="size", found=document["size"], expected=size, fix=FIX)
    recorded = document["sha256"]
    if recorded != sha256 or (recorded is not None and not is_sha256_hex(recorded)):
        raise InputError("the range state belongs to another file", file=path, field="sha256", found=recorded, expected=sha256, fix=FIX)
    received: list[tuple[int, int]] = []
    for index, interval in enumerate(expect_list(document["received"], source=path, field="received", fix=FIX)):
        where = f"received[{index}]"
        if not (isinstance(interval, list) and len(interval) == 2 and all(_count(n) for n in interval)):
            raise InputError("a received interval is not a pair of byte offsets", file=path, field=where, found=interval, expected="[start, end]", fix=FIX)
        start, end = interval
        previous_end = received[-1][1] if received else -1
        if not (previous_end < start < end <= size):
            raise InputError(
                "the received intervals are not sorted, disjoint and inside the file",
                file=path,
                field=where,
                found=interval,
                expected=f"start > {previous_end}, start < end <= {size}",
                fix=FIX,
            )
        received.append((start, end))
    return RangeState(size, sha256, tuple(received))
