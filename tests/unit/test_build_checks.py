"""What the build stage decides without compiling: an interrupted compile, the host paths a binary may not carry."""

from __future__ import annotations

import pytest

from pipeline.stages.build import ninja_interruption

FINISHED = ["[1/3] Building CXX object a.o", "[2/3] Building CUDA object b.o", "[3/3] Linking CXX executable bin/ninfer"]


@pytest.mark.parametrize(
    ("code", "lines", "expected"),
    [
        (-15, FINISHED[:1], "ninja was stopped by SIGTERM"),
        (-2, FINISHED[:1], "ninja was stopped by SIGINT"),
        (130, FINISHED[:1], "ninja exited with status 130 (SIGINT)"),
        (2, [*FINISHED[:2], "ninja: build stopped: interrupted by user."], "ninja: build stopped: interrupted by user."),
    ],
)
def test_an_interrupted_ninja_is_named_as_interrupted(code, lines, expected):
    assert ninja_interruption(code, lines) == expected


def test_a_finished_or_failed_ninja_is_not_an_interruption():
    assert ninja_interruption(0, FINISHED) is None
    assert ninja_interruption(0, FINISHED[:2]) is None  # a restat rule's skipped step: ninja may end below N
    assert ninja_interruption(1, [*FINISHED[:2], "FAILED: b.o", "b.cu(3): error: expected a ';'", "ninja: build stopped: subcommand failed."]) is None


def test_the_host_paths_a_binary_may_not_carry_are_the_private_ones(tmp_path):
    """--pkg-config-path folders, the prefix above each and the private build folder; never a system folder."""
    from pathlib import Path

    from pipeline.formats.lanes import find_lane
    from pipeline.infra.buildns import Isolation
    from pipeline.lanework.source import parse_source
    from pipeline.stage import Context
    from pipeline.stages.build import BuildStage, CompilePlace

    stage = BuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), source=parse_source(None),
                       pkg_config_path=("/home/me/ff/lib/x86_64-linux-gnu/pkgconfig", "/usr/lib/x86_64-linux-gnu/pkgconfig"))
    place = CompilePlace(Path("/c/src"), Path("/c/build"), tmp_path / "s", tmp_path / "b", Path("/var/tmp/omp-ninfer/work/x.1"), Isolation((), ""))
    assert stage.host_paths(place) == ["/home/me/ff/lib/x86_64-linux-gnu/pkgconfig", "/home/me/ff", "/var/tmp/omp-ninfer/work/x.1"]
