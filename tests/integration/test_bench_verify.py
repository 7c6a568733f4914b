"""Issue 6's benchmark measurements run end to end on a small payload (numbers are not asserted:
a benchmark is not a timed test; the structure, the real reference tools and the agreement of
every digest are)."""

from __future__ import annotations

import pytest

from pipeline.dev import bench_verify
from pipeline.util.hashing import sha256_file, sha256_files


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    from pipeline.dev import bench
    root = tmp_path_factory.mktemp("bench")
    size, _files = bench.make_payload(root / "payload" / "ninfer-bench", 8 << 20)
    return root, root / "payload" / "ninfer-bench", size


@pytest.mark.slow
def test_hash_large_file_against_openssl(payload):
    work, root, size = payload
    result = bench_verify.measure_hash_large_file(work, root, size, 6)
    assert result["name"] == "verify-hash-large-file"
    assert result["digests_agree"] is True
    assert result["reference"]["tool"] == "openssl dgst -sha256"
    assert result["ours"]["seconds"] > 0 and result["reference"]["seconds"] > 0
    assert result["met"] == (result["ratio"] >= 0.9)


@pytest.mark.slow
def test_hash_many_files_with_two_jobs_against_sequential_openssl(payload):
    work, root, size = payload
    result = bench_verify.measure_hash_many_files(work, root, size, 6)
    assert result["digests_agree"] is True and result["files"] > 60
    assert result["machine_ceiling"]["ratio"] > 0
    assert result["met"] == (result["ratio"] >= 1.6)


@pytest.mark.slow
def test_audit_of_a_served_release_against_curl_sha256sum(payload, tmp_path):
    _work, root, size = payload
    result = bench_verify.measure_audit_served_release(tmp_path, root, size, 6)
    assert result["audit_passed"] is True, "audit must pass on the served payload"
    assert result["digests_agree"] is True
    assert result["payload_bytes"] == size
    assert result["reference"]["tool"].startswith("curl")


def test_parallel_hashing_keeps_the_callers_order_and_values(tmp_path):
    paths = []
    for index, size in enumerate([10, 5000, 3, 1 << 20, 0, 77]):
        path = tmp_path / f"f{index}"
        path.write_bytes(bytes([index]) * size)
        paths.append(path)
    result = sha256_files(paths, jobs=2)
    assert list(result) == paths
    assert result == {path: sha256_file(path) for path in paths}
