"""Issue 19's re-cut measurement: a one-file change rebuilt from the compile cache (`build --cache`).

* `recut-compile-cache`: an engine-shaped source tree (the sample runtime plus
  24 generated CUDA and 40 generated C++ translation units of a few hundred
  lines each, compiled into the sample's `ninfer_core` with the sample's
  flags, one CMake project) is committed to a git repository and built
  through the pipeline's build stage three times, each into a fresh dist and
  build folder, configure included:
  1. cold, filling an empty cache (what the first cut with `--cache` costs);
  2. after changing one `.cu` and one `.cpp` file (a second commit), with the
     warm cache: the maintainer's re-cut;
  3. the changed commit without a cache: the clean build a re-cut costs today,
     and the reference bytes.
  Goal: the warm re-cut at most 0.15x the clean build, with every binary and
  the build identity byte-identical to the clean build's.  ccache's hits and
  misses of the warm build are reported beside the times.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pipeline.errors import BuildFailure

CUDA_UNITS = 24
CXX_UNITS = 40
KERNELS_PER_UNIT = 10
FUNCTIONS_PER_UNIT = 14
GOAL_RATIO = 0.15
GIT_DATE = "2026-11-29T00:00:00+00:00"


def _cuda_unit(index: int, variant: int) -> str:
    lines = ['#include <cuda_runtime.h>', '#include <cstddef>', "", f"namespace ninfer::engine::cuda{index:02d} {{", ""]
    for k in range(KERNELS_PER_UNIT):
        scale = 1.0 + index * 0.01 + k * 0.001 + variant * 0.5
        lines += [
            "template <int Width>",
            f"__device__ float mix_{k}(float a, float b)",
            "{",
            "    float acc = a;",
            "#pragma unroll",
            "    for (int i = 0; i < Width; ++i) {",
            f"        acc = fmaf(acc, {scale:.4f}f, b * (float)(i + {k}));",
            "        acc = acc > 1e6f ? acc * 1e-6f : acc;",
            "    }",
            "    return acc;",
            "}",
            "",
            f"__global__ void kernel_{k}(const float *__restrict__ x, float *__restrict__ y, std::size_t n)",
            "{",
            "    const std::size_t stride = (std::size_t)gridDim.x * blockDim.x;",
            "    for (std::size_t i = (std::size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {",
            f"        float v = mix_{k}<{4 + k % 5}>(x[i], y[i]);",
            "        __shared__ float tile[256];",
            "        tile[threadIdx.x % 256] = v;",
            "        __syncthreads();",
            "        y[i] = v + tile[(threadIdx.x + 1) % 256];",
            "    }",
            "}",
            "",
            f"cudaError_t launch_{k}(const float *x, float *y, std::size_t n, cudaStream_t stream)",
            "{",
            f"    kernel_{k}<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);",
            "    return cudaGetLastError();",
            "}",
            "",
        ]
    lines += [f"}}  // namespace ninfer::engine::cuda{index:02d}", ""]
    return "\n".join(lines)


def _cxx_unit(index: int, variant: int) -> str:
    lines = ["#include <algorithm>", "#include <map>", "#include <numeric>", "#include <string>", "#include <vector>", "",
             f"namespace ninfer::engine::cxx{index:02d} {{", ""]
    for f in range(FUNCTIONS_PER_UNIT):
        lines += [
            "template <typename T>",
            f"std::vector<T> stage_{f}(const std::vector<T> &in)",
            "{",
            "    std::vector<T> out(in.size());",
            f"    std::transform(in.begin(), in.end(), out.begin(), [](T v) {{ return v * T({f + 1 + variant}) + T({index}); }});",
            "    std::sort(out.begin(), out.end());",
            "    return out;",
            "}",
            "",
            f"std::string describe_{f}(const std::map<std::string, double> &values)",
            "{",
            "    std::string text;",
            "    for (const auto &[name, value] : values) {",
            f"        text += name + '=' + std::to_string(value * {f + 2}) + ';';",
            "    }",
            f"    auto doubled = stage_{f}(std::vector<double>(values.size(), 1.5));",
            "    return text + std::to_string(std::accumulate(doubled.begin(), doubled.end(), 0.0));",
            "}",
            "",
        ]
    lines += [f"}}  // namespace ninfer::engine::cxx{index:02d}", ""]
    return "\n".join(lines)


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid", "GIT_AUTHOR_DATE": GIT_DATE, "GIT_COMMITTER_DATE": GIT_DATE}
    result = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildFailure(f"git {args[0]} failed in the bench's engine repository", file=repo, why=result.stderr[-2000:])
    return result.stdout.strip()


def make_engine_repo(repo: Path) -> str:
    """The sample runtime plus the generated translation units, committed; returns the commit."""
    from pipeline.formats.lanes import REPO_ROOT

    shutil.copytree(REPO_ROOT / "runtime" / "sample", repo, ignore=shutil.ignore_patterns("build", "build-*", "__pycache__"))
    engine = repo / "src" / "engine"
    engine.mkdir()
    for index in range(CUDA_UNITS):
        (engine / f"kernels_{index:02d}.cu").write_text(_cuda_unit(index, 0))
    for index in range(CXX_UNITS):
        (engine / f"module_{index:02d}.cpp").write_text(_cxx_unit(index, 0))
    sources = [f"src/engine/kernels_{i:02d}.cu" for i in range(CUDA_UNITS)] + [f"src/engine/module_{i:02d}.cpp" for i in range(CXX_UNITS)]
    with open(repo / "CMakeLists.txt", "a") as handle:
        handle.write("\n# The benchmark's engine-shaped sources (pipeline/dev/bench_build.py), with ninfer_core's flags.\n")
        handle.write("target_sources(ninfer_core PRIVATE\n" + "".join(f"  {s}\n" for s in sources) + ")\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "core.autocrlf", "false")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "engine-shaped sample")
    return _git(repo, "rev-parse", "HEAD")


def change_one_of_each(repo: Path) -> str:
    """One `.cu` and one `.cpp` file changed (a constant each), committed; returns the new commit."""
    engine = repo / "src" / "engine"
    (engine / f"kernels_{CUDA_UNITS // 2:02d}.cu").write_text(_cuda_unit(CUDA_UNITS // 2, 1))
    (engine / f"module_{CXX_UNITS // 2:02d}.cpp").write_text(_cxx_unit(CXX_UNITS // 2, 1))
    _git(repo, "commit", "-q", "-am", "one .cu and one .cpp changed")
    return _git(repo, "rev-parse", "HEAD")


def _build(dist: Path, repo: Path, commit: str, cache: Path | None) -> dict[str, Any]:
    from pipeline.formats.lanes import find_lane
    from pipeline.lanework.hostdeps import BUILD_PATH
    from pipeline.lanework.source import parse_source
    from pipeline.stage import Context, execute
    from pipeline.stages.build import BuildStage

    stage = BuildStage(Context.open(dist), find_lane("5090"), source=parse_source(f"{repo}@{commit}"), rehearsal=True, cache_dir=cache)
    started = time.monotonic()
    result = execute(stage, force=True)
    seconds = time.monotonic() - started
    out = dist / "rtx5090-container" / "build"
    counters = stage.cache.statistics({"PATH": os.pathsep.join(BUILD_PATH)}) if stage.cache else {}
    return {
        "seconds": round(seconds, 2),
        "binaries": {a.name.rsplit("/", 1)[-1]: a.sha256 for a in result.outputs if a.kind == "binary"},
        "identity": (out / "build-identity.json").read_bytes(),
        "counters": counters,
    }


def measure_recut_cache(work: Path, payload: Path, size: int, level: int) -> dict[str, Any]:
    from pipeline.infra import compile_cache
    from pipeline.util import ui

    root = work / "recut"
    repo = root / "engine"
    root.mkdir(mode=0o700)
    first = make_engine_repo(repo)
    cache = root / "cache"
    ui.step("bench", f"recut-compile-cache: cold build of {CUDA_UNITS} CUDA and {CXX_UNITS} C++ generated units (+ the sample's) with an empty cache")
    cold = _build(root / "dist-cold", repo, first, cache)
    second = change_one_of_each(repo)
    ui.step("bench", "recut-compile-cache: one .cu and one .cpp changed; the re-cut with the warm cache")
    warm = _build(root / "dist-warm", repo, second, cache)
    ui.step("bench", "recut-compile-cache: the same commit without a cache (today's re-cut, and the reference bytes)")
    clean = _build(root / "dist-clean", repo, second, None)
    hits, misses = compile_cache.hits_and_misses(cold["counters"], warm["counters"])
    identical = warm["binaries"] == clean["binaries"] and warm["identity"] == clean["identity"] and bool(clean["binaries"])
    ratio = round(warm["seconds"] / clean["seconds"], 3)
    return {
        "name": "recut-compile-cache",
        "what": f"build stage (configure included) of an engine-shaped tree: {CUDA_UNITS} CUDA + {CXX_UNITS} C++ generated units "
        "plus the sample's; a re-cut after one .cu and one .cpp change with the warm cache, against the same commit without a cache",
        "ours": {"tool": "build --cache (ccache)", "seconds": warm["seconds"], "cache_hits": hits, "cache_misses": misses},
        "reference": {"tool": "build without a cache", "seconds": clean["seconds"]},
        "cold_with_empty_cache": {"seconds": cold["seconds"]},
        "ratio": ratio,
        "bytes_identical_to_clean_build": identical,
        "binaries": clean["binaries"],
        "goal": f"warm re-cut <= {GOAL_RATIO}x the clean build, every binary and the build identity byte-identical",
        "summary": f"re-cut with the warm cache {warm['seconds']} s ({hits} hits, {misses} misses) against {clean['seconds']} s without "
        f"(ratio {ratio}x; cold with an empty cache {cold['seconds']} s); bytes identical: {identical}",
        "met": identical and ratio <= GOAL_RATIO,
    }


MEASUREMENTS = {"recut-compile-cache": measure_recut_cache}
