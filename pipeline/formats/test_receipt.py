"""The test-run receipt: which commit the whole test suite ran on, and how it went.

`nox -s tests` writes one (`<dist>/test-run-receipt.json`, through the pytest
plugin in tests/kits/testreceipt.py) so that the product publication can refuse a
release whose exact commit was not tested, or was tested with failures or with
uncommitted changes.  The document is canonical JSON (sorted keys, LF):

    {"artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 2,
     "commit": <40 hex>, "tree": <40 hex>, "dirty": false,
     "passed": N, "failed": N, "errors": N, "skipped": N, "xfailed": N, "xpassed": N,
     "skipped_tests": [<pytest node id>, ...]}

`commit` and `tree` are `git rev-parse HEAD` and `HEAD^{tree}` of the checkout
the tests ran in; `dirty` is true when `git status --porcelain` listed any
tracked change or untracked, non-ignored file at the start or the end of the
run.  The counts are pytest's own categories (`errors` are setup, teardown and
collection errors); `skipped_tests` names each skipped test (a module skipped at
collection by its own node id), sorted, exactly `skipped` of them.  A receipt is only written for a run of the whole suite
that finished (not interrupted, nothing deselected).  Nothing else is in the
document (no times, no host names), so the same run gives the same bytes.

The product publication reads it with `read_test_receipt` (a missing receipt is
a refusal, exit 7; a malformed one an InputError naming the field) and gates
with `require_green_for`: the same commit and tree as the release being
tagged, a clean tree, zero failures and errors, no skipped test but those
`SKIPS_ALLOWED_FOR_PUBLICATION` names (a skip is a test that did not run: a
plain clone that lacks a tool or test data is not a tested release), at least
one test passed.  Schema 1 did not name its skipped tests: it is refused, and
the suite writes the receipt again.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, RefusedError
from pipeline.util.hashing import is_commit_hex
from pipeline.util.jsonio import canonical_bytes, parse_strict, write_json

ARTIFACT_TYPE = "omp_ninfer_test_run_receipt"
SCHEMA_VERSION = 2  # 2: skipped_tests (schema 1 counted skips without naming them)
RECEIPT_FILE = "test-run-receipt.json"  # inside the output folder (PIPELINE_DIST, default dist)
RECEIPT_NAME = RECEIPT_FILE
ENV_VAR = "PIPELINE_TEST_RECEIPT"  # names the path the pytest plugin writes the receipt to

COUNT_FIELDS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")
FIELDS = ("artifact_type", "schema_version", "commit", "tree", "dirty", *COUNT_FIELDS, "skipped_tests")
MAX_COUNT = 10_000_000  # far above any real suite; a larger number is a corrupt or forged receipt
MAX_SKIPPED_NAMES = 2048  # above the suite's size in skips; with MAX_NODE_ID they bound the document
MAX_NODE_ID = 512  # characters of one pytest node id (path::name[params])
MAX_BYTES = 2 * 1024 * 1024  # the document is about 300 bytes plus its skipped tests' names

# The only tests a run may skip and still count as green for publication, each with the reason it cannot
# run where the suite runs (GitHub Actions).  Everything else that skips (a missing tool, absent test data)
# means that part of the release was not tested.  Keyed by exact pytest node id; the suite checks that each
# names a test that exists (tests/unit/test_test_run_receipt.py).
SKIPS_ALLOWED_FOR_PUBLICATION: dict[str, str] = {
    "tests/integration/test_qualify.py::test_gpu_smoke_gate_runs_the_packaged_selftest_on_a_real_gpu":
        "needs an NVIDIA GPU with a driver, which CI runners lack; the GPU smoke gate runs on the owner's hardware "
        "and its lane receipt is bound into the release",
}


def default_path(dist: str | os.PathLike[str] = "dist") -> Path:
    """Where `nox -s tests` writes the receipt and the publication gate looks for it."""
    return Path(dist) / RECEIPT_FILE


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
    skipped_tests: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped_tests", tuple(self.skipped_tests))
        _check_document(self.to_json(), file=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact_type": ARTIFACT_TYPE,
            "schema_version": SCHEMA_VERSION,
            "commit": self.commit,
            "tree": self.tree,
            "dirty": self.dirty,
            **{name: getattr(self, name) for name in COUNT_FIELDS},
            "skipped_tests": list(self.skipped_tests),
        }

    def to_bytes(self) -> bytes:
        return canonical_bytes(self.to_json())

    @property
    def skips_not_allowed(self) -> list[str]:
        """The skipped tests publication does not allow (SKIPS_ALLOWED_FOR_PUBLICATION), in the receipt's order."""
        return [name for name in self.skipped_tests if name not in SKIPS_ALLOWED_FOR_PUBLICATION]

    @property
    def clean_pass(self) -> bool:
        """No failure, no error, at least one pass, and the tested tree was exactly the commit."""
        return self.failed == 0 and self.errors == 0 and self.passed > 0 and not self.dirty


