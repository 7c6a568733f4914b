"""Stage `image`: the RTX 5090 runtime as a reproducible OCI image layout.

Inputs: the lane's binary archive from the register (its bytes re-hashed
against the register first), and an image definition in `containers/`
(data: base image by repository and digest, the layers we add, entrypoint,
cmd, env, port, user, labels).  No Docker engine is involved:

1. **Base.** Either distribution packages (`[base] kind = "packages"`): the lock written by
   `image lock` (`containers/<definition>.lock.json`, refused when stale) is made into one layer
   by `lanework/package_layer.py`, from the lock alone; or an image named by digest only (a tag alone is refused).  Its
   manifest (or index, then the manifest for the definition's platform),
   config and layers are pulled by digest from its registry into a
   content-addressed cache, or read from a local OCI layout (`--base-layout`),
   and every digest and every layer's diff_id is checked here.  Base layers
   are used as they are: same bytes, same digests.
2. **Archive.** The archive must hold one top-level folder named after it,
   only regular files and folders, a `SHA256SUMS.txt` that lists every other
   file with its correct hash, and a `build-identity.json` whose binary hashes
   match `bin/`.  Every archive file must be placed by exactly one copy rule
   of the definition (or be listed in `archive_ignore`): a new file in the
   package contract is then a conscious decision, not an accident.
3. **Our layers** are deterministic tars (sorted, 0:0, mtime = source commit
   time, fixed modes, gzip header without name or time; or uncompressed).
4. **Checks on the assembled root filesystem.** The entrypoint resolves to an
   executable file, and every shared library our ELF binaries need (DT_NEEDED)
   is found on the loader's path in the image (RUNPATH, LD_LIBRARY_PATH,
   ld.so.conf.d, default folders; symlinks and whiteouts followed), except the
   driver libraries the NVIDIA container toolkit injects at run time.
5. **Config, manifest, index** as canonical JSON; labels and annotations
   include `org.opencontainers.image.created` = the source commit time, so two
   runs give the same manifest digest.
6. **SPDX 2.3 SBOM** of the image (written by `formats/sbom.py`, the one owner of SBOMs; on a
   package base, each distribution package and each pinned wheel stands where the base image would):
   the image (DESCRIBES), its base by digest with the terms the definition states for it
   (`base.license`, e.g. the NVIDIA CUDA EULA with its text; its own layers are not
   analysed: concluded NOASSERTION), the binary archive by hash with the concluded licence
   of the set's own SBOM, every file of our layers with SHA-1, SHA-256 and the licence the
   set's SBOM states for it, linked by CONTAINS (the relationships NTIA checkers follow;
   the exact DESCENDANT_OF / GENERATED_FROM are kept beside them).  The
   `org.opencontainers.image.licenses` label is computed the same way: the terms of what
   our layers carry, never the base's.

The definition (`containers/*.toml`) is read by `formats/image_definition.py`.

Outputs, under `<dist>/<lane>/image/`: `oci/` (the layout) and the SBOM;
register entries `oci-layout` and `image-sbom`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.errors import InputError, IntegrityError, RemoteError, UsageError
from pipeline.formats import apt_lock, build_environment, provenance, sbom
from pipeline.formats.apt_repository import dep5_licence
from pipeline.formats.assets import check_registered_set, parse_sums
from pipeline.formats.components import repository_owner
from pipeline.formats.identity import IDENTITY_TYPE
from pipeline.formats.image_definition import (
    OCI_PREFIX,
    BaseSpec,
    ImageDefinition,
    archive_prefix,
    definition_for_lane,
    read_package_lock,
    repository_name,
)
from pipeline.formats.lanes import REPO_ROOT, Lane, find_lane, load_lanes
from pipeline.formats.toolchain_lock import Wheel, toolchain_spec
from pipeline.infra import oci
from pipeline.infra.registry import RegistryClient, credentials_for
from pipeline.infra.rootfs import RootFS
from pipeline.infra.safetar import SafeTar
from pipeline.lanework import apt, package_layer
from pipeline.lanework.binaries import elf_imports, is_elf
from pipeline.lanework.toolchain import fetch_wheel
from pipeline.register import Artifact
from pipeline.stage import Context, Stage, StageResult, execute
from pipeline.util import ui
from pipeline.util.fs import atomic_output_dir, atomic_write_bytes
from pipeline.util.hashing import sha256_bytes, sha256_file
from pipeline.util.jsonio import loads_document, loads_object

OCI_CACHE_ENV = "OMP_NINFER_OCI_CACHE"
IDENTITY_FILE = "build-identity.json"
SUMS_FILE = "SHA256SUMS.txt"

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


# -- the base image ------------------------------------------------------------

def oci_cache() -> oci.BlobStore:
    override = os.environ.get(OCI_CACHE_ENV)
    if override:
        return oci.BlobStore(Path(override))
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return oci.BlobStore(Path(base) / "omp-ninfer" / "oci")


@dataclass
class BaseImage:
    spec: BaseSpec | None  # None: a base of distribution packages (`packages` below)
    source: str  # "registry", "layout:<path>" or "packages"
    manifest_digest: str  # the platform manifest (equals spec.digest unless the pin is an index); a package base: its lock's
    manifest: oci.Manifest | None
    config: dict[str, Any]
    config_descriptor: oci.Descriptor | None
    layers: tuple[oci.Descriptor, ...]  # OCI media types, original bytes
    blob_paths: dict[str, Path]  # digest -> verified file
    index_digest: str | None = None
    packages: package_layer.LayerResult | None = None
    lock: apt_lock.AptLock | None = None

    @property
    def display_name(self) -> str:
        return self.spec.display_name if self.spec is not None else f"the packages of {self.lock_name}"

    @property
    def lock_name(self) -> str:
        return repository_name(self.lock.file) if self.lock is not None else ""


# A package base has no image config of its own: the environment a Debian system starts processes with.
PACKAGE_BASE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]


def pinned_wheel(lane: Lane, distribution: str, *, definition: ImageDefinition) -> Wheel:
    """The wheel of `distribution` that the toolchain lock pins for the lane's toolkit and build host."""
    spec = toolchain_spec(lane.cuda_toolkit, lane.build_host)
    found = [wheel for wheel in spec.wheels if wheel.distribution == distribution]
    if len(found) != 1:
        raise InputError("names a wheel the toolchain lock does not pin (once) for the lane's toolkit", file=definition.file, field="base.wheel_file",
                         found=distribution, expected="one of " + ", ".join(sorted(w.distribution for w in spec.wheels)))
    return found[0]


def wheel_files(lane: Lane, definition: ImageDefinition, staging: Path) -> tuple[tuple[str, Path, str], ...]:
    """(image path, file, owner) of each [[base.wheel_file]]: the wheel downloaded by its pinned SHA-256 (or taken from the cache) and read."""
    assert definition.package_base is not None
    placed = []
    for number, item in enumerate(definition.package_base.wheel_files):
        wheel = pinned_wheel(lane, item.distribution, definition=definition)
        path = package_layer.wheel_member(fetch_wheel(wheel), item.member, staging / "wheel-files" / str(number), label=wheel.filename)
        placed.append((item.target, path, f"wheel:{wheel.distribution}"))
    return tuple(placed)


