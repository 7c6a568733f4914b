"""The release manifest (`manifest.json`, `omp_ninfer_release_manifest`): its one reader and one function per question.

docs/release-tree.md is the contract.  A manifest read here comes from bytes that are bounded,
hashed before they are parsed and parsed strictly (duplicate keys, NaN and deep nesting refused),
whether it is a file of a tree or a published manifest fetched by URL: `read_manifest` is the one
way in for a path or a URL, `parse_manifest` the one way for bytes already in hand (audit's
cached, deadline-bound download).  The result, `ReleaseManifest`, is read only: its questions are
methods, and the same questions are answered for a manifest that is still a plain dict (one being
derived or checked) by the module functions below, so each rule is written once:

- `section`              the object at a dotted field path, or an empty one (the contract's shape
                         is checked by verify and audit; readers must not re-check it);
- `lane_rows`            the lane rows that are objects, container row first;
- `lane_rows_as_written` the lane rows as written, of any type (for a comparison in which a
                         malformed row must never equal a well-formed one);
- `lane_rows_at`         the object rows with the field path that names each by index;
- `component_lane_rows`  `lane_rows` of a `components` object (derivation's, before the manifest);
- `lane_row`             the row of one lane id;
- `published_set`        the part of a row that binds a published asset set (tag, repository,
                         checksums URL and SHA-256), and `published_set_rows` the rows that bind one;
- `evidence_records`     the evidence records it binds by path (`row_records` of one row,
                         `release_records` of the release), each with its field path;
- `review_subjects`      label -> digest of every artefact a review may name that it binds (the review
                         ledger's gate, formats/review_ledger.py);
- `acceptance_subject`   the install-relevant identities an acceptance run binds (compose, verify and
                         accept compare them between a candidate and the current tree);
- `blockers`             the blockers a manifest lists;
- `fields`               every top-level field as written (diff compares those no other question covers);
- `product_repository`   the product repository URL it names ("" when it names none as a string);
- `bundle_suffix`        the suffix of its Sigstore bundles (`signing.bundle_suffix`, else the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import InputError, UsageError
from pipeline.formats.release.names import BUNDLE_SUFFIX, MANIFEST_TYPE, ROW_RECORDS
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import dig, loads_document

MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # a manifest (and each document it binds by URL) is a few KiB
FETCH_TIMEOUT = 60.0
# raw.githubusercontent.com and release downloads may redirect within their hosts; never to another origin
REDIRECTS = "same-origin"
CONTAINER_ROW = "components.ninfer"
VARIANT_ROWS = "components.ninfer_variants"


# -- the questions, for a manifest held as a dict -------------------------------------------


def section(document: Any, dotted: str) -> dict[str, Any]:
    """The object at `dotted` ("components.omp"), or {} when a step is missing or not an object."""
    node = document
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _written_rows(components: dict[str, Any]) -> list[Any]:
    variants = components.get("ninfer_variants")
    return [components.get("ninfer"), *(variants if isinstance(variants, list) else [])]


def _rows_at(components: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    written = _written_rows(components)
    paths = [CONTAINER_ROW, *(f"{VARIANT_ROWS}[{index}]" for index in range(len(written) - 1))]
    return [(where, row) for where, row in zip(paths, written, strict=True) if isinstance(row, dict)]


def lane_rows_as_written(document: Any) -> list[Any]:
    """[components.ninfer, *components.ninfer_variants] as written: entries of any type (None for no container
    row), nothing for a list field of the wrong type (verify and audit report the shapes)."""
    return _written_rows(section(document, "components"))


def lane_rows_at(document: Any) -> list[tuple[str, dict[str, Any]]]:
    """(field path, row) of every lane row that is an object, the container row first; a variant is named by index."""
    return _rows_at(section(document, "components"))


def lane_rows(document: Any) -> list[dict[str, Any]]:
    """The lane rows that are objects (the container row first), anything else skipped."""
    return [row for _, row in lane_rows_at(document)]


def component_lane_rows(components: dict[str, Any]) -> list[dict[str, Any]]:
    """`lane_rows` of a manifest's `components` object alone (derivation holds it before the manifest)."""
    return [row for _, row in _rows_at(components)]


