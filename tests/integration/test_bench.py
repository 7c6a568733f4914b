"""The benchmark command: named measurements against the real reference tools, as JSON."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import main
from pipeline.dev import bench


@pytest.mark.slow
def test_bench_writes_named_measurements_against_gnu_tar_gzip_and_openssl(tmp_path):
    output = tmp_path / "bench.json"
    assert main(["bench", "--size", str(4 << 20), "--level", "6", "--output", str(output), "--work", str(tmp_path), "--quiet"]) == 0
    document = json.loads(output.read_text())
    assert document["artifact_type"] == "omp_ninfer_benchmark" and document["host"]["zlib"]
    results = {m["name"]: m for m in document["measurements"]}
    assert list(results) == list(bench.MEASUREMENTS)
    archive = results["package-archive"]
    assert archive["same_members"] is True and archive["gzip_level"] == 6
    assert archive["reference"]["tool"] == "GNU tar | gzip -6" and archive["ours"]["seconds"] > 0
    assert 0.9 < archive["size_ratio"] < 1.1
    assert results["sha256"]["digests_agree"] is True and results["sha256"]["reference"]["tool"].startswith("openssl")
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"], "the temporary payload is removed"


def test_payload_is_deterministic(tmp_path):
    sizes = [bench.make_payload(tmp_path / name, 2 << 20) for name in ("a", "b")]
    assert sizes[0] == sizes[1]
    for path in sorted((tmp_path / "a").rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()


def test_unknown_measurement_is_a_usage_error(tmp_path, capsys):
    assert main(["bench", "--only", "nope", "--output", str(tmp_path / "x.json")]) == 2
    assert "unknown measurement 'nope'" in capsys.readouterr().err
