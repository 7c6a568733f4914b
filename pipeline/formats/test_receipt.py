"""The test-run receipt: which commit the whole test suite ran on, and how it went.

`nox -s tests` writes one (`<dist>/test-run-receipt.json`, through the pytest
plugin in tests/testreceipt.py) so that the product publication can refuse a
release whose exact commit was not tested, or was tested with failures or with
uncommitted changes.  The document is canonical JSON (sorted keys, LF):

    {"artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 1,
     "commit": <40 hex>, "tree": <40 hex>, "dirty": false,
     "passed": N, "failed": N, "errors": N, "skipped": N, "xfailed": N, "xpassed": N}

`commit` and `tree` are `git rev-parse HEAD` and `HEAD^{tree}` of the checkout
the tests ran in; `dirty` is true when `git status --porcelain` listed any
tracked change or untracked, non-ignored file at the start or the end of the
run.  The counts are pytest's own categories (`errors` are setup, teardown and
collection errors).  A receipt is only written for a run of the whole suite
that finished (not interrupted, nothing deselected).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EnvironmentProblem, InputError, RefusedError
from ..util.hashing import is_commit_hex
from ..util.jsonio import check_text_hygiene, write_json

ARTIFACT_TYPE = "omp_ninfer_test_run_receipt"
SCHEMA_VERSION = 1
RECEIPT_FILE = "test-run-receipt.json"  # inside the output folder (PIPELINE_DIST, default dist)
ENV_VAR = "PIPELINE_TEST_RECEIPT"  # names the path the pytest plugin writes the receipt to

COUNT_FIELDS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")
FIELDS = ("artifact_type", "schema_version", "commit", "tree", "dirty", *COUNT_FIELDS)
MAX_COUNT = 10**7  # far above any real suite; a larger number is a corrupt or forged receipt
MAX_BYTES = 64 * 1024  # the document is about 300 bytes


@dataclass(frozen=True)
class TestRunReceipt:
    __test__ = False  # not a pytest test class, despite the name

    commit: str
    tree: str
    dirty: bool
    passed: int
    failed: int
    errors: int
    skipped: int
    xfailed: int
    xpassed: int

    def __post_init__(self) -> None:
        _check_document(self._document(), file=None)

    def _document(self) -> dict[str, Any]:
        return {
            "artifact_type": ARTIFACT_TYPE,
            "schema_version": SCHEMA_VERSION,
            "commit": self.commit,
            "tree": self.tree,
            "dirty": self.dirty,
            **{name: getattr(self, name) for name in COUNT_FIELDS},
        }

    def to_json(self) -> dict[str, Any]:
        return self._document()

    @property
    def clean_pass(self) -> bool:
        """No failure, no error, and the tested tree was exactly the commit."""
        return self.failed == 0 and self.errors == 0 and not self.dirty


def _check_document(document: Any, *, file: str | os.PathLike[str] | None) -> None:
    if not isinstance(document, dict):
        raise InputError("must hold a JSON object", file=file, found=type(document).__name__, expected="object")
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise InputError("unknown field", file=file, field=unknown[0], expected="only " + ", ".join(FIELDS))
    for name in FIELDS:
        if name not in document:
            raise InputError("required field is missing", file=file, field=name,
                             fix="write the receipt again with 'nox -s tests'")
    if document["artifact_type"] != ARTIFACT_TYPE:
        raise InputError("is not a test-run receipt", file=file, field="artifact_type",
                         found=document["artifact_type"], expected=repr(ARTIFACT_TYPE))
    version = document["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise InputError("unsupported schema version", file=file, field="schema_version", found=version,
                         expected=str(SCHEMA_VERSION))
    for name in ("commit", "tree"):
        if not is_commit_hex(document[name]):
            raise InputError("must be a full lowercase 40-hex git object id", file=file, field=name,
                             found=document[name], expected="40 hex digits (git rev-parse)")
    if type(document["dirty"]) is not bool:
        raise InputError("must be true or false", file=file, field="dirty", found=document["dirty"], expected="a boolean")
    for name in COUNT_FIELDS:
        value = document[name]
        # bool is an int subclass in Python, and a float 1.0 is not a count.
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            raise InputError("must be a whole number of tests", file=file, field=name, found=value,
                             expected=f"an integer from 0 to {MAX_COUNT}")


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_test_receipt(data: bytes, *, file: str | os.PathLike[str] = "test-run receipt") -> TestRunReceipt:
    if len(data) > MAX_BYTES:
        raise InputError("is too large for a test-run receipt", file=file, found=f"{len(data)} bytes",
                         expected=f"at most {MAX_BYTES} bytes")
    check_text_hygiene(file, data)
    try:
        document = json.loads(data.decode("utf-8"), object_pairs_hook=_reject_duplicates,
                              parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise InputError(f"is not valid UTF-8 ({exc.reason} at byte {exc.start})", file=file) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", file=file) from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"is not acceptable JSON: {exc}", file=file) from None
    _check_document(document, file=file)
    return TestRunReceipt(**{name: document[name] for name in FIELDS[2:]})


def read_test_receipt(path: str | os.PathLike[str]) -> TestRunReceipt:
    """Read and strictly validate a receipt; every problem is an InputError naming the file and field."""
    target = Path(path)
    try:
        with target.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise InputError("file does not exist", file=path,
                         fix="run the whole test suite on this commit with 'nox -s tests' (it writes the receipt)") from None
    except IsADirectoryError:
        raise InputError("is a folder, not a test-run receipt", file=path) from None
    return parse_test_receipt(data, file=path)


def write_test_receipt(path: str | os.PathLike[str], receipt: TestRunReceipt) -> bytes:
    """Write the receipt atomically as canonical JSON; returns the bytes written."""
    return write_json(path, receipt.to_json())


def repo_state(root: str | os.PathLike[str]) -> tuple[str, str, bool]:
    """(commit, tree, dirty) of the git checkout at `root`, as the receipt records them."""

    def git(*args: str) -> str:
        try:
            result = subprocess.run(["git", "-C", os.fspath(root), *args], capture_output=True, text=True,
                                    timeout=60, check=False)
        except FileNotFoundError:
            raise EnvironmentProblem("the tool 'git' is not on PATH", why="the test-run receipt names the tested commit",
                                     fix="install git (Debian: apt-get install git)") from None
        if result.returncode != 0:
            raise EnvironmentProblem(f"git {' '.join(args)} failed in {root}: {result.stderr.strip()}",
                                     why="a test-run receipt can only be written for a git checkout",
                                     fix="run the tests in a clone of the repository")
        return result.stdout

    commit = git("rev-parse", "--verify", "HEAD^{commit}").strip()
    tree = git("rev-parse", "--verify", "HEAD^{tree}").strip()
    dirty = bool(git("status", "--porcelain=v1", "--untracked-files=normal").strip())
    return commit, tree, dirty


def require_clean_pass(receipt: TestRunReceipt, commit: str, *, file: str | os.PathLike[str] | None = None) -> None:
    """The publication gate: the receipt names `commit`, with no failure or error, on a clean tree (exit 7)."""
    fix = "run 'nox -s tests' on a clean checkout of exactly this commit and use the receipt it writes"
    if receipt.commit != commit:
        raise RefusedError("the test-run receipt is for another commit", file=file, field="commit",
                           found=receipt.commit, expected=commit, fix=fix)
    if receipt.dirty:
        raise RefusedError("the tests ran on a tree with uncommitted changes", file=file, field="dirty",
                           found=True, expected="false", fix=fix)
    for name in ("failed", "errors"):
        if getattr(receipt, name):
            raise RefusedError(f"the test run had {getattr(receipt, name)} {name}", file=file, field=name,
                               found=getattr(receipt, name), expected="0",
                               fix="fix the failing tests, commit, and run 'nox -s tests' again")