def _check_document(document: Any, *, file: str | os.PathLike[str] | None) -> None:
    if not isinstance(document, dict):
        raise InputError("must hold a JSON object", file=file, found=type(document).__name__, expected="object")
    if document.get("artifact_type") != ARTIFACT_TYPE:
        raise InputError("is not a test-run receipt", file=file, field="artifact_type",
                         found=document.get("artifact_type"), expected=repr(ARTIFACT_TYPE))
    version = document.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise InputError("has an unsupported schema version", file=file, field="schema_version", found=version,
                         expected=str(SCHEMA_VERSION),
                         fix="write the receipt again with 'nox -s tests' (schema 2 names the skipped tests)")
    unknown = sorted(set(document) - set(FIELDS))
    if unknown:
        raise InputError("has an unknown key", file=file, field=unknown[0], expected="only " + ", ".join(FIELDS))
    # The values present are checked first, so that a bad value is named even when a key is also missing.
    for name in ("commit", "tree"):
        if name in document and not is_commit_hex(document[name]):
            raise InputError("is not a full git object id", file=file, field=name, found=document[name],
                             expected="40 lowercase hex digits (git rev-parse)")
    if "dirty" in document and type(document["dirty"]) is not bool:
        raise InputError("must be true or false", file=file, field="dirty", found=document["dirty"], expected="a boolean")
    for name in COUNT_FIELDS:
        value = document.get(name, 0)
        # bool is an int subclass in Python, and a float 1.0 is not a count.
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            raise InputError("is not a test count", file=file, field=name, found=value,
                             expected=f"an integer from 0 to {MAX_COUNT}")
    if "skipped_tests" in document:
        _check_skipped_tests(document["skipped_tests"], document.get("skipped"), file=file)
    for name in FIELDS:
        if name not in document:
            raise InputError("lacks a required key", file=file, field=name,
                             expected=f"every key of schema {SCHEMA_VERSION}: " + ", ".join(FIELDS),
                             fix="write the receipt again with 'nox -s tests'")


def _check_skipped_tests(names: Any, skipped: Any, *, file: str | os.PathLike[str] | None) -> None:
    """A sorted list of distinct, printable pytest node ids, exactly as many as `skipped` counts."""
    if not isinstance(names, list) or len(names) > MAX_SKIPPED_NAMES:
        raise InputError("is not a list of skipped tests", file=file, field="skipped_tests",
                         found=type(names).__name__ if not isinstance(names, list) else f"{len(names)} names",
                         expected=f"a list of at most {MAX_SKIPPED_NAMES} pytest node ids")
    for name in names:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NODE_ID or not name.isprintable():
            raise InputError("names a skipped test that is not a pytest node id", file=file, field="skipped_tests",
                             found=name if isinstance(name, str) else type(name).__name__,
                             expected=f"printable text of 1 to {MAX_NODE_ID} characters (path::test)")
    if names != sorted(set(names)):
        raise InputError("lists its skipped tests out of order or twice", file=file, field="skipped_tests",
                         expected="each node id once, sorted")
    if type(skipped) is int and len(names) != skipped:
        raise InputError("names another number of skipped tests than it counts", file=file, field="skipped_tests",
                         found=f"{len(names)} names", expected=f"{skipped} (the 'skipped' count)")