def package_base_image(definition: ImageDefinition, lock: apt_lock.AptLock, staging: Path, epoch: int, lane: Lane, *,
                       cache: Path | None = None) -> BaseImage:
    """The base of distribution packages: one layer from the lock alone (lanework/package_layer.py), plus the files taken from pinned wheels."""
    assert definition.package_base is not None
    result = package_layer.assemble(lock, definition.package_base.stand_ins(), staging, epoch=epoch, cache=cache,
                                    compression=definition.compression, gzip_level=definition.gzip_level,
                                    extra_files=wheel_files(lane, definition, staging))
    ui.info(f"package layer: {len(lock.packages)} packages, {result.layer.descriptor.digest} ({ui.human_bytes(result.layer.descriptor.size)}), ld.so.cache by {result.ldconfig}")
    config = {"config": {"Env": list(PACKAGE_BASE_ENV)}, "rootfs": {"type": "layers", "diff_ids": []}, "history": []}
    return BaseImage(None, "packages", "sha256:" + sha256_file(lock.file), None, config, None, (), {}, packages=result, lock=lock)


def check_build_environment(definition: ImageDefinition, archive: ArchiveContent) -> None:
    """Build and image from one distribution release and snapshot, where the binaries say they were built in the pinned environment.

    The binaries were linked against the sonames of the build environment's packages (packaging/linux/build-environment.toml:
    a Debian release and a snapshot.debian.org timestamp); an image of another release or snapshot ships other sonames
    or other builds of them.  Refused, naming both sides.  A build outside the pinned environment (no
    host_environment.build_environment in its identity: a maintainer's machine) makes no claim to compare; what its
    binaries need is checked library by library on the assembled file system (check_rootfs)."""
    assert definition.package_base is not None
    recorded = (archive.identity.get("host_environment") or {}).get("build_environment")
    if recorded is None:
        ui.info("build environment: the archive records none (built outside the pinned one), so each DT_NEEDED decides (check_rootfs)")
        return
    if not build_environment.valid_recorded(recorded):
        raise InputError("the archive's build identity records a malformed build environment", file=definition.file,
                         field="host_environment.build_environment", found=recorded, fix="package the set again from a build the pipeline made")
    pin = build_environment.read_pin()
    if recorded["container"] != pin["container"]:
        raise InputError(
            "the archive was built in another pinned build environment than this checkout's",
            file=build_environment.FILE, field="container", found=f"archive: {recorded['container']}", expected=f"this checkout's pin: {pin['container']}",
            why="the Debian release the binaries were linked against is read from the pin they were built in",
            fix="check out the pipeline at the commit the set was built with (its provenance names it) and make the image there",
        )
    build_side = (pin["debian_suite"], recorded["debian_snapshot"])
    image_side = definition.package_base.releases()
    if image_side != {build_side}:
        shown = ", ".join(f"{suite} at snapshot {snapshot}" if snapshot else f"{suite} from an archive that moves (no snapshot)" for suite, snapshot in sorted(image_side, key=str))
        raise InputError(
            "the image's packages and the binaries' build environment are not the same distribution release and snapshot",
            file=definition.file, field="base.source",
            found=f"image: {shown}; build: Debian {build_side[0]} at snapshot {build_side[1]} (build-environment.toml, container {pin['container']})",
            expected=f"every [[base.source]] on {build_side[0]} from https://snapshot.debian.org/archive/<archive>/{build_side[1]}",
            why="the binaries were linked against the build environment's sonames; another release or snapshot ships other ones (FFmpeg 5.1 in bookworm, 7.1 in trixie)",
            fix="lock the image from the build environment's release and snapshot (python -m pipeline image lock), or re-pin packaging/linux/build-environment.toml "
            "to the image's release and snapshot and rebuild the binaries",
        )
    ui.info(f"build environment: Debian {build_side[0]} at snapshot {build_side[1]}, the image's packages too")


def deb_components(base: BaseImage) -> list[sbom.DebComponent]:
    """The SBOM's view of each package of a package base: lock pins, control fields, DEP-5 licence."""
    assert base.lock is not None and base.packages is not None
    found = []
    for locked in base.lock.packages:
        source = base.lock.sources[locked.source]
        control = package_layer.package_control(base.packages, locked.name)
        copyright_text = package_layer.package_copyright(base.packages, locked.name)
        licence, note = dep5_licence(copyright_text) if copyright_text is not None else (None, "not in the package")
        found.append(sbom.DebComponent(locked.name, locked.version, locked.architecture, source.distro, locked.sha256, apt.deb_url(source.uri, locked.filename),
                                       control.get("Maintainer", ""), locked.source_package, locked.source_version, licence, note))
    return found


class _BaseSource:
    """Where base blobs come from: a registry (through the verified cache) or a local layout."""

    def __init__(self, spec: BaseSpec, layout: Path | None, *, retries: int) -> None:
        self.spec = spec
        self.layout = layout
        self.cache = oci_cache()
        self.client: RegistryClient | None = None
        if layout is None:
            self.client = RegistryClient(spec.repository, credentials=credentials_for(spec.repository.host, use_environment=False), retries=retries)

    @property
    def label(self) -> str:
        return f"layout:{self.layout}" if self.layout is not None else "registry"

    def document(self, digest: str, *, what: str) -> tuple[bytes, str | None]:
        """A manifest or index by digest, verified."""
        if self.layout is not None:
            path = oci.BlobStore(self.layout).path(digest)
            if not path.is_file():
                raise InputError(
                    f"the local base layout does not hold {what} {digest}",
                    file=self.layout,
                    why="the definition pins this digest; the layout holds other content",
                    fix=f"copy the pinned base with its digests kept: 'skopeo copy --all --preserve-digests docker://{self.spec.reference} oci:{self.layout}'",
                )
            data = path.read_bytes()
            if oci.digest_bytes(data) != digest:
                raise IntegrityError(f"{what} bytes in the local base layout do not match their digest", file=path, found=oci.digest_bytes(data), expected=digest)
            return data, None
        cached = self.cache.path(digest)
        if cached.is_file():
            data = cached.read_bytes()
            if oci.digest_bytes(data) == digest:
                return data, None
            cached.unlink()  # a corrupted cache entry: fetch again
        assert self.client is not None
        fetched = self.client.get_manifest(digest)
        if fetched is None:
            raise RemoteError(
                f"the registry {self.spec.repository.api_host} does not serve {what} {digest} in {self.spec.repository.path}",
                file=self.spec.reference,
                why="the registry answered 404 (MANIFEST_UNKNOWN) for this digest: it is mistyped, belongs to another repository, or was deleted",
                fix=f"check the digest, e.g. 'skopeo inspect --raw docker://{self.spec.reference}'",
            )
        data, media_type, _header = fetched
        self.cache.put_bytes(data, media_type or oci.MANIFEST)
        return data, media_type

    def blob(self, descriptor: oci.Descriptor, *, what: str) -> Path:
        """A verified local file holding the blob."""
        if self.layout is not None:
            path = oci.BlobStore(self.layout).path(descriptor.digest)
            if not path.is_file():
                raise InputError(f"the local base layout lacks {what} {descriptor.digest}", file=self.layout, fix="copy the whole base image into the layout (skopeo copy --preserve-digests)")
            oci.verify_file(path, descriptor, origin=f"the base manifest ({what})")
            return path
        path = self.cache.path(descriptor.digest)
        if path.is_file():
            try:
                oci.verify_file(path, descriptor, origin=f"the base manifest ({what})")
                return path
            except IntegrityError:
                ui.warn(f"cached base blob {descriptor.digest} is corrupt; fetching it again")
                path.unlink()
        assert self.client is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        self.client.fetch_blob(descriptor, path, label=f"base {what}")
        return path


