"""Library resolution from real import tables (ELF via pyelftools, PE via pefile) and RUNPATH=$ORIGIN."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from repokit import missing_dependency
from winfixtures import native_workspace

from pipeline.errors import BuildFailure, InputError
from pipeline.formats.lanes import find_lane
from pipeline.lanework.binaries import (
    inspect_binary,
    resolve_libraries,
    set_origin_runpath,
    toolchain_libraries,
    unused_candidates,
)

EXPECTED_BUNDLE = ["avcodec-61.dll", "avformat-61.dll", "avutil-59.dll", "cudart64_13.dll", "dstorage.dll", "dstoragecore.dll", "libcurl.dll"]


def _cc(*args: str | Path, cwd: Path) -> None:
    if shutil.which("gcc") is None:
        missing_dependency("gcc is not installed (Debian: apt-get install gcc; .ci/run installs g++, which brings it)")
    subprocess.run(["gcc", *map(str, args)], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def elf_pair(tmp_path_factory) -> Path:
    """A real executable linked against a real shared library, with a build-machine RPATH."""
    work = tmp_path_factory.mktemp("elf")
    (work / "greet.c").write_text('int greet(void) { return 42; }\n')
    (work / "main.c").write_text('#include <stdio.h>\nint greet(void);\nint main(void) { printf("%d\\n", greet()); return 0; }\n')
    _cc("-shared", "-fPIC", "-o", "libgreet.so.1", "-Wl,-soname,libgreet.so.1", "greet.c", cwd=work)
    (work / "libgreet.so").symlink_to("libgreet.so.1")
    _cc("-o", "app", "main.c", "-L.", "-lgreet", "-Wl,-rpath,/var/tmp/build-machine/lib:/opt/ffmpeg/lib", "-Wl,--disable-new-dtags", cwd=work)
    return work


@pytest.mark.slow
def test_elf_needed_and_rpath_are_read_and_rewritten_to_origin(elf_pair, tmp_path):
    info = inspect_binary(elf_pair / "app")
    assert info.format == "elf" and "libgreet.so.1" in info.needed and "libc.so.6" in info.needed
    assert info.rpath == ("/var/tmp/build-machine/lib", "/opt/ffmpeg/lib") and info.runpath == ()
    copies = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(elf_pair / "app", folder / "app")
        shutil.copy(elf_pair / "libgreet.so.1", folder / "libgreet.so.1")
        assert set_origin_runpath(folder / "app") is True
        after = inspect_binary(folder / "app")
        assert after.runpath == ("$ORIGIN",) and after.rpath == ()
        assert b"/var/tmp/build-machine" not in (folder / "app").read_bytes()
        copies.append(hashlib.sha256((folder / "app").read_bytes()).hexdigest())
        # $ORIGIN is real: the program finds its library beside itself, with no LD_LIBRARY_PATH.
        assert subprocess.run([folder / "app"], capture_output=True, text=True, check=True, env={}).stdout == "42\n"
    assert copies[0] == copies[1], "patchelf must be deterministic"
    assert set_origin_runpath(tmp_path / "one" / "app") is False  # already $ORIGIN: bytes untouched


@pytest.mark.slow
def test_linux_lane_resolution_bundles_toolchain_libraries_and_refuses_unknown_ones(elf_pair, tmp_path):
    lane = find_lane("5090")
    # libgreet is neither target-provided nor declared nor in any toolchain: refused by name.
    with pytest.raises(BuildFailure, match="missing library: app imports libgreet.so.1") as caught:
        resolve_libraries(lane, {"app": elf_pair / "app"})
    assert caught.value.found == "libgreet.so.1" and caught.value.file.endswith("rtx5090-container.toml")
    # The same library shipped by a (wheel-shaped) toolchain is bundled with the wheel's name and licence.
    site = tmp_path / "toolchain" / "site"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    shutil.copy(elf_pair / "libgreet.so.1", site / "nvidia" / "cu13" / "lib" / "libgreet.so.1")
    dist_info = site / "nvidia_greet-13.1.80.dist-info"
    (dist_info / "licenses").mkdir(parents=True)
    (dist_info / "licenses" / "License.txt").write_text("EULA\n")
    (dist_info / "RECORD").write_text("nvidia/cu13/lib/libgreet.so.1,sha256=x,1\nnvidia_greet-13.1.80.dist-info/RECORD,,\n")
    libraries = toolchain_libraries(tmp_path / "toolchain")
    resolution = resolve_libraries(lane, {"app": elf_pair / "app"}, toolchain=libraries)
    [bundled] = resolution.bundled()
    assert (bundled.name, bundled.origin, bundled.wheel) == ("libgreet.so.1", "toolchain-wheel", ("nvidia-greet", "13.1.80"))
    assert bundled.license_file.name == "License.txt"
    assert {lib.name: lib.provided_by for lib in resolution.provided()} == {"libc.so.6": "system"}


@pytest.mark.slow
def test_pe_imports_resolve_to_the_lane_redistributables(tmp_path_factory):
    workspace = native_workspace(tmp_path_factory)
    prebuilt = workspace.prebuilt
    info = inspect_binary(prebuilt / "ninfer-serve.exe")
    assert info.format == "pe" and info.machine == "IMAGE_FILE_MACHINE_AMD64"
    assert {"cudart64_13.dll", "dstorage.dll", "avformat-61.dll", "libcurl.dll", "KERNEL32.dll"} <= set(info.needed)
    exes = {p.name: p for p in prebuilt.glob("*.exe")}
    dlls = {p.name: p for p in prebuilt.glob("*.dll")}
    resolution = resolve_libraries(workspace.lane, exes, candidates=dlls)
    assert [lib.name for lib in resolution.bundled()] == EXPECTED_BUNDLE
    assert {lib.name.lower() for lib in resolution.provided()} == {"kernel32.dll", "msvcrt.dll", "ws2_32.dll"}
    by_name = {lib.name: lib for lib in resolution.bundled()}
    assert by_name["dstoragecore.dll"].needed_by == {"dstorage.dll"}  # loaded by name, not imported
    assert "dstoragecore.dll" in resolution.edges["dstorage.dll"]
    assert by_name["avutil-59.dll"].needed_by == {"avcodec-61.dll", "avformat-61.dll"}  # transitive
    assert (by_name["cudart64_13.dll"].origin, by_name["libcurl.dll"].license) == ("cuda-toolkit", "curl")
    assert unused_candidates(resolution, dlls, fold=True) == ["swscale-8.dll"]


@pytest.mark.slow
def test_a_bundled_dlls_version_is_read_from_its_version_resource_never_typed(tmp_path_factory, tmp_path):
    """The versions come from each DLL's VS_VERSIONINFO (windres-made here, as the real DLLs carry one);
    a lane that types one is refused, and a DLL without a version resource states none."""
    import dataclasses

    from winfixtures import VERSIONS

    from pipeline.lanework.binaries import pe_product_version, pe_version_strings

    workspace = native_workspace(tmp_path_factory)
    exes = {p.name: p for p in workspace.prebuilt.glob("*.exe")}
    dlls = {p.name: p for p in workspace.prebuilt.glob("*.dll")}
    by_name = {lib.name: lib for lib in resolve_libraries(workspace.lane, exes, candidates=dlls).bundled()}
    assert {name: lib.version for name, lib in by_name.items()} == {name: VERSIONS[name][1] for name in EXPECTED_BUNDLE}
    assert (by_name["avformat-61.dll"].version, by_name["libcurl.dll"].version) == ("7.1.2", "8.17.0")  # the pinned vcpkg baseline's
    assert pe_version_strings(dlls["avformat-61.dll"])["FileVersion"] == "61.7.100"  # the library's own version, beside FFmpeg's
    assert pe_product_version(exes["ninfer.exe"]) is None  # no version resource: none is invented
    typed = tuple(dataclasses.replace(r, version="8.11.1") if r.name == "libcurl.dll" else r for r in workspace.lane.redistributables)
    with pytest.raises(InputError, match="types the version of libcurl.dll") as caught:
        resolve_libraries(workspace.lane.with_overrides(redistributables=typed), exes, candidates=dlls)
    assert caught.value.found == "8.11.1" and "'8.17.0'" in caught.value.expected


@pytest.mark.slow
def test_a_missing_or_undeclared_dll_is_named(tmp_path_factory):
    workspace = native_workspace(tmp_path_factory)
    exes = {p.name: p for p in workspace.prebuilt.glob("*.exe")}
    dlls = {p.name: p for p in workspace.prebuilt.glob("*.dll") if p.name != "avutil-59.dll"}
    with pytest.raises(BuildFailure, match="needs avutil-59.dll, a declared redistributable, but no copy") as caught:
        resolve_libraries(workspace.lane, exes, candidates=dlls)
    assert caught.value.found == "avutil-59.dll"
    lane = workspace.lane.with_overrides(redistributables=tuple(r for r in workspace.lane.redistributables if r.name != "libcurl.dll"))
    with pytest.raises(BuildFailure, match="imports libcurl.dll, which is neither provided by the target nor a declared redistributable") as caught:
        resolve_libraries(lane, exes, candidates={p.name: p for p in workspace.prebuilt.glob("*.dll")})
    assert "the prebuilt folder holds it" in str(caught.value)


@pytest.mark.slow
def test_binaries_of_the_wrong_platform_and_non_binaries_are_refused(tmp_path_factory, elf_pair, tmp_path):
    workspace = native_workspace(tmp_path_factory)
    with pytest.raises(InputError, match="is a ELF binary, but lane rtx4090-windows-native targets windows-x86_64"):
        resolve_libraries(workspace.lane, {"ninfer.exe": elf_pair / "app"})
    text = tmp_path / "ninfer-serve"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(InputError, match="neither an ELF nor a PE binary") as caught:
        inspect_binary(text)
    assert caught.value.file == str(text)


def test_elf_imports_reads_elf_files_and_passes_over_everything_else(elf_pair, tmp_path):
    """The image stage's check of its layers goes through the same reader as package's resolution."""
    from pipeline.errors import IntegrityError
    from pipeline.lanework.binaries import elf_imports, is_elf

    info = elf_imports(elf_pair / "app")
    assert info is not None and info == inspect_binary(elf_pair / "app")
    assert info.rpath == ("/var/tmp/build-machine/lib", "/opt/ffmpeg/lib") and "libgreet.so.1" in info.needed
    script = tmp_path / "run.sh"
    script.write_bytes(b"#!/bin/sh\nexec true\n")
    assert elf_imports(script) is None and not is_elf(script) and is_elf(elf_pair / "app")
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"\x7fELF" + b"\x00" * 12)  # the magic, then nothing an ELF reader accepts
    with pytest.raises(IntegrityError, match="is not a readable ELF file"):
        elf_imports(broken)
    with pytest.raises(InputError, match="is not a readable ELF file"):
        elf_imports(broken, error=InputError)


@pytest.mark.slow
def test_directstorage_takes_the_licence_text_its_package_ships_and_a_rehearsal_alone_may_ship_the_stand_in(tmp_path_factory, capsys):
    from types import SimpleNamespace

    from pipeline.errors import RefusedError
    from pipeline.formats.lanes import REPO_ROOT
    from pipeline.stages.package import PackageStage

    workspace = native_workspace(tmp_path_factory)
    exes = {p.name: p for p in workspace.prebuilt.glob("*.exe")}
    dlls = {p.name: p for p in workspace.prebuilt.glob("*.dll")}
    given = workspace.prebuilt / "LICENSE.txt"
    stand_in = REPO_ROOT / "packaging/licenses/LicenseRef-Microsoft-DirectStorage.txt"
    real = {lib.name: lib for lib in resolve_libraries(workspace.lane, exes, candidates=dlls, licence_texts={"LICENSE.txt": given}).bundled()}
    for name in ("dstorage.dll", "dstoragecore.dll"):
        # The package's own text, shipped under the lane's licence file name (the set's names do not change).
        assert (real[name].license_file, real[name].license_stand_in, real[name].license_name) == (given, False, stand_in.name)
    assert real["libcurl.dll"].license_file.name == "curl.txt" and not real["libcurl.dll"].license_stand_in
    none_given = resolve_libraries(workspace.lane, exes, candidates=dlls)
    assert {lib.name for lib in none_given.bundled() if lib.license_stand_in} == {"dstorage.dll", "dstoragecore.dll"}
    check = PackageStage._check_licence_texts
    check(SimpleNamespace(cut=SimpleNamespace(rehearsal=True), lane=workspace.lane), none_given)  # a rehearsal: warned, shipped
    assert "a rehearsal ships the stand-in licence text" in capsys.readouterr().err
    with pytest.raises(RefusedError, match="no licence text came with dstorage.dll"):
        check(SimpleNamespace(cut=SimpleNamespace(rehearsal=False), lane=workspace.lane), none_given)
