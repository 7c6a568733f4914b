"""The build stage with the real nvcc: architectures, reproducibility, refusals, --prebuilt."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from repokit import ROOT, git, have_nvcc

from pipeline.errors import EnvironmentProblem, IntegrityError
from pipeline.formats.lanes import find_lane
from pipeline.lanework.source import parse_source
from pipeline.stage import Context, execute
from pipeline.stages.build import BuildStage


def dynamic(path: Path) -> tuple[list[str], list[str]]:
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        section = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        needed = [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        runpath = [t.runpath for t in section.iter_tags() if t.entry.d_tag == "DT_RUNPATH"]
    return needed, runpath


def build(dist: Path, lane, repo: Path, *, toolchain: str = "pinned", work: Path | None = None, force: bool = False):
    # The sample repository is not the source of the lane's current cut: a rehearsal build.
    stage = BuildStage(Context.open(dist), lane, source=parse_source(str(repo)), toolchain_mode=toolchain, work_dir=work, rehearsal=True)
    return execute(stage, force=force)


def linux_lane(arch: str):
    """The 5090 lane's recipe for another architecture (the sample builds for 86/89/120a on Linux)."""
    cc = {"86": "8.6", "89": "8.9", "90": "9.0", "120a": "12.0"}[arch]
    return find_lane("5090").with_overrides(cuda_architecture=arch, compute_capability=cc)


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.network
def test_pinned_toolchain_build_is_byte_reproducible(tmp_path, sample_repo):
    repo, commit = sample_repo
    lane = find_lane("5090")
    first = build(tmp_path / "dist-a", lane, repo, work=tmp_path / "work-a")
    second = build(tmp_path / "dist-b", lane, repo, work=tmp_path / "somewhere" / "else" / "work-b")
    hashes_a = {a.name: a.sha256 for a in first.outputs if a.kind == "binary"}
    hashes_b = {a.name: a.sha256 for a in second.outputs if a.kind == "binary"}
    assert set(hashes_a) == {"rtx5090-container/bin/ninfer", "rtx5090-container/bin/ninfer-serve"}
    assert hashes_a == hashes_b, "two clean builds into different build directories differ"
    identity_a = (tmp_path / "dist-a" / "rtx5090-container" / "build" / "build-identity.json").read_bytes()
    identity_b = (tmp_path / "dist-b" / "rtx5090-container" / "build" / "build-identity.json").read_bytes()
    assert identity_a == identity_b
    identity = json.loads(identity_a)
    assert identity["patch_stack_sha"] == commit
    assert identity["cuda_architecture"] == "120a"
    assert identity["cuda_toolkit"] == "13.1.115" and identity["toolchain"]["kind"] == "pinned"
    assert identity["toolchain"]["wheels"][0] == {
        "distribution": "nvidia-cuda-nvcc",
        "sha256": "fe5c0604869dfbc837bdce9e1eef8e4f0e0d103c29e3875014ba3538c70efb74",
        "version": "13.1.115",
    }
    assert identity["binaries"]["ninfer-serve"] == hashes_a["rtx5090-container/bin/ninfer-serve"]
    serve = tmp_path / "dist-a" / "rtx5090-container" / "build" / "bin" / "ninfer-serve"
    needed, runpath = dynamic(serve)
    assert "libcudart.so.13" in needed
    assert runpath == ["$ORIGIN"], "the build must not embed build-machine library paths"
    assert str(tmp_path).encode() not in serve.read_bytes()
    # Unchanged inputs: the stage says so and does nothing.
    again = build(tmp_path / "dist-a", lane, repo, work=tmp_path / "work-a")
    assert again.skipped


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["86", "89", "120a"])
def test_sample_builds_for_each_lane_architecture(tmp_path, sample_repo, arch):
    repo, commit = sample_repo
    toolchain = "system" if have_nvcc() else "pinned"
    result = build(tmp_path / "dist", linux_lane(arch), repo, toolchain=toolchain)
    identity = json.loads((tmp_path / "dist" / "rtx5090-container" / "build" / "build-identity.json").read_text())
    assert identity["cuda_architecture"] == arch
    assert identity["patch_stack_sha"] == commit
    assert identity["toolchain"]["kind"] == toolchain
    serve = next(a for a in result.outputs if a.attrs.get("binary") == "ninfer-serve")
    data = (tmp_path / "dist" / serve.path).read_bytes()
    from pipeline.infra.cubin import cubin_architectures

    assert cubin_architectures(data) == {f"sm_{arch}"}