def acquire_base(spec: BaseSpec, platform: str, *, layout: Path | None, retries: int = 4) -> BaseImage:
    source = _BaseSource(spec, layout, retries=retries)
    origin = spec.reference
    data, header_type = source.document(spec.digest, what="manifest")
    document = oci.parse_json_blob(data, origin=origin)
    media_type = oci.document_media_type(document, header_type, origin=origin)
    index_digest = None
    manifest_digest = spec.digest
    if media_type in oci.INDEX_TYPES:
        entry = oci.select_platform(oci.parse_index(document, origin=origin), platform, origin=origin)
        index_digest = spec.digest
        manifest_digest = entry.digest
        data, header_type = source.document(entry.digest, what=f"{platform} manifest")
        origin = spec.repository.at(entry.digest)
        document = oci.parse_json_blob(data, origin=origin)
        media_type = oci.document_media_type(document, header_type or entry.media_type, origin=origin)
    if media_type not in oci.MANIFEST_TYPES:
        raise InputError("base reference does not name an image manifest", file=origin, found=media_type, expected=" or ".join(oci.MANIFEST_TYPES + oci.INDEX_TYPES))
    manifest = oci.parse_manifest(document, origin=origin, media_type=media_type)
    config_descriptor = oci.as_oci_config(manifest.config, origin=origin)
    layers = tuple(oci.as_oci_layer(layer, origin=origin, index=i) for i, layer in enumerate(manifest.layers))
    paths: dict[str, Path] = {}
    config_path = source.blob(manifest.config, what="config")
    config = oci.parse_config(config_path.read_bytes(), origin=f"{origin} (config)", layer_count=len(layers))
    wanted_os, _, wanted_arch = platform.partition("/")
    if config.get("os") != wanted_os or config.get("architecture") != wanted_arch.split("/")[0]:
        raise InputError(
            "base image is built for another platform",
            file=origin,
            found=f"{config.get('os')}/{config.get('architecture')}",
            expected=platform,
        )
    paths[config_descriptor.digest] = config_path
    for number, layer in enumerate(layers, 1):
        paths[layer.digest] = source.blob(layer, what=f"layer {number}/{len(layers)}")
    ui.info(f"base {spec.display_name}@{spec.digest[:19]}…: {len(layers)} layers, {ui.human_bytes(sum(layer.size for layer in layers))}, from {source.label}")
    return BaseImage(spec, source.label, manifest_digest, manifest, config, config_descriptor, layers, paths, index_digest)


# -- the binary archive -------------------------------------------------------

@dataclass
class ArchiveContent:
    artifact: Artifact
    path: Path
    root: str  # the top-level folder name
    files: dict[str, Path]  # relative path -> extracted file
    executable: dict[str, bool]
    identity: dict[str, Any]
    component_tag: str


