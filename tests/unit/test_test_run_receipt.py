"""The test-run receipt: its strict format and the publication gate on it.

The pytest plugin that writes it runs a nested pytest, so its tests are integration tests:
tests/integration/test_test_run_receipt_plugin.py.
"""

from __future__ import annotations

import json

import pytest

from pipeline.errors import InputError, RefusedError
from pipeline.formats.test_receipt import (
    SKIPS_ALLOWED_FOR_PUBLICATION,
    TestRunReceipt,
    default_path,
    make_test_receipt,
    parse_test_receipt,
    read_test_receipt,
    require_green_for,
    write_test_receipt,
)
from pipeline.util.jsonio import canonical_bytes

COMMIT = "a" * 40
TREE = "b" * 40
GPU_TEST = "tests/integration/test_qualify.py::test_gpu_smoke_gate_runs_the_packaged_selftest_on_a_real_gpu"


def good_document(**changes):
    document = {
        "artifact_type": "omp_ninfer_test_run_receipt", "schema_version": 2, "commit": COMMIT, "tree": TREE,
        "dirty": False, "passed": 10, "failed": 0, "errors": 0, "skipped": 1, "xfailed": 1, "xpassed": 0,
        "skipped_tests": [GPU_TEST],
    }
    document.update(changes)
    return document


def test_round_trip_is_canonical_json(tmp_path):
    receipt = parse_test_receipt(canonical_bytes(good_document()))
    path = tmp_path / "r.json"
    data = write_test_receipt(path, receipt)
    assert path.read_bytes() == data == canonical_bytes(good_document())
    assert data.endswith(b"}\n") and b"\r" not in data
    assert list(json.loads(data)) == sorted(json.loads(data))
    assert read_test_receipt(path) == receipt
    assert receipt.clean_pass


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"artifact_type": "omp_ninfer_lane_receipt"}, "artifact_type"),
        ({"schema_version": 1}, "schema_version"),
        ({"schema_version": 3}, "schema_version"),
        ({"schema_version": True}, "schema_version"),
        ({"commit": "A" * 40}, "commit"),
        ({"commit": "a" * 39}, "commit"),
        ({"tree": None}, "tree"),
        ({"dirty": 0}, "dirty"),
        ({"passed": -1}, "passed"),
        ({"failed": True}, "failed"),
        ({"errors": 1.0}, "errors"),
        ({"skipped": "0"}, "skipped"),
        ({"xfailed": 10**12}, "xfailed"),
        ({"surprise": 1}, "surprise"),
        ({"skipped_tests": GPU_TEST}, "skipped_tests"),
        ({"skipped_tests": [1]}, "skipped_tests"),
        ({"skipped_tests": [""]}, "skipped_tests"),
        ({"skipped_tests": ["tests/a.py::t\x1b[2K"]}, "skipped_tests"),
        ({"skipped_tests": ["t" * 513]}, "skipped_tests"),
        ({"skipped": 2, "skipped_tests": ["tests/b.py::t", "tests/a.py::t"]}, "skipped_tests"),
        ({"skipped": 2, "skipped_tests": [GPU_TEST, GPU_TEST]}, "skipped_tests"),
        ({"skipped": 2}, "skipped_tests"),
        ({"skipped": 0}, "skipped_tests"),
    ],
)
def test_every_bad_field_is_refused_by_name(change, field):
    with pytest.raises(InputError) as caught:
        parse_test_receipt(canonical_bytes(good_document(**change)), file="r.json")
    assert caught.value.field == field and caught.value.file == "r.json"
    if field in ("passed", "failed", "errors", "skipped", "xfailed", "xpassed"):
        assert "is not a test count" in str(caught.value)


@pytest.mark.parametrize("missing", ["xpassed", "dirty", "commit", "skipped_tests"])
def test_a_missing_field_is_named(missing):
    document = good_document()
    del document[missing]
    with pytest.raises(InputError, match="lacks a required key") as caught:
        parse_test_receipt(canonical_bytes(document))
    assert caught.value.field == missing


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"passed": 1, "passed": 2}', "passed: holds the key 'passed' twice"),
        (b'{"passed": NaN}', "non-finite number NaN"),
        (b"\xef\xbb\xbf{}", "byte-order mark"),
        (b'{"passed": 1}\r\n', "carriage return"),
        (b"[" * 1_100_000 + b"]" * 1_100_000, "is larger than"),
        (b"[" * 30000 + b"]" * 30000, "deeper than"),
        (b'{"a": ' * 65 + b"1" + b"}" * 65, "deeper than"),
        (b"\xff", "not valid UTF-8"),
        (b"[]", "must hold a JSON object"),
    ],
)
def test_hostile_json_is_refused(data, message):
    with pytest.raises(InputError, match=message):
        parse_test_receipt(data)


