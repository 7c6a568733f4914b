"""`accept pinned`: the candidate manifest's value of one field, for a block that reads it."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import InputError, RefusedError, UsageError
from pipeline.formats import acceptance as fmt
from pipeline.util.fs import read_bytes_bounded


def pinned_value(field_path: str, *, release: str | None, root: Path, mirrored: bool = False, environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    release = release or environ.get("OMP_NINFER_RELEASE")
    if not release:
        raise UsageError("no release named", field="--release", expected="--release vX.Y.Z or OMP_NINFER_RELEASE set", fix="export OMP_NINFER_RELEASE=vX.Y.Z (the release you install)")
    from pipeline.formats.release.manifest import parse_manifest
    from pipeline.formats.release.names import RELEASE_RE

    if not RELEASE_RE.fullmatch(release):
        raise UsageError("is not a product release name", field="release", found=release, expected="vX.Y.Z")
    path = root / "manifests" / release / "manifest.json"
    if not path.is_file():
        raise InputError("the release has no manifest here", file=path, fix="run from the top folder of a clone of the release (cd omp-ninfer)")
    data = read_bytes_bounded(path, fmt.MAX_JSON_BYTES, what="manifest")
    manifest = parse_manifest(data, source=str(path), check_type=False, strict_bytes=True)
    # the whole document: a route may read any field path of it ("components.ninfer_variants[<lane>].package_url")
    value = fmt.resolve_field(manifest.document, field_path)
    if fmt.is_missing(value):
        raise InputError("the manifest has no such field", file=path, field=field_path, expected="a field path such as components.ninfer.oci_reference or components.ninfer_variants[<lane>].package_url")
    if value is None:
        raise RefusedError("the manifest does not bind this value yet (null)", file=path, field=field_path, fix="install a release whose manifest binds it")
    if isinstance(value, (dict, list)):
        raise InputError("is not a single value", file=path, field=field_path, found=type(value).__name__)
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if mirrored:
        if not isinstance(value, str) or not value.startswith("https://"):
            raise InputError("--mirrored applies to URL fields only", file=path, field=field_path, found=value)
        text = fmt.apply_mirrors(text, fmt.parse_mirrors(environ.get("OMP_NINFER_MIRROR")))
    return text
