"""Issue 19: a re-cut from the compile cache has a clean build's bytes, and two builds of one lane run at once.

One test, three real builds (the cheapest that shows both): the sample at its commit with an empty cache
(which fills it), then a commit that changes one .cu file, built at the same time from two clones, one
clean (no cache) and one from the warm cache.  Every binary and the build identity must be identical, the
warm one must have hit the cache for everything but the changed file (and the identity, which names the commit), and the two builds must have
compiled at the same time (each in its own mount namespace at the canonical path), or, where this host
cannot make a namespace, the one that waited must say so.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from repokit import GIT_ENV, ROOT, git

from pipeline.formats.lanes import find_lane
from pipeline.infra import buildns
from pipeline.lanework.source import parse_source
from pipeline.stage import Context, execute
from pipeline.stages.build import CANONICAL_ROOT, BuildStage

CHANGE = "\n__global__ void ninfer_one_file_change(float *y) { y[0] = 2.0f; }\n"


def _clone(source: Path, target: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(source), str(target)], check=True, env=dict(os.environ, **GIT_ENV, HOME=str(target.parent)))
    return target


class Timed:
    """A `python -m pipeline build` in its own process, its output lines stamped as they arrive."""

    def __init__(self, args: list[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "pipeline", "build", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def wait(self) -> str:
        code = self.proc.wait(timeout=600)
        self.reader.join()
        text = "\n".join(line for _, line in self.lines)
        assert code == 0, text[-4000:]
        return text

    def when(self, pattern: str) -> float:
        return next(t for t, line in self.lines if re.search(pattern, line))


def test_a_cached_object_follows_source_date_epoch_where_the_source_uses_date(tmp_path):
    """__DATE__ comes from SOURCE_DATE_EPOCH (the commit's time): another commit's cached object must not be returned."""
    from pipeline.infra import compile_cache
    from pipeline.lanework.hostdeps import BUILD_PATH
    from pipeline.stages.build import LAUNCHER

    env = {"PATH": os.pathsep.join(BUILD_PATH), "LC_ALL": "C.UTF-8", "HOME": str(tmp_path)}
    cache = compile_cache.prepare(tmp_path / "cache", toolchain_description={"kind": "pinned", "lock_entry_sha256": "0" * 64},
                                  cuda_home=tmp_path, path=BUILD_PATH, env=env, launcher=LAUNCHER)
    (tmp_path / "dated.c").write_text('const char *built_on = __DATE__;\nint unrelated(void) { return 1; }\n')
    objects = []
    for epoch in ("1700000000", "1800000000", "1700000000"):
        target = tmp_path / f"dated-{epoch}-{len(objects)}.o"
        subprocess.run([str(cache.ccache), "cc", "-c", "dated.c", "-o", str(target)], cwd=tmp_path, env={**env, **cache.env(), "SOURCE_DATE_EPOCH": epoch}, check=True)
        objects.append(target.read_bytes())
    assert b"Nov 14 2023" in objects[0] and b"Jan 15 2027" in objects[1], "the second commit's date must be compiled, not served"
    assert objects[2] == objects[0]
    hits, misses = compile_cache.hits_and_misses({}, cache.statistics(env))
    assert (hits, misses) == (1, 2)


_DEVICE_HEADER = "__device__ inline float twice(float x) { return 2.0f * x; }\n"
_DEVICE_SOURCE = '#include "twice.cuh"\n__global__ void kern(float *y) { y[threadIdx.x] = twice(y[threadIdx.x]); }\nvoid launch(float *y) { kern<<<1, 32>>>(y); }\n'


@pytest.mark.cuda
def test_one_cu_exported_from_commits_made_an_hour_apart_compiles_to_the_same_object(tmp_path):
    """-lineinfo records each source and header file's mtime in the device code: the export gives every file one fixed
    time (source.EXPORT_MTIME), so an object compiled from one commit's export (what a cache hit returns) is the
    object a clean compile of a later commit's export gives, as the sample's lane compiles it (relocatable, launcher)."""
    import io
    import tarfile

    from pipeline.lanework import source
    from pipeline.stages.build import LAUNCHER

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "twice.cuh").write_text(_DEVICE_HEADER)
    (repo / "k.cu").write_text(_DEVICE_SOURCE)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "kernel", date="2026-11-01T12:00:00+00:00")
    (repo / "NOTES.txt").write_text("a later commit that leaves the kernel alone\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "notes", date="2026-11-01T13:00:00+00:00")
    export = tmp_path / "export"  # one path for both, as the canonical source path is
    objects, times = [], []
    for commit in ("HEAD~1", "HEAD"):
        raw = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
            times.append(archive.getmember("k.cu").mtime)
        if export.exists():
            import shutil

            shutil.rmtree(export)
        source.export_tree(raw, export)
        command = [sys.executable, str(LAUNCHER), "nvcc", "-c", "-rdc=true", "-lineinfo", "-arch=sm_120a", "-o", "k.o", "k.cu"]
        subprocess.run(command, cwd=export, check=True, capture_output=True)
        objects.append((export / "k.o").read_bytes())
    assert times[1] - times[0] == 3600, "the two commits must carry different times, or the test shows nothing"
    assert objects[0] == objects[1], "the device code carries the commit's time: a cached object would differ from a clean one"


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.network
def test_warm_cache_recut_has_clean_bytes_and_two_builds_of_a_lane_run_at_once(tmp_path, sample_repo):
    repo, first = sample_repo
    cache = tmp_path / "cache"
    primed = execute(BuildStage(Context.open(tmp_path / "dist-prime"), find_lane("5090"), source=parse_source(str(repo)), rehearsal=True, cache_dir=cache))
    assert primed.outputs and (cache / "omp-ninfer-ccache.conf").read_text().count("compiler_check = content") == 1

    one = _clone(repo, tmp_path / "clone-one")
    with open(one / "src" / "kernels" / "probe.cu", "a") as handle:
        handle.write(CHANGE)
    git(one, "commit", "-q", "-am", "one .cu file changed", date="2026-11-01T13:00:00+00:00")  # an hour after the primed commit
    changed = git(one, "rev-parse", "HEAD")
    two = _clone(one, tmp_path / "clone-two")
    assert git(two, "rev-parse", "HEAD") == changed != first

    common = ["--lane", "5090", "--rehearsal"]
    clean = Timed([*common, "--source", f"{one}@{changed}", "--dist", str(tmp_path / "dist-clean"), "--no-cache"])
    warm = Timed([*common, "--source", f"{two}@{changed}", "--dist", str(tmp_path / "dist-warm"), "--cache", str(cache)])
    clean_text, warm_text = clean.wait(), warm.wait()

    for name in ("bin/ninfer", "bin/ninfer-serve", "build-identity.json"):
        a = (tmp_path / "dist-clean" / "rtx5090-container" / "build" / name).read_bytes()
        b = (tmp_path / "dist-warm" / "rtx5090-container" / "build" / name).read_bytes()
        assert a == b, f"{name}: the warm-cache re-cut differs from the clean build"
    prime_serve = (tmp_path / "dist-prime" / "rtx5090-container" / "build" / "bin" / "ninfer-serve").read_bytes()
    assert prime_serve != a, "the change did not reach the binary, so the comparison shows nothing"
    hits, misses = map(int, re.search(r"compile cache: (\d+) hits, (\d+) misses", warm_text).groups())
    assert misses == 2 and hits >= 10, warm_text  # the changed probe.cu, and identity.cpp (it compiles the commit in)
    assert "compile cache" not in clean_text
    # The set published from the warm-cache re-cut is rebuilt bit for bit by an outsider's clean rebuild.
    import shutil

    from pipeline.formats import provenance as slsa
    from pipeline.stages.package import package_lane
    from pipeline.stages.rebuild import rebuild_verify

    package_lane("5090", dist=tmp_path / "dist-warm")
    published = tmp_path / "published"
    shutil.copytree(tmp_path / "dist-warm" / "rtx5090-container" / "assets", published)
    for statement in (tmp_path / "dist-warm" / "rtx5090-container" / slsa.FOLDER).iterdir():
        shutil.copyfile(statement, published / statement.name)
    outcome = rebuild_verify(str(published), lane_name="5090", work=tmp_path / "rebuild", use_diffoscope=False)
    assert outcome.passed, [c.detail for c in outcome.checks if not c.ok] + outcome.differing + outcome.differing_members

    isolation = buildns.detect(CANONICAL_ROOT / "work")
    if isolation.available:
        assert "waiting for another build" not in clean_text + warm_text
        windows = [(b.when(r"\[build\] configure"), b.when(r"build identity:")) for b in (clean, warm)]
        (start_a, end_a), (start_b, end_b) = windows
        assert start_a < end_b and start_b < end_a, f"the two compiles did not overlap: {windows}"
    else:  # the lane lock: one of them waited, and said for whom
        assert re.search(r"waiting for another build of this lane: pid \d+ since \d{4}-\d\d-\d\dT", clean_text + warm_text), isolation.reason
