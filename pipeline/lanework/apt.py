"""A Debian package repository over HTTPS: the signed `InRelease`, its `Packages` indexes, a package cache.

`fetch_source` is the online half of `image lock`: it downloads `dists/<suite>/InRelease`
(bounded), hashes it, verifies its clearsigned signature against only the fingerprints the image
definition lists (`infra/openpgp.py`, the keyring pinned by SHA-256), parses only the signed text
gpgv returned, checks the suite, components, architecture and `Valid-Until`, then downloads each
component's `Packages` index by the SHA-256 and size the signed Release lists (by hash when the
archive offers `Acquire-By-Hash`, so a mirror update between the two requests cannot mix
generations), decompresses it bounded, checks the uncompressed bytes too where Release lists
them, and parses it (`formats/apt_repository.py`).

Downloads go through `infra/transfer.py` (the code audit uses: bounded, hashed while streaming,
resumable); files land in a content-addressed package cache (`<cache>/sha256/<hex>`, default
`~/.cache/omp-ninfer/apt`, `$OMP_NINFER_APT_CACHE` overrides), and a cached file is used only when
its bytes still hash to its name.
"""

from __future__ import annotations

import gzip
import lzma
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, IntegrityError
from pipeline.formats.apt_repository import BinaryPackage, IndexEntry, Release, parse_packages, parse_release
from pipeline.infra import transfer
from pipeline.infra.openpgp import verify_clearsigned
from pipeline.util import ui
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import sha256_bytes, sha256_file

APT_CACHE_ENV = "OMP_NINFER_APT_CACHE"
MAX_INRELEASE = 16 * 1024 * 1024  # Debian's is 150 KiB
MAX_INDEX_BYTES = 512 * 1024 * 1024  # a decompressed Packages index; trixie main amd64 is about 50 MiB
MAX_INDEX_DOWNLOAD = 128 * 1024 * 1024


