"""Issue 6's benchmark measurements: the hashing of `verify`/`audit` and a served audit.

Three named measurements in the shape `pipeline.dev.bench` runs (a function of
`(work dir, payload root, payload bytes, gzip level)` returning one JSON
object with our numbers, the reference tool's numbers on the same bytes in the
same run, the ratio and whether the goal is met):

* `verify-hash-large-file`: `pipeline.util.hashing.sha256_file` (what
  `verify` and `audit` hash with) on the payload's largest file against
  `openssl dgst -sha256` on that file.  Goal: >= 0.9x OpenSSL's rate.
  coreutils `sha256sum` lacks SHA-NI here and is reported, not used as the bar.
* `verify-hash-many-files`: `sha256_files(files, jobs=2)` over every payload
  file against one sequential `openssl dgst -sha256 <all files>`.
  Goal: >= 1.6x on 2 cores.
* `audit-served-release`: `audit --jobs 2` of a release whose manifest binds
  the payload files, served from a loopback HTTP server in its own process,
  against `curl -s URL | sha256sum` of the same URLs one after another.
  Goal: no slower (ratio >= 1.0).  Both sides fetch the same bytes from the
  same server; audit also writes them to its cache and checks every size and
  hash against the manifest.

Each is the best of three rounds (the page cache makes the first read differ).
"""

from __future__ import annotations

import http.server
import json
import multiprocessing
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.util import ui
from pipeline.util.hashing import sha256_file, sha256_files
from pipeline.util.proc import require_tool, run_text

ROUNDS = 3
JOBS = 2


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds / (1 << 20), 1) if seconds > 0 else 0.0


def _files(payload: Path) -> list[Path]:
    return sorted(p for p in payload.rglob("*") if p.is_file())


def _openssl_digests(openssl: str, files: list[Path]) -> dict[Path, str]:
    text = run_text([openssl, "dgst", "-sha256", "-r", *files], what="hash with openssl")
    digests = {}
    for line in text.splitlines():
        digest, _, name = line.partition(" *")
        digests[Path(name)] = digest
    return digests


def measure_hash_large_file(work: Path, payload: Path, size: int, level: int) -> dict[str, Any]:
    openssl = require_tool("openssl", purpose="run the OpenSSL hashing reference", debian_package="openssl")
    largest = max(_files(payload), key=lambda p: p.stat().st_size)
    nbytes = largest.stat().st_size
    ui.step("bench", f"verify-hash-large-file: {largest.name} ({ui.human_bytes(nbytes)}) against openssl dgst -sha256")
    best = {"ours": 1e9, "openssl": 1e9}
    ours = reference = ""
    for _ in range(ROUNDS):
        start = time.perf_counter()
        ours = sha256_file(largest)
        best["ours"] = min(best["ours"], time.perf_counter() - start)
        start = time.perf_counter()
        reference = _openssl_digests(openssl, [largest])[largest]
        best["openssl"] = min(best["openssl"], time.perf_counter() - start)
    coreutils = None
    if shutil.which("sha256sum"):
        start = time.perf_counter()
        subprocess.run(["sha256sum", str(largest)], check=True, capture_output=True)
        coreutils = round(time.perf_counter() - start, 3)
    ratio = best["openssl"] / best["ours"] if best["ours"] > 0 else 0.0
    return {
        "name": "verify-hash-large-file",
        "file_bytes": nbytes,
        "ours": {"tool": "pipeline.util.hashing.sha256_file (verify, audit)", "seconds": round(best["ours"], 3), "mib_per_s": _rate(nbytes, best["ours"])},
        "reference": {"tool": "openssl dgst -sha256", "seconds": round(best["openssl"], 3), "mib_per_s": _rate(nbytes, best["openssl"])},
        "coreutils_sha256sum_seconds": coreutils,
        "digests_agree": ours == reference,
        "ratio": round(ratio, 3),
        "goal": "ratio >= 0.9 of openssl dgst -sha256 on the same file",
        "met": ours == reference and ratio >= 0.9,
    }


