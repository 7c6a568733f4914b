"""The bindings of a manifest (URL, SHA-256, bytes), the rules for where each must live, and the gate on the
names and shapes that become paths under --cache, checked before anything is fetched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import InputError
from pipeline.formats.release.manifest import ReleaseManifest, row_records
from pipeline.formats.release.names import EVIDENCE, ROW_RECORDS
from pipeline.infra.net import check_scheme
from pipeline.stages.audit.model import BARE_NAME, REPO_PATH, Binding, url_file_name
from pipeline.util.hashing import is_commit_hex, is_sha256_hex
from pipeline.util.jsonio import expect_list, expect_object
from pipeline.util.safepath import component_problem, safe_component, safe_relpath

RAW_HOST = "raw.githubusercontent.com"

# Lane-row field prefix -> the role of the file in the closed set (docs/release-tree.md).
SET_FIELDS = (
    ("package", "package"),
    ("binary_archive", "package"),
    ("source_archive", "source"),
    ("sbom", "spdx"),
    ("cdx_sbom", "cdx"),
    ("inner_checksums", "inner-sums"),
    ("build_receipt", "receipt"),
    ("installer", "support-script"),
    ("controller", "support-script"),
    ("gpu_owner_controller", "support-script"),
    ("state_protection", "support-script"),
    ("checksums", "outer-sums"),
)


def _items(value: Any) -> list[Any]:
    """A manifest list, or nothing when the field holds another type (the row checks report the field)."""
    return value if isinstance(value, list) else []


def check_location(binding: Binding) -> str | None:
    url = binding.url
    if not isinstance(url, str) or not url:
        return None
    problem = check_scheme(url)
    if problem:
        return problem
    if binding.expected_prefix is not None:
        name = binding.name or ""
        expected = binding.expected_prefix + name
        if not BARE_NAME.fullmatch(name) or url != expected:
            return f"points outside its release: expected {expected}"
    return None


def _raw_prefixes(product_repository: str) -> list[str]:
    """URL prefixes (before '<commit>/<path>') of raw files of the product repository."""
    repository = product_repository.rstrip("/")
    prefixes = [f"{repository}/raw/"]
    parts = urlsplit(repository)
    if parts.hostname == "github.com" and REPO_PATH.fullmatch(parts.path.strip("/")):
        prefixes.append(f"https://{RAW_HOST}/{parts.path.strip('/')}/")
    return prefixes


def check_raw_location(url: str, path: Any, product_repository: str, release: str) -> str | None:
    problem = check_scheme(url)
    if problem:
        return problem
    for prefix in _raw_prefixes(product_repository):
        if url.startswith(prefix):
            commit, _, rest = url[len(prefix):].partition("/")
            if not is_commit_hex(commit):
                return f"is not pinned to a 40-hex commit (found {commit!r}): a branch or tag URL can change"
            if isinstance(path, str) and rest != path:
                return f"points outside its release: names {rest!r}, but the record's path is {path!r}"
            if not rest.startswith(f"manifests/{release}/"):
                return f"points outside its release: {rest!r} is not under manifests/{release}/"
            return None
    return f"points outside its release: expected {_raw_prefixes(product_repository)[-1]}<40-hex commit>/manifests/{release}/…"


def collect_bindings(manifest: ReleaseManifest) -> list[Binding]:
    release = manifest.release
    product_repository = manifest.product_repository()
    bindings: list[Binding] = []
    components = manifest.section("components")

    omp = components.get("omp") if isinstance(components.get("omp"), dict) else None
    if omp is not None:
        prefix = f"{str(omp.get('upstream_repository') or '').rstrip('/')}/releases/download/{omp.get('upstream_tag')}/"
        for index, platform in enumerate(_items(omp.get("platforms"))):
            if not isinstance(platform, dict):
                continue
            name = platform.get("artifact_name")
            bindings.append(
                Binding(
                    label=f"client {platform.get('platform')} {name}",
                    field=f"components.omp.platforms[{index}].artifact_url",
                    sha_field=f"components.omp.platforms[{index}].artifact_sha256",
                    url=platform.get("artifact_url"),
                    sha256=platform.get("artifact_sha256"),
                    size=platform.get("artifact_bytes"),
                    expected_prefix=prefix,
                    name=name,
                )
            )

    model = components.get("model") if isinstance(components.get("model"), dict) else None
    if model is not None:
        revision = model.get("revision")
        prefix = f"{str(model.get('repository') or '').rstrip('/')}/resolve/{revision}/"
        binding = Binding(
            label=f"model {model.get('artifact_name')}",
            field="components.model.artifact_url",
            sha_field="components.model.artifact_sha256",
            url=model.get("artifact_url"),
            sha256=model.get("artifact_sha256"),
            size=model.get("artifact_bytes"),
            expected_prefix=prefix,
            name=model.get("artifact_name"),
        )
        if revision is not None and not is_commit_hex(revision):
            binding.location_error = f"the model revision {revision!r} is not a 40-hex commit: a branch URL can change"
        bindings.append(binding)

    for where, row in manifest.lane_rows_at():
        lane = row.get("id") or where
        prefix = f"{str(row.get('repository') or '').rstrip('/')}/releases/download/{row.get('release_tag')}/"
        for stem, role in SET_FIELDS:
            url_field = f"{stem}_url"
            if url_field not in row:
                continue
            url = row.get(url_field)
            name = row.get(f"{stem}_name") or url_file_name(url)
            if stem == "checksums":
                name = "SHA256SUMS"
            bindings.append(
                Binding(
                    label=f"{lane} {name or stem}",
                    field=f"{where}.{url_field}",
                    sha_field=f"{where}.{stem}_sha256",
                    url=url,
                    sha256=row.get(f"{stem}_sha256"),
                    size=row.get(f"{stem}_bytes"),
                    expected_prefix=prefix,
                    name=name,
                    kind="set-file",
                    group=lane,
                    role=role,
                )
            )
        for record in row_records(where, row):
            if "public_url" in record.record:
                bindings.append(_record(f"{lane} {record.name.replace('_', ' ')}", record.field, record.record, record.path_key, "sha256", product_repository, release))

    qualification = manifest.section("qualification")
    if "public_url" in qualification:
        bindings.append(_record("qualification summary", "qualification", qualification, "summary", "summary_sha256", product_repository, release))
        acceptance = qualification.get("acceptance")
        if isinstance(acceptance, dict) and "public_url" in acceptance:
            bindings.append(_record("external-installation acceptance", "qualification.acceptance", acceptance, "path", "sha256", product_repository, release))
    compatibility = manifest.section("compatibility")
    if "public_url" in compatibility:
        bindings.append(_record("compatibility authority", "compatibility", compatibility, "path", "sha256", product_repository, release))
    reviews = manifest.section("reviews")
    if "public_url" in reviews:
        bindings.append(_record("review ledger", "reviews", reviews, "path", "sha256", product_repository, release))

    for binding in bindings:
        if binding.location_error is None and binding.kind != "record":
            binding.location_error = check_location(binding)
    return bindings


def _record(label: str, where: str, record: dict[str, Any], path_key: str, sha_key: str, product_repository: str, release: Any) -> Binding:
    url = record.get("public_url")
    path = record.get(path_key)
    binding = Binding(
        label=label,
        field=f"{where}.public_url",
        sha_field=f"{where}.{sha_key}",
        url=url,
        sha256=record.get(sha_key),
        name=Path(path).name if isinstance(path, str) else None,
        kind="record",
    )
    if isinstance(url, str) and url:
        binding.location_error = check_raw_location(url, path, product_repository, str(release))
    return binding


# Fields that hold bindings, by the type the release-tree contract gives them: a manifest that
# holds another type there (a number for the list of lane rows) binds nothing the audit could
# check, and would otherwise pass with those items silently missing.
_OBJECT_FIELDS = ("components", "product", "qualification", "compatibility", "signing", "components.omp", "components.model",
                  "components.ninfer", "qualification.acceptance", "reviews")
_LIST_FIELDS = ("components.ninfer_variants", "components.omp.platforms", "signing.signed_files")


def check_manifest_shapes(manifest: ReleaseManifest, *, file: str) -> None:
    """Every binding-holding field that is present (and not null) has its contract's type; InputError naming it."""
    for where in _OBJECT_FIELDS:
        value = manifest.value(where)
        if value is not None:
            expect_object(value, source=file, field=where)
    for where in _LIST_FIELDS:
        value = manifest.value(where)
        if value is not None:
            expect_list(value, source=file, field=where)
    signing = manifest.section("signing")
    if "evidence" in signing and signing["evidence"] != EVIDENCE:
        raise InputError(
            "is not the evidence promise this audit knows",
            file=file,
            field="signing.evidence",
            found=signing["evidence"],
            expected=f"{json.dumps(EVIDENCE, sort_keys=True)}, or no key (a release made before it)",
            why="the promise decides whether a missing provenance statement or DSSE bundle fails the audit",
            fix="audit with the pipeline of the release's own version",
        )
    product = manifest.value("product.repository")
    if product is not None and not isinstance(product, str):
        raise InputError("must be a URL string", file=file, field="product.repository", found=product, expected="the product repository URL")
    for index, platform in enumerate(manifest.value("components.omp.platforms") or []):
        expect_object(platform, source=file, field=f"components.omp.platforms[{index}]")
    for index, row in enumerate(manifest.value("components.ninfer_variants") or []):
        expect_object(row, source=file, field=f"components.ninfer_variants[{index}]")
    for where, row in manifest.lane_rows_at():
        for record in ("qualification", *ROW_RECORDS):
            if row.get(record) is not None:
                expect_object(row[record], source=file, field=f"{where}.{record}")


