"""pytest plugin: write the test-run receipt (pipeline/formats/test_receipt.py).

Active only when PIPELINE_TEST_RECEIPT names an output path (the nox `tests`
session sets it to `<dist>/test-run-receipt.json`); a plain `pytest` run
writes nothing.  The counts are pytest's own report categories, as the
terminal summary shows them; each skipped test is named by its node id.  A receipt is written only for a finished run of
the whole suite, or of exactly one declared subset: with PIPELINE_TEST_SUBSET=<name> (the release workflow's
rehearsal sets it; pipeline/formats/test_subset.py) the run's arguments must be exactly the entries of
tests/subsets/<name>.txt, in order, and the receipt's `selection` names the subset and its file's SHA-256.
A run given other paths, `--ignore`, or one that deselected anything (`-k`, `-m`, `--lf`, `--sw`), an
interrupted run and a collect-only run leave no receipt, and a stale one at that path is removed
when the run starts, so a receipt never outlives the run that replaced it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.formats import test_subset
from pipeline.formats.test_receipt import ENV_VAR, Selection, TestRunReceipt, repo_state, write_test_receipt

_CATEGORY = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped",
             "xfailed": "xfailed", "xpassed": "xpassed"}


DESELECTED_KEY = "omp_ninfer_deselected"


class TestReceiptPlugin:
    __test__ = False

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.counts: Counter[str] = Counter()
        self.skipped_tests: set[str] = set()  # node ids: publication refuses a skip it does not allow
        self.deselected = 0
        self.start: tuple[str, str, bool] | None = None
        self.problem: str | None = None
        self.message: str | None = None
        self.selection = Selection()
        self.subset_entries: tuple[str, ...] = ()

    def _read_subset(self) -> None:
        """The declared subset PIPELINE_TEST_SUBSET names (unset: the whole suite); a bad name writes no receipt."""
        name = os.environ.get(test_subset.ENV_VAR)
        if not name:
            return
        try:
            subset = test_subset.read_subset(self.config.rootpath, name)
        except PipelineError as error:
            self.problem = error.render()
            return
        self.selection = Selection("subset", subset.name, subset.sha256)
        self.subset_entries = subset.entries

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        try:
            self.path.unlink()  # a receipt must never outlive the run that replaces it
        except FileNotFoundError:
            pass
        except OSError as error:
            self.problem = f"cannot remove or replace {self.path}: {error.strerror}"
        try:
            self.start = repo_state(self.config.rootpath)
        except PipelineError as error:
            self.problem = error.render()
        self._read_subset()

    def pytest_deselected(self, items) -> None:
        self.deselected += len(items)

    def pytest_testnodedown(self, node, error) -> None:
        # pytest-xdist: each worker collects and deselects the whole suite itself; the controller hears of it
        # only through the worker's output (every worker deselects the same tests, so take the largest count).
        self.deselected = max(self.deselected, int(getattr(node, "workeroutput", {}).get(DESELECTED_KEY, 0)))
        if error is not None and self.problem is None:
            self.problem = f"a pytest-xdist worker went down ({error})"

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.counts["errors"] += 1
        elif report.skipped:
            self.counts["skipped"] += 1
            self.skipped_tests.add(report.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if category in _CATEGORY:
            self.counts[_CATEGORY[category]] += 1
            if category == "skipped":
                self.skipped_tests.add(report.nodeid)
        elif category:  # e.g. a plugin's "rerun": the receipt cannot say what it means
            self.problem = f"pytest reported a test outcome the receipt has no field for: {category!r}"

    def _partial(self, session: pytest.Session) -> str | None:
        option = self.config.option
        if getattr(option, "collectonly", False):
            return "a collect-only run"
        if not self.selection.is_full:
            if tuple(self.config.args) != self.subset_entries:
                return (f"the run's test paths are not exactly the declared subset {self.selection.name!r} "
                        f"({test_subset.subset_path(str(self.selection.name))})")
        elif self.config.args_source != pytest.Config.ArgsSource.TESTPATHS:
            return "explicit test paths select part of the suite"
        if getattr(option, "ignore", None) or getattr(option, "ignore_glob", None):
            return "--ignore leaves part of the suite out"
        if self.deselected:
            return f"{self.deselected} tests were deselected"
        return None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        reason = self.problem
        if reason is None and exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            reason = f"the run did not finish normally ({pytest.ExitCode(exitstatus).name})"
        reason = reason or self._partial(session)
        if reason is None:
            try:
                end = repo_state(self.config.rootpath)
            except PipelineError as error:
                end, reason = None, error.render()
        if reason is None and end[:2] != self.start[:2]:
            reason = f"HEAD moved during the run ({self.start[0]} -> {end[0]})"
        if reason is not None:
            self._say(f"test-run receipt: not written ({reason})")
            return
        commit, tree, dirty = self.start
        try:
            receipt = TestRunReceipt(commit=commit, tree=tree, dirty=dirty or end[2],
                                     **{name: self.counts[name] for name in _CATEGORY.values()},
                                     skipped_tests=tuple(sorted(self.skipped_tests)), selection=self.selection)
            write_test_receipt(self.path, receipt)
        except (OSError, PipelineError) as error:  # the receipt never changes the run's own outcome
            self._say(f"test-run receipt: not written ({error})")
            return
        counts = ", ".join(f"{name} {self.counts[name]}" for name in _CATEGORY.values())
        self._say(f"test-run receipt: {self.path} (commit {commit}{', dirty tree' if receipt.dirty else ''}; "
                  f"{self.selection.describe()}; {counts})")

    def _say(self, line: str) -> None:
        self.message = line

    def pytest_terminal_summary(self, terminalreporter) -> None:
        # Called by the terminal reporter after every pytest_sessionfinish, so the line stands on its own.
        if self.message:
            terminalreporter.write_line(self.message)


class _WorkerDeselections:
    """In a pytest-xdist worker: counts the tests this worker deselected, for the controller's receipt."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_deselected(self, items) -> None:
        output = self.config.workeroutput  # type: ignore[attr-defined]
        output[DESELECTED_KEY] = output.get(DESELECTED_KEY, 0) + len(items)


def pytest_configure(config: pytest.Config) -> None:
    # This module is one of the suite's plugins (tests/conftest.py: pytest_plugins).
    configure(config)


def configure(config: pytest.Config) -> None:
    """Register the plugin when PIPELINE_TEST_RECEIPT is set (this module's pytest_configure, or a suite's own conftest)."""
    target = os.environ.get(ENV_VAR)
    if not target:
        return
    if hasattr(config, "workerinput"):  # an xdist worker only reports its deselections: the controller counts
        config.pluginmanager.register(_WorkerDeselections(config), "omp-ninfer-test-receipt-worker")
        return
    config.pluginmanager.register(TestReceiptPlugin(config, Path(target).resolve()), "omp-ninfer-test-receipt")