def measure_hash_many_files(work: Path, payload: Path, size: int, level: int) -> dict[str, Any]:
    openssl = require_tool("openssl", purpose="run the OpenSSL hashing reference", debian_package="openssl")
    files = _files(payload)
    total = sum(p.stat().st_size for p in files)
    ui.step("bench", f"verify-hash-many-files: {len(files)} files ({ui.human_bytes(total)}), --jobs {JOBS} against sequential openssl dgst")
    # The machine's own ceiling: the same files split over JOBS openssl processes at once.
    groups: list[list[Path]] = [[] for _ in range(JOBS)]
    loads = [0] * JOBS
    for path in sorted(files, key=lambda p: p.stat().st_size, reverse=True):
        slot = loads.index(min(loads))
        groups[slot].append(path)
        loads[slot] += path.stat().st_size
    best = {"ours": 1e9, "openssl": 1e9, "openssl_parallel": 1e9}
    ours: dict[Path, str] = {}
    reference: dict[Path, str] = {}
    for _ in range(ROUNDS):
        start = time.perf_counter()
        ours = sha256_files(files, jobs=JOBS)
        best["ours"] = min(best["ours"], time.perf_counter() - start)
        start = time.perf_counter()
        reference = _openssl_digests(openssl, files)
        best["openssl"] = min(best["openssl"], time.perf_counter() - start)
        start = time.perf_counter()
        processes = [subprocess.Popen([openssl, "dgst", "-sha256", "-r", *group], stdout=subprocess.DEVNULL) for group in groups if group]
        if any(process.wait() != 0 for process in processes):
            raise RuntimeError("openssl dgst failed")
        best["openssl_parallel"] = min(best["openssl_parallel"], time.perf_counter() - start)
    ratio = best["openssl"] / best["ours"] if best["ours"] > 0 else 0.0
    ceiling = best["openssl"] / best["openssl_parallel"] if best["openssl_parallel"] > 0 else 0.0
    return {
        "name": "verify-hash-many-files",
        "files": len(files),
        "payload_bytes": total,
        "cpus": os.cpu_count(),
        "ours": {"tool": f"pipeline.util.hashing.sha256_files (jobs={JOBS}, largest first)", "seconds": round(best["ours"], 3), "mib_per_s": _rate(total, best["ours"])},
        "reference": {"tool": "openssl dgst -sha256 <every file> (sequential)", "seconds": round(best["openssl"], 3), "mib_per_s": _rate(total, best["openssl"])},
        "machine_ceiling": {
            "tool": f"{JOBS} openssl dgst -sha256 processes at once (files split largest first)",
            "seconds": round(best["openssl_parallel"], 3),
            "ratio": round(ceiling, 3),
            "note": "the speedup this machine gives the reference tool itself; below 1.6 the cores do not deliver 2x (shared or throttled vCPUs)",
        },
        "digests_agree": ours == reference,
        "ratio": round(ratio, 3),
        "ratio_of_ceiling": round(ratio / ceiling, 3) if ceiling > 0 else None,
        "goal": f"ratio >= 1.6 with --jobs {JOBS} on 2 cores",
        "met": ours == reference and ratio >= 1.6,
    }


# -- a served release ---------------------------------------------------------------


