"""The pytest plugin that writes the test-run receipt (tests/kits/testreceipt.py), run for real.

The plugin is exercised on a small suite of its own in a throw-away git repository, run by a real pytest
in a subprocess, so the counts, the commit, the tree and the dirty flag can be checked against git and
against outcomes chosen here; and this suite's own conftest is shown to load it.  A nested pytest takes
seconds: these are integration tests (the receipt's format and gate: tests/unit/test_test_run_receipt.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from repokit import KITS, ROOT, git, make_repo

from pipeline.errors import RefusedError
from pipeline.formats.test_receipt import ENV_VAR, read_test_receipt, repo_state, require_green_for
from pipeline.util.jsonio import canonical_bytes


def test_this_suite_loads_the_test_run_receipt_plugin(tmp_path):
    """testreceipt is a plugin of this suite (pytest_plugins): a run given a path is told it is partial."""
    receipt = tmp_path / "test-run-receipt.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["PIPELINE_TEST_RECEIPT"] = str(receipt)
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/unit/test_identity.py"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test-run receipt: not written (explicit test paths select part of the suite)" in result.stdout, result.stdout
    assert not receipt.exists()


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


def run_suite(repo: Path, receipt: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env[ENV_VAR] = str(receipt)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)


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
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "test-run receipt" not in result.stdout
    assert sorted(path.name for path in tmp_path.rglob("*.json")) == []


def test_an_unwritable_receipt_path_is_reported_and_leaves_the_outcome_alone(suite, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    result = run_suite(suite, blocker / "test-run-receipt.json")
    assert result.returncode == 1  # the suite's own failure, not an internal error
    assert "test-run receipt: not written (" in result.stdout and "INTERNALERROR" not in result.stdout + result.stderr
