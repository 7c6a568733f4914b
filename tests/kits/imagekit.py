"""Test material for the image and push stages: a small CUDA-like base image and binary archives.

The base image stands in for `nvidia/cuda:13.1.x-runtime-ubuntu24.04`: a merged-/usr
layout (`/lib -> usr/lib`, `/lib64 -> usr/lib64`) carrying this host's loader, libc,
libm, libstdc++ and libgcc_s, and, when given, the pinned toolchain's
`libcudart.so.13` under `/usr/local/cuda-13.1/lib64` with `/usr/local/cuda` a
symlink, like NVIDIA's images.  It is an OCI layout whose top entry is an image
index (as multi-platform images are), built with the pipeline's own deterministic
primitives and pushed to the test registry with skopeo (an independent client).

The binary archive follows the package stage's contract, read from pipeline/formats/assets.py
rather than typed here: the set's names (`asset_set`: the package and source archive names and
the top folder `ninfer-qwen38-rtx5090-v<version>-linux-x86_64-cuda13.1/`), the payload every
package holds (`payload_required`: `PAYLOAD_FILES`, `bin/<binaries>`, `SHA256SUMS.txt`, plus
`licenses/`), the folder `dist/<lane>/assets/`, and the register names, kinds and attributes the
package stage records (`AssetSet.entry_name`, `entry_attrs`, `ROLE_KINDS`).  Only the package and
source archives are written (no SBOMs, checksum files or receipt: the image stage then binds the
archive on its register hash and says so).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from repokit import ROOT

from pipeline.formats import assets
from pipeline.formats.lanes import Lane
from pipeline.infra import oci
from pipeline.register import Register
from pipeline.util.fs import atomic_write_bytes

EPOCH = 1793534400  # 2026-11-01T12:00:00Z, the sample repository's commit time (repokit.GIT_ENV)
MULTIARCH = "x86_64-linux-gnu"
HOST_LIBRARIES = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libdl.so.2", "libpthread.so.0", "librt.so.1")
LOADER = "ld-linux-x86-64.so.2"


@dataclass(frozen=True)
class BaseImageInfo:
    layout: Path
    index_digest: str
    manifest_digest: str
    config_digest: str
    layer_digests: tuple[str, ...]
    ref: str


def host_library(name: str) -> Path:
    for folder in (f"/lib/{MULTIARCH}", f"/usr/lib/{MULTIARCH}", "/lib64", "/usr/lib64"):
        candidate = Path(folder) / name
        if candidate.exists():
            return candidate.resolve()
    raise FileNotFoundError(name)


def _text(work: Path, name: str, text: str) -> Path:
    path = work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def build_base_layout(
    root: Path,
    *,
    cudart: Path | None,
    ref: str = "13.1-runtime-test",
    with_system_libraries: bool = True,
    gzip_level: int = 1,
    ld_cache: bool = False,
) -> BaseImageInfo:
    """Write the test base image as an OCI layout (index -> linux/amd64 manifest) and return its digests.

    `ld_cache` makes it closer to NVIDIA's image: the loader also at its Debian/Ubuntu place
    (`/usr/lib/x86_64-linux-gnu/`) and an `/etc/ld.so.cache` made by this host's `ldconfig -r`
    from the image's own ld.so.conf.d, so a process started in a container finds libcudart
    under /usr/local/cuda/lib64 the way it does in the real base.
    """
    work = root.parent / (root.name + ".src")
    work.mkdir(parents=True, exist_ok=True)
    system = [
        oci.LayerFile("/lib", None, symlink="usr/lib"),
        oci.LayerFile("/lib64", None, symlink="usr/lib64"),
        oci.LayerFile("/bin", None, symlink="usr/bin"),
        oci.LayerFile(f"/etc/ld.so.conf.d/{MULTIARCH}.conf", _text(work, "multiarch.conf", f"# multiarch support\n/usr/local/lib/{MULTIARCH}\n/lib/{MULTIARCH}\n/usr/lib/{MULTIARCH}\n")),
        oci.LayerFile("/etc/os-release", _text(work, "os-release", 'NAME="OMP NInfer test base"\nID=test\n')),
    ]
    if with_system_libraries:
        system += [oci.LayerFile(f"/usr/lib/{MULTIARCH}/{name}", host_library(name), executable=True) for name in HOST_LIBRARIES]
        system.append(oci.LayerFile(f"/usr/lib64/{LOADER}", host_library(LOADER), executable=True))
    layers_files = [system]
    cuda_layer = []
    if cudart is not None:
        cuda_layer = [
            oci.LayerFile("/usr/local/cuda-13.1/lib64/libcudart.so.13", cudart, executable=True),
            oci.LayerFile("/usr/local/cuda", None, symlink="cuda-13.1"),
            oci.LayerFile("/etc/ld.so.conf.d/000_cuda.conf", _text(work, "cuda.conf", "/usr/local/cuda/lib64\n")),
        ]
    if ld_cache:
        system.append(oci.LayerFile(f"/usr/lib/{MULTIARCH}/{LOADER}", host_library(LOADER), executable=True))
        system.append(oci.LayerFile("/etc/ld.so.conf", _text(work, "ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")))
        cache = _ld_cache(work, [*system, *cuda_layer])
        if cache is not None:
            system.append(oci.LayerFile("/etc/ld.so.cache", cache))
    if cuda_layer:
        layers_files.append(cuda_layer)
    store = oci.BlobStore(root)
    layers = []
    for number, files in enumerate(layers_files):
        scratch = work / f"layer{number}"
        built = oci.build_layer(files, scratch, epoch=EPOCH, compression="gzip", gzip_level=gzip_level)
        store.adopt(scratch, built.descriptor)
        layers.append(built)
    created = oci.rfc3339(EPOCH)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "Env": [
                "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
                "CUDA_VERSION=13.1.0",
            ],
            "Cmd": ["/bin/sh"],
            "Labels": {"maintainer": "OMP NInfer tests", "org.opencontainers.image.version": "24.04", "org.opencontainers.image.ref.name": "ubuntu"},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": f"test base layer {i}"} for i in range(len(layers))],
    }
    config_descriptor = store.put_bytes(oci.canonical_json(config), oci.CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST,
        "config": config_descriptor.to_json(),
        "layers": [layer.descriptor.to_json() for layer in layers],
    }
    manifest_descriptor = store.put_bytes(oci.canonical_json(manifest), oci.MANIFEST)
    platform_entry = oci.Descriptor(oci.MANIFEST, manifest_descriptor.digest, manifest_descriptor.size, platform={"architecture": "amd64", "os": "linux"})
    index = {"schemaVersion": 2, "mediaType": oci.INDEX, "manifests": [platform_entry.to_json()]}
    index_descriptor = store.put_bytes(oci.canonical_json(index), oci.INDEX)
    oci.write_layout(root, oci.Descriptor(oci.INDEX, index_descriptor.digest, index_descriptor.size, {oci.REF_NAME: ref}))
    return BaseImageInfo(root, index_descriptor.digest, manifest_descriptor.digest, config_descriptor.digest, tuple(layer.descriptor.digest for layer in layers), ref)


def _ld_cache(work: Path, files: list) -> Path | None:
    """/etc/ld.so.cache for these files: staged in a folder and indexed by `ldconfig -r` (chroot: root,
    else a user namespace).  None, with a warning, where neither is possible: a container of this base
    then does not find libcudart, and the route's engine step says so."""
    stage = work / "ld-stage"
    shutil.rmtree(stage, ignore_errors=True)
    for item in files:
        target = stage / item.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if item.symlink is not None:
            target.symlink_to(item.symlink)
        else:
            shutil.copyfile(item.source, target)
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    command = [ldconfig, "-X", "-r", str(stage)]
    if os.geteuid() != 0:
        command = ["unshare", "--user", "--map-root-user", *command]
    result = subprocess.run(command, capture_output=True, text=True)
    cache = stage / "etc" / "ld.so.cache"
    if result.returncode != 0 or not cache.is_file():
        import warnings

        warnings.warn(f"the test base has no ld.so.cache: {' '.join(command)} exited {result.returncode}: {result.stderr.strip()}", stacklevel=2)
        return None
    out = work / "ld.so.cache"
    shutil.copyfile(cache, out)
    return out