def open_archive(ctx: Context, lane: Lane, staging: Path) -> ArchiveContent:
    register = ctx.register
    artifact = register.one("package-archive", lane=lane.id, needed_by="the image stage", produced_by="package")
    path = register.verified_path(artifact)  # refuses bytes that differ from the register
    component_tag = artifact.attrs["component_tag"]
    beta = lane.beta_from_tag(component_tag)
    expected_name = f"{lane.stem(beta)}-{lane.asset_platform}.tar.gz"
    if path.name != expected_name:
        raise InputError("binary archive has an unexpected name", file=path, found=path.name, expected=expected_name)
    root = expected_name.removesuffix(".tar.gz")
    files: dict[str, Path] = {}
    executable: dict[str, bool] = {}
    staging.mkdir(parents=True, exist_ok=True)
    with SafeTar(path, error=InputError) as tar:  # bounded; any member name leaving the archive is refused
        for member in tar:
            name = member.name[2:] if member.name.startswith("./") else member.name
            name = name.rstrip("/")
            parts = PurePosixPath(name).parts
            if not parts or parts[0] != root or name.startswith("/") or ".." in parts or "\\" in name:
                raise InputError(
                    "archive member is outside the archive's one top-level folder",
                    file=path,
                    found=member.name,
                    expected=f"paths under {root}/",
                )
            relative = "/".join(parts[1:])
            if member.isdir():
                continue
            if not member.isreg():
                raise InputError(
                    "archive member is not a regular file or folder",
                    file=path,
                    found=f"{member.name} ({'symlink' if member.issym() else 'hard link' if member.islnk() else 'special file'})",
                    why="the image takes files only; links could point outside the folder the image owns",
                )
            if not relative:
                raise InputError("the archive's top-level entry must be a folder", file=path, found=member.name)
            if relative in files:
                raise InputError("archive holds a path twice", file=path, found=member.name)
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as sink:
                for chunk in tar.chunks(member, oci.CHUNK * 4):
                    sink.write(chunk)
            files[relative] = target
            executable[relative] = bool(member.mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    if SUMS_FILE not in files or IDENTITY_FILE not in files:
        raise InputError(
            f"binary archive lacks {SUMS_FILE if SUMS_FILE not in files else IDENTITY_FILE}",
            file=path,
            expected=f"{root}/{SUMS_FILE} and {root}/{IDENTITY_FILE} (the package contract)",
        )
    sums = parse_sums(files[SUMS_FILE].read_bytes(), file=f"{path}!{root}/{SUMS_FILE}", paths=True)  # the one strict reader
    payload = set(files) - {SUMS_FILE}
    if set(sums) != payload:
        missing = sorted(payload - set(sums))
        extra = sorted(set(sums) - payload)
        raise IntegrityError(
            f"{SUMS_FILE} does not list exactly the archive's files",
            file=path,
            found=f"unlisted: {missing[:5]}, listed but absent: {extra[:5]}",
            expected="every payload file listed once",
        )
    for name, expected in sorted(sums.items()):
        actual = sha256_file(files[name])
        if actual != expected:
            raise IntegrityError(f"archive file {name} differs from {SUMS_FILE}", file=path, found=actual, expected=expected)
    identity = loads_document(files[IDENTITY_FILE].read_bytes(), source=f"{path}!{root}/{IDENTITY_FILE}")
    if not isinstance(identity, dict) or identity.get("artifact_type") != IDENTITY_TYPE:
        raise InputError(f"{IDENTITY_FILE} in the archive is not a build identity", file=path, field="artifact_type", expected=IDENTITY_TYPE)
    binaries = identity.get("binaries") or {}
    for binary in lane.binaries:
        relative = f"bin/{lane.binary_file(binary)}"
        if relative not in files:
            raise InputError("binary archive lacks a lane binary", file=path, found=sorted(files), expected=f"{root}/{relative}")
        if not executable[relative]:
            raise InputError("lane binary in the archive is not executable", file=path, field=relative, fix="re-run the package stage")
        if binaries.get(lane.binary_file(binary)) != sha256_file(files[relative]):
            raise IntegrityError(f"{relative} differs from the hash in {IDENTITY_FILE}", file=path, found=sha256_file(files[relative]), expected=binaries.get(lane.binary_file(binary)))
    if identity.get("component_tag") not in (None, component_tag):
        raise IntegrityError("the archive's build identity names another component tag", file=path, found=identity.get("component_tag"), expected=component_tag)
    for key in ("patch_stack_sha", "source_date_epoch"):
        if key not in identity:
            raise InputError(f"{IDENTITY_FILE} in the archive lacks {key}", file=path, field=key)
    # Cross-check with the build stage's identity when the register holds it.
    recorded = register.query("build-identity", lane=lane.id)
    if len(recorded) == 1:
        built_path = register.verified_path(recorded[0])
        built = loads_object(built_path.read_bytes(), source=built_path)
        for key in ("patch_stack_sha", "binaries"):
            if built.get(key) != identity.get(key):
                raise IntegrityError(
                    f"the archive's {IDENTITY_FILE} disagrees with the registered build",
                    file=path,
                    field=key,
                    found=identity.get(key),
                    expected=built.get(key),
                    fix="re-run the package stage on this build",
                )
    ui.info(f"binary archive {path.name}: sha256 {artifact.sha256}, {len(files)} files, SHA256SUMS and identity verified")
    return ArchiveContent(artifact, path, root, files, executable, identity, component_tag)


def map_archive(definition: ImageDefinition, archive: ArchiveContent) -> list[list[oci.LayerFile]]:
    """Place every archive file by exactly one copy rule; return the files of each layer."""
    placed: dict[str, str] = {}
    layers: list[list[oci.LayerFile]] = []
    for layer_index, layer in enumerate(definition.layers):
        members: list[oci.LayerFile] = []
        for rule_index, rule in enumerate(layer.rules):
            where = f"layer[{layer_index}].copy[{rule_index}]"
            if rule.is_folder:
                matched = sorted(name for name in archive.files if name.startswith(rule.source))
            else:
                matched = [rule.source] if rule.source in archive.files else []
            if not matched:
                if rule.optional:
                    continue
                raise InputError(
                    "copy rule matches nothing in the binary archive",
                    file=definition.file,
                    field=f"{where}.from",
                    found=rule.source,
                    expected="a path in " + ", ".join(sorted(archive.files)[:12]),
                    fix="correct the path, or set optional = true if the package may leave it out",
                )
            for name in matched:
                if name in placed:
                    raise InputError("two copy rules place the same archive file", file=definition.file, field=where, found=name, expected=f"only the rule at {placed[name]}")
                placed[name] = where
                target = rule.target + name[len(rule.source):] if rule.is_folder else rule.target
                members.append(oci.LayerFile(target, archive.files[name], archive.executable[name]))
        layers.append(members)
    unplaced = sorted(set(archive.files) - set(placed) - set(definition.archive_ignore))
    if unplaced:
        raise InputError(
            "binary archive files are placed by no copy rule",
            file=definition.file,
            field="layer",
            found=unplaced,
            why="every file of the package contract goes into the image unless the definition says otherwise",
            fix="add a copy rule for them, or list them in archive_ignore",
        )
    for index, files in enumerate(layers):
        if not files:
            raise InputError("layer would be empty (all its copy rules are optional and matched nothing)", file=definition.file, field=f"layer[{index}]")
    return layers


# -- config, labels, env ------------------------------------------------------

def merge_env(base_env: list[str], definition: ImageDefinition) -> list[str]:
    values: dict[str, str] = {}
    order: list[str] = []
    for item in base_env:
        name, _, value = item.partition("=")
        if name not in values:
            order.append(name)
        values[name] = value
    for name, template in definition.env:
        def substitute(match: re.Match[str], *, var=name) -> str:
            if match.group(1) not in values:
                raise InputError(
                    f"refers to ${{{match.group(1)}}}, which neither the base image nor an earlier entry defines",
                    file=definition.file,
                    field=f"config.env.{var}",
                    expected="a variable of the base image's environment: " + ", ".join(order),
                )
            return values[match.group(1)]

        value = _ENV_REF.sub(substitute, template)
        if name not in values:
            order.append(name)
        values[name] = value
    return [f"{name}={values[name]}" for name in order]


def image_labels(definition: ImageDefinition, lane: Lane, archive: ArchiveContent, base: BaseImage, licences: str | None) -> dict[str, str]:
    """The labels (and manifest annotations) of the image; `licences` is what our layers carry (formats/sbom.py: SetLicences)."""
    identity = archive.identity
    source = identity.get("source") or {}
    location = source.get("location") if isinstance(source, dict) else None
    repository = (location or lane.component_repository).removesuffix(".git")
    ns = definition.label_namespace
    labels = {
        OCI_PREFIX + "created": oci.rfc3339(int(identity["source_date_epoch"])),
        OCI_PREFIX + "source": repository,
        OCI_PREFIX + "revision": identity["patch_stack_sha"],
        OCI_PREFIX + "version": archive.component_tag,
        # a package base is no image: no base.name/base.digest (they name an image by reference and digest)
        **({OCI_PREFIX + "base.name": base.spec.display_name, OCI_PREFIX + "base.digest": base.spec.digest} if base.spec is not None else {}),
        **({OCI_PREFIX + "licenses": licences} if licences else {}),
        f"{ns}.lane": lane.id,
        f"{ns}.component-tag": archive.component_tag,
        f"{ns}.build-profile": str(identity.get("build_profile", "")),
        f"{ns}.cuda-architecture": lane.cuda_architecture,
        f"{ns}.binary-archive": archive.path.name,
        f"{ns}.binary-archive.sha256": archive.artifact.sha256,
    }
    labels.update(dict(definition.labels))
    return labels


def build_config(definition: ImageDefinition, base: BaseImage, layers: list[oci.BuiltLayer], labels: dict[str, str], epoch: int) -> dict[str, Any]:
    base_config = dict(base.config.get("config") or {})
    # Base labels stay, except the base's own OCI description labels (its version, title,
    # ref.name…), which would describe the base and not this image.
    merged_labels = {k: v for k, v in (base_config.get("Labels") or {}).items() if not k.startswith(OCI_PREFIX)}
    merged_labels.update(labels)
    ports = dict.fromkeys(sorted(set(base_config.get("ExposedPorts") or {}) | set(definition.exposed_ports)), {})
    config: dict[str, Any] = {
        "Env": merge_env(list(base_config.get("Env") or []), definition),
        "Entrypoint": list(definition.entrypoint),
        "Cmd": list(definition.cmd),
        "WorkingDir": definition.working_dir,
        "User": definition.user,
        "Labels": merged_labels,
    }
    if ports:
        config["ExposedPorts"] = {port: {} for port in ports}
    if definition.stop_signal:
        config["StopSignal"] = definition.stop_signal
    for key in ("Volumes", "Healthcheck", "OnBuild", "Shell"):
        if base_config.get(key):
            config[key] = base_config[key]
    created = oci.rfc3339(epoch)
    history = list(base.config.get("history") or [])
    for layer in layers:
        from_packages = base.packages is not None and layer is base.packages.layer
        history.append({
            "created": created,
            "created_by": f"omp-ninfer pipeline (image stage): layer '{layer.name}' from " + (f"the packages of {base.lock_name}" if from_packages else "the binary archive"),
            "comment": next((spec.comment for spec in definition.layers if spec.name == layer.name), "") if not from_packages else f"{len(base.lock.packages)} distribution packages, no maintainer script run",
        })
    return {
        "architecture": definition.architecture,
        "os": definition.os,
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [*base.config["rootfs"]["diff_ids"], *(layer.diff_id for layer in layers)]},
        "history": history,
    }


