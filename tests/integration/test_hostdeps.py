"""Build-host dependencies: lane data, the source's own declaration, the preflight and what is recorded.

The checks run the host's real pkg-config and dpkg-query (installed by .ci/run:
pkg-config and zlib1g-dev), so every recorded version is compared with what
those tools print themselves.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import hostlibkit
import pytest
from repokit import SAMPLE, edited_lane, make_repo

from pipeline.errors import EnvironmentProblem, InputError, UsageError
from pipeline.formats import host_dependencies as declaration
from pipeline.formats.lanes import DEFAULT_LANES_DIR, HostDependency, find_lane, load_lane
from pipeline.lanework import hostdeps, hostlibs
from pipeline.lanework.hostdeps import BUILD_PATH
from pipeline.lanework.source import parse_source
from pipeline.stage import Context, execute
from pipeline.stages.build import BuildStage
from pipeline.util.hashing import sha256_file

ABSENT = "omp-ninfer-absent-module"


def _tool_output(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout.strip()


# -- the lane data -------------------------------------------------------------------


def test_shipped_lanes_declare_the_engines_pkg_config_modules_with_their_floors_and_origins():
    lane = find_lane("5090")
    declared = {d.name: d for d in lane.host_dependencies}
    assert {n: d.min_version for n, d in declared.items() if d.kind == "pkg-config"} == {
        "libavformat": "60",
        "libavcodec": "60.31",  # FFmpeg 6.1: the API decode.cpp uses (CMake itself checks only 60)
        "libavutil": "58",
        "libswscale": "7",
        "libcurl": "7.85",
    }
    assert declared["pkg-config"].kind == "tool" and declared["c++"].debian == "g++"
    assert declared["libcurl"].debian == "libcurl4-openssl-dev" and declared["libavcodec"].vcpkg == "ffmpeg[avcodec]"
    for short in ("4090", "3090"):
        windows = {d.name: d for d in find_lane(short).host_dependencies}
        assert windows["pkgconf"].vcpkg == "pkgconf" and windows["libavformat"].vcpkg == "ffmpeg[avformat]"
        assert all(d.vcpkg for d in windows.values())


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ('debian = "libcurl4-openssl-dev"\n', 'debian = "libcurl4-openssl-dev"\ncolour = "red"\n', "build.host_dependencies[6].colour", "unknown key"),
        ('debian = "libcurl4-openssl-dev"\n', "", "build.host_dependencies[6].debian", "does not say where the dependency comes from"),
        ('kind = "pkg-config"\nmin_version = "7.85"', 'kind = "cmake"\nmin_version = "7.85"', "build.host_dependencies[6].kind", "invalid value"),
        ('min_version = "7.85"', 'min_version = "seven"', "build.host_dependencies[6].min_version", "invalid value"),
        ('name = "libcurl"', 'name = "libavutil"', "build.host_dependencies[6].name", "declares a host dependency twice"),
        ('name = "pkg-config"\nkind = "tool"', 'name = "pkgconfig-helper"\nkind = "tool"', "build.host_dependencies[2]", "not the pkg-config tool itself"),
        # The compiler nvcc's host code goes through: without it nothing records (or compares on rebuild) its version.
        ('name = "c++"\nkind = "tool"', 'name = "cc"\nkind = "tool"', "build.host_dependencies", "does not declare the build host's C++ compiler"),
    ],
)
def test_host_dependency_errors_name_file_key_found_and_expected(tmp_path, old, new, field, message):
    path = edited_lane(tmp_path, "rtx5090-container", old, new)
    with pytest.raises(InputError) as info:
        load_lane(path)
    assert info.value.field == field
    assert message in info.value.what
    assert "rtx5090-container.toml" in info.value.render()


def test_a_windows_lane_needs_a_vcpkg_port_for_every_entry(tmp_path):
    path = edited_lane(tmp_path, "rtx4090-windows-native", 'vcpkg = "curl"\n', "")
    with pytest.raises(InputError, match="does not say where the dependency comes from on the lane's windows-x86_64") as info:
        load_lane(path)
    assert info.value.field.endswith(".vcpkg")


def test_the_sample_declares_only_its_host_compiler():
    deps = declaration.parse((SAMPLE / declaration.FILE_NAME).read_bytes(), origin="sample")
    assert [(d.name, d.kind, d.debian, d.hosts) for d in deps] == [("c++", "tool", "g++", ("linux-x86_64",))]
    with pytest.raises(InputError, match="unknown key") as info:
        declaration.parse(b"schema_version = 1\nhost_dependencies = []\nextra = 1\n", origin="x.toml")
    assert info.value.field == "extra"
    with pytest.raises(InputError, match="LF line endings"):
        declaration.parse(b"schema_version = 1\r\nhost_dependencies = []\r\n", origin="x.toml")
    # A source's declaration replaces the lane's for the lane's build host: a Linux build declares its compiler there too.
    assert declaration.parse((SAMPLE / declaration.FILE_NAME).read_bytes(), origin="sample", build_host="linux-x86_64") == deps
    with pytest.raises(InputError, match="does not declare the build host's C\\+\\+ compiler"):
        declaration.parse(b"schema_version = 1\nhost_dependencies = []\n", origin="x.toml", build_host="linux-x86_64")


# -- the probe (the host's real pkg-config and dpkg) ----------------------------------


def test_present_module_and_tools_are_recorded_with_the_versions_the_tools_print():
    deps = (HostDependency("pkg-config", "tool", "0.29", "pkg-config"), HostDependency("zlib", "pkg-config", "1.2", "zlib1g-dev"), HostDependency("c++", "tool", "10", "g++"))
    check = hostdeps.check(deps, host="linux-x86_64", declared_by="test", declaration_file="t.toml", path=list(BUILD_PATH))
    found = {item["name"]: item for item in check.dependencies_json()}
    assert found["zlib"]["version"] == _tool_output("pkg-config", "--modversion", "zlib")
    pc_file = Path(_tool_output("pkg-config", "--variable=pcfiledir", "zlib")) / "zlib.pc"
    assert found["zlib"]["file"] == "zlib.pc" and found["zlib"]["file_sha256"] == sha256_file(pc_file)  # by name and hash, never its folder
    owner = _tool_output("dpkg-query", "-S", str(pc_file)).split(":", 1)[0]
    assert found["zlib"]["debian_package"] == owner == "zlib1g-dev" and found["zlib"]["origin"] == "debian"
    [libz] = found["zlib"]["libraries"]  # zlib.pc's Libs: -lz, in its libdir, with the soname the linker records
    assert libz["soname"] == "libz.so.1" and libz["file"].startswith("libz.so.1.")
    assert found["zlib"]["debian_version"] == _tool_output("dpkg-query", "-W", "-f=${Version}", "zlib1g-dev")
    assert found["pkg-config"]["version"] == _tool_output("pkg-config", "--version")
    assert found["c++"]["file"] == shutil.which("c++", path=":".join(BUILD_PATH)) and found["c++"]["origin"] == "debian"
    assert found["c++"]["version"] in _tool_output("c++", "--version").splitlines()[0]
    assert check.pkg_config == "/usr/bin/pkg-config"
    assert check.environment_json()["pkg_config_explicit_folders"] == 0 and check.build_env() == {}
    assert check.cmake_args() == ["-DPKG_CONFIG_EXECUTABLE=/usr/bin/pkg-config"]


def test_missing_and_too_old_dependencies_are_named_together_with_one_install_command():
    deps = (
        HostDependency("pkg-config", "tool", None, "pkg-config"),
        HostDependency("zlib", "pkg-config", "99", "zlib1g-dev", declared_at="build.host_dependencies[1]"),
        HostDependency(ABSENT, "pkg-config", None, "libabsent-dev", declared_at="build.host_dependencies[2]"),
        HostDependency("omp-ninfer-absent-tool", "tool", None, "absent-tool", declared_at="build.host_dependencies[3]"),
    )
    with pytest.raises(EnvironmentProblem) as info:
        hostdeps.check(deps, host="linux-x86_64", declared_by="test", declaration_file="lane.toml", path=list(BUILD_PATH))
    error = info.value
    assert "lacks 3 declared host dependencies" in error.what
    assert error.field == "build.host_dependencies[3]"  # tools are checked first
    assert "zlib is " in str(error.found) and "older than the floor 99" in str(error.found)
    assert f"pkg-config finds no module {ABSENT}" in str(error.found)
    assert "run 'apt-get install absent-tool libabsent-dev zlib1g-dev'" in error.render()
    assert "--pkg-config-path" in error.render()
    vcpkg = hostdeps.install_command([HostDependency("libcurl", "pkg-config", None, None, "curl")], "windows-x86_64")
    assert vcpkg == "vcpkg install curl:x64-windows"


def test_modules_are_found_only_through_the_explicit_search_path_never_the_inherited_one(tmp_path, monkeypatch):
    prefix = tmp_path / "prefix" / "lib" / "pkgconfig"
    prefix.mkdir(parents=True)
    (prefix / "ompfake.pc").write_text("prefix=/opt/ompfake\nlibdir=${prefix}/lib\n\nName: ompfake\nDescription: test\nVersion: 3.4.5\n")
    deps = (HostDependency("pkg-config", "tool", None, "pkg-config"), HostDependency("ompfake", "pkg-config", "3.4", "ompfake-dev"))
    monkeypatch.setenv("PKG_CONFIG_PATH", str(prefix))  # what a caller's shell might hold: must not count
    with pytest.raises(EnvironmentProblem, match="ompfake"):
        hostdeps.check(deps, host="linux-x86_64", declared_by="t", declaration_file="t", path=list(BUILD_PATH), base_env={"PKG_CONFIG_PATH": str(prefix)})
    check = hostdeps.check(deps, host="linux-x86_64", declared_by="t", declaration_file="t", path=list(BUILD_PATH), pkg_config_path=hostdeps.parse_search_path([str(prefix)]))
    item = next(f for f in check.found if f.dependency.name == "ompfake")
    assert item.version == "3.4.5" and item.path == str(prefix / "ompfake.pc")
    assert item.debian_package is None and item.debian_version is None  # no Debian package owns it
    assert check.build_env() == {"PKG_CONFIG_PATH": str(prefix)}
    assert check.library_dirs() == ["/opt/ompfake/lib"]
    with pytest.raises(UsageError, match="existing absolute folder"):
        hostdeps.parse_search_path(["relative/dir"])
    # A Version that is no version word is refused by name, not recorded into the identity and the purls.
    (prefix / "ompfake.pc").write_text("prefix=/opt/ompfake\n\nName: ompfake\nDescription: test\nVersion: 3.4.5&qualifier=x/../y\n")
    with pytest.raises(EnvironmentProblem, match="states a Version that is not a version"):
        hostdeps.check(deps, host="linux-x86_64", declared_by="t", declaration_file="t", path=list(BUILD_PATH), pkg_config_path=hostdeps.parse_search_path([str(prefix)]))


# -- the build preflight ---------------------------------------------------------------


@pytest.fixture(scope="module")
def undeclared_repo(tmp_path_factory) -> tuple[Path, str]:
    """The sample shaped like the NInfer engine (hostlibkit: no RPATH settings of its own, `ninfer` links libavutil
    through pkg-config) and, like it, without its own declaration: the lane's declaration applies."""
    source = hostlibkit.engine_shaped_sample(tmp_path_factory.mktemp("undeclared") / "copy")
    (source / declaration.FILE_NAME).unlink()
    repo = source.parent / "ninfer"
    return repo, make_repo(repo, source)


