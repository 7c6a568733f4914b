"""The re-cut benchmark's engine-shaped tree and its verdict (pipeline/dev/bench_build.py), without compiling.

The builds themselves are the pipeline's build stage, tested with the real nvcc in
tests/integration/test_build_cache.py; here: the tree has the issue's shape, the change is exactly one
.cu and one .cpp file, and the goal is met only with identical bytes and a ratio within 0.15x."""

from __future__ import annotations

import subprocess

import pytest

from pipeline.dev import bench, bench_build


def test_the_engine_tree_has_the_issues_shape_and_the_change_touches_one_cu_and_one_cpp(tmp_path):
    repo = tmp_path / "engine"
    first = bench_build.make_engine_repo(repo)
    units = sorted((repo / "src" / "engine").iterdir())
    assert sum(p.suffix == ".cu" for p in units) == 24 and sum(p.suffix == ".cpp" for p in units) == 40
    assert all(200 <= len(p.read_text().splitlines()) <= 400 for p in units), "a few hundred lines each"
    cmake = (repo / "CMakeLists.txt").read_text()
    assert cmake.count("target_sources(ninfer_core PRIVATE") == 1 and all(f"src/engine/{p.name}" in cmake for p in units)
    second = bench_build.change_one_of_each(repo)
    changed = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", first, second], capture_output=True, text=True, check=True).stdout.split()
    assert changed == ["src/engine/kernels_12.cu", "src/engine/module_20.cpp"]
    assert "recut-compile-cache" in bench.MEASUREMENTS


@pytest.mark.parametrize(("warm_seconds", "warm_binary", "met"), [(9.0, "a" * 64, True), (16.0, "a" * 64, False), (9.0, "b" * 64, False)])
def test_the_goal_needs_identical_bytes_and_at_most_a_seventh_of_the_clean_build(tmp_path, monkeypatch, warm_seconds, warm_binary, met):
    runs = iter([
        {"seconds": 120.0, "binaries": {"ninfer": "a" * 64}, "identity": b"{}", "counters": {"cache_miss": 80}},
        {"seconds": warm_seconds, "binaries": {"ninfer": warm_binary}, "identity": b"{}", "counters": {"cache_miss": 82, "direct_cache_hit": 78}},
        {"seconds": 100.0, "binaries": {"ninfer": "a" * 64}, "identity": b"{}", "counters": {}},
    ])
    monkeypatch.setattr(bench_build, "_build", lambda *_args: next(runs))
    monkeypatch.setattr(bench_build, "make_engine_repo", lambda _repo: "1" * 40)  # the tree is the test above's
    monkeypatch.setattr(bench_build, "change_one_of_each", lambda _repo: "2" * 40)
    result = bench_build.measure_recut_cache(tmp_path, tmp_path, 0, 9)
    assert result["met"] is met and result["ratio"] == round(warm_seconds / 100.0, 3)
    assert result["ours"]["cache_hits"] == 78 and result["ours"]["cache_misses"] == 2
    assert result["bytes_identical_to_clean_build"] is (warm_binary == "a" * 64)
