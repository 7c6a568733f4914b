"""What an audit works on and reports: a manifest's bindings, the fetched files, the items and the report."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.util import ui
from pipeline.util.hashing import is_sha256_hex

# Caps of what is fetched without a pinned size (a hostile server cannot fill memory or disk).
MAX_RELEASE_MANIFEST_BYTES = 4 * 1024 * 1024  # the release manifest
MAX_SIGNED_FILE_BYTES = 4 * 1024 * 1024  # a signed record of the release tree
MAX_BUNDLE_BYTES = 1024 * 1024  # a Sigstore bundle (a few KiB in practice)
MAX_RECORD_BYTES = 4 * 1024 * 1024  # a hash-pinned record without a recorded size
MAX_UNSIZED_ASSET_BYTES = 64 * 1024**3  # a hash-pinned asset whose size the manifest does not record
MAX_API_ANSWER_BYTES = 64 * 1024  # one answer of GitHub's REST API (a git ref or tag object: under 2 KiB)
GITHUB_API = "https://api.github.com"
REPO_PATH = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass
class Binding:
    """One URL / SHA-256 (/ bytes) triple of the manifest, and where it must live."""

    label: str  # what the output line calls it
    field: str  # manifest field path of the URL
    url: Any
    sha256: Any
    size: Any = None
    expected_prefix: str | None = None  # the URL must be exactly expected_prefix + name
    name: str | None = None
    kind: str = "asset"  # asset | record | set-file
    group: str | None = None  # lane id for set files
    role: str | None = None
    location_error: str | None = None
    sha_field: str | None = None  # manifest field path of the SHA-256

    @property
    def cache_name(self) -> str:
        base = (self.name if isinstance(self.name, str) else None) or url_file_name(self.url) or "download"
        if self.kind == "record" and is_sha256_hex(self.sha256):
            return f"{self.sha256[:16]}-{base}"  # records of different lanes may share a file name
        return base


@dataclass
class Item:
    name: str
    ok: bool | None  # None: skipped (allowed by a flag)
    reason: str = ""
    kind: str = "asset"
    details: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One line whatever the data in it (`ui.printable`: no control character from a manifest or a server)."""
        if self.ok is None:
            return ui.printable(f"SKIP: {self.name}: {self.reason}")
        if self.ok:
            return ui.printable(f"OK: {self.name}" + (f" ({self.reason})" if self.reason else ""))
        return ui.printable(f"FAIL: {self.name}: {self.reason}")

    def to_json(self) -> dict[str, Any]:
        return {"item": self.name, "kind": self.kind, "result": {True: "ok", False: "fail", None: "skip"}[self.ok], "reason": self.reason, **self.details}


@dataclass
class AuditReport:
    manifest: str
    release: str | None = None
    status: str | None = None
    items: list[Item] = field(default_factory=list)
    bytes_downloaded: int = 0
    download_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def failed(self) -> list[Item]:
        return [item for item in self.items if item.ok is False]

    @property
    def passed(self) -> bool:
        return bool(self.items) and not self.failed

    def verdict(self) -> str:
        ok = sum(1 for i in self.items if i.ok)
        skipped = sum(1 for i in self.items if i.ok is None)
        rate = ui.human_bytes(self.bytes_downloaded / self.download_seconds) + "/s" if self.download_seconds > 0 else "-"
        tail = f"{ui.human_bytes(self.bytes_downloaded)} downloaded in {self.download_seconds:.1f} s ({rate}), audit took {self.seconds:.1f} s"
        extra = f", {skipped} skipped" if skipped else ""
        if self.passed:
            return f"AUDIT PASSED: {word(self.release)}: all {ok} items OK{extra}; {tail}"
        return f"AUDIT FAILED: {word(self.release)}: {len(self.failed)} of {len(self.items)} items failed{extra}; {tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "release": self.release,
            "status": self.status,
            "passed": self.passed,
            "verdict": self.verdict(),
            "items": [item.to_json() for item in self.items],
            "failed": len(self.failed),
            "bytes_downloaded": self.bytes_downloaded,
            "download_seconds": round(self.download_seconds, 3),
            "seconds": round(self.seconds, 3),
        }


@dataclass
class Fetched:
    binding: Binding
    path: Path | None
    sha256: str | None
    size: int | None
    error: str | None = None
    resumed_at: tuple[int, ...] = ()
    late: bool = False  # the error is a deadline that passed (never a SKIP, whatever the flags)


def url_file_name(url: Any) -> str | None:
    """The last path segment of a URL from the manifest; None when it is no URL (or not a string)."""
    if not isinstance(url, str):
        return None
    try:
        return Path(urlsplit(url).path).name or None
    except ValueError:  # an unbalanced '[' of an IPv6 host: the location check reports it
        return None


def word(value: Any) -> str:
    """A manifest value shown in a line: as it is when it is a bare word (a release name, a status), else quoted."""
    return value if isinstance(value, str) and BARE_NAME.fullmatch(value) else ui.quoted(value)



class Refused(Exception):
    """Why an audit item cannot be decided from the data it needs (the message is the item's reason)."""
