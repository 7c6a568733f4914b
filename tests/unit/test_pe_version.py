"""A bundled DLL's version is read from its version resource as a version word, never as free text."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import IntegrityError
from pipeline.lanework import binaries


@pytest.mark.parametrize(
    ("strings", "expected"),
    [
        ({"ProductVersion": "7.1.2", "FileVersion": "61.7.100"}, "7.1.2"),
        ({"FileVersion": "1.3.0.2501"}, "1.3.0.2501"),
        ({"ProductVersion": "1, 3, 0, 2501"}, "1.3.0.2501"),
        ({}, None),
    ],
)
def test_the_stated_version_is_taken_as_the_dll_states_it(monkeypatch, strings, expected):
    monkeypatch.setattr(binaries, "pe_version_strings", lambda path: strings)
    assert binaries.pe_product_version(Path("x.dll")) == expected


@pytest.mark.parametrize("text", ["7.1.2\n<script>", "8.17.0 (built by someone at C:\\Users\\me)", "1" * 65, "7.1.2\x1b[2J"])
def test_a_version_resource_that_is_not_a_version_is_refused_naming_the_dll(monkeypatch, text):
    monkeypatch.setattr(binaries, "pe_version_strings", lambda path: {"ProductVersion": text})
    with pytest.raises(IntegrityError, match="states a ProductVersion that is not a version") as info:
        binaries.pe_product_version(Path("avformat-61.dll"))
    assert info.value.file == "avformat-61.dll" and info.value.found == text[:120]