# -- checks on the assembled file system ----------------------------------------

def check_rootfs(rootfs: RootFS, definition: ImageDefinition, lane: Lane, layers: list[oci.BuiltLayer], config: dict[str, Any], *, base_name: str) -> None:
    env = dict(item.partition("=")[::2] for item in config["config"]["Env"])
    program = rootfs.find_program(definition.entrypoint[0], env)
    if not rootfs.is_executable_file(program):
        raise InputError(
            "the entrypoint is not an executable file in the image",
            file=definition.file,
            field="config.entrypoint[0]",
            found=definition.entrypoint[0],
            expected="a path that one of the image's layers provides with an executable mode",
        )
    search_common = rootfs.loader_dirs(env, definition.architecture)
    provided_by_driver = set(lane.driver_libraries)
    for layer in layers:
        for item in layer.files:
            info = elf_imports(item.source, error=InputError)
            if info is None:
                continue
            dirs = rootfs.library_search(item.path, (*info.runpath, *info.rpath), search_common)
            for library in info.needed:
                if library in provided_by_driver:
                    continue
                if not rootfs.has_library(library, dirs):
                    raise InputError(
                        f"{item.path} needs {library}, which the image does not provide",
                        file=definition.file,
                        field="base",
                        found=f"searched {', '.join(dict.fromkeys(dirs))}",
                        expected=f"{library} in the base ({base_name}) or in our layers",
                        why="the binary would not start in this image; the lane expects the base to bring "
                        + (f"the libraries of the package base {lane.base_image}" if lane.base_image else ", ".join(lane.base_image_libraries) or "its libraries"),
                        fix="pin a base image that provides the library, or bundle it in the package",
                    )


# -- the SBOM ---------------------------------------------------------------

def base_image_provider(lane: Lane, definition: ImageDefinition):
    """Who supplies the base image: the lane's [package.base_image_provider] (one declaration for both SBOMs)."""
    provider = lane.providers.get("base-image")
    if provider is None:
        raise InputError(
            "the lane does not say who supplies the container base image",
            file=lane.file,
            field="package.base_image_provider",
            expected="a table with supplier and version",
            why=f"the image SBOM names the supplier of its base ({definition.base.display_name if definition.base else 'packages'})",
            fix="add [package.base_image_provider] with supplier = \"...\" and version = \"...\" to the lane file",
        )
    return provider


def image_sbom_input(
    *,
    definition: ImageDefinition,
    lane: Lane,
    archive: ArchiveContent,
    base: BaseImage,
    layers: list[oci.BuiltLayer],
    manifest_digest: str,
    licences: sbom.SetLicences,
) -> sbom.ImageSbomInput:
    """What the image SBOM says (formats/sbom.py writes it), from the bytes this stage built and read."""
    payload_of = {source: name for name, source in archive.files.items()}
    files = [
        sbom.ImageFile(item.path, item.source, layer.name, layer.descriptor.digest, payload_of.get(item.source), is_elf(item.source))
        for layer in layers
        for item in sorted(layer.files, key=lambda f: f.path)
    ]
    return sbom.ImageSbomInput(
        name=definition.name,
        component_tag=archive.component_tag,
        component_repository=lane.component_repository,
        supplier=repository_owner(lane.component_repository),
        repository=definition.repository,
        platform=definition.platform,
        manifest_digest=manifest_digest,
        epoch=int(archive.identity["source_date_epoch"]),
        files=files,
        layer_digests=[d.digest for d in (*base.layers, *((base.packages.layer.descriptor,) if base.packages else ()), *(built.descriptor for built in layers))],
        base_repository=base.spec.repository.name if base.spec else None,
        base_tag=base.spec.tag if base.spec else None,
        base_digest=base.spec.digest if base.spec else None,
        base_manifest_digest=base.manifest_digest if base.spec else None,
        base_layer_digests=[d.digest for d in base.layers],
        base_supplier=base_image_provider(lane, definition).supplier if base.spec else None,
        base_license=base.spec.license if base.spec else None,
        base_license_name=base.spec.license_name if base.spec else None,
        base_license_text=base.spec.license_text if base.spec else None,
        archive_root=archive.root,
        archive_filename=archive.path.name,
        archive_sha256=archive.artifact.sha256,
        archive_prefix=archive_prefix(definition),
        source_commit=archive.identity["patch_stack_sha"],
        licences=licences,
        distribution_packages=deb_components(base) if base.packages else [],
        wheel_files=[sbom.WheelComponent(w.distribution, w.version, w.sha256, w.url, item.target, item.license, item.license_name, item.license_text)
                     for item in definition.package_base.wheel_files for w in (pinned_wheel(lane, item.distribution, definition=definition),)]
        if definition.package_base is not None else [],
    )


# -- the stage ----------------------------------------------------------------

@dataclass
class ImageResult:
    manifest_digest: str
    layout: Path
    outputs: list[Artifact] = field(default_factory=list)


