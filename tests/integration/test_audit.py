"""`audit` against a release served from a local HTTP server on loopback.

The served tree follows docs/release-tree.md: the manifest and its records at
raw URLs pinned to a commit, the client binary and the model artefact, and the
real closed 11-file set of the RTX 4090 lane made by the pipeline's own build
(`--prebuilt`, mingw-w64 PE binaries) and package stages.  The server speaks
HTTP Range and can cut a connection mid-file once, answer 404, drip bytes
slowly or stall, and plays a GHCR-style registry (401 + anonymous token).  A
real Debian `docker-registry` is used for the image digest (marked
`registry`).  Every FAIL case asserts the reason, so a test cannot pass
because audit failed for some other cause.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from loopback import LoopbackServer, https_urls
from repokit import SIGSTORE_VECTORS

from pipeline import cli
from pipeline.errors import ExitCode
from pipeline.formats.audit_report import read_report
from pipeline.formats.release.manifest import parse_manifest
from pipeline.register import Register
from pipeline.stages import audit

RELEASE = "v0.13.1"
COMMIT = "1" * 40  # the commit the manifest is served at
RECORD_COMMIT = "2" * 40  # the pin-dance commit of the records
MODEL_REVISION = "3" * 40
LANE = "rtx4090-windows-native"
GH_SAN = "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"
GH_ISSUER = "https://token.actions.githubusercontent.com"


# -- the server ----------------------------------------------------------------------


class ReleaseServer(LoopbackServer):
    """Serves bytes by path on 127.0.0.1 with Range support and scripted faults."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut_once: dict[str, int] = {}  # path -> byte offset at which the connection is cut (once)
        self.slow: dict[str, float] = {}  # path -> seconds per 64 KiB chunk
        self.stall: set[str] = set()  # send headers and 512 KiB, then nothing
        self.answer: dict[str, int] = {}  # path -> an HTTP status served instead of the file (e.g. 503)
        self.registry: dict[tuple[str, str], bytes] = {}  # (name, digest) -> bytes served
        self.log: list[tuple[str, str | None]] = []
        self.token = "anonymous-pull-token-1234"
        self.token_answer: bytes | None = None  # the token service's body (None: {"token": ...})
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                server.log.append((path, self.headers.get("Range")))
                if path == "/token":
                    return self._send(200, server.token_answer or json.dumps({"token": server.token}).encode(), "application/json")
                match = re.fullmatch(r"/v2/(.+)/manifests/(sha256:[0-9a-f]{64})", path)
                if match:
                    if self.headers.get("Authorization") != f"Bearer {server.token}":
                        realm = f"http://127.0.0.1:{server.port}/token"
                        return self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', "application/json", {"WWW-Authenticate": f'Bearer realm="{realm}",service="test-registry",scope="repository:{match.group(1)}:pull"'})
                    body = server.registry.get((match.group(1), match.group(2)))
                    if body is None:
                        return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', "application/json")
                    return self._send(200, body, "application/vnd.oci.image.manifest.v1+json")
                if path in server.answer:
                    return self._send(server.answer[path], b"scripted answer", "text/plain")
                data = server.files.get(path)
                if data is None:
                    return self._send(404, b"Not Found", "text/plain")
                start, end = 0, len(data)
                status = 200
                ranged = self.headers.get("Range")
                if ranged:
                    asked = re.fullmatch(r"bytes=(\d+)-(\d*)", ranged)
                    start = int(asked.group(1))
                    end = min(end, int(asked.group(2)) + 1) if asked.group(2) else end
                    if start >= len(data):
                        return self._send(416, b"", "text/plain", {"Content-Range": f"bytes */{len(data)}"})
                    status = 206
                body = data[start:end]
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()
                cut = server.cut_once.pop(path, None)
                if cut is not None and start < cut:
                    self.wfile.write(body[: cut - start])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if path in server.stall:
                    # 512 KiB first: they earn the download 2 s at the floor rate, so the idle timeout (not
                    # the download's own deadline, which bounds every read too) is what ends the read.
                    self.wfile.write(body[: 512 * 1024])
                    self.wfile.flush()
                    time.sleep(3)
                    self.close_connection = True
                    return
                delay = server.slow.get(path)
                step = 64 * 1024
                for offset in range(0, len(body), step):
                    self.wfile.write(body[offset : offset + step])
                    if delay:
                        self.wfile.flush()
                        time.sleep(delay)

            def _send(self, status, body, content_type, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        self.serve(Handler)



@pytest.fixture
def server():
    srv = ReleaseServer()
    yield srv
    srv.close()


# -- the release tree -------------------------------------------------------------------


def _pseudo_random(size: int, seed: bytes) -> bytes:
    """Deterministic incompressible bytes (a stand-in for the model weights)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(seed + counter.to_bytes(8, "little")).digest() * 64
        counter += 1
    return bytes(out[:size])


@pytest.fixture(scope="session")
def native_set(tmp_path_factory):
    """The real RTX 4090 closed set, made by the pipeline's build (--prebuilt) and package stages."""
    import winfixtures
    workspace, dist = winfixtures.packaged_native_set(tmp_path_factory)
    folder = dist / LANE / "assets"
    assert (folder / "SHA256SUMS").is_file()
    return workspace, folder


class Tree:
    """A release tree published on the server; `manifest` can be edited before `publish()`."""

    def __init__(self, server: ReleaseServer, set_dir: Path | None, lanes_dir: Path | None) -> None:
        self.server = server
        self.lanes_dir = lanes_dir
        product = server.url("/alphastorm/omp-ninfer")
        self.product = product
        self.client = _pseudo_random(3 * 1024 * 1024 + 17, b"client")
        self.model = _pseudo_random(8 * 1024 * 1024 + 3, b"model")
        self.paths: dict[str, str] = {}
        client_url = server.url("/can1357/oh-my-pi/releases/download/v18.12.6/omp-windows-x64.exe")
        model_url = server.url(f"/neroued/Qwen3.8-27B-NInfer/resolve/{MODEL_REVISION}/qwen3_8_27b.ninfer")
        self.paths.update({"client": "/can1357/oh-my-pi/releases/download/v18.12.6/omp-windows-x64.exe", "model": f"/neroued/Qwen3.8-27B-NInfer/resolve/{MODEL_REVISION}/qwen3_8_27b.ninfer"})
        server.files[self.paths["client"]] = self.client
        server.files[self.paths["model"]] = self.model
        tree = f"manifests/{RELEASE}"
        summary = (json.dumps({"artifact_type": "omp_ninfer_product_qualification", "release": RELEASE, "schema_version": 2}, indent=2, sort_keys=True) + "\n").encode()
        compatibility = (json.dumps({"artifact_type": "omp_ninfer_compatibility_authority", "product_release": RELEASE, "schema_version": 1}, indent=2, sort_keys=True) + "\n").encode()
        records = {f"{tree}/qualification.json": summary, f"{tree}/compatibility.json": compatibility}
        self.manifest: dict = {
            "artifact_type": "omp_ninfer_release_manifest",
            "schema_version": 1,
            "release": RELEASE,
            "status": "ready",
            "product": {"name": "OMP NInfer", "repository": product},
            "components": {
                "omp": {
                    "distribution_kind": "upstream-release",
                    "upstream_repository": server.url("/can1357/oh-my-pi"),
                    "upstream_tag": "v18.12.6",
                    "platforms": [{"platform": "windows-x64", "artifact_name": "omp-windows-x64.exe", "artifact_url": client_url, "artifact_bytes": len(self.client), "artifact_sha256": hashlib.sha256(self.client).hexdigest()}],
                },
                "model": {
                    "repository": server.url("/neroued/Qwen3.8-27B-NInfer"),
                    "revision": MODEL_REVISION,
                    "artifact_name": "qwen3_8_27b.ninfer",
                    "artifact_url": model_url,
                    "artifact_bytes": len(self.model),
                    "artifact_sha256": hashlib.sha256(self.model).hexdigest(),
                },
                "ninfer": None,
                "ninfer_variants": [],
            },
            "qualification": {"summary": f"{tree}/qualification.json", "summary_sha256": hashlib.sha256(summary).hexdigest(), "public_url": f"{product}/raw/{RECORD_COMMIT}/{tree}/qualification.json", "acceptance": None},
            "compatibility": {"path": f"{tree}/compatibility.json", "sha256": hashlib.sha256(compatibility).hexdigest(), "public_url": f"{product}/raw/{RECORD_COMMIT}/{tree}/compatibility.json"},
            "signing": {
                "certificate_identity": f"https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/{RELEASE}",
                "certificate_oidc_issuer": GH_ISSUER,
                "bundle_suffix": ".sigstore.json",
                "signed_files": [f"{tree}/manifest.json"],
            },
            "publication": {"authorized": False, "blockers": [], "targets": []},
        }
        if set_dir is not None:
            row = self._native_row(set_dir, records)
            self.manifest["components"]["ninfer_variants"].append(row)
            self.manifest["signing"]["signed_files"].append(f"{tree}/qualification/{LANE}.SHA256SUMS")
        for path, data in records.items():
            server.files[f"/alphastorm/omp-ninfer/raw/{RECORD_COMMIT}/{path}"] = data
            server.files[f"/alphastorm/omp-ninfer/raw/{COMMIT}/{path}"] = data

    def _native_row(self, set_dir: Path, records: dict[str, bytes]) -> dict:
        receipt = json.loads((set_dir / "package-build-receipt.json").read_bytes())
        tag = receipt["component_tag"]
        prefix = f"/alphastorm/ninfer/releases/download/{tag}/"
        names = {}
        for path in sorted(set_dir.iterdir()):
            data = path.read_bytes()
            self.server.files[prefix + path.name] = data
            names[path.name] = data
            self.paths[path.name] = prefix + path.name
        sums = names["SHA256SUMS"]
        records[f"manifests/{RELEASE}/qualification/{LANE}.SHA256SUMS"] = sums
        row = {"id": LANE, "status": "qualified", "installable": True, "published": True, "repository": self.server.url("/alphastorm/ninfer"), "release_tag": tag,
               "source_commit": _set_source_commit(set_dir)}
        serve_tag(self.server, "alphastorm/ninfer", tag, row["source_commit"])
        fields = {
            "package": lambda n: n.endswith(".tar.gz") and not n.endswith("-source.tar.gz"),
            "source_archive": lambda n: n.endswith("-source.tar.gz"),
            "sbom": lambda n: n.endswith(".spdx.json"),
            "cdx_sbom": lambda n: n.endswith(".cdx.json"),
            "inner_checksums": lambda n: n.endswith(".SHA256SUMS"),
            "build_receipt": lambda n: n == "package-build-receipt.json",
            "installer": lambda n: n == "Install-Release.ps1",
            "controller": lambda n: n == "Control-Release.ps1",
            "gpu_owner_controller": lambda n: n == "Control-GpuOwner.ps1",
            "state_protection": lambda n: n == "Protect-StateRoot.ps1",
            "checksums": lambda n: n == "SHA256SUMS",
        }
        for stem, test in fields.items():
            name = next(n for n in names if test(n))
            row[f"{stem}_url"] = self.server.url(prefix + name)
            row[f"{stem}_sha256"] = hashlib.sha256(names[name]).hexdigest()
            if stem == "package":
                row["package_name"] = name
                row["package_bytes"] = len(names[name])
        row["checksums_path"] = f"manifests/{RELEASE}/qualification/{LANE}.SHA256SUMS"
        return row

    @property
    def manifest_path(self) -> str:
        return f"/alphastorm/omp-ninfer/raw/{COMMIT}/manifests/{RELEASE}/manifest.json"

    def publish(self) -> str:
        data = (json.dumps(self.manifest, indent=2, sort_keys=True) + "\n").encode()
        self.server.files[self.manifest_path] = data
        return self.server.url(self.manifest_path)

    def tamper(self, key: str, offset: int = 0) -> None:
        path = self.paths.get(key, key)
        data = bytearray(self.server.files[path])
        data[offset % len(data)] ^= 0x01
        self.server.files[path] = bytes(data)


def _set_source_commit(set_dir: Path) -> str:
    """The commit the set was built from, as the statement beside it names it (the row's source_commit)."""
    from pipeline.formats import provenance as slsa

    [statement] = list((set_dir.parent / slsa.FOLDER).glob("*" + slsa.SUFFIX))
    return slsa.read_statement(statement.read_bytes(), origin=str(statement)).external["source_commit"]


def tag_path(repository: str, tag: str, prefix: str = "") -> str:
    """Where GitHub's REST API answers for a tag ref: `/repos/<owner>/<name>/git/ref/tags/<tag>` (at the API's root)."""
    return f"{prefix}/repos/{repository}/git/ref/tags/{tag}"


def serve_tag(server: ReleaseServer, repository: str, tag: str, commit: str, *, prefix: str = "", annotated: str | None = None) -> str:
    """GitHub's answer for a lightweight tag (or, with `annotated`, a tag object of that sha naming the commit)."""
    path = tag_path(repository, tag, prefix)
    if annotated is None:
        target = {"type": "commit", "sha": commit, "url": f"https://api.github.com/repos/{repository}/git/commits/{commit}"}
    else:
        target = {"type": "tag", "sha": annotated, "url": f"https://api.github.com/repos/{repository}/git/tags/{annotated}"}
        server.files[f"{prefix}/repos/{repository}/git/tags/{annotated}"] = json.dumps(
            {"sha": annotated, "tag": tag, "message": f"{tag}\n", "object": {"type": "commit", "sha": commit}, "verification": {"verified": False}}).encode()
    server.files[path] = json.dumps({"ref": f"refs/tags/{tag}", "node_id": "REF_x", "url": f"https://api.github.com{path.removeprefix(prefix)}", "object": target}).encode()
    return path


def run_audit(url: str, tmp_path: Path, *extra: str, lanes_dir: Path | None = None, allow_unsigned: bool = True, **kwargs) -> tuple[audit.AuditReport, list[str]]:
    lines: list[str] = []
    auditor = audit.Auditor(
        url,
        jobs=kwargs.pop("jobs", 3),
        cache=kwargs.pop("cache", tmp_path / "cache"),
        allow_unsigned=allow_unsigned,
        progress=False,
        lanes_dir=lanes_dir,
        on_item=lambda item: lines.append(item.line()),
        **kwargs,
    )
    return auditor.run(), lines


def line_for(lines: list[str], prefix: str) -> str:
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"expected one line starting {prefix!r} in:\n" + "\n".join(lines)
    return found[0]


def fails(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL:")]


# -- all OK ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_complete_release_audits_ok(server, tmp_path, native_set):
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    assert fails(lines) == [], "\n".join(lines)
    assert report.passed
    assert line_for(lines, "OK: manifest manifest.json").endswith(f"status ready, sha256 {hashlib.sha256(server.files[tree.manifest_path]).hexdigest()})")
    assert line_for(lines, "OK: model qwen3_8_27b.ninfer")
    assert line_for(lines, "OK: client windows-x64 omp-windows-x64.exe")
    assert line_for(lines, "OK: qualification summary")
    assert line_for(lines, "OK: compatibility authority")
    set_line = line_for(lines, f"OK: set {LANE}")
    assert "closed set of 11 files, SHA256SUMS matches" in set_line
    assert len([line for line in lines if line.startswith(f"OK: {LANE} ")]) == 11  # every file of the set, hashed while downloading
    row = tree.manifest["components"]["ninfer_variants"][0]
    assert line_for(lines, "OK: tag ") == f"OK: tag alphastorm/ninfer {row['release_tag']} (names {row['source_commit']})"  # the component tag, read through the API
    stem = "ninfer-rtx4090-native-v0.7.0-beta.2-windows-x86_64-cuda13.3-rtx4090"
    assert line_for(lines, f"OK: sbom {stem}.spdx.json").endswith("(valid SPDX-2.3, 28 files)")
    assert "valid CycloneDX 1.6" in line_for(lines, f"OK: sbom {stem}.cdx.json")
    # Unsigned here (no live Sigstore); allowed only by the flag, and said so.
    assert line_for(lines, f"SKIP: signature manifests/{RELEASE}/manifest.json").endswith("manifest.json.sigstore.json")
    assert report.verdict().startswith(f"AUDIT PASSED: {RELEASE}: all ")
    assert report.bytes_downloaded >= len(tree.model) + len(tree.client)


def test_without_allow_unsigned_a_missing_bundle_fails(server, tmp_path):
    tree = Tree(server, None, None)
    report, lines = run_audit(tree.publish(), tmp_path, allow_unsigned=False)
    assert not report.passed
    assert fails(lines) == [f"FAIL: signature manifests/{RELEASE}/manifest.json: no Sigstore bundle at {server.url(tree.manifest_path)}.sigstore.json or {tree.product}/releases/download/{RELEASE}/manifest.json.sigstore.json"]


def test_cli_prints_lines_and_verdict_and_exits_0_or_1(server, tmp_path, capsys):
    tree = Tree(server, None, None)
    url = tree.publish()
    dist = tmp_path / "dist"
    code = cli.main(["audit", url, "--cache", str(tmp_path / "c"), "--allow-unsigned", "--quiet", "--jobs", "2", "--dist", str(dist)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    assert out[-1].startswith(f"AUDIT PASSED: {RELEASE}: all 6 items OK, 2 skipped;")  # manifest, signer, 4 records; unsigned, made before the review ledger
    assert f"SKIP: review ledger gate: made before the review ledger ({RELEASE} binds no reviews)" in out
    assert all(re.match(r"(OK|FAIL|SKIP): ", line) for line in out[:-1])
    # The audit ran through the stage contract: its report is a register entry.
    (entry,) = Register(dist).query("audit-report")
    assert (entry.path, entry.attrs["release"], entry.attrs["passed"], entry.attrs["manifest"]) == (f"audit/{RELEASE}.json", RELEASE, True, url)
    assert read_report(dist / entry.path)["verdict"] == out[-1]
    tree.tamper("model", 5)
    code = cli.main(["audit", url, "--cache", str(tmp_path / "c2"), "--allow-unsigned", "--quiet", "--json", "--dist", str(dist)])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == ExitCode.INPUT == 1
    assert document["passed"] is False and document["failed"] == 1
    assert [i["item"] for i in document["items"] if i["result"] == "fail"] == ["model qwen3_8_27b.ninfer"]
    assert "FAIL: model qwen3_8_27b.ninfer: SHA-256 mismatch" in captured.err
    # An observation always runs again: the same manifest's entry now records the failed audit.
    register = Register(dist)
    (entry,) = register.query("audit-report")
    assert entry.attrs["passed"] is False and register.stages[f"audit:{url}"]["outputs"] == [entry.name]
    recorded = read_report(register.verified_path(entry))
    assert {k: v for k, v in recorded.items() if k not in ("artifact_type", "schema_version")} == document


# -- tampered bytes, one per asset kind ------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ("model", "FAIL: model qwen3_8_27b.ninfer: SHA-256 mismatch"),
        ("client", "FAIL: client windows-x64 omp-windows-x64.exe: SHA-256 mismatch"),
        (f"/alphastorm/omp-ninfer/raw/{RECORD_COMMIT}/manifests/{RELEASE}/qualification.json", "FAIL: qualification summary: SHA-256 mismatch"),
    ],
)
def test_a_tampered_byte_in_a_plain_asset_fails(server, tmp_path, key, line):
    tree = Tree(server, None, None)
    tree.tamper(key, offset=1000)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert not report.passed
    assert [f.split(" (got")[0].split(": got")[0] for f in fails(lines)] == [line]


@pytest.mark.slow
@pytest.mark.parametrize(
    "which",
    ["package", "spdx", "cdx", "script", "receipt", "inner-sums", "outer-sums", "source"],
)
def test_a_tampered_byte_in_each_file_of_the_native_set_fails(server, tmp_path, native_set, which):
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    names = {
        "package": next(n for n in tree.paths if n.endswith("rtx4090.tar.gz")),
        "spdx": next(n for n in tree.paths if n.endswith(".spdx.json")),
        "cdx": next(n for n in tree.paths if n.endswith(".cdx.json")),
        "script": "Install-Release.ps1",
        "receipt": "package-build-receipt.json",
        "inner-sums": next(n for n in tree.paths if n.endswith("rtx4090.SHA256SUMS")),
        "outer-sums": "SHA256SUMS",
        "source": next(n for n in tree.paths if n.endswith("-source.tar.gz")),
    }
    name = names[which]
    tree.tamper(name, offset=len(server.files[tree.paths[name]]) // 2)
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    assert not report.passed
    failed = fails(lines)
    assert line_for(failed, f"FAIL: {LANE} {name}: SHA-256 mismatch")
    set_line = line_for(failed, f"FAIL: set {LANE}")
    if which == "outer-sums":
        assert "its outer SHA256SUMS could not be verified" in set_line
    else:
        assert f"{name} is not available with the bytes SHA256SUMS records" in set_line
    assert len(failed) == 2, "\n".join(failed)


@pytest.mark.slow
def test_a_set_whose_sums_list_an_extra_file_is_not_closed(server, tmp_path, native_set):
    """A consistent but open set: SHA256SUMS (and the manifest) list a file the lane's set does not have."""
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    row = tree.manifest["components"]["ninfer_variants"][0]
    extra = b"an extra file\n"
    sums = server.files[tree.paths["SHA256SUMS"]]
    lines_ = sorted(sums.decode().splitlines() + [f"{hashlib.sha256(extra).hexdigest()}  README-extra.txt"], key=lambda x: x.split("  ")[1].encode())
    new_sums = ("\n".join(lines_) + "\n").encode()
    prefix = tree.paths["SHA256SUMS"].rsplit("/", 1)[0] + "/"
    server.files[prefix + "README-extra.txt"] = extra
    server.files[tree.paths["SHA256SUMS"]] = new_sums
    row["checksums_sha256"] = hashlib.sha256(new_sums).hexdigest()
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    assert line_for(lines, f"OK: {LANE} README-extra.txt")  # its bytes match what SHA256SUMS says...
    set_line = line_for(fails(lines), f"FAIL: set {LANE}")
    assert "unexpected file 'README-extra.txt' in the asset set" in set_line  # ...but the set is closed
    assert not report.passed


@pytest.mark.slow
def test_an_invalid_sbom_is_reported_even_when_every_hash_is_consistent(server, tmp_path, native_set):
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    row = tree.manifest["components"]["ninfer_variants"][0]
    spdx_name = next(n for n in tree.paths if n.endswith(".spdx.json"))
    document = json.loads(server.files[tree.paths[spdx_name]])
    document["spdxVersion"] = "SPDX-9.9"
    bad = (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()
    server.files[tree.paths[spdx_name]] = bad
    row["sbom_sha256"] = hashlib.sha256(bad).hexdigest()
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    sbom_line = line_for(fails(lines), f"FAIL: sbom {spdx_name}")
    assert "SPDX" in sbom_line
    assert line_for(fails(lines), f"FAIL: set {LANE}")  # the manifest's hash now disagrees with SHA256SUMS
    assert not report.passed


# -- transport: resume, 404, slow, stalled -------------------------------------------------


def test_a_download_cut_mid_file_resumes_with_range(server, tmp_path):
    tree = Tree(server, None, None)
    cut = 5 * 1024 * 1024 + 11
    server.cut_once[tree.paths["model"]] = cut
    report, lines = run_audit(tree.publish(), tmp_path)
    assert report.passed, "\n".join(lines)
    line = line_for(lines, "OK: model qwen3_8_27b.ninfer")
    offset = int(re.search(r"resumed with HTTP Range at byte (\d+)", line).group(1))
    assert 0 < offset <= cut  # whatever arrived before the cut is kept (a torn last chunk is not)
    requests_for_model = [rng for path, rng in server.log if path == tree.paths["model"]]
    assert requests_for_model == [None, f"bytes={offset}-"]


def test_a_partial_file_from_an_earlier_run_is_resumed(server, tmp_path):
    tree = Tree(server, None, None)
    cache = tmp_path / "cache"
    part = cache / RELEASE / "asset" / "qwen3_8_27b.ninfer.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(tree.model[:1234567])
    report, lines = run_audit(tree.publish(), tmp_path, cache=cache)
    assert report.passed, "\n".join(lines)
    assert [rng for path, rng in server.log if path == tree.paths["model"]] == ["bytes=1234567-"]


def test_a_404_fails_the_item_and_the_audit(server, tmp_path):
    tree = Tree(server, None, None)
    del server.files[tree.paths["client"]]
    report, lines = run_audit(tree.publish(), tmp_path)
    assert fails(lines) == ["FAIL: client windows-x64 omp-windows-x64.exe: the server answered HTTP 404 for client windows-x64 omp-windows-x64.exe (the asset is not published at this URL (or is not public))"]
    assert report.verdict().startswith(f"AUDIT FAILED: {RELEASE}: 1 of ")


def test_a_slow_server_is_waited_for(server, tmp_path):
    tree = Tree(server, None, None)
    server.slow[tree.paths["client"]] = 0.01  # ~6 MiB/s: slow, but data keeps coming
    started = time.monotonic()
    report, lines = run_audit(tree.publish(), tmp_path, timeout=2.0)
    assert report.passed, "\n".join(lines)
    assert time.monotonic() - started >= 0.45  # 49 chunks x 10 ms: it really was slow
    assert line_for(lines, "OK: client windows-x64 omp-windows-x64.exe")


def test_a_stalled_server_times_out_with_a_clear_reason(server, tmp_path):
    tree = Tree(server, None, None)
    server.stall.add(tree.paths["client"])
    report, lines = run_audit(tree.publish(), tmp_path, timeout=0.5, retries=1)
    failed = fails(lines)
    assert len(failed) == 1
    assert failed[0].startswith("FAIL: client windows-x64 omp-windows-x64.exe: download of client windows-x64 omp-windows-x64.exe broke off after ")
    assert not report.passed


def test_a_pinned_asset_longer_than_its_pin_is_stopped_at_the_pin_and_deleted(server, tmp_path):
    tree = Tree(server, None, None)
    server.files[tree.paths["model"]] = tree.model + bytes(16 * 1024 * 1024)  # the manifest still binds len(model)
    cache = tmp_path / "cache"
    report, lines = run_audit(tree.publish(), tmp_path, cache=cache)
    assert fails(lines) == [f"FAIL: model qwen3_8_27b.ninfer: the server sent more than the {len(tree.model)} bytes pinned for model qwen3_8_27b.ninfer (the file at this URL is not the pinned one (or the server streams without end); the download was stopped at the pin)"]
    assert not any((cache / RELEASE / "asset").glob("qwen3_8_27b.ninfer*")), "rejected bytes must not stay in the cache"


def test_a_hash_mismatch_leaves_no_bytes_in_the_cache(server, tmp_path):
    tree = Tree(server, None, None)
    tree.tamper("client", 12345)
    cache = tmp_path / "cache"
    report, lines = run_audit(tree.publish(), tmp_path, cache=cache)
    assert line_for(fails(lines), "FAIL: client windows-x64 omp-windows-x64.exe: SHA-256 mismatch")
    kept = sorted(p.name for p in (cache / RELEASE / "asset").iterdir())
    assert [name for name in kept if not name.endswith(".lock")] == ["qwen3_8_27b.ninfer"]  # the good file stays, the rejected one is gone
    assert all((cache / RELEASE / "asset" / name).stat().st_size == 0 for name in kept if name.endswith(".lock"))  # locks hold no bytes


def test_a_manifest_over_its_cap_is_refused_while_it_streams(server, tmp_path):
    tree = Tree(server, None, None)
    url = tree.publish()
    server.files[tree.manifest_path] = b"{" + b" " * (audit.MAX_RELEASE_MANIFEST_BYTES + 1) + b"}"
    report, lines = run_audit(url, tmp_path)
    assert fails(lines) == [f"FAIL: manifest {url}: the answer for manifest.json is larger than the {audit.MAX_RELEASE_MANIFEST_BYTES} bytes allowed for a document of this kind (an unpinned document has a fixed size cap so that a hostile or broken server cannot fill memory or disk)"]
    assert not report.passed


def test_a_manifest_that_drips_is_cut_at_the_timeout(tmp_path):
    from hostile_http import Route, hostile_server

    path = f"/alphastorm/omp-ninfer/raw/{COMMIT}/manifests/{RELEASE}/manifest.json"
    with hostile_server() as hostile:
        url = hostile.add(path, Route("drip", interval=0.2))
        started = time.monotonic()
        report, lines = run_audit(url, tmp_path, timeout=1.0, retries=0)
        seconds = time.monotonic() - started
    # The manifest is the audit's first read, so the run's overall deadline (from the run's start) passes first.
    assert fails(lines) == [line_for(lines, f"FAIL: manifest {url}: the audit's overall deadline of 1 s passed while reading the body of {url} (")]
    assert seconds < 3.0, seconds


# -- the overall deadline: connect, headers and body -----------------------------------------------


class HeaderTrickle(LoopbackServer):
    """Answers every GET with its status line and headers one byte per `interval` seconds (at most `limit` seconds)."""

    def __init__(self, interval: float = 1.0, limit: float = 30.0) -> None:
        self.requests: list[str] = []
        self.bytes_sent: list[int] = []  # per answer: header bytes written before the client hung up
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                server.requests.append(self.path)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: " + b"p" * 200 + b"\r\nContent-Length: 2\r\n\r\n{}"
                started, sent = time.monotonic(), 0
                for byte in head:
                    if time.monotonic() - started > limit:
                        break
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the client hung up
                        break
                    sent += 1
                    time.sleep(interval)
                server.bytes_sent.append(sent)
                self.close_connection = True

        self.serve(Handler)


def _audit_process(url: str, tmp_path: Path, timeout: str) -> tuple[subprocess.CompletedProcess, float]:
    import sys

    from repokit import ROOT

    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "audit", url, "--timeout", timeout, "--quiet", "--cache", str(tmp_path / "cache"), "--dist", str(tmp_path / "dist")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    return result, time.monotonic() - started


MANIFEST_ROUTE = f"/alphastorm/omp-ninfer/raw/{COMMIT}/manifests/{RELEASE}/manifest.json"


def test_a_server_trickling_header_bytes_is_cut_at_the_audits_overall_deadline(tmp_path):
    # One header byte per second never trips a per-read timeout: before the overall deadline covered
    # the header phase, `audit --timeout 5` kept reading such headers for 152 s (issue 18).
    trickle = HeaderTrickle(interval=1.0)
    try:
        url = trickle.url(MANIFEST_ROUTE)
        result, seconds = _audit_process(url, tmp_path, "5")
    finally:
        trickle.close()
    assert seconds < 20.0, seconds  # 5 s plus the process's start on a loaded machine; unbounded took 152 s
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"FAIL: manifest {url}: the audit's overall deadline of 5 s passed while reading the headers of {url} (" in result.stdout, result.stdout
    assert result.stdout.splitlines()[-1].startswith("AUDIT FAILED: None: 1 of 1 items failed;"), result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert trickle.requests == [MANIFEST_ROUTE]  # no retry once the deadline has passed


def test_a_server_trickling_body_bytes_is_cut_at_the_audits_overall_deadline(tmp_path):
    from hostile_http import Route, hostile_server

    with hostile_server() as hostile:
        url = hostile.add(MANIFEST_ROUTE, Route("drip", interval=1.0))  # one body byte per second, no Content-Length
        result, seconds = _audit_process(url, tmp_path, "5")
        assert hostile.requests == [MANIFEST_ROUTE]
    assert seconds < 20.0, seconds  # 5 s plus the process's start on a loaded machine; unbounded took 152 s
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"FAIL: manifest {url}: the audit's overall deadline of 5 s passed while reading the body of {url} (" in result.stdout, result.stdout
    assert result.stdout.splitlines()[-1].startswith("AUDIT FAILED"), result.stdout
    assert "Traceback" not in result.stderr, result.stderr


def test_the_overall_deadline_spans_items_and_nothing_is_fetched_after_it(server, tmp_path):
    # Each asset trickles 10 bytes over 1.35 s, within its own deadline (--timeout 2 from its start):
    # one after the other they would take 2.7 s, but the audit's deadline counts from the run's start.
    from hostile_http import Route, hostile_server

    tree = Tree(server, None, None)
    data = b"y" * 10
    with hostile_server() as upstream, hostile_server() as hub:  # one server each: a drip never shares a connection
        omp, model = tree.manifest["components"]["omp"], tree.manifest["components"]["model"]
        omp["upstream_repository"] = upstream.url("/can1357/oh-my-pi")
        client_url = upstream.add(tree.paths["client"], Route("drip", interval=0.15, length=len(data)))
        omp["platforms"][0].update(artifact_url=client_url, artifact_bytes=len(data), artifact_sha256=hashlib.sha256(data).hexdigest())
        model["repository"] = hub.url("/neroued/Qwen3.8-27B-NInfer")
        model_url = hub.add(tree.paths["model"], Route("drip", interval=0.15, length=len(data)))
        model.update(artifact_url=model_url, artifact_bytes=len(data), artifact_sha256=hashlib.sha256(data).hexdigest())
        started = time.monotonic()
        report, lines = run_audit(tree.publish(), tmp_path, jobs=1, timeout=2.0)
        seconds = time.monotonic() - started
    assert seconds < 3.0, seconds
    assert line_for(lines, "OK: client windows-x64 omp-windows-x64.exe")
    assert line_for(lines, "FAIL: model qwen3_8_27b.ninfer").startswith(
        f"FAIL: model qwen3_8_27b.ninfer: the audit's overall deadline of 2 s passed while reading the body of {model_url} (--timeout bounds the whole audit")
    records = tree.manifest["qualification"]["public_url"], tree.manifest["compatibility"]["public_url"]
    assert line_for(lines, "FAIL: qualification summary: ") == f"FAIL: qualification summary: the audit's overall deadline of 2 s passed before requesting {records[0]} ({audit_deadline_why()})"
    assert line_for(lines, "FAIL: compatibility authority: ").startswith(f"FAIL: compatibility authority: the audit's overall deadline of 2 s passed before requesting {records[1]} (")
    # The manifest's bundle was not looked for: FAIL, not the SKIP a missing bundle is under --allow-unsigned.
    assert line_for(lines, f"FAIL: signature manifests/{RELEASE}/manifest.json: ").startswith(
        f"FAIL: signature manifests/{RELEASE}/manifest.json: cannot fetch the Sigstore bundle: the audit's overall deadline of 2 s passed before requesting ")
    assert [path for path, _range in server.log] == [tree.manifest_path]  # nothing was requested after the deadline
    assert not report.passed


def audit_deadline_why() -> str:
    return ("--timeout bounds the whole audit from its start: every connection, status line, header and body, retries included, "
            "plus the time its received bytes earn at 256 KiB/s; a server that trickles bytes cannot keep it running")


def test_a_manifest_is_never_fetched_through_a_redirect(tmp_path):
    from hostile_http import Route, hostile_server

    path = f"/alphastorm/omp-ninfer/raw/{COMMIT}/manifests/{RELEASE}/manifest.json"
    with hostile_server() as hostile:
        hostile.add("/elsewhere.json", Route("body", body=b'{"release": "v0.13.1"}'))
        url = hostile.add(path, Route("redirect", status=302, location="/elsewhere.json"))
        report, lines = run_audit(url, tmp_path)
        assert "/elsewhere.json" not in hostile.requests
    assert fails(lines) == [f"FAIL: manifest {url}: refused to follow the redirect of manifest.json to {hostile.url('/elsewhere.json')} (this document is fetched from its own URL only, redirects are not followed)"]


def test_a_manifest_url_on_a_host_named_127_something_is_refused_before_any_request(server, tmp_path):
    url = f"http://127.attacker.com:{server.port}/alphastorm/omp-ninfer/raw/{COMMIT}/manifests/{RELEASE}/manifest.json"
    report, lines = run_audit(url, tmp_path)
    assert fails(lines) == [f"FAIL: manifest {url}: plain HTTP is not accepted (only for loopback test servers); the release must be served over HTTPS"]
    assert server.log == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"token": "x", "token": "anonymous-pull-token-1234"}', "holds the key 'token' twice in one object"),
        (b'["anonymous-pull-token-1234"]', "must hold a JSON object"),
        (b"not json", "is not valid JSON"),
    ],
)
def test_a_malformed_token_answer_fails_the_image_item_clearly(server, tmp_path, body, reason):
    manifest = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}'
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    name = "alphastorm/ninfer-runtime"
    server.registry[(name, digest)] = manifest
    server.token_answer = body
    tree = Tree(server, None, None)
    reference = f"127.0.0.1:{server.port}/{name}@{digest}"
    tree.manifest["components"]["ninfer"] = _image_row(reference, digest)
    report, lines = run_audit(tree.publish(), tmp_path)
    failed = fails(lines)
    assert len(failed) == 1 and failed[0].startswith(f"FAIL: image {reference}: {reason}"), failed
    assert "internal error" not in failed[0] and "Traceback" not in failed[0]