def lane_row(document: Any, lane_id: str) -> dict[str, Any] | None:
    """The first object row whose id is `lane_id`."""
    return next((row for row in lane_rows(document) if row.get("id") == lane_id), None)


# The evidence records a manifest binds by path (each an object with its path, sha256 and, once pinned,
# public_url): per lane row, then for the whole release (docs/release-tree.md).
ROW_RECORD_KEYS = (("qualification", "summary"), *((name, "path") for name in ROW_RECORDS))
RELEASE_RECORD_KEYS = (("qualification", "summary"), ("qualification.acceptance", "path"), ("compatibility", "path"), ("reviews", "path"))


@dataclass(frozen=True)
class EvidenceRecord:
    """One evidence record a manifest binds: where it is, its key, the object as written and which key holds its path."""

    field: str  # "compatibility", "components.ninfer_variants[1].provenance"
    name: str  # the record's own key: "qualification", "provenance", "acceptance", ...
    record: dict[str, Any]
    path_key: str  # "summary" for a qualification summary, else "path"

    @property
    def path(self) -> Any:
        return self.record.get(self.path_key)

    @property
    def public_url(self) -> Any:
        return self.record.get("public_url")


def row_records(where: str, row: dict[str, Any]) -> list[EvidenceRecord]:
    """The evidence records of one lane row (its qualification summary, then ROW_RECORDS), objects only."""
    return [EvidenceRecord(f"{where}.{name}", name, row[name], key) for name, key in ROW_RECORD_KEYS if isinstance(row.get(name), dict)]


def release_records(document: Any) -> list[EvidenceRecord]:
    """The release's own evidence records (qualification summary, acceptance record, compatibility authority,
    review ledger), objects only."""
    out = []
    for dotted, key in RELEASE_RECORD_KEYS:
        parent, _, name = dotted.rpartition(".")
        node = (section(document, parent) if parent else document if isinstance(document, dict) else {}).get(name)
        if isinstance(node, dict):
            out.append(EvidenceRecord(dotted, name, node, key))
    return out


def evidence_records(document: Any) -> list[EvidenceRecord]:
    """Every evidence record a manifest binds: each lane row's, then the release's."""
    return [record for where, row in lane_rows_at(document) for record in row_records(where, row)] + release_records(document)


def review_subjects(document: Any) -> dict[str, str]:
    """label -> digest of every artefact a review may name that the manifest binds (docs/review-ledger.md):
    each row's set by the SHA-256 of its outer SHA256SUMS (`set:<lane>`), the container row's image by its
    OCI manifest digest (`image:<lane>`), and the accepted candidate commit whose manifest the councils
    reviewed (`manifest-candidate`).  The reviews together must cover each of them (review_ledger.gate_failures)."""
    out: dict[str, str] = {}
    for row in lane_rows(document):
        if not isinstance(row.get("id"), str):
            continue
        if isinstance(row.get("checksums_sha256"), str):
            out[f"set:{row['id']}"] = row["checksums_sha256"]
        if isinstance(row.get("oci_manifest_digest"), str):
            out[f"image:{row['id']}"] = row["oci_manifest_digest"]
    acceptance = section(document, "qualification.acceptance")
    if isinstance(acceptance.get("candidate_commit"), str):
        out["manifest-candidate"] = acceptance["candidate_commit"]
    return out


