"""Write the seed corpora of tests/fuzz/corpus/<target>/ from the repository's own files.

    python tests/fuzz/seeds.py          # rewrite the seeds (deterministic: same bytes every run)
    python tests/fuzz/seeds.py --check  # exit 1 when a committed seed differs from what this writes

Seeds are real documents of each reader: the lane files, the release
manifests of manifests/, and sets, receipts, registry answers made with the
pipeline's own writers (the same shapes the tests build).  Inputs that
crashed a harness are kept beside them as `crash-*` files (never rewritten
here): they are replayed with the rest by tests/integration/test_fuzz.py.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from fuzz import harnesses  # noqa: E402
from fuzz.harnesses import SEED_EPOCH, SEP  # noqa: E402
from pipeline.formats import assets, identity, receipts  # noqa: E402
from pipeline.infra import oci  # noqa: E402
from pipeline.stages import qualify  # noqa: E402
from pipeline.util import jsonio  # noqa: E402

COMMIT = "7a25cd72f490183e4113f1e84e68e36d653ddd28"
UPSTREAM = "64d10fbf9f8e6bfc79ab0570b94674c5b9997929"


def _tar(members: list[tuple[str, bytes, object]], *, format: int = tarfile.GNU_FORMAT) -> bytes:
    """A tar of (name, data, type) members; type is a tarfile type or ('link'|'hardlink', target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format) as archive:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.mtime = SEED_EPOCH
            if isinstance(kind, tuple):
                info.type = tarfile.SYMTYPE if kind[0] == "link" else tarfile.LNKTYPE
                info.linkname = kind[1]
                archive.addfile(info)
            elif kind == tarfile.DIRTYPE:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    return harnesses.trim_tar(buffer.getvalue())


def json_seeds() -> dict[str, bytes]:
    seeds = {
        "object.json": b'{"a": [1, 2.5, -0.0, true, false, null], "b": {"c": "\\u00e9\\n"}, "d": 12345678901234567890}\n',
        "array.json": b'[{"x": 1e10}, [], {}, "", [[["deep"]]]]',
        "scalar.json": b'"just a string"',
    }
    for path in sorted((ROOT / "manifests" / "v0.13.0").glob("*.json")):
        seeds[f"v0.13.0-{path.name}"] = path.read_bytes()
    return seeds


def lane_seeds() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((ROOT / "runtime" / "lanes").glob("*.toml"))}


def sums_seeds() -> dict[str, bytes]:
    lane = harnesses.fuzz_lane_4090()
    payload = harnesses.seed_payload(lane)
    expected = assets.asset_set(lane)
    outer = {name: hashlib.sha256(name.encode()).hexdigest() for name in expected.outer_names()}
    return {
        "outer-SHA256SUMS": assets.render_sums(outer),
        "payload-SHA256SUMS.txt": payload[assets.PAYLOAD_SUMS],
        "one-line": assets.render_sums({"SHA256SUMS.txt": "0" * 64}),
    }


def tar_seeds() -> dict[str, bytes]:
    lane = harnesses.fuzz_lane_4090()
    package = harnesses.seed_package_tar(lane)
    mixed = _tar([
        ("top", b"", tarfile.DIRTYPE),
        ("top/file.txt", b"hello\n", tarfile.REGTYPE),
        ("top/link", b"", ("link", "file.txt")),
        ("top/hard", b"", ("hardlink", "top/file.txt")),
        ("top/" + "long-name-" * 20 + ".txt", b"gnu long name\n", tarfile.REGTYPE),
    ])
    pax = _tar([("pax/" + "p" * 120, b"pax long name\n", tarfile.REGTYPE), ("pax/x", b"x", tarfile.REGTYPE)], format=tarfile.PAX_FORMAT)
    return {
        "0-package.tar.gz": b"\x00" + gzip.compress(package, mtime=SEED_EPOCH),
        "1-mixed.tar": b"\x01" + mixed,
        "1-pax.tar": b"\x01" + pax,
        "2-extract-mixed.tar": b"\x02" + mixed,
        "3-package.tar": b"\x03" + package,
        "4-source.tar.gz": b"\x04" + gzip.compress(mixed, mtime=SEED_EPOCH),
        "5-layer.tar": b"\x05" + pax,
    }


def check_assets_seeds() -> dict[str, bytes]:
    lane = harnesses.fuzz_lane_4090()
    return {"package-4090.tar": harnesses.seed_package_tar(lane)}


