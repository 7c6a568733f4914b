"""The compile cache's rules (infra/compile_cache.py) and each build's own canonical path (infra/buildns.py,
stages/build.py: compile_place, lane_lock), without compiling: the real ccache, unshare and mount where asked."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest

from pipeline.cli import main
from pipeline.errors import RefusedError, UsageError
from pipeline.infra import buildns
from pipeline.infra import compile_cache as cc
from pipeline.lanework.hostdeps import BUILD_PATH
from pipeline.stages import build

RELEASE_ENV = {"GITHUB_ACTIONS": "true", "GITHUB_WORKFLOW_REF": "omp/ninfer-release/.github/workflows/release.yml@refs/tags/v0.7.0"}


def test_the_cache_comes_from_the_option_else_the_environment_and_no_cache_wins(tmp_path, monkeypatch):
    monkeypatch.delenv(cc.CACHE_VARIABLE, raising=False)
    assert cc.requested(None) is None
    monkeypatch.setenv(cc.CACHE_VARIABLE, str(tmp_path / "env"))
    assert cc.requested(None) == tmp_path / "env"
    assert cc.requested(tmp_path / "opt") == tmp_path / "opt"
    assert cc.requested(tmp_path / "opt", disabled=True) is None


def test_the_release_workflow_refuses_a_cache_with_the_reason():
    with pytest.raises(RefusedError, match="the release workflow never uses a compile cache") as info:
        cc.refuse_where_forbidden(environ=RELEASE_ENV)
    assert "poisoned cache must never reach a release" in info.value.why
    cc.refuse_where_forbidden(environ={**RELEASE_ENV, "GITHUB_WORKFLOW_REF": "omp/x/.github/workflows/ci.yml@refs/heads/main"})
    cc.refuse_where_forbidden(environ={"GITHUB_WORKFLOW_REF": RELEASE_ENV["GITHUB_WORKFLOW_REF"]})  # not on Actions: a copy of the ref


def test_rebuild_verify_refuses_pipeline_build_cache_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cc.CACHE_VARIABLE, str(tmp_path / "cache"))
    work = tmp_path / "work"
    code = main(["rebuild", "--verify", "https://example.invalid/set/", "--lane", "5090", "--work", str(work)])
    err = capsys.readouterr().err
    assert code == 7 and "rebuild --verify never uses a compile cache" in err and f"unset {cc.CACHE_VARIABLE}" in err
    assert not work.exists() and not (tmp_path / "cache").exists()


def test_a_cache_with_prebuilt_binaries_is_a_usage_error(tmp_path):
    from pipeline.formats.lanes import find_lane
    from pipeline.lanework.source import parse_source
    from pipeline.stage import Context

    stage = build.BuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), source=parse_source(None), prebuilt=tmp_path, cache_dir=tmp_path / "c")
    with pytest.raises(UsageError, match="--cache applies to a local Linux compile only"):
        stage._check_cache_request()


def test_a_cache_folder_others_can_write_to_is_refused_before_ccache_runs(tmp_path):
    shared = tmp_path / "shared-cache"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RefusedError, match="compile cache is not private"):
        cc.prepare(shared, toolchain_description={"kind": "pinned", "lock_entry_sha256": "0" * 64}, cuda_home=tmp_path, path=BUILD_PATH, env={}, launcher=build.LAUNCHER)
    assert list(shared.iterdir()) == []


def test_the_pipeline_writes_the_whole_configuration_and_keys_entries_on_the_toolchain(tmp_path, monkeypatch):
    env = {"PATH": ":".join(BUILD_PATH), "LC_ALL": "C"}
    pinned = {"kind": "pinned", "lock_entry_sha256": "a" * 64}
    cache = cc.prepare(tmp_path / "cache", toolchain_description=pinned, cuda_home=tmp_path, path=BUILD_PATH, env=env, launcher=build.LAUNCHER)
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    text = cache.config_path.read_text()
    for line in ("compiler_check = content", f"namespace = omp-ninfer-{cache.key}", "hard_link = false", "umask = 077", "remote_storage ="):
        assert line in text.splitlines()
    # ccache itself reads exactly that file (CCACHE_CONFIGPATH: no system ccache.conf) and accepts every key.
    shown = subprocess.run([str(cache.ccache), "--show-config"], env={**env, **cache.env()}, capture_output=True, text=True, check=True).stdout
    assert re.search(rf"\({re.escape(str(cache.config_path))}\) compiler_check = content", shown)
    assert f"namespace = omp-ninfer-{cache.key}" in shown
    host = cc.host_programs(BUILD_PATH, env)
    assert host["c++:cc1plus"] and host["c++:driver"], "nvcc runs the host compiler's programs: their bytes are in the key"
    monkeypatch.setattr(cc, "host_programs", lambda _path, _env: host)  # hashed once above (some 70 MB)
    assert cc.toolchain_key(toolchain_description=pinned, cuda_home=tmp_path, path=BUILD_PATH, env=env, launcher=build.LAUNCHER) == cache.key
    other = cc.toolchain_key(toolchain_description={**pinned, "lock_entry_sha256": "b" * 64}, cuda_home=tmp_path, path=BUILD_PATH, env=env, launcher=build.LAUNCHER)
    launcher = tmp_path / "launcher.py"
    launcher.write_bytes(build.LAUNCHER.read_bytes() + b"\n")
    moved = cc.toolchain_key(toolchain_description=pinned, cuda_home=tmp_path, path=BUILD_PATH, env=env, launcher=launcher)
    assert len({cache.key, other, moved}) == 3, "another toolchain or launcher must not share entries"
    assert cache.cmake_args(["py", "launcher"])[-1] == f"-DCMAKE_CUDA_COMPILER_LAUNCHER=py;launcher;{cache.ccache}"


def test_the_callers_ccache_variables_never_reach_the_compile(tmp_path, monkeypatch):
    from pathlib import Path

    from pipeline.formats.lanes import find_lane
    from pipeline.lanework.source import parse_source
    from pipeline.stage import Context

    # CCACHE_* variables override every configuration file: a CCACHE_PREFIX would run its program before every compiler.
    hostile = {"CCACHE_PREFIX": "/bin/false", "CCACHE_DIR": str(tmp_path / "theirs"), "CCACHE_COMPILERCHECK": "none",
               "CCACHE_SLOPPINESS": "time_macros", "CCACHE_REMOTE_STORAGE": "http://127.0.0.1:9/", "CCACHE_HARDLINK": "1"}
    for name, value in hostile.items():
        monkeypatch.setenv(name, value)
    stage = build.BuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), source=parse_source(None), cache_dir=tmp_path / "cache")
    stage.source = SimpleNamespace(commit_time=0)
    tools = SimpleNamespace(nvcc=Path("/opt/cuda/bin/nvcc"), cmake=Path("/usr/bin/cmake"), ninja=Path("/usr/bin/ninja"))
    env = stage._build_env(tools)
    cache = cc.prepare(tmp_path / "cache", toolchain_description={"kind": "pinned", "lock_entry_sha256": "a" * 64}, cuda_home=tmp_path,
                       path=BUILD_PATH, env=env, launcher=build.LAUNCHER)
    env.update(cache.env())
    assert not {name for name in env if name.startswith("CCACHE_")} - set(cache.env())
    shown = dict(line.split(") ", 1)[1].split(" = ", 1) for line in subprocess.run(
        [str(cache.ccache), "--show-config"], env=env, capture_output=True, text=True, check=True).stdout.splitlines() if " = " in line)
    assert shown["prefix_command"] == "" and shown["compiler_check"] == "content" and shown["cache_dir"] == str(tmp_path / "cache")
    assert shown["sloppiness"] == "" and shown["remote_storage"] == "" and shown["hard_link"] == "false"


# -- each build's own canonical path -----------------------------------------------------------------------------

@pytest.fixture
def canonical(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CANONICAL_ROOT", tmp_path / "omp-ninfer")
    said: list[str] = []
    monkeypatch.setattr(build.ui, "info", said.append)
    return SimpleNamespace(lane=SimpleNamespace(id="lane-x"), root=tmp_path / "omp-ninfer" / "build" / "lane-x", said=said)


def test_a_build_sees_its_own_folder_at_the_canonical_path(canonical, tmp_path):
    isolation = buildns.detect(tmp_path)
    if not isolation.available:
        pytest.skip(f"no private mount namespace on this host: {isolation.reason}")
    with build.compile_place(canonical.lane, None) as place:
        assert place.src == canonical.root / "src" and place.real_src.parent == place.private
        assert stat.S_IMODE(place.private.stat().st_mode) == 0o700 and place.private.parent.name == "work"
        place.real_src.mkdir()
        (place.real_src / "marker").write_text("mine")
        seen = subprocess.run(place.command(["cat", str(canonical.root / "src" / "marker")]), capture_output=True, text=True, check=True)
        assert seen.stdout == "mine"
        assert not (canonical.root / "src").exists(), "the bind mount leaked out of the build's namespace"
    assert not place.private.exists()
    assert any("mounted at" in line for line in canonical.said)


def test_without_a_namespace_the_lane_lock_says_who_holds_it(canonical, monkeypatch):
    monkeypatch.setattr(buildns, "detect", lambda _parent: buildns.Isolation((), "unshare (util-linux) is not installed"))
    with build.compile_place(canonical.lane, None) as place:
        assert place.private is None and place.command(["true"]) == ["true"] and place.real_src == canonical.root / "src"
        def wait_for_the_lock() -> None:
            with build.lane_lock(canonical.lane):
                pass

        waiter = threading.Thread(target=wait_for_the_lock)
        waiter.start()
        deadline = time.monotonic() + 10
        while not any("waiting for another build" in line for line in canonical.said) and time.monotonic() < deadline:
            time.sleep(0.02)
    waiter.join(10)
    assert f"builds of lane-x take turns at {canonical.root}: unshare (util-linux) is not installed" in canonical.said
    assert any(re.fullmatch(r"waiting for another build of this lane: pid \d+ since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line) for line in canonical.said), canonical.said


def test_a_failed_builds_folder_is_kept_named_and_removed_by_the_next_build_of_its_lane(canonical, tmp_path, monkeypatch):
    monkeypatch.setattr(buildns, "detect", lambda _parent: buildns.Isolation(("unshare",), ""))  # the folders only, no mount
    warned: list[str] = []
    monkeypatch.setattr(build.ui, "warn", warned.append)
    with pytest.raises(RuntimeError), build.compile_place(canonical.lane, None) as place:
        raise RuntimeError("the compile failed")
    failed = place.private
    assert failed.is_dir() and any(str(failed) in line for line in warned), "kept, and the warning names it"
    work = failed.parent
    running, other_lane, young = (work / "lane-x.running", work / "lane-y.old", work / "lane-x.young")
    for folder in (running, other_lane, young):
        folder.mkdir()
    old = time.time() - 2 * buildns.PRUNE_AFTER_S
    for folder in (failed, running, other_lane):
        os.utime(folder, (old, old))
    with buildns.held(running), build.compile_place(canonical.lane, None) as place:
        assert not failed.exists() and any(f"removed {failed}" in line for line in canonical.said)
        assert running.is_dir() and other_lane.is_dir() and young.is_dir(), "a running build's, another lane's and a new folder stay"
    assert not place.private.exists()


def test_the_namespace_runs_the_systems_mount_and_shell_never_ones_from_path(tmp_path, monkeypatch):
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    for name in ("mount", "sh"):
        (decoys / name).write_text(f"#!/bin/sh\ntouch {tmp_path / ('ran-' + name)}\nexit 1\n")
        (decoys / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{decoys}:{os.environ['PATH']}")
    isolation = buildns.detect(tmp_path)
    assert not list(tmp_path.glob("ran-*")), "the probe ran a program from PATH as the namespace's root"
    if not isolation.available:
        pytest.skip(f"no private mount namespace on this host: {isolation.reason}")
    (tmp_path / "private").mkdir()
    (tmp_path / "canonical").mkdir()
    (tmp_path / "private" / "seen").write_text("")
    command = isolation.wrap(tmp_path / "private", tmp_path / "canonical", ["/usr/bin/test", "-e", str(tmp_path / "canonical" / "seen")])
    subprocess.run(command, env={"PATH": f"{decoys}:/usr/bin:/bin"}, check=True)
    assert not list(tmp_path.glob("ran-*")), "a program from PATH ran as the namespace's root"