def make_test_receipt(*, commit: str, tree: str, passed: int, failed: int, errors: int, skipped_tests: Any = (),
                      dirty: bool = False, xfailed: int = 0, xpassed: int = 0) -> TestRunReceipt:
    """A receipt whose `skipped` count is the number of `skipped_tests` (sorted here)."""
    names = tuple(sorted(skipped_tests))
    return TestRunReceipt(commit=commit, tree=tree, dirty=dirty, passed=passed, failed=failed, errors=errors,
                          skipped=len(names), xfailed=xfailed, xpassed=xpassed, skipped_tests=names)


def parse_test_receipt(data: bytes, *, file: str | os.PathLike[str] = "test-run receipt") -> TestRunReceipt:
    """Strict: bounded size and nesting, no duplicate key, no NaN, no BOM or CR, exactly schema 1's keys."""
    document = parse_strict(data, file=file, max_bytes=MAX_BYTES)
    _check_document(document, file=file)
    return TestRunReceipt(**{name: document[name] for name in FIELDS[2:]})  # skipped_tests becomes a tuple


def read_test_receipt(path: str | os.PathLike[str]) -> TestRunReceipt:
    """Read and validate a receipt: missing is a refusal (exit 7), malformed an InputError naming the field."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise RefusedError(
            "there is no test-run receipt",
            file=path,
            why="the product release is published only after the whole test suite passed on the exact commit being tagged",
            fix="run the README's test command (.nox/nox/bin/nox -s tests) on a clean checkout of that commit (it writes the receipt)",
        ) from None
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


def require_green_for(receipt: TestRunReceipt, *, commit: str, tree: str | None = None,
                      file: str | os.PathLike[str] | None = None) -> None:
    """The publication gate (exit 7): this commit (and tree), a clean tree, no failure or error, no skip but the
    allowed ones, some test passed."""
    fix = "run the README's test command (.nox/nox/bin/nox -s tests) on a clean checkout of the commit being tagged, then publish again"
    if receipt.commit != commit:
        raise RefusedError("the test-run receipt is for another commit", file=file, field="commit",
                           found=receipt.commit, expected=commit, fix=fix)
    if tree is not None and receipt.tree != tree:
        raise RefusedError("the test-run receipt names another tree than the commit's", file=file, field="tree",
                           found=receipt.tree, expected=tree,
                           why="the suite ran on other files than the commit holds, or the receipt was edited", fix=fix)
    if receipt.dirty:
        raise RefusedError("the tests ran on a checkout with uncommitted changes", file=file, field="dirty",
                           found=True, expected="false", fix=fix)
    if receipt.failed or receipt.errors:
        raise RefusedError(
            f"the test run on this commit did not pass ({receipt.failed} failed, {receipt.errors} errors)",
            file=file, field="failed" if receipt.failed else "errors", found=receipt.failed or receipt.errors,
            expected="0", fix="fix the failing tests, commit, and run the suite again",
        )
    not_allowed = receipt.skips_not_allowed
    if not_allowed:
        shown = ", ".join(not_allowed[:5]) + (f" and {len(not_allowed) - 5} more" if len(not_allowed) > 5 else "")
        raise RefusedError(
            f"the test run on this commit skipped {len(not_allowed)} tests that publication does not allow to skip",
            file=file, field="skipped_tests", found=shown,
            expected="only the skips pipeline/formats/test_receipt.py: SKIPS_ALLOWED_FOR_PUBLICATION names",
            why="a skipped test did not run: what it checks is untested on this commit",
            fix="install what each skipped test needs (pytest -ra prints each reason; CI installs every tool), "
                "then run the README's test command (.nox/nox/bin/nox -s tests) again",
        )
    if receipt.passed < 1:
        raise RefusedError("the test run passed no test", file=file, field="passed", found=receipt.passed,
                           expected="at least 1", fix=fix)