def identity_seeds() -> dict[str, bytes]:
    values = {
        "upstream_base_sha": UPSTREAM, "patch_stack_sha": COMMIT, "build_profile": "native-v0.7.0-beta.2-rtx4090",
        "build_type": "Release", "cxx_compiler": "msvc-19.44", "cuda_compiler": "nvcc-13.3.21", "cuda_toolkit": "13.3",
        "cuda_architecture": "89", "source_dirty": "false",
    }
    text = identity.BuildIdentity(values).text()
    return {
        "version-line": f"ninfer-serve {text}\n".encode(),
        "embedded.bin": b"MZ\x90\x00" + b"\x00" * 32 + identity.MARKER + text.encode() + b"\x00" + b"\x00" * 16,
    }


def manifest_seeds() -> dict[str, bytes]:
    return {f"{path.parent.name}-manifest.json": path.read_bytes() for path in sorted((ROOT / "manifests").glob("*/manifest.json"))}


def receipt_seeds() -> dict[str, bytes]:
    lane = harnesses.fuzz_lane_4090()
    build = identity_seeds()["version-line"].decode().split(" ", 1)[1].strip()
    pending = {
        "artifact_type": receipts.LANE_RECEIPT_TYPE,
        "schema_version": receipts.LANE_RECEIPT_SCHEMA,
        "lane": lane.id,
        "component_tag": lane.tag(),
        "deployment_profile": lane.deployment_profile(),
        "status": "hardware-pending",
        "status_reason": "no RTX 4090 on this machine: the endpoint gates did not run",
        "generated_utc": "2026-11-01T12:00:00Z",
        "harness": {"name": "omp-ninfer-qualify", "version": "1", "code_sha256": "1" * 64},
        "endpoint": None,
        "identity": {
            "source_commit": COMMIT,
            "build_identity": dict(pair.split("=", 1) for pair in build.split(" ")),
            "server_binary_sha256": "2" * 64,
            "binaries": {"ninfer-serve.exe": "2" * 64, "ninfer.exe": "3" * 64},
            "configuration_sha256": "4" * 64,
            "model_artifact_sha256": "5" * 64,
            "package": {"name": assets.asset_set(lane).name_of("package"), "sha256": "6" * 64, "bytes": 123456},
            "outer_checksums_sha256": "7" * 64,
        },
        "host": None,
        "thresholds": dict(lane.qualification),
        "gates": {"gpu_smoke": {"status": "skipped", "reason": "no GPU"}},
        "gates_not_run": [name for name in qualify.GATE_ORDER if name != "gpu_smoke"],
        "secret_values_recorded": 0,
    }
    qualify.validate_receipt(pending, file="seed")
    passed = json.loads(json.dumps(pending))
    passed.update(status="passed", status_reason="every gate passed", endpoint={"host": "127.0.0.1", "port": 8080}, gates_not_run=[])
    passed["host"] = {"gpu_name": "NVIDIA GeForce RTX 4090", "driver": "580.1", "memory_total_mib": 24564}
    passed["gates"] = {name: {"status": "passed", "reason": "ok", "output": {"redacted": True, "sha256": "8" * 64}} for name in qualify.GATE_ORDER}
    qualify.validate_receipt(passed, file="seed")
    return {"hardware-pending.json": jsonio.canonical_bytes(pending), "passed.json": jsonio.canonical_bytes(passed)}


