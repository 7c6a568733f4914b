"""An interrupted compile is reported as interrupted, not as a missing target or a compile error."""

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
