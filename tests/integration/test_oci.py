"""OCI layout primitives and registry names: determinism, canonical bytes, verification, refusals."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from registry import free_port, require_tool

from pipeline.errors import ExitCode, InputError, IntegrityError, RemoteError, UsageError, redact
from pipeline.infra import oci
from pipeline.infra.registry import (
    ENV_PASSWORD,
    ENV_USERNAME,
    RegistryClient,
    credentials_for,
    parse_push_target,
    parse_repository,
)

EPOCH = 1793534400


def _files(root: Path) -> list[oci.LayerFile]:
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "bin" / "tool").write_bytes(b"\x7fELF-ish tool bytes")
    (root / "bin" / "tool").chmod(0o700)
    (root / "LICENSE").write_text("licence text\n")
    (root / "LICENSE").chmod(0o600)
    return [
        oci.LayerFile("/opt/app/bin/tool", root / "bin" / "tool", executable=True),
        oci.LayerFile("/opt/app/LICENSE", root / "LICENSE"),
        oci.LayerFile("/opt/app/current", None, symlink="bin"),
    ]


def test_layer_tar_is_deterministic_whatever_the_inputs_metadata(tmp_path):
    first = oci.build_layer(_files(tmp_path / "src"), tmp_path / "a.tgz", epoch=EPOCH)
    for path in (tmp_path / "src").rglob("*"):
        os.utime(path, (1, 1))
        path.chmod(0o777)
    second = oci.build_layer(_files(tmp_path / "src"), tmp_path / "b.tgz", epoch=EPOCH)
    assert (tmp_path / "a.tgz").read_bytes() == (tmp_path / "b.tgz").read_bytes()
    assert first.descriptor == second.descriptor and first.diff_id == second.diff_id
    data = (tmp_path / "a.tgz").read_bytes()
    # gzip header: deflate, no FNAME, mtime 0, XFL 2 (level 9), OS 255: nothing from this run.
    assert data[:10] == oci.GZIP_HEADER + b"\x02\xff"
    assert first.descriptor.digest == oci.digest_bytes(data) and first.descriptor.media_type == oci.LAYER_GZIP
    raw = gzip.decompress(data)
    assert first.diff_id == oci.digest_bytes(raw)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["opt", "opt/app", "opt/app/LICENSE", "opt/app/bin", "opt/app/bin/tool", "opt/app/current"]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", EPOCH)}
    modes = {m.name: (m.type, m.mode) for m in members}
    assert modes["opt/app"] == (tarfile.DIRTYPE, 0o755)
    assert modes["opt/app/LICENSE"] == (tarfile.REGTYPE, 0o644)
    assert modes["opt/app/bin/tool"] == (tarfile.REGTYPE, 0o755)
    assert modes["opt/app/current"][0] == tarfile.SYMTYPE and members[-1].linkname == "bin"
    # The diff_id can be recomputed from the blob (what the image stage does for base layers).
    assert oci.uncompressed_digest(tmp_path / "a.tgz", oci.LAYER_GZIP) == first.diff_id


def test_uncompressed_layers_have_digest_equal_to_diff_id(tmp_path):
    layer = oci.build_layer(_files(tmp_path / "src"), tmp_path / "l.tar", epoch=EPOCH, compression="none")
    assert layer.descriptor.media_type == oci.LAYER_TAR
    assert layer.descriptor.digest == layer.diff_id == oci.digest_bytes((tmp_path / "l.tar").read_bytes())


def test_conflicting_paths_in_one_layer_are_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="same path"):
        oci.build_layer([oci.LayerFile("/a/b", tmp_path / "f"), oci.LayerFile("/a/b", tmp_path / "f")], tmp_path / "x", epoch=0)
    with pytest.raises(InputError, match="file and a directory"):
        oci.build_layer([oci.LayerFile("/a", tmp_path / "f"), oci.LayerFile("/a/b", tmp_path / "f")], tmp_path / "x", epoch=0)


def test_canonical_json_is_compact_sorted_and_hashed_as_is():
    document = {"schemaVersion": 2, "mediaType": oci.MANIFEST, "annotations": {"b": "ü", "a": "1"}}
    data = oci.canonical_json(document)
    assert data == '{"annotations":{"a":"1","b":"ü"},"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}'.encode()
    assert not data.endswith(b"\n")
    assert oci.digest_bytes(data).startswith("sha256:") and oci.is_digest(oci.digest_bytes(data))
    assert oci.rfc3339(EPOCH) == "2026-11-01T12:00:00Z"


def test_blob_store_refuses_changed_or_missing_bytes(tmp_path):
    store = oci.BlobStore(tmp_path)
    descriptor = store.put_bytes(b"config bytes", oci.CONFIG)
    assert store.read_verified(descriptor, origin="test") == b"config bytes"
    path = store.path(descriptor.digest)
    path.write_bytes(b"config byteS")
    with pytest.raises(IntegrityError) as info:
        store.verify_file(descriptor, origin="the manifest")
    assert info.value.exit_code == ExitCode.INTEGRITY and descriptor.digest in str(info.value)
    path.unlink()
    with pytest.raises(IntegrityError, match="missing"):
        store.read_verified(descriptor, origin="test")


def test_descriptors_accept_sha256_only():
    good = {"mediaType": oci.LAYER_GZIP, "digest": "sha256:" + "a" * 64, "size": 3}
    assert oci.Descriptor.from_json(good, origin="m", field_name="layers[0]").size == 3
    for bad, field in (
        ({**good, "digest": "sha512:" + "a" * 128}, "layers[0].digest"),
        ({**good, "digest": "sha256:" + "A" * 64}, "layers[0].digest"),
        ({**good, "size": -1}, "layers[0].size"),
        ({**good, "size": True}, "layers[0].size"),
    ):
        with pytest.raises(InputError) as info:
            oci.Descriptor.from_json(bad, origin="m", field_name="layers[0]")
        assert info.value.field == field


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"schemaVersion": 2, "config": {"mediaType": oci.CONFIG, "digest": "sha256:" + "1" * 64, "size": 2}, "layers": [{"mediaType": oci.LAYER_GZIP, "digest": "sha256:" + "2" * 64, "size": 3}], "annotations": 9223372036854775808}, "annotations"),
        ({"schemaVersion": 2, "config": {"mediaType": oci.CONFIG, "digest": "sha256:" + "1" * 64, "size": 2}, "layers": [{"mediaType": oci.LAYER_GZIP, "digest": "sha256:" + "2" * 64, "size": 3, "annotations": ["a"]}]}, "layers[0].annotations"),
        ({"schemaVersion": 2, "config": {"mediaType": oci.CONFIG, "digest": "sha256:" + "1" * 64, "size": 2, "annotations": {"k": 1}}, "layers": [{"mediaType": oci.LAYER_GZIP, "digest": "sha256:" + "2" * 64, "size": 3}]}, "config.annotations"),
    ],
)
def test_a_base_manifest_whose_annotations_are_no_map_of_strings_is_refused(document, field):
    # Found by the registry-manifest fuzzer (tests/fuzz, target 'registry_manifest'): dict() of a
    # number or a list was a TypeError/ValueError while the image stage read the base manifest.
    with pytest.raises(InputError, match="annotations are not a map of strings") as caught:
        oci.parse_manifest(document, origin="docker.io/nvidia/cuda@sha256:" + "0" * 64, media_type=oci.MANIFEST)
    assert caught.value.field == field and caught.value.file.startswith("docker.io/nvidia/cuda@")
    with pytest.raises(InputError, match="mediaType is not a string") as caught:
        oci.document_media_type({"mediaType": 5}, None, origin="base")
    assert caught.value.file == "base" and caught.value.field == "mediaType"


def test_platform_selection_skips_attestations_and_names_what_is_offered():
    def entry(digest_char: str, platform: dict, **annotations) -> oci.Descriptor:
        return oci.Descriptor(oci.MANIFEST, "sha256:" + digest_char * 64, 10, annotations, platform)

    entries = [
        entry("a", {"os": "linux", "architecture": "arm64", "variant": "v8"}),
        entry("b", {"os": "linux", "architecture": "amd64"}),
        entry("c", {"os": "unknown", "architecture": "unknown"}, **{"vnd.docker.reference.type": "attestation-manifest"}),
    ]
    assert oci.select_platform(entries, "linux/amd64", origin="idx").digest == "sha256:" + "b" * 64
    assert oci.select_platform(entries, "linux/arm64/v8", origin="idx").digest == "sha256:" + "a" * 64
    with pytest.raises(InputError) as info:
        oci.select_platform(entries, "linux/riscv64", origin="idx")
    assert "linux/amd64" in str(info.value) and "linux/arm64/v8" in str(info.value)


def test_docker_media_types_map_to_oci_names_and_unverifiable_layers_are_refused():
    docker = oci.Descriptor(oci.DOCKER_LAYER_GZIP, "sha256:" + "1" * 64, 5)
    mapped = oci.as_oci_layer(docker, origin="m", index=0)
    assert (mapped.media_type, mapped.digest, mapped.size) == (oci.LAYER_GZIP, docker.digest, 5)
    assert oci.as_oci_config(oci.Descriptor(oci.DOCKER_CONFIG, docker.digest, 5), origin="m").media_type == oci.CONFIG
    for media_type in (oci.LAYER_ZSTD, oci.DOCKER_FOREIGN_LAYER):
        with pytest.raises(InputError, match="cannot verify"):
            oci.as_oci_layer(oci.Descriptor(media_type, docker.digest, 5), origin="m", index=3)
    with pytest.raises(InputError, match="not an image configuration"):
        oci.as_oci_config(oci.Descriptor("application/vnd.oci.empty.v1+json", docker.digest, 2), origin="m")


def _small_layout(tmp_path: Path) -> tuple[Path, str]:
    layout = tmp_path / "layout"
    store = oci.BlobStore(layout)
    layer = oci.build_layer(_files(tmp_path / "src"), tmp_path / "layer", epoch=EPOCH)
    store.adopt(tmp_path / "layer", layer.descriptor)
    config = {"architecture": "amd64", "os": "linux", "created": oci.rfc3339(EPOCH), "config": {"Cmd": ["/opt/app/bin/tool"]},
              "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]}}
    config_descriptor = store.put_bytes(oci.canonical_json(config), oci.CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": oci.MANIFEST, "config": config_descriptor.to_json(), "layers": [layer.descriptor.to_json()]}
    manifest_descriptor = store.put_bytes(oci.canonical_json(manifest), oci.MANIFEST)
    oci.write_layout(layout, oci.Descriptor(oci.MANIFEST, manifest_descriptor.digest, manifest_descriptor.size, {oci.REF_NAME: "v1"}))
    return layout, manifest_descriptor.digest


def test_layout_is_read_by_skopeo_and_unpacked_by_umoci(tmp_path):
    skopeo = require_tool("skopeo", "skopeo")
    umoci = require_tool("umoci", "umoci")
    layout, digest = _small_layout(tmp_path)
    assert json.loads((layout / "oci-layout").read_bytes()) == {"imageLayoutVersion": "1.0.0"}
    raw = subprocess.run([skopeo, "inspect", "--raw", f"oci:{layout}:v1"], capture_output=True, check=True).stdout
    assert oci.digest_bytes(raw) == digest
    inspected = json.loads(subprocess.run([skopeo, "inspect", f"oci:{layout}:v1"], capture_output=True, check=True, text=True).stdout)
    assert inspected["Digest"] == digest and inspected["Architecture"] == "amd64"
    bundle = tmp_path / "bundle"
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    subprocess.run([umoci, "unpack", *rootless, "--image", f"{layout}:v1", str(bundle)], capture_output=True, check=True)
    tool = bundle / "rootfs" / "opt" / "app" / "bin" / "tool"
    assert tool.read_bytes() == b"\x7fELF-ish tool bytes" and tool.stat().st_mode & 0o777 == 0o755
    assert os.readlink(bundle / "rootfs" / "opt" / "app" / "current") == "bin"
    assert oci.read_layout_index(layout)["manifests"][0]["digest"] == digest


# -- registry names and credentials ---------------------------------------------

@pytest.mark.parametrize(
    ("value", "host", "path", "plain"),
    [
        ("ghcr.io/alphastorm/ninfer-runtime", "ghcr.io", "alphastorm/ninfer-runtime", False),
        ("127.0.0.1:5000/alphastorm/ninfer-runtime", "127.0.0.1:5000", "alphastorm/ninfer-runtime", True),
        ("localhost:5000/a", "localhost:5000", "a", True),
        ("docker.io/ubuntu", "docker.io", "library/ubuntu", False),
    ],
)
def test_push_targets(value, host, path, plain):
    target = parse_push_target(value)
    assert (target.host, target.path, target.plain_http) == (host, path, plain)
    assert target.at("sha256:" + "0" * 64) == f"{host}/{path}@sha256:{'0' * 64}"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("https://ghcr.io/a/b", "without a URL scheme"),
        ("ghcr.io/a/b:latest", "names a tag or digest"),
        ("ghcr.io/a/b@sha256:" + "0" * 64, "names a tag or digest"),
        ("ghcr.io/Alpha/B", "not a valid repository"),
        ("ninfer-runtime", "host and a repository"),
    ],
)
def test_bad_push_targets_are_usage_errors(value, message):
    with pytest.raises(UsageError, match=message):
        parse_push_target(value)


def test_credentials_in_the_registry_argument_are_refused_and_never_echoed():
    with pytest.raises(UsageError) as info:
        parse_push_target("robot:hunter2-very-secret@ghcr.io/alphastorm/ninfer-runtime")
    text = str(info.value)
    assert "hunter2-very-secret" not in text and "robot" not in text and "ghcr.io" in text
    assert ENV_USERNAME in text


def test_base_repository_names():
    assert parse_repository("nvidia/cuda", origin="f", field_name="base.repository").name == "docker.io/nvidia/cuda"
    assert parse_repository("docker.io/nvidia/cuda", origin="f", field_name="x").api_host == "registry-1.docker.io"
    local = parse_repository("127.0.0.1:5000/test/cuda", origin="f", field_name="x")
    assert (local.host, local.path, local.plain_http) == ("127.0.0.1:5000", "test/cuda", True)
    with pytest.raises(InputError):
        parse_repository("nvidia/CUDA", origin="f", field_name="base.repository")


def test_credentials_come_from_the_environment_or_the_docker_config(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    assert credentials_for("ghcr.io", use_environment=True) is None
    secret = "s3cr3t-from-docker-config"
    token = base64.b64encode(f"bot:{secret}".encode()).decode()
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "config.json").write_text(json.dumps({"auths": {"ghcr.io": {"auth": token}}}))
    found = credentials_for("ghcr.io", use_environment=True)
    assert found is not None and found.username == "bot" and "config.json" in found.source
    assert secret not in repr(found) and redact(f"x {secret} {token} y") == "x [REDACTED] [REDACTED] y"
    assert credentials_for("quay.io", use_environment=True) is None
    monkeypatch.setenv(ENV_USERNAME, "pusher")
    monkeypatch.setenv(ENV_PASSWORD, "env-password-123")
    from_env = credentials_for("ghcr.io", use_environment=True)
    assert from_env.username == "pusher" and "environment" in from_env.source
    assert credentials_for("ghcr.io", use_environment=False).username == "bot"  # base pulls: config only
    monkeypatch.delenv(ENV_PASSWORD)
    with pytest.raises(InputError, match=ENV_PASSWORD):
        credentials_for("ghcr.io", use_environment=True)


def test_a_registry_that_is_down_gets_bounded_retries_then_a_clear_error():
    port = free_port()  # nothing listens here
    sleeps: list[float] = []
    client = RegistryClient(parse_push_target(f"127.0.0.1:{port}/a/b"), credentials=None, retries=3, backoff=0.25, sleep=sleeps.append)
    with pytest.raises(RemoteError) as info:
        client.ping()
    assert sleeps == [0.25, 0.5, 1.0] and client.attempts == 4
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "4 times" in message and "ConnectionError" in message
    assert info.value.exit_code == ExitCode.REMOTE
