"""Stage `image`: the OCI layout from the binary archive and a base pinned by digest.

Most tests use a base image read from a local OCI layout and an archive in the
package contract's shape whose binaries are this host's /usr/bin/true (a real ELF
needing libc.so.6), so they run in seconds without compiling; the registry tests
pull the same base by digest from a real docker-registry.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from pathlib import Path

import imagekit
import pytest
from repokit import ROOT

from pipeline.cli import main
from pipeline.errors import ExitCode, InputError, IntegrityError
from pipeline.formats.image_definition import load_definition
from pipeline.formats.lanes import find_lane
from pipeline.infra import oci
from pipeline.register import Register
from pipeline.stages.image import build_image

LANE = "rtx5090-container"


@pytest.fixture(autouse=True)
def _private_cache(private_oci_cache):
    return private_oci_cache


@pytest.fixture(autouse=True)
def _registry_lane(registry_lane):
    """These tests pin test bases by digest: the 5090 lane on a registry base (runtime/lanes names a package base)."""
    return registry_lane


@pytest.fixture
def lane():
    return find_lane(LANE)


def packaged(tmp_path: Path, lane, name: str = "dist", **kwargs) -> Path:
    dist = tmp_path / name
    binaries = imagekit.stand_in_binaries(tmp_path / "stand-in-bin")
    imagekit.write_package(dist, lane, binaries=binaries, **kwargs)
    return dist


def local_definition(tmp_path: Path, base: imagekit.BaseImageInfo, **kwargs) -> Path:
    path = tmp_path / "definition.toml"
    path.write_text(imagekit.definition_text("docker.io/nvidia/cuda", base.index_digest, **kwargs))
    return path


def read_blob(layout: Path, digest: str) -> bytes:
    return oci.BlobStore(layout).path(digest).read_bytes()


def layout_files(layout: Path) -> dict[str, bytes]:
    return {p.relative_to(layout).as_posix(): p.read_bytes() for p in sorted(layout.rglob("*")) if p.is_file()}


# -- the definition -------------------------------------------------------------

def test_shipped_definition_refuses_to_build_until_its_base_is_pinned():
    with pytest.raises(InputError) as info:
        load_definition(ROOT / "containers" / "ninfer-runtime.toml")
    error = info.value
    assert error.field == "base.digest" and "not pinned by digest" in str(error)
    assert "skopeo inspect" in str(error) and "nvidia/cuda:13.1.2-runtime-ubuntu24.04" in str(error)


def test_shipped_definition_is_complete_once_a_digest_is_filled_in(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text(imagekit.definition_text("docker.io/nvidia/cuda", "sha256:" + "1" * 64, tag="13.1.2-runtime-ubuntu24.04"))
    definition = load_definition(path)
    assert definition.base.reference == "docker.io/nvidia/cuda@sha256:" + "1" * 64
    assert definition.base.repository.api_host == "registry-1.docker.io"
    assert definition.entrypoint == ("/opt/ninfer/bin/ninfer-serve",) and definition.cmd == ("--help",)
    assert [layer.name for layer in definition.layers] == ["docs", "runtime"]
    assert definition.platform == "linux/amd64" and definition.lane == LANE


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ('repository = "docker.io/nvidia/cuda"', 'repository = "docker.io/nvidia/cuda:13.1.2"', "base.repository", "tag or digest"),
        ('cmd = ["--help"]', 'cmd = ["--help"]\nshell = "bash"', "config.shell", "unknown key"),
        ('NINFER_HOME = "/opt/ninfer"', 'NINFER_HOME = "${NOT_IN_BASE}/x"', None, None),
        ('"org.opencontainers.image.vendor" = "alphastorm"', '"org.opencontainers.image.revision" = "main"', "labels.org.opencontainers.image.revision", "computes"),
        ('{ from = "bin/", to = "/opt/ninfer/bin/" }', '{ from = "bin/", to = "/opt/ninfer/bin" }', "layer[1].copy[0].to", "folder"),
        ('user = "1000:1000"', 'user = "ubuntu"', "config.user", "invalid value"),
        ('exposed_ports = ["8080/tcp"]', 'exposed_ports = ["80800/tcp"]', "config.exposed_ports[0]", "not a port"),
        # Paths from the definition pass the one gate of util/safepath: no control characters, no ':'.
        ('{ from = "bin/", to = "/opt/ninfer/bin/" }', '{ from = "bin\\u0000x/", to = "/opt/ninfer/bin/" }', "layer[1].copy[0].from", "clean path"),
        ('{ from = "bin/", to = "/opt/ninfer/bin/" }', '{ from = "C:bin/", to = "/opt/ninfer/bin/" }', "layer[1].copy[0].from", "clean path"),
        ('{ from = "bin/", to = "/opt/ninfer/bin/" }', '{ from = "bin/", to = "/opt/ninfer/b\\nin/" }', "layer[1].copy[0].to", "clean absolute path"),
        # The licences label is computed from the set's SBOM; the base's licence is an expression with its text.
        ('"org.opencontainers.image.vendor" = "alphastorm"', '"org.opencontainers.image.licenses" = "Apache-2.0"', "labels.org.opencontainers.image.licenses", "computes"),
        ('license = "LicenseRef-NVIDIA-CUDA-EULA"', 'license = "NVIDIA EULA"', "base.license", "not an SPDX licence expression"),
        ('license_file = "packaging/licenses/LicenseRef-NVIDIA-CUDA-EULA.txt"', '', "base.license_file", "needs its text"),
        ('license_file = "packaging/licenses/LicenseRef-NVIDIA-CUDA-EULA.txt"', 'license_file = "../../etc/passwd"', "base.license_file", "not a path inside the repository"),
    ],
)
def test_definition_errors_name_the_field(tmp_path, local_base, old, new, field, message):
    text = imagekit.definition_text("docker.io/nvidia/cuda", local_base.index_digest)
    assert old in text
    path = tmp_path / "d.toml"
    path.write_text(text.replace(old, new, 1))
    if field is None:
        return  # checked at build time (the base environment is needed): see the env test below
    with pytest.raises(InputError) as info:
        load_definition(path)
    assert info.value.field == field and message in str(info.value)


def test_base_given_by_tag_alone_is_refused_with_exit_1(tmp_path, lane, capsys):
    dist = packaged(tmp_path, lane)
    path = tmp_path / "d.toml"
    path.write_text(imagekit.definition_text("docker.io/nvidia/cuda", "", tag="13.1.2-runtime-ubuntu24.04"))
    code = main(["image", "--lane", LANE, "--dist", str(dist), "--definition", str(path)])
    err = capsys.readouterr().err
    assert code == ExitCode.INPUT
    assert "error[input]" in err and "base.digest" in err and "not pinned by digest" in err and "tag alone is refused" in err
    assert not (dist / LANE / "image").exists()


# -- building -------------------------------------------------------------------

def test_image_is_reproducible_and_carries_the_contract(tmp_path, lane, local_base):
    definition = local_definition(tmp_path, local_base)
    dist_a = packaged(tmp_path, lane, "dist-a")
    dist_b = packaged(tmp_path, lane, "dist-b")
    first = build_image(LANE, dist=dist_a, definition=definition, base_layout=local_base.layout)
    second = build_image(LANE, dist=dist_b, definition=definition, base_layout=local_base.layout)
    entry = next(a for a in first.outputs if a.kind == "oci-layout")
    digest = entry.attrs["manifest_digest"]
    assert digest == next(a for a in second.outputs if a.kind == "oci-layout").attrs["manifest_digest"]
    layout_a, layout_b = dist_a / LANE / "image" / "oci", dist_b / LANE / "image" / "oci"
    assert layout_files(layout_a) == layout_files(layout_b), "two builds gave different layout bytes"
    sbom_name = f"ninfer-runtime-{lane.tag()}.image.spdx.json"
    assert (dist_a / LANE / "image" / sbom_name).read_bytes() == (dist_b / LANE / "image" / sbom_name).read_bytes()
    # The image's SLSA provenance beside it: the manifest digest is the subject, the base is an input by digest.
    statement_name = f"ninfer-runtime-{lane.tag()}.image.provenance.intoto.json"
    statement_a = (dist_a / LANE / "attestations" / statement_name).read_bytes()
    assert statement_a == (dist_b / LANE / "attestations" / statement_name).read_bytes()
    from pipeline.formats import provenance

    statement = provenance.read_statement(statement_a, origin=statement_name)
    assert list(statement.subjects.values()) == [digest.removeprefix("sha256:")] and statement.build_type == provenance.BUILD_TYPE_IMAGE
    assert statement.dependency("base-image")["digest"]["sha256"] == entry.attrs["base_manifest_digest"].removeprefix("sha256:")
    assert statement.dependency(entry.attrs["binary_archive"])["digest"]["sha256"] == entry.attrs["binary_archive_sha256"]
    assert next(a for a in first.outputs if a.kind == "provenance").attrs["manifest_digest"] == digest

    # A re-run with unchanged inputs is a no-op; --force rebuilds the same bytes.
    assert build_image(LANE, dist=dist_a, definition=definition, base_layout=local_base.layout).skipped
    forced = build_image(LANE, dist=dist_a, definition=definition, base_layout=local_base.layout, force=True)
    assert not forced.skipped and next(a for a in forced.outputs if a.kind == "oci-layout").attrs["manifest_digest"] == digest

    index = json.loads((layout_a / "index.json").read_bytes())
    assert index["manifests"] == [{"mediaType": oci.MANIFEST, "digest": digest, "size": entry.attrs["manifest_size"], "annotations": {oci.REF_NAME: lane.tag()}}]
    manifest_bytes = read_blob(layout_a, digest)
    assert oci.digest_bytes(manifest_bytes) == digest and manifest_bytes == oci.canonical_json(json.loads(manifest_bytes))
    manifest = json.loads(manifest_bytes)
    base_manifest = json.loads(read_blob(local_base.layout, local_base.manifest_digest))
    # Base layers are taken as they are; ours follow.
    count = len(base_manifest["layers"])
    assert manifest["layers"][:count] == base_manifest["layers"] and len(manifest["layers"]) == count + 2
    assert [layer["mediaType"] for layer in manifest["layers"][count:]] == [oci.LAYER_GZIP, oci.LAYER_GZIP]
    config = json.loads(read_blob(layout_a, manifest["config"]["digest"]))
    base_config = json.loads(read_blob(local_base.layout, local_base.config_digest))
    assert config["rootfs"]["diff_ids"][:count] == base_config["rootfs"]["diff_ids"] and len(config["rootfs"]["diff_ids"]) == count + 2
    assert len(config["history"]) == count + 2 and config["created"] == "2026-11-01T12:00:00Z"
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    settings = config["config"]
    assert settings["Entrypoint"] == ["/opt/ninfer/bin/ninfer-serve"] and settings["Cmd"] == ["--help"]
    assert settings["User"] == "1000:1000" and settings["WorkingDir"] == "/opt/ninfer" and settings["ExposedPorts"] == {"8080/tcp": {}}
    env = dict(item.split("=", 1) for item in settings["Env"])
    assert env["PATH"].startswith("/opt/ninfer/bin:/usr/local/nvidia/bin:") and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NINFER_HOME"] == "/opt/ninfer"
    labels = settings["Labels"]
    identity = json.loads(read_blob_file_from_layer(layout_a, manifest["layers"][-1]["digest"], "opt/ninfer/build-identity.json"))
    assert labels["org.opencontainers.image.created"] == "2026-11-01T12:00:00Z"
    assert labels["org.opencontainers.image.revision"] == identity["patch_stack_sha"]
    assert labels["org.opencontainers.image.version"] == lane.tag()  # not the base's "24.04"
    assert labels["org.opencontainers.image.base.digest"] == local_base.index_digest
    assert labels["org.opencontainers.image.base.name"] == "docker.io/nvidia/cuda:13.1-runtime-test"
    assert labels["org.opencontainers.image.source"] == "https://github.com/alphastorm/ninfer"
    assert labels["maintainer"] == "OMP NInfer tests" and "org.opencontainers.image.ref.name" not in labels
    assert labels["io.github.alphastorm.ninfer.binary-archive.sha256"] == Register(dist_a).one("package-archive", lane=LANE, needed_by="t", produced_by="t").sha256
    assert manifest["annotations"] == {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")}

    # Our layers: the whole archive under /opt/ninfer, 0:0, the commit time, fixed modes.
    runtime = layer_members(layout_a, manifest["layers"][-1]["digest"])
    assert {m.name: m.mode for m in runtime if m.isfile()} == {
        "opt/ninfer/bin/ninfer": 0o755,
        "opt/ninfer/bin/ninfer-serve": 0o755,
        "opt/ninfer/build-identity.json": 0o644,
        "opt/ninfer/VERSION": 0o644,
        "opt/ninfer/SHA256SUMS.txt": 0o644,
    }
    docs = layer_members(layout_a, manifest["layers"][-2]["digest"])
    assert sorted(m.name for m in docs if m.isfile()) == [
        "opt/ninfer/LICENSE", "opt/ninfer/README.md", "opt/ninfer/RELEASE_NOTES.md",
        "opt/ninfer/licenses/miniargs.txt", "opt/ninfer/licenses/tinycrc.txt",
    ]
    assert {(m.uid, m.gid, m.mtime) for m in runtime + docs} == {(0, 0, imagekit.EPOCH)}

    # Register entries and the SBOM.
    register = Register(dist_a)
    assert register.one("oci-layout", lane=LANE, needed_by="t", produced_by="t").attrs["base_reference"] == f"docker.io/nvidia/cuda@{local_base.index_digest}"
    sbom_entry = register.one("image-sbom", lane=LANE, needed_by="t", produced_by="t")
    assert sbom_entry.attrs["manifest_digest"] == digest
    from spdx_tools.spdx.parser.parse_anything import parse_file
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    document = parse_file(str(register.verified_path(sbom_entry)))
    assert validate_full_spdx_document(document) == []
    assert {p.spdx_id for p in document.packages} == {"SPDXRef-Image", "SPDXRef-BaseImage", "SPDXRef-BinaryArchive"}
    assert len(document.files) == 10 and all(f.name.startswith("./opt/ninfer/") for f in document.files)
    image_package = next(p for p in document.packages if p.spdx_id == "SPDXRef-Image")
    assert image_package.checksums[0].value == oci.digest_hex(digest)
    from packageurl import PackageURL

    assert PackageURL.from_string(image_package.external_references[0].locator).version == digest
    base_package = next(p for p in document.packages if p.spdx_id == "SPDXRef-BaseImage")
    assert base_package.checksums[0].value == oci.digest_hex(local_base.index_digest)
    # Licences: our files carry what the set's SBOM states for them; the base its declared EULA; the label our layers' terms.
    raw = json.loads(register.verified_path(sbom_entry).read_bytes())
    licences = {f["fileName"]: f["licenseConcluded"] for f in raw["files"]}
    assert licences["./opt/ninfer/bin/ninfer-serve"] == licences["./opt/ninfer/bin/ninfer"] == "Apache-2.0"
    assert licences["./opt/ninfer/README.md"] == "NOASSERTION"  # nothing is known about it: the set's SBOM states none
    packages = {p["SPDXID"]: p for p in raw["packages"]}
    assert packages["SPDXRef-BinaryArchive"]["licenseConcluded"] == "Apache-2.0 AND MIT AND Zlib" == labels["org.opencontainers.image.licenses"]
    assert packages["SPDXRef-BaseImage"]["licenseDeclared"] == "LicenseRef-NVIDIA-CUDA-EULA"
    assert packages["SPDXRef-BaseImage"]["licenseConcluded"] == "NOASSERTION"  # its layers are not analysed
    [eula] = raw["hasExtractedLicensingInfos"]
    assert eula["licenseId"] == "LicenseRef-NVIDIA-CUDA-EULA" and eula["extractedText"] == (ROOT / "packaging/licenses/LicenseRef-NVIDIA-CUDA-EULA.txt").read_text()
    # The provenance's base-image URI names the tag the digest was resolved from, as docs/provenance.md states.
    assert statement.dependency("base-image")["uri"] == f"oci://docker.io/nvidia/cuda:13.1-runtime-test@{local_base.index_digest}"


def layer_members(layout: Path, digest: str) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(read_blob(layout, digest)))) as tar:
        return tar.getmembers()


def read_blob_file_from_layer(layout: Path, digest: str, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(read_blob(layout, digest)))) as tar:
        handle = tar.extractfile(name)
        assert handle is not None
        return handle.read()


def test_uncompressed_layers_when_the_definition_says_so(tmp_path, lane, local_base):
    definition = local_definition(tmp_path, local_base)
    definition.write_text(definition.read_text().replace('layer_compression = "gzip"', 'layer_compression = "none"'))
    dist = packaged(tmp_path, lane)
    result = build_image(LANE, dist=dist, definition=definition, base_layout=local_base.layout)
    rows = next(a for a in result.outputs if a.kind == "oci-layout").attrs["layers"]
    ours = [row for row in rows if row["origin"].startswith("layer:")]
    assert [row["media_type"] for row in ours] == [oci.LAYER_TAR, oci.LAYER_TAR]
    assert all(row["digest"] == row["diff_id"] for row in ours)


# -- refusals -------------------------------------------------------------------

def test_archive_whose_bytes_differ_from_the_register_is_refused(tmp_path, lane, local_base, capsys):
    dist = packaged(tmp_path, lane)
    archive = dist / LANE / "assets" / f"{imagekit.archive_stem(lane)}.tar.gz"
    data = bytearray(archive.read_bytes())
    data[-20] ^= 0xFF
    archive.write_bytes(bytes(data))
    code = main(["image", "--lane", LANE, "--dist", str(dist), "--definition", str(local_definition(tmp_path, local_base)), "--base-layout", str(local_base.layout)])
    err = capsys.readouterr().err
    assert code == ExitCode.INTEGRITY and "error[integrity]" in err and archive.name in err
    assert not (dist / LANE / "image").exists()


def test_every_archive_file_must_be_placed_or_ignored(tmp_path, lane, local_base):
    dist = packaged(tmp_path, lane, extra={"tools/debug-helper.sh": b"#!/bin/sh\n"})
    with pytest.raises(InputError) as info:
        build_image(LANE, dist=dist, definition=local_definition(tmp_path, local_base), base_layout=local_base.layout)
    assert "tools/debug-helper.sh" in str(info.value) and "archive_ignore" in str(info.value)
    ignored = local_definition(tmp_path, local_base, archive_ignore='["tools/debug-helper.sh"]')
    assert not build_image(LANE, dist=dist, definition=ignored, base_layout=local_base.layout).skipped


def test_archive_whose_checksum_list_lies_is_refused(tmp_path, lane, local_base):
    dist = packaged(tmp_path, lane)
    # Re-pack with one payload file changed but SHA256SUMS.txt kept, and register those bytes.
    _repack(dist, "/README.md", lambda data: b"# changed after the checksums were made\n")
    with pytest.raises(IntegrityError, match="README.md differs from SHA256SUMS.txt"):
        build_image(LANE, dist=dist, definition=local_definition(tmp_path, local_base), base_layout=local_base.layout)


def _repack(dist: Path, suffix: str, change) -> None:
    """Re-pack the registered archive with the bytes of its member ending in `suffix` changed by `change`, and register those bytes."""
    archive = dist / LANE / "assets" / f"{imagekit.archive_stem(find_lane(LANE))}.tar.gz"
    with tarfile.open(archive, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member, data in members:
            if member.name.endswith(suffix):
                data = change(data)
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    archive.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    register = Register(dist)
    entry = register.one("package-archive", lane=LANE, needed_by="t", produced_by="t")
    kept = [register.one(kind, lane=LANE, needed_by="t", produced_by="t") for kind in ("source-archive", "spdx-sbom")]
    register.record_stage(f"package:{LANE}", "re-made", [
        register.make("package-archive", archive, stage="package", lane=LANE, name=entry.name, **entry.attrs),
        *(register.make(e.kind, register.path_of(e), stage="package", lane=LANE, name=e.name, **e.attrs) for e in kept),
    ])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda data: b"".join(reversed(data.splitlines(keepends=True))), "is out of order"),  # sha256sum's lines, but unsorted
        (lambda data: data.replace(b"\n", b"\r\n"), "contains a carriage return (CR) at line 1"),
        (lambda data: data.replace(b"  ", b" *", 1), "line 1 is not '<64 lowercase hex><two spaces><name>'"),
    ],
)
def test_the_archive_checksum_list_is_read_by_the_one_strict_parser(tmp_path, lane, local_base, change, message):
    """SHA256SUMS.txt is read by pipeline.formats.assets.parse_sums, as check-assets reads it: no second, laxer grammar."""
    dist = packaged(tmp_path, lane)
    _repack(dist, "/SHA256SUMS.txt", change)
    with pytest.raises(IntegrityError) as caught:
        build_image(LANE, dist=dist, definition=local_definition(tmp_path, local_base), base_layout=local_base.layout)
    assert message in str(caught.value) and caught.value.file.endswith(f"!{imagekit.archive_stem(lane)}/SHA256SUMS.txt")
    assert not (dist / LANE / "image").exists()


def test_image_without_lane_builds_the_container_lane_the_lane_files_name(tmp_path, lane, local_base, capsys):
    from pipeline.errors import UsageError
    from pipeline.stages.image import container_lane

    assert container_lane().id == LANE  # read from runtime/lanes/, not typed into the command
    dist = packaged(tmp_path, lane)
    code = main(["image", "--dist", str(dist), "--definition", str(local_definition(tmp_path, local_base)), "--base-layout", str(local_base.layout), "--quiet"])
    assert code == 0
    digest = capsys.readouterr().out.strip()
    assert Register(dist).one("oci-layout", lane=LANE, needed_by="t", produced_by="t").attrs["manifest_digest"] == digest
    natives = tmp_path / "lanes"
    natives.mkdir()
    for name in ("rtx3090-windows-native.toml", "rtx4090-windows-native.toml"):
        shutil.copyfile(ROOT / "runtime" / "lanes" / name, natives / name)
    with pytest.raises(UsageError, match="the lane files declare 0 container lanes"):
        container_lane(natives)


def test_a_library_the_base_does_not_provide_is_refused(tmp_path, lane):
    bare = imagekit.build_base_layout(tmp_path / "bare-base", cudart=None, with_system_libraries=False)
    dist = packaged(tmp_path, lane)
    with pytest.raises(InputError) as info:
        build_image(LANE, dist=dist, definition=local_definition(tmp_path, bare), base_layout=bare.layout)
    message = str(info.value)
    # the lane derives its base libraries from its package base: named, so the reader sees what the lane expected
    assert "needs libc.so.6" in message and "/usr/lib/x86_64-linux-gnu" in message and "the lane expects the base to bring libcudart.so.13" in message


def test_the_entrypoint_must_exist_in_the_image(tmp_path, lane, local_base):
    definition = local_definition(tmp_path, local_base)
    definition.write_text(definition.read_text().replace('entrypoint = ["/opt/ninfer/bin/ninfer-serve"]', 'entrypoint = ["/opt/ninfer/bin/ninfer-server"]'))
    with pytest.raises(InputError) as info:
        build_image(LANE, dist=packaged(tmp_path, lane), definition=definition, base_layout=local_base.layout)
    assert info.value.field == "config.entrypoint[0]"


def test_env_may_only_refer_to_variables_that_exist(tmp_path, lane, local_base):
    definition = local_definition(tmp_path, local_base)
    definition.write_text(definition.read_text().replace('NINFER_HOME = "/opt/ninfer"', 'NINFER_HOME = "${NOT_IN_BASE}/x"'))
    with pytest.raises(InputError) as info:
        build_image(LANE, dist=packaged(tmp_path, lane), definition=definition, base_layout=local_base.layout)
    assert info.value.field == "config.env.NINFER_HOME" and "NVIDIA_VISIBLE_DEVICES" in str(info.value)


def test_a_local_base_layout_without_the_pinned_digest_is_refused(tmp_path, lane, local_base):
    other = "sha256:" + "5" * 64
    path = tmp_path / "d.toml"
    path.write_text(imagekit.definition_text("docker.io/nvidia/cuda", other))
    with pytest.raises(InputError) as info:
        build_image(LANE, dist=packaged(tmp_path, lane), definition=path, base_layout=local_base.layout)
    assert other in str(info.value) and "skopeo copy --all --preserve-digests" in str(info.value)


def test_a_corrupted_base_blob_is_refused(tmp_path, lane, local_base):
    copy = tmp_path / "base-copy"
    shutil.copytree(local_base.layout, copy)
    blob = oci.BlobStore(copy).path(local_base.layer_digests[0])
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[100] ^= 0x01
    blob.write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as info:
        build_image(LANE, dist=packaged(tmp_path, lane), definition=local_definition(tmp_path, local_base), base_layout=copy)
    assert local_base.layer_digests[0] in str(info.value)


# -- the base from a registry -----------------------------------------------------

@pytest.mark.registry
def test_base_pulled_by_digest_from_a_registry_gives_the_same_image(tmp_path, lane, local_base, pushed_base):
    from_layout = build_image(LANE, dist=packaged(tmp_path, lane, "dist-layout"), definition=local_definition(tmp_path, local_base), base_layout=local_base.layout)
    remote_definition = tmp_path / "remote.toml"
    remote_definition.write_text(imagekit.definition_text(pushed_base, local_base.index_digest))
    dist = packaged(tmp_path, lane, "dist-registry")
    from_registry = build_image(LANE, dist=dist, definition=remote_definition)
    layout_attrs = next(a for a in from_layout.outputs if a.kind == "oci-layout").attrs
    registry_attrs = next(a for a in from_registry.outputs if a.kind == "oci-layout").attrs
    # The labels name another base repository, so the manifests differ; the layers may not.
    assert [row["digest"] for row in layout_attrs["layers"]] == [row["digest"] for row in registry_attrs["layers"]]
    assert registry_attrs["base_manifest_digest"] == local_base.manifest_digest
    assert registry_attrs["base_reference"] == f"{pushed_base}@{local_base.index_digest}"
    # Pulled blobs went through the verified cache; a second, forced build reads them from there.
    cache = oci.BlobStore(tmp_path / "oci-cache")
    assert all(cache.has(digest) for digest in local_base.layer_digests)
    again = build_image(LANE, dist=dist, definition=remote_definition, force=True)
    assert next(a for a in again.outputs if a.kind == "oci-layout").attrs["manifest_digest"] == registry_attrs["manifest_digest"]


@pytest.mark.registry
def test_a_digest_the_registry_does_not_serve_is_a_clear_remote_error(tmp_path, lane, pushed_base, capsys):
    missing = oci.digest_bytes(b"no such manifest")
    definition = tmp_path / "d.toml"
    definition.write_text(imagekit.definition_text(pushed_base, missing))
    dist = packaged(tmp_path, lane)
    code = main(["image", "--lane", LANE, "--dist", str(dist), "--definition", str(definition)])
    err = capsys.readouterr().err
    assert code == ExitCode.REMOTE and "error[remote]" in err and "does not serve manifest" in err and missing in err
    assert not (dist / LANE / "image").exists()


@pytest.mark.registry
@pytest.mark.parametrize("what", ["/manifests/", "/blobs/"])
def test_a_registry_serving_other_bytes_for_a_digest_is_caught(tmp_path, lane, pushed_base, local_base, fault_proxy, what):
    from registry import ProxyRule

    proxy = fault_proxy(ProxyRule("GET", what, times=100, action="corrupt-body"))
    definition = tmp_path / "d.toml"
    definition.write_text(imagekit.definition_text(pushed_base.replace(pushed_base.split("/")[0], proxy.host), local_base.index_digest))
    dist = packaged(tmp_path, lane)
    with pytest.raises(IntegrityError) as info:
        build_image(LANE, dist=dist, definition=definition)
    assert "served other bytes" in str(info.value) and info.value.exit_code == ExitCode.INTEGRITY
    assert not any((tmp_path / "oci-cache").rglob("*.part")) and not (dist / LANE / "image").exists()