def package_cache() -> Path:
    override = os.environ.get(APT_CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "omp-ninfer" / "apt"


def cached_fetch(url: str, cache: Path, *, sha256: str, size: int, label: str) -> Path:
    """The file of `sha256` from the cache, else downloaded from `url` (pinned by hash and size) into it."""
    path = cache / "sha256" / sha256
    if path.is_file():
        if path.stat().st_size == size and sha256_file(path) == sha256:
            return path
        ui.warn(f"cached {label} ({sha256[:12]}…) does not hash to its name; fetching it again")
        path.unlink()
    transfer.download_verified(url, path, expected_sha256=sha256, expected_size=size, label=label)
    return path


@dataclass(frozen=True)
class FetchedSource:
    uri: str
    suite: str
    components: tuple[str, ...]
    inrelease_sha256: str
    signers: tuple[str, ...]
    release: Release
    indexes: tuple[IndexEntry, ...]
    packages: tuple[BinaryPackage, ...]


def _check_release(release: Release, source: Any, architecture: str, *, label: str) -> None:
    if source.suite not in (release.suite, release.codename):
        raise IntegrityError("is the Release file of another suite", file=label, found=f"Suite {release.suite!r}, Codename {release.codename!r}",
                             expected=repr(source.suite), why="a mirror serving another suite's signed file is a downgrade or mix-up attack apt refuses too")
    listed = release.words("Components")
    for component in source.components:
        # Debian's security archive lists 'updates/main' but serves main/…: apt accepts 'main' for it, and so do we.
        if listed and component not in listed and f"updates/{component}" not in listed:
            raise InputError("names a component the Release file does not list", file=label, field="components", found=component, expected=", ".join(listed))
    if release.words("Architectures") and architecture not in release.words("Architectures"):
        raise InputError("does not carry the image's architecture", file=label, found=", ".join(release.words("Architectures")), expected=architecture)
    valid_until = release.fields.get("Valid-Until")
    if valid_until:
        try:
            until = parsedate_to_datetime(valid_until)
        except (TypeError, ValueError):
            raise InputError("has a Valid-Until that is not a date", file=label, field="Valid-Until", found=valid_until) from None
        if until.tzinfo is None or until < datetime.now(UTC):
            raise IntegrityError("has expired (Valid-Until)", file=label, field="Valid-Until", found=valid_until,
                                 why="an expired Release file may be a frozen mirror replaying old, vulnerable packages", fix="lock against a current mirror")


def _index_entries(release: Release, component: str, architecture: str, *, label: str) -> list[tuple[IndexEntry, IndexEntry | None]]:
    """The component's Packages index for the architecture, and its `binary-all` index when the Release lists `all` among
    its Architectures and does not say the architecture's index carries those packages too
    (`No-Support-for-Architecture-all: Packages`, Debian's case): apt's rule."""
    found = []
    for arch in (architecture, "all"):
        if arch == "all" and ("all" not in release.words("Architectures") or release.fields.get("No-Support-for-Architecture-all", "").strip() == "Packages"):
            continue
        base = f"{component}/binary-{arch}/Packages"
        entry = next(((release.files[base + suffix], release.files.get(base) if suffix else None) for suffix in (".xz", ".gz", "") if base + suffix in release.files), None)
        if entry is not None:
            found.append(entry)
        elif arch == architecture:
            raise InputError("lists no Packages index for the component and architecture", file=label, field="SHA256", found=base, expected=f"{base}.xz, .gz or uncompressed")
    return found


def _decompress(path: Path, entry: IndexEntry, *, label: str) -> bytes:
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(Path(entry.path).suffix)
    try:
        if opener is None:
            data = read_bytes_bounded(path, MAX_INDEX_BYTES, what="Packages index")
        else:
            with opener(path, "rb") as stream:
                data = stream.read(MAX_INDEX_BYTES + 1)
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise IntegrityError("does not decompress", file=label, found=str(exc)) from None
    if len(data) > MAX_INDEX_BYTES:
        raise IntegrityError(f"decompresses to more than {MAX_INDEX_BYTES} bytes", file=label, why="indexes are read with a bound so a hostile one cannot fill memory")
    return data


def _fetch_index(base: str, entry: IndexEntry, plain: IndexEntry | None, release: Release, cache: Path) -> bytes:
    """One Packages index by the SHA-256 and size the signed Release lists (by hash where offered), decompressed and checked again."""
    directory = base + entry.path.rsplit("/", 1)[0]
    url = f"{directory}/by-hash/SHA256/{entry.sha256}" if release.by_hash else base + entry.path
    try:
        path = cached_fetch(url, cache, sha256=entry.sha256, size=entry.size, label=entry.path)
    except IntegrityError as problem:
        raise IntegrityError(
            "serves a Packages index that differs from the signed Release file", file=url, field=entry.path, found=problem.found,
            expected=f"sha256 {entry.sha256}, {entry.size} bytes (the Release file's SHA256 line)",
            why="the package pins come from this index; an index the signature does not cover could pin anything",
            fix="lock again later (a mirror in the middle of an update) or use another mirror",
        ) from None
    data = _decompress(path, entry, label=url)
    if plain is not None and (len(data) != plain.size or sha256_bytes(data) != plain.sha256):
        raise IntegrityError("decompresses to other bytes than the Release file lists for the uncompressed index", file=url, field=plain.path,
                             found=f"sha256 {sha256_bytes(data)}, {len(data)} bytes", expected=f"sha256 {plain.sha256}, {plain.size} bytes")
    return data


def fetch_source(source: Any, origin: int, architecture: str, *, keyring: bytes, cache: Path) -> FetchedSource:
    """One source of the definition (uri, suite, components, fingerprints, keyring_path), verified and parsed."""
    base = source.uri.rstrip("/") + "/dists/" + source.suite + "/"
    label = base + "InRelease"
    with tempfile.TemporaryDirectory(prefix="omp-ninfer-inrelease-") as scratch:
        target = Path(scratch) / "InRelease"
        transfer.download(label, target, label="InRelease", max_size=MAX_INRELEASE, resume=False, progress=False)
        data = read_bytes_bounded(target, MAX_INRELEASE, what="InRelease")
    inrelease_sha256 = sha256_bytes(data)  # hashed before anything is parsed
    verified = verify_clearsigned(data, keyring=keyring, keyring_name=source.keyring, fingerprints=source.fingerprints, label=label)
    release = parse_release(verified.text, source=label)
    _check_release(release, source, architecture, label=label)
    indexes, packages = [], []
    for component in source.components:
        for entry, plain in _index_entries(release, component, architecture, label=label):
            data = _fetch_index(base, entry, plain, release, cache)
            indexes.append(entry)
            packages += parse_packages(data, source=base + entry.path, origin=origin, architecture=architecture)
    ui.info(f"{label}: signed by {', '.join(verified.signers)}; {len(packages)} packages for {architecture}")
    return FetchedSource(source.uri, source.suite, tuple(source.components), inrelease_sha256, verified.signers, release, tuple(indexes), tuple(packages))


def deb_url(uri: str, filename: str) -> str:
    return uri.rstrip("/") + "/" + filename


def distro_name(release: Release) -> str:
    """The purl `distro` qualifier: Origin and major Version ('debian-13'), else Origin and codename."""
    origin = (release.fields.get("Origin") or "unknown").strip().lower().replace(" ", "-")
    major = release.fields.get("Version", "").split(".")[0]
    return f"{origin}-{major}" if major.isdigit() else f"{origin}-{release.codename or release.suite}"


def make_lock(definition_file: Path, package_base: Any, architecture: str, *, cache: Path | None = None) -> dict[str, Any]:
    """The lock document of a package base: every source fetched and verified, the closure resolved."""
    from pipeline.formats import apt_lock
    from pipeline.lanework.apt_resolve import Universe, resolve

    cache = cache or package_cache()
    fetched = [fetch_source(source, origin, architecture, keyring=source.keyring_bytes, cache=cache) for origin, source in enumerate(package_base.sources)]
    universe = Universe([package for source in fetched for package in source.packages], architecture)
    selected = resolve(universe, list(package_base.packages), file=str(definition_file))
    sources = [
        {"uri": source.uri, "suite": source.suite, "components": list(source.components), "inrelease_sha256": source.inrelease_sha256,
         "signers": list(source.signers), "date": source.release.fields.get("Date", ""), "distro": distro_name(source.release),
         "indexes": [{"path": entry.path, "sha256": entry.sha256, "size": entry.size} for entry in source.indexes]}
        for source in fetched
    ]
    packages = [
        {"name": p.name, "version": p.version, "architecture": p.architecture, "multi_arch": p.multi_arch, "filename": p.filename,
         "size": p.size, "sha256": p.sha256, "source_package": p.source, "source_version": p.source_version, "source": p.origin,
         "why": {"package": chosen.why.package, "field": chosen.why.field, "relation": chosen.why.relation}}
        for chosen in selected.values() for p in (chosen.package,)
    ]
    return apt_lock.lock_document(
        definition=definition_file.name, request_sha256=apt_lock.request_digest(package_base.request(architecture)), architecture=architecture,
        requested=list(package_base.packages), sources=sources, packages=packages,
    )