def test_build_refuses_a_missing_lane_dependency_before_any_compile(tmp_path, undeclared_repo, monkeypatch):
    repo, _commit = undeclared_repo
    lanes = edited_lane(
        tmp_path,
        "rtx5090-container",
        'name = "libavformat"',
        f'name = "{ABSENT}"',
    ).parent
    lane = find_lane("5090", lanes)
    calls: list = []
    monkeypatch.setattr(BuildStage, "_compile", lambda self, *a: calls.append(a))
    from pipeline.cli import main

    # The copied repository is no cut's commit: a rehearsal (the host check comes before any compile either way).
    code = main(["build", "--lane", "5090", "--source", str(repo), "--rehearsal", "--dist", str(tmp_path / "dist"), "--lanes-dir", str(lanes)])
    assert code == 3 and calls == []
    assert not (tmp_path / "dist" / lane.id / "build").exists()
    with pytest.raises(EnvironmentProblem) as info:
        execute(BuildStage(Context.open(tmp_path / "d2"), lane, source=parse_source(str(repo)), rehearsal=True))
    assert info.value.field == "build.host_dependencies[2]"
    assert str(info.value.file).endswith("rtx5090-container.toml")
    assert ABSENT in info.value.what and "apt-get install" in info.value.render()


def test_the_sources_own_declaration_replaces_the_lanes(tmp_path, sample_repo):
    repo, _commit = sample_repo
    stage = BuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), source=parse_source(str(repo)), rehearsal=True)
    stage.preflight()  # the lane's FFmpeg/libcurl are not asked for: the sample needs only c++
    assert stage.host_check is not None
    assert stage.host_check.declared_by == "source:host-dependencies.toml"
    assert [f.dependency.name for f in stage.host_check.found] == ["c++"]
    inputs = stage.inputs()
    assert inputs["host_dependencies"][0]["name"] == "c++"
    assert inputs["host_environment"]["PATH"] == list(BUILD_PATH)


