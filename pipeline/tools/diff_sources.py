"""What `diff` compares: one release (a tree folder, a manifest URL or an asset-set folder) as facts.

Every source becomes the same nested shape, section by section in the order the diff reports:

    product                       product, release, channel, audience, status
    lanes.<id>.component          component tag and cut (deployment profile, status, rebinding)
    lanes.<id>.source             source and upstream commits
    lanes.<id>.toolchain          CUDA toolkit, architecture, build route, toolchain inputs
    lanes.<id>.assets.<role>      file name, SHA-256, size of each asset (by role: package, sbom, ...)
    lanes.<id>.binaries           payload path -> SHA-256 of the binaries inside the package
    lanes.<id>.sbom               SBOM components by package URL: version, licence
    lanes.<id>.host_dependencies  name -> version
    lanes.<id>.provenance         the provenance statement's inputs and subjects
    lanes.<id>.identities         the other install identities a manifest row binds
    lanes.<id>.other              every other field of the row (its repository, checksums path, ...)
    model, qualification, compatibility, acceptance
    other                         every other manifest field (OMP, inputs, installation, limitations,
                                  publication and its blockers, runtime identity, signing, ...)

The documents are read by their owners (formats/release/tree.py, formats/assets.py, formats/sbom.py,
formats/provenance.py): bounded, hashed before parsing, strict.  A source that is none of the three
is a UsageError naming what was found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import InputError, UsageError
from pipeline.formats.release.manifest import ReleaseManifest, fetch_published, read_manifest
from pipeline.formats.release.names import (
    CONTAINER_PACKAGE,
    MANIFEST,
    ROLE_FIELDS,
    SCRIPT_FIELDS,
    provenance_name,
)
from pipeline.formats.release.tree import parse_tree_document, read_tree

ROW_COMPONENT = ("release_tag", "deployment_profile", "status", "published", "installable", "rebound_from")
ROW_SOURCE = ("source_commit", "upstream_commit")
# What the named sections take from a manifest; every other field is compared under "other" (its lane's
# "other row fields", or the release's "other manifest fields"), so no difference goes unreported.
MANIFEST_SHOWN = ("artifact_type", "product", "release", "channel", "audience", "status", "predecessor", "qualification", "reviews")
COMPONENTS_SHOWN = ("model", "ninfer", "ninfer_variants")
ROW_IDENTITIES = ("configuration_sha256", "server_binary_sha256", "model_artifact_sha256", "oci_reference", "oci_manifest_digest", "oci_repository", "publication_receipt")


def load_source(spec: str, *, lanes_dir: Path | None = None) -> dict[str, Any]:
    """The facts of one side of a diff (see the module docstring)."""
    if urlsplit(spec).scheme in ("http", "https"):
        return manifest_facts(read_manifest(spec))
    path = Path(spec)
    if path.is_dir() and (path / MANIFEST).exists():
        return tree_facts(path, shown=spec)
    if path.is_dir() and (path / "SHA256SUMS").exists():
        return set_facts(path, lanes_dir=lanes_dir)
    raise UsageError(
        "is neither a release tree, a manifest URL nor an asset-set folder",
        file=spec,
        expected=f"a folder holding {MANIFEST} (manifests/vX.Y.Z), an https:// URL of a {MANIFEST}, or a folder holding one asset set (SHA256SUMS)",
    )


def manifest_facts(manifest: ReleaseManifest) -> dict[str, Any]:
    """A published manifest and the two documents it binds by URL and SHA-256 (qualification summary,
    compatibility authority), each fetched bounded and refused unless its bytes have the bound hash."""
    from pipeline.formats.release.names import AUTHORITY_TYPE, SUMMARY_TYPE

    qualification = manifest.section("qualification")
    compatibility = manifest.section("compatibility")
    summary = _bound_document(qualification.get("public_url"), qualification.get("summary_sha256"), SUMMARY_TYPE, "qualification.public_url")
    authority = _bound_document(compatibility.get("public_url"), compatibility.get("sha256"), AUTHORITY_TYPE, "compatibility.public_url")
    return _from_manifest(manifest, summary=summary, authority=authority, folder=None, reviews=_bound_ledger(manifest))


def _bound_ledger(manifest: ReleaseManifest) -> dict[str, Any] | None:
    """The review ledger a published manifest binds, fetched by its URL and refused unless it has the bound hash."""
    from pipeline.formats.review_ledger import ledger_facts, parse_ledger
    from pipeline.util.hashing import sha256_bytes

    entry = manifest.section("reviews")
    url = entry.get("public_url")
    if not isinstance(url, str) or not url:
        return None  # not published by URL yet: compared by its binding only
    data = fetch_published(url, what="the review ledger")
    if sha256_bytes(data) != entry.get("sha256"):
        raise InputError("names a review ledger whose bytes do not have the bound hash", file=url, field="reviews.public_url", found=sha256_bytes(data), expected=entry.get("sha256"))
    return ledger_facts(parse_ledger(data, release=str(manifest.release), file=url))


def _bound_document(url: Any, sha256: Any, artifact_type: str, field: str) -> dict[str, Any] | None:
    from pipeline.util.hashing import is_sha256_hex, sha256_bytes

    if not isinstance(url, str) or not url:
        return None  # not published by URL yet (a draft's pins): compared as absent
    if not is_sha256_hex(sha256):
        raise InputError("binds a document by URL without its SHA-256", field=field, found=url, expected="a URL with its 64-hex SHA-256 beside it")
    data = fetch_published(url, what=f"the {artifact_type} document")
    if sha256_bytes(data) != sha256:
        raise InputError("names a document whose bytes do not have the bound hash", file=url, field=field, found=sha256_bytes(data), expected=sha256)
    return parse_tree_document(data, artifact_type, shown=url)


def tree_facts(folder: Path, *, shown: str) -> dict[str, Any]:
    tree = read_tree(folder, shown=shown)
    return _from_manifest(tree.manifest, summary=tree.summary, authority=tree.authority, folder=folder, reviews=tree.reviews, reviews_problem=tree.reviews_problem)


_ASSET_PREFIXES = (*ROLE_FIELDS.values(), *SCRIPT_FIELDS.values(), CONTAINER_PACKAGE)
_ROW_ASSET_FIELDS = tuple(f"{prefix}_{part}" for prefix in _ASSET_PREFIXES for part in ("url", "sha256", "bytes", "name"))


def _row_assets(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assets = {}
    for prefix in _ASSET_PREFIXES:
        url, sha, size = row.get(f"{prefix}_url"), row.get(f"{prefix}_sha256"), row.get(f"{prefix}_bytes")
        name = row.get(f"{prefix}_name") or (url.rsplit("/", 1)[-1] if isinstance(url, str) else None)
        if any(v is not None for v in (url, sha, size, name)):
            assets[prefix] = {"name": name, "sha256": sha, "size": size}
    return assets


def _provenance_facts(data: bytes, origin: str) -> dict[str, Any]:
    from pipeline.formats.provenance import read_statement
    from pipeline.util.hashing import sha256_bytes

    statement = read_statement(data, origin=origin)
    inputs = {str(dep.get("name")): dep.get("digest") or dep.get("uri") for dep in statement.dependencies()}
    external = statement.document["predicate"]["buildDefinition"].get("externalParameters") or {}
    return {"statement_sha256": sha256_bytes(data), "build_type": statement.build_type, "parameters": external, "inputs": inputs, "subjects": dict(sorted(statement.subjects.items()))}


def _tree_receipt(folder: Path | None, lane_id: str) -> dict[str, Any] | None:
    """The lane receipt a tree copies (`qualification/<lane>.json`): its status and each gate's result."""
    from pipeline.formats.receipts import LANE_RECEIPT_TYPE, receipt_facts
    from pipeline.formats.release.names import receipt_name
    from pipeline.formats.release.tree import read_tree_document

    path = folder / receipt_name(lane_id) if folder is not None else None
    if path is None or (not path.exists() and not path.is_symlink()):
        return None
    facts = receipt_facts(read_tree_document(path, LANE_RECEIPT_TYPE)[0])
    return {"status": facts.status, "gates": facts.gates}