# -- locations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            lambda m, s: m["components"]["model"].update(artifact_url=s.url("/neroued/Qwen3.8-27B-NInfer/resolve/main/qwen3_8_27b.ninfer")),
            "FAIL: model qwen3_8_27b.ninfer: points outside its release: expected {base}/neroued/Qwen3.8-27B-NInfer/resolve/" + MODEL_REVISION + "/qwen3_8_27b.ninfer",
        ),
        (
            lambda m, s: m["components"]["omp"]["platforms"][0].update(artifact_url=s.url("/can1357/oh-my-pi/releases/download/v18.12.5/omp-windows-x64.exe")),
            "FAIL: client windows-x64 omp-windows-x64.exe: points outside its release: expected {base}/can1357/oh-my-pi/releases/download/v18.12.6/omp-windows-x64.exe",
        ),
        (
            lambda m, s: m["qualification"].update(public_url=s.url(f"/alphastorm/omp-ninfer/raw/main/manifests/{RELEASE}/qualification.json")),
            "FAIL: qualification summary: is not pinned to a 40-hex commit (found 'main'): a branch or tag URL can change",
        ),
        (
            lambda m, s: m["compatibility"].update(public_url=s.url(f"/alphastorm/omp-ninfer/raw/{RECORD_COMMIT}/manifests/v0.13.0/compatibility.json")),
            "FAIL: compatibility authority: points outside its release: names 'manifests/v0.13.0/compatibility.json', but the record's path is 'manifests/v0.13.1/compatibility.json'",
        ),
        (
            lambda m, s: m["components"]["model"].update(artifact_url="http://198.51.100.7/neroued/Qwen3.8-27B-NInfer/resolve/" + MODEL_REVISION + "/qwen3_8_27b.ninfer"),
            "FAIL: model qwen3_8_27b.ninfer: plain HTTP is not accepted (only for loopback test servers); the release must be served over HTTPS",
        ),
        (
            # A host *name* that starts with "127." is not loopback (it resolves wherever its owner likes).
            lambda m, s: m["components"]["model"].update(
                repository="http://127.attacker.com/neroued/Qwen3.8-27B-NInfer",
                artifact_url="http://127.attacker.com/neroued/Qwen3.8-27B-NInfer/resolve/" + MODEL_REVISION + "/qwen3_8_27b.ninfer",
            ),
            "FAIL: model qwen3_8_27b.ninfer: plain HTTP is not accepted (only for loopback test servers); the release must be served over HTTPS",
        ),
    ],
)
def test_a_manifest_pointing_outside_its_release_fails_without_fetching(server, tmp_path, edit, line):
    tree = Tree(server, None, None)
    edit(tree.manifest, server)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert fails(lines) == [line.format(base=server.base)]
    assert not report.passed
    fetched = {path for path, _ in server.log}
    assert "/neroued/Qwen3.8-27B-NInfer/resolve/main/qwen3_8_27b.ninfer" not in fetched


