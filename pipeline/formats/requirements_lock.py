"""Hash-locked requirements files (`requirements/release.txt`, `requirements/auditor.txt`), as `nox -s lock` writes them.

The format is pip's requirements syntax in the one shape uv's `pip compile --generate-hashes` writes:
each entry `name==version[ ; marker]` followed by its `--hash=sha256:<64 hex>` continuation lines,
comments (`#`, the `# via` notes) and blank lines between.  `pip install --require-hashes` refuses
any other bytes; this reader refuses any other shape (an entry without a hash, a range instead of
`==`, an option line, a name twice), so what it accepts is what pip would install exactly.
Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.errors import InputError

MAX_LOCK_BYTES = 2 * 1024 * 1024
# A PEP 503 name (ending in a letter or digit), `==` and a version, then at most a PEP 508 marker: names, quoted
# values, comparison operators, `and`/`or`, parentheses.  Never a `-`/`--` word: pip reads `--hash=`/`--config-settings=`
# anywhere on the line as options, so a marker that could hold one would smuggle a hash this reader never records.
_ENTRY = re.compile(r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9A-Za-z.!+_-]+)(?:\s*;\s*([A-Za-z0-9_.'\"<>=!~ ()]+?))?\s*\\")
_HASH = re.compile(r"\s+--hash=sha256:([0-9a-f]{64})(\s*\\)?")


def normalise_name(name: str) -> str:
    """PEP 503: runs of `-`, `_`, `.` are one `-`, case folded (`Tree_Sitter` is `tree-sitter`)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LockedDistribution:
    name: str  # normalised
    version: str
    marker: str | None  # the environment marker uv kept (`--universal`), verbatim
    sha256: tuple[str, ...]  # every file PyPI has for this version


@dataclass(frozen=True)
class RequirementsLock:
    file: str
    entries: dict[str, LockedDistribution]  # normalised name -> entry

    def version_of(self, name: str) -> str | None:
        entry = self.entries.get(normalise_name(name))
        return entry.version if entry is not None else None


def parse_lock(data: bytes, *, file: str) -> RequirementsLock:
    """The lock's entries; an InputError naming the line for anything pip would not install exactly."""
    if len(data) > MAX_LOCK_BYTES:
        raise InputError("is larger than a requirements lock can be", file=file, found=f"{len(data)} bytes",
                         expected=f"at most {MAX_LOCK_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("is not UTF-8", file=file) from None
    entries: dict[str, LockedDistribution] = {}
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        entry = _ENTRY.fullmatch(line)
        if entry is None:
            raise InputError("holds a line that is not a pinned, hashed requirement", file=file, field=f"line {index}",
                             found=line[:120], expected="name==version [; marker] \\ followed by --hash=sha256:... lines",
                             fix="write the lock with 'nox -s lock' only")
        hashes: list[str] = []
        continued = True  # the entry line ends in a backslash: its hashes follow
        while continued and index < len(lines) and (found := _HASH.fullmatch(lines[index])):
            hashes.append(found.group(1))
            continued = bool(found.group(2))
            index += 1
        if not hashes or continued:
            raise InputError("names a requirement without its SHA-256 hashes", file=file, field=f"line {index}",
                             found=line[:120], expected="one or more --hash=sha256:<64 hex> lines, the last without a backslash",
                             fix="write the lock with 'nox -s lock' (uv pip compile --generate-hashes)")
        name = normalise_name(entry.group(1))
        if name in entries:
            raise InputError("names a distribution twice", file=file, field=name, found=[entries[name].version, entry.group(2)])
        entries[name] = LockedDistribution(name, entry.group(2), entry.group(3), tuple(hashes))
    if not entries:
        raise InputError("pins no distribution", file=file, fix="write the lock with 'nox -s lock'")
    return RequirementsLock(file, entries)