def _oci_documents() -> tuple[bytes, bytes, bytes, bytes]:
    layer = gzip.compress(_tar([("etc/os-release", b"ID=ubuntu\n", tarfile.REGTYPE)]), mtime=0)
    config = oci.canonical_json({
        "architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [oci.digest_bytes(gzip.decompress(layer))]},
    })
    manifest = oci.canonical_json({
        "schemaVersion": 2, "mediaType": oci.MANIFEST,
        "config": {"mediaType": oci.CONFIG, "digest": oci.digest_bytes(config), "size": len(config)},
        "layers": [{"mediaType": oci.LAYER_GZIP, "digest": oci.digest_bytes(layer), "size": len(layer)}],
        "annotations": {"org.opencontainers.image.ref.name": "seed"},
    })
    index = oci.canonical_json({
        "schemaVersion": 2, "mediaType": oci.INDEX,
        "manifests": [
            {"mediaType": oci.MANIFEST, "digest": oci.digest_bytes(manifest), "size": len(manifest), "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": oci.MANIFEST, "digest": "sha256:" + "9" * 64, "size": 10, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"mediaType": oci.MANIFEST, "digest": "sha256:" + "8" * 64, "size": 10, "platform": {"os": "unknown", "architecture": "unknown"},
             "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
        ],
    })
    return index, manifest, config, layer


def registry_manifest_seeds() -> dict[str, bytes]:
    index, manifest, config, layer = _oci_documents()
    docker = json.loads(manifest)
    docker["mediaType"] = "application/vnd.docker.distribution.manifest.v2+json"
    docker["config"]["mediaType"] = "application/vnd.docker.container.image.v1+json"
    docker["layers"][0]["mediaType"] = "application/vnd.docker.image.rootfs.diff.tar.gzip"
    return {
        "index": SEP.join([index, manifest, config, layer]),
        "manifest-only": SEP.join([manifest, b"", config, layer]),
        "docker-manifest": SEP.join([oci.canonical_json(docker), b"", config, layer]),
    }


CHALLENGE = b'Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:alphastorm/ninfer-runtime:pull"'


def token_seeds() -> dict[str, bytes]:
    _index, manifest, _config, _layer = _oci_documents()
    return {
        "bearer": SEP.join([CHALLENGE, b'{"token":"seed-token-1234"}', oci.MANIFEST.encode(), manifest]),
        "access-token": SEP.join([b'Bearer realm="http://127.0.0.1:5001/auth"', b'{"access_token":"seed-token-5678","expires_in":300}', b"application/json; charset=utf-8", manifest]),
    }


def token_answer_seeds() -> dict[str, bytes]:
    return {
        "token.json": b'{"token":"seed-token-1234","expires_in":300,"issued_at":"2026-11-01T12:00:00Z"}',
        "errors.json": b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}',
        "tags.json": b'{"name":"alphastorm/ninfer-runtime","tags":["v0.7.0-qwen38-5090-beta.2","latest"]}',
        "challenge": CHALLENGE,
    }


def registry_client_seeds() -> dict[str, bytes]:
    _index, manifest, _config, _layer = _oci_documents()
    tags = b'{"name":"alphastorm/ninfer-runtime","tags":["latest"]}'
    return {
        "bearer": SEP.join([CHALLENGE, b'{"token":"seed-token-1234"}', manifest, tags]),
        "basic": SEP.join([b'Basic realm="registry"', b"{}", manifest, tags]),
    }


def sbom_seeds() -> dict[str, bytes]:
    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        Checksum,
        ChecksumAlgorithm,
        CreationInfo,
        Document,
        File,
        Package,
        PackageVerificationCode,
        Relationship,
        RelationshipType,
        SpdxNoAssertion,
    )

    from pipeline.formats import sbom

    digests = harnesses.sbom_digests()
    created = __import__("datetime").datetime(2026, 11, 1, 12, 0, 0)
    supplier = Actor(ActorType.ORGANIZATION, "OMP")
    files = [
        File(name=f"./{name}", spdx_id=f"SPDXRef-File-{index}", checksums=[Checksum(ChecksumAlgorithm.SHA1, sha1), Checksum(ChecksumAlgorithm.SHA256, sha256)],
             license_concluded=SpdxNoAssertion(), copyright_text=SpdxNoAssertion())
        for index, (name, (sha256, sha1)) in enumerate(sorted(digests.items()))
    ]
    code = hashlib.sha1("".join(sorted(sha1 for _sha256, sha1 in digests.values())).encode(), usedforsecurity=False).hexdigest()
    package = Package(spdx_id="SPDXRef-Package-NInfer", name="ninfer-sample", download_location=SpdxNoAssertion(), version="0.7.0",
                      file_name=harnesses.SBOM_PACKAGE, supplier=supplier, files_analyzed=True, verification_code=PackageVerificationCode(code),
                      checksums=[Checksum(ChecksumAlgorithm.SHA256, harnesses.SBOM_PACKAGE_SHA256)],
                      license_concluded=SpdxNoAssertion(), license_declared=SpdxNoAssertion(), copyright_text=SpdxNoAssertion())
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, package.spdx_id)]
    relationships += [Relationship(package.spdx_id, RelationshipType.CONTAINS, file.spdx_id) for file in files]
    creation = CreationInfo(spdx_version="SPDX-2.3", spdx_id="SPDXRef-DOCUMENT", name="ninfer-sample-sbom", data_license="CC0-1.0",
                            document_namespace="https://example.invalid/spdx/ninfer-sample", creators=[Actor(ActorType.TOOL, "omp-ninfer-pipeline-0.1.0"), supplier],
                            created=created)
    spdx = sbom.spdx_bytes(Document(creation_info=creation, packages=[package], files=files, relationships=relationships))
    components = [
        {"type": "file", "bom-ref": f"file:{name}", "name": name.rsplit("/", 1)[-1], "version": "0.7.0",
         "hashes": [{"alg": "SHA-256", "content": sha256}, {"alg": "SHA-1", "content": sha1}],
         "properties": [{"name": f"{sbom.PROPERTY}:path", "value": name}]}
        for name, (sha256, sha1) in sorted(digests.items())
    ]
    cdx = {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json", "bomFormat": "CycloneDX", "specVersion": "1.6",
        "serialNumber": "urn:uuid:3e671687-395b-41f5-a30f-a58921a69b79", "version": 1,
        "metadata": {"timestamp": "2026-11-01T12:00:00+00:00", "component": {
            "type": "application", "bom-ref": "package", "name": "ninfer-sample", "version": "0.7.0",
            "hashes": [{"alg": "SHA-256", "content": harnesses.SBOM_PACKAGE_SHA256}]}},
        "components": components,
        "dependencies": [{"ref": "package", "dependsOn": [c["bom-ref"] for c in components]}] + [{"ref": c["bom-ref"]} for c in components],
    }
    return {"sample.spdx.json": spdx, "sample.cdx.json": jsonio.canonical_bytes(cdx)}