@pytest.mark.slow
def test_a_set_file_outside_the_component_tag_fails(server, tmp_path, native_set):
    workspace, set_dir = native_set
    tree = Tree(server, set_dir, workspace.lanes_dir)
    row = tree.manifest["components"]["ninfer_variants"][0]
    row["installer_url"] = row["installer_url"].replace(row["release_tag"], "v0.6.0-qwen38-4090-beta.1")
    report, lines = run_audit(tree.publish(), tmp_path, lanes_dir=workspace.lanes_dir)
    line = line_for(fails(lines), f"FAIL: {LANE} Install-Release.ps1")
    assert f"points outside its release: expected {server.base}/alphastorm/ninfer/releases/download/{row['release_tag']}/Install-Release.ps1" in line


def test_a_manifest_served_outside_its_release_tree_fails(server, tmp_path):
    tree = Tree(server, None, None)
    data = (json.dumps(tree.manifest) + "\n").encode()
    server.files["/alphastorm/omp-ninfer/raw/" + COMMIT + "/manifests/v0.13.0/manifest.json"] = data
    report, lines = run_audit(server.url("/alphastorm/omp-ninfer/raw/" + COMMIT + "/manifests/v0.13.0/manifest.json"), tmp_path)
    assert line_for(fails(lines), "FAIL: manifest manifest.json: points outside its release: a manifest of v0.13.1 must be served as …/manifests/v0.13.1/manifest.json")