def _tree_provenance(folder: Path | None, lane_id: str) -> dict[str, Any]:
    if folder is None:
        return {}
    path = folder / provenance_name(lane_id)
    if path.is_symlink() or not path.is_file():
        return {}
    from pipeline.formats.provenance import MAX_BYTES
    from pipeline.util.fs import read_bytes_bounded

    return _provenance_facts(read_bytes_bounded(path, MAX_BYTES, what="provenance statement"), str(path))


def _from_manifest(manifest: ReleaseManifest, *, summary: dict[str, Any] | None, authority: dict[str, Any] | None, folder: Path | None,
                   reviews: dict[str, Any] | None = None, reviews_problem: str | None = None) -> dict[str, Any]:
    product = manifest.section("product")
    lanes: dict[str, Any] = {}
    lane_qualification: dict[str, Any] = {}
    shown_row = {"id", "qualification", *ROW_COMPONENT, *ROW_SOURCE, *ROW_IDENTITIES, *_ROW_ASSET_FIELDS}
    for index, row in enumerate(manifest.lane_rows()):
        lane_id = _row_lane(row, index)
        lanes[lane_id] = {
            "component": {key: row.get(key) for key in ROW_COMPONENT},
            "source": {key: row.get(key) for key in ROW_SOURCE},
            "toolchain": {},
            "assets": _row_assets(row),
            "binaries": {"server binary": row["server_binary_sha256"]} if row.get("server_binary_sha256") else {},
            "sbom": {},
            "host_dependencies": {},
            "provenance": _tree_provenance(folder, lane_id),
            "identities": {key: row.get(key) for key in ROW_IDENTITIES if key in row},
            "other": {key: value for key, value in row.items() if key not in shown_row},
        }
        lane_qualification[lane_id] = {"row": row.get("qualification"), "receipt": _tree_receipt(folder, lane_id)}
    components = manifest.section("components")
    qualification = dict(manifest.section("qualification"))
    acceptance = qualification.pop("acceptance", None)
    # The summary's and the authority's bindings (path, URL, SHA-256) are compared as well as their documents:
    # a source that cannot bring a document (a manifest URL before publication) still shows its hash change.
    other = {key: value for key, value in manifest.fields() if key not in MANIFEST_SHOWN and key != "components"}
    other.update({f"components.{key}": value for key, value in components.items() if key not in COMPONENTS_SHOWN})
    review_facts = None if reviews is None and not manifest.has("reviews") else {"binding": manifest.value("reviews"), "councils": (reviews or {}).get("reviews")}
    if reviews_problem is not None:  # the tree's ledger cannot be read: compared as that problem, the rest of the tree as usual
        review_facts = {**(review_facts or {}), "problem": reviews_problem}
    return _keyed({
        "product": {"name": product.get("name"), "title": product.get("title"), "release": manifest.release, "channel": manifest.value("channel"),
                    "audience": manifest.value("audience"), "status": manifest.status, "predecessor": manifest.value("predecessor")},
        "lanes": lanes,
        "model": components.get("model"),
        "qualification": {"manifest": qualification, "lanes": lane_qualification, "summary": _summary_facts(summary, manifest)},
        "compatibility": _without(authority, ("authority_id", "product_release", "artifact_type")),
        "acceptance": acceptance,
        # the binding (path, URL, SHA-256) and the councils' reviews, findings and dispositions
        "reviews": review_facts,
        "other": other,
    })


