"""The test-run receipt: its strict format, the publication gate on it, and the pytest plugin that writes it.

The plugin is exercised on a small suite of its own in a throw-away git repository, run by a real pytest
in a subprocess, so the counts, the commit, the tree and the dirty flag can be checked against git and
against outcomes chosen here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from repokit import KITS, git, make_repo

from pipeline.errors import InputError, RefusedError
from pipeline.formats import test_subset
from pipeline.formats.test_receipt import (
    ENV_VAR,
    SKIPS_ALLOWED_FOR_PUBLICATION,
    Selection,
    TestRunReceipt,
    default_path,
    make_test_receipt,
    parse_test_receipt,
    read_test_receipt,
    repo_state,
    require_green_for,
    write_test_receipt,
)
from pipeline.util.jsonio import canonical_bytes

COMMIT = "a" * 40
TREE = "b" * 40
GPU_TEST = "tests/integration/test_qualify.py::test_gpu_smoke_gate_runs_the_packaged_selftest_on_a_real_gpu"


def good_document(**changes):
    document = {
        "artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 3, "commit": COMMIT, "tree": TREE,
        "dirty": False, "passed": 10, "failed": 0, "errors": 0, "skipped": 1, "xfailed": 1, "xpassed": 0,
        "skipped_tests": [GPU_TEST], "selection": {"kind": "full"},
    }
    document.update(changes)
    return document


def test_round_trip_is_canonical_json(tmp_path):
    receipt = parse_test_receipt(canonical_bytes(good_document()))
    path = tmp_path / "r.json"
    data = write_test_receipt(path, receipt)
    assert path.read_bytes() == data == canonical_bytes(good_document())
    assert data.endswith(b"}\n") and b"\r" not in data
    assert list(json.loads(data)) == sorted(json.loads(data))
    assert read_test_receipt(path) == receipt
    assert receipt.clean_pass


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"artifact_type": "omp_ninfer_lane_receipt"}, "artifact_type"),
        ({"schema_version": 1}, "schema_version"),
        ({"schema_version": 4}, "schema_version"),
        ({"schema_version": 2}, "selection"),  # schema 2 had no selection: the key is unknown there
        ({"selection": "full"}, "selection"),
        ({"selection": {"kind": "some"}}, "selection"),
        ({"selection": {"kind": "full", "name": "rehearsal"}}, "selection"),
        ({"selection": {"kind": "subset", "name": "rehearsal"}}, "selection"),
        ({"selection": {"kind": "subset", "name": "../x", "sha256": "c" * 64}}, "selection.name"),
        ({"selection": {"kind": "subset", "name": "rehearsal", "sha256": "C" * 64}}, "selection.sha256"),
        ({"schema_version": True}, "schema_version"),
        ({"commit": "A" * 40}, "commit"),
        ({"commit": "a" * 39}, "commit"),
        ({"tree": None}, "tree"),
        ({"dirty": 0}, "dirty"),
        ({"passed": -1}, "passed"),
        ({"failed": True}, "failed"),
        ({"errors": 1.0}, "errors"),
        ({"skipped": "0"}, "skipped"),
        ({"xfailed": 10**12}, "xfailed"),
        ({"surprise": 1}, "surprise"),
        ({"skipped_tests": GPU_TEST}, "skipped_tests"),
        ({"skipped_tests": [1]}, "skipped_tests"),
        ({"skipped_tests": [""]}, "skipped_tests"),
        ({"skipped_tests": ["tests/a.py::t\x1b[2K"]}, "skipped_tests"),
        ({"skipped_tests": ["t" * 513]}, "skipped_tests"),
        ({"skipped": 2, "skipped_tests": ["tests/b.py::t", "tests/a.py::t"]}, "skipped_tests"),
        ({"skipped": 2, "skipped_tests": [GPU_TEST, GPU_TEST]}, "skipped_tests"),
        ({"skipped": 2}, "skipped_tests"),
        ({"skipped": 0}, "skipped_tests"),
    ],
)
def test_every_bad_field_is_refused_by_name(change, field):
    with pytest.raises(InputError) as caught:
        parse_test_receipt(canonical_bytes(good_document(**change)), file="r.json")
    assert caught.value.field == field and caught.value.file == "r.json"
    if field in ("passed", "failed", "errors", "skipped", "xfailed", "xpassed"):
        assert "is not a test count" in str(caught.value)


@pytest.mark.parametrize("missing", ["xpassed", "dirty", "commit", "skipped_tests", "selection"])
def test_a_missing_field_is_named(missing):
    document = good_document()
    del document[missing]
    with pytest.raises(InputError, match="lacks a required key") as caught:
        parse_test_receipt(canonical_bytes(document))
    assert caught.value.field == missing


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"passed": 1, "passed": 2}', "passed: holds the key 'passed' twice"),
        (b'{"passed": NaN}', "non-finite number NaN"),
        (b"\xef\xbb\xbf{}", "byte-order mark"),
        (b'{"passed": 1}\r\n', "carriage return"),
        (b"[" * 1_100_000 + b"]" * 1_100_000, "is larger than"),
        (b"[" * 30000 + b"]" * 30000, "deeper than"),
        (b'{"a": ' * 65 + b"1" + b"}" * 65, "deeper than"),
        (b"\xff", "not valid UTF-8"),
        (b"[]", "must hold a JSON object"),
    ],
)
def test_hostile_json_is_refused(data, message):
    with pytest.raises(InputError, match=message):
        parse_test_receipt(data)


def test_a_missing_receipt_is_a_refusal_that_says_how_to_make_one(tmp_path):
    with pytest.raises(RefusedError, match="there is no test-run receipt.*nox -s tests") as caught:
        read_test_receipt(tmp_path / "absent.json")
    assert int(caught.value.exit_code) == 7
    assert default_path(tmp_path) == tmp_path / "test-run-receipt.json"
    with pytest.raises(InputError, match="is a folder"):
        read_test_receipt(tmp_path)


def test_gate_refuses_another_commit_tree_a_dirty_tree_failures_errors_and_no_pass():
    receipt = parse_test_receipt(canonical_bytes(good_document()))
    require_green_for(receipt, commit=COMMIT, tree=TREE, file="r.json")
    require_green_for(receipt, commit=COMMIT)
    cases = [
        ({"commit": "c" * 40}, "commit", "is for another commit"),
        ({"tree": "c" * 40}, "tree", "names another tree than the commit's"),
        ({"dirty": True}, "dirty", "uncommitted changes"),
        ({"failed": 1}, "failed", r"did not pass \(1 failed, 0 errors\)"),
        ({"errors": 2}, "errors", r"did not pass \(0 failed, 2 errors\)"),
        ({"passed": 0}, "passed", "passed no test"),
    ]
    for change, field, message in cases:
        bad = parse_test_receipt(canonical_bytes(good_document(**change)))
        assert not bad.clean_pass or field in ("commit", "tree")
        with pytest.raises(RefusedError, match=message) as caught:
            require_green_for(bad, commit=COMMIT, tree=TREE, file="r.json")
        assert caught.value.field == field and int(caught.value.exit_code) == 7
    with pytest.raises(InputError, match="commit"):
        TestRunReceipt(commit="HEAD", tree=TREE, dirty=False, passed=0, failed=0, errors=0, skipped=0, xfailed=0, xpassed=0)
    # The keyword constructor defaults what an older producer did not count, and counts the skips it names.
    made = make_test_receipt(commit=COMMIT, tree=TREE, passed=1, failed=0, errors=0)
    assert (made.dirty, made.xfailed, made.xpassed, made.skipped, made.skipped_tests) == (False, 0, 0, 0, ())
    assert made.to_bytes() == canonical_bytes(made.to_json())


def test_gate_refuses_a_skip_publication_does_not_allow_and_names_it():
    allowed = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, skipped_tests=[GPU_TEST])
    require_green_for(allowed, commit=COMMIT, tree=TREE)
    assert allowed.skipped == 1 and allowed.skips_not_allowed == []
    vectors = "tests/unit/test_sign.py::test_github_release_workflow_bundle_verifies_with_its_repository_and_ref"
    skipped = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, skipped_tests=[GPU_TEST, vectors])
    assert skipped.skips_not_allowed == [vectors]
    with pytest.raises(RefusedError, match="skipped 1 tests that publication does not allow") as caught:
        require_green_for(skipped, commit=COMMIT, tree=TREE, file="r.json")
    assert caught.value.field == "skipped_tests" and caught.value.found == vectors and int(caught.value.exit_code) == 7
    many = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, skipped_tests=[f"tests/t.py::t{i}" for i in range(7)])
    with pytest.raises(RefusedError, match="skipped 7 tests") as caught:
        require_green_for(many, commit=COMMIT)
    assert caught.value.found.endswith("and 2 more")


def test_each_allowed_skip_names_a_test_of_this_suite_with_its_reason():
    """The allow list cannot go stale: every node id is a test function that exists, and says why it may skip."""
    import ast

    from repokit import ROOT

    assert SKIPS_ALLOWED_FOR_PUBLICATION, "the GPU test is the one skip CI cannot avoid"
    for node_id, reason in SKIPS_ALLOWED_FOR_PUBLICATION.items():
        path, name = node_id.split("::")
        tree = ast.parse((ROOT / path).read_text("utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{node_id}: no such test"
        assert len(reason) > 40



def test_a_schema_2_receipt_still_reads_as_a_run_of_the_whole_suite():
    """Schema 2 (before `selection`) was written only for a finished run of the whole suite."""
    document = good_document(schema_version=2)
    del document["selection"]
    receipt = parse_test_receipt(canonical_bytes(document))
    assert receipt.selection == Selection() and receipt.selection.is_full
    require_green_for(receipt, commit=COMMIT, tree=TREE)
    assert json.loads(receipt.to_bytes())["schema_version"] == 3  # written again, it is the current schema


SUBSET = Selection("subset", "rehearsal", "c" * 64)


def test_gate_refuses_a_subset_receipt_unless_the_caller_says_why_it_may_pass():
    receipt = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, selection=SUBSET)
    assert parse_test_receipt(receipt.to_bytes()) == receipt
    with pytest.raises(RefusedError, match="declared subset 'rehearsal'") as caught:
        require_green_for(receipt, commit=COMMIT, tree=TREE, file="r.json")
    assert caught.value.field == "selection" and caught.value.found == "subset" and caught.value.file == "r.json"
    assert "unset PIPELINE_TEST_SUBSET" in str(caught.value)
    require_green_for(receipt, commit=COMMIT, tree=TREE, subset_allowed="the rehearsal's stand-in world")
    # The reason lifts only the subset rule: a failing subset run is still refused.
    failing = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=1, errors=0, selection=SUBSET)
    with pytest.raises(RefusedError, match="1 failed"):
        require_green_for(failing, commit=COMMIT, tree=TREE, subset_allowed="the rehearsal's stand-in world")


# --- the plugin, on a suite of its own ---------------------------------------------------------------

SUITE = {
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
    "tests/conftest.py": (
        "import sys\n"
        f"sys.path.insert(0, {str(KITS)!r})\n"
        "import testreceipt\n\n\n"
        "def pytest_configure(config):\n"
        "    testreceipt.configure(config)\n"
    ),
    "tests/test_mixed.py": (
        "import pytest\n\n\n"
        "def test_pass_one():\n    assert 1 + 1 == 2\n\n\n"
        "def test_pass_two():\n    assert 'a' < 'b'\n\n\n"
        "def test_pass_three():\n    assert [] == []\n\n\n"
        "def test_fails():\n    assert 1 == 2\n\n\n"
        "@pytest.mark.skip(reason='chosen')\ndef test_skipped():\n    pass\n\n\n"
        "@pytest.mark.xfail(reason='chosen')\ndef test_xfails():\n    assert False\n\n\n"
        "@pytest.mark.xfail(reason='chosen')\ndef test_xpasses():\n    pass\n\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup breaks')\n\n\n"
        "def test_setup_error(broken):\n    pass\n"
    ),
    "tests/test_skipped_module.py": "import pytest\n\npytest.skip('whole module', allow_module_level=True)\n",
}
EXPECTED = {"passed": 3, "failed": 1, "errors": 1, "skipped": 2, "xfailed": 1, "xpassed": 1}
EXPECTED_SKIPS = ("tests/test_mixed.py::test_skipped", "tests/test_skipped_module.py")


@pytest.fixture
def suite(tmp_path) -> Path:
    repo = tmp_path / "suite"
    for name, text in SUITE.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
    make_repo(repo)
    return repo


def run_suite(repo: Path, receipt: Path, *args: str, subset: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_") and key != test_subset.ENV_VAR}
    env[ENV_VAR] = str(receipt)
    if subset is not None:
        env[test_subset.ENV_VAR] = subset
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


def test_plugin_writes_pytest_counts_for_the_exact_commit(suite, tmp_path):
    receipt_path = tmp_path / "out" / "test-run-receipt.json"
    result = run_suite(suite, receipt_path)
    assert result.returncode == 1, result.stdout + result.stderr  # one test fails, by design
    receipt = read_test_receipt(receipt_path)
    assert {name: getattr(receipt, name) for name in EXPECTED} == EXPECTED
    assert receipt.skipped_tests == EXPECTED_SKIPS
    assert receipt.commit == git(suite, "rev-parse", "HEAD")
    assert receipt.tree == git(suite, "rev-parse", "HEAD^{tree}")
    assert receipt.dirty is False
    assert receipt_path.read_bytes() == canonical_bytes(receipt.to_json())
    assert f"test-run receipt: {receipt_path}" in result.stdout
    # The terminal summary and the receipt agree (both are pytest's categories).
    assert "1 failed, 3 passed, 2 skipped, 1 xfailed, 1 xpassed, 1 error" in result.stdout
    with pytest.raises(RefusedError, match="1 failed"):
        require_green_for(receipt, commit=receipt.commit, tree=receipt.tree)

    # A passing suite on a clean tree passes the gate; an untracked file makes the tree dirty.
    (suite / "tests" / "test_mixed.py").write_text("def test_only():\n    assert True\n")
    git(suite, "commit", "-q", "-am", "only passing tests")
    assert run_suite(suite, receipt_path).returncode == 0
    receipt = read_test_receipt(receipt_path)
    assert (receipt.passed, receipt.failed, receipt.skipped, receipt.skipped_tests) == (1, 0, 1, ("tests/test_skipped_module.py",))
    # Green but for a skip: the skipped module did not run, so publication refuses the receipt, naming it.
    with pytest.raises(RefusedError, match="skipped 1 tests that publication does not allow") as caught:
        require_green_for(receipt, commit=git(suite, "rev-parse", "HEAD"), tree=git(suite, "rev-parse", "HEAD^{tree}"))
    assert caught.value.found == "tests/test_skipped_module.py"
    (suite / "tests" / "test_skipped_module.py").unlink()
    git(suite, "commit", "-q", "-am", "no skipped module")
    assert run_suite(suite, receipt_path).returncode == 0
    receipt = read_test_receipt(receipt_path)
    assert (receipt.passed, receipt.skipped, receipt.skipped_tests) == (1, 0, ())
    require_green_for(receipt, commit=git(suite, "rev-parse", "HEAD"), tree=git(suite, "rev-parse", "HEAD^{tree}"))
    (suite / "tests" / "notes.txt").write_text("not committed\n")
    assert run_suite(suite, receipt_path).returncode == 0
    assert read_test_receipt(receipt_path).dirty is True
    assert repo_state(suite)[2] is True


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("tests/test_mixed.py",), "explicit test paths select part of the suite"),
        (("-k", "pass"), "4 tests were deselected"),
        (("-m", "not slow"), None),  # nothing carries the mark: nothing deselected, the whole suite ran
        (("--ignore", "tests/test_skipped_module.py"), "--ignore leaves part of the suite out"),
        (("--collect-only",), "a collect-only run"),
    ],
)
def test_a_partial_run_leaves_no_receipt_and_removes_a_stale_one(suite, tmp_path, args, reason):
    receipt_path = tmp_path / "test-run-receipt.json"
    receipt_path.write_text("stale receipt of an earlier run\n")
    result = run_suite(suite, receipt_path, *args)
    if reason is None:
        assert read_test_receipt(receipt_path).failed == 1
        return
    assert not receipt_path.exists(), result.stdout
    assert f"test-run receipt: not written ({reason}" in result.stdout, result.stdout


def test_under_xdist_workers_the_controller_counts_and_a_workers_deselection_is_seen(suite, tmp_path):
    """`nox -s tests` runs on pytest-xdist workers: the receipt is the controller's, with the same counts,
    and a deselection that happens only in the workers still leaves no receipt."""
    receipt_path = tmp_path / "test-run-receipt.json"
    result = run_suite(suite, receipt_path, "-n", "2", "--dist", "loadfile")
    assert result.returncode == 1, result.stdout + result.stderr
    receipt = read_test_receipt(receipt_path)
    assert {name: getattr(receipt, name) for name in EXPECTED} == EXPECTED
    assert receipt.skipped_tests == EXPECTED_SKIPS
    result = run_suite(suite, receipt_path, "-n", "2", "-k", "pass")
    assert not receipt_path.exists(), result.stdout
    assert "test-run receipt: not written (4 tests were deselected" in result.stdout, result.stdout


def test_a_collection_error_interrupts_the_run_and_leaves_no_receipt(suite, tmp_path):
    (suite / "tests" / "test_broken.py").write_text("import no_such_module_anywhere\n")
    git(suite, "add", "-A")
    git(suite, "commit", "-q", "-m", "broken import")
    receipt_path = tmp_path / "test-run-receipt.json"
    result = run_suite(suite, receipt_path)
    assert result.returncode == 2 and not receipt_path.exists()
    assert "not written (the run did not finish normally (INTERRUPTED))" in result.stdout
    # Asked to go on past it, the error is counted and the gate refuses it.
    result = run_suite(suite, receipt_path, "--continue-on-collection-errors")
    receipt = read_test_receipt(receipt_path)
    assert receipt.errors == 2 and receipt.failed == 1
    with pytest.raises(RefusedError, match="1 failed"):
        require_green_for(receipt, commit=receipt.commit)


def test_without_the_variable_nothing_is_written(suite, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=suite, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "test-run receipt" not in result.stdout
    assert sorted(path.name for path in tmp_path.rglob("*.json")) == []


def test_an_unwritable_receipt_path_is_reported_and_leaves_the_outcome_alone(suite, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    result = run_suite(suite, blocker / "test-run-receipt.json")
    assert result.returncode == 1  # the suite's own failure, not an internal error
    assert "test-run receipt: not written (" in result.stdout and "INTERNALERROR" not in result.stdout + result.stderr


SUBSET_FILE = "# the subset of this small suite\n\ntests/test_mixed.py::test_pass_one\ntests/test_mixed.py::test_pass_two\n"


def test_a_run_of_exactly_a_declared_subset_writes_a_receipt_that_names_it(suite, tmp_path):
    (suite / "tests" / "subsets").mkdir()
    (suite / "tests" / "subsets" / "quick.txt").write_text(SUBSET_FILE)
    git(suite, "add", "-A")
    git(suite, "commit", "-q", "-m", "a declared subset")
    receipt_path = tmp_path / "test-run-receipt.json"
    entries = ("tests/test_mixed.py::test_pass_one", "tests/test_mixed.py::test_pass_two")
    result = run_suite(suite, receipt_path, *entries, subset="quick")
    assert result.returncode == 0, result.stdout
    receipt = read_test_receipt(receipt_path)
    assert receipt.selection == Selection("subset", "quick", test_subset.read_subset(suite, "quick").sha256)
    assert receipt.selection.sha256 == __import__("hashlib").sha256(SUBSET_FILE.encode()).hexdigest()
    assert (receipt.passed, receipt.failed, receipt.dirty) == (2, 0, False)
    assert "the declared subset 'quick'" in result.stdout
    # Anything but exactly the subset's entries, in order, writes none: one entry, another order, the whole suite.
    for args in (entries[:1], entries[::-1], ()):
        result = run_suite(suite, receipt_path, *args, subset="quick")
        assert not receipt_path.exists(), (args, result.stdout)
        assert "test-run receipt: not written (the run's test paths are not exactly the declared subset 'quick'" in result.stdout
    # A name that is no declared subset (or not a name at all) writes none, and says which.
    for name, message in (("other", "names no declared test subset"), ("../quick", "is not a declared test subset's name")):
        result = run_suite(suite, receipt_path, *entries, subset=name)
        assert not receipt_path.exists()
        assert message in result.stdout, result.stdout