def test_null_bindings_fail_as_not_bound(server, tmp_path):
    tree = Tree(server, None, None)
    tree.manifest["components"]["model"]["artifact_sha256"] = None
    tree.manifest["qualification"]["public_url"] = None
    report, lines = run_audit(tree.publish(), tmp_path)
    assert sorted(fails(lines)) == [
        "FAIL: model qwen3_8_27b.ninfer: not bound: components.model.artifact_sha256 is null",
        "FAIL: qualification summary: not bound: qualification.public_url is null",
    ]


# Found by the manifest and audit fuzzers (tests/fuzz, structure-aware mutation of the shipped
# manifests): a field of the wrong type (a number where a list of rows or platforms belongs, a
# number as the product repository) or a URL urlsplit cannot parse ("http://[") was a TypeError,
# AttributeError or ValueError: an internal error instead of a FAIL line for that field.  A
# binding field of the wrong type fails the manifest (read as empty it would pass unchecked).
@pytest.mark.parametrize(
    ("edit", "prefix", "reason"),
    [
        (lambda m: m["components"].__setitem__("ninfer_variants", 5), "FAIL: manifest manifest.json:", "components.ninfer_variants: must hold a JSON array (found 'number'"),
        (lambda m: m["components"]["omp"].__setitem__("platforms", 1.5), "FAIL: manifest manifest.json:", "components.omp.platforms: must hold a JSON array"),
        (lambda m: m["components"]["ninfer_variants"].insert(0, None), "FAIL: manifest manifest.json:", "components.ninfer_variants[0]: must hold a JSON object (found 'null'"),
        (lambda m: m.__setitem__("components", "x"), "FAIL: manifest manifest.json:", "components: must hold a JSON object (found 'string'"),
        (lambda m: m["product"].__setitem__("repository", 5), "FAIL: manifest manifest.json:", "product.repository: must be a URL string"),
        (lambda m: m["compatibility"].__setitem__("public_url", "http://[::1/x"), "FAIL: compatibility authority:", "is not a valid URL (Invalid IPv6 URL)"),
        (lambda m: m["components"]["model"].__setitem__("artifact_url", "https://[x"), "FAIL: model qwen3_8_27b.ninfer:", "is not a valid URL (Invalid IPv6 URL)"),
    ],
)
def test_a_manifest_field_of_the_wrong_type_fails_its_item_instead_of_a_traceback(server, tmp_path, edit, prefix, reason):
    tree = Tree(server, None, None)
    edit(tree.manifest)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert not report.passed and report.verdict().startswith("AUDIT FAILED")
    assert reason in line_for(fails(lines), prefix)
    parsed = parse_manifest(json.dumps(tree.manifest).encode(), source="manifest.json", check_type=False)
    bindings = audit.collect_bindings(parsed)  # the collection alone is total too
    assert all(isinstance(audit.binding_problem(binding), (str, type(None))) for binding in bindings)


# -- signatures -----------------------------------------------------------------------------


def test_signed_files_are_verified_offline_with_the_real_bundles(server, tmp_path):
    """The tree's signer is the GitHub release workflow of the vectors; one signed file is the real wheel."""
    vectors = SIGSTORE_VECTORS
    tree = Tree(server, None, None)
    tree.manifest["signing"]["certificate_identity"] = GH_SAN
    wheel = f"manifests/{RELEASE}/bundle_v3_github.whl"
    tree.manifest["signing"]["signed_files"].append(wheel)
    base = f"/alphastorm/omp-ninfer/raw/{COMMIT}/"
    server.files[base + wheel] = (vectors / "bundle_v3_github.whl").read_bytes()
    server.files[base + wheel + ".sigstore.json"] = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    # The manifest's bundle is a real bundle of the wheel: valid signer, other bytes.
    server.files[tree.manifest_path + ".sigstore.json"] = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    # The auditor names the signer it expects (the manifest's own claim decides nothing).
    report, lines = run_audit(tree.publish(), tmp_path, allow_unsigned=False, certificate_identity=GH_SAN)
    assert line_for(lines, "OK: signer") == f"OK: signer ({GH_SAN} (issuer {GH_ISSUER}, production Sigstore; from --certificate-identity))"
    assert line_for(lines, f"OK: signature {wheel}") == f"OK: signature {wheel} (signed by {GH_SAN}, log index 79605083)"
    assert fails(lines) == [f"FAIL: signature manifests/{RELEASE}/manifest.json: Bundle message digest mismatch"]


def test_a_manifest_cannot_name_its_own_signer(server, tmp_path):
    """A manifest that declares another signer than the auditor expects binds nothing: no URL it names is fetched."""
    vectors = SIGSTORE_VECTORS
    tree = Tree(server, None, None)
    tree.manifest["signing"]["certificate_identity"] = GH_SAN  # a valid signer, of another repository
    wheel = f"manifests/{RELEASE}/bundle_v3_github.whl"
    tree.manifest["signing"]["signed_files"] = [wheel]
    base = f"/alphastorm/omp-ninfer/raw/{COMMIT}/"
    server.files[base + wheel] = (vectors / "bundle_v3_github.whl").read_bytes()
    server.files[base + wheel + ".sigstore.json"] = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    url = tree.publish()
    server.log.clear()
    report, lines = run_audit(url, tmp_path, allow_unsigned=False)
    assert not report.passed
    signer = line_for(fails(lines), "FAIL: signer")
    assert GH_SAN in signer and f"https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/{RELEASE}" in signer
    assert "--repository OWNER/NAME or --certificate-identity" in signer
    assert [path for path, _ in server.log] == [urlsplit(url).path], "only the manifest may be fetched"
    # --repository names the signer's repository: then the manifest's product repository must be that one too.
    report, lines = run_audit(url, tmp_path, allow_unsigned=False, repository="trailofbits/rfc8785.py")
    assert "product.repository" in line_for(fails(lines), "FAIL: signer") and "is not the signer's repository https://github.com/trailofbits/rfc8785.py" in line_for(fails(lines), "FAIL: signer")
    # The right name on another host is another repository: it would serve the raw records and the bundles.
    tree = Tree(server, None, None)
    tree.manifest["product"]["repository"] = "https://github.com.evil.example/alphastorm/omp-ninfer"
    report, lines = run_audit(tree.publish(), tmp_path / "host", allow_unsigned=False)
    assert "is not the signer's repository https://github.com/alphastorm/omp-ninfer" in line_for(fails(lines), "FAIL: signer")


