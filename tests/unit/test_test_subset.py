"""Declared test subsets (pipeline/formats/test_subset.py): the files of tests/subsets/ and the reader's refusals."""

from __future__ import annotations

import hashlib

import pytest
from repokit import ROOT

from pipeline.errors import InputError
from pipeline.formats.test_subset import (
    declared_subsets,
    parse_entries,
    read_subset,
    require_declared_at,
    subset_path,
)


def test_every_declared_subset_reads_and_names_tests_of_this_suite():
    names = declared_subsets(ROOT)
    assert "rehearsal" in names
    for name in names:
        subset = read_subset(ROOT, name)
        assert subset.sha256 == hashlib.sha256((ROOT / subset.path).read_bytes()).hexdigest()
        for entry in subset.entries:
            assert (ROOT / entry.split("::", 1)[0]).is_file(), entry


def test_the_rehearsal_subset_never_holds_the_rehearsal_or_a_slow_test():
    """The suite must not rehearse itself inside its own rehearsal; the subset is the quick unit tier only."""
    subset = read_subset(ROOT, "rehearsal")
    for entry in subset.entries:
        assert entry.startswith("tests/unit/"), entry
        assert "rehearse" not in entry and "actions_job" not in entry, entry
        slow_marker = "mark." + "slow"  # spelt in two parts: this unit module itself carries no such marker
        assert slow_marker not in (ROOT / entry.split("::", 1)[0]).read_text(encoding="utf-8"), entry


@pytest.mark.parametrize("name", ["../rehearsal", "Rehearsal", "", "a/b", "rehearsal.txt", "-x", "x" * 41])
def test_a_name_outside_the_grammar_is_refused_before_any_path_is_made(name):
    with pytest.raises(InputError, match="is not a declared test subset's name") as caught:
        subset_path(name)
    assert caught.value.field == "PIPELINE_TEST_SUBSET"


def test_an_undeclared_name_lists_the_declared_ones(tmp_path):
    (tmp_path / "tests" / "subsets").mkdir(parents=True)
    (tmp_path / "tests" / "unit").mkdir()
    (tmp_path / "tests" / "unit" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "tests" / "subsets" / "quick.txt").write_text("tests/unit/test_a.py\n")
    with pytest.raises(InputError, match="names no declared test subset") as caught:
        read_subset(tmp_path, "slow")
    assert "one of: quick" in str(caught.value)
    assert read_subset(tmp_path, "quick").entries == ("tests/unit/test_a.py",)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"/etc/passwd\n", "is not a test file or node id under tests/"),
        (b"tests/../pipeline/test_x.py\n", r"is not a test file or node id under tests/ \(.*'\.\.'"),
        (b"tests/./unit/test_a.py\n", "is not a test file or node id under tests/"),
        (b"tests/unit/test_a.py -k x\n", "is not a test file or node id under tests/"),
        (b"src/test_a.py\n", "is not a test file or node id under tests/"),
        (b"tests/unit/test_a.py\ntests/unit/test_a.py\n", "names an entry twice"),
        (b"# only a comment\n\n", "declares no test"),
        (b"tests/unit/test_a.py\r\n", "has a CR"),
        (b"tests/unit/test_\xff.py\n", "is not UTF-8"),
    ],
)
def test_a_bad_subset_file_is_refused_with_its_line(data, message):
    with pytest.raises(InputError, match=message) as caught:
        parse_entries(data, file="tests/subsets/x.txt")
    assert caught.value.file == "tests/subsets/x.txt"


def test_an_entry_whose_file_does_not_exist_is_refused(tmp_path):
    with pytest.raises(InputError, match="line 2 names a test file that does not exist"):
        parse_entries(b"# c\ntests/unit/test_gone.py::test_x\n", file="x.txt", root=tmp_path)


def test_a_file_over_the_bound_is_refused_before_it_is_parsed(tmp_path):
    (tmp_path / "tests" / "subsets").mkdir(parents=True)
    (tmp_path / "tests" / "subsets" / "big.txt").write_bytes(b"#" * (64 * 1024 + 1))
    with pytest.raises(InputError, match="is too large for a test subset"):
        read_subset(tmp_path, "big")


def _checkout_with_a_linked_folder(tmp_path, target):
    """A checkout whose tests/unit is a symbolic link to `target`, which holds a test file and a subset naming it."""
    root = tmp_path / "repo"
    (root / "tests" / "subsets").mkdir(parents=True)
    target.mkdir(parents=True, exist_ok=True)
    (target / "test_a.py").write_text("def test_a():\n    pass\n")
    (root / "tests" / "unit").symlink_to(target, target_is_directory=True)
    (root / "tests" / "subsets" / "linked.txt").write_text("tests/unit/test_a.py\n")
    return root


def test_an_entry_that_leaves_tests_through_a_link_is_refused(tmp_path):
    """`tests/unit -> /tmp/outside`: the entry reads as a path under tests/, but its file lies outside the checkout."""
    root = _checkout_with_a_linked_folder(tmp_path, tmp_path / "outside")
    assert (root / "tests" / "unit" / "test_a.py").is_file()  # the file exists: only the link rule refuses it
    with pytest.raises(InputError, match="line 1 resolves outside tests/ through a symbolic link") as caught:
        read_subset(root, "linked")
    assert str(caught.value.file) == subset_path("linked").as_posix() and caught.value.found == "tests/unit/test_a.py"


def test_an_entry_that_leaves_tests_for_elsewhere_in_the_checkout_is_refused(tmp_path):
    """`tests/unit -> ../pipeline`: inside the checkout, yet not a test of tests/."""
    root = _checkout_with_a_linked_folder(tmp_path, tmp_path / "repo" / "pipeline")
    with pytest.raises(InputError, match="line 1 resolves outside tests/ through a symbolic link"):
        read_subset(root, "linked")


def test_a_subsets_folder_that_is_a_link_out_of_the_checkout_is_refused(tmp_path):
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "quick.txt").write_text("tests/unit/test_a.py\n")
    (root / "tests" / "subsets").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(InputError, match="resolves outside the repository through a symbolic link"):
        read_subset(root, "quick")


def test_a_declared_subset_at_a_commit_is_its_name_and_the_sha256_of_its_bytes():
    data = (ROOT / subset_path("rehearsal")).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    subset = require_declared_at("rehearsal", digest, data, where="at abc")
    assert subset.sha256 == digest and subset.entries == read_subset(ROOT, "rehearsal").entries
    with pytest.raises(InputError, match="has another SHA-256 than the subset file declared at abc") as caught:
        require_declared_at("rehearsal", "0" * 64, data, where="at abc")
    assert caught.value.field == "selection.sha256" and caught.value.found == "0" * 64 and digest in caught.value.expected
    with pytest.raises(InputError, match="is not declared at abc") as caught:
        require_declared_at("quick", digest, None, where="at abc")
    assert caught.value.field == "selection.name" and "PIPELINE_TEST_SUBSET" in caught.value.fix
