"""The test-run receipt: which commit the whole test suite ran on, and how it went.

`nox -s tests` writes one (`<dist>/test-run-receipt.json`, through the pytest
plugin in tests/kits/testreceipt.py) so that the product publication can refuse a
release whose exact commit was not tested, or was tested with failures or with
uncommitted changes.  The document is canonical JSON (sorted keys, LF):

    {"artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 3,
     "commit": <40 hex>, "tree": <40 hex>, "dirty": false,
     "passed": N, "failed": N, "errors": N, "skipped": N, "xfailed": N, "xpassed": N,
     "skipped_tests": [<pytest node id>, ...],
     "selection": {"kind": "full"}
               or {"kind": "subset", "name": <subset name>, "sha256": <64 hex of tests/subsets/<name>.txt>}}

`commit` and `tree` are `git rev-parse HEAD` and `HEAD^{tree}` of the checkout
the tests ran in; `dirty` is true when `git status --porcelain` listed any
tracked change or untracked, non-ignored file at the start or the end of the
run.  The counts are pytest's own categories (`errors` are setup, teardown and
collection errors); `skipped_tests` names each skipped test (a module skipped at
collection by its own node id), sorted, exactly `skipped` of them.  A receipt is only written for a run
that finished (not interrupted, nothing deselected) of the whole suite, or of exactly one declared subset
(`PIPELINE_TEST_SUBSET`, pipeline/formats/test_subset.py): `selection` says which, a subset by its name and the
SHA-256 of its file.  Nothing else is in the document (no times, no host names), so the same run gives the same bytes.

The product publication reads it with `read_test_receipt` (a missing receipt is
a refusal, exit 7; a malformed one an InputError naming the field) and gates
with `require_green_for`: the same commit and tree as the release being
tagged, a clean tree, zero failures and errors, no skipped test but those
`SKIPS_ALLOWED_FOR_PUBLICATION` names (a skip is a test that did not run: a
plain clone that lacks a tool or test data is not a tested release), at least
one test passed, and the whole suite: a subset's receipt (the release workflow's
rehearsal runs the `tests` job on a declared subset, so that the suite does not run
itself inside its own rehearsal) passes only where the caller says why a subset may
(publish: only against a loopback GitHub API, the rehearsal's stand-in world).
Schema 2 had no `selection` and was written only for a run of the whole suite: it
is read as `full`.  Schema 1 did not name its skipped tests: it is refused, and the
suite writes the receipt again.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, RefusedError
from pipeline.formats.test_subset import NAME_RE
from pipeline.util.hashing import is_commit_hex, is_sha256_hex
from pipeline.util.jsonio import canonical_bytes, parse_strict, write_json

ARTIFACT_TYPE = "omp_ninfer_test_run_receipt"
SCHEMA_VERSION = 3  # 3: selection (whole suite or a declared subset); 2: skipped_tests (schema 1 counted skips without naming them)
READABLE_VERSIONS = (2, 3)  # a schema 2 receipt was written only for a run of the whole suite: its selection is full
RECEIPT_FILE = "test-run-receipt.json"  # inside the output folder (PIPELINE_DIST, default dist)
RECEIPT_NAME = RECEIPT_FILE
ENV_VAR = "PIPELINE_TEST_RECEIPT"  # names the path the pytest plugin writes the receipt to

COUNT_FIELDS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")
FIELDS_V2 = ("artifact_type", "schema_version", "commit", "tree", "dirty", *COUNT_FIELDS, "skipped_tests")
FIELDS = (*FIELDS_V2, "selection")
FULL = "full"
SUBSET = "subset"
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


@dataclass(frozen=True)
class Selection:
    """What the run selected: the whole suite, or one declared subset by name and the SHA-256 of its file."""

    kind: str = FULL
    name: str | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        check_selection(self.to_json(), file=None)

    @property
    def is_full(self) -> bool:
        return self.kind == FULL

    def describe(self) -> str:
        return "the whole suite" if self.is_full else f"the declared subset {self.name!r} (sha256 {self.sha256})"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind} if self.kind == FULL else {"kind": self.kind, "name": self.name, "sha256": self.sha256}


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
    selection: Selection = field(default_factory=Selection)

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
            "selection": self.selection.to_json(),
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
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise InputError("has an unsupported schema version", file=file, field="schema_version", found=version,
                         expected=" or ".join(map(str, READABLE_VERSIONS)),
                         fix="write the receipt again with 'nox -s tests' (schema 2 and later name the skipped tests)")
    fields = FIELDS if version == 3 else FIELDS_V2
    unknown = sorted(set(document) - set(fields))
    if unknown:
        raise InputError("has an unknown key", file=file, field=unknown[0],
                         expected=f"only the keys of schema {version}: " + ", ".join(fields))
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
    if "selection" in document:
        check_selection(document["selection"], file=file)
    for name in fields:
        if name not in document:
            raise InputError("lacks a required key", file=file, field=name,
                             expected=f"every key of schema {version}: " + ", ".join(fields),
                             fix="write the receipt again with 'nox -s tests'")


def check_selection(selection: Any, *, file: str | os.PathLike[str] | None) -> None:
    """{"kind": "full"}, or {"kind": "subset", "name": <subset name>, "sha256": <64 hex>}: nothing else."""
    expected = '{"kind": "full"} or {"kind": "subset", "name": NAME, "sha256": 64 hex}'
    if not isinstance(selection, dict) or selection.get("kind") not in (FULL, SUBSET):
        found = selection.get("kind") if isinstance(selection, dict) else type(selection).__name__
        raise InputError("is not a test selection", file=file, field="selection", found=found, expected=expected)
    keys = ("kind",) if selection["kind"] == FULL else ("kind", "name", "sha256")
    if sorted(selection) != sorted(keys):
        raise InputError(f"has other keys than a {selection['kind']} selection", file=file, field="selection",
                         found=", ".join(sorted(map(str, selection))), expected=", ".join(keys))
    if selection["kind"] == SUBSET:
        if not isinstance(selection["name"], str) or not NAME_RE.fullmatch(selection["name"]):
            raise InputError("is not a declared subset's name", file=file, field="selection.name",
                             found=selection["name"], expected=NAME_RE.pattern)
        if not is_sha256_hex(selection["sha256"]):
            raise InputError("is not a SHA-256", file=file, field="selection.sha256", found=selection["sha256"],
                             expected="64 lowercase hex digits (of tests/subsets/<name>.txt)")


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
                      dirty: bool = False, xfailed: int = 0, xpassed: int = 0,
                      selection: Selection | None = None) -> TestRunReceipt:
    """A receipt whose `skipped` count is the number of `skipped_tests` (sorted here); the whole suite unless `selection`."""
    names = tuple(sorted(skipped_tests))
    return TestRunReceipt(commit=commit, tree=tree, dirty=dirty, passed=passed, failed=failed, errors=errors,
                          skipped=len(names), xfailed=xfailed, xpassed=xpassed, skipped_tests=names,
                          selection=selection or Selection())


def parse_test_receipt(data: bytes, *, file: str | os.PathLike[str] = "test-run receipt") -> TestRunReceipt:
    """Strict: bounded size and nesting, no duplicate key, no NaN, no BOM or CR, exactly the keys of its schema (2 or 3)."""
    document = parse_strict(data, file=file, max_bytes=MAX_BYTES)
    _check_document(document, file=file)
    selection = document.get("selection", {"kind": FULL})  # schema 2: written only for the whole suite
    return TestRunReceipt(**{name: document[name] for name in FIELDS_V2[2:]},  # skipped_tests becomes a tuple
                          selection=Selection(selection["kind"], selection.get("name"), selection.get("sha256")))


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
                      file: str | os.PathLike[str] | None = None, subset_allowed: str | None = None) -> None:
    """The publication gate (exit 7): this commit (and tree), the whole suite, a clean tree, no failure or error, no
    skip but the allowed ones, some test passed.  `subset_allowed` is why a declared subset's receipt may pass here
    (the caller's reason, e.g. the rehearsal's stand-in world); without one a subset is refused."""
    fix = "run the README's test command (.nox/nox/bin/nox -s tests) on a clean checkout of the commit being tagged, then publish again"
    if not receipt.selection.is_full and not subset_allowed:
        raise RefusedError(
            f"the test-run receipt is of {receipt.selection.describe()}, not of the whole suite",
            file=file, field="selection", found=receipt.selection.kind, expected=FULL,
            why="a subset receipt is what the release workflow's rehearsal writes (its `tests` job runs a declared subset, "
                "PIPELINE_TEST_SUBSET); a release is published only after the whole suite passed on its commit",
            fix=f"unset PIPELINE_TEST_SUBSET and {fix[0].lower()}{fix[1:]}",
        )
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