def release_toml_seeds() -> dict[str, bytes]:
    return {f"{path.parent.name}-release.toml": path.read_bytes() for path in sorted((ROOT / "manifests").glob("*/release.toml"))}


# -- issue #18: acceptance, routes, provenance, source archives, GitHub answers -----------------------

# The route documents of the routes seeds, read from git at this commit (docs/QUICKSTART.md and docs/RELEASING.md
# as they were): the seeds stay the same bytes when the documents change.  Without the commit (a shallow clone)
# the committed seed is kept as it is.
DOCS_COMMIT = "5217449f2e1cb7261320be1bf9132e99df57c6e6"
SMALL_ROUTES = b"""# Small

<!-- a comment
over two lines -->

```parameters
[OMP_NINFER_MIRROR]: mirrors
```

## Route `one`: one sh step

```sh
echo one
```

~~~sh requires=gpu,oci-engine
nvidia-smi
~~~

## Prose

## Route `ps`: one powershell step

```parameters
OMP_NINFER_LANE: lane = rtx4090-windows-native
```

````powershell
Write-Output "$env:OMP_NINFER_LANE"
````

```text
output, not a step
```
"""


def _at_docs_commit(path: str, seed: Path) -> bytes | None:
    import subprocess

    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{DOCS_COMMIT}:{path}"], capture_output=True, check=False)
    if shown.returncode == 0:
        return shown.stdout
    return seed.read_bytes() if seed.is_file() else None


def routes_seeds() -> dict[str, bytes]:
    seeds = {"small.md": SMALL_ROUTES, "runbook.md": harnesses.ROUTE_DOCUMENT}
    for path in ("docs/QUICKSTART.md", "docs/RELEASING.md"):
        name = path.rsplit("/", 1)[1]
        data = _at_docs_commit(path, harnesses.CORPUS / "routes" / name)
        if data is not None:
            seeds[name] = data
    return seeds


