"""Names of the release tree: its files, its documents' type strings, its URLs and its vocabulary.

Everything here is a pure function of strings: where a file of
`manifests/<release>/` lives (`repo_path`, `receipt_name`, `sums_name`,
`provenance_name`), how a
release is named and ordered (`RELEASE_RE`, `sort_release_key`: `vX.Y.Z` or
`vX.Y.Z-beta.N`, docs/release-tree.md; nothing else, so `v1.0.0-rc.1` is not
a product release), the immutable URLs the manifest records (release
downloads under a component tag, raw URLs at a 40-hex commit, images by
digest), the manifest row's field names per lane kind, and the status and
blocker vocabulary of the states.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.infra.sigstore import BUNDLE_SUFFIX, OIDC_ISSUER  # noqa: F401  (Sigstore's names, spelled once there)

MANIFESTS_DIR = "manifests"
RELEASE_TOML = "release.toml"
MANIFEST = "manifest.json"
SUMMARY = "qualification.json"
AUTHORITY = "compatibility.json"
AUTHORITY_MD = "COMPATIBILITY.md"
NOTES = "NOTES.md"
QUALIFICATION_DIR = "qualification"
PUBLICATION_RECEIPT = "qualification/runtime-publication.json"
ACCEPTANCE = "acceptance/external-installation.json"
REVIEWS = "reviews.toml"  # the review ledger (formats/review_ledger.py), the tree's second hand-written input
PROVENANCE_SUFFIX = ".provenance.intoto.json"  # a provenance statement (formats/provenance.py), beside a set and in a tree
# A lane row's {path, sha256, public_url} records of byte copies in the tree. All but the image
# publication receipt are optional keys: absent (not null) in trees made before the pipeline wrote
# provenance or published components, so released manifests never change.
ROW_RECORDS = ("publication_receipt", "provenance", "image_provenance", "component_publication")

MANIFEST_TYPE = "omp_ninfer_release_manifest"
SUMMARY_TYPE = "omp_ninfer_product_qualification"
AUTHORITY_TYPE = "omp_ninfer_compatibility_authority"

PRODUCT_NAME = "OMP NInfer"
PRODUCT_REPOSITORY = "https://github.com/alphastorm/omp-ninfer"
PRODUCT_REPO_SLUG = "alphastorm/omp-ninfer"
RAW_PREFIX = f"https://raw.githubusercontent.com/{PRODUCT_REPO_SLUG}/"
NINFER_REPOSITORY = "https://github.com/alphastorm/ninfer"
RELEASE_WORKFLOW = ".github/workflows/release.yml"
# `signing.evidence` (docs/release-tree.md): the release promises that every provenance statement its
# rows bind is published (a set's beside the set on its component release, the image's on the product
# release) with its DSSE bundle beside it, so `audit` FAILs a missing one instead of SKIPping it.
# Trees made before the promise existed carry no such key; their manifests never change.
EVIDENCE = {"statements": "published", "bundles": "published"}
PRE_EVIDENCE_RELEASES = ("v0.13.0", "v0.13.1")
# The review ledger (docs/review-ledger.md) is required from the release after these on: a manifest of a
# later release carries `reviews` (the bound ledger, or null with a `reviews: ...` blocker); theirs has no
# such key and never changes.
PRE_REVIEW_LEDGER_RELEASES = ("v0.13.0", "v0.13.1")

# The one grammar of a product release name (docs/release-tree.md: "vX.Y.Z or vX.Y.Z-beta.N"),
# numbers without leading zeros.  It is also the folder name under manifests/, so nothing else
# passes: no other pre-release word ('-rc.1'), no build metadata, no path characters.
RELEASE_RE = re.compile(r"v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-beta\.[1-9][0-9]*)?")
# The states of a tree, in order (docs/release-tree.md, States), and the two blocker subjects they name.
STATES = ("draft", "candidate", "ready")
EXTERNAL_INSTALL = "external-install"
PINS = "pins"
REVIEWS_SUBJECT = "reviews"  # the blocker subject of the review ledger's gate


def blocker_subject(blocker: str) -> str:
    """The field or subject a blocker '<subject>: <reason>' names."""
    return blocker.split(": ", 1)[0]


# A file of a closed asset set -> the manifest row fields that bind it.
SCRIPT_FIELDS = {
    "Install-Release.ps1": "installer",
    "Control-Release.ps1": "controller",
    "Control-GpuOwner.ps1": "gpu_owner_controller",
    "Protect-StateRoot.ps1": "state_protection",
}
ROLE_FIELDS = {
    "package": "package",
    "source": "source_archive",
    "spdx": "sbom",
    "cdx": "cdx_sbom",
    "inner-sums": "inner_checksums",
    "receipt": "build_receipt",
    "outer-sums": "checksums",
}
CONTAINER_PACKAGE = "binary_archive"


def release_dir(root: Path, release: str) -> Path:
    return root / MANIFESTS_DIR / release


def repo_path(release: str, name: str) -> str:
    """The repository-relative POSIX path of a file of the tree."""
    return f"{MANIFESTS_DIR}/{release}/{name}"


def receipt_name(lane_id: str) -> str:
    return f"{QUALIFICATION_DIR}/{lane_id}.json"


def sums_name(lane_id: str) -> str:
    return f"{QUALIFICATION_DIR}/{lane_id}.SHA256SUMS"


def provenance_name(lane_id: str) -> str:
    """The tree copy of the lane's set provenance (formats/provenance.py's `.provenance.intoto.json`)."""
    return f"{QUALIFICATION_DIR}/{lane_id}{PROVENANCE_SUFFIX}"


def component_publication_name(lane_id: str) -> str:
    """The tree copy of the lane's component publication receipt (pipeline/stages/publish/)."""
    return f"{QUALIFICATION_DIR}/{lane_id}.component-publication.json"


