"""The test-run receipt format (pipeline/formats/test_receipt.py): strict reading and the publication check."""

from __future__ import annotations

import json

import pytest

from pipeline.errors import InputError, RefusedError
from pipeline.formats.test_receipt import (
    SKIPS_ALLOWED_FOR_PUBLICATION,
    default_path,
    make_test_receipt,
    parse_test_receipt,
    read_test_receipt,
    require_green_for,
    write_test_receipt,
)

C = "1" * 40
T = "2" * 40


SKIPS = ("tests/integration/test_b.py::test_two", "tests/unit/test_a.py::test_one")


def good(**changes):
    values = {"commit": C, "tree": T, "passed": 10, "failed": 0, "errors": 0, "skipped_tests": SKIPS}
    values.update(changes)
    return make_test_receipt(**values)


def test_round_trip_is_canonical_and_reproducible(tmp_path):
    path = default_path(tmp_path)
    assert path == tmp_path / "test-run-receipt.json"
    first = write_test_receipt(path, good())
    assert write_test_receipt(tmp_path / "again.json", good()) == first
    assert first.endswith(b"}\n") and b"\r" not in first
    assert json.loads(first) == {"artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 3, "commit": C, "tree": T,
                                 "dirty": False, "passed": 10, "failed": 0, "errors": 0, "skipped": 2, "xfailed": 0, "xpassed": 0,
                                 "skipped_tests": list(SKIPS), "selection": {"kind": "full"}}
    assert read_test_receipt(path) == good()


BASE = {"artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 2, "commit": C, "tree": T,
        "passed": 1, "failed": 0, "errors": 0, "skipped": 0, "skipped_tests": []}


def doc(**changes) -> str:
    values = dict(BASE)
    for key, value in changes.items():
        if value is None:
            values.pop(key)
        else:
            values[key] = value
    return json.dumps(values)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (doc(artifact_type="other"), "is not a test-run receipt"),
        (doc(schema_version=1), "unsupported schema version"),
        (doc(skipped_tests=None), "lacks a required key"),
        (doc(skipped=1), "names another number of skipped tests than it counts"),
        (doc(skipped=2, skipped_tests=["b::t", "a::t"]), "out of order or twice"),
        (doc(skipped=None), "lacks a required key"),
        (doc(x=1), "unknown key"),
        (doc(commit="abc"), "full git object id"),
        (doc(passed=-1), "not a test count"),
        (doc(passed=True), "not a test count"),
        (doc(failed=1.5), "not a test count"),
        ('{"artifact_type":"omp_ninfer_test_run_receipt","artifact_type":"omp_ninfer_test_run_receipt","schema_version":1}', "twice in one object"),
        (doc(passed=1).replace('"passed": 1', '"passed": NaN'), "non-finite"),
        ("[" * 100 + "]" * 100, "deeper than"),
    ],
)
def test_malformed_receipts_are_refused(text, message):
    with pytest.raises(InputError, match=message):
        parse_test_receipt(text.encode(), file="r.json")


def test_missing_receipt_is_a_refusal(tmp_path):
    with pytest.raises(RefusedError, match="no test-run receipt"):
        read_test_receipt(tmp_path / "absent.json")


def test_green_check_names_each_reason():
    require_green_for(good(skipped_tests=()), commit=C, tree=T, file="r.json")
    require_green_for(good(skipped_tests=tuple(SKIPS_ALLOWED_FOR_PUBLICATION)), commit=C, tree=T, file="r.json")
    with pytest.raises(RefusedError, match="test_one") as caught:
        require_green_for(good(), commit=C, tree=T, file="r.json")  # a skip publication does not allow, named
    for receipt, message in [
        (good(skipped_tests=(), commit="3" * 40), "for another commit"),
        (good(skipped_tests=(), tree="3" * 40), "another tree"),
        (good(skipped_tests=(), failed=1), r"did not pass \(1 failed, 0 errors\)"),
        (good(skipped_tests=(), errors=2), r"did not pass \(0 failed, 2 errors\)"),
        (good(skipped_tests=(), passed=0), "passed no test"),
    ]:
        with pytest.raises(RefusedError, match=message) as caught:
            require_green_for(receipt, commit=C, tree=T, file="r.json")
        assert caught.value.exit_code == 7