def _acceptance_pair(route_id: str, *, release: str | None, status: str = "passed") -> bytes:
    """A bundle of the harness' route document (the pipeline's own writer) and the receipt of a run of it."""
    from pipeline.formats import acceptance
    from pipeline.stages import accept
    from pipeline.stages.accept import bundle as accept_bundle

    document = harnesses.route_document()
    route = document.route(route_id)
    manifest = None
    if release is not None:
        held = (ROOT / "manifests" / "v0.13.1" / "manifest.json").read_bytes()
        manifest = {"path": f"manifests/{release}/manifest.json", "sha256": hashlib.sha256(held).hexdigest(), "status": "candidate"}
    bundle = accept_bundle._bundle_document("release-route" if release else "runbook", release, COMMIT if release else None, manifest, harnesses.ROUTE_DOCUMENT_PATH,
                                     harnesses.ROUTE_DOCUMENT, COMMIT, document, route_id, acceptance.DEFAULT_HOST_KIND[route.shell], None, bool(release), [])
    bundle_bytes = acceptance.canonical(bundle)
    acceptance.validate_bundle(acceptance.loads_strict(bundle_bytes, file="seed"), file="seed")
    sources = {"GIT_AUTHOR_NAME": ("default", "fuzz"), "OMP_NINFER_LANE": ("set", "rtx4090-windows-native"), "OMP_NINFER_MIRROR": ("unset", None)}
    parameters = {name: {"source": sources[p.name][0], "value": sources[p.name][1]} for name, p in ((p.name, p) for p in document.parameters_of(route_id))}
    variables = sorted({"HOME", "LANG", "LC_ALL", "PATH", "TERM", "TMPDIR", "TZ"} | ({"OMP_NINFER_RELEASE"} if release else set())
                       | {name for name, value in parameters.items() if value["source"] != "unset"})
    steps = []
    for step in route.steps:
        ran = status == "passed" or step.index == 1
        steps.append({
            "index": step.index, "block_sha256": step.sha256, "executed_sha256": step.sha256 if ran else None, "requires": list(step.requires),
            "status": ("passed" if status == "passed" or step.index > 1 else "failed") if ran else "not-run",
            "exit_status": (0 if status == "passed" else 1) if ran else None, "elapsed_s": 0.25 if ran else None,
            "stdout": {"sha256": "a" * 64, "bytes": 12} if ran else None, "stderr": {"sha256": "b" * 64, "bytes": 0} if ran else None,
            "reason": None if ran else "not run: step 1 failed",
        })
    receipt = {
        "artifact_type": acceptance.RECEIPT_TYPE, "schema_version": acceptance.SCHEMA_VERSION, "bundle_sha256": hashlib.sha256(bundle_bytes).hexdigest(),
        "kind": bundle["kind"], "release": release, "route": route_id, "candidate_commit": bundle["candidate_commit"],
        "document": {"path": harnesses.ROUTE_DOCUMENT_PATH, "sha256": bundle["document"]["sha256"], "sha256_in_clone": bundle["document"]["sha256"]},
        "clone": {"commit": COMMIT, "clean": True}, "status": status, "failed_step": None if status == "passed" else 1,
        "failure": None if status == "passed" else "exit status 1", "steps": steps,
        "environment": {"variables": variables, "path": "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "parameters": parameters, "shell": route.shell},
        "capabilities": {cap: {"available": True, "how": "granted", "command": None, "exit_status": None} for cap in sorted({c for s in route.steps for c in s.requires})},
        "host": {"os": "linux" if route.shell == "sh" else "windows", "os_release": "6.1", "arch": "x86_64", "python": "3.11.7", "shell_version": "GNU bash, 5.2", "gpus": []},
        "started_at": "2026-11-01T12:00:00Z", "finished_at": "2026-11-01T12:00:05Z",
        "runner": {"module": accept.RUNNER, "stdin": "end-of-file", "errexit": route.shell == "sh"}, "secret_values_recorded": 0,
    }
    receipt_bytes = acceptance.canonical(receipt)
    acceptance.validate_receipt(acceptance.loads_strict(receipt_bytes, file="seed"), file="seed")
    return SEP.join([bundle_bytes, receipt_bytes])


def acceptance_seeds() -> dict[str, bytes]:
    return {
        "runbook-check-passed": _acceptance_pair("check", release=None),
        "runbook-check-failed": _acceptance_pair("check", release=None, status="failed"),
        "release-check-passed": _acceptance_pair("check", release="v0.13.1"),
        "runbook-windows-passed": _acceptance_pair("windows", release=None),
    }


def _statement(build_type: str) -> bytes:
    from pipeline.formats import provenance as slsa

    source = {"kind": "remote", "commit": COMMIT, "tree": UPSTREAM, "subdir": "", "commit_time": SEED_EPOCH}
    repository = "https://github.com/alphastorm/ninfer.git"
    dependencies = slsa.source_descriptors(source, repository, "c" * 64)
    dependencies.append(slsa.descriptor("runtime/lanes/rtx4090-windows-native.toml", sha256="d" * 64))
    dependencies.append(slsa.descriptor(slsa.LOCK_NAME, sha256="e" * 64))
    dependencies.append(slsa.descriptor("toolchain:nvidia-cuda-nvcc", uri="https://pypi.example.invalid/nvcc.whl", sha256="f" * 64, annotations={"version": "13.3.21", "size": 123}))
    subjects = {"SHA256SUMS": "1" * 64, "ninfer-v0.7.0-windows-x86_64.tar.gz": "2" * 64} if build_type == slsa.BUILD_TYPE_SET else {"ghcr.io/alphastorm/ninfer-runtime": "3" * 64}
    external = {"lane": "rtx4090-windows-native", "component_tag": "v0.7.0-qwen38-4090-beta.2", "source_repository": repository, "source_commit": COMMIT}
    internal = {"asset_platform": "windows-x86_64", "build_profile": "native-v0.7.0-beta.2-rtx4090", "build_route": "native", "cut": {"n": 2, "tag": external["component_tag"]},
                "cuda_architecture": "89", "cuda_toolkit": "13.3", "source_date_epoch": SEED_EPOCH, "toolchain_kind": "pinned", "host_environment": None}
    run_details = slsa.builder({"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "alphastorm/omp-ninfer",
                                "GITHUB_WORKFLOW_REF": "alphastorm/omp-ninfer/.github/workflows/release.yml@refs/heads/main", "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "1"})
    document = slsa.statement(subjects=subjects, build_type=build_type, external=external, internal=internal, dependencies=dependencies,
                              byproducts=[slsa.descriptor("build-identity.json", sha256="4" * 64)], run_details=run_details)
    return slsa.statement_bytes(document)


def provenance_seeds() -> dict[str, bytes]:
    from pipeline.formats import provenance as slsa

    return {"set.provenance.intoto.json": _statement(slsa.BUILD_TYPE_SET), "image.provenance.intoto.json": _statement(slsa.BUILD_TYPE_IMAGE)}


def _git_archive_tar() -> bytes:
    """A tar as `git archive` writes it: a pax global header naming the commit, then the files, all at the commit time."""
    from pipeline.lanework.source import set_tar_mtimes

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": COMMIT}) as archive:
        for name, body in (("README.md", b"# sample runtime\n"), ("host-dependencies.toml", b"[cmake]\nmin_version = \"3.28\"\n"), ("src/main.cpp", b"int main() { return 0; }\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(body), 0o644, SEED_EPOCH
            archive.addfile(info, io.BytesIO(body))
    return set_tar_mtimes(harnesses.trim_tar(buffer.getvalue()), SEED_EPOCH)


def source_archive_seeds() -> dict[str, bytes]:
    tar = _git_archive_tar()
    plain = _tar([("src", b"", tarfile.DIRTYPE), ("src/a.c", b"int a;\n", tarfile.REGTYPE), ("src/l", b"", ("link", "a.c"))], format=tarfile.USTAR_FORMAT)
    return {"git-archive.tar": tar, "git-archive.tar.gz": gzip.compress(tar, mtime=0), "no-header.tar": plain}


def _github_seed(releases: list, assets_: list, ref: dict | None, tag: dict | None, rest: dict) -> bytes:
    def dumps(value: object) -> bytes:
        return b"" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    return SEP.join([dumps(releases), dumps(assets_), dumps(ref), dumps(tag), dumps(rest)])


def github_seeds() -> dict[str, bytes]:
    tag = harnesses.FUZZ_TAG
    upload = "https://uploads.github.com/repos/alphastorm/ninfer/releases/7/assets{?name,label}"
    target = harnesses.github_target()
    planned = [{"id": 70 + index, "name": a["name"], "size": a["size"], "digest": f"sha256:{a['sha256']}", "state": "uploaded"} for index, a in enumerate(target.assets)]
    draft = {"id": 7, "tag_name": tag, "name": target.name, "draft": True, "prerelease": True, "immutable": False, "upload_url": upload, "assets": planned}
    other = {"id": 3, "tag_name": "v0.7.0-qwen38-4090-beta.1", "name": "older", "draft": False, "prerelease": True, "immutable": True, "upload_url": upload, "assets": []}
    rest = {
        "repo": {"full_name": "alphastorm/ninfer", "permissions": {"push": True, "admin": False}},
        "commit": {"sha": COMMIT, "files": [{"filename": "README.md"}, {"filename": ".github/workflows/release.yml"}]},
        "rate_limit": {"resources": {"core": {"limit": 5000, "remaining": 4990, "reset": 1793538000}}},
        "immutable": {"enabled": True},
        "release": draft,
        "matching": [{"ref": f"refs/tags/{tag}", "object": {"type": "commit", "sha": COMMIT}}],
        "_status": {}, "_headers": {"repo": {"x-oauth-scopes": "repo, workflow"}},
    }
    published = {**draft, "draft": False, "immutable": True}
    half = [{**planned[0]}, {**planned[1], "state": "starter", "size": 0, "digest": None}]
    annotated_ref = {"ref": f"refs/tags/{tag}", "object": {"type": "tag", "sha": UPSTREAM}}
    limited = {**rest, "_status": {"rate_limit": 403}, "_headers": {"rate_limit": {"retry-after": "1", "x-ratelimit-remaining": "0"}}}
    return {
        "draft-untagged": _github_seed([other, draft], planned, None, None, rest),
        "published-tagged": _github_seed([published], planned, {"ref": f"refs/tags/{tag}", "object": {"type": "commit", "sha": COMMIT}}, None, {**rest, "release": published}),
        "annotated-half-uploaded": _github_seed([draft], half, annotated_ref, {"sha": UPSTREAM, "object": {"type": "commit", "sha": COMMIT}}, rest),
        "rate-limited-error": _github_seed([], [], None, None, {**limited, "repo": {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest",
                                                                                     "errors": [{"resource": "Release", "code": "invalid"}, "bare"]}}),
    }


def release_attestation_seeds() -> dict[str, bytes]:
    """A bundle shaped like GitHub's release attestation (no real signature: the harness checks statements, not crypto)."""
    repository, tag = harnesses.ATTESTATION_REPOSITORY, harnesses.ATTESTATION_TAG
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"uri": f"pkg:github/{repository}@{tag}", "digest": {"sha1": COMMIT}}]
                 + [{"name": name, "digest": {"sha256": digest}} for name, digest in sorted(harnesses.ATTESTATION_ASSETS.items())],
                 "predicateType": "https://in-toto.io/attestation/release/v0.1",
                 "predicate": {"ownerId": "1", "purl": f"pkg:github/{repository}@{tag}", "releaseId": "7", "repository": repository, "repositoryId": "2", "tag": tag}}
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    bundle = {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
              "verificationMaterial": {"certificate": {"rawBytes": "MAA="}, "timestampVerificationData": {"rfc3161Timestamps": [{"signedTimestamp": "MAA="}]}},
              "dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": "application/vnd.in-toto+json", "signatures": [{"sig": "MAA="}]}}

    def dumps(value: object) -> bytes:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    return {
        "bundle.sigstore.json": dumps(bundle),
        "api-answer.json": dumps({"attestations": [{"bundle": bundle, "bundle_url": None, "initiator": "github", "repository_id": 2}]}),
    }
def apt_index_seeds() -> dict[str, bytes]:
    release = (b"Origin: Debian\nSuite: stable\nCodename: trixie\nArchitectures: all amd64\nComponents: main\nSHA256:\n "
               + b"1" * 64 + b"  1234 main/binary-amd64/Packages.xz\n")
    packages = (b"Package: app\nVersion: 1:1.0-1\nArchitecture: amd64\nDepends: libc6 (>= 2.36), zlib1g | libz-virtual, perl:any\n"
                b"Filename: pool/main/a/app/app_1.0-1_amd64.deb\nSize: 10\nSHA256: " + b"2" * 64 + b"\n\n"
                b"Package: libc6\nVersion: 2.41-12\nArchitecture: amd64\nMulti-Arch: same\nSource: glibc\nProvides: libc6-virtual (= 2.41)\n"
                b"Filename: pool/main/g/glibc/libc6_2.41-12_amd64.deb\nSize: 20\nSHA256: " + b"3" * 64 + b"\n\n"
                b"Package: zlib1g\nVersion: 1:1.3-1\nArchitecture: amd64\nProvides: libz-virtual\nFilename: pool/main/z/zlib/zlib1g.deb\nSize: 5\nSHA256: "
                + b"4" * 64 + b"\n\nPackage: perl\nVersion: 5.40-1\nArchitecture: all\nMulti-Arch: allowed\nFilename: pool/main/p/perl/perl.deb\nSize: 7\nSHA256: "
                + b"5" * 64 + b"\n")
    copyright_text = (b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\nFiles: *\nLicense: GPL-2+ or Artistic\n\n"
                      b"Files: lib/*\nLicense: LGPL-2.1+ and Zlib\n")
    return {"release": release, "packages": packages, "copyright": copyright_text}


def apt_lock_seeds() -> dict[str, bytes]:
    from pipeline.formats import apt_lock

    return {"lock.json": jsonio.canonical_bytes(apt_lock.lock_document(
        definition="ninfer-runtime.toml", request_sha256="a" * 64, architecture="amd64", requested=["libc6"],
        sources=[{"uri": "https://deb.debian.org/debian", "suite": "trixie", "components": ["main"], "inrelease_sha256": "b" * 64,
                  "signers": ["04B54C3CDCA79751B16BC6B5225629DF75B188BD"], "date": "Sat, 21 Nov 2026 09:15:44 UTC", "distro": "debian-13",
                  "indexes": [{"path": "main/binary-amd64/Packages.xz", "sha256": "c" * 64, "size": 9}]}],
        packages=[{"name": "libc6", "version": "2.41-12", "architecture": "amd64", "multi_arch": "same", "filename": "pool/main/g/glibc/libc6_2.41-12_amd64.deb",
                   "size": 10, "sha256": "d" * 64, "source_package": "glibc", "source_version": "2.41-12", "source": 0,
                   "why": {"package": None, "field": "base.packages", "relation": "libc6"}, "libraries": ["ld-linux-x86-64.so.2", "libc.so.6"]}]))}


def deb_seeds() -> dict[str, bytes]:
    import lzma

    def tar_xz(members: list[tuple[str, bytes, object]]) -> bytes:
        return lzma.compress(_tar(members))

    data = tar_xz([("./usr/", b"", tarfile.DIRTYPE), ("./lib/", b"", tarfile.DIRTYPE), ("./lib/x86_64-linux-gnu/", b"", tarfile.DIRTYPE),
                   ("./lib/x86_64-linux-gnu/libz.so.1.3", b"\x7fELF stand-in", tarfile.REGTYPE), ("./lib/x86_64-linux-gnu/libz.so.1", b"", ("link", "libz.so.1.3"))])
    ctrl = tar_xz([("./control", b"Package: fuzzed\nVersion: 1.0-1\nArchitecture: amd64\nDescription: x\n", tarfile.REGTYPE),
                   ("./postinst", b"#!/bin/sh\nset -e\nldconfig\n", tarfile.REGTYPE)])
    out = bytearray(b"!<arch>\n")
    for name, body in (("debian-binary", b"2.0\n"), ("control.tar.xz", ctrl), ("data.tar.xz", data)):
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + (b"\n" if len(body) % 2 else b"")
    return {"zlib-like.deb": bytes(out)}


def ci_checks_seeds() -> dict[str, bytes]:
    """GitHub's check-runs and combined-status answers at the harness's commit: green, a failing re-run, a status, two pages."""
    commit = harnesses.FUZZ_COMMIT

    def run(run_id: int, name: str, conclusion: str | None, status: str = "completed") -> dict:
        return {"id": run_id, "name": name, "head_sha": commit, "status": status, "conclusion": conclusion, "started_at": "2026-11-10T00:00:00Z",
                "html_url": f"https://github.com/alphastorm/ninfer/actions/runs/{run_id}/job/{run_id}", "app": {"id": 15368, "slug": "github-actions"}}

    def answer(runs: list, statuses: list, *, pages: bool = False) -> bytes:
        combined = {"state": "success" if all(s["state"] == "success" for s in statuses) and statuses else "pending", "sha": commit,
                    "total_count": len(statuses), "statuses": statuses}
        parts = [json.dumps({"total_count": len(runs) * (2 if pages else 1), "check_runs": runs}).encode(), json.dumps(combined).encode()]
        return SEP.join(parts + ([b"next"] if pages else []))

    return {
        "green.json": answer([run(11, "build", "success"), run(12, "test", "success")], []),
        "rerun-failed.json": answer([run(13, "test", "failure"), run(12, "test", "success"), run(11, "build", "success")], []),
        "pending-and-status.json": answer([run(11, "build", None, "in_progress")], [{"context": "test", "state": "success", "target_url": "https://ci.example.org/1"}]),
        "two-pages.json": answer([run(11, "build", "success")], [], pages=True),
    }


SEEDS = {
    "json": json_seeds,
    "lane": lane_seeds,
    "sums": sums_seeds,
    "tar": tar_seeds,
    "check_assets": check_assets_seeds,
    "identity": identity_seeds,
    "manifest": manifest_seeds,
    "audit": manifest_seeds,
    "receipt": receipt_seeds,
    "registry_manifest": registry_manifest_seeds,
    "token": token_seeds,
    "token_answer": token_answer_seeds,
    "registry_client": registry_client_seeds,
    "sbom": sbom_seeds,
    "release_toml": release_toml_seeds,
    "routes": routes_seeds,
    "acceptance": acceptance_seeds,
    "provenance": provenance_seeds,
    "source_archive": source_archive_seeds,
    "github": github_seeds,
    "release_attestation": release_attestation_seeds,
    "apt_index": apt_index_seeds,
    "apt_lock": apt_lock_seeds,
    "deb": deb_seeds,
    "ci_checks": ci_checks_seeds,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    assert set(SEEDS) == set(harnesses.TARGETS), f"targets without seeds: {sorted(set(harnesses.TARGETS) - set(SEEDS))}"
    differ = []
    for name, make in sorted(SEEDS.items()):
        folder = harnesses.CORPUS / name
        folder.mkdir(parents=True, exist_ok=True)
        for file, data in sorted(make().items()):
            path = folder / file
            if args.check:
                if not path.is_file() or path.read_bytes() != data:
                    differ.append(str(path.relative_to(ROOT)))
            else:
                path.write_bytes(data)
    if differ:
        print("seeds differ from tests/fuzz/seeds.py: " + ", ".join(differ) + "; run python tests/fuzz/seeds.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
