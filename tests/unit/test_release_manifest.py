"""The release manifest's one reader and its questions (pipeline/formats/release/manifest.py)."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from pipeline.errors import InputError, UsageError
from pipeline.formats.release import manifest as rm

ROWS = {
    "artifact_type": "omp_ninfer_release_manifest",
    "release": "v1.2.3",
    "publication": {"blockers": ["pins: not yet", 7]},
    "components": {
        "ninfer": {"id": "container", "checksums_url": "https://x/SHA256SUMS"},
        "ninfer_variants": [
            "not a row",
            {"id": "win", "release_tag": "t1", "repository": "https://github.com/o/r/", "checksums_url": "https://u", "checksums_sha256": "a" * 64},
        ],
    },
}


def _bytes(document) -> bytes:
    return json.dumps(document, sort_keys=True).encode()


def test_parse_hashes_the_bytes_it_parses_and_answers_the_questions():
    data = _bytes(ROWS)
    model = rm.parse_manifest(data, source="m.json")
    assert model.sha256 == hashlib.sha256(data).hexdigest()
    assert model.release == "v1.2.3"
    assert model.blockers() == ["pins: not yet"]
    assert [row["id"] for row in model.lane_rows()] == ["container", "win"]
    assert [where for where, _ in model.lane_rows_at()] == ["components.ninfer", "components.ninfer_variants[1]"]
    assert model.lane_row("win")["release_tag"] == "t1"
    assert model.lane_row("nope") is None
    assert model.section("components.ninfer.id") == {}  # a string is not a section


def test_rows_as_written_keep_what_the_object_rows_skip():
    assert rm.lane_rows_as_written(ROWS)[1] == "not a row"
    assert rm.lane_rows_as_written({"components": {"ninfer_variants": 5}}) == [None]
    assert rm.lane_rows({"components": []}) == []


def test_published_set_needs_every_part_and_names_its_download_folder():
    sets = [rm.published_set(row, field=where) for where, row in rm.published_set_rows(ROWS)]
    assert sets[0] is None  # the container row names its checksums but no tag
    assert sets[1].download_prefix == "https://github.com/o/r/releases/download/t1/"
    assert sets[1].field == "components.ninfer_variants[1]"


@pytest.mark.parametrize(
    ("document", "what"),
    [([1, 2], "must hold a JSON object"), ({"artifact_type": "other"}, "is not the release tree document it is named as")],
)
def test_parse_refuses_what_is_not_a_manifest(document, what):
    with pytest.raises(InputError) as caught:
        rm.parse_manifest(_bytes(document), source="m.json")
    assert caught.value.what == what


def test_type_string_can_be_left_to_the_fields_and_size_is_bounded():
    assert rm.parse_manifest(b'{"release": "v1.0.0"}', source="m", check_type=False).release == "v1.0.0"
    with pytest.raises(InputError):
        rm.parse_manifest(b'{"release": "v1.0.0"}', source="m", check_type=False, max_bytes=5)
    with pytest.raises(InputError):
        rm.parse_manifest(b'{"a": 1, "a": 2}', source="m", check_type=False)  # duplicate keys


def test_read_manifest_reads_a_plain_file_and_refuses_a_link(tmp_path: Path):
    (tmp_path / "manifest.json").write_bytes(_bytes(ROWS))
    assert rm.read_manifest(str(tmp_path / "manifest.json")).release == "v1.2.3"
    (tmp_path / "link.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(InputError):
        rm.read_manifest(str(tmp_path / "link.json"))


def test_read_manifest_fetches_a_url_under_the_release_url_rule(tmp_path: Path):
    data = _bytes(ROWS)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body, status = (data, 200) if self.path == "/manifests/v1.2.3/manifest.json" else (b"", 404)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert rm.read_manifest(f"{base}/manifests/v1.2.3/manifest.json").sha256 == hashlib.sha256(data).hexdigest()
        with pytest.raises(InputError) as caught:
            rm.read_manifest(f"{base}/missing.json")
        assert caught.value.found == "HTTP 404"
        with pytest.raises(UsageError):
            rm.read_manifest(f"{base}/manifests/v1.2.3/manifest.json?x=1")  # a release URL names one immutable file
    finally:
        server.shutdown()
    with pytest.raises(UsageError):
        rm.read_manifest("http://example.com/manifest.json")  # plain HTTP only to loopback


def test_evidence_records_name_every_record_bound_by_path_with_its_field():
    document = {
        "qualification": {"summary": "q.json", "public_url": "https://raw/q.json", "acceptance": {"path": "a.json"}},
        "compatibility": "not an object",
        "components": {"ninfer": {"id": "c", "qualification": {"summary": "cq.json"}, "provenance": {"path": "p.json"}, "sbom": 3}},
    }
    records = rm.evidence_records(document)
    assert [(r.field, r.path) for r in records] == [
        ("components.ninfer.qualification", "cq.json"),
        ("components.ninfer.provenance", "p.json"),
        ("qualification", "q.json"),
        ("qualification.acceptance", "a.json"),
    ]
    assert records[2].public_url == "https://raw/q.json" and records[3].public_url is None
    assert rm.evidence_records(["not", "a", "manifest"]) == []


def test_the_questions_audit_asks_answer_from_the_model():
    """product_repository, bundle_suffix, value and has: one answer each, for a manifest of any shape."""
    from pipeline.formats.release.names import BUNDLE_SUFFIX

    document = {"release": "v0.13.1", "product": {"repository": "https://github.com/o/r"}, "signing": {"bundle_suffix": ".b.json"},
                "reviews": None, "components": {"ninfer": {"id": "a", "checksums_url": "u"}, "ninfer_variants": [{"id": "b"}]}}
    model = rm.parse_manifest(_bytes(document), source="m.json", check_type=False)
    assert model.product_repository() == "https://github.com/o/r" and model.bundle_suffix() == ".b.json"
    assert model.value("components.ninfer.id") == "a" and model.value("components.x.y") is None
    assert model.has("reviews") and not model.has("predecessor")  # a null field is there; a missing one is not
    assert model.published_set_rows() == [("components.ninfer", {"id": "a", "checksums_url": "u"})]
    odd = rm.parse_manifest(_bytes({"release": "v0.13.1", "product": {"repository": 5}, "signing": "x"}), source="m.json", check_type=False)
    assert odd.product_repository() == "" and odd.bundle_suffix() == BUNDLE_SUFFIX and odd.value("product.repository") == 5
