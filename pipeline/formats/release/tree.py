"""Reading a composed release tree as data, for the tools that report on it (`status`, `diff`).

verify reads a tree to judge it and records every problem; these readers are for a tree
that is only shown or compared, so the first unreadable document is an InputError naming
the file, except the review ledger: the councils' hand-written record, kept as data
(`reviews_problem`) when it cannot be read, so status and diff still show the tree.  Each document is hashed before it is parsed, read bounded and strictly (duplicate
keys, NaN and deep nesting refused) and must hold its own type string; a link is refused
(nothing outside the folder is read because a name says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError
from pipeline.formats.release.manifest import ReleaseManifest, parse_manifest
from pipeline.formats.release.names import (
    AUTHORITY,
    AUTHORITY_TYPE,
    EXTERNAL_INSTALL,
    MANIFEST,
    PINS,
    REVIEWS,
    REVIEWS_SUBJECT,
    SUMMARY,
    SUMMARY_TYPE,
)
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import MAX_DOCUMENT_BYTES, loads_document

# The documents a tree may hold beside its manifest (which its owner reads: formats/release/manifest.py).
BOUND_DOCUMENTS = ((SUMMARY, SUMMARY_TYPE), (AUTHORITY, AUTHORITY_TYPE))


@dataclass(frozen=True)
class TreeDocuments:
    folder: str  # as given, for messages
    manifest: ReleaseManifest
    summary: dict[str, Any] | None  # qualification.json (None: not in the tree)
    authority: dict[str, Any] | None  # compatibility.json
    sha256: dict[str, str]  # file name -> SHA-256 of the bytes parsed
    reviews: dict[str, Any] | None = None  # the review ledger's facts (formats/review_ledger.py: ledger_facts), when the tree holds one
    reviews_problem: str | None = None  # why the tree's review ledger cannot be read (file, field, fix), shown as data


def read_tree_document(path: Path, artifact_type: str, *, shown: str | None = None) -> tuple[dict[str, Any], str]:
    """(document, SHA-256 of its bytes) of one JSON document of a tree; InputError naming the file."""
    shown = shown or str(path)
    data = _tree_file_bytes(path, shown)
    digest = sha256_bytes(data)
    return parse_tree_document(data, artifact_type, shown=shown), digest


def _tree_file_bytes(path: Path, shown: str) -> bytes:
    if path.is_symlink() or not path.is_file():
        raise InputError("is not a plain file of the release tree", file=shown, expected=f"the tree's {path.name} (compose writes it)")
    return read_bytes_bounded(path, MAX_DOCUMENT_BYTES, what="release tree document")


def parse_tree_document(data: bytes, artifact_type: str, *, shown: str) -> dict[str, Any]:
    document = loads_document(data, source=shown)
    if not isinstance(document, dict) or document.get("artifact_type") != artifact_type:
        found = document.get("artifact_type") if isinstance(document, dict) else type(document).__name__
        raise InputError("is not the release tree document it is named as", file=shown, field="artifact_type", found=found, expected=artifact_type)
    return document


def read_tree(folder: Path, *, shown: str | None = None) -> TreeDocuments:
    """The manifest (required) and the qualification summary and compatibility authority (if present) of a tree folder."""
    shown = shown or str(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise InputError("is not a release tree folder", file=shown, expected=f"a folder holding {MANIFEST} (manifests/vX.Y.Z)")
    manifest_shown = f"{shown.rstrip('/')}/{MANIFEST}"
    manifest = parse_manifest(_tree_file_bytes(folder / MANIFEST, manifest_shown), source=manifest_shown, max_bytes=MAX_DOCUMENT_BYTES)
    found: dict[str, dict[str, Any] | None] = {}
    digests = {MANIFEST: manifest.sha256}
    for name, artifact_type in BOUND_DOCUMENTS:
        path = folder / name
        if not path.exists() and not path.is_symlink():
            found[name] = None
            continue
        found[name], digests[name] = read_tree_document(path, artifact_type, shown=f"{shown.rstrip('/')}/{name}")
    reviews, problem = _read_tree_ledger(folder, str(manifest.release), shown=f"{shown.rstrip('/')}/{REVIEWS}")
    if reviews is not None:
        digests[REVIEWS] = reviews["sha256"]
    return TreeDocuments(shown, manifest, found[SUMMARY], found[AUTHORITY], digests, reviews, problem)


def _read_tree_ledger(folder: Path, release: str, *, shown: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the ledger's facts, None), (None, why it cannot be read) or (None, None) when the tree holds none.

    A defective ledger is the councils' work in progress, not a defect of the tree being shown: it is kept
    as data (compose makes it a blocker; status and diff show it) so the rest of the tree can still be read.
    A release made before the ledger (names.py: PRE_REVIEW_LEDGER_RELEASES) reads no ledger at all."""
    from pipeline.errors import PipelineError
    from pipeline.formats.release.names import review_ledger_required
    from pipeline.formats.review_ledger import MAX_LEDGER_BYTES, ledger_facts, parse_ledger

    ledger_file = folder / REVIEWS
    if not review_ledger_required(release) or not (ledger_file.exists() or ledger_file.is_symlink()):
        return None, None
    try:
        if ledger_file.is_symlink() or not ledger_file.is_file():
            raise InputError("is not a plain file of the release tree", file=shown, expected="the tree's review ledger", fix="replace it by the file itself")
        data = read_bytes_bounded(ledger_file, MAX_LEDGER_BYTES, what="the review ledger")
        return ledger_facts(parse_ledger(data, release=release, file=shown)), None
    except PipelineError as error:
        fix = "" if error.fix else f" Fix: correct it (docs/review-ledger.md), then python -m pipeline compose rebind --release {release}."
        return None, error.render() + fix


_ROW_SUBJECT = re.compile(r"components\.ninfer_variants\[(?P<lane>[a-z0-9-]+)\]|components\.ninfer\b")


def blocker_fix(blocker: str, release: str, *, manual: bool, container_lane: str | None = None) -> str:
    """The one command that clears a blocker '<subject>: <reason>' (docs/RELEASING.md's order of work)."""
    subject = blocker.split(": ", 1)[0]
    compose = f"python -m pipeline compose --release {release}"
    if subject == PINS:
        return f"python -m pipeline compose rebind --release {release} --pin HEAD"
    if subject == REVIEWS_SUBJECT:
        return f"record the councils' reviews and dispositions in manifests/{release}/{REVIEWS} (docs/review-ledger.md), then python -m pipeline compose rebind --release {release}"
    if subject in (EXTERNAL_INSTALL, "acceptance"):
        return f"python -m pipeline compose accept --release {release} --record FILE (after the documented routes passed on the candidate)"
    if manual:
        return f"resolve it, then remove it from blockers in manifests/{release}/release.toml and run {compose}"
    row = _ROW_SUBJECT.match(subject)
    lane = (row.group("lane") or container_lane) if row else None
    if lane and subject.endswith(".qualification"):
        return f"python -m pipeline qualify --lane {lane} --import RECEIPT, then {compose}"
    if subject.startswith("components."):
        return f"set the value in manifests/{release}/release.toml (or the lane's evidence in the register), then {compose}"
    return compose
