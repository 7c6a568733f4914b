from __future__ import annotations

import importlib.util

from repokit import ROOT

spec = importlib.util.spec_from_file_location("launcher", ROOT / "runtime" / "launcher" / "nvcc_deterministic.py")
launcher = importlib.util.module_from_spec(spec)
spec.loader.exec_module(launcher)


def test_compile_steps_get_a_per_object_seed_and_objtemp():
    argv = ["nvcc", "-x", "cu", "-rdc=true", "-c", "src/a.cu", "-o", "CMakeFiles/core.dir/src/a.cu.o"]
    assert launcher.launch(argv) == [*argv, "-frandom-seed=CMakeFiles/core.dir/src/a.cu.o", "-objtemp"]


def test_link_and_probe_steps_run_unchanged():
    link = ["nvcc", "-dlink", "a.o", "b.o", "-o", "dlink.o"]
    assert launcher.launch(link) == link
    probe = ["nvcc", "--version"]
    assert launcher.launch(probe) == probe