def _serve(root: str, ready, port_box) -> None:  # runs in its own process
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            path = Path(root) / self.path.lstrip("/")
            try:
                handle = open(path, "rb")  # noqa: SIM115 - closed below
            except OSError:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with handle:
                size = os.fstat(handle.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.flush()
                offset = 0
                while offset < size:
                    sent = os.sendfile(self.connection.fileno(), handle.fileno(), offset, size - offset)
                    if sent == 0:
                        break
                    offset += sent

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port_box.value = server.server_address[1]
    ready.set()
    server.serve_forever()


def _served_tree(work: Path, payload: Path, base: str) -> tuple[Path, list[tuple[str, str, int]]]:
    """Publish the payload as a release: the largest file as the model, the others as client binaries."""
    files = _files(payload)
    largest = max(files, key=lambda p: p.stat().st_size)
    site = work / "site"
    digests = sha256_files(files, jobs=JOBS)
    entries: list[tuple[str, str, int]] = []
    platforms = []
    model = {}
    for path in files:
        name = "-".join(path.relative_to(payload).parts)
        if path == largest:
            route = f"neroued/model/resolve/{'a' * 40}/{name}"
            model = {"repository": f"{base}/neroued/model", "revision": "a" * 40, "artifact_name": name, "artifact_url": f"{base}/{route}", "artifact_bytes": path.stat().st_size, "artifact_sha256": digests[path]}
        else:
            route = f"upstream/client/releases/download/v1.0.0/{name}"
            platforms.append({"platform": name, "artifact_name": name, "artifact_url": f"{base}/{route}", "artifact_bytes": path.stat().st_size, "artifact_sha256": digests[path]})
        target = site / route
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        entries.append((f"{base}/{route}", digests[path], path.stat().st_size))
    manifest = {
        "release": "v0.0.0",
        "status": "ready",
        "product": {"repository": f"{base}/omp/omp-ninfer"},
        "components": {"omp": {"upstream_repository": f"{base}/upstream/client", "upstream_tag": "v1.0.0", "platforms": platforms}, "model": model},
    }
    manifest_path = site / "omp/omp-ninfer/raw" / ("b" * 40) / "manifests/v0.0.0/manifest.json"
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest_path.relative_to(site), entries


def measure_audit_served_release(work: Path, payload: Path, size: int, level: int) -> dict[str, Any]:
    from pipeline.stages.audit import Auditor

    curl = require_tool("curl", purpose="run the curl | sha256sum reference", debian_package="curl")
    sha256sum = require_tool("sha256sum", purpose="run the curl | sha256sum reference", debian_package="coreutils")
    context = multiprocessing.get_context("fork")
    ready, port_box = context.Event(), context.Value("i", 0)
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    server = context.Process(target=_serve, args=(str(site), ready, port_box), daemon=True)
    server.start()
    try:
        if not ready.wait(10):
            raise RuntimeError("the benchmark server did not start")
        base = f"http://127.0.0.1:{port_box.value}"
        manifest_route, entries = _served_tree(work, payload, base)
        total = sum(n for _, _, n in entries)
        ui.step("bench", f"audit-served-release: {len(entries)} files ({ui.human_bytes(total)}) over loopback, audit --jobs {JOBS} against curl | sha256sum")
        best = {"ours": 1e9, "curl": 1e9}
        passed = agree = True
        for round_index in range(ROUNDS):
            cache = work / f"audit-cache-{round_index}"
            auditor = Auditor(f"{base}/{manifest_route.as_posix()}", jobs=JOBS, cache=cache, allow_unsigned=True, progress=False)
            start = time.perf_counter()
            report = auditor.run()
            best["ours"] = min(best["ours"], time.perf_counter() - start)
            passed = passed and report.passed and report.bytes_downloaded == total
            shutil.rmtree(cache, ignore_errors=True)
            start = time.perf_counter()
            digests = []
            for url, _digest, _n in entries:
                out = subprocess.run(["bash", "-o", "pipefail", "-c", f"{curl} -sS --fail '{url}' | {sha256sum}"], check=True, capture_output=True, text=True).stdout
                digests.append(out.split()[0])
            best["curl"] = min(best["curl"], time.perf_counter() - start)
            agree = agree and digests == [d for _, d, _ in entries]
    finally:
        server.terminate()
        server.join(10)
    ratio = best["curl"] / best["ours"] if best["ours"] > 0 else 0.0
    return {
        "name": "audit-served-release",
        "files": len(entries),
        "payload_bytes": total,
        "ours": {"tool": f"python -m pipeline audit --jobs {JOBS} (download, hash while writing, size+SHA-256 checks, cache on disk)", "seconds": round(best["ours"], 3), "mib_per_s": _rate(total, best["ours"])},
        "reference": {"tool": "curl -sS URL | sha256sum, file after file", "seconds": round(best["curl"], 3), "mib_per_s": _rate(total, best["curl"])},
        "audit_passed": passed,
        "digests_agree": agree,
        "ratio": round(ratio, 3),
        "goal": "ratio >= 1.0 (audit no slower than curl | sha256sum of the same files)",
        "met": passed and agree and ratio >= 1.0,
    }


MEASUREMENTS: dict[str, Callable[[Path, Path, int, int], dict[str, Any]]] = {
    "verify-hash-large-file": measure_hash_large_file,
    "verify-hash-many-files": measure_hash_many_files,
    "audit-served-release": measure_audit_served_release,
}