class ImageStage(Stage):
    name = "image"

    def __init__(self, ctx: Context, lane: Lane, *, definition: Path | None = None, base_layout: Path | None = None, retries: int = 4) -> None:
        super().__init__(ctx)
        self.lane = lane
        self.definition_path = definition
        self.base_layout = base_layout.resolve() if base_layout else None
        self.retries = retries
        self.definition: ImageDefinition | None = None
        self.archive_artifact: Artifact | None = None
        self.set_sbom: Artifact | None = None
        self.lock: apt_lock.AptLock | None = None
        self.package_cache: Path | None = None  # None: the shared package cache (lanework/apt.py)

    @property
    def key(self) -> str:
        return f"image:{self.lane.id}"

    def describe(self) -> str:
        return f"{self.lane.id}"

    @property
    def out_dir(self) -> Path:
        return self.ctx.dist / self.lane.id / "image"

    def leftovers(self) -> list[tuple[Path, tuple[str, ...]]]:
        name = self.out_dir.name  # atomic_output_dir's names beside the published folder
        return [(self.out_dir.parent, (f".{name}.*.staging", f".{name}.*.old"))]

    def preflight(self) -> None:
        if self.lane.kind != "container":
            raise InputError(
                f"lane {self.lane.id} ships no container image",
                file=self.lane.file,
                field="kind",
                found=self.lane.kind,
                expected="'container' (the Windows lanes ship native asset sets)",
            )
        self.definition = definition_for_lane(self.lane, self.definition_path)
        if self.definition.package_base is not None:
            self.lock = read_package_lock(self.definition)  # stale or tampered locks stop here, before any download
        else:
            base_image_provider(self.lane, self.definition)  # the SBOM needs it: refuse before any work
        self.archive_artifact = self.ctx.register.one("package-archive", lane=self.lane.id, needed_by="the image stage", produced_by="package")
        self.ctx.register.verified_path(self.archive_artifact)
        # The licences of our layers' files are the ones the set's SBOM states for them.
        self.set_sbom = self.ctx.register.one("spdx-sbom", lane=self.lane.id, needed_by="the image stage (its files' licences)", produced_by="package")
        self.ctx.register.verified_path(self.set_sbom)
        # The package stage registers the archive with its whole set: bind it only if check-assets accepts that set.
        if check_registered_set(self.ctx.register, self.lane, needed_by="image") is None:
            ui.warn(f"the register holds no outer SHA256SUMS for lane {self.lane.id}: the archive is bound on its register hash alone")
        if self.base_layout is not None:
            oci.read_layout_index(self.base_layout)
        ui.info(f"definition {self.definition.file.name}: base {self._base_input()}")

    def _base_input(self) -> str:
        assert self.definition is not None
        if self.definition.base is not None:
            return self.definition.base.reference
        assert self.lock is not None
        return f"packages: {repository_name(self.lock.file)} sha256:{sha256_file(self.lock.file)}"

    def inputs(self) -> dict[str, Any]:
        assert self.definition is not None and self.archive_artifact is not None
        return {
            "lane": self.lane.id,
            "lane_file_sha256": self.lane.file_sha256,
            "definition_sha256": self.definition.file_sha256,
            "archive_sha256": self.archive_artifact.sha256,
            "set_sbom_sha256": self.set_sbom.sha256,
            "base": self._base_input(),
            **({"ldconfig": package_layer.host_ldconfig(),
                "wheels": {item.distribution: pinned_wheel(self.lane, item.distribution, definition=self.definition).sha256
                           for item in self.definition.package_base.wheel_files}} if self.definition.package_base is not None else {}),
            "base_source": str(self.base_layout) if self.base_layout else "registry",
            "zlib": oci.zlib_version(),
            "provenance": {"builder": provenance.builder(), "lock": sha256_file(REPO_ROOT / provenance.LOCK_NAME),
                           "pipeline_lock": sha256_file(REPO_ROOT / provenance.PIPELINE_LOCK_NAME)},
        }

    def run(self) -> list[Artifact]:
        assert self.definition is not None
        definition, lane, register = self.definition, self.lane, self.ctx.register
        with atomic_output_dir(self.out_dir) as staging:
            archive = open_archive(self.ctx, lane, staging / ".archive")
            epoch = int(archive.identity["source_date_epoch"])
            if definition.base is not None:
                base = acquire_base(definition.base, definition.platform, layout=self.base_layout, retries=self.retries)
            else:
                assert self.lock is not None
                check_build_environment(definition, archive)
                base = package_base_image(definition, self.lock, staging / ".packages", epoch, lane, cache=self.package_cache)

            layout = staging / "oci"
            blobs = oci.BlobStore(layout)
            rootfs = RootFS()  # the merged file system, for the checks before the manifest is written
            for number, layer in enumerate(base.layers, 1):
                diff_id = rootfs.add_layer_blob(base.blob_paths[layer.digest], layer.media_type)
                expected = base.config["rootfs"]["diff_ids"][number - 1]
                if diff_id != expected:
                    raise IntegrityError(
                        f"base layer {number} does not unpack to the diff_id its config records",
                        file=base.spec.reference,
                        field=f"rootfs.diff_ids[{number - 1}]",
                        found=diff_id,
                        expected=expected,
                    )
                blobs.adopt(base.blob_paths[layer.digest], layer)

            built: list[oci.BuiltLayer] = []
            if base.packages is not None:
                package_blob = staging / ".packages" / f"{base.packages.layer.name}.layer"
                blobs.adopt(package_blob, base.packages.layer.descriptor)
                rootfs.add_layer_blob(package_blob, base.packages.layer.descriptor.media_type)
            for spec, files in zip(definition.layers, map_archive(definition, archive), strict=True):
                scratch = staging / ".layers" / spec.name
                layer = oci.build_layer(files, scratch, epoch=epoch, compression=definition.compression, gzip_level=definition.gzip_level, name=spec.name)
                annotated = oci.Descriptor(layer.descriptor.media_type, layer.descriptor.digest, layer.descriptor.size)
                blobs.adopt(scratch, annotated)
                built.append(oci.BuiltLayer(annotated, layer.diff_id, layer.files, spec.name))
                rootfs.add_layer_blob(scratch, annotated.media_type)
                ui.info(f"layer {spec.name}: {len(files)} files, {annotated.digest} ({ui.human_bytes(annotated.size)})")

            licences = sbom.set_licences(self.ctx.register.verified_path(self.set_sbom))
            payload_of = {source: name for name, source in archive.files.items()}
            labels = image_labels(definition, lane, archive, base, licences.of_payload([payload_of[f.source] for layer in built for f in layer.files if f.source in payload_of]))
            every_layer = [base.packages.layer, *built] if base.packages is not None else built
            config = build_config(definition, base, every_layer, labels, epoch)
            check_rootfs(rootfs, definition, lane, every_layer, config, base_name=base.display_name)
            config_descriptor = blobs.put_bytes(oci.canonical_json(config), oci.CONFIG)
            annotations = {k: v for k, v in labels.items() if k.startswith(OCI_PREFIX)}
            manifest = {
                "schemaVersion": 2,
                "mediaType": oci.MANIFEST,
                "config": config_descriptor.to_json(),
                "layers": [*(d.to_json() for d in base.layers), *(layer.descriptor.to_json() for layer in every_layer)],
                "annotations": annotations,
            }
            manifest_bytes = oci.canonical_json(manifest)
            manifest_descriptor = blobs.put_bytes(manifest_bytes, oci.MANIFEST)
            manifest_digest = manifest_descriptor.digest
            ref = oci.Descriptor(oci.MANIFEST, manifest_digest, len(manifest_bytes), {oci.REF_NAME: archive.component_tag})
            oci.write_layout(layout, ref)

            sbom_name = f"{definition.name}-{archive.component_tag}.image.spdx.json"
            sbom.write_image_spdx(staging / sbom_name, image_sbom_input(
                definition=definition, lane=lane, archive=archive, base=base, layers=built, manifest_digest=manifest_digest, licences=licences,
            ))
            for scratch_dir in (staging / ".layers", staging / ".archive", staging / ".packages"):
                shutil.rmtree(scratch_dir, ignore_errors=True)
        ui.info(f"image {definition.name}:{archive.component_tag} manifest {manifest_digest}")

        layer_rows = [
            {"digest": d.digest, "size": d.size, "media_type": d.media_type, "origin": "base", "diff_id": base.config["rootfs"]["diff_ids"][i]}
            for i, d in enumerate(base.layers)
        ] + [
            {"digest": layer.descriptor.digest, "size": layer.descriptor.size, "media_type": layer.descriptor.media_type, "origin": f"layer:{layer.name}", "diff_id": layer.diff_id}
            for layer in every_layer
        ]
        attrs = {
            "manifest_digest": manifest_digest,
            "manifest_size": len(manifest_bytes),
            "config_digest": config_descriptor.digest,
            "layout": (self.out_dir / "oci").relative_to(self.ctx.dist).as_posix(),
            "ref_name": archive.component_tag,
            "component_tag": archive.component_tag,
            "image_name": definition.name,
            "production_repository": definition.repository,
            "platform": definition.platform,
            **self._base_attrs(base),
            "binary_archive": archive.path.name,
            "binary_archive_sha256": archive.artifact.sha256,
            "source_commit": archive.identity["patch_stack_sha"],
            "created": oci.rfc3339(epoch),
            "layers": layer_rows,
            "layer_compression": definition.compression,
            "zlib_version": oci.zlib_version(),
            "definition": repository_name(definition.file),
            "definition_sha256": definition.file_sha256,
        }
        out = self.out_dir
        statement_path = self._provenance(archive, base, definition, manifest_digest, config_descriptor.digest, out / sbom_name)
        return [
            register.make(
                "provenance",
                statement_path,
                stage=self.name,
                lane=lane.id,
                name=f"{lane.id}/{provenance.FOLDER}/{statement_path.name}",
                component_tag=archive.component_tag,
                build_type=provenance.BUILD_TYPE_IMAGE,
                manifest_digest=manifest_digest,
            ),
            register.make("oci-layout", out / "oci" / "index.json", stage=self.name, lane=lane.id, name=f"{lane.id}/image/oci", **attrs),
            register.make(
                "image-sbom",
                out / sbom_name,
                stage=self.name,
                lane=lane.id,
                name=f"{lane.id}/image/{sbom_name}",
                manifest_digest=manifest_digest,
                component_tag=archive.component_tag,
            ),
        ]


    def _base_attrs(self, base: BaseImage) -> dict[str, Any]:
        """The register's base facts: a registry base by digest, or a package base by its lock (and what it ships)."""
        if base.spec is not None:
            return {"base_kind": "registry", "base_repository": base.spec.repository.name, "base_tag": base.spec.tag, "base_digest": base.spec.digest,
                    "base_manifest_digest": base.manifest_digest, "base_reference": base.spec.reference}
        assert base.packages is not None and base.lock is not None
        return {"base_kind": "packages", "base_repository": f"packages:{base.lock_name}", "base_tag": None, "base_digest": base.manifest_digest,
                "base_manifest_digest": base.manifest_digest, "base_reference": base.lock_name, "base_packages": len(base.lock.packages),
                "base_ldconfig": base.packages.ldconfig, "base_libraries": package_layer.shipped_libraries(base.packages, base.lock.architecture)}

    def _statement_path(self, definition: ImageDefinition, archive: ArchiveContent) -> Path:
        return self.ctx.dist / self.lane.id / provenance.FOLDER / provenance.image_statement_name(definition.name, archive.component_tag)

    def _provenance(self, archive: ArchiveContent, base: BaseImage, definition: ImageDefinition, manifest_digest: str, config_digest: str, sbom: Path) -> Path:
        """The image's SLSA provenance beside its layout (formats/provenance.py): the manifest is the subject."""
        statement = provenance.make_image_statement(
            lane=self.lane,
            identity=archive.identity,
            subject_name=definition.repository or definition.name,
            manifest_digest=manifest_digest,
            base_reference=base.spec.tagged_reference if base.spec else base.lock_name,
            base_manifest_digest=base.manifest_digest,
            package_lock=(base.lock_name, base.manifest_digest.removeprefix("sha256:")) if base.spec is None else None,
            archive_name=archive.path.name,
            archive_sha256=archive.artifact.sha256,
            definition_name=repository_name(definition.file),
            definition_sha256=definition.file_sha256,
            byproducts={sbom.name: sha256_file(sbom), "image-config": config_digest},
        )
        path = self._statement_path(definition, archive)
        atomic_write_bytes(path, statement)
        ui.info(f"provenance {path.name}: subject {manifest_digest}")
        return path