def _summary_facts(summary: dict[str, Any] | None, manifest: ReleaseManifest) -> dict[str, Any] | None:
    """The qualification summary less its own release, and its `remaining_release_gates` less the manifest's
    publication blockers it copies (derived from them): each blocker change is listed once, under
    publication.blockers.  A gate the blockers do not hold is kept, so that a disagreement is a difference too."""
    shown = _without(summary, ("release", "artifact_type"))
    publication = manifest.section("publication")
    blockers = publication.get("blockers") if isinstance(publication.get("blockers"), list) else []
    gates = shown.get("remaining_release_gates") if shown is not None else None
    if shown is not None and isinstance(gates, list):
        kept = [gate for gate in gates if gate not in blockers]
        if kept:
            shown["remaining_release_gates"] = kept
        else:
            del shown["remaining_release_gates"]
    return shown


def _row_lane(row: dict[str, Any], index: int) -> str:
    """A row's lane id, which names the tree's receipt and provenance files: a bare name, never a path out of the tree."""
    from pipeline.util.safepath import component_problem

    problem = component_problem(row.get("id"))
    if problem:
        raise InputError(f"has a lane row whose id {problem}", field=f"components rows[{index}].id", found=row.get("id"), expected="a lane id (a bare name)")
    return row["id"]


