"""The benchmark command: named measurements against the real reference tools, as JSON.

Timings are not asserted (a benchmark is not a timed test); the document's shape, that every
peer (GNU tar, pigz, gzip, openssl, curl) really ran on the same bytes, and the agreement of
every digest are."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.cli import main
from pipeline.dev import bench
from pipeline.errors import BuildFailure
from pipeline.infra import archive as archive_module


@pytest.mark.slow
def test_bench_writes_named_measurements_against_gnu_tar_pigz_gzip_and_openssl(tmp_path):
    output = tmp_path / "bench.json"
    # The re-cut measurement compiles an engine-shaped tree three times (minutes): test_bench_build.py covers it without nvcc.
    # rehearse-release runs release.yml's preflight with act (PyPI installs): test_rehearse_release.py covers that run.
    measured = [name for name in bench.MEASUREMENTS if name not in ("recut-compile-cache", "rehearse-release")]
    only = [arg for name in measured for arg in ("--only", name)]
    assert main(["bench", "--size", str(4 << 20), "--level", "6", "--output", str(output), "--work", str(tmp_path), "--quiet", *only]) == 0
    document = json.loads(output.read_text())
    assert document["artifact_type"] == "omp_ninfer_benchmark" and document["host"]["zlib"]
    assert document["schema_version"] == 2
    assert document["host"]["pigz"].startswith("pigz ") and document["host"]["curl"].startswith("curl ")
    load = document["host"]["load_average"]
    assert len(load["start"]) == 3 and len(load["end"]) == 3
    results = {m["name"]: m for m in document["measurements"]}
    assert list(results) == measured
    assert all(len(m["load_average"]["start"]) == 3 and len(m["load_average"]["end"]) == 3 for m in results.values())
    archive = results["package-archive"]
    jobs = archive_module.default_jobs()
    assert archive["same_members"] is True and archive["gzip_level"] == 6 and archive["jobs"] == jobs
    # The peer is pigz on every core at the same level; single-threaded gzip stays beside it.
    assert archive["reference"]["tool"] == f"GNU tar | pigz -6 -p {jobs}" and archive["ours"]["seconds"] > 0
    assert f"| {shutil.which('pigz')} -6 -n -p {jobs} > $WORK/" in archive["reference"]["command"]
    assert archive["reference"]["version"].startswith("pigz ") and archive["reference"]["runs"] == 2
    assert archive["baseline"]["tool"] == "GNU tar | gzip -6" and archive["baseline"]["compressed_bytes"] > 0
    # Both tools really ran on the same files: each archive holds the very tar stream ours holds.
    stream = archive["ours"]["tar_stream_sha256"]
    assert len(stream) == 64 and archive["reference"]["tar_stream_sha256"] == stream == archive["baseline"]["tar_stream_sha256"]
    assert archive["same_tar_stream"] is True
    assert archive["deterministic"] is True and archive["ours"]["runs"] == 2
    assert 0.9 < archive["size_ratio"] < 1.1
    assert archive["met"] == (archive["speedup"] >= 1.0)
    assert archive["cpu_ratio"] > 0 and archive["reference"]["cpu_seconds"] > 0  # pigz's own CPU time was counted
    assert {"seconds", "cpu_seconds", "mib_per_s", "compressed_bytes"} <= set(archive["reference"]) & set(archive["baseline"]) & set(archive["ours"])
    assert results["sha256"]["digests_agree"] is True and results["sha256"]["reference"]["tool"].startswith("openssl")
    audit = results["audit-served-release"]
    assert audit["digests_agree"] is True and audit["baseline"]["digests_agree"] is True and audit["audit_passed"] is True
    assert audit["reference"]["tool"].startswith("curl -sS --fail URL | openssl dgst -sha256, 2 at a time")
    check_large_file_entry(results["audit-large-file-capped"], document["payload"]["bytes"])
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"], "the temporary payload is removed"


def check_large_file_entry(result, payload_bytes):
    # A small run (a 16 MiB file, the threshold lowered under it): the figures are not asserted, what ran is.
    assert result["file_bytes"] == 4 * payload_bytes and result["range_threshold"] < result["file_bytes"]
    assert result["server"] == {"per_connection_mib_per_s": 25, "first_byte_ms": 50, "ranges": True}
    assert result["digests_agree"] is True and result["ours"]["passed"] is True
    assert "--connections 8" in result["ours"]["command"] and result["ours"]["peak_rss_mib"] > 10
    assert result["reference"]["tool"] == "aria2c -x8 -s8 && openssl dgst -sha256" and result["reference"]["version"].startswith("aria2 version")
    assert result["reference"]["peak_rss_mib"] > 0 and result["reference"]["hash_seconds"] > 0
    assert result["baseline"]["tool"].startswith("curl -sS --fail URL | openssl dgst -sha256")
    # One stream is capped at 25 MiB/s: curl cannot have beaten the cap (the server really throttles).
    assert result["baseline"]["mib_per_s"] <= 26
    assert result["machine_ceiling"]["ideal"] == 8 and result["machine_ceiling"]["ratio"] > 0
    assert result["speedup_over_download_alone"] == round(result["reference"]["download_seconds"] / result["ours"]["seconds"], 3)
    assert result["met"] == (result["speedup"] >= 1.0 and result["speedup_over_download_alone"] >= 0.95 and result["speedup_over_curl"] >= 5.0)


def test_a_failing_reference_pipeline_is_an_error_not_a_figure():
    # pipefail: a peer that dies mid-pipe must not be timed as if it had compressed anything.
    with pytest.raises(BuildFailure, match="tar \\| pigz failed \\(exit 3\\)") as caught:
        bench._timed_shell("(echo broken >&2; exit 3) | cat", "tar | pigz")
    assert "It printed: broken." in str(caught.value)
    with pytest.raises(BuildFailure):
        bench._timed_shell("false | cat", "tar | gzip")
    seconds, _cpu = bench._timed_shell("true | cat", "tar | gzip")
    assert seconds > 0


def test_payload_is_deterministic(tmp_path):
    sizes = [bench.make_payload(tmp_path / name, 2 << 20) for name in ("a", "b")]
    assert sizes[0] == sizes[1]
    for path in sorted((tmp_path / "a").rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()


def test_unknown_measurement_is_a_usage_error(tmp_path, capsys):
    assert main(["bench", "--only", "nope", "--output", str(tmp_path / "x.json")]) == 2
    assert "unknown measurement 'nope'" in capsys.readouterr().err



def test_a_missing_work_folder_is_a_usage_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert main(["bench", "--work", str(missing), "--output", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "--work" in err and str(missing) in err and "mkdir -p" in err
    assert not missing.exists() and not (tmp_path / "x.json").exists()