def push_base(base: BaseImageInfo, host: str, repository: str) -> None:
    """Publish the base with skopeo (not with the code under test), digests preserved."""
    subprocess.run(
        [
            "skopeo", "copy", "--quiet", "--all", "--preserve-digests", "--dest-tls-verify=false",
            f"oci:{base.layout}:{base.ref}", f"docker://{host}/{repository}:{base.ref}",
        ],
        check=True,
        capture_output=True,
    )


# -- binary archives -----------------------------------------------------------

def archive_stem(lane: Lane, beta: int | None = None) -> str:
    """The package's top folder and file stem: `<stem>-<platform>` of the lane's asset set."""
    return assets.asset_set(lane, beta).package_root


def fake_identity(lane: Lane, binaries: dict[str, Path], *, commit: str = "a" * 40, epoch: int = EPOCH, beta: int | None = None) -> dict:
    return {
        "artifact_type": "ninfer_release_build_identity",
        "schema_version": 2,
        "lane": lane.id,
        "platform": lane.asset_platform,
        "component_tag": lane.tag(beta),
        "build_profile": lane.build_profile(beta),
        "patch_stack_sha": commit,
        "upstream_base_sha": commit,
        "binaries": {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in sorted(binaries.items())},
        # A real identity names the exported tree too (the image's provenance records both).
        "source": {"commit": commit, "tree": "b" * 40, "subdir": "runtime/sample", "commit_time": epoch, "kind": "embedded-sample", "location": None},
        "source_date_epoch": epoch,
        "source_dirty": "false",
    }


