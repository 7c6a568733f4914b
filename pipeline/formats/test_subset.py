"""A declared test subset: `tests/subsets/<name>.txt`, the only part of the suite a test run may select and still
write a test-run receipt (pipeline/formats/test_receipt.py records it as the run's `selection`).

Why it exists: the release workflow's `tests` job runs the whole suite, and the suite holds the release workflow's
rehearsal (tests/integration/test_rehearse_release.py).  The rehearsal inside the suite must not run the whole suite
inside itself again, so it sets `PIPELINE_TEST_SUBSET=<name>` for the jobs it runs; `nox -s tests` then runs exactly
the subset's entries, and the receipt says so by the subset's name and the SHA-256 of its file.  `publish --release`
refuses such a receipt anywhere but the rehearsal's stand-in world (docs/RELEASING.md, "Rehearse before you tag").

The file (UTF-8, LF, at most MAX_BYTES, hashed before it is parsed):

    # a comment; blank lines are ignored
    tests/unit/test_a.py
    tests/unit/test_b.py::test_one

Each entry is a test file under `tests/`, or a node id in one (`path::name`), relative to the repository root:
no `..`, no absolute path, no whitespace, each once.  The file of every entry must exist.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InputError
from pipeline.util.hashing import sha256_bytes

ENV_VAR = "PIPELINE_TEST_SUBSET"  # names the declared subset a test run selects (unset: the whole suite)
FOLDER = Path("tests") / "subsets"
SUFFIX = ".txt"
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,39}")
ENTRY_RE = re.compile(r"tests/(?:[A-Za-z0-9_.-]+/)*test_[A-Za-z0-9_]+\.py(?:::[A-Za-z0-9_\[\]:.,=-]+)?")
MAX_BYTES = 64 * 1024
MAX_ENTRIES = 512


@dataclass(frozen=True)
class TestSubset:
    __test__ = False  # not a pytest test class, despite the name

    name: str
    sha256: str  # of the file's raw bytes
    entries: tuple[str, ...]

    @property
    def path(self) -> Path:
        """The file, relative to the repository root."""
        return subset_path(self.name)


def subset_path(name: str) -> Path:
    """`tests/subsets/<name>.txt` for a name of the allowed grammar (never a path of the caller's choosing)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InputError("is not a declared test subset's name", field=ENV_VAR, found=name,
                         expected=f"lowercase letters, digits and '-' ({NAME_RE.pattern}), the name of a file in {FOLDER}/",
                         fix=f"unset {ENV_VAR} to run the whole suite, or name a subset declared in {FOLDER}/")
    return FOLDER / f"{name}{SUFFIX}"


def declared_subsets(root: str | os.PathLike[str]) -> list[str]:
    """The names of the subsets declared in the repository at `root`, sorted."""
    folder = Path(root) / FOLDER
    if not folder.is_dir():
        return []
    return sorted(path.name[: -len(SUFFIX)] for path in folder.iterdir()
                  if path.name.endswith(SUFFIX) and NAME_RE.fullmatch(path.name[: -len(SUFFIX)]))


def read_subset(root: str | os.PathLike[str], name: str) -> TestSubset:
    """The declared subset `name` of the repository at `root`: read bounded, hashed, then parsed and checked."""
    relative = subset_path(name)
    path = Path(root) / relative
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        declared = ", ".join(declared_subsets(root)) or "none"
        raise InputError("names no declared test subset", file=relative, field=ENV_VAR, found=name,
                         expected=f"one of: {declared}", fix=f"declare it in {relative}, or unset {ENV_VAR}") from None
    except IsADirectoryError:
        raise InputError("is a folder, not a test subset", file=relative) from None
    if len(data) > MAX_BYTES:
        raise InputError("is too large for a test subset", file=relative, found=f"more than {MAX_BYTES} bytes",
                         expected=f"at most {MAX_BYTES} bytes")
    digest = sha256_bytes(data)
    return TestSubset(name=name, sha256=digest, entries=parse_entries(data, file=relative, root=Path(root)))


def parse_entries(data: bytes, *, file: str | os.PathLike[str], root: Path | None = None) -> tuple[str, ...]:
    """The entries of a subset file, in the file's order; `root` given: each entry's file must exist there."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as problem:
        raise InputError("is not UTF-8", file=file, found=f"byte {problem.start}", expected="UTF-8 text") from None
    if "\r" in text or text.startswith("\ufeff"):
        raise InputError("has a CR or a byte-order mark", file=file, expected="UTF-8 text with LF line ends")
    entries: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        if not ENTRY_RE.fullmatch(entry) or ".." in entry.split("::", 1)[0].split("/"):
            raise InputError(f"line {number} is not a test file or node id under tests/", file=file, found=entry[:200],
                             expected="tests/<folder>/test_<name>.py or tests/<folder>/test_<name>.py::<test>")
        if entry in entries:
            raise InputError(f"line {number} names an entry twice", file=file, found=entry, expected="each entry once")
        if root is not None and not (root / entry.split("::", 1)[0]).is_file():
            raise InputError(f"line {number} names a test file that does not exist", file=file, found=entry,
                             fix="correct the path, or remove the line")
        entries.append(entry)
    if not entries:
        raise InputError("declares no test", file=file, expected="at least one test file or node id")
    if len(entries) > MAX_ENTRIES:
        raise InputError("declares too many entries", file=file, found=len(entries), expected=f"at most {MAX_ENTRIES}")
    return tuple(entries)