class ImageVerifyStage(ImageStage):
    """`image --verify DIGEST`: the image made again from the definition, its lock and the registered archive, by anyone.

    Into its own folder (`<dist>/<lane>/image-verify/`, the published image and its provenance untouched), and, on a
    package base, from a package cache of its own that starts empty: every .deb is fetched from the archive the lock
    names and must hash to the lock's SHA-256 (a changed .deb is refused, naming the package), so no .deb an earlier run
    left in a cache takes part.  The files of [[base.wheel_file]] (libcudart) come from the shared wheel cache, re-hashed
    there against the toolchain lock's SHA-256 on every use.  Nothing is registered."""

    def __init__(self, ctx: Context, lane: Lane, *, expected: str, cache: Path, **options: Any) -> None:
        super().__init__(ctx, lane, **options)
        self.expected = expected
        self.package_cache = cache

    @property
    def key(self) -> str:
        return f"image-verify:{self.lane.id}"

    @property
    def out_dir(self) -> Path:
        return self.ctx.dist / self.lane.id / "image-verify"

    def _statement_path(self, definition: ImageDefinition, archive: ArchiveContent) -> Path:
        return self.out_dir / provenance.image_statement_name(definition.name, archive.component_tag)


def verify_image(lane_name: str, expected: str, *, dist: Path | str = "dist", definition: Path | str | None = None,
                 base_layout: Path | str | None = None, lanes_dir: Path | None = None) -> str:
    """Rebuild the lane's image from its lock and archive and compare its manifest digest with `expected` (the published one).

    Returns the digest when they are equal; raises IntegrityError naming both when not (exit code of an integrity failure)."""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", expected):
        raise UsageError("--verify takes the published manifest digest", field="--verify", found=expected, expected="sha256:<64 lowercase hex>",
                         fix="copy the image digest from the release (its publication receipt or `docker buildx imagetools inspect`)")
    lane = find_lane(lane_name, lanes_dir)
    ctx = Context.open(dist, lanes_dir)
    with tempfile.TemporaryDirectory(prefix="image-verify-debs-") as cache:
        stage = ImageVerifyStage(ctx, lane, expected=expected, cache=Path(cache), definition=Path(definition) if definition else None,
                                 base_layout=Path(base_layout) if base_layout else None)
        stage.preflight()
        shutil.rmtree(stage.out_dir, ignore_errors=True)
        outputs = stage.run()
    layout = next(a for a in outputs if a.kind == "oci-layout")
    rebuilt = layout.attrs["manifest_digest"]
    if rebuilt != expected:
        raise IntegrityError(
            "the image made again from its definition, lock and archive is not the published image",
            file=f"{ctx.dist / lane.id / 'image-verify'}", field="manifest_digest", found=rebuilt, expected=expected,
            why="the same definition, lock and binary archive give the same bytes on the same tools; another digest means other inputs "
            "(another archive, definition or lock than the published image's) or other tools the bytes depend on: the zlib build "
            f"that compressed the layers (this run: zlib {layout.attrs['zlib_version']}) and, on a package base, the ldconfig that "
            f"made /etc/ld.so.cache ({_ldconfig_said(layout.attrs.get('base_ldconfig'))}); the published image's register entry "
            "records both (zlib_version, base_ldconfig)",
            fix="compare the layers of the rebuilt layout (its index.json) with the published manifest's; check out the pipeline at the release's commit, "
            "and where base_ldconfig names a host's ldconfig, rebuild on a host with that version (or lock libc-bin so the image's own ldconfig is used)",
        )
    ui.info(f"OK: image {rebuilt} made again from {layout.attrs['base_reference']} and {layout.attrs['binary_archive']} equals the published digest")
    return rebuilt


