"""The one gate for names from data that become paths (pipeline/util/safepath.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pipeline.errors import ExitCode, InputError
from pipeline.util.safepath import (
    MAX_COMPONENT,
    component_problem,
    relpath_problem,
    safe_component,
    safe_relative,
    safe_relpath,
    within,
)

GOOD_NAMES = [
    "SHA256SUMS",
    "package-build-receipt.json",
    "ninfer-rtx4090-native-v0.7.0-beta.2-windows-x86_64-cuda13.3-rtx4090.tar.gz",
    "rtx4090-windows-native",
    "v0.13.1",
    "libcurl.dll",
    "a",
    "CONSOLE",  # only the exact device names are reserved
    "COM10",
    "nullx.txt",
    "x" * MAX_COMPONENT,
    "zlib+1.3",
    "Ω-µ",  # printable non-ASCII is a name like any other
]

BAD_NAMES = [
    ("", "is empty"),
    (".", "names a folder"),
    ("..", "names a folder"),
    ("../x", "path separator"),
    ("/etc", "path separator"),
    ("a/b", "path separator"),
    ("a\\b", "path separator"),
    ("..\\..\\x", "path separator"),
    ("a\0b", "U+0000 (NUL)"),
    ("a\nb", "U+000A"),
    ("a\x7f", "U+007F"),
    ("a\u202eexe.txt", "U+202E"),  # right-to-left override: a name that reads as another
    ("C:", "':'"),
    ("C:x", "':'"),
    ("file.txt:stream", "':'"),
    (".hidden", "starts with '.'"),
    ("x" * (MAX_COMPONENT + 1), "over the bound of 255"),
    ("CON", "device name CON"),
    ("con.txt", "device name CON"),
    ("Nul ", "dot or a space"),
    ("nul .txt", "device name NUL"),
    ("COM1.log", "device name COM1"),
    ("lpt9", "device name LPT9"),
    ("COM\u00b9", "device name COM\u00b9"),
    ("CONOUT$", "device name CONOUT$"),
    ("name.", "dot or a space"),
    ("name ", "dot or a space"),
    ("a<b", "'<'"),
    ("a|b", "'|'"),
    ("a?b", "'?'"),
    ("a*b", "'*'"),
    ('a"b', "'\"'"),
    (None, "not a string"),
    (7, "not a string"),
    (["a"], "not a string"),
]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_bare_names_are_accepted(name):
    assert safe_component(name, file="f.json", field="x") == name


@pytest.mark.parametrize(("name", "reason"), BAD_NAMES)
def test_unsafe_names_are_refused_naming_file_field_found_and_expected(name, reason):
    with pytest.raises(InputError) as caught:
        safe_component(name, file="hostile.json", field="rows[3].id")
    error = caught.value
    assert error.exit_code == ExitCode.INPUT
    assert (error.file, error.field) == ("hostile.json", "rows[3].id")
    assert reason in error.what
    text = error.render()
    assert text.startswith("hostile.json: rows[3].id: is not a safe name: it ")
    assert "expected a single file or folder name" in text


def test_options_widen_only_what_they_name():
    assert safe_component(".github", file=None, field=None, hidden=True) == ".github"
    assert safe_component("con.h", file=None, field=None, portable=False) == "con.h"
    assert component_problem("a/b", portable=False, hidden=True) is not None  # a separator never passes
    assert component_problem("..", portable=False, hidden=True) is not None
    assert "over the bound of 8" in component_problem("123456789", max_len=8)


GOOD_PATHS = ["a", "a/b/c.txt", "manifests/v0.13.1/qualification/rtx4090-windows-native.json", "third_party/zlib/LICENSE"]
BAD_PATHS = [
    ("", "is empty"),
    ("/etc/passwd", "absolute"),
    ("\\\\server\\share", "absolute"),
    ("C:/Windows", "drive letter"),
    ("c:x", "drive letter"),
    ("a\\b", "'\\'"),
    ("../x", "'..' segment"),
    ("a/../../x", "'..' segment"),
    ("a/./b", "'.' segment"),
    ("a//b", "empty segment"),
    ("a/", "empty segment"),
    ("a/\0/b", "U+0000"),
    ("a/CON/b", "device name CON"),
    ("a/.git/config", "starts with '.'"),
    ("x/" * 600, "over the bound"),
    (3, "not a string"),
]


@pytest.mark.parametrize("value", GOOD_PATHS)
def test_relative_paths_are_accepted(value, tmp_path):
    assert safe_relpath(value, file="f", field="p") == value
    assert safe_relative(value, tmp_path, file="f", field="p") == tmp_path / value


@pytest.mark.parametrize(("value", "reason"), BAD_PATHS)
def test_unsafe_relative_paths_are_refused(value, reason, tmp_path):
    for call in (lambda: safe_relpath(value, file="lane.toml", field="k"), lambda: safe_relative(value, tmp_path, file="lane.toml", field="k")):
        with pytest.raises(InputError) as caught:
            call()
        assert (caught.value.file, caught.value.field) == ("lane.toml", "k")
        assert reason in caught.value.what


@pytest.mark.skipif(os.name == "nt", reason="POSIX symbolic links: on Windows a link needs a privilege and, to a folder, target_is_directory, which these links to folders do not pass")
def test_a_symlink_that_leaves_the_root_is_refused_and_one_inside_is_accepted(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "inner").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("host file")
    (root / "inner" / "real.txt").write_text("mine")
    (root / "escape").symlink_to(outside)
    (root / "file-escape").symlink_to(outside / "secret")
    (root / "alias").symlink_to(root / "inner")
    (root / "loop").symlink_to(root / "loop")
    with pytest.raises(InputError, match="resolves outside the repository through a symbolic link") as caught:
        safe_relative("escape/secret", root, file="x.toml", field="license_file", what="the repository")
    assert caught.value.field == "license_file"
    with pytest.raises(InputError, match="resolves outside"):
        safe_relative("file-escape", root, file="x.toml", field="f")
    with pytest.raises(InputError, match="resolves outside"):
        safe_relative("loop/x", root, file="x.toml", field="f")
    assert safe_relative("alias/real.txt", root, file="x.toml", field="f") == root / "alias" / "real.txt"
    # A root that is itself reached through a link is fine: both sides are resolved.
    (tmp_path / "root-link").symlink_to(root)
    assert safe_relative("inner/real.txt", tmp_path / "root-link", file="x", field="f") == tmp_path / "root-link" / "inner" / "real.txt"
    assert within(root / "inner", root) and within(root, root)
    assert not within(root / "escape", root) and not within(tmp_path, root)


# -- properties over hostile strings -------------------------------------------------------

ALPHABET = ["a", "B", "0", ".", "..", "/", "\\", ":", "\0", "\n", " ", "-", "CON", "nul", "C:", "~", "$", "<", "|", "\u202e", "é", "%2e", "*"]


def _hostile_strings(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(count)]


def test_property_an_accepted_name_is_exactly_one_new_entry_of_its_folder(tmp_path):
    """Whatever the string, if it passes, writing it creates one entry directly in the folder."""
    folder = tmp_path / "folder"
    folder.mkdir()
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "keep").write_text("unchanged")
    accepted = 0
    for value in _hostile_strings(9, 4000):
        if component_problem(value) is not None:
            continue
        accepted += 1
        target = folder / value
        assert target.parent == folder and target.name == value
        assert os.path.normpath(target) == str(target)  # nothing to collapse: no '.', '..' or '//'
        target.write_bytes(b"x")
        assert target.resolve().parent == folder.resolve()
        target.unlink()
    assert accepted > 100  # the generator reaches the accepting side too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "sentinel"]
    assert [p.name for p in sentinel.iterdir()] == ["keep"] and (sentinel / "keep").read_text() == "unchanged"


def test_property_an_accepted_relative_path_never_climbs(tmp_path):
    accepted = 0
    for value in _hostile_strings(10, 4000):
        problem = relpath_problem(value)
        if problem is not None:
            continue
        accepted += 1
        parts = value.split("/")
        assert all(component_problem(part) is None for part in parts)
        normal = os.path.normpath(tmp_path / value)
        assert normal == str(tmp_path / value) and Path(normal).is_relative_to(tmp_path)
    assert accepted > 50


def test_property_every_name_with_a_separator_or_dot_dot_is_refused():
    for value in _hostile_strings(11, 4000):
        if "/" in value or "\\" in value or value in (".", "..") or "\0" in value or ":" in value:
            assert component_problem(value) is not None, value