def acceptance_subject(document: Any) -> dict[str, Any]:
    """The install-relevant identities an acceptance run binds."""
    omp = section(document, "components.omp")
    model = section(document, "components.model")
    lanes_out: dict[Any, Any] = {}
    container, *variants = lane_rows_as_written(document)
    for index, row in enumerate(([container] if container else []) + variants):
        if not isinstance(row, dict) or not isinstance(row.get("id"), (str, type(None))):
            # Kept as written, so that a malformed row never compares equal to a well-formed subject.
            lanes_out[f"(row {index})"] = row
            continue
        pkg = "binary_archive" if "binary_archive_sha256" in row else "package"
        lanes_out[row.get("id")] = {
            "release_tag": row.get("release_tag"),
            "package_sha256": row.get(f"{pkg}_sha256"),
            "server_binary_sha256": row.get("server_binary_sha256"),
            "configuration_sha256": row.get("configuration_sha256"),
            "oci_reference": row.get("oci_reference"),
        }
    platforms = omp.get("platforms") if isinstance(omp.get("platforms"), list) else []
    client = {}
    for index, p in enumerate(platforms):
        if isinstance(p, dict) and isinstance(p.get("platform"), (str, type(None))):
            client[p.get("platform")] = p.get("artifact_sha256")
        else:
            client[f"(platform {index})"] = p
    return {
        "client": client,
        "model_sha256": model.get("artifact_sha256"),
        "lanes": lanes_out,
    }


def blockers(document: Any) -> list[str]:
    """The blockers a manifest lists (publication.blockers), strings only."""
    return [item for item in section(document, "publication").get("blockers") or [] if isinstance(item, str)]


def product_repository(document: Any) -> str:
    """The product repository URL (`product.repository`), or "" when it is absent or not a string (the shape
    check reports the type)."""
    value = section(document, "product").get("repository")
    return value if isinstance(value, str) else ""


def bundle_suffix(document: Any) -> str:
    """The file-name suffix of the release's Sigstore bundles: `signing.bundle_suffix`, else the default."""
    return section(document, "signing").get("bundle_suffix") or BUNDLE_SUFFIX


@dataclass(frozen=True)
class PublishedSet:
    """The part of a lane row that binds the lane's published asset set."""

    field: str  # the row's field path, for messages
    lane_id: Any
    release_tag: str
    repository: str
    checksums_url: str
    checksums_sha256: str

    @property
    def download_prefix(self) -> str:
        """The release-download folder every file of the set is fetched from."""
        return f"{self.repository.rstrip('/')}/releases/download/{self.release_tag}/"


def published_set(row: dict[str, Any], *, field: str = "") -> PublishedSet | None:
    """The set a row binds, when its tag, repository, checksums URL and checksums SHA-256 are all strings."""
    values = [row.get(key) for key in ("release_tag", "repository", "checksums_url", "checksums_sha256")]
    if not all(isinstance(value, str) for value in values):
        return None
    return PublishedSet(field, row.get("id"), *values)


def published_set_rows(document: Any) -> list[tuple[str, dict[str, Any]]]:
    """(field path, row) of the rows that name a published set's checksums (audit fetches those sets)."""
    return [(where, row) for where, row in lane_rows_at(document) if "checksums_url" in row]


# -- the model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseManifest:
    """A release manifest read from bytes hashed before parsing; read only (ask its methods, do not edit `document`)."""

    source: str  # the path or URL it was read from, for messages
    sha256: str  # of `data`, the bytes parsed
    data: bytes = field(repr=False)
    document: Mapping[str, Any] = field(repr=False)

    @property
    def release(self) -> Any:
        return self.document.get("release")

    @property
    def status(self) -> Any:
        return self.document.get("status")

    def section(self, dotted: str) -> dict[str, Any]:
        return section(self.document, dotted)

    def lane_rows(self) -> list[dict[str, Any]]:
        return lane_rows(self.document)

    def lane_rows_at(self) -> list[tuple[str, dict[str, Any]]]:
        return lane_rows_at(self.document)

    def lane_row(self, lane_id: str) -> dict[str, Any] | None:
        return lane_row(self.document, lane_id)

    def blockers(self) -> list[str]:
        return blockers(self.document)

    def review_subjects(self) -> dict[str, str]:
        return review_subjects(self.document)

    def acceptance_subject(self) -> dict[str, Any]:
        return acceptance_subject(self.document)

    def value(self, dotted: str) -> Any:
        """The value at a dotted field path as written, of any type; None when a step is missing (for the shape checks)."""
        return dig(self.document, dotted)

    def fields(self) -> list[tuple[str, Any]]:
        """Every top-level field as written, in document order (diff compares the fields no named question covers)."""
        return list(self.document.items())

    def has(self, key: str) -> bool:
        """Whether the manifest holds the top-level `key` at all (null included): a release made before a field has none."""
        return key in self.document

    def published_set_rows(self) -> list[tuple[str, dict[str, Any]]]:
        return published_set_rows(self.document)

    def evidence_records(self) -> list[EvidenceRecord]:
        return evidence_records(self.document)

    def product_repository(self) -> str:
        return product_repository(self.document)

    def bundle_suffix(self) -> str:
        return bundle_suffix(self.document)


