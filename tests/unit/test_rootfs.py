"""The merged root file system of an image (pipeline/infra/rootfs.py): layers applied in order, whiteouts,
opaque folders, links followed like the kernel, and where the dynamic loader looks."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from pipeline.errors import IntegrityError
from pipeline.infra import oci
from pipeline.infra.rootfs import DEFAULT_LIBRARY_DIRS, RootFS


def _layer(path: Path, members: list[tuple[str, str, bytes | str]], *, compress: bool = True) -> Path:
    """A layer blob: (kind, name, data or link target) with kind file | exe | dir | sym | hard."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            if kind in ("file", "exe"):
                data = value if isinstance(value, bytes) else value.encode()
                info.size, info.mode = len(data), 0o755 if kind == "exe" else 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type, info.mode = {"dir": (tarfile.DIRTYPE, 0o755), "sym": (tarfile.SYMTYPE, 0o777), "hard": (tarfile.LNKTYPE, 0o644)}[kind]
            if kind != "dir":
                info.linkname = str(value)
            tar.addfile(info)
    path.write_bytes(gzip.compress(buffer.getvalue(), mtime=0) if compress else buffer.getvalue())
    return path


def test_layers_apply_in_order_with_whiteouts_and_opaque_folders(tmp_path):
    rootfs = RootFS()
    base = _layer(tmp_path / "base", [
        ("dir", "usr/lib/x86_64-linux-gnu", b""),
        ("file", "usr/lib/x86_64-linux-gnu/libc.so.6", b"libc"),
        ("file", "etc/old.conf", b"x"),
        ("file", "opt/app/stale/one", b"1"),
        ("file", "opt/app/stale/two", b"2"),
    ])
    diff_id = rootfs.add_layer_blob(base, oci.LAYER_GZIP)
    assert diff_id == "sha256:" + hashlib.sha256(gzip.decompress(base.read_bytes())).hexdigest()
    ours = _layer(tmp_path / "ours", [
        ("file", "etc/.wh.old.conf", b""),  # whiteout: the base's file is gone
        ("file", "opt/app/stale/.wh..wh..opq", b""),  # opaque: the base's folder contents are hidden
        ("file", "opt/app/stale/three", b"3"),
        ("exe", "opt/app/bin/server", b"#!/bin/sh\n"),
    ], compress=False)
    rootfs.add_layer_blob(ours, oci.LAYER_TAR)
    assert not rootfs.is_file("/etc/old.conf") and rootfs.is_file("/usr/lib/x86_64-linux-gnu/libc.so.6")
    assert not rootfs.is_file("/opt/app/stale/one") and rootfs.is_file("/opt/app/stale/three")
    assert rootfs.is_executable_file("/opt/app/bin/server") and not rootfs.is_executable_file("/opt/app/stale/three")


def test_links_are_followed_component_by_component_and_loops_end(tmp_path):
    rootfs = RootFS()
    rootfs.add_layer_blob(_layer(tmp_path / "l", [
        ("dir", "usr/lib", b""),
        ("file", "usr/lib/libreal.so.1.2", b"elf"),
        ("sym", "usr/lib/libreal.so.1", "libreal.so.1.2"),
        ("sym", "lib", "usr/lib"),  # a merged-/usr base: /lib -> usr/lib
        ("hard", "usr/lib/libhard.so", "usr/lib/libreal.so.1.2"),
        ("sym", "loop/a", "b"),
        ("sym", "loop/b", "a"),
        ("sym", "escape", "../../../usr/lib/libreal.so.1"),  # '..' stops at the image's root
    ]), oci.LAYER_GZIP)
    assert rootfs.resolve("/lib/libreal.so.1") == ("usr/lib/libreal.so.1.2", rootfs.nodes["usr/lib/libreal.so.1.2"])
    assert rootfs.is_file("/usr/lib/libhard.so") and rootfs.is_file("/escape")
    assert rootfs.resolve("/loop/a") is None  # 40 hops, then given up, as the kernel does (ELOOP)


def test_the_loader_searches_runpath_then_ld_library_path_ld_so_conf_and_the_defaults(tmp_path):
    rootfs = RootFS()
    rootfs.add_layer_blob(_layer(tmp_path / "l", [
        ("file", "etc/ld.so.conf.d/cuda.conf", "# the CUDA runtime\n/usr/local/cuda/lib64\n"),
        ("file", "usr/local/cuda/lib64/libcudart.so.13", b"elf"),
        ("file", "opt/ninfer/bin/libown.so", b"elf"),
        ("exe", "usr/bin/serve", b"elf"),
    ]), oci.LAYER_GZIP)
    env = {"PATH": "/usr/local/bin:/usr/bin", "LD_LIBRARY_PATH": "/opt/extra:relative"}
    common = rootfs.loader_dirs(env, "amd64")
    assert common == ["/opt/extra", "/usr/local/cuda/lib64", *DEFAULT_LIBRARY_DIRS["amd64"]]  # a relative entry is not a loader folder
    folders = rootfs.library_search("/opt/ninfer/bin/ninfer-serve", ("$ORIGIN",), common)
    assert folders[0] == "/opt/ninfer/bin"
    assert rootfs.has_library("libown.so", folders) and rootfs.has_library("libcudart.so.13", folders)
    assert not rootfs.has_library("libown.so", common)  # only through the binary's own RUNPATH
    assert rootfs.find_program("serve", env) == "/usr/bin/serve" and rootfs.find_program("absent", env) == "absent"


def test_a_layer_member_leaving_the_root_is_refused_while_it_streams(tmp_path):
    rootfs = RootFS()
    with pytest.raises(IntegrityError, match="whose name leaves the archive's folder"):
        rootfs.add_layer_blob(_layer(tmp_path / "l", [("file", "../etc/passwd", b"x")]), oci.LAYER_GZIP)
    assert not rootfs.is_file("/etc/passwd")