def test_the_manifest_itself_must_be_among_the_signed_files(server, tmp_path):
    """A manifest that lists only some other, genuinely signed file authenticates nothing it binds."""
    vectors = SIGSTORE_VECTORS
    tree = Tree(server, None, None)
    wheel = f"manifests/{RELEASE}/bundle_v3_github.whl"
    tree.manifest["signing"]["signed_files"] = [wheel]
    base = f"/alphastorm/omp-ninfer/raw/{COMMIT}/"
    server.files[base + wheel] = (vectors / "bundle_v3_github.whl").read_bytes()
    server.files[base + wheel + ".sigstore.json"] = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    for allow_unsigned in (False, True):  # not a missing bundle: a manifest that does not claim to be signed
        report, lines = run_audit(tree.publish(), tmp_path / str(allow_unsigned), allow_unsigned=allow_unsigned)
        assert not report.passed
        assert line_for(fails(lines), "FAIL: signatures") == f"FAIL: signatures: signing.signed_files does not list manifests/{RELEASE}/manifest.json: the manifest itself must be signed"


def test_a_manifest_cannot_choose_the_sigstore_instance(server, tmp_path):
    tree = Tree(server, None, None)
    tree.manifest["signing"]["trust_config"] = "staging"
    url = tree.publish()
    report, lines = run_audit(url, tmp_path)
    assert "asks for the 'staging' Sigstore instance" in line_for(fails(lines), "FAIL: signer")
    assert "--trust-config staging" in line_for(fails(lines), "FAIL: signer")
    report, lines = run_audit(url, tmp_path / "b", trust_config="staging")  # the auditor's own choice
    assert line_for(lines, "OK: signer").endswith("staging Sigstore; from the default repository alphastorm/omp-ninfer))")


def test_a_signature_by_another_identity_fails(server, tmp_path):
    vectors = SIGSTORE_VECTORS
    tree = Tree(server, None, None)  # expects alphastorm/omp-ninfer's release workflow
    wheel = f"manifests/{RELEASE}/bundle_v3_github.whl"
    tree.manifest["signing"]["signed_files"].append(wheel)
    base = f"/alphastorm/omp-ninfer/raw/{COMMIT}/"
    server.files[base + wheel] = (vectors / "bundle_v3_github.whl").read_bytes()
    server.files[base + wheel + ".sigstore.json"] = (vectors / "bundle_v3_github.whl.sigstore").read_bytes()
    report, lines = run_audit(tree.publish(), tmp_path, allow_unsigned=False)
    line = line_for(fails(lines), f"FAIL: signature {wheel}")
    assert "GitHubWorkflowRepository does not match (got 'trailofbits/rfc8785.py', expected 'alphastorm/omp-ninfer')" in line or "SANs do not match" in line


# -- component tags (issue #17: a repointed tag passed the audit) ------------------------------------

TAG = "v0.7.0-qwen38-4090-beta.2"
SOURCE = "4" * 40


def _tag_tree(server: ReleaseServer, *, repository: str | None = None, **row) -> Tree:
    """A release whose one published component row binds a tag and a source commit (and no set files)."""
    tree = Tree(server, None, None)
    tree.manifest["components"]["ninfer_variants"].append(
        {"id": LANE, "status": "qualified", "published": True, "repository": repository or server.url("/alphastorm/ninfer"), "release_tag": TAG, "source_commit": SOURCE, **row})
    return tree


@pytest.mark.parametrize("annotated", [None, "a" * 40], ids=["lightweight", "annotated"])
def test_a_component_tag_that_names_the_rows_commit_is_ok(server, tmp_path, annotated):
    tree = _tag_tree(server)
    serve_tag(server, "alphastorm/ninfer", TAG, SOURCE, annotated=annotated)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert fails(lines) == [], "\n".join(lines)
    via = f" (through the annotated tag object {annotated})" if annotated else ""
    assert line_for(lines, "OK: tag alphastorm/ninfer") == f"OK: tag alphastorm/ninfer {TAG} (names {SOURCE}{via})"
    assert report.passed
    # Read anonymously from the REST API's path, the annotated tag dereferenced through /git/tags/{sha}.
    asked = [path for path, _range in server.log if path.startswith("/repos/")]
    assert asked == [tag_path("alphastorm/ninfer", TAG)] + ([f"/repos/alphastorm/ninfer/git/tags/{annotated}"] if annotated else [])


def test_a_github_repositorys_tag_is_read_at_api_github_com_through_the_mirror(server, tmp_path):
    tree = _tag_tree(server, repository="https://github.com/alphastorm/ninfer")
    serve_tag(server, "alphastorm/ninfer", TAG, SOURCE, prefix="/api.github.com")
    report, lines = run_audit(tree.publish(), tmp_path, mirrors=[("https://api.github.com/", f"{server.base}/api.github.com/")])
    assert line_for(lines, "OK: tag alphastorm/ninfer") == f"OK: tag alphastorm/ninfer {TAG} (names {SOURCE})"
    assert report.passed and (tag_path("alphastorm/ninfer", TAG, "/api.github.com"), None) in server.log


@pytest.mark.parametrize("annotated", [None, "b" * 40], ids=["lightweight", "annotated"])
def test_a_component_tag_moved_to_another_commit_fails_naming_both(server, tmp_path, annotated):
    tree = _tag_tree(server)
    serve_tag(server, "alphastorm/ninfer", TAG, "f" * 40, annotated=annotated)
    report, lines = run_audit(tree.publish(), tmp_path)
    via = f" (through the annotated tag object {annotated})" if annotated else ""
    assert fails(lines) == [f"FAIL: tag alphastorm/ninfer {TAG}: names {'f' * 40}{via}, the manifest binds {SOURCE} (components.ninfer_variants[0].source_commit): a published component tag never moves"]
    assert not report.passed


def test_a_missing_component_tag_fails(server, tmp_path):
    tree = _tag_tree(server)
    report, lines = run_audit(tree.publish(), tmp_path)
    url = server.url(tag_path("alphastorm/ninfer", TAG))
    assert fails(lines) == [f"FAIL: tag alphastorm/ninfer {TAG}: absent: alphastorm/ninfer has no tag {TAG} (HTTP 404 at {url}), but the manifest says its component release is published"]
    # An annotated tag whose tag object is gone fails too.
    serve_tag(server, "alphastorm/ninfer", TAG, SOURCE, annotated="c" * 40)
    del server.files[f"/repos/alphastorm/ninfer/git/tags/{'c' * 40}"]
    _report, lines = run_audit(tree.publish(), tmp_path / "object")
    assert fails(lines) == [f"FAIL: tag alphastorm/ninfer {TAG}: the annotated tag object {'c' * 40} is absent (HTTP 404 at {server.url('/repos/alphastorm/ninfer/git/tags/' + 'c' * 40)})"]


@pytest.mark.parametrize(("body", "reason"), [
    (b"<html>rate limited</html>", "is not a JSON document"),
    (b'{"ref": "refs/tags/x", "ref": "refs/tags/y"}', "is not a JSON document"),
    (b"[]", "is not the ref refs/tags/" + TAG + " (found a list of 0 refs)"),
    (json.dumps({"ref": f"refs/tags/{TAG}-other", "object": {"type": "commit", "sha": SOURCE}}).encode(), f"(found ref 'refs/tags/{TAG}-other')"),
    (json.dumps({"ref": f"refs/tags/{TAG}"}).encode(), "names no commit or tag object (found object null)"),
    (json.dumps({"ref": f"refs/tags/{TAG}", "object": {"type": "blob", "sha": SOURCE}}).encode(), 'names no commit or tag object (found object {"type": "blob", "sha": "' + SOURCE + '"})'),
    (json.dumps({"ref": f"refs/tags/{TAG}", "object": {"type": "commit", "sha": SOURCE[:12]}}).encode(), "names no commit or tag object"),
    (b"{" + b" " * (audit.MAX_API_ANSWER_BYTES + 1) + b"}", "cannot read refs/tags/" + TAG + " through GitHub's API: "),
], ids=["html", "duplicate-key", "list", "other-ref", "no-object", "blob", "short-sha", "over-cap"])
def test_a_malformed_tag_answer_fails_with_a_clear_reason(server, tmp_path, body, reason):
    tree = _tag_tree(server)
    server.files[tag_path("alphastorm/ninfer", TAG)] = body
    report, lines = run_audit(tree.publish(), tmp_path)
    [line] = fails(lines)
    assert line.startswith(f"FAIL: tag alphastorm/ninfer {TAG}: ") and reason in line, line
    assert "Traceback" not in line and not report.passed


def test_an_unreachable_api_fails_closed(server, tmp_path):
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tree = _tag_tree(server, repository=f"http://127.0.0.1:{port}/alphastorm/ninfer")
    report, lines = run_audit(tree.publish(), tmp_path, retries=0, timeout=5)
    [line] = fails(lines)
    assert line.startswith(f"FAIL: tag alphastorm/ninfer {TAG}: cannot read refs/tags/{TAG} through GitHub's API: "), line
    assert not report.passed


@pytest.mark.parametrize(("row", "reason"), [
    ({"source_commit": None}, "not bound: components.ninfer_variants[0].source_commit is null, so nothing says which commit the tag must name"),
    ({"release_tag": None}, "not bound: components.ninfer_variants[0].release_tag is null"),
    ({"release_tag": "a/../b"}, "components.ninfer_variants[0].release_tag is not a tag name (found 'a/../b')"),
    ({"repository": "https://gitlab.com/alphastorm/ninfer"}, "is not on GitHub: the audit reads component tags through GitHub's REST API only"),
], ids=["no-commit", "no-tag", "tag-with-slash", "not-github"])
def test_a_published_row_whose_tag_cannot_be_read_fails(server, tmp_path, row, reason):
    tree = _tag_tree(server, **row)
    serve_tag(server, "alphastorm/ninfer", TAG, SOURCE)
    _report, lines = run_audit(tree.publish(), tmp_path)
    [line] = fails(lines)
    assert line.startswith("FAIL: tag ") and line.endswith(reason), line


def test_an_unpublished_row_has_its_tag_skipped_not_passed(server, tmp_path):
    tree = _tag_tree(server, published=False)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert line_for(lines, "SKIP: tag alphastorm/ninfer") == f"SKIP: tag alphastorm/ninfer {TAG}: components.ninfer_variants[0].published is false: the manifest does not say the component release exists, so its tag is not read"
    assert not any(path.startswith("/repos/") for path, _range in server.log)


# -- the image digest ---------------------------------------------------------------------------


def _image_row(reference: str, digest: str) -> dict:
    repository = reference.split("@", 1)[0]
    return {"id": "rtx5090-container", "status": "qualified", "oci_repository": repository, "oci_reference": reference, "oci_manifest_digest": digest}


def test_image_digest_is_checked_through_the_anonymous_token_flow(server, tmp_path):
    manifest = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}'
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    name = "alphastorm/ninfer-runtime"
    server.registry[(name, digest)] = manifest
    tree = Tree(server, None, None)
    reference = f"127.0.0.1:{server.port}/{name}@{digest}"
    tree.manifest["components"]["ninfer"] = _image_row(reference, digest)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert line_for(lines, f"OK: image {reference}").endswith("hashes to the pinned digest)")
    assert ("/token", None) in server.log  # 401 -> anonymous token -> GET with Bearer
    # A registry that serves other bytes under the digest (a tampering mirror) is caught by hashing.
    server.registry[(name, digest)] = manifest.replace(b'"layers":[]', b'"layers": []')
    report, lines = run_audit(tree.publish(), tmp_path / "again")
    actual = "sha256:" + hashlib.sha256(server.registry[(name, digest)]).hexdigest()
    assert fails(lines) == [f"FAIL: image {reference}: image digest mismatch: the registry's manifest bytes hash to {actual}"]