def write_package(
    dist: Path,
    lane: Lane,
    *,
    binaries: dict[str, Path],
    identity: dict | None = None,
    beta: int | None = None,
    extra: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
    record: bool = True,
) -> Path:
    """A binary archive in the package contract's shape, recorded in the register like the package stage does."""
    identity = identity or fake_identity(lane, binaries, beta=beta)
    epoch = int(identity["source_date_epoch"])
    expected = assets.asset_set(lane, beta)
    stem = expected.package_root
    texts = {
        "LICENSE": b"Apache License 2.0 (test stand-in)\n",
        "VERSION": f"{lane.version}-beta.{beta or lane.beta}\n".encode(),
        "README.md": b"# NInfer runtime\n",
        "RELEASE_NOTES.md": b"# Release notes\n",
        "build-identity.json": (json.dumps(identity, sort_keys=True, separators=(",", ":")) + "\n").encode(),
    }
    assert sorted(texts) == sorted(assets.PAYLOAD_FILES), "the package contract's payload files changed: follow it here"
    payload: dict[str, tuple[bytes, int]] = {name: (texts[name], 0o644) for name in assets.PAYLOAD_FILES}
    payload[f"{assets.LICENSES_DIR}/miniargs.txt"] = (b"MIT License (miniargs, vendored)\n", 0o644)
    payload[f"{assets.LICENSES_DIR}/tinycrc.txt"] = (b"Zlib License (tinycrc, vendored)\n", 0o644)
    for name, path in binaries.items():
        payload[f"{assets.BIN_DIR}/{name}"] = (path.read_bytes(), 0o755)
    missing = set(assets.payload_required(lane, list(binaries))) - set(payload) - {assets.PAYLOAD_SUMS}
    assert not missing, f"the fake package lacks what every package of {lane.id} holds: {sorted(missing)}"
    for name, data in (extra or {}).items():
        payload[name] = (data, 0o644)
    for name in drop:
        payload.pop(name, None)
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, (data, _mode) in sorted(payload.items()))
    payload[assets.PAYLOAD_SUMS] = (sums.encode(), 0o644)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        names = sorted({stem, *(f"{stem}/{n}" for n in payload), *(f"{stem}/{p}" for n in payload for p in _parents(n))})
        for name in names:
            relative = name[len(stem) + 1:]
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            if relative in payload:
                data, mode = payload[relative]
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    compressed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=epoch, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    folder = dist / lane.id / assets.ASSETS_DIR
    archive = folder / expected.name_of("package")
    atomic_write_bytes(archive, compressed.getvalue())
    if record:
        register = Register(dist)
        source = folder / expected.name_of("source")
        atomic_write_bytes(source, gzip.compress(b"source", mtime=0))
        spdx = write_set_spdx(folder / expected.name_of("spdx"), lane, archive, payload, identity, beta)
        outputs = [
            register.make(assets.ROLE_KINDS[expected.role_of(path.name)], path, stage="package", lane=lane.id,
                          name=expected.entry_name(path.name), **expected.entry_attrs(path.name))
            for path in (archive, source, spdx)
        ]
        register.record_stage(f"package:{lane.id}", "test-made", outputs)
    return archive