def _ldconfig_said(used: str | None) -> str:
    if used is None:
        return "none here: a registry base brings its own"
    if used == "image":
        return "this run: the image's own, from libc-bin, the same on any host"
    return f"this run: this host's, {used}"


# -- front door ------------------------------------------------------------------

def build_image(
    lane_name: str,
    *,
    dist: Path | str = "dist",
    definition: Path | str | None = None,
    base_layout: Path | str | None = None,
    lanes_dir: Path | None = None,
    force: bool = False,
    retries: int = 4,
) -> StageResult:
    lane = find_lane(lane_name, lanes_dir)
    ctx = Context.open(dist, lanes_dir)
    stage = ImageStage(
        ctx,
        lane,
        definition=Path(definition) if definition else None,
        base_layout=Path(base_layout) if base_layout else None,
        retries=retries,
    )
    return execute(stage, force=force)


def container_lane(lanes_dir: Path | None = None) -> Lane:
    """The lane `image` builds when none is named: the one lane whose kind is container (read from the lane files)."""
    lanes = [lane for lane in load_lanes(lanes_dir).values() if lane.kind == "container"]
    if len(lanes) != 1:
        raise UsageError(
            f"the lane files declare {len(lanes)} container lanes",
            field="--lane",
            found=[lane.id for lane in lanes],
            expected="exactly one lane of kind 'container', or --lane naming one",
            fix="pass --lane ID",
        )
    return lanes[0]


def _print_result(result: StageResult, as_json: bool) -> int:
    layout = next(a for a in result.outputs if a.kind == "oci-layout")
    if as_json:
        print(json.dumps({"manifest_digest": layout.attrs["manifest_digest"], "layout": layout.attrs["layout"], "skipped": result.skipped}, sort_keys=True))
    else:
        print(layout.attrs["manifest_digest"])
    return 0


def lock_packages(lane_name: str, *, definition: Path | None = None, lanes_dir: Path | None = None, as_json: bool = False) -> int:
    """`image lock`: the package base's lock, fetched, verified and resolved (lanework/apt.py), written beside the definition."""
    loaded = definition_for_lane(find_lane(lane_name, lanes_dir), definition)
    if loaded.package_base is None:
        raise InputError("has no package base to lock", file=loaded.file, field="base.kind", found="registry",
                         expected="'packages'", fix="a registry base is pinned by digest in the definition itself; it needs no lock")
    document = package_layer.lock_libraries(apt.make_lock(loaded.file, loaded.package_base, loaded.architecture))
    path = apt_lock.lock_path(loaded.file)
    data = apt_lock.write_lock(path, document)
    summary = {"lock": str(path), "sha256": sha256_bytes(data), "packages": len(document["packages"]),
               "bytes": sum(p["size"] for p in document["packages"])}
    if as_json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print(f"{path}: {summary['packages']} packages, {ui.human_bytes(summary['bytes'])} of .deb files, sha256 {summary['sha256']}")
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("image", help="assemble the container lane's OCI image layout from its binary archive (no Docker engine)")
    parser.add_argument("action", nargs="?", choices=["lock"], default=None,
                        help="'lock': resolve the definition's package base against its signed archives into containers/<definition>.lock.json (online)")
    parser.add_argument("--lane", default=None, help="container lane id or short name (default: the one lane of kind 'container' in runtime/lanes/)")
    parser.add_argument(
        "--definition",
        type=Path,
        default=Path(os.environ["PIPELINE_IMAGE_DEFINITION"]) if os.environ.get("PIPELINE_IMAGE_DEFINITION") else None,
        help="image definition file (default: $PIPELINE_IMAGE_DEFINITION, else the lane's package.base_image, else the containers/*.toml "
        "of the lane; a lane naming package.base_image refuses any other)",
    )
    parser.add_argument(
        "--base-layout",
        type=Path,
        default=Path(os.environ["PIPELINE_BASE_LAYOUT"]) if os.environ.get("PIPELINE_BASE_LAYOUT") else None,
        help="read the pinned base image from this local OCI layout instead of its registry (default: $PIPELINE_BASE_LAYOUT)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    parser.add_argument("--verify", metavar="DIGEST", default=None,
                        help="make the image again (into <dist>/<lane>/image-verify/, every .deb fetched anew against the lock) and compare "
                        "its manifest digest with DIGEST, the published one; exit 0 when equal")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_common(parser)

    def run(args: argparse.Namespace) -> int:
        lane = args.lane or container_lane(args.lanes_dir).id
        if args.action == "lock":
            return lock_packages(lane, definition=args.definition, lanes_dir=args.lanes_dir, as_json=args.json)
        if args.verify is not None:
            digest = verify_image(lane, args.verify, dist=args.dist, definition=args.definition, base_layout=args.base_layout, lanes_dir=args.lanes_dir)
            print(json.dumps({"manifest_digest": digest, "verified": True}, sort_keys=True) if args.json else f"OK {digest}")
            return 0
        result = build_image(lane, dist=args.dist, definition=args.definition, base_layout=args.base_layout, lanes_dir=args.lanes_dir, force=args.force)
        return _print_result(result, args.json)

    parser.set_defaults(func=run)


STAGE = ImageStage


def _unpinned_base(lane: Lane) -> str | None:
    """Why the lane's production image cannot be built yet (a base pinned by tag only), or None."""
    try:
        definition_for_lane(lane)
    except InputError as problem:
        if problem.field == "base.digest":
            return "its image definition pins no base image digest yet ('python -m pipeline image' says how to pin it)"
        raise
    return None


def release_plan(ctx: Context, lanes: list, options) -> list:
    """`release`: the image of each container lane that has been packaged."""
    from pipeline.stage import Skip

    steps: list = []
    for lane in lanes:
        if lane.kind != "container":
            steps.append((lane.id, Skip("a native lane ships no image")))
        elif not ctx.register.query("package-archive", lane=lane.id):
            steps.append((lane.id, Skip("no package of this lane in the register")))
        elif (unpinned := _unpinned_base(lane)) is not None:
            steps.append((lane.id, Skip(unpinned)))
        else:
            steps.append((lane.id, lambda lane=lane: build_image(lane.id, dist=ctx.dist, lanes_dir=options.lanes_dir)))
    return steps
