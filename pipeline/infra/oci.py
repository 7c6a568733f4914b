"""OCI image layout primitives: deterministic layers, canonical JSON, a blob store.

Everything here is pure Python (tarfile, gzip, hashlib) so an image can be
assembled without a Docker engine, byte for byte the same on every run:

- a layer is a PAX tar whose entries are sorted, owned by 0:0 with empty user
  and group names, stamped with one fixed mtime (the source commit time), with
  modes normalised to 0755/0644 and every parent directory present; gzipped
  with an empty file name and header mtime 0 (or left uncompressed);
- config, manifest and index are canonical JSON: sorted keys, compact
  separators, UTF-8, no trailing newline; a manifest's digest is the SHA-256
  of exactly those bytes, and exactly those bytes are pushed;
- blobs live at `blobs/sha256/<hex>` and are re-hashed whenever they are read
  for publication; a blob whose bytes no longer match its name is an error.

Base images are taken as they are: their manifests, configs and layers are
only parsed and verified here, never rewritten (the one exception is mapping
Docker media type names onto their OCI twins, which leaves the bytes, and so
the digests, untouched).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from pipeline.errors import InputError, IntegrityError
from pipeline.infra.safetar import SafeTar
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.jsonio import loads_document, loads_object
from pipeline.util.safepath import relpath_problem

# -- media types -------------------------------------------------------------

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_FOREIGN_LAYER = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

MANIFEST_TYPES = (MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (INDEX, DOCKER_LIST)
# What a client accepts when it asks a registry for a manifest by digest.
ACCEPT_ANY_MANIFEST = ", ".join((MANIFEST, INDEX, DOCKER_MANIFEST, DOCKER_LIST))

# Docker names for the same bytes -> OCI names (same bytes, same digest).
_DOCKER_TO_OCI = {DOCKER_CONFIG: CONFIG, DOCKER_LAYER_GZIP: LAYER_GZIP}
SUPPORTED_LAYER_TYPES = (LAYER_TAR, LAYER_GZIP)

LAYOUT_VERSION = "1.0.0"
REF_NAME = "org.opencontainers.image.ref.name"

_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00"  # magic, deflate, no flags, mtime 0
CHUNK = 1024 * 1024


def zlib_version() -> str:
    """The zlib that compressed our layers: gzip bytes depend on it, so it is recorded."""
    return zlib.ZLIB_RUNTIME_VERSION


# -- digests and canonical JSON ----------------------------------------------

def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_hex(digest: str) -> str:
    if not is_digest(digest):
        raise InputError("is not a sha256 digest", found=digest, expected="'sha256:' followed by 64 lowercase hex digits")
    return digest.split(":", 1)[1]


def canonical_json(document: Any) -> bytes:
    """The exact bytes of a config, manifest or index (what is hashed and pushed)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    annotations: dict[str, str] = field(default_factory=dict)
    platform: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.annotations:
            document["annotations"] = dict(self.annotations)
        if self.platform:
            document["platform"] = dict(self.platform)
        return document

    @classmethod
    def from_json(cls, document: Any, *, origin: str, field_name: str) -> Descriptor:
        if not isinstance(document, dict):
            raise InputError("descriptor is not an object", file=origin, field=field_name, found=type(document).__name__)
        media_type = document.get("mediaType")
        digest = document.get("digest")
        size = document.get("size")
        if not isinstance(media_type, str) or not media_type:
            raise InputError("descriptor lacks its mediaType", file=origin, field=f"{field_name}.mediaType", found=media_type)
        if not is_digest(digest):
            raise InputError(
                "descriptor digest is not a sha256 digest",
                file=origin,
                field=f"{field_name}.digest",
                found=digest,
                expected="'sha256:' + 64 lowercase hex digits (other algorithms are not accepted)",
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InputError("descriptor size is not a non-negative integer", file=origin, field=f"{field_name}.size", found=size)
        annotations = read_annotations(document.get("annotations"), origin=origin, field_name=f"{field_name}.annotations")
        platform = document.get("platform")
        return cls(media_type, digest, size, annotations, dict(platform) if isinstance(platform, dict) else None)


def read_annotations(value: Any, *, origin: str, field_name: str) -> dict[str, str]:
    """OCI annotations: a map of string to string (absent or null: none)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise InputError(
            "annotations are not a map of strings",
            file=origin,
            field=field_name,
            found=value if not isinstance(value, dict) else {k: v for k, v in value.items() if not isinstance(v, str)},
            expected="an object whose values are strings (OCI image spec, annotations)",
        )
    return dict(value)


# -- hashing writers ---------------------------------------------------------

class HashingWriter(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `sink`."""

    def __init__(self, sink: BinaryIO | None = None) -> None:
        super().__init__()
        self.sink = sink
        self.hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        view = memoryview(data)
        self.hash.update(view)
        self.size += view.nbytes
        if self.sink is not None:
            self.sink.write(view)
        return view.nbytes

    @property
    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


# -- deterministic layers ----------------------------------------------------

@dataclass(frozen=True)
class LayerFile:
    """One file of a layer we build: its absolute path in the image and where its bytes are."""

    path: str  # absolute POSIX path inside the image, e.g. /opt/ninfer/bin/ninfer
    source: Path | None
    executable: bool = False
    symlink: str | None = None  # a symbolic link to this target instead of a file


@dataclass(frozen=True)
class BuiltLayer:
    descriptor: Descriptor
    diff_id: str
    files: tuple[LayerFile, ...]
    name: str


def image_path(value: str, *, origin: str, field_name: str) -> PurePosixPath:
    """Validate an absolute path inside the image and return it normalised."""
    path = PurePosixPath(value)
    if not value.startswith("/") or any(part in ("..", ".") for part in path.parts) or "//" in value or "\\" in value \
            or (value.strip("/") and relpath_problem(value.strip("/"), hidden=True, portable=False) is not None):  # util/safepath's gate
        raise InputError(
            "is not a clean absolute path inside the image",
            file=origin,
            field=field_name,
            found=value,
            expected="an absolute POSIX path without '.', '..' or empty components, e.g. /opt/ninfer/bin/",
        )
    return path


def _tarinfo(name: str, *, kind: bytes, mode: int, size: int, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = int(epoch)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def layer_members(files: Iterable[LayerFile]) -> list[tuple[str, LayerFile | None]]:
    """Sorted tar member names (no leading '/'), parents first; None marks a directory."""
    entries: dict[str, LayerFile | None] = {}
    for item in files:
        relative = item.path.lstrip("/")
        if relative in entries:
            raise InputError("two files map to the same path in the image", found=item.path)
        parts = PurePosixPath(relative).parts
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if entries.get(parent) is not None:
                raise InputError("a file and a directory share one path in the image", found="/" + parent)
            entries[parent] = None
        entries[relative] = item
    return sorted(entries.items(), key=lambda pair: pair[0].encode("utf-8"))


def write_layer_tar(files: Iterable[LayerFile], sink: BinaryIO, *, epoch: int) -> None:
    members = layer_members(files)
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name, item in members:
            if item is None:
                tar.addfile(_tarinfo(name, kind=tarfile.DIRTYPE, mode=0o755, size=0, epoch=epoch))
                continue
            if item.symlink is not None:
                info = _tarinfo(name, kind=tarfile.SYMTYPE, mode=0o777, size=0, epoch=epoch)
                info.linkname = item.symlink
                tar.addfile(info)
                continue
            assert item.source is not None
            size = item.source.stat().st_size
            info = _tarinfo(name, kind=tarfile.REGTYPE, mode=0o755 if item.executable else 0o644, size=size, epoch=epoch)
            with open(item.source, "rb") as handle:
                tar.addfile(info, handle)


def build_layer(
    files: Iterable[LayerFile],
    destination: Path,
    *,
    epoch: int,
    compression: str = "gzip",
    gzip_level: int = 9,
    name: str = "layer",
) -> BuiltLayer:
    """Write a deterministic layer blob to `destination`; return its descriptor and diff_id."""
    files = tuple(files)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with open(destination, "wb") as raw:
        outer = HashingWriter(raw)
        if compression == "gzip":
            # filename="" and mtime=0 keep the gzip header free of run-specific bytes.
            with gzip.GzipFile(filename="", mode="wb", fileobj=outer, mtime=0, compresslevel=gzip_level) as gz:
                inner = HashingWriter(gz)
                write_layer_tar(files, inner, epoch=epoch)
            media_type = LAYER_GZIP
            diff_id = inner.digest
        elif compression == "none":
            write_layer_tar(files, outer, epoch=epoch)
            media_type = LAYER_TAR
            diff_id = outer.digest
        else:
            raise InputError("unknown layer compression", found=compression, expected="'gzip' or 'none'")
        raw.flush()
        os.fsync(raw.fileno())
    descriptor = Descriptor(media_type, outer.digest, outer.size)
    return BuiltLayer(descriptor, diff_id, files, name)


def uncompressed_digest(path: Path, media_type: str, *, on_member=None) -> str:
    """diff_id of a layer blob: SHA-256 of its tar stream; optionally visit each tar member."""
    digest = hashlib.sha256()
    # The bounded tar reader (infra.safetar) inflates, counts and hashes the stream; a bomb,
    # an oversized header or a member name leaving the root is refused while it streams.
    with SafeTar(path, compression="gz" if media_type == LAYER_GZIP else None, on_bytes=digest.update, label=path) as tar:
        for member in tar:  # every member's name is checked, visited or not
            if on_member is not None:
                on_member(member, tar)
        tar.drain()  # the rest: tar padding after the end-of-archive blocks
    return "sha256:" + digest.hexdigest()


# -- blob store and layout ---------------------------------------------------

class BlobStore:
    """Content-addressed blobs under `<root>/blobs/sha256/<hex>`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / digest_hex(digest)

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put_bytes(self, data: bytes, media_type: str) -> Descriptor:
        digest = digest_bytes(data)
        target = self.path(digest)
        if not (target.is_file() and target.stat().st_size == len(data)):
            atomic_write_bytes(target, data)
        return Descriptor(media_type, digest, len(data))

    def adopt(self, source: Path, descriptor: Descriptor) -> None:
        """Place an already verified file under its digest (hard link when possible)."""
        target = self.path(descriptor.digest)
        if target.is_file() and target.stat().st_size == descriptor.size:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            try:
                os.link(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()

    def read_verified(self, descriptor: Descriptor, *, origin: str) -> bytes:
        path = self.path(descriptor.digest)
        if not path.is_file():
            raise IntegrityError(
                f"blob {descriptor.digest} is missing from the image layout",
                file=path,
                fix="rebuild the image (the layout was changed or only partly copied)",
            )
        data = path.read_bytes()
        check_blob_bytes(data, descriptor, origin=origin, where=str(path))
        return data

    def verify_file(self, descriptor: Descriptor, *, origin: str) -> Path:
        path = self.path(descriptor.digest)
        if not path.is_file():
            raise IntegrityError(
                f"blob {descriptor.digest} is missing from the image layout",
                file=path,
                why=f"{origin} refers to it",
                fix="rebuild the image with the image stage",
            )
        verify_file(path, descriptor, origin=origin)
        return path


def verify_file(path: Path, descriptor: Descriptor, *, origin: str) -> None:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK * 4):
            digest.update(chunk)
            size += len(chunk)
    found = "sha256:" + digest.hexdigest()
    if found != descriptor.digest or size != descriptor.size:
        raise IntegrityError(
            "blob bytes do not match their descriptor",
            file=path,
            found=f"{found} ({size} bytes)",
            expected=f"{descriptor.digest} ({descriptor.size} bytes) as {origin} records",
            why="the file was changed or corrupted after it was written",
            fix="rebuild the image; never edit files under blobs/",
        )


def check_blob_bytes(data: bytes, descriptor: Descriptor, *, origin: str, where: str) -> None:
    found = digest_bytes(data)
    if found != descriptor.digest or len(data) != descriptor.size:
        raise IntegrityError(
            "bytes do not match the digest they were asked for",
            file=where,
            found=f"{found} ({len(data)} bytes)",
            expected=f"{descriptor.digest} ({descriptor.size} bytes) from {origin}",
            why="content is addressed by digest; different bytes under a digest mean corruption or tampering",
        )


def write_layout(root: Path, manifest: Descriptor) -> bytes:
    """Write `oci-layout` and `index.json` (one manifest) into an image layout; return the index bytes."""
    atomic_write_bytes(root / "oci-layout", canonical_json({"imageLayoutVersion": LAYOUT_VERSION}))
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [manifest.to_json()]}
    data = canonical_json(index)
    atomic_write_bytes(root / "index.json", data)
    return data


def read_layout_index(root: Path) -> dict[str, Any]:
    marker = root / "oci-layout"
    if not marker.is_file():
        raise InputError(
            "is not an OCI image layout (no oci-layout file)",
            file=root,
            expected="a folder written by the image stage or by 'skopeo copy ... oci:DIR'",
        )
    try:
        version = loads_object(marker.read_bytes(), source=marker).get("imageLayoutVersion")
    except InputError:
        version = None
    if version != LAYOUT_VERSION:
        raise InputError("has an unsupported image layout version", file=marker, field="imageLayoutVersion", found=version, expected=LAYOUT_VERSION)
    try:
        index = loads_document((root / "index.json").read_bytes(), source=root / "index.json")
    except FileNotFoundError:
        raise InputError("image layout has no index.json", file=root) from None
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        raise InputError("index.json has no manifests list", file=root / "index.json")
    return index


# -- parsing manifests and configs -------------------------------------------

@dataclass(frozen=True)
class Manifest:
    media_type: str
    config: Descriptor
    layers: tuple[Descriptor, ...]
    annotations: dict[str, str]


def parse_json_blob(data: bytes, *, origin: str) -> dict[str, Any]:
    document = loads_document(data, source=origin)
    if not isinstance(document, dict):
        raise InputError("is not a JSON object", file=origin, found=type(document).__name__)
    return document


def document_media_type(document: dict[str, Any], header: str | None, *, origin: str | None = None) -> str:
    """A manifest's media type: its own field, else what the registry said, else guessed from shape."""
    own = document.get("mediaType")
    if own is not None and not isinstance(own, str):
        raise InputError("mediaType is not a string", file=origin, field="mediaType", found=own, expected="a media type such as " + repr(MANIFEST))
    media_type = own or header or ""
    if not media_type:
        media_type = INDEX if "manifests" in document else MANIFEST
    return media_type.split(";")[0].strip()


def parse_index(document: dict[str, Any], *, origin: str) -> list[Descriptor]:
    if document.get("schemaVersion") != 2 or not isinstance(document.get("manifests"), list):
        raise InputError("is not an image index of schema 2", file=origin, field="manifests")
    return [Descriptor.from_json(item, origin=origin, field_name=f"manifests[{i}]") for i, item in enumerate(document["manifests"])]


def parse_manifest(document: dict[str, Any], *, origin: str, media_type: str) -> Manifest:
    if document.get("schemaVersion") != 2:
        raise InputError("is not an image manifest of schema 2", file=origin, field="schemaVersion", found=document.get("schemaVersion"), expected="2")
    config = Descriptor.from_json(document.get("config"), origin=origin, field_name="config")
    raw_layers = document.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers:
        raise InputError("manifest has no layers", file=origin, field="layers")
    layers = tuple(Descriptor.from_json(item, origin=origin, field_name=f"layers[{i}]") for i, item in enumerate(raw_layers))
    return Manifest(media_type, config, layers, read_annotations(document.get("annotations"), origin=origin, field_name="annotations"))


def as_oci_layer(descriptor: Descriptor, *, origin: str, index: int) -> Descriptor:
    """A base layer under its OCI media type name; the bytes (digest, size) are untouched."""
    media_type = _DOCKER_TO_OCI.get(descriptor.media_type, descriptor.media_type)
    if descriptor.media_type == DOCKER_FOREIGN_LAYER or media_type not in SUPPORTED_LAYER_TYPES:
        raise InputError(
            "base image layer has a media type this pipeline cannot verify",
            file=origin,
            field=f"layers[{index}].mediaType",
            found=descriptor.media_type,
            expected=f"{LAYER_GZIP} or {LAYER_TAR} (or Docker's {DOCKER_LAYER_GZIP})",
            why="every base layer's diff_id is re-computed from its bytes; zstd and foreign layers cannot be checked with the standard library",
            fix="use a base image with gzip or uncompressed layers (the nvidia/cuda images are gzip)",
        )
    return Descriptor(media_type, descriptor.digest, descriptor.size, dict(descriptor.annotations))


def as_oci_config(descriptor: Descriptor, *, origin: str) -> Descriptor:
    media_type = _DOCKER_TO_OCI.get(descriptor.media_type, descriptor.media_type)
    if media_type != CONFIG:
        raise InputError(
            "base manifest's config is not an image configuration",
            file=origin,
            field="config.mediaType",
            found=descriptor.media_type,
            expected=f"{CONFIG} or {DOCKER_CONFIG}",
            why="the base reference must name a container image, not another kind of OCI artefact",
        )
    return Descriptor(CONFIG, descriptor.digest, descriptor.size)


def platform_string(platform: dict[str, Any] | None) -> str:
    if not platform:
        return "unknown"
    text = f"{platform.get('os', '?')}/{platform.get('architecture', '?')}"
    if platform.get("variant"):
        text += f"/{platform['variant']}"
    return text


def select_platform(entries: list[Descriptor], wanted: str, *, origin: str) -> Descriptor:
    """The one image manifest of an index for `os/arch[/variant]` (attestation entries ignored)."""
    os_name, _, rest = wanted.partition("/")
    architecture, _, variant = rest.partition("/")
    matches = []
    for entry in entries:
        if entry.media_type not in MANIFEST_TYPES or not entry.platform:
            continue
        if entry.annotations.get("vnd.docker.reference.type") == "attestation-manifest":
            continue
        platform = entry.platform
        if platform.get("os") == os_name and platform.get("architecture") == architecture and (not variant or platform.get("variant") == variant):
            matches.append(entry)
    if len(matches) != 1:
        offered = sorted({platform_string(e.platform) for e in entries if e.media_type in MANIFEST_TYPES})
        raise InputError(
            f"base image index has {len(matches)} manifests for platform {wanted}",
            file=origin,
            found=offered,
            expected=f"exactly one manifest for {wanted}",
            fix="pin the digest of a base image that is built for this platform",
        )
    return matches[0]


def parse_config(data: bytes, *, origin: str, layer_count: int) -> dict[str, Any]:
    config = parse_json_blob(data, origin=origin)
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers" or not isinstance(rootfs.get("diff_ids"), list):
        raise InputError("image config has no rootfs.diff_ids list", file=origin, field="rootfs")
    diff_ids = rootfs["diff_ids"]
    if len(diff_ids) != layer_count or not all(is_digest(d) for d in diff_ids):
        raise InputError(
            "image config's diff_ids do not fit its manifest",
            file=origin,
            field="rootfs.diff_ids",
            found=f"{len(diff_ids)} entries",
            expected=f"{layer_count} sha256 digests, one per manifest layer",
        )
    return config


def iter_file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK * 4):
            yield chunk


def file_mode_is_executable(path: Path) -> bool:
    return bool(path.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