# The vendored components the fake payload's licence texts stand for, with the licences those texts name.
VENDORED = {"miniargs": "MIT", "tinycrc": "Zlib"}


def write_set_spdx(path: Path, lane: Lane, archive: Path, payload: dict[str, tuple[bytes, int]], identity: dict, beta: int | None) -> Path:
    """The set's SPDX document of the fake payload, made by the pipeline's own writer and validated with spdx-tools
    once (the image stage reads its files' licences from it): the binaries under the runtime's Apache-2.0, the
    vendored components' own terms.  The package stage's extra cross-checks against the payload are left out: cheap."""
    from pipeline.formats import sbom
    from pipeline.util.fs import atomic_write_bytes as write

    expected = assets.asset_set(lane, beta)
    files = [sbom.PayloadFile(name, hashlib.sha256(data).hexdigest(), hashlib.sha1(data).hexdigest(), len(data)) for name, (data, _mode) in sorted(payload.items())]
    inp = sbom.SbomInput(
        package_root=expected.package_root, package_filename=archive.name, package_sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        package_bytes=archive.stat().st_size, lane_id=lane.id, lane_title=lane.title, component_repository=lane.component_repository,
        component_tag=lane.tag(beta), release_version=f"{lane.version}-beta.{beta or lane.beta}", runtime_license="Apache-2.0",
        epoch=int(identity["source_date_epoch"]), identity_sha256=hashlib.sha256(payload["build-identity.json"][0]).hexdigest(),
        source={"commit": identity["patch_stack_sha"], "tree": "b" * 40, "kind": "embedded-sample"}, files=files,
        binaries={name.removeprefix(f"{assets.BIN_DIR}/"): name for name in payload if name.startswith(f"{assets.BIN_DIR}/")},
        vendored=[{"name": name, "version": "1.0.0", "license": licence, "purl": f"pkg:generic/{name}@1.0.0", "supplier": "OMP NInfer sample authors",
                   "path": f"third_party/{name}", "license_file": f"third_party/{name}/LICENSE", "files": []} for name, licence in VENDORED.items()],
        cuda_toolkit="13.1.115",
    )
    write(path, sbom.spdx_bytes(sbom.build_spdx(inp)))
    return path


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def stand_in_binaries(folder: Path) -> dict[str, Path]:
    """ninfer and ninfer-serve stand-ins: this host's /usr/bin/true (a real ELF needing libc.so.6)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = {}
    for name in ("ninfer", "ninfer-serve"):
        target = folder / name
        shutil.copyfile(shutil.which("true") or "/usr/bin/true", target)
        os.chmod(target, 0o755)
        result[name] = target
    return result


def definition_text(base_repository: str, digest: str, *, tag: str | None = "13.1-runtime-test", extra_layer: str = "", archive_ignore: str = "[]") -> str:
    """The shipped definition with the test base swapped in (everything else as in production)."""
    shipped = (ROOT / "containers" / "ninfer-runtime.toml").read_text()
    lines = []
    section = ""
    for line in shipped.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        if section == "[base]" and stripped.startswith(("repository =", "digest =", "tag =")):
            key = stripped.split("=", 1)[0].strip()
            if key == "repository":
                lines.append(f'repository = "{base_repository}"')
            elif key == "digest":
                lines.append(f'digest = "{digest}"')
            elif tag is not None:
                lines.append(f'tag = "{tag}"')
            continue
        if stripped.startswith("archive_ignore ="):
            lines.append(f"archive_ignore = {archive_ignore}")
            continue
        lines.append(line)
    return "\n".join(lines) + "\n" + extra_layer


def registry_lane_text(text: str) -> str:
    """The 5090 lane file's text on a registry base: its package.base_image (the trixie package base, which `image` then
    always uses) replaced by the libraries a CUDA runtime image brings, typed, and that base's supplier.  The image
    tests build on test bases pinned by digest (their own definitions), which only such a lane accepts."""
    import re as _re

    text, named = _re.subn(r'(?m)^base_image = "containers/[^"]+"$', 'base_image_libraries = ["libcudart.so.13"]', text)
    text, provided = _re.subn(r'(?ms)^\[package\.base_image_provider\]\n.*?(?=^\[)',
                              '[package.base_image_provider]\nsupplier = "NVIDIA Corporation"\nversion = "CUDA 13.1 runtime image"\n\n', text)
    assert named == provided == 1, "the shipped 5090 lane names its package base and its supplier"
    return text


def registry_base_lanes(root: Path) -> Path:
    """runtime/lanes (and cuts) with the 5090 lane on a registry base (registry_lane_text)."""
    lanes = root / "runtime" / "lanes"
    shutil.copytree(ROOT / "runtime" / "lanes", lanes)
    shutil.copytree(ROOT / "runtime" / "cuts", root / "runtime" / "cuts")
    path = lanes / "rtx5090-container.toml"
    path.write_text(registry_lane_text(path.read_text()))
    return lanes


@pytest.fixture
def registry_lane(tmp_path, monkeypatch) -> Path:
    """The lane files the stages read by default are registry_base_lanes' (a test's own tmp folder)."""
    from pipeline.formats import lanes

    folder = registry_base_lanes(tmp_path / "registry-lanes")
    monkeypatch.setattr(lanes, "DEFAULT_LANES_DIR", folder)
    return folder


# -- fixtures (this kit is a plugin of the suite: tests/conftest.py pytest_plugins) ----

@pytest.fixture(scope="session")
def local_base(tmp_path_factory) -> BaseImageInfo:
    """The test base (no libcudart: the stand-in binaries need libc only) as a local OCI layout."""
    return build_base_layout(tmp_path_factory.mktemp("base") / "layout", cudart=None)


@pytest.fixture(scope="session")
def pushed_base(registry_server, local_base) -> str:
    """The same base pushed to the session registry with skopeo; returns HOST:PORT/REPO."""
    repository = "test/cuda-runtime"
    push_base(local_base, registry_server.host, repository)
    return f"{registry_server.host}/{repository}"


@pytest.fixture
def private_oci_cache(tmp_path, monkeypatch) -> Path:
    """Base blobs pulled by a test go to its own cache, not the user's."""
    monkeypatch.setenv("OMP_NINFER_OCI_CACHE", str(tmp_path / "oci-cache"))
    return tmp_path / "oci-cache"
