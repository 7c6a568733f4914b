"""The test-run receipt: what `nox -s tests` ran, on which exact commit, with what result.

    {"artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 1,
     "commit": <40 hex>, "tree": <40 hex>,
     "passed": N, "failed": N, "errors": N, "skipped": N}

`commit` is the commit the suite ran on and `tree` its git tree id (a clean
checkout: the tree is what the tests saw).  The producer (`nox -s tests`)
writes it with `write_test_receipt` to `<dist>/test-run-receipt.json`; the
product publication gate reads it with `read_test_receipt` and checks it with
`require_green_for`: the same commit and tree as the release being tagged,
zero failures, zero errors, at least one test passed.  Nothing else is in the
document: no times, no host names, so the same run gives the same bytes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import InputError, RefusedError
from ..util.hashing import is_commit_hex
from ..util.jsonio import canonical_bytes, parse_strict, write_json

ARTIFACT_TYPE = "omp_ninfer_test_run_receipt"
SCHEMA_VERSION = 1
RECEIPT_NAME = "test-run-receipt.json"
COUNTS = ("passed", "failed", "errors", "skipped")
MAX_COUNT = 10_000_000  # far above any real suite; anything larger is not a count
MAX_BYTES = 64 * 1024
KEYS = frozenset({"artifact_type", "schema_version", "commit", "tree", *COUNTS})


def default_path(dist: str | os.PathLike[str] = "dist") -> Path:
    """Where the producer writes the receipt and the publication gate looks for it."""
    return Path(dist) / RECEIPT_NAME


@dataclass(frozen=True)
class TestRunReceipt:
    __test__ = False  # not a pytest test class, despite the name

    commit: str
    tree: str
    passed: int
    failed: int
    errors: int
    skipped: int

    def to_json(self) -> dict[str, object]:
        return {"artifact_type": ARTIFACT_TYPE, "schema_version": SCHEMA_VERSION, **asdict(self)}

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.to_json())


def _check(receipt: TestRunReceipt, file: str) -> TestRunReceipt:
    for name in ("commit", "tree"):
        value = getattr(receipt, name)
        if not is_commit_hex(value):
            raise InputError("is not a full git object id", file=file, field=name, found=value, expected="40 lowercase hex digits")
    for name in COUNTS:
        value = getattr(receipt, name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
            raise InputError("is not a test count", file=file, field=name, found=value, expected=f"an integer 0..{MAX_COUNT}")
    return receipt


def make_test_receipt(*, commit: str, tree: str, passed: int, failed: int, errors: int, skipped: int) -> TestRunReceipt:
    return _check(TestRunReceipt(commit, tree, passed, failed, errors, skipped), file="test-run receipt")


def write_test_receipt(path: str | os.PathLike[str], receipt: TestRunReceipt) -> bytes:
    """Write the receipt atomically (canonical JSON, sorted keys, LF) and return its bytes."""
    _check(receipt, file=str(path))
    return write_json(path, receipt.to_json())


def parse_test_receipt(data: bytes, *, file: str | os.PathLike[str]) -> TestRunReceipt:
    name = str(file)
    doc = parse_strict(data, file=name, max_bytes=MAX_BYTES)
    if not isinstance(doc, dict):
        raise InputError("must hold a JSON object", file=name, found=type(doc).__name__, expected="object")
    if doc.get("artifact_type") != ARTIFACT_TYPE:
        raise InputError("is not a test-run receipt", file=name, field="artifact_type", found=doc.get("artifact_type"), expected=ARTIFACT_TYPE)
    if doc.get("schema_version") != SCHEMA_VERSION or isinstance(doc.get("schema_version"), bool):
        raise InputError("has an unsupported schema version", file=name, field="schema_version", found=doc.get("schema_version"), expected=SCHEMA_VERSION)
    unknown = sorted(set(doc) - KEYS)
    if unknown:
        raise InputError("has an unknown key", file=name, field=unknown[0], expected="only " + ", ".join(sorted(KEYS)))
    missing = sorted(KEYS - set(doc))
    if missing:
        raise InputError("lacks a required key", file=name, field=missing[0], expected="every key of schema 1: " + ", ".join(sorted(KEYS)))
    return _check(TestRunReceipt(**{k: doc[k] for k in ("commit", "tree", *COUNTS)}), file=name)


def read_test_receipt(path: str | os.PathLike[str]) -> TestRunReceipt:
    file = Path(path)
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        raise RefusedError(
            "there is no test-run receipt",
            file=file,
            why="the product release is published only after the full test suite passed on the exact commit being tagged",
            fix="run 'python3 -m nox -s tests' on a clean checkout of that commit (it writes the receipt)",
        ) from None
    if size > MAX_BYTES:
        raise InputError("is too large to be a test-run receipt", file=file, found=f"{size} bytes", expected=f"at most {MAX_BYTES} bytes")
    return parse_test_receipt(file.read_bytes(), file=file)


def require_green_for(receipt: TestRunReceipt, *, commit: str, tree: str, file: str | os.PathLike[str]) -> None:
    """Refuse (exit 7) unless the receipt is a passing run of exactly this commit and tree."""
    fix = "run 'python3 -m nox -s tests' on a clean checkout of the commit being tagged, then publish again"
    if receipt.commit != commit:
        raise RefusedError("the test-run receipt is for another commit", file=file, field="commit", found=receipt.commit, expected=commit, fix=fix)
    if receipt.tree != tree:
        raise RefusedError(
            "the test-run receipt names another tree than the commit's",
            file=file,
            field="tree",
            found=receipt.tree,
            expected=tree,
            why="the suite ran on other files than the commit holds (a dirty checkout, or an edited receipt)",
            fix=fix,
        )
    if receipt.failed or receipt.errors:
        raise RefusedError(
            f"the test run on this commit did not pass ({receipt.failed} failed, {receipt.errors} errors)",
            file=file,
            field="failed" if receipt.failed else "errors",
            found=receipt.failed or receipt.errors,
            expected=0,
            fix="fix the failing tests, commit, and run the suite again",
        )
    if receipt.passed < 1:
        raise RefusedError("the test run passed no test", file=file, field="passed", found=receipt.passed, expected="at least 1", fix=fix)
