"""SPDX 2.3 and CycloneDX 1.6: written with the real libraries, validated, deterministic, and
cross-checked against the bytes they describe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from importlib import metadata
from pathlib import Path

import pytest
from winfixtures import packaged_native_set

from pipeline.cli import main
from pipeline.errors import IntegrityError
from pipeline.formats import sbom
from pipeline.formats.lanes import REPO_ROOT
from pipeline.infra.archive import read_tar_gz
from pipeline.util.hashing import file_digests

EPOCH = 1795965149


def _small_input(payload: Path) -> sbom.SbomInput:
    (payload / "bin").mkdir(parents=True)
    (payload / "bin" / "ninfer-serve").write_bytes(b"\x7fELF server")
    (payload / "LICENSE").write_text("Apache-2.0\n")
    (payload / "README.md").write_text("# hi\n")
    files = []
    for path in sorted(p for p in payload.rglob("*") if p.is_file()):
        sha256, sha1, size = file_digests(path)
        files.append(sbom.PayloadFile(path.relative_to(payload).as_posix(), sha256, sha1, size))
    return sbom.SbomInput(
        package_root="ninfer-x-v1.0.0-linux-x86_64-cuda13.1",
        package_filename="ninfer-x-v1.0.0-linux-x86_64-cuda13.1.tar.gz",
        package_sha256="ab" * 32,
        package_bytes=1234,
        lane_id="rtx5090-container",
        lane_title="RTX 5090 container",
        component_repository="https://github.com/alphastorm/ninfer",
        component_tag="v1.0.0-qwen38-5090-beta.1",
        release_version="1.0.0-beta.1",
        runtime_license="Apache-2.0",
        epoch=EPOCH,
        identity_sha256="cd" * 32,
        source={"commit": "e" * 40, "tree": "f" * 40, "kind": "local"},
        files=files,
        binaries={"ninfer-serve": "bin/ninfer-serve"},
        vendored=[{
            "name": "tinycrc", "version": "1.2.0", "license": "MIT", "purl": "pkg:generic/tinycrc@1.2.0",
            "supplier": "sample authors", "path": "third_party/tinycrc", "license_file": "third_party/tinycrc/LICENSE",
            "files": [{"path": "third_party/tinycrc/tinycrc.c", "sha256": "00" * 32}],
        }],
        toolchain={"kind": "pinned", "wheels": [{"distribution": "nvidia-cuda-nvcc", "version": "13.1.115", "sha256": "fe" * 32}]},
        cuda_toolkit="13.1.115",
    )


def test_spdx_is_valid_deterministic_and_dated_by_the_source_epoch(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    first = sbom.write_spdx(tmp_path / "a.spdx.json", inp, payload)
    second = sbom.write_spdx(tmp_path / "b.spdx.json", inp, payload)
    assert first == second and first.endswith(b"\n") and b"\r" not in first
    document = json.loads(first)
    assert document["spdxVersion"] == "SPDX-2.3" and document["dataLicense"] == "CC0-1.0"
    assert document["creationInfo"]["created"] == "2026-11-29T15:12:29Z"
    name = uuid.uuid5(uuid.NAMESPACE_URL, f"ninfer:{inp.package_root}:{inp.identity_sha256}")
    assert document["documentNamespace"].endswith(f"/sbom-{name}")
    packages = {p["SPDXID"]: p for p in document["packages"]}
    [root_id] = [r["relatedSpdxElement"] for r in document["relationships"] if r["relationshipType"] == "DESCRIBES"]
    package = packages[root_id]
    # The archive is an aggregate: it declares nothing itself and concludes all its parts' terms.
    assert package["licenseDeclared"] == "NOASSERTION" and package["licenseConcluded"] == "Apache-2.0 AND MIT"
    assert package["packageVerificationCode"]["packageVerificationCodeValue"]
    assert {f["fileName"] for f in document["files"]} == {"./LICENSE", "./README.md", "./bin/ninfer-serve"}
    for item in document["files"]:
        assert {c["algorithm"] for c in item["checksums"]} == {"SHA1", "SHA256"}
    relations = {(r["spdxElementId"], r["relationshipType"], r["relatedSpdxElement"]) for r in document["relationships"]}
    files = {f["SPDXID"] for f in document["files"]}
    assert {target for source, kind, target in relations if source == root_id and kind == "CONTAINS" and target in files} == files
    by_name = {p["name"]: p for p in document["packages"]}
    server, crc, nvcc = by_name["ninfer-serve"], by_name["tinycrc"], by_name["nvidia-cuda-nvcc"]
    assert (server["licenseDeclared"], server["supplier"], server["versionInfo"]) == ("Apache-2.0", "Organization: alphastorm", "1.0.0-beta.1")
    assert (crc["licenseDeclared"], crc["supplier"]) == ("MIT", "Organization: sample authors")
    assert {r["referenceLocator"] for r in crc["externalRefs"]} == {"pkg:generic/tinycrc@1.2.0"}
    assert {(root_id, "CONTAINS", server["SPDXID"]), (root_id, "CONTAINS", crc["SPDXID"]),
            (root_id, "HAS_PREREQUISITE", nvcc["SPDXID"]), (nvcc["SPDXID"], "BUILD_TOOL_OF", root_id)} <= relations
    assert document["creationInfo"]["creators"] == [f"Tool: omp-ninfer-pipeline-{metadata.version('omp-ninfer-pipeline')}", "Organization: alphastorm"]
    assert "valid SPDX-2.3, 3 files" in sbom.validate_file(tmp_path / "a.spdx.json")


def test_cyclonedx_is_valid_deterministic_with_a_uuid5_serial(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    first = sbom.write_cdx(tmp_path / "a.cdx.json", inp, payload)
    assert first == sbom.write_cdx(tmp_path / "b.cdx.json", inp, payload)
    document = json.loads(first)
    assert document["specVersion"] == "1.6" and document["metadata"]["timestamp"] == "2026-11-29T15:12:29+00:00"
    assert document["serialNumber"] == f"urn:uuid:{sbom.cdx_serial(inp)}"
    refs = {c["bom-ref"]: c for c in document["components"]}
    assert refs["pkg:generic/tinycrc@1.2.0"]["licenses"] == [{"license": {"id": "MIT"}}]
    assert refs["toolchain:nvidia-cuda-nvcc@13.1.115"]["scope"] == "excluded"
    assert refs["toolchain:nvidia-cuda-nvcc@13.1.115"]["purl"] == "pkg:pypi/nvidia-cuda-nvcc@13.1.115"
    assert sbom.cdx_schema_errors(first) == []


def test_a_declared_hash_that_differs_from_the_bytes_stops_the_writer(tmp_path):
    payload = tmp_path / "payload"
    inp = _small_input(payload)
    (payload / "README.md").write_text("# changed after hashing\n")
    for writer, name in ((sbom.write_spdx, "x.spdx.json"), (sbom.write_cdx, "x.cdx.json")):
        if writer is sbom.write_cdx:
            (payload / "bin" / "ninfer-serve").write_bytes(b"\x7fELF other")
        with pytest.raises(IntegrityError, match="hash mismatch: the SBOM declares a SHA256") as caught:
            writer(tmp_path / name, inp, payload)
        assert caught.value.file.endswith(name) and caught.value.field in ("README.md", "bin/ninfer-serve")
        assert not (tmp_path / name).exists(), "nothing is written when the cross-check fails"


def test_an_invalid_cyclonedx_document_fails_the_schema():
    errors = sbom.cdx_schema_errors(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
                                                 "components": [{"type": "library", "name": "x", "hashes": [{"alg": "SHA-256", "content": "xyz"}]}]}).encode())
    assert errors and any("xyz" in e for e in errors)


def test_an_external_reference_that_is_no_iri_fails_the_schema_in_a_fresh_process():
    # The validator's iri-reference check (rfc3987_syntax, its parsers built on first use) still refuses, in a
    # process that imported nothing before; and lark is left as it was found.
    script = """
