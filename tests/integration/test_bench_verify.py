"""Issue 6's benchmark measurements run end to end on a small payload (numbers are not asserted:
a benchmark is not a timed test; the structure, the real reference tools and the agreement of
every digest are)."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from pipeline.dev import bench_verify
from pipeline.errors import BuildFailure
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
def test_audit_of_a_served_release_against_curl_openssl_and_curl_sha256sum(payload, tmp_path):
    _work, root, size = payload
    result = bench_verify.measure_audit_served_release(tmp_path, root, size, 6)
    assert result["audit_passed"] is True, "audit must pass on the served payload"
    # digests_agree: the digests parsed from openssl's "SHA2-256(stdin)= ..." lines (and from
    # sha256sum's) equal the manifest's, so both peers really fetched and hashed every file.
    assert result["digests_agree"] is True and result["baseline"]["digests_agree"] is True
    assert result["payload_bytes"] == size and result["jobs"] == bench_verify.JOBS
    assert result["reference"]["tool"] == f"curl -sS --fail URL | openssl dgst -sha256, {bench_verify.JOBS} at a time, largest first"
    assert result["baseline"]["tool"] == "curl -sS URL | sha256sum, file after file"
    assert {"seconds", "cpu_seconds", "mib_per_s"} <= set(result["ours"]) & set(result["reference"]) & set(result["baseline"])
    assert result["met"] == (result["ratio"] >= 0.9)
    assert result["cpu_ratio"] > 0 and result["reference"]["cpu_seconds"] > 0  # curl's and openssl's own CPU time was counted


def test_curl_openssl_reference_returns_the_digest_and_fails_loudly(tmp_path):
    import multiprocessing

    site = tmp_path / "site"
    site.mkdir()
    data = bytes(range(256)) * 4099
    (site / "blob").write_bytes(data)
    context = multiprocessing.get_context("fork")
    ready, port = context.Event(), context.Value("i", 0)
    server = context.Process(target=bench_verify._serve, args=(str(site), ready, port), daemon=True)
    server.start()
    try:
        assert ready.wait(10)
        base = f"http://127.0.0.1:{port.value}"
        curl, openssl = shutil.which("curl"), shutil.which("openssl")
        assert bench_verify._curl_openssl(curl, openssl, f"{base}/blob") == hashlib.sha256(data).hexdigest()
        with pytest.raises(BuildFailure, match="curl exit 22"):  # --fail: a 404 is an error, not the hash of an error page
            bench_verify._curl_openssl(curl, openssl, f"{base}/missing")
    finally:
        server.terminate()
        server.join(10)


def test_parallel_hashing_keeps_the_callers_order_and_values(tmp_path):
    paths = []
    for index, size in enumerate([10, 5000, 3, 1 << 20, 0, 77]):
        path = tmp_path / f"f{index}"
        path.write_bytes(bytes([index]) * size)
        paths.append(path)
    result = sha256_files(paths, jobs=2)
    assert list(result) == paths
    assert result == {path: sha256_file(path) for path in paths}
