"""What build-identity.json (shipped in the payload) says of the toolchain's folder."""

from __future__ import annotations

from pipeline.lanework.toolchain import CANONICAL_ROOT
from pipeline.stages.build import shipped_toolchain_description


def test_the_pinned_toolchain_folder_is_shipped_only_where_it_is_the_canonical_one():
    canonical = str(CANONICAL_ROOT / "toolchains" / "cuda-13.1.115-linux-x86_64-958f3c3ba8a6")
    assert shipped_toolchain_description({"kind": "pinned", "root": canonical})["root"] == canonical
    private = {"kind": "pinned", "root": "/home/someone/toolchains/cuda-13.1.115-linux-x86_64-958f3c3ba8a6", "toolkit": "13.1"}
    shipped = shipped_toolchain_description(private)
    assert shipped == {"kind": "pinned", "root": None, "toolkit": "13.1"} and private["root"].startswith("/home/")  # the build's own copy is kept