import json, sys, time
sys.path.insert(0, ".")
import lark
from pipeline.formats import sbom
from pipeline.formats.lanes import REPO_ROOT
started = time.monotonic()
def errors(url):
    return sbom.cdx_schema_errors(json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1, "components": [
        {"type": "library", "name": "x", "externalReferences": [{"type": "website", "url": url}]}]}).encode())
print(json.dumps({"bad": errors("https://example.com/a b"), "good": errors("https://example.com/a%20b"),
                  "lark_restored": lark.Lark.__module__.startswith("lark"), "seconds": time.monotonic() - started}))
"""
    answer = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0, answer.stderr
    result = json.loads(answer.stdout)
    assert result["good"] == [] and result["lark_restored"]
    assert result["bad"] and any("https://example.com/a b" in error for error in result["bad"]), result["bad"]


# -- the SBOMs of a real package -------------------------------------------------------

@pytest.fixture(scope="module")
def native_assets(tmp_path_factory) -> Path:
    _workspace, dist = packaged_native_set(tmp_path_factory)
    return dist / "rtx4090-windows-native" / "assets"


def _payload_digests(assets: Path) -> dict[str, tuple[str, str]]:
    package = next(assets.glob("*-rtx4090.tar.gz"))
    root = package.name.removesuffix(".tar.gz")
    return {e.name.removeprefix(root + "/"): (e.sha256, e.sha1) for e in read_tar_gz(package) if e.kind == "file"}


@pytest.mark.slow
def test_native_sboms_describe_the_payload_and_the_import_graph(native_assets, capsys):
    spdx_path = next(native_assets.glob("*.spdx.json"))
    cdx_path = next(native_assets.glob("*.cdx.json"))
    assert main(["sbom", "validate", str(spdx_path), str(cdx_path)]) == 0
    out = capsys.readouterr().out
    assert "valid SPDX-2.3" in out and "valid CycloneDX 1.6" in out
    # spdx-tools' own command-line validator agrees (rc 0, silent when valid).
    import subprocess
    import sys

    checked = subprocess.run([sys.executable, "-m", "spdx_tools.spdx.clitools.pyspdxtools", "-i", str(spdx_path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    digests = _payload_digests(native_assets)
    spdx = json.loads(spdx_path.read_text())
    assert {f["fileName"].removeprefix("./") for f in spdx["files"]} == set(digests)
    cdx = json.loads(cdx_path.read_text())
    components = {c["bom-ref"]: c for c in cdx["components"]}
    cudart = components["file:bin/cudart64_13.dll"]
    properties = {p["name"]: p["value"] for p in cudart["properties"]}
    assert properties["omp-ninfer:origin"] == "cuda-toolkit" and cudart["supplier"]["name"] == "NVIDIA Corporation"
    assert cudart["licenses"] == [{"expression": "LicenseRef-NVIDIA-CUDA-EULA"}]
    assert {h["content"] for h in cudart["hashes"]} == set(digests["bin/cudart64_13.dll"])
    assert components["provided:kernel32.dll"]["scope"] == "required"
    assert "file:bin/swscale-8.dll" not in components  # nothing imports it: not bundled, not listed
    assert {"pkg:generic/miniargs@0.4.1", "pkg:generic/tinycrc@1.2.0", "toolchain:cuda-toolkit@13.3.73"} <= set(components)
    graph = {d["ref"]: set(d.get("dependsOn", [])) for d in cdx["dependencies"]}
    assert graph["file:bin/ninfer-serve.exe"] == {
        "file:bin/avformat-61.dll", "file:bin/cudart64_13.dll", "file:bin/dstorage.dll", "file:bin/libcurl.dll",
        "provided:kernel32.dll", "provided:msvcrt.dll",
    }
    assert "file:bin/dstoragecore.dll" in graph["file:bin/dstorage.dll"]
    assert "file:bin/avutil-59.dll" in graph["file:bin/avcodec-61.dll"]


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".spdx.json", ".cdx.json"])
def test_a_declared_sbom_hash_that_differs_from_the_payload_is_refused(native_assets, tmp_path, suffix):
    source = next(native_assets.glob(f"*{suffix}"))
    tampered = tmp_path / source.name
    text = source.read_text()
    digests = _payload_digests(native_assets)
    real = digests["bin/ninfer-serve.exe"][0]
    assert real in text
    tampered.write_text(text.replace(real, "0" * 64))
    package = next(native_assets.glob("*-rtx4090.tar.gz"))
    from pipeline.util.hashing import sha256_file

    with pytest.raises(IntegrityError, match="hash mismatch") as caught:
        if suffix == ".spdx.json":
            sbom.verify_spdx(tampered, digests, package_name=package.name, package_sha256=sha256_file(package))
        else:
            sbom.verify_cdx(tampered, digests, package_sha256=sha256_file(package))
    assert caught.value.file == str(tampered) and caught.value.field == "bin/ninfer-serve.exe"
    shutil.rmtree(tmp_path, ignore_errors=True)


# Found while writing the SBOM fuzz harness (tests/fuzz, target 'sbom'): spdx-tools calls `.get`
# on whatever the document holds, so an SPDX file of the wrong shape was an AttributeError
# (an internal error of check-assets and audit), and a CycloneDX file that is not UTF-8 a
# UnicodeDecodeError; both readers also let Python's json keep the last of two equal keys.
@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("x.spdx.json", b'{"creationInfo": 5}\n', "is not a parsable SPDX document (AttributeError"),
        ("x.spdx.json", b"[]\n", "must hold a JSON object"),
        ("x.spdx.json", b'{"spdxVersion": "SPDX-2.3", "spdxVersion": "SPDX-2.2"}\n', "holds the key 'spdxVersion' twice"),
        ("x.cdx.json", b'{"bomFormat": "\xff"}\n', "is not valid UTF-8"),
        ("x.cdx.json", b'{"bomFormat": "CycloneDX", "specVersion": NaN}\n', "holds the non-finite number NaN"),
    ],
)
def test_an_sbom_of_the_wrong_shape_is_an_integrity_error_naming_the_file(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    checks = [lambda: sbom.validate_file(path)]
    if name.endswith(".spdx.json"):
        checks.append(lambda: sbom.verify_spdx(path, {}, package_name="p.tar.gz", package_sha256="ab" * 32))
    else:
        checks.append(lambda: sbom.verify_cdx(path, {}, package_sha256="ab" * 32))
    for check in checks:
        with pytest.raises(IntegrityError) as caught:
            check()
        assert message in caught.value.what and caught.value.file == str(path)


@pytest.mark.parametrize("name", ["big.spdx.json", "big.cdx.json"])
def test_sbom_validate_applies_its_cap_while_reading_a_sparse_gigabyte(tmp_path, name):
    """`sbom validate` on a 1 GiB sparse file: refused at 32 MiB read, peak RSS far below the 1,046 MiB of a whole read."""
    import sys

    from test_source_archive import assert_refused_in_bounded_memory, run_measured

    path = tmp_path / name
    with open(path, "wb") as out:
        out.write(b'{"spdxVersion": "')
        out.truncate(1 << 30)
    result = run_measured(sys.executable, "-m", "pipeline", "sbom", "validate", str(path))
    assert_refused_in_bounded_memory(result, 5, f"is larger than the {sbom.MAX_SBOM_BYTES} bytes allowed for a SBOM")
    assert result["peak_mib"] < 128, result