def test_a_tag_reference_is_refused(server, tmp_path):
    tree = Tree(server, None, None)
    tree.manifest["components"]["ninfer"] = _image_row(f"127.0.0.1:{server.port}/alphastorm/ninfer-runtime:latest", None)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert line_for(fails(lines), "FAIL: image 127.0.0.1").endswith("is not a digest-pinned image reference")


# -- a real docker-registry ------------------------------------------------------------------------


def _push_image(registry: str, name: str) -> tuple[bytes, str]:
    """Push a small real OCI image (config + one layer) with the distribution API; return (manifest, digest)."""
    import io
    import tarfile

    import requests

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = requests.post(f"http://{registry}/v2/{name}/blobs/uploads/", timeout=10)
        assert start.status_code == 202, start.text
        location = start.headers["Location"]
        location = location if location.startswith("http") else f"http://{registry}{location}"
        done = requests.put(location, params={"digest": digest}, data=data, headers={"Content-Type": "application/octet-stream"}, timeout=10)
        assert done.status_code == 201, done.text
        return {"digest": digest, "size": len(data)}

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("etc/ninfer-release")
        payload = b"v0.13.1\n"
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    layer = blob(buffer.getvalue())
    config = blob(json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}, sort_keys=True).encode())
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}],
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    put = requests.put(f"http://{registry}/v2/{name}/manifests/{digest}", data=manifest, headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, timeout=10)
    assert put.status_code == 201, put.text
    return manifest, digest


@pytest.mark.registry
def test_image_digest_against_a_real_registry(server, tmp_path, registry_server, fault_proxy):
    """The image engineer's docker-registry fixture (tests/kits/registry.py), and its fault proxy as a tampering mirror."""
    from registry import ProxyRule

    name = "alphastorm/audit-runtime"
    pushed, digest = _push_image(registry_server.host, name)
    tree = Tree(server, None, None)
    reference = f"{registry_server.host}/{name}@{digest}"
    tree.manifest["components"]["ninfer"] = _image_row(reference, digest)
    report, lines = run_audit(tree.publish(), tmp_path)
    assert line_for(lines, f"OK: image {reference}") == f"OK: image {reference} (registry manifest (application/vnd.oci.image.manifest.v1+json, {len(pushed)} bytes) hashes to the pinned digest)"
    assert report.passed, "\n".join(lines)

    # The release pins another digest than the image the registry holds.
    other = "sha256:" + hashlib.sha256(b"another image").hexdigest()
    wrong = f"{registry_server.host}/{name}@{other}"
    tree.manifest["components"]["ninfer"] = _image_row(wrong, other)
    report, lines = run_audit(tree.publish(), tmp_path / "wrong")
    assert fails(lines) == [f"FAIL: image {wrong}: the registry has no manifest {other} in {registry_server.host}/{name} (HTTP 404)"]

    # The row's oci_manifest_digest disagrees with its reference.
    tree.manifest["components"]["ninfer"] = {**_image_row(reference, digest), "oci_manifest_digest": other}
    report, lines = run_audit(tree.publish(), tmp_path / "field")
    assert fails(lines) == [f"FAIL: image {reference}: oci_manifest_digest {other} differs from the reference's digest {digest}"]

    # A mirror in front of the real registry flips one byte of the manifest it serves.
    proxy = fault_proxy(ProxyRule("GET", f"/manifests/{digest}", 1, "corrupt-body"))
    mirrored = f"{proxy.host}/{name}@{digest}"
    tree.manifest["components"]["ninfer"] = _image_row(mirrored, digest)
    report, lines = run_audit(tree.publish(), tmp_path / "mirror")
    corrupted = bytes([pushed[0] ^ 0x20]) + pushed[1:]
    assert fails(lines) == [f"FAIL: image {mirrored}: image digest mismatch: the registry's manifest bytes hash to sha256:{hashlib.sha256(corrupted).hexdigest()}"]


# -- the CLI ------------------------------------------------------------------------------------


def test_audit_help_and_usage(capsys):
    assert cli.main(["audit", "--jobs", "0", "x.json"]) == ExitCode.USAGE
    assert "--jobs must be at least 1" in capsys.readouterr().err
    for value in ("0", "-5", "nan", "inf"):
        assert cli.main(["audit", "--timeout", value, "x.json"]) == ExitCode.USAGE
        assert "--timeout must be a positive number of seconds" in capsys.readouterr().err
    with contextlib.suppress(SystemExit):
        cli.main(["audit", "--help"])
    assert "the audit's overall deadline, measured from its start" in " ".join(capsys.readouterr().out.split())


def test_a_local_manifest_path_is_audited_too(server, tmp_path):
    tree = Tree(server, None, None)
    tree.publish()
    local = tmp_path / "checkout" / "manifests" / RELEASE / "manifest.json"
    local.parent.mkdir(parents=True)
    local.write_bytes(server.files[tree.manifest_path])
    report, lines = run_audit(str(local), tmp_path)
    assert report.passed, "\n".join(lines)
    assert line_for(lines, f"SKIP: signature manifests/{RELEASE}/manifest.json").endswith(str(local) + ".sigstore.json")





def test_too_little_room_in_the_cache_stops_before_any_download(server, tmp_path, monkeypatch, capsys):
    from collections import namedtuple

    tree = Tree(server, None, None)
    url = tree.publish()
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(audit.shutil, "disk_usage", lambda path: usage(10 << 20, 9 << 20, 1 << 20))
    assert cli.main(["audit", url, "--cache", str(tmp_path / "c"), "--quiet", "--dist", str(tmp_path / "dist")]) == ExitCode.ENVIRONMENT
    assert "the cache folder has 1.0 MiB free, the release binds 11.0 MiB" in capsys.readouterr().err
    assert [path for path, _ in server.log] == [tree.manifest_path]


# -- the sample release made by the pipeline (tests/kits/releasekit.py) ------------------------------


@pytest.fixture(scope="module")
def pipeline_release(tmp_path_factory):
    """The ready sample release composed by the pipeline (build, package, qualify, compose, pin dance)."""
    import releasekit
    return releasekit, releasekit.sample_release(tmp_path_factory)


def _serve_pipeline_release(server: ReleaseServer, releasekit, release, manifest: dict) -> list[str]:
    """Publish the pipeline's release on the loopback server under the canonical URL paths.

    Component assets come from the pipeline's own asset folder, the client binaries are
    the kit's bytes, and every raw URL serves `git show <commit>:<path>` of the product
    repository, so the pins are the ones the pin dance wrote.  Returns the --mirror values.
    """
    from repokit import git

    assets = release.dist / releasekit.LANE / "assets"
    clients = {name: f"sample client {platform}\n".encode() * 64 for platform, (name, _n, _h) in release.client["platforms"].items()}
    for url in https_urls(manifest):
        path = "/" + url.split("://", 1)[1]
        name = url.rsplit("/", 1)[-1]
        if url.startswith("https://raw.githubusercontent.com/"):
            commit, relative = url.split("/", 6)[5], url.split("/", 6)[6]
            server.files[path] = subprocess.run(["git", "-C", str(release.root), "show", f"{commit}:{relative}"], capture_output=True, check=True).stdout
        elif "/releases/download/" in url and (assets / name).is_file():
            server.files[path] = (assets / name).read_bytes()
        elif name in clients:
            server.files[path] = clients[name]
    # What `publish --component` uploads beside the set (the manifest promises it: signing.evidence).
    statement = next((release.dist / releasekit.LANE / "attestations").glob("*.provenance.intoto.json"))
    for row in manifest["components"]["ninfer_variants"]:
        if "provenance" in row:
            server.files["/" + row["checksums_url"].split("://", 1)[1].rsplit("/", 1)[0] + "/" + statement.name] = statement.read_bytes()
        if row.get("published") is True:  # the component tag, as GitHub's REST API answers for it
            serve_tag(server, row["repository"].removeprefix("https://github.com/"), row["release_tag"], row["source_commit"], prefix="/api.github.com")
    assert git(release.root, "rev-parse", "HEAD")
    return [f"https://{host}/={server.base}/{host}/" for host in ("github.com", "raw.githubusercontent.com", "huggingface.co", "api.github.com")]


@pytest.mark.slow
def test_the_ready_release_made_by_the_pipeline_audits_ok(server, tmp_path, pipeline_release):
    releasekit, release = pipeline_release
    manifest_path = release.tree() / "manifest.json"
    manifest = json.loads(manifest_path.read_bytes())
    assert manifest["status"] == "ready"
    mirrors = _serve_pipeline_release(server, releasekit, release, manifest)
    report, lines = run_audit(str(manifest_path), tmp_path, lanes_dir=release.lanes_dir, mirrors=[tuple(m.split("=", 1)) for m in mirrors], skip_larger_than=1 << 30)
    print("\n".join([*lines, report.verdict()]))  # shown by pytest -rP
    assert fails(lines) == [], "\n".join(lines)
    assert report.passed
    assert line_for(lines, f"OK: set {releasekit.LANE}")
    assert line_for(lines, "SKIP: model qwen3_8_27b.ninfer").endswith("is larger than --skip-larger-than 1.0 GiB: not downloaded, its SHA-256 is not checked")
    assert len([line for line in lines if line.startswith("OK: client ")]) == 3
    assert line_for(lines, "OK: qualification summary") and line_for(lines, "OK: compatibility authority")
    assert line_for(lines, "OK: external-installation acceptance")
    assert line_for(lines, f"OK: {releasekit.LANE} qualification")  # the lane receipt at its pinned raw URL
    row = next(row for row in manifest["components"]["ninfer_variants"] if row["id"] == releasekit.LANE)
    assert line_for(lines, "OK: tag alphastorm/ninfer") == f"OK: tag alphastorm/ninfer {row['release_tag']} (names {row['source_commit']})"
    assert any(path.startswith("/api.github.com/repos/alphastorm/ninfer/git/ref/tags/") for path, _ in server.log)  # api.github.com, through the mirror
    # The release promises its evidence: the set's statement is checked on the component release; unsigned here.
    assert manifest["signing"]["evidence"] == {"bundles": "published", "statements": "published"}
    assert "11 subjects are exactly the set's files" in line_for(lines, f"OK: provenance {releasekit.LANE} ")
    assert line_for(lines, "SKIP: signature ninfer-rtx4090").endswith("(allowed: --allow-unsigned, or status candidate)")
    # The raw records were fetched at the commits the pin dance wrote, through the mirror only.
    assert any(path.startswith("/raw.githubusercontent.com/") for path, _ in server.log)
    assert all(not path.startswith("/https") for path, _ in server.log)
    # GitHub's own release attestations: this mirror does not say the releases are immutable, so each is SKIP, not OK
    attested = [line for line in lines if "GitHub attestation" in line]
    assert attested and all(line.startswith("SKIP: GitHub attestation ") and "whether the release is immutable is unknown" in line for line in attested)
    assert any(line.startswith("SKIP: GitHub attestation alphastorm/ninfer ") for line in attested)
    assert any(path.startswith("/api.github.com/repos/alphastorm/ninfer/releases/tags/") for path, _ in server.log)