def test_a_missing_receipt_is_a_refusal_that_says_how_to_make_one(tmp_path):
    with pytest.raises(RefusedError, match="there is no test-run receipt.*nox -s tests") as caught:
        read_test_receipt(tmp_path / "absent.json")
    assert int(caught.value.exit_code) == 7
    assert default_path(tmp_path) == tmp_path / "test-run-receipt.json"
    with pytest.raises(InputError, match="is a folder"):
        read_test_receipt(tmp_path)


def test_gate_refuses_another_commit_tree_a_dirty_tree_failures_errors_and_no_pass():
    receipt = parse_test_receipt(canonical_bytes(good_document()))
    require_green_for(receipt, commit=COMMIT, tree=TREE, file="r.json")
    require_green_for(receipt, commit=COMMIT)
    cases = [
        ({"commit": "c" * 40}, "commit", "is for another commit"),
        ({"tree": "c" * 40}, "tree", "names another tree than the commit's"),
        ({"dirty": True}, "dirty", "uncommitted changes"),
        ({"failed": 1}, "failed", r"did not pass \(1 failed, 0 errors\)"),
        ({"errors": 2}, "errors", r"did not pass \(0 failed, 2 errors\)"),
        ({"passed": 0}, "passed", "passed no test"),
    ]
    for change, field, message in cases:
        bad = parse_test_receipt(canonical_bytes(good_document(**change)))
        assert not bad.clean_pass or field in ("commit", "tree")
        with pytest.raises(RefusedError, match=message) as caught:
            require_green_for(bad, commit=COMMIT, tree=TREE, file="r.json")
        assert caught.value.field == field and int(caught.value.exit_code) == 7
    with pytest.raises(InputError, match="commit"):
        TestRunReceipt(commit="HEAD", tree=TREE, dirty=False, passed=0, failed=0, errors=0, skipped=0, xfailed=0, xpassed=0)
    # The keyword constructor defaults what an older producer did not count, and counts the skips it names.
    made = make_test_receipt(commit=COMMIT, tree=TREE, passed=1, failed=0, errors=0)
    assert (made.dirty, made.xfailed, made.xpassed, made.skipped, made.skipped_tests) == (False, 0, 0, 0, ())
    assert made.to_bytes() == canonical_bytes(made.to_json())


def test_gate_refuses_a_skip_publication_does_not_allow_and_names_it():
    allowed = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, skipped_tests=[GPU_TEST])
    require_green_for(allowed, commit=COMMIT, tree=TREE)
    assert allowed.skipped == 1 and allowed.skips_not_allowed == []
    vectors = "tests/unit/test_sign.py::test_github_release_workflow_bundle_verifies_with_its_repository_and_ref"
    skipped = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, skipped_tests=[GPU_TEST, vectors])
    assert skipped.skips_not_allowed == [vectors]
    with pytest.raises(RefusedError, match="skipped 1 tests that publication does not allow") as caught:
        require_green_for(skipped, commit=COMMIT, tree=TREE, file="r.json")
    assert caught.value.field == "skipped_tests" and caught.value.found == vectors and int(caught.value.exit_code) == 7
    many = make_test_receipt(commit=COMMIT, tree=TREE, passed=5, failed=0, errors=0, skipped_tests=[f"tests/t.py::t{i}" for i in range(7)])
    with pytest.raises(RefusedError, match="skipped 7 tests") as caught:
        require_green_for(many, commit=COMMIT)
    assert caught.value.found.endswith("and 2 more")


def test_each_allowed_skip_names_a_test_of_this_suite_with_its_reason():
    """The allow list cannot go stale: every node id is a test function that exists, and says why it may skip."""
    import ast

    from repokit import ROOT

    assert SKIPS_ALLOWED_FOR_PUBLICATION, "the GPU test is the one skip CI cannot avoid"
    for node_id, reason in SKIPS_ALLOWED_FOR_PUBLICATION.items():
        path, name = node_id.split("::")
        tree = ast.parse((ROOT / path).read_text("utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{node_id}: no such test"
        assert len(reason) > 40