def parse_manifest(data: bytes, *, source: str, check_type: bool = True, max_bytes: int = MAX_MANIFEST_BYTES, strict_bytes: bool = False) -> ReleaseManifest:
    """The manifest held in `data` (hashed first, then parsed strictly); InputError naming `source`.

    `check_type` requires the manifest's own type string; audit and rebuild read manifests of
    releases made before it and rely on the fields they use instead.  `strict_bytes` also refuses a
    byte-order mark or a carriage return (publish and accept read a committed manifest, whose bytes the
    pipeline wrote; verify reports those itself, and audit reads what was published)."""
    if len(data) > max_bytes:
        raise InputError("is larger than a release manifest can be", file=source, found=f"{len(data)} bytes", expected=f"at most {max_bytes} bytes")
    digest = sha256_bytes(data)
    document = loads_document(data, source=source, max_bytes=max_bytes, strict_bytes=strict_bytes)
    if not isinstance(document, dict):
        raise InputError("must hold a JSON object", file=source, found=type(document).__name__, expected="a release manifest object")
    if check_type and document.get("artifact_type") != MANIFEST_TYPE:
        raise InputError("is not the release tree document it is named as", file=source, field="artifact_type", found=document.get("artifact_type"), expected=MANIFEST_TYPE)
    return ReleaseManifest(source, digest, data, document)


def is_url(source: str) -> bool:
    return urlsplit(source).scheme in ("http", "https")


def fetch_published(url: str, *, cap: int = MAX_MANIFEST_BYTES, what: str = "a release manifest") -> bytes:
    """The bytes at a release URL (a manifest, or a document it binds): the release URL rule first (HTTPS, plain
    HTTP only to loopback, no query or dot segments), no proxy or netrc credentials, at most `cap` bytes."""
    from pipeline.infra.net import check_scheme, deadline_session, fetch_bytes

    problem = check_scheme(url)
    if problem:
        raise UsageError(f"is not a URL a release document may be fetched from: {problem}", file=url, expected="an https:// URL of one immutable file (http:// only on loopback)")
    session = deadline_session()
    session.trust_env = False  # no proxy or netrc credentials from the environment
    try:
        response, body = fetch_bytes(session, url, cap=cap, timeout=FETCH_TIMEOUT, what=what, redirects=REDIRECTS)
    finally:
        session.close()
    if response.status_code != 200:
        raise InputError("could not be fetched", file=url, found=f"HTTP {response.status_code}", expected=f"HTTP 200 with {what}")
    return body


def read_manifest(source: str, *, check_type: bool = True, max_bytes: int = MAX_MANIFEST_BYTES) -> ReleaseManifest:
    """The manifest at a path or an https:// URL, the one reader of both; InputError naming the file or URL."""
    if is_url(source):
        data = fetch_published(source, cap=max_bytes)
    else:
        path = Path(source)
        if path.is_symlink() or not path.is_file():
            raise InputError("is not a plain file holding a release manifest", file=source, expected="a manifest.json (compose writes it)")
        data = read_bytes_bounded(path, max_bytes, what="release manifest")
    return parse_manifest(data, source=source, check_type=check_type, max_bytes=max_bytes)