def test_windows_lane_is_refused_on_linux_before_any_work(tmp_path, capsys):
    from pipeline.cli import main

    code = main(["build", "--lane", "4090", "--dist", str(tmp_path / "dist")])
    assert code == 3
    err = capsys.readouterr().err
    assert "rtx4090-windows-native" in err and "windows-x86_64" in err and "linux-x86_64" in err
    assert "release workflow" in err and "--prebuilt DIR" in err
    assert not (tmp_path / "dist" / "rtx4090-windows-native").exists()
    with pytest.raises(EnvironmentProblem):
        BuildStage(Context.open(tmp_path / "d2"), find_lane("3090"), source=parse_source(None)).preflight()


@pytest.mark.cuda
@pytest.mark.slow
def test_prebuilt_binaries_are_checked_like_a_local_build(tmp_path, sample_repo):
    repo, commit = sample_repo
    lane = find_lane("5090")
    build(tmp_path / "dist", lane, repo)
    prebuilt = tmp_path / "prebuilt"
    shutil.copytree(tmp_path / "dist" / "rtx5090-container" / "build" / "bin", prebuilt)
    # Same source: accepted, hashes recorded, route says prebuilt.
    stage = BuildStage(Context.open(tmp_path / "dist-p"), lane, source=parse_source(str(repo)), prebuilt=prebuilt, rehearsal=True)
    env_lib = Path(json.loads((tmp_path / "dist" / "rtx5090-container" / "build" / "build-identity.json").read_text())["toolchain"]["root"]) / "site" / "nvidia" / "cu13" / "lib"
    import os

    os.environ["LD_LIBRARY_PATH"] = str(env_lib)
    try:
        execute(stage)
        identity = json.loads((tmp_path / "dist-p" / "rtx5090-container" / "build" / "build-identity.json").read_text())
        assert identity["build_route"] == "prebuilt"
        assert identity["binaries"]["ninfer-serve"] == json.loads(
            (tmp_path / "dist" / "rtx5090-container" / "build" / "build-identity.json").read_text()
        )["binaries"]["ninfer-serve"]
        # Another source commit: the binaries' identity names the old commit, so they are refused.
        (repo.parent / "other").mkdir(exist_ok=True)
        other = repo.parent / "other" / "ninfer"
        if not other.exists():
            shutil.copytree(repo, other)
            (other / "NOTE.txt").write_text("a later commit\n")
            git(other, "add", "NOTE.txt")
            git(other, "commit", "-qm", "later")
        stage = BuildStage(Context.open(tmp_path / "dist-q"), lane, source=parse_source(str(other)), prebuilt=prebuilt, rehearsal=True)
        with pytest.raises(IntegrityError, match="does not match") as info:
            execute(stage)
        assert info.value.field == "patch_stack_sha"
        assert info.value.found == commit
    finally:
        os.environ.pop("LD_LIBRARY_PATH", None)


@pytest.mark.cuda
@pytest.mark.slow
def test_cli_builds_the_embedded_sample_by_default(tmp_path):
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "runtime/sample"], capture_output=True, text=True).stdout
    if dirty.strip():
        pytest.skip("runtime/sample has uncommitted changes in this checkout (the build rightly refuses them); CI uses a clean clone")
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "build", "--lane", "5090", "--dist", str(tmp_path / "dist")],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "compile [" in result.stderr and "build identity:" in result.stderr
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    identity = json.loads((tmp_path / "dist" / "rtx5090-container" / "build" / "build-identity.json").read_text())
    assert identity["patch_stack_sha"] == head and identity["source"]["kind"] == "embedded-sample"
    assert identity["source"]["subdir"] == "runtime/sample"