def test_cli_rejects_a_relative_pkg_config_folder(tmp_path, capsys):
    from pipeline.cli import main

    assert main(["build", "--lane", "5090", "--pkg-config-path", "lib/pkgconfig", "--dist", str(tmp_path / "d")]) == 2
    assert "--pkg-config-path" in capsys.readouterr().err


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory) -> tuple[Path, Path]:
    """The same local libavutil (hostlibkit: it embeds its configure line, prefix included) installed under two
    prefixes of different lengths (their pkgconfig folders)."""
    root = tmp_path_factory.mktemp("local-ffmpeg")
    return (
        hostlibkit.install_avutil(root / "opt" / "ffmpeg-7.1.5", root / "work-a"),
        hostlibkit.install_avutil(root / "home" / "maintainer" / "prefixes" / "ff", root / "work-b"),
    )


_LINKER_PROJECT = """cmake_minimum_required(VERSION 3.25)
project(hostlib_link C)
find_package(PkgConfig REQUIRED)
pkg_check_modules(AVUTIL REQUIRED IMPORTED_TARGET libavutil)
add_executable(app main.c)
target_link_libraries(app PRIVATE PkgConfig::AVUTIL)
"""


def _link_from(prefix_pc: Path, project: Path, extra: tuple[str, ...]) -> bytes:
    """`app` linked through pkg-config against the libavutil of `prefix_pc`, configured with `extra` (one build folder)."""
    build = project / "build"
    if build.exists():
        shutil.rmtree(build)
    env = {"PATH": ":".join(BUILD_PATH), "PKG_CONFIG_PATH": str(prefix_pc), "LC_ALL": "C.UTF-8", "HOME": str(project)}
    subprocess.run(["cmake", "-S", str(project), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", *extra], env=env, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], env=env, check=True, capture_output=True)
    return (build / "app").read_bytes()


def test_binaries_linked_with_the_pipelines_rpath_settings_are_the_same_under_any_library_prefix(tmp_path, local_prefixes):
    """What the build gives CMake (RPATH_CMAKE_ARGS): a project that sets no RPATH of its own (as the engine) links the
    same bytes against the same library under prefixes of different lengths; without them, CMake's build RUNPATH
    carries the prefix, which the package would refuse (naming the file and section), never rewrite."""
    from pipeline.errors import BuildFailure
    from pipeline.lanework import binaries
    from pipeline.stages.build import RPATH_CMAKE_ARGS

    if shutil.which("cmake", path=":".join(BUILD_PATH)) is None or shutil.which("ninja", path=":".join(BUILD_PATH)) is None:
        pytest.skip("cmake and ninja from Debian are needed (.ci/run installs them)")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(_LINKER_PROJECT)
    (project / "main.c").write_text("#include <stdio.h>\n#include <libavutil/avutil.h>\nint main(void) { printf(\"%u\\n\", avutil_version()); return 0; }\n")
    ours = [_link_from(pc, project, RPATH_CMAKE_ARGS) for pc in local_prefixes]
    assert ours[0] == ours[1]
    for index, pc in enumerate(local_prefixes):
        app = tmp_path / f"ours-{index}"
        app.write_bytes(ours[index])
        assert binaries.inspect_binary(app).runpath == ("$ORIGIN",)
        binaries.require_linked_origin_runpath(app)
        assert binaries.host_paths_in_elf(app, [str(pc.parent.parent)]) == []
    # CMake's own default: the prefix in RUNPATH, so the binaries differ; refused by name of file and section.
    plain = [_link_from(pc, project, ()) for pc in local_prefixes]
    assert plain[0] != plain[1]
    app = tmp_path / "plain"
    app.write_bytes(plain[0])
    prefix = str(local_prefixes[0].parent.parent)
    with pytest.raises(BuildFailure, match="not linked with RUNPATH=\\$ORIGIN") as refused:
        binaries.require_linked_origin_runpath(app)
    assert refused.value.file == str(app) and prefix in str(refused.value.found) and "DT_RUNPATH" in str(refused.value.field)
    with pytest.raises(BuildFailure, match="a path of this build host") as found:
        binaries.refuse_host_paths(app, [prefix])
    assert ".dynstr" in str(found.value.field) and f".dynstr: {prefix}" in str(found.value.found)


def _declaring_lanes(root: Path, base_image_libraries: str) -> Path:
    """A 5090 lane declaring the compiler, pkg-config, zlib (Debian's) and libavutil (a local build), with those base image libraries."""
    lanes = root / "lanes"
    lanes.mkdir()
    text = (DEFAULT_LANES_DIR / "rtx5090-container.toml").read_text()
    head, sep, tail = text.partition("[[build.host_dependencies]]")
    tail = tail[tail.index("\n[package]\n"):]
    # a registry base's typed libraries (the lane file derives them from its package base's lock instead)
    typed = f'base_image_libraries = ["libcudart.so.13", "libavformat.so.60", "libavcodec.so.60", {base_image_libraries}, "libswscale.so.7", "libcurl.so.4"]'
    assert 'base_image = "containers/' in tail
    tail = re.sub(r'(?m)^base_image = "containers/[^"]+"$', typed, tail)
    (lanes / "rtx5090-container.toml").write_text(
        head
        + '[[build.host_dependencies]]\nname = "pkg-config"\nkind = "tool"\ndebian = "pkg-config"\nlicense = "GPL-2.0-or-later"\n\n'
        + '[[build.host_dependencies]]\nname = "c++"\nkind = "tool"\ndebian = "g++"\nlicense = "GPL-3.0-or-later"\n\n'
        + '[[build.host_dependencies]]\nname = "zlib"\nkind = "pkg-config"\nmin_version = "1.2"\ndebian = "zlib1g-dev"\nlicense = "Zlib"\n\n'
        + '[[build.host_dependencies]]\nname = "libavutil"\nkind = "pkg-config"\nmin_version = "59"\ndebian = "libavutil-dev"\n'
        + tail
    )
    return lanes


def _build(root: Path, repo: Path, lanes: Path, pkgconfig: Path) -> Path:
    from repokit import have_nvcc

    lane = find_lane("5090", lanes)
    stage = BuildStage(Context.open(root / "dist", lanes), lane, source=parse_source(str(repo)), toolchain_mode="system" if have_nvcc() else "pinned",
                       work_dir=root / "work", rehearsal=True, pkg_config_path=hostdeps.parse_search_path([str(pkgconfig)]))
    execute(stage)
    return root / "dist"


@pytest.fixture(scope="module")
def lane_declared_build(tmp_path_factory, undeclared_repo, local_prefixes) -> tuple[Path, Path, Path]:
    """(dist, work, lanes): a real build of the undeclared sample whose lane declares pkg-config, zlib and the local
    libavutil of the first prefix (a rehearsal)."""
    repo, _commit = undeclared_repo
    root = tmp_path_factory.mktemp("lane-declared")
    lanes = _declaring_lanes(root, '"libavutil.so.59"')
    return _build(root, repo, lanes, local_prefixes[0]), root / "work", lanes


@pytest.fixture(scope="module")
def two_prefix_sets(tmp_path_factory, undeclared_repo, local_prefixes, lane_declared_build) -> tuple[Path, Path]:
    """The packaged sets (dist folders) of the same build against the same local library under two prefixes."""
    from pipeline.stages.package import package_lane

    repo, _commit = undeclared_repo
    built, _work, lanes = lane_declared_build
    root = tmp_path_factory.mktemp("second-prefix")
    second = _build(root, repo, lanes, local_prefixes[1])
    first = root / "first-dist"
    shutil.copytree(built, first)
    for dist in (first, second):
        package_lane("5090", dist=dist, lanes_dir=lanes)
    return first, second


def test_a_lane_naming_another_soname_than_the_host_library_gives_is_refused_before_any_compile(tmp_path, undeclared_repo, local_prefixes, monkeypatch):
    repo, _commit = undeclared_repo
    lanes = _declaring_lanes(tmp_path, '"libavutil.so.58"')  # FFmpeg 6's libavutil; the host's is FFmpeg 7's .so.59
    calls: list = []
    monkeypatch.setattr(BuildStage, "_compile", lambda self, *a: calls.append(a))
    stage = BuildStage(Context.open(tmp_path / "dist", lanes), find_lane("5090", lanes), source=parse_source(str(repo)), rehearsal=True,
                       pkg_config_path=hostdeps.parse_search_path([str(local_prefixes[0])]))
    with pytest.raises(EnvironmentProblem) as info:
        execute(stage)
    assert calls == [] and info.value.field == "package.base_image_libraries"
    assert "libavutil 59.39.100 gives libavutil.so.59, the lane names libavutil.so.58" in str(info.value.found)
    assert "libavutil.so.59 together with a base image" in info.value.render()


def test_a_local_library_is_recorded_by_origin_release_licence_and_hashes_never_by_its_folder(local_prefixes):
    deps = (HostDependency("pkg-config", "tool", None, "pkg-config"), HostDependency("libavutil", "pkg-config", "59", "libavutil-dev", "ffmpeg"))
    recorded = []
    for pkgconfig in local_prefixes:
        check = hostdeps.check(deps, host="linux-x86_64", declared_by="t", declaration_file="t", path=list(BUILD_PATH), pkg_config_path=(str(pkgconfig),))
        recorded.append(json.dumps(check.dependencies_json(), sort_keys=True))
        [avutil] = [d for d in check.dependencies_json() if d["name"] == "libavutil"]
        assert avutil["origin"] == "local" and avutil["debian_package"] is None and avutil["vcpkg"] is None  # never vcpkg on Linux
        assert avutil["release"] == {"project": "FFmpeg", "version": hostlibkit.RELEASE, "source": "libavutil/ffversion.h FFMPEG_VERSION"}
        assert (avutil["license"], avutil["license_source"]) == ("LGPL-2.1-or-later", "self-reported: avutil_license()")  # what the library says, through ctypes
        real = pkgconfig.parent / "libavutil.so.59.39.100"
        # By its link interface (soname, exported symbols), not the file: its configure line names the prefix.
        assert avutil["libraries"] == [{"file": real.name, "soname": "libavutil.so.59", "link_sha256": hostlibs.link_digest(real)}]
        assert avutil["file"] == "libavutil.pc" and avutil["file_sha256"] != sha256_file(pkgconfig / "libavutil.pc")  # its prefix relocated
        assert str(pkgconfig.parent.parent) not in json.dumps(check.dependencies_json()) + json.dumps(check.environment_json())
        assert check.library_dirs() == [str(pkgconfig.parent)]  # where the binaries are run from: used, not recorded
    assert recorded[0] == recorded[1]
    # The two installs are not copies: the files differ, as two FFmpeg installs do (each names its own prefix).
    files = [(pkgconfig.parent / hostlibkit.REAL_NAME).read_bytes() for pkgconfig in local_prefixes]
    assert files[0] != files[1] and all(str(p.parent.parent).encode() in f for p, f in zip(local_prefixes, files, strict=True))


@pytest.mark.cuda
@pytest.mark.slow
def test_a_lane_declared_module_is_checked_and_its_version_recorded_in_the_build_identity(lane_declared_build):
    dist, work, lanes = lane_declared_build
    lane = find_lane("5090", lanes)
    identity = json.loads((dist / lane.id / "build" / "build-identity.json").read_text())
    zlib = next(d for d in identity["host_dependencies"] if d["name"] == "zlib")
    assert zlib["version"] == _tool_output("pkg-config", "--modversion", "zlib")
    assert zlib["debian_package"] == "zlib1g-dev"
    assert zlib["debian_version"] == _tool_output("dpkg-query", "-W", "-f=${Version}", "zlib1g-dev")
    assert identity["host_environment"]["declared_by"] == "lane:rtx5090-container.toml"
    assert identity["host_environment"]["pkg_config"] == "/usr/bin/pkg-config"
    # CMake was given the pkg-config the preflight checked, not whatever its own search finds.
    # (FindPkgConfig, which the engine-shaped sample calls, types the variable it was given.)
    assert re.search(r"^PKG_CONFIG_EXECUTABLE:(UNINITIALIZED|FILEPATH)=/usr/bin/pkg-config$", (work / "CMakeCache.txt").read_text(), re.MULTILINE)


@pytest.mark.cuda
@pytest.mark.slow
def test_the_sets_spdx_and_cyclonedx_name_the_declared_host_dependencies_alike(two_prefix_sets, lane_declared_build):
    """Packaged, the build's host dependencies are in both SBOMs, as the same components (sbomkit)."""
    import sbomkit
    from packageurl import PackageURL

    from pipeline.formats import sbom
    from pipeline.formats.assets import asset_set

    dist, _ = two_prefix_sets
    lanes = lane_declared_build[2]
    lane = find_lane("5090", lanes)
    identity = json.loads((dist / lane.id / "build" / "build-identity.json").read_text())
    expected = asset_set(lane, identity["cut"]["n"])
    spdx_path, cdx_path = (dist / lane.id / "assets" / expected.name_of(role) for role in ("spdx", "cdx"))
    spdx, cdx = json.loads(spdx_path.read_bytes()), json.loads(cdx_path.read_bytes())
    distribution = identity["host_environment"]["os_release"]["ID"]
    recorded = {d["name"]: d for d in identity["host_dependencies"]}
    assert set(recorded) == {"c++", "pkg-config", "zlib", "libavutil"}
    packages = {p["name"]: p for p in spdx["packages"]}
    components = {c["name"]: c for c in cdx["components"]}
    relations = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"]) for r in spdx["relationships"]}
    for name, entry in recorded.items():
        package, component = packages[name], components[name]
        assert package["versionInfo"] == component["version"] == entry["version"]
        assert (package["SPDXID"], "BUILD_DEPENDENCY_OF", sbom.SPDX_PACKAGE_ID) in relations and component["scope"] == "excluded"
        assert package["licenseDeclared"] == entry["license"] and [x["license"]["id"] for x in component["licenses"]] == [entry["license"]]
        if name == "libavutil":
            continue
        owner = entry["debian_package"]  # what dpkg-query -S said owns the file (checked by the probe tests above)
        assert owner and entry["debian_version"] and entry["origin"] == "debian"
        purl = PackageURL.from_string(component["purl"])
        assert (purl.type, purl.namespace, purl.name, purl.version) == ("deb", distribution, owner, entry["debian_version"])
        assert [r["referenceLocator"] for r in package["externalRefs"] if r["referenceType"] == "purl"] == [component["purl"]]
        assert package["supplier"] == f"Organization: {component['supplier']['name']}" == f"Organization: {distribution.capitalize()} (package {owner})"
    assert (recorded["zlib"]["license"], recorded["zlib"]["license_source"]) == ("Zlib", "declared")
    # The local FFmpeg: no package purl, the build host as supplier, its release, licence and files' SHA-256 in both documents.
    local, avutil = components["libavutil"], packages["libavutil"]
    assert "purl" not in local and not [r for r in avutil.get("externalRefs", []) if r["referenceType"] == "purl"]
    assert local["supplier"]["name"] == "the build host (a local build: no package owns it)" and avutil["licenseDeclared"] == "LGPL-2.1-or-later"
    properties = {p["name"].rsplit(":", 1)[-1] if "file-sha256" not in p["name"] else p["name"].split("file-sha256:", 1)[1]: p["value"] for p in local["properties"]}
    assert properties["origin"] == "local" and properties["release"] == f"FFmpeg {hostlibkit.RELEASE}"
    assert properties["libavutil.so.59.39.100"] == recorded["libavutil"]["libraries"][0]["link_sha256"]
    assert f"release FFmpeg {hostlibkit.RELEASE}" in avutil["comment"] and "libavutil.so.59.39.100 " in avutil["comment"]
    assert components["zlib"]["version"] == _tool_output("pkg-config", "--modversion", "zlib")
    # Component by component the two documents agree, and each passes its independent checker.
    assert sbomkit.compare_twins(spdx_path, cdx_path) == len(spdx["packages"])
    sbomkit.require_ntia(spdx_path)
    sbomkit.require_cdx_js(cdx_path)
    # The provenance beside the set names the same versions.
    from pipeline.formats import provenance as slsa

    statement = slsa.read_statement((dist / lane.id / slsa.FOLDER / slsa.set_statement_name(expected.package_root)).read_bytes(), origin="s")
    for name, entry in recorded.items():
        host = statement.dependency(f"build-host:{entry['kind']}:{name}")
        assert host["annotations"]["version"] == entry["version"] and host["annotations"]["origin"] == entry["origin"]
        assert host["uri"] == components[name].get("purl", f"pkg:generic/{name}@{entry['version']}")
    avutil_host = statement.dependency("build-host:pkg-config:libavutil")
    assert avutil_host["digest"] == {"sha256": recorded["libavutil"]["file_sha256"]} and avutil_host["annotations"]["release_version"] == hostlibkit.RELEASE


@pytest.mark.cuda
@pytest.mark.slow
def test_the_same_local_library_under_two_prefixes_gives_byte_identical_sets_and_statements(two_prefix_sets, local_prefixes):
    from pipeline.formats import provenance as slsa

    first, second = two_prefix_sets
    lane = "rtx5090-container"
    names = sorted(p.name for p in (first / lane / "assets").iterdir())
    assert names == sorted(p.name for p in (second / lane / "assets").iterdir()) and len(names) == 7
    for name in names:
        assert (first / lane / "assets" / name).read_bytes() == (second / lane / "assets" / name).read_bytes(), name
    [statement] = list((first / lane / slsa.FOLDER).iterdir())
    assert statement.read_bytes() == (second / lane / slsa.FOLDER / statement.name).read_bytes()
    # No trace of either prefix in anything that ships: the set's files (the package's members too) and the statement.
    import tarfile

    shipped = [statement.read_bytes(), *((first / lane / "assets" / n).read_bytes() for n in names)]
    from pipeline.formats.assets import asset_set

    package = asset_set(find_lane("5090"), json.loads((first / lane / "build" / "build-identity.json").read_bytes())["cut"]["n"]).name_of("package")
    with tarfile.open(first / lane / "assets" / package) as archive:
        shipped += [archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()]
    for pkgconfig in local_prefixes:
        prefix = str(pkgconfig.parent.parent).encode()
        assert not [data[:80] for data in shipped if prefix in data]
    # The same in the build identity of each build, before packaging.
    identities = [(d / lane / "build" / "build-identity.json").read_bytes() for d in two_prefix_sets]
    assert identities[0] == identities[1]
    assert not [p for p in local_prefixes if str(p.parent.parent).encode() in identities[0]] and b"local-ffmpeg" not in identities[0]


def _published(dist: Path, into: Path) -> Path:
    """The set of `dist` as a maintainer publishes it: its files and the statement beside them."""
    from pipeline.formats import provenance as slsa

    lane = "rtx5090-container"
    shutil.copytree(dist / lane / "assets", into)
    for statement in (dist / lane / slsa.FOLDER).iterdir():
        shutil.copyfile(statement, into / statement.name)
    return into


@pytest.mark.cuda
@pytest.mark.slow
def test_a_set_built_against_one_prefix_is_rebuilt_bit_for_bit_against_the_same_release_under_another(two_prefix_sets, local_prefixes, lane_declared_build, tmp_path):
    """An outsider with the same libavutil release under another prefix of another length: PASSED; with another build of
    it (one more exported function: another link interface) refused in the preflight, in seconds, before any compile."""
    import time

    from repokit import have_nvcc

    from pipeline.stages.rebuild import rebuild_verify

    first, _second = two_prefix_sets
    lanes = lane_declared_build[2]
    published = _published(first, tmp_path / "download")
    toolchain = "system" if have_nvcc() else "pinned"
    outcome = rebuild_verify(str(published), lane_name="5090", lanes_dir=lanes, work=tmp_path / "w", toolchain=toolchain,
                             pkg_config_path=[str(local_prefixes[1])], use_diffoscope=False)
    assert outcome.passed, [c.detail for c in outcome.checks if not c.ok] + outcome.differing + outcome.differing_members
    other = hostlibkit.install_avutil(tmp_path / "p", tmp_path / "other-build", extra_source='extern "C" int av_other(void) { return 1; }\n')
    started = time.monotonic()
    with pytest.raises(EnvironmentProblem) as refused:
        rebuild_verify(str(published), lane_name="5090", lanes_dir=lanes, work=tmp_path / "w2", toolchain=toolchain, pkg_config_path=[str(other)], use_diffoscope=False)
    assert time.monotonic() - started < 60 and not (tmp_path / "w2" / "dist" / "rtx5090-container" / "build" / "bin").exists()
    error = refused.value
    recorded = hostlibs.link_digest(local_prefixes[0].parent / hostlibkit.REAL_NAME)
    here = hostlibs.link_digest(other.parent / hostlibkit.REAL_NAME)
    assert recorded != here and f"libavutil (pkg-config): recorded libraries {hostlibkit.REAL_NAME}" in str(error.found)
    assert recorded in str(error.found) and here in str(error.found) and "build-identity.json" in error.why
    assert error.fix.count("--pkg-config-path") == 1
