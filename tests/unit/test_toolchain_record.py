"""The toolchain record (pipeline/formats/toolchain_record.py): what the build's toolchain gives package and
qualify, read once from the pinned wheels' RECORD and METADATA files, checked again before anything is bundled."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.formats.toolchain_lock import Wheel
from pipeline.formats.toolchain_record import ToolchainRecord, read_record, write_record
from pipeline.lanework.binaries import check_recorded, recorded_libraries
from pipeline.lanework.toolchain import Toolchain, toolchain_record

CUDART = b"\x7fELF stand-in for libcudart.so.13\n"


def _wheel(distribution: str, version: str) -> Wheel:
    filename = f"{distribution.replace('-', '_')}-{version}-py3-none-manylinux2014_x86_64.whl"
    return Wheel(distribution, version, filename, f"https://files.pythonhosted.org/packages/{filename}", "0" * 64, 1)


def _unpacked(root: Path) -> Toolchain:
    """A pinned toolchain's folder as provisioning leaves it: unpacked wheels under <root>/site, each with its dist-info."""
    site = root / "site"
    lib = site / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_bytes(CUDART)
    runtime = site / "nvidia_cuda_runtime-13.1.80.dist-info"
    (runtime / "licenses").mkdir(parents=True)
    (runtime / "licenses" / "License.txt").write_text("NVIDIA CUDA EULA\n")
    (runtime / "RECORD").write_text("nvidia/cu13/lib/libcudart.so.13,sha256=x,33\nnvidia_cuda_runtime-13.1.80.dist-info/RECORD,,\n")
    (runtime / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cuda-runtime\nVersion: 13.1.80\nAuthor: Nvidia CUDA Installer Team\n")
    cmake = site / "cmake-3.31.10.dist-info"
    cmake.mkdir()
    (cmake / "RECORD").write_text("cmake/data/bin/cmake,sha256=x,1\n")
    (cmake / "METADATA").write_text("Metadata-Version: 2.1\nName: cmake\nVersion: 3.31.10\nAuthor: Jean-Christophe Fillion-Robin\n")
    # A dist-info that no pinned wheel made (left over, or planted): not read.
    rogue = site / "a_rogue-1.0.dist-info"  # sorts before every pinned one
    rogue.mkdir()
    (site / "rogue").mkdir()
    (site / "rogue" / "librogue.so").write_bytes(b"\x7fELF rogue\n")
    (rogue / "RECORD").write_text("rogue/librogue.so,,\n")
    (rogue / "METADATA").write_text("Metadata-Version: 2.1\nName: cmake\nVersion: 0\nAuthor: Someone Else\n")
    cuda_home = site / "nvidia" / "cu13"
    return Toolchain(
        kind="pinned",
        nvcc=cuda_home / "bin" / "nvcc",
        cmake=site / "cmake" / "data" / "bin" / "cmake",
        ninja=site / "ninja",
        cuda_home=cuda_home,
        cuda_version="13.1.115",
        description={"kind": "pinned", "root": str(root)},
        wheels=(_wheel("nvidia-cuda-runtime", "13.1.80"), _wheel("cmake", "3.31.10")),
    )


def test_a_pinned_toolchain_is_recorded_from_its_pinned_wheels_only(tmp_path):
    toolchain = _unpacked(tmp_path / "tc")
    record = toolchain_record(toolchain)
    assert (record.kind, record.cuda_version, record.root) == ("pinned", "13.1.115", str(tmp_path / "tc"))
    assert record.library_dir == str(tmp_path / "tc" / "site" / "nvidia" / "cu13" / "lib")
    assert set(record.libraries) == {"libcudart.so.13"}  # the rogue dist-info's library is not the toolchain's
    cudart = record.libraries["libcudart.so.13"]
    assert (cudart.path, cudart.distribution, cudart.version) == ("nvidia/cu13/lib/libcudart.so.13", "nvidia-cuda-runtime", "13.1.80")
    assert cudart.sha256 == hashlib.sha256(CUDART).hexdigest()
    assert cudart.license_file == "nvidia_cuda_runtime-13.1.80.dist-info/licenses/License.txt"
    assert record.wheel_authors == {"cmake": "Jean-Christophe Fillion-Robin", "nvidia-cuda-runtime": "Nvidia CUDA Installer Team"}
    # Written canonically and read back to the same record; the same toolchain gives the same bytes.
    first = write_record(tmp_path / "a.json", record).read_bytes()
    assert write_record(tmp_path / "b.json", toolchain_record(toolchain)).read_bytes() == first
    assert read_record(tmp_path / "a.json") == record
    assert first.endswith(b"}\n") and json.loads(first)["artifact_type"] == "omp_ninfer_toolchain_record"


def test_a_pinned_wheel_without_its_record_is_refused(tmp_path):
    toolchain = _unpacked(tmp_path / "tc")
    (tmp_path / "tc" / "site" / "cmake-3.31.10.dist-info" / "RECORD").unlink()
    with pytest.raises(IntegrityError, match="lacks a pinned wheel's RECORD"):
        toolchain_record(toolchain)


def test_system_and_prebuilt_toolchains_record_no_libraries(tmp_path):
    system = _unpacked(tmp_path / "tc")
    system.kind = "system"
    record = toolchain_record(system)
    assert (record.kind, record.root, record.libraries) == ("system", None, {})
    assert record.library_dir == str(tmp_path / "tc" / "site" / "nvidia" / "cu13" / "lib")
    prebuilt = toolchain_record(None, cuda_version="13.1.115")
    assert (prebuilt.kind, prebuilt.cuda_version, prebuilt.root, prebuilt.library_dir) == ("prebuilt", "13.1.115", None, None)
    assert read_record(write_record(tmp_path / "p.json", prebuilt)) == prebuilt


def test_a_recorded_library_is_checked_before_it_is_bundled(tmp_path):
    record = toolchain_record(_unpacked(tmp_path / "tc"))
    libraries = recorded_libraries(record)
    cudart = libraries["libcudart.so.13"]
    assert cudart.path == tmp_path / "tc" / "site" / "nvidia" / "cu13" / "lib" / "libcudart.so.13"
    assert cudart.license_file is not None and cudart.license_file.read_text() == "NVIDIA CUDA EULA\n"
    check_recorded(cudart, record_file="toolchain.json")  # unchanged: accepted
    cudart.path.write_bytes(CUDART + b"changed")
    with pytest.raises(IntegrityError, match="changed after the build recorded it") as caught:
        check_recorded(cudart, record_file="toolchain.json")
    assert caught.value.expected == hashlib.sha256(CUDART).hexdigest()
    cudart.path.unlink()
    with pytest.raises(IntegrityError, match="is gone"):
        check_recorded(cudart, record_file="toolchain.json")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(kind="homebrew"), "kind"),
        (lambda d: d.update(root="relative/toolchain"), "root"),
        (lambda d: d["libraries"]["libcudart.so.13"].update(path="../../etc/libcudart.so.13"), "libraries.libcudart.so.13.path"),
        (lambda d: d["libraries"]["libcudart.so.13"].update(path="nvidia/cu13/lib/libother.so"), "libraries.libcudart.so.13.path"),
        (lambda d: d["libraries"]["libcudart.so.13"].update(sha256="x" * 64), "libraries.libcudart.so.13.sha256"),
        (lambda d: d.update(root=None), "root"),
        (lambda d: d.update(artifact_type="something_else"), "artifact_type"),
    ],
)
def test_a_hostile_or_damaged_record_is_refused_naming_the_field(tmp_path, change, field):
    path = write_record(tmp_path / "t.json", toolchain_record(_unpacked(tmp_path / "tc")))
    document = json.loads(path.read_bytes())
    change(document)
    path.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        read_record(path)
    assert caught.value.field == field


def test_an_empty_record_has_no_site():
    assert ToolchainRecord("prebuilt", None, None, None).site is None and recorded_libraries(ToolchainRecord("prebuilt", None, None, None)) == {}