def check_manifest_names(manifest: ReleaseManifest, *, file: str) -> None:
    """Every manifest value that becomes part of a path under --cache, checked before anything is fetched.

    The release names the cache folder, lane ids the folders of their sets,
    asset names and record paths the files; a hostile manifest must not steer
    any of them outside --cache (an absolute id, '..', a device name).
    """
    safe_component(manifest.release, file=file, field="release", max_len=100, expected="a release name such as 'v0.13.1'")
    check_manifest_shapes(manifest, file=file)
    omp = manifest.section("components.omp")
    platforms = omp.get("platforms")
    for index, platform in enumerate(platforms if isinstance(platforms, list) else []):
        if isinstance(platform, dict) and platform.get("artifact_name") is not None:
            safe_component(platform["artifact_name"], file=file, field=f"components.omp.platforms[{index}].artifact_name")
    model = manifest.section("components.model")
    if model.get("artifact_name") is not None:
        safe_component(model["artifact_name"], file=file, field="components.model.artifact_name")
    seen: dict[str, str] = {}
    for where, row in manifest.lane_rows_at():
        if row.get("id") is not None:
            lane = safe_component(row["id"], file=file, field=f"{where}.id", max_len=100, expected="a lane id such as 'rtx4090-windows-native'")
            if lane.casefold() in seen:
                raise InputError("two lane rows share an id", file=file, field=f"{where}.id", found=lane, expected=f"an id not used by {seen[lane.casefold()]}",
                                 why="each lane's set is checked in its own folder; two rows with one id would mix their files")
            seen[lane.casefold()] = where
        for stem, _role in SET_FIELDS:
            if row.get(f"{stem}_name") is not None:
                safe_component(row[f"{stem}_name"], file=file, field=f"{where}.{stem}_name")
    for record in manifest.evidence_records():
        if record.path is not None:
            safe_relpath(record.path, file=file, field=f"{record.field}.{record.path_key}")
    signing = manifest.section("signing")
    signed = signing.get("signed_files")
    for index, relative in enumerate(signed if isinstance(signed, list) else []):
        if isinstance(relative, str):
            safe_relpath(relative, file=file, field=f"signing.signed_files[{index}]")
    if signing.get("bundle_suffix") is not None:
        safe_component(signing["bundle_suffix"], file=file, field="signing.bundle_suffix", max_len=64, hidden=True, expected="a file-name suffix such as '.sigstore.json'")


def binding_problem(binding: Binding) -> str | None:
    """Why a binding cannot be audited at all (null or malformed values)."""
    if binding.url is None:
        return f"not bound: {binding.field} is null"
    if not isinstance(binding.url, str) or not binding.url:
        return f"{binding.field} is not a URL (found {binding.url!r})"
    if not is_sha256_hex(binding.sha256):
        where = binding.sha_field or binding.field.rsplit(".", 1)[0]
        if binding.sha256 is None:
            return f"not bound: {where} is null"
        return f"{where} is not a SHA-256 (found {binding.sha256!r})"
    if binding.size is not None and (not isinstance(binding.size, int) or isinstance(binding.size, bool) or binding.size < 0):
        return f"the recorded size is not a byte count (found {binding.size!r})"
    if binding.location_error:
        return binding.location_error
    unsafe = component_problem(binding.cache_name)
    if unsafe:
        return f"the file name {binding.cache_name!r} it would be saved as is unsafe: it {unsafe}"
    return None
