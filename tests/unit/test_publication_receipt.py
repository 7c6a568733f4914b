"""The publication receipt reader (pipeline/formats/publication_plan.read_receipt) on hostile bytes.

compose copies a component's receipt into the release tree and verify reads it back from
the tree, a file anyone can edit: every malformed shape is a named InputError, never a
TypeError, and two assets of one name are refused rather than merged.
"""

from __future__ import annotations

import copy

import pytest

from pipeline.errors import InputError
from pipeline.formats.publication_plan import make_receipt, read_receipt
from pipeline.util.jsonio import canonical_bytes

SHA = "c" * 64


def receipt() -> dict:
    plan = {
        "kind": "component",
        "subject": "rtx4090-windows-native",
        "repository": "alphastorm/ninfer",
        "tag": "v0.7.0-qwen38-4090-beta.3",
        "commit": "7" * 40,
        "release": {"make_latest": False},
        "observed": {"ci": None},  # what the plan saw on GitHub (no CI block: nothing required)
        "assets": [{"name": "SHA256SUMS", "size": 10, "sha256": SHA, "content_type": "text/plain"}],
    }
    remote = [{"id": 5, "name": "SHA256SUMS", "digest": f"sha256:{SHA}", "browser_download_url": "https://github.com/alphastorm/ninfer/releases/download/x/SHA256SUMS"}]
    return make_receipt(plan, "a" * 64, {"id": 9, "prerelease": True}, remote, immutable_enabled=False)


def test_a_receipt_made_by_publish_reads_back(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(canonical_bytes(receipt()))
    assert read_receipt(path)["assets"][0]["name"] == "SHA256SUMS"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["assets"][0].update(name=["x"]), "assets[0].name"),
        (lambda d: d["assets"][0].update(name="../x"), "assets[0].name"),
        (lambda d: d["assets"][0].update(name=""), "assets[0].name"),
        (lambda d: d["assets"].append(copy.deepcopy(d["assets"][0])), "assets[1].name"),
        (lambda d: d.update(kind=7), "kind"),
        (lambda d: d.update(tag=None), "tag"),
        (lambda d: d.update(repository=["a/b"]), "repository"),
        (lambda d: d.update(assets=[copy.deepcopy(d["assets"][0]) for _ in range(1001)]), "assets"),
        (lambda d: d["assets"][0].update(digest="sha256:" + "d" * 64), "assets[0]"),
        (lambda d: d.update(test_selection={"kind": "subset", "name": "rehearsal"}), "selection"),
        (lambda d: d.update(test_selection={"kind": "some"}), "selection"),
    ],
)
def test_a_malformed_receipt_is_a_named_input_error(tmp_path, change, field):
    document = receipt()
    change(document)
    path = tmp_path / "r.json"
    path.write_bytes(canonical_bytes(document))
    with pytest.raises(InputError) as caught:
        read_receipt(path)
    assert caught.value.field == field and caught.value.file == str(path)


def test_a_product_receipt_copies_the_plans_test_selection(tmp_path):
    """A published release records which tests its publication accepted: the whole suite, or a named subset."""
    base = receipt()
    plan = {"kind": "product", "subject": "v1.0.0", "repository": "alphastorm/omp-ninfer", "tag": "v1.0.0", "commit": "7" * 40,
            "release": {"make_latest": True}, "observed": {"ci": None}, "assets": [{"name": "SHA256SUMS", "size": 10, "sha256": SHA, "content_type": "text/plain"}],
            "test_selection": {"kind": "subset", "name": "rehearsal", "sha256": "e" * 64}}
    remote = [{"id": 5, "name": "SHA256SUMS", "digest": f"sha256:{SHA}"}]
    document = make_receipt(plan, "a" * 64, {"id": 9}, remote, immutable_enabled=None)
    path = tmp_path / "r.json"
    path.write_bytes(canonical_bytes(document))
    assert read_receipt(path)["test_selection"] == {"kind": "subset", "name": "rehearsal", "sha256": "e" * 64}
    assert "test_selection" not in base, "a component publication has no test-run gate, so no selection"