def image_provenance_name(lane_id: str) -> str:
    """The tree copy of the container lane's image provenance."""
    return f"{QUALIFICATION_DIR}/{lane_id}.image{PROVENANCE_SUFFIX}"


def raw_url(commit: str, path: str) -> str:
    return f"{RAW_PREFIX}{commit}/{path}"


RAW_URL_RE = re.compile(re.escape(RAW_PREFIX) + r"(?P<commit>[0-9a-f]{40})/(?P<path>[A-Za-z0-9._/+-]+)")


def parse_raw_url(url: object) -> tuple[str, str] | None:
    if not isinstance(url, str):
        return None
    match = RAW_URL_RE.fullmatch(url)
    return (match.group("commit"), match.group("path")) if match else None


def download_url(repository: str, tag: str, name: str) -> str:
    """A release asset's immutable download URL: `<repository>/releases/download/<tag>/<name>`."""
    return f"{repository.rstrip('/')}/releases/download/{tag}/{name}"


def asset_url(tag: str, name: str) -> str:
    return download_url(NINFER_REPOSITORY, tag, name)


def image_provenance_asset(lane_id: str) -> str:
    """The product release's asset name of the image statement: the tree copy's file name (a release asset has no folder)."""
    return Path(image_provenance_name(lane_id)).name


def evidence_promise(release: str) -> dict[str, str] | None:
    """The `signing.evidence` a tree of `release` carries: EVIDENCE, or None for a tree made before the promise."""
    return None if release in PRE_EVIDENCE_RELEASES else dict(EVIDENCE)


def review_ledger_required(release: str) -> bool:
    """Whether a tree of `release` binds a review ledger (`reviews` in its manifest): every release after v0.13.1."""
    return release not in PRE_REVIEW_LEDGER_RELEASES


def signer_identity(release: str) -> str:
    return f"{PRODUCT_REPOSITORY}/{RELEASE_WORKFLOW}@refs/tags/{release}"


def package_prefix(kind: str) -> str:
    return CONTAINER_PACKAGE if kind == "container" else "package"


def role_fields(kind: str) -> list[tuple[str, str]]:
    """(role key, field prefix) for every file of a lane kind's closed set, outer sums last."""
    pairs = [(role, package_prefix(kind) if role == "package" else prefix) for role, prefix in ROLE_FIELDS.items() if role != "outer-sums"]
    if kind != "container":
        pairs += [(f"script:{name}", prefix) for name, prefix in SCRIPT_FIELDS.items()]
    return [*pairs, ("outer-sums", "checksums")]


def row_path(lane_id: str, kind: str) -> str:
    return "components.ninfer" if kind == "container" else f"components.ninfer_variants[{lane_id}]"


def sort_release_key(name: str) -> tuple:
    match = RELEASE_RE.fullmatch(name)
    if not match:
        return (-1,)
    major, minor, patch = (int(match.group(i)) for i in (1, 2, 3))
    beta = match.group(4)
    return (major, minor, patch, 0 if beta else 1, int(beta.split(".")[1]) if beta else 0)


def list_releases(root: Path) -> list[str]:
    base = root / MANIFESTS_DIR
    if not base.is_dir():
        return []
    names = [p.name for p in base.iterdir() if p.is_dir() and RELEASE_RE.fullmatch(p.name)]
    return sorted(names, key=sort_release_key)


IMAGE_REF_RE = re.compile(r"(?P<repo>[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+)@(?P<digest>sha256:[0-9a-f]{64})")


def split_image_reference(reference: object) -> tuple[str, str] | None:
    if not isinstance(reference, str):
        return None
    match = IMAGE_REF_RE.fullmatch(reference)
    return (match.group("repo"), match.group("digest")) if match else None

