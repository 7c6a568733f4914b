"""A --toolchain system build records its nvcc without a private folder (the identity and provenance ship it)."""

from __future__ import annotations

from pipeline.formats.lanes import find_lane
from pipeline.lanework import toolchain


def test_a_system_nvcc_under_a_private_folder_is_recorded_by_name(tmp_path, monkeypatch):
    bin_dir = tmp_path / "home" / "me" / "cuda-13.0" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("nvcc", "Cuda compilation tools, release 13.0, V13.0.88"), ("cmake", "cmake version 3.31.6"), ("ninja", "1.12.1")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{text}'\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    found = toolchain.system_toolchain(find_lane("5090"))
    assert found.description["nvcc"] == "nvcc" and str(tmp_path) not in repr(found.description)
    assert found.nvcc == bin_dir / "nvcc"  # still run from where it is