class Listed(str):
    """An item of a list of strings, keyed by itself (`_keyed`), so `diff` can name it as one added or removed item."""

    __slots__ = ()


def _keyed(value: Any) -> Any:
    """Lists of strings (blockers, gates, limitations) as {item: Listed(item)}: an added or removed item is one
    difference, not a shifted list."""
    if isinstance(value, dict):
        return {key: _keyed(item) for key, item in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(item, str) for item in value):
            keyed: dict[str, Listed] = {}
            for item in value:  # a repeated item is an item too: its second copy is keyed '<item> (#2)'
                key, copy = item, 1
                while key in keyed:
                    copy += 1
                    key = f"{item} (#{copy})"
                keyed[key] = Listed(key)
            return keyed
        return [_keyed(item) for item in value]
    return value


def _without(document: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """A document less the fields that only name its own release (they differ between any two releases)."""
    return None if document is None else {k: v for k, v in document.items() if k not in keys}


def set_facts(folder: Path, *, lanes_dir: Path | None = None) -> dict[str, Any]:
    from pipeline.formats.assets import read_set
    from pipeline.formats.sbom import cdx_components

    contents = read_set(folder, lanes_dir=lanes_dir)
    receipt, identity, expected = contents.receipt, contents.identity, contents.expected
    assets = {contents.expected.role_of(name): {"name": name, "sha256": digest, "size": contents.sizes[name]} for name, digest in sorted(contents.report.files.items())}
    host = identity.get("host_dependencies") if isinstance(identity.get("host_dependencies"), list) else []
    lane = {
        "component": {"release_tag": receipt.get("component_tag"), "deployment_profile": receipt.get("deployment_profile"), "release_id": receipt.get("release_id"),
                      "build_profile": receipt.get("build_profile")},
        "source": {"source_commit": receipt.get("patch_stack_sha"), "upstream_commit": receipt.get("upstream_base_sha"), "source_tree": receipt.get("runtime_source_tree")},
        "toolchain": {"cuda_toolkit": receipt.get("cuda_toolkit"), "cuda_architecture": receipt.get("cuda_architecture"), "build_route": receipt.get("build_route"),
                      "toolchain": identity.get("toolchain")},
        "assets": assets,
        "binaries": {path: digest for path, digest in contents.payload.items() if path.startswith("bin/")},
        "sbom": cdx_components(folder / expected.name_of("cdx")),
        "host_dependencies": {str(d.get("name")): d.get("version") for d in host if isinstance(d, dict)},
        "provenance": _set_provenance(folder, expected, contents.report.files),
        "identities": {"config_sha256": receipt.get("config_sha256")},
    }
    return {
        "product": {},
        "lanes": {contents.report.lane: lane},
        "model": {"artifact_sha256": receipt.get("model_sha256")},
        "qualification": {"lanes": {contents.report.lane: receipt.get("qualification_status")}},
        "compatibility": None,
        "acceptance": None,
    }


def _set_provenance(folder: Path, expected, files: dict[str, str]) -> dict[str, Any]:
    """The set's provenance, beside it as the package stage writes it (`<lane>/attestations/` next to `<lane>/assets/`);
    a statement whose subjects are not exactly this set's files is another build's: an IntegrityError."""
    from pipeline.formats.provenance import (
        FOLDER,
        MAX_BYTES,
        check_subjects,
        read_statement,
        set_statement_name,
    )
    from pipeline.util.fs import read_bytes_bounded

    path = folder.parent / FOLDER / set_statement_name(expected.package_root)
    if path.is_symlink() or not path.is_file():
        return {}
    data = read_bytes_bounded(path, MAX_BYTES, what="provenance statement")
    check_subjects(read_statement(data, origin=str(path)), files, origin=str(path), what="the files of the set beside it")
    return _provenance_facts(data, str(path))