@pytest.mark.slow
def test_a_tampered_receipt_of_the_pipeline_release_fails(server, tmp_path, pipeline_release):
    releasekit, release = pipeline_release
    manifest_path = release.tree() / "manifest.json"
    manifest = json.loads(manifest_path.read_bytes())
    mirrors = _serve_pipeline_release(server, releasekit, release, manifest)
    receipt_url = next(row["qualification"]["public_url"] for row in manifest["components"]["ninfer_variants"] if row["id"] == releasekit.LANE)
    path = "/" + receipt_url.split("://", 1)[1]
    data = bytearray(server.files[path])
    data[len(data) // 2] ^= 0x01
    server.files[path] = bytes(data)
    report, lines = run_audit(str(manifest_path), tmp_path, lanes_dir=release.lanes_dir, mirrors=[tuple(m.split("=", 1)) for m in mirrors], skip_larger_than=1 << 30)
    assert [line.split(": got")[0] for line in fails(lines)] == [f"FAIL: {releasekit.LANE} qualification: SHA-256 mismatch"]
    assert not report.passed


def test_mirror_and_size_options_are_parsed_strictly(capsys):
    assert cli.main(["audit", "m.json", "--mirror", "https://github.com/"]) == ExitCode.USAGE
    assert "--mirror takes URL_PREFIX=MIRROR_PREFIX" in capsys.readouterr().err
    assert cli.main(["audit", "m.json", "--mirror", "https://github.com/=http://198.51.100.7/gh/"]) == ExitCode.USAGE
    assert "plain HTTP is not accepted" in capsys.readouterr().err
    assert audit._byte_size("4G") == 4 << 30 and audit._byte_size("500M") == 500 << 20 and audit._byte_size("123") == 123


def test_a_second_run_reuses_verified_cache_files_and_replaces_a_damaged_one(server, tmp_path):
    tree = Tree(server, None, None)
    url = tree.publish()
    cache = tmp_path / "cache"
    report, _ = run_audit(url, tmp_path, cache=cache)
    assert report.passed
    server.log.clear()
    (cache / RELEASE / "asset" / "omp-windows-x64.exe").write_bytes(b"damaged in the cache")
    report, lines = run_audit(url, tmp_path, cache=cache)
    assert report.passed, "\n".join(lines)
    fetched = [path for path, _ in server.log]
    assert tree.paths["model"] not in fetched  # pinned and intact: read once from the cache, not downloaded
    assert tree.paths["client"] in fetched  # damaged: downloaded again
    assert report.bytes_downloaded == len(tree.client)  # records are pinned too: re-used, not downloaded


# -- hostile manifests: names from the manifest never leave --cache -----------------------------


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every path under root with its bytes (folders as a marker): compared before and after."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>") for p in sorted(root.rglob("*"))}


@pytest.fixture
def sentinel(tmp_path):
    """A folder of files an attacker would like to replace or empty, outside the audit's --cache."""
    folder = tmp_path / "sentinel"
    (folder / "keys").mkdir(parents=True)
    (folder / "keys" / "id_ed25519").write_bytes(b"PRIVATE KEY\n")
    (folder / "project").mkdir()
    (folder / "project" / "notes.txt").write_bytes(b"keep me\n")
    return folder


def _hostile_row(server: ReleaseServer, lane_id: object, name: str, data: bytes, *, with_sums: bool = False) -> dict:
    tag = "v0.7.0-qwen38-4090-beta.2"
    prefix = f"/alphastorm/ninfer/releases/download/{tag}/"
    server.files[prefix + name] = data
    row = {"id": lane_id, "status": "qualified", "repository": server.url("/alphastorm/ninfer"), "release_tag": tag,
           "installer_url": server.url(prefix + name), "installer_sha256": hashlib.sha256(data).hexdigest()}
    if with_sums:
        sums = f"{hashlib.sha256(data).hexdigest()}  {name}\n".encode()
        server.files[prefix + "SHA256SUMS"] = sums
        row.update(checksums_url=server.url(prefix + "SHA256SUMS"), checksums_sha256=hashlib.sha256(sums).hexdigest())
    return row


def _assert_refused_before_any_download(report, lines, server, tree_manifest_path, field: str, reason: str) -> None:
    assert not report.passed and report.verdict().startswith("AUDIT FAILED")
    [failed] = fails(lines)
    assert failed.startswith("FAIL: manifest ")
    assert f": {field}: is not a safe name: it {reason}" in failed, failed
    assert [path for path, _ in server.log] == [tree_manifest_path]  # nothing but the manifest was fetched


def test_a_row_id_that_is_an_absolute_folder_does_not_replace_a_file_there(server, tmp_path, sentinel):
    """Before: the installer was downloaded to <id>/id_ed25519, replacing the key, and the audit PASSED."""
    tree = Tree(server, None, None)
    before = _snapshot(sentinel)
    tree.manifest["components"]["ninfer_variants"].append(_hostile_row(server, str(sentinel / "keys"), "id_ed25519", b"ATTACKER KEY\n"))
    report, lines = run_audit(tree.publish(), tmp_path, cache=tmp_path / "cache")
    _assert_refused_before_any_download(report, lines, server, tree.manifest_path, "components.ninfer_variants[0].id", "contains a path separator")
    assert _snapshot(sentinel) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentinel"]  # refused before the cache was made


def test_a_row_id_that_is_an_absolute_folder_does_not_empty_it(server, tmp_path, sentinel):
    """Before: the set check ran shutil.rmtree(cache/sets/<id>), i.e. on the absolute folder."""
    tree = Tree(server, None, None)
    before = _snapshot(sentinel)
    tree.manifest["components"]["ninfer_variants"].append(_hostile_row(server, str(sentinel / "project"), "Install-Release.ps1", b"Write-Host hi\n", with_sums=True))
    report, lines = run_audit(tree.publish(), tmp_path, cache=tmp_path / "cache")
    _assert_refused_before_any_download(report, lines, server, tree.manifest_path, "components.ninfer_variants[0].id", "contains a path separator")
    assert _snapshot(sentinel) == before


@pytest.mark.parametrize(
    ("edit", "field", "reason"),
    [
        (lambda m, s, t: m["components"]["ninfer_variants"].append(_hostile_row(s, "../../sentinel/keys", "id_ed25519", b"x")), "components.ninfer_variants[0].id", "contains a path separator"),
        (lambda m, s, t: m["components"]["ninfer_variants"].append(_hostile_row(s, "..", "id_ed25519", b"x")), "components.ninfer_variants[0].id", "is '..'"),
        (lambda m, s, t: m["components"]["ninfer_variants"].append(_hostile_row(s, 7, "id_ed25519", b"x")), "components.ninfer_variants[0].id", "is not a string"),
        (lambda m, s, t: m["components"]["ninfer_variants"].append(_hostile_row(s, "rtx4090-windows-native\0", "x.ps1", b"x")), "components.ninfer_variants[0].id", "contains the control or unprintable character U+0000"),
        (lambda m, s, t: m["components"]["ninfer_variants"].append(_hostile_row(s, "CON", "x.ps1", b"x")), "components.ninfer_variants[0].id", "is the Windows device name CON"),
        (lambda m, s, t: m["components"]["ninfer_variants"].append({**_hostile_row(s, "rtx4090-windows-native", "x.ps1", b"x"), "installer_name": "..\\..\\x.ps1"}), "components.ninfer_variants[0].installer_name", "contains a path separator"),
        (lambda m, s, t: m["components"]["model"].update(artifact_name="nul"), "components.model.artifact_name", "is the Windows device name NUL"),
        (lambda m, s, t: m["components"]["omp"]["platforms"][0].update(artifact_name="a" * 300), "components.omp.platforms[0].artifact_name", "is 300 characters long"),
        (lambda m, s, t: m["compatibility"].update(path="/etc/passwd"), "compatibility.path", "is an absolute path"),
        (lambda m, s, t: m["qualification"].update(summary=f"manifests/{RELEASE}/../../../x.json"), "qualification.summary", "has a '..' segment"),
        (lambda m, s, t: m["signing"]["signed_files"].append(f"manifests/{RELEASE}/../../../../../../sentinel/x"), "signing.signed_files[1]", "has a '..' segment"),
        (lambda m, s, t: m["signing"].update(bundle_suffix="/../../../../../../../sentinel/keys/id_ed25519"), "signing.bundle_suffix", "contains a path separator"),
    ],
)
def test_hostile_names_in_a_manifest_are_refused_before_any_download(server, tmp_path, sentinel, edit, field, reason):
    tree = Tree(server, None, None)
    before = _snapshot(sentinel)
    edit(tree.manifest, server, tree)
    report, lines = run_audit(tree.publish(), tmp_path, cache=tmp_path / "cache")
    _assert_refused_before_any_download(report, lines, server, tree.manifest_path, field, reason)
    assert _snapshot(sentinel) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentinel"]  # not even the cache folder was made


def test_a_release_with_dot_dot_does_not_write_outside_the_cache(server, tmp_path, sentinel):
    """Before: a local manifest whose release was '../../sentinel' downloaded into <cache>/../../sentinel."""
    tree = Tree(server, None, None)
    tree.manifest["release"] = "../../sentinel"
    local = tmp_path / "checkout" / "manifest.json"
    local.parent.mkdir()
    local.write_bytes((json.dumps(tree.manifest, indent=2, sort_keys=True) + "\n").encode())
    before = _snapshot(sentinel)
    cache = tmp_path / "audit" / "cache"
    report, lines = run_audit(str(local), tmp_path, cache=cache)
    assert not report.passed
    [failed] = fails(lines)
    assert f"FAIL: manifest {local}: " in failed and ": release: is not a safe name: it contains a path separator" in failed
    assert server.log == []
    assert _snapshot(sentinel) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkout", "sentinel"]


def test_a_failed_manifest_location_check_stops_the_audit_before_any_download(server, tmp_path):
    """Before: the FAIL line was printed and every asset was still downloaded into the cache."""
    tree = Tree(server, None, None)
    elsewhere = "/alphastorm/omp-ninfer/raw/" + COMMIT + "/manifests/v0.12.0/manifest.json"
    server.files[elsewhere] = (json.dumps(tree.manifest) + "\n").encode()
    report, lines = run_audit(server.url(elsewhere), tmp_path, cache=tmp_path / "cache")
    assert lines == [f"FAIL: manifest manifest.json: points outside its release: a manifest of {RELEASE} must be served as …/manifests/{RELEASE}/manifest.json"]
    assert [path for path, _ in server.log] == [elsewhere]
    assert not (tmp_path / "cache").exists()
    assert not report.passed


def test_two_rows_with_one_lane_id_are_refused(server, tmp_path):
    tree = Tree(server, None, None)
    rows = tree.manifest["components"]["ninfer_variants"]
    rows.append(_hostile_row(server, "rtx4090-windows-native", "a.ps1", b"a"))
    rows.append(_hostile_row(server, "rtx4090-windows-native", "b.ps1", b"b"))
    report, lines = run_audit(tree.publish(), tmp_path)
    [failed] = fails(lines)
    assert "components.ninfer_variants[1].id: two lane rows share an id" in failed
    assert [path for path, _ in server.log] == [tree.manifest_path]


def test_the_cli_exits_1_on_a_hostile_manifest_and_names_the_field(server, tmp_path, sentinel, capsys):
    tree = Tree(server, None, None)
    tree.manifest["components"]["ninfer_variants"].append(_hostile_row(server, str(sentinel / "keys"), "id_ed25519", b"ATTACKER KEY\n"))
    before = _snapshot(sentinel)
    code = cli.main(["audit", tree.publish(), "--cache", str(tmp_path / "c"), "--allow-unsigned", "--quiet", "--dist", str(tmp_path / "dist")])
    out = capsys.readouterr().out
    assert code == ExitCode.INPUT
    assert "components.ninfer_variants[0].id: is not a safe name" in out and out.splitlines()[-1].startswith("AUDIT FAILED")
    assert _snapshot(sentinel) == before


