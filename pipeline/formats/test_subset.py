"""A declared test subset: `tests/subsets/<name>.txt`, the only part of the suite a test run may select and still
write a test-run receipt (pipeline/formats/test_receipt.py records it as the run's `selection`).

Why it exists: the release workflow's `tests` job runs the whole suite, and the suite holds the release workflow's
rehearsal (tests/integration/test_rehearse_release.py).  The rehearsal inside the suite must not run the whole suite
inside itself again, so it sets `PIPELINE_TEST_SUBSET=<name>` for the jobs it runs; `nox -s tests` then runs exactly
the subset's entries, and the receipt says so by the subset's name and the SHA-256 of its file.  `publish --release`
refuses such a receipt anywhere but the rehearsal's stand-in world: this process tree's Sigstore test stand-in in force
and a loopback GitHub API (pipeline/stages/publish/product.py `subset_allowance`; docs/RELEASING.md, "Rehearse before you tag").

The file (UTF-8, LF, at most MAX_BYTES, hashed before it is parsed):

    # a comment; blank lines are ignored
    tests/unit/test_a.py
    tests/unit/test_b.py::test_one

Each entry is a test file under `tests/`, or a node id in one (`path::name`), relative to the repository root:
no `..`, no absolute path, no whitespace, each once (the path rule is pipeline/util/safepath.py's `safe_relpath`).
Read from a checkout, the file of every entry must exist and resolve under the checkout's `tests/`, symbolic links
followed (`within`): `tests/unit -> /tmp/outside` is refused.

`publish --release` checks a subset receipt's name and SHA-256 against the subset file at the published commit
(`require_declared_at`), so a receipt cannot name a subset the commit does not declare, or other bytes than it holds.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InputError
from pipeline.util.hashing import sha256_bytes
from pipeline.util.safepath import relpath_problem, safe_relative, within

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
    path = safe_relative(relative.as_posix(), root, file=relative, field=ENV_VAR, what="the repository")
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


def require_declared_at(name: str, sha256: str, data: bytes | None, *, where: str) -> TestSubset:
    """The subset `name` as the file `data` (tests/subsets/<name>.txt `where`, e.g. at a commit; None: absent there)
    declares it, when its SHA-256 is `sha256`: what a test-run receipt names must be what the commit declares."""
    relative = subset_path(name)
    if data is None:
        raise InputError(f"is not declared {where}", file=relative, field="selection.name", found=name,
                         expected=f"a file {relative} {where}",
                         fix=f"unset {ENV_VAR} and run the whole suite, or commit the subset and run it again")
    if len(data) > MAX_BYTES:
        raise InputError("is too large for a test subset", file=relative, found=f"{len(data)} bytes", expected=f"at most {MAX_BYTES} bytes")
    digest = sha256_bytes(data)  # hashed before it is parsed
    if digest != sha256:
        raise InputError(f"has another SHA-256 than the subset file declared {where}", file=relative, field="selection.sha256", found=sha256,
                         expected=f"{digest} (the SHA-256 of {relative} {where})",
                         why="the tests ran another list of tests than the commit declares under that name",
                         fix=f"unset {ENV_VAR} and run the whole suite on a clean checkout of the commit")
    return TestSubset(name=name, sha256=digest, entries=parse_entries(data, file=f"{relative} {where}"))


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
        expected = "tests/<folder>/test_<name>.py or tests/<folder>/test_<name>.py::<test>"
        test_file = entry.split("::", 1)[0]
        problem = None if ENTRY_RE.fullmatch(entry) else "not of that form"
        problem = problem or relpath_problem(test_file)  # the repository's one rule for a relative path from data
        if problem is not None:
            raise InputError(f"line {number} is not a test file or node id under tests/ ({problem})", file=file,
                             found=entry[:200], expected=expected)
        if entry in entries:
            raise InputError(f"line {number} names an entry twice", file=file, found=entry, expected="each entry once")
        if root is not None:
            _require_test_file(root, test_file, file=file, line=number)
        entries.append(entry)
    if not entries:
        raise InputError("declares no test", file=file, expected="at least one test file or node id")
    if len(entries) > MAX_ENTRIES:
        raise InputError("declares too many entries", file=file, found=len(entries), expected=f"at most {MAX_ENTRIES}")
    return tuple(entries)


def _require_test_file(root: Path, test_file: str, *, file: str | os.PathLike[str], line: int) -> None:
    """`test_file` is a file of the checkout at `root` that resolves under its `tests/`, symbolic links followed."""
    path = root / test_file
    if not within(path, root / "tests") or not within(root / "tests", root):
        raise InputError(f"line {line} resolves outside tests/ through a symbolic link", file=file, found=test_file,
                         expected="a file that resolves under the checkout's tests/", fix="name the test file itself, not a path through a link")
    if not path.is_file():
        raise InputError(f"line {line} names a test file that does not exist", file=file, found=test_file,
                         fix="correct the path, or remove the line")
