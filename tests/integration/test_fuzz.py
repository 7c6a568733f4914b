"""The fuzz harnesses of tests/fuzz in the regular suite.

Every committed corpus input (the seeds and every input that once crashed a
reader) is replayed deterministically; each harness then gets a fixed budget
of seeded mutations in process (slow), and one short atheris run checks the
coverage-guided runner itself (slow).  `nox -s fuzz` runs every harness with
atheris for longer.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz import harnesses, run, seeds
from repokit import ROOT

from pipeline.errors import InputError

# Every reader of outside bytes that issues #9 and #18 name has a harness (and a seed corpus).
READERS = {
    "json", "lane", "sums", "tar", "check_assets", "identity", "manifest", "audit", "receipt",
    "registry_manifest", "token", "token_answer", "registry_client", "sbom", "release_toml",
    # issue #18 §4: the acceptance bundle and receipt, route documents, provenance statements, source archives, publish's GitHub answers
    "acceptance", "routes", "provenance", "source_archive", "github",
    # issue #30 §3: GitHub's release attestations (the API answer publish reads, the statement audit pins)
    "release_attestation",
    # issue #29: a package archive's Release and Packages, the image's package lock, a .deb
    "apt_index", "apt_lock", "deb",
}
FUZZ_SECONDS = 3
BUDGET_RUNS = 150  # inputs per harness in the suite's fixed budget


def test_every_reader_has_a_harness_and_seeds():
    assert set(harnesses.TARGETS) >= READERS
    for name in harnesses.TARGETS:
        assert harnesses.corpus_files(name), f"tests/fuzz/corpus/{name}/ is empty"


def test_the_seeds_are_what_seeds_py_writes_and_the_corpus_stays_small():
    assert seeds.main(["--check"]) == 0
    total = sum(path.stat().st_size for path in (ROOT / "tests" / "fuzz" / "corpus").rglob("*") if path.is_file())
    assert total < 1024 * 1024, f"the committed corpus is {total} bytes"


@pytest.mark.parametrize("name", sorted(harnesses.TARGETS))
def test_the_committed_corpus_replays_without_a_bug(name):
    for path in harnesses.corpus_files(name):
        harnesses.run_input(name, path.read_bytes())


def test_the_harness_fails_on_a_traceback_and_on_a_write_outside_its_folder(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")

    def refuses(data, work):
        raise InputError("refused", file="x")

    def crashes(data, work):
        raise KeyError("a bug")

    def writes_outside(data, work):
        (work / "cwd" / "inside.txt").write_bytes(data)  # allowed: the scratch folder
        with contextlib.suppress(BaseException):  # code that swallows every error: the sandbox still saw the write
            (outside / "escaped.txt").write_bytes(data)

    def renames_outside(data, work):
        os.replace(outside / "keep", work / "cwd" / "stolen")

    def removes_through_a_link(data, work):
        (work / "cwd" / "link").symlink_to(outside)
        os.remove(work / "cwd" / "link" / "keep")  # the link is inside; what it removes is not

    for name, function in [("refuses", refuses), ("crashes", crashes), ("writes", writes_outside), ("renames", renames_outside), ("links", removes_through_a_link)]:
        monkeypatch.setitem(harnesses.TARGETS, name, harnesses.Target(name, function, 16, name))
    harnesses.run_input("refuses", b"x")
    with pytest.raises(KeyError):
        harnesses.run_input("crashes", b"x")
    with pytest.raises(harnesses.HarnessFailure, match="wrote outside the scratch folder: open .*escaped.txt"):
        harnesses.run_input("writes", b"x")
    with pytest.raises(harnesses.HarnessFailure, match="os.rename .*outside/keep"):
        harnesses.run_input("renames", b"x")
    with pytest.raises(harnesses.HarnessFailure, match="os.remove .*outside/keep"):
        harnesses.run_input("links", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["keep"] and (outside / "keep").read_text() == "x"
    assert Path.cwd() != harnesses.sandbox().work / "cwd" and not harnesses.sandbox().work.exists()


def test_the_mutation_loop_runs_the_same_harnesses(tmp_path):
    # The fallback where atheris has no wheel: deterministic, and a crash is saved and reported.
    assert run.mutation_loop("sums", 30, tmp_path, runs=300) == 0
    assert run.mutate(b"abc", __import__("random").Random(1), [b"xyz"], 64) == run.mutate(b"abc", __import__("random").Random(1), [b"xyz"], 64)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(harnesses.TARGETS))
def test_each_harness_survives_a_short_fixed_budget_of_mutations(name, tmp_path, capsys):
    # In process and seeded (structure-aware where the target has a structure): the same inputs
    # every run, so a failure here reproduces; `nox -s fuzz` explores with coverage for longer.
    result = run.mutation_loop(name, 60, tmp_path, runs=BUDGET_RUNS)
    assert result == 0, capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # no crashing input saved


@pytest.mark.slow
def test_atheris_fuzzes_with_coverage_and_reports_per_target(tmp_path):
    # One real atheris run through the runner: the pipeline must be imported under atheris'
    # instrumentation (else libFuzzer sees no coverage and keeps a single one-byte input).
    if not run.have_atheris():
        has_wheel = sys.platform == "linux" and platform.machine() == "x86_64" and sys.version_info < (3, 14)
        assert not has_wheel, "PyPI has an atheris wheel for this platform, yet it is not installed: install the tests extra"
        return  # the mutation loop above is this platform's fuzzer
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fuzz" / "run.py"), "--target", "sums", "--seconds", str(FUZZ_SECONDS), "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("OK: sums: "))
    grew = int(line.split(" new coverage inputs")[0].rsplit(", ", 1)[1])
    assert grew > 0, line
    assert "FUZZ PASSED: 1 targets" in result.stdout


def test_the_crashes_the_issue_18_harnesses_found_are_refusals_naming_the_field(tmp_path):
    # Each was a traceback (corpus/<target>/crash-* replays them through the harnesses as well).
    import io
    import tarfile

    from pipeline.errors import RemoteError
    from pipeline.formats import routes
    from pipeline.infra import github
    from pipeline.lanework import source

    answers = {
        "/rate_limit": (200, {}, b'{"resources": {"core": ["a list"]}}'),
        f"/repos/o/r/commits/{'a' * 40}": (200, {}, b'{"files": [{"filename": 1.5}]}'),
        "/repos/o/r": (429, {"retry-after": "\u00b2"}, b"{}"),
    }

    def answer(request):
        return answers[request.path_url.split("?", 1)[0]]

    class Clock(github.Clock):
        def now(self) -> float:
            return 0.0

        def sleep(self, seconds: float) -> None:
            pass

    client = github.GitHub("o/r", "fuzz-token-0123456789", api="https://api.github.com", clock=Clock(), max_attempts=1, write_interval=0)
    client._session.mount("https://", harnesses._Scripted(answer))
    with pytest.raises(RemoteError, match="resources.core"):
        client.rate_limit()  # publish read core.get(...) of a list: AttributeError
    with pytest.raises(RemoteError, match=r"files\[0\].*filename"):
        client.commit("a" * 40)  # publish called filename.startswith(...) of a float: AttributeError
    with pytest.raises(RemoteError, match="still rate limited"):
        client.repo()  # retry-after '²' is str.isdigit() but not a number float() reads: ValueError
    assert github._retry_after_seconds("\u00b2", 0.0) is None and github._retry_after_seconds("7", 0.0) == 7.0

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("a.txt")
        info.size, info.pax_headers = 2, {"mtime": "nan"}
        archive.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(InputError, match="impossible time"):
        source.archive_facts(buffer.getvalue(), origin="source.tar")  # int(nan): ValueError

    document = b"## Route `a`: a\n\n```parameters\nOMP_NINFER_X: text = 1\n```\n\n```sh\necho a\n```\n\n## Later\n\n```parameters\nOMP_NINFER_X: text = 2\n```\n"
    with pytest.raises(InputError, match="line 13: declares a parameter that is already declared"):
        routes.scan(document, "docs/X.md")  # route a had OMP_NINFER_X twice: a bundle accept run refused