def test_parallel_downloads_start_with_the_largest_files_and_report_in_manifest_order(server, tmp_path):
    # The model is listed last; started last with --jobs 2 it would leave one worker idle at the end.
    tree = Tree(server, None, None)
    prefix = "/can1357/oh-my-pi/releases/download/v18.12.6/"
    platforms = tree.manifest["components"]["omp"]["platforms"]
    for platform, size in (("linux-x64", 1024), ("darwin-arm64", 2048)):
        name = f"omp-{platform}"
        data = _pseudo_random(size, name.encode())
        server.files[prefix + name] = data
        platforms.append({"platform": platform, "artifact_name": name, "artifact_url": server.url(prefix + name), "artifact_bytes": size, "artifact_sha256": hashlib.sha256(data).hexdigest()})
    report, lines = run_audit(tree.publish(), tmp_path, jobs=2)
    assert report.passed, "\n".join(lines)
    assets = [path for path, _range in server.log if path.startswith(prefix) or path == tree.paths["model"]]
    assert sorted(assets) == sorted([tree.paths["model"], tree.paths["client"], prefix + "omp-linux-x64", prefix + "omp-darwin-arm64"])
    assert set(assets[:2]) == {tree.paths["model"], tree.paths["client"]}, assets  # the two largest go first
    order = [line[len("OK: "):].split(" (")[0] for line in lines if line.startswith(("OK: client", "OK: model"))]
    assert order == ["client windows-x64 omp-windows-x64.exe", "client linux-x64 omp-linux-x64", "client darwin-arm64 omp-darwin-arm64", "model qwen3_8_27b.ninfer"]


# -- a cache shared by audits running at once -------------------------------------------------


def _audit_processes(url: str, tmp_path: Path, count: int, *extra: str) -> list[subprocess.CompletedProcess]:
    """`count` audit processes started together, sharing one --cache (each its own --dist)."""
    import sys

    from repokit import ROOT

    started = [
        subprocess.Popen(
            [sys.executable, "-m", "pipeline", "audit", url, "--allow-unsigned", "--cache", str(tmp_path / "shared-cache"), "--dist", str(tmp_path / f"dist{index}"), *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for index in range(count)
    ]
    results = []
    for process in started:
        out, err = process.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


@pytest.mark.parametrize("mode", [("--range-threshold", "1M", "--connections", "4"), ("--connections", "1")], ids=["ranges", "one-stream"])
def test_two_audits_sharing_one_cache_are_both_right(server, tmp_path, mode):
    """Before: the second audit resumed the first one's .part and kept writing into it after it was
    renamed into place (an OK for other bytes), or crashed with FileNotFoundError in os.replace."""
    tree = Tree(server, None, None)
    server.slow[tree.paths["model"]] = 0.02  # ~2.6 s: both audits are inside the model's download at once
    url = tree.publish()
    results = _audit_processes(url, tmp_path, 2, *mode)
    for result in results:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Traceback" not in result.stderr and "FileNotFoundError" not in result.stdout + result.stderr
        assert result.stdout.splitlines()[-1].startswith(f"AUDIT PASSED: {RELEASE}")
    assert any("another audit is fetching it into this cache; waiting for it" in result.stderr for result in results), "the second audit said it waited"
    folder = tmp_path / "shared-cache" / RELEASE / "asset"
    assert (folder / "qwen3_8_27b.ninfer").read_bytes() == tree.model
    assert not [p.name for p in folder.iterdir() if p.name.endswith((".part", ".ranges"))]


def test_a_cached_file_altered_after_a_verified_audit_is_not_reported_ok(server, tmp_path):
    tree = Tree(server, None, None)
    url = tree.publish()
    cache = tmp_path / "cache"
    report, lines = run_audit(url, tmp_path, cache=cache)
    assert report.passed, "\n".join(lines)
    cached = cache / RELEASE / "asset" / "qwen3_8_27b.ninfer"
    stat = cached.stat()
    altered = bytearray(cached.read_bytes())
    altered[4096] ^= 0x01
    cached.write_bytes(bytes(altered))
    os.utime(cached, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and mtime: only its bytes tell
    server.log.clear()
    report, lines = run_audit(url, tmp_path, cache=cache)
    assert report.passed and line_for(lines, "OK: model qwen3_8_27b.ninfer")
    assert [rng for path, rng in server.log if path == tree.paths["model"]] == [None], "fetched again, not re-used"
    assert cached.read_bytes() == tree.model


def test_a_hard_link_planted_as_part_is_refused_and_its_target_unchanged(server, tmp_path):
    tree = Tree(server, None, None)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"precious bytes outside the cache\n")
    part = tmp_path / "cache" / RELEASE / "asset" / "qwen3_8_27b.ninfer.part"
    part.parent.mkdir(parents=True)
    os.link(outside, part)
    report, lines = run_audit(tree.publish(), tmp_path, cache=tmp_path / "cache")
    assert not report.passed
    assert "qwen3_8_27b.ninfer.part is not a download's own partial file" in line_for(lines, "FAIL: model qwen3_8_27b.ninfer")
    assert outside.read_bytes() == b"precious bytes outside the cache\n"


# -- text from the manifest and the server reaching the auditor's terminal ---------------------


@pytest.mark.parametrize("as_json", [False, True], ids=["lines", "json"])
def test_a_hostile_manifest_cannot_write_escape_codes_or_a_fake_line(server, tmp_path, capsys, as_json):
    tree = Tree(server, None, None)
    tree.manifest["status"] = "ready\x1b[2K\x1b[1A\r\nAUDIT PASSED: v0.13.1: all 99 items OK\u202e\x9b31m\u200b"
    tree.tamper("client", 7)  # a FAIL line too
    url = tree.publish()
    code = cli.main(["audit", url, "--cache", str(tmp_path / "c"), "--allow-unsigned", "--dist", str(tmp_path / "dist"), *(["--json"] if as_json else [])])
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert code == 1
    for forbidden in ("\x1b", "\r", "\u202e", "\x9b", "\u200b"):
        assert forbidden not in shown, f"{forbidden!r} reached the terminal"
    lines = (captured.err if as_json else captured.out).splitlines()
    assert not [line for line in lines if line.startswith("AUDIT PASSED")], "a line from the manifest passed for the verdict"
    manifest_line = line_for(lines, "OK: manifest manifest.json")  # the status is not the manifest item's to judge
    assert "status 'ready\\x1b[2K\\x1b[1A\\r\\nAUDIT PASSED: v0.13.1: all 99 items OK\\u202e\\x9b31m\\u200b'" in manifest_line


def test_a_urls_password_reaches_neither_the_output_nor_the_report_nor_the_register(server, tmp_path, capsys):
    tree = Tree(server, None, None)
    url = tree.publish().replace("http://", "http://auditor:PW-s3cret@", 1)
    dist = tmp_path / "dist"
    code = cli.main(["audit", url, "--cache", str(tmp_path / "c"), "--allow-unsigned", "--quiet", "--dist", str(dist)])
    captured = capsys.readouterr()
    assert code == 1
    assert line_for(captured.out.splitlines(), "FAIL: manifest http://[REDACTED]@127.0.0.1:").endswith(": carries credentials")
    (entry,) = Register(dist).query("audit-report")
    written = [captured.out, captured.err, (dist / "register.json").read_text(), (dist / entry.path).read_text()]
    assert not [text for text in written if "PW-s3cret" in text or "auditor:" in text]
    assert entry.attrs["manifest"] == url.replace("auditor:PW-s3cret@", "[REDACTED]@")


@pytest.mark.parametrize("ranged", [False, True], ids=["one-stream", "ranges"])
def test_waiting_for_another_audits_download_earns_time_from_the_bytes_it_writes(tmp_path, ranged):
    """A run that waits for a cache file another audit is fetching is not cut by its own --timeout while that
    download progresses: the bytes arriving in the .part earn it time, as its own would (256 KiB/s)."""
    from pipeline.infra import net, range_state

    size = 64 << 20
    target = tmp_path / "model.bin"
    part = tmp_path / "model.bin.part"

    def holding(count: int) -> None:
        if ranged:
            with part.open("ab") as handle:
                handle.truncate(size)
            range_state.write_state(range_state.state_path(part), range_state.RangeState(size, None, ((0, count),) if count else ()))
        else:
            part.write_bytes(bytes(count))

    for grows in (False, True):
        auditor = audit.Auditor("manifest.json", cache=tmp_path, progress=False)
        auditor.deadline = net.Deadline(0.3, what="the audit's overall deadline of 0.3 s", paced=True)
        check = auditor.downloads.still_waiting("http://127.0.0.1:9/model.bin", target, None, size)
        holding(0)
        check()
        time.sleep(0.4)
        holding(1 << 20 if grows else 0)  # 1 MiB earns 4 s
        if grows:
            check()
            assert auditor.deadline.remaining() > 3
        else:
            with pytest.raises(net.DeadlinePassed):
                check()


# -- the review ledger (docs/review-ledger.md) ---------------------------------------------------


def _bind_ledger(tree: Tree, findings: str = "") -> bytes:
    """A review ledger served at its pinned raw URL and bound by the manifest; it reviewed everything the release binds."""
    from pipeline.formats.release.manifest import review_subjects

    tree.manifest["qualification"]["acceptance"] = {"candidate_commit": COMMIT}  # the candidate, as the manifest binds it
    reviewed = "".join(f'"{label}" = "{digest}"\n' for label, digest in sorted(review_subjects(tree.manifest).items()))
    ledger = (f'artifact_type = "omp_ninfer_review_ledger"\nschema_version = 1\nrelease = "{RELEASE}"\n\n[reviews.product-tooling]\nstate = "closed"\n'
              f'disposition = "Closed without remediation."\n\n[reviews.product-tooling.reviewed]\n{reviewed}\n{findings}').encode()
    path = f"manifests/{RELEASE}/reviews.toml"
    tree.server.files[f"/alphastorm/omp-ninfer/raw/{RECORD_COMMIT}/{path}"] = ledger
    tree.manifest["reviews"] = {"path": path, "sha256": hashlib.sha256(ledger).hexdigest(), "public_url": f"{tree.product}/raw/{RECORD_COMMIT}/{path}"}
    return ledger


def test_the_review_ledger_is_fetched_by_its_hash_and_held_to_its_gate(server, tmp_path):
    tree = Tree(server, None, None)
    _bind_ledger(tree)
    _report, lines = run_audit(tree.publish(), tmp_path)
    assert line_for(lines, "OK: review ledger gate") == "OK: review ledger gate (1 reviews closed; no in-scope P0/P1 open; 0 deferred, each tracked; every reviewed digest is bound; every bound artefact is reviewed)"
    assert line_for(lines, "OK: review ledger (")
    # One changed byte of the published ledger: its hash fails, and the gate cannot pass on those bytes.
    tree.tamper(f"/alphastorm/omp-ninfer/raw/{RECORD_COMMIT}/manifests/{RELEASE}/reviews.toml", offset=40)
    _report, lines = run_audit(tree.publish(), tmp_path / "b")
    assert "SHA-256 mismatch" in line_for(lines, "FAIL: review ledger:")
    assert line_for(lines, "FAIL: review ledger gate").startswith("FAIL: review ledger gate: the bound ledger could not be read")


def test_a_ready_release_whose_ledger_holds_an_open_p0_fails_the_audit(server, tmp_path):
    tree = Tree(server, None, None)
    _bind_ledger(tree, '[reviews.product-tooling.findings.PT-1]\nseverity = "P0"\nscope = "in"\nstate = "unresolved"\ndisposition = "Publish may skip a gate."\n')
    report, lines = run_audit(tree.publish(), tmp_path)
    assert fails(lines) == ["FAIL: review ledger gate: the product-tooling review's finding PT-1 (P0, in scope) is unresolved"] and not report.passed
    # Before ready the councils may still be at work: said, not failed.
    tree.manifest["status"] = "candidate"
    _report, lines = run_audit(tree.publish(), tmp_path / "c")
    assert line_for(lines, "SKIP: review ledger gate").endswith("status candidate: the product-tooling review's finding PT-1 (P0, in scope) is unresolved")
