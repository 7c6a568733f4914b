"""`audit`: re-verify a published release from its manifest alone, over the network.

For auditors who trust nothing but the manifest (and its Sigstore signature):

    python -m pipeline audit MANIFEST_PATH_OR_URL [--jobs N] [--json] [--cache DIR]

1. read the manifest (a path, or an HTTPS URL downloaded like any asset);
2. collect every URL / SHA-256 (/ bytes) binding of the release-tree contract
   (docs/release-tree.md): client binaries, the model artefact, every file of
   each lane's closed asset set, and the raw-pinned records (qualification
   summary, compatibility authority, lane receipts, publication receipt,
   acceptance);
3. refuse every URL that points outside its release: a release asset must be
   `<repository>/releases/download/<release_tag>/<file>`, the model
   `<repository>/resolve/<40-hex revision>/<file>`, a record
   `raw.githubusercontent.com/<owner>/<repo>/<40-hex commit>/<its own path>`;
   HTTPS only (plain HTTP is accepted for loopback addresses, i.e. tests:
   `pipeline.infra.net` decides, for the registry client and the
   qualification harness too);
4. download everything in parallel (`--jobs`) through `pipeline.infra.transfer`
   (streamed, SHA-256 computed while writing, HTTP Range resume of `.part`
   files, retries with backoff): size and hash are checked on the bytes as
   they arrive, never by a second read; a download stops at its pin (or,
   unpinned, at a MAX_*_BYTES cap) and at its deadline, and rejected bytes
   are deleted.  A file larger than `--range-threshold` (64 MiB) is fetched as
   parallel Range requests (`pipeline.infra.ranges`) within one budget of
   `--connections` (8) for all downloads at once, hashed in order as they
   arrive and resumed range by range; a server that does not serve ranges
   faithfully gets one stream.  `--timeout` is also one overall deadline for the whole run,
   measured from its start (`net.Deadline`, paced: plus the time its
   received bytes earn at `net.DEADLINE_FLOOR_RATE`), enforced inside every
   socket read of every request the audit makes (connect, status line and
   headers, body: `net.deadline_adapter`): once it passes, the item in
   progress FAILs naming the phase and URL and no further request is made;
5. check each lane's set with `pipeline.formats.assets.check_assets` (closed set,
   `SHA256SUMS` format and hashes, receipt, package payload, both SBOMs
   against the payload) and validate every SBOM document with
   `pipeline.formats.sbom.validate_file`;
6. verify the Sigstore bundle of each file in `signing.signed_files`
   (`pipeline.infra.sigstore.verify_bundle`, offline, pinned trust config)
   against the signer the *auditor* expects: the product repository's release
   workflow at the release tag (`--repository`, or `--certificate-identity`),
   on production Sigstore unless `--trust-config` says otherwise.  A manifest
   that declares another signer, product repository or Sigstore instance is
   refused before anything it names is fetched (a manifest cannot vouch for
   itself);
7. GET the container image's manifest by digest from the registry
   (`pipeline.infra.registry.fetch_manifest_by_digest`: the anonymous token
   flow of GHCR-style registries), hash the bytes and compare with the
   pinned digest.
8. fetch each set's provenance statement from its component release and the
   image's from the product release, check their subjects against the bound
   files (the rules verify applies, `formats/release/contract.py`) and their
   DSSE bundles against the expected signer; a missing one is FAIL when the
   manifest promises them (`signing.evidence`), else SKIP naming the field;
   a rebound row's set bundle is checked against the release workflow of
   the release that first shipped the set (`rebound_from` followed through
   the hash-pinned predecessor manifests), the auditor's identity with only
   its tag ref replaced;
9. read each published row's component tag through GitHub's REST API
   (anonymous, bounded, mirrored like every download): it must still name
   the row's source commit (a published tag never moves).

One `OK: <item>` or `FAIL: <item>: <reason>` line per item on stdout (with
`--json`: one JSON document on stdout, the lines on stderr), then a verdict.
Exit 0 when every item passed, 1 otherwise.  The audit runs through
`stage.execute()` (`AuditStage`, always run: it observes the world) and
records its report in the register as `<dist>/audit/<release>.json`
(kind `audit-report`, pipeline/formats/audit_report.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pipeline.errors import (
    EnvironmentProblem,
    InputError,
    IntegrityError,
    PipelineError,
    RemoteError,
    redact_url_credentials,
)
from pipeline.formats.release.manifest import (
    evidence_records,
    lane_row,
    lane_rows_at,
    parse_manifest,
    published_set_rows,
    row_records,
    section,
)
from pipeline.formats.release.names import BUNDLE_SUFFIX, EVIDENCE, ROW_RECORDS, review_ledger_required
from pipeline.infra import attestations, net, ranges
from pipeline.infra import progress as transfer_progress
from pipeline.infra.net import check_scheme
from pipeline.register import Artifact
from pipeline.stage import Context, Stage, execute
from pipeline.util import ui
from pipeline.util.fs import exclusive_lock, read_bytes_bounded
from pipeline.util.hashing import is_commit_hex, is_sha256_hex, sha256_bytes
from pipeline.util.jsonio import dig, expect_list, expect_object, loads_document
from pipeline.util.safepath import component_problem, safe_component, safe_relpath

DEFAULT_JOBS = 4
DEFAULT_TIMEOUT = 60.0
_BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_REPO_PATH = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
RAW_HOST = "raw.githubusercontent.com"
# Caps of what is fetched without a pinned size (a hostile server cannot fill memory or disk).
MAX_RELEASE_MANIFEST_BYTES = 4 * 1024 * 1024  # the release manifest
MAX_SIGNED_FILE_BYTES = 4 * 1024 * 1024  # a signed record of the release tree
MAX_BUNDLE_BYTES = 1024 * 1024  # a Sigstore bundle (a few KiB in practice)
MAX_RECORD_BYTES = 4 * 1024 * 1024  # a hash-pinned record without a recorded size
MAX_UNSIZED_ASSET_BYTES = 64 * 1024**3  # a hash-pinned asset whose size the manifest does not record
MAX_API_ANSWER_BYTES = 64 * 1024  # one answer of GitHub's REST API (a git ref or tag object: under 2 KiB)
MAX_TAG_DEPTH = 4  # annotated tags of annotated tags followed before the audit gives up
MAX_REBIND_CHAIN = 32  # predecessor manifests read to find the release that first shipped a rebound set
GITHUB_API = "https://api.github.com"

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


# -- what is audited --------------------------------------------------------------


@dataclass
class Binding:
    """One URL / SHA-256 (/ bytes) triple of the manifest, and where it must live."""

    label: str  # what the output line calls it
    field: str  # manifest field path of the URL
    url: Any
    sha256: Any
    size: Any = None
    expected_prefix: str | None = None  # the URL must be exactly expected_prefix + name
    name: str | None = None
    kind: str = "asset"  # asset | record | set-file
    group: str | None = None  # lane id for set files
    role: str | None = None
    location_error: str | None = None
    sha_field: str | None = None  # manifest field path of the SHA-256

    @property
    def cache_name(self) -> str:
        base = (self.name if isinstance(self.name, str) else None) or url_file_name(self.url) or "download"
        if self.kind == "record" and is_sha256_hex(self.sha256):
            return f"{self.sha256[:16]}-{base}"  # records of different lanes may share a file name
        return base


@dataclass
class Item:
    name: str
    ok: bool | None  # None: skipped (allowed by a flag)
    reason: str = ""
    kind: str = "asset"
    details: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One line whatever the data in it (`ui.printable`: no control character from a manifest or a server)."""
        if self.ok is None:
            return ui.printable(f"SKIP: {self.name}: {self.reason}")
        if self.ok:
            return ui.printable(f"OK: {self.name}" + (f" ({self.reason})" if self.reason else ""))
        return ui.printable(f"FAIL: {self.name}: {self.reason}")

    def to_json(self) -> dict[str, Any]:
        return {"item": self.name, "kind": self.kind, "result": {True: "ok", False: "fail", None: "skip"}[self.ok], "reason": self.reason, **self.details}


@dataclass
class AuditReport:
    manifest: str
    release: str | None = None
    status: str | None = None
    items: list[Item] = field(default_factory=list)
    bytes_downloaded: int = 0
    download_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def failed(self) -> list[Item]:
        return [item for item in self.items if item.ok is False]

    @property
    def passed(self) -> bool:
        return bool(self.items) and not self.failed

    def verdict(self) -> str:
        ok = sum(1 for i in self.items if i.ok)
        skipped = sum(1 for i in self.items if i.ok is None)
        rate = ui.human_bytes(self.bytes_downloaded / self.download_seconds) + "/s" if self.download_seconds > 0 else "-"
        tail = f"{ui.human_bytes(self.bytes_downloaded)} downloaded in {self.download_seconds:.1f} s ({rate}), audit took {self.seconds:.1f} s"
        extra = f", {skipped} skipped" if skipped else ""
        if self.passed:
            return f"AUDIT PASSED: {_word(self.release)}: all {ok} items OK{extra}; {tail}"
        return f"AUDIT FAILED: {_word(self.release)}: {len(self.failed)} of {len(self.items)} items failed{extra}; {tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "release": self.release,
            "status": self.status,
            "passed": self.passed,
            "verdict": self.verdict(),
            "items": [item.to_json() for item in self.items],
            "failed": len(self.failed),
            "bytes_downloaded": self.bytes_downloaded,
            "download_seconds": round(self.download_seconds, 3),
            "seconds": round(self.seconds, 3),
        }


# -- URL rules --------------------------------------------------------------------


def url_file_name(url: Any) -> str | None:
    """The last path segment of a URL from the manifest; None when it is no URL (or not a string)."""
    if not isinstance(url, str):
        return None
    try:
        return Path(urlsplit(url).path).name or None
    except ValueError:  # an unbalanced '[' of an IPv6 host: the location check reports it
        return None


def _word(value: Any) -> str:
    """A manifest value shown in a line: as it is when it is a bare word (a release name, a status), else quoted."""
    return value if isinstance(value, str) and _BARE_NAME.fullmatch(value) else ui.quoted(value)


def _items(value: Any) -> list[Any]:
    """A manifest list, or nothing when the field holds another type (the row checks report the field)."""
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


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
        if not _BARE_NAME.fullmatch(name) or url != expected:
            return f"points outside its release: expected {expected}"
    return None


def _raw_prefixes(product_repository: str) -> list[str]:
    """URL prefixes (before '<commit>/<path>') of raw files of the product repository."""
    repository = product_repository.rstrip("/")
    prefixes = [f"{repository}/raw/"]
    parts = urlsplit(repository)
    if parts.hostname == "github.com" and _REPO_PATH.fullmatch(parts.path.strip("/")):
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


# -- collecting the bindings of a manifest ------------------------------------------


def collect_bindings(manifest: dict[str, Any]) -> list[Binding]:
    release = manifest.get("release")
    product_repository = _text(dig(manifest, "product.repository"))
    bindings: list[Binding] = []
    components = section(manifest, "components")

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

    for where, row in lane_rows_at(manifest):
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

    qualification = section(manifest, "qualification")
    if "public_url" in qualification:
        bindings.append(_record("qualification summary", "qualification", qualification, "summary", "summary_sha256", product_repository, release))
        acceptance = qualification.get("acceptance")
        if isinstance(acceptance, dict) and "public_url" in acceptance:
            bindings.append(_record("external-installation acceptance", "qualification.acceptance", acceptance, "path", "sha256", product_repository, release))
    compatibility = section(manifest, "compatibility")
    if "public_url" in compatibility:
        bindings.append(_record("compatibility authority", "compatibility", compatibility, "path", "sha256", product_repository, release))
    reviews = manifest.get("reviews")
    if isinstance(reviews, dict) and "public_url" in reviews:
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


def check_manifest_shapes(manifest: dict[str, Any], *, file: str) -> None:
    """Every binding-holding field that is present (and not null) has its contract's type; InputError naming it."""
    for where in _OBJECT_FIELDS:
        value = dig(manifest, where)
        if value is not None:
            expect_object(value, source=file, field=where)
    for where in _LIST_FIELDS:
        value = dig(manifest, where)
        if value is not None:
            expect_list(value, source=file, field=where)
    signing = manifest.get("signing")
    if isinstance(signing, dict) and "evidence" in signing and signing["evidence"] != EVIDENCE:
        raise InputError(
            "is not the evidence promise this audit knows",
            file=file,
            field="signing.evidence",
            found=signing["evidence"],
            expected=f"{json.dumps(EVIDENCE, sort_keys=True)}, or no key (a release made before it)",
            why="the promise decides whether a missing provenance statement or DSSE bundle fails the audit",
            fix="audit with the pipeline of the release's own version",
        )
    product = dig(manifest, "product.repository")
    if product is not None and not isinstance(product, str):
        raise InputError("must be a URL string", file=file, field="product.repository", found=product, expected="the product repository URL")
    for index, platform in enumerate(dig(manifest, "components.omp.platforms") or []):
        expect_object(platform, source=file, field=f"components.omp.platforms[{index}]")
    for index, row in enumerate(dig(manifest, "components.ninfer_variants") or []):
        expect_object(row, source=file, field=f"components.ninfer_variants[{index}]")
    for where, row in lane_rows_at(manifest):
        for record in ("qualification", *ROW_RECORDS):
            if row.get(record) is not None:
                expect_object(row[record], source=file, field=f"{where}.{record}")


def check_manifest_names(manifest: dict[str, Any], *, file: str) -> None:
    """Every manifest value that becomes part of a path under --cache, checked before anything is fetched.

    The release names the cache folder, lane ids the folders of their sets,
    asset names and record paths the files; a hostile manifest must not steer
    any of them outside --cache (an absolute id, '..', a device name).
    """
    safe_component(manifest.get("release"), file=file, field="release", max_len=100, expected="a release name such as 'v0.13.1'")
    check_manifest_shapes(manifest, file=file)
    components = section(manifest, "components")
    omp = section(components, "omp")
    platforms = omp.get("platforms")
    for index, platform in enumerate(platforms if isinstance(platforms, list) else []):
        if isinstance(platform, dict) and platform.get("artifact_name") is not None:
            safe_component(platform["artifact_name"], file=file, field=f"components.omp.platforms[{index}].artifact_name")
    model = section(components, "model")
    if model.get("artifact_name") is not None:
        safe_component(model["artifact_name"], file=file, field="components.model.artifact_name")
    seen: dict[str, str] = {}
    for where, row in lane_rows_at(manifest):
        if row.get("id") is not None:
            lane = safe_component(row["id"], file=file, field=f"{where}.id", max_len=100, expected="a lane id such as 'rtx4090-windows-native'")
            if lane.casefold() in seen:
                raise InputError("two lane rows share an id", file=file, field=f"{where}.id", found=lane, expected=f"an id not used by {seen[lane.casefold()]}",
                                 why="each lane's set is checked in its own folder; two rows with one id would mix their files")
            seen[lane.casefold()] = where
        for stem, _role in SET_FIELDS:
            if row.get(f"{stem}_name") is not None:
                safe_component(row[f"{stem}_name"], file=file, field=f"{where}.{stem}_name")
    for record in evidence_records(manifest):
        if record.path is not None:
            safe_relpath(record.path, file=file, field=f"{record.field}.{record.path_key}")
    signing = section(manifest, "signing")
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


# -- the auditor --------------------------------------------------------------------


class _Overall:
    """The bytes all parallel downloads received (the report's `bytes_downloaded`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self, count: int) -> None:
        with self.lock:
            self.count += count


@dataclass
class Fetched:
    binding: Binding
    path: Path | None
    sha256: str | None
    size: int | None
    error: str | None = None
    resumed_at: tuple[int, ...] = ()
    late: bool = False  # the error is a deadline that passed (never a SKIP, whatever the flags)


class Auditor:
    def __init__(
        self,
        source: str,
        *,
        jobs: int = DEFAULT_JOBS,
        connections: int = ranges.DEFAULT_CONNECTIONS,
        range_threshold: int = ranges.THRESHOLD,
        cache: Path | None = None,
        allow_unsigned: bool = False,
        trust_config: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | None = None,
        progress: bool = True,
        lanes_dir: Path | None = None,
        session=None,
        on_item: Callable[[Item], None] | None = None,
        mirrors: list[tuple[str, str]] | None = None,
        skip_larger_than: int | None = None,
        repository: str | None = None,
        certificate_identity: str | None = None,
        certificate_oidc_issuer: str | None = None,
        github_trusted_root: Path | None = None,
    ) -> None:
        self.source = source
        self.shown_source = redact_url_credentials(source)  # what every record and line names (a URL's password never)
        self.github_trusted_root = github_trusted_root  # gh --custom-trusted-root for GitHub's release attestations
        # Who must have signed is the auditor's to say, never the manifest's (a manifest naming its own
        # signer proves nothing): the product repository's release workflow at the release tag by default.
        self.repository = repository
        self.certificate_identity = certificate_identity
        self.certificate_oidc_issuer = certificate_oidc_issuer
        self.expected_signer = None  # SignerIdentity, set once the manifest names its release
        self.jobs = max(1, jobs)
        # One budget of connections for every download at once: a file above range_threshold
        # fetches parallel ranges over the connections the other --jobs leave free.
        self.connections = max(1, connections)
        self.range_threshold = range_threshold
        self.budget = threading.BoundedSemaphore(self.connections)
        self._bars: Any = False  # the live progress display while the assets download
        self.cache_root = cache
        self.allow_unsigned = allow_unsigned
        self.trust_config = trust_config
        self.timeout = timeout
        self.retries = retries
        self.progress = progress
        self.lanes_dir = lanes_dir
        self._session = session
        self._local = threading.local()
        self.on_item = on_item
        self.mirrors = list(mirrors or [])
        self.skip_larger_than = skip_larger_than
        self.report = AuditReport(manifest=self.shown_source)
        self.deadline: net.Deadline | None = None  # the run's overall deadline, from the start of run()
        self._manifest: dict[str, Any] = {}
        self._rebound: dict[str, Any] = {}  # lane -> (first release, chain) or _Refused

    # -- plumbing
    def _http(self):
        if self._session is not None:
            return self._session
        session = getattr(self._local, "session", None)
        if session is None:
            import requests

            session = net.deadline_session(requests.Session())  # the overall deadline bounds every socket read
            session.headers["User-Agent"] = "omp-ninfer-pipeline-audit"
            self._local.session = session
        return session

    def add(self, item: Item) -> None:
        self.report.items.append(item)
        if self.on_item:
            self.on_item(item)

    def fetch_url(self, url: str) -> str:
        """Where the bytes of `url` are fetched: the first --mirror prefix that matches, else the URL itself.

        Location rules always apply to the manifest's own URLs; a mirror only
        changes where the bytes come from, and they are still checked against
        the manifest's sizes and hashes.
        """
        for source, target in self.mirrors:
            if url.startswith(source):
                return target + url[len(source):]
        return url

    @property
    def is_url(self) -> bool:
        return urlsplit(self.source).scheme in ("http", "https")

    def _cache_dir(self, release: str) -> Path:
        if self.cache_root is not None:
            return self.cache_root / release
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return base / "omp-ninfer-audit" / release

    def _download(self, url: str, target: Path, *, sha256: str | None, size: int | None, label: str, on_bytes=None, cap: int | None = None, redirects: str = "same-origin") -> Fetched:
        """Fetch into target (resuming), hashing while writing; reuse a complete cached copy.

        Bounded by the pinned `size`, else by `cap` (unpinned documents), else
        by MAX_UNSIZED_ASSET_BYTES (hash-pinned files without a recorded size).
        """
        binding = Binding(label=label, field="", url=url, sha256=sha256, size=size)
        url = self.fetch_url(url)
        try:
            # One writer per cache file: the .part and the finished file are claimed under an exclusive
            # lock, so a second audit sharing --cache waits, then re-uses (re-hashes) what the first made.
            # The lock is a hidden name (no cached file's name starts with '.') that is never removed.
            with exclusive_lock(target.with_name(f".{target.name}.lock"), waiting=f"{label}: another audit is fetching it into this cache; waiting for it",
                                on_wait=ui.info, give_up=self._still_waiting(url, target, sha256, size)):
                return self._fetch_claimed(binding, url, target, label=label, on_bytes=on_bytes, cap=cap, redirects=redirects)
        except PipelineError as error:
            return Fetched(binding, None, None, None, error=_short_remote(error), late=isinstance(error, net.DeadlinePassed))

    def _still_waiting(self, url: str, target: Path, sha256: Any, size: Any) -> Callable[[], None]:
        """While another audit holds a cache file: the bytes it writes into the file's .part earn this run's
        deadline time, as bytes this run received would (at 256 KiB/s); raise its error once it has passed."""
        part = target.with_name(target.name + ".part")
        seen = [-1]

        def check() -> None:
            if self.deadline is None:
                return
            held = _held_bytes(part, sha256, size)
            if seen[0] >= 0 and held > seen[0]:
                self.deadline.earn(held - seen[0])
            seen[0] = max(seen[0], held)
            if self.deadline.passed():
                raise self.deadline.error(net.BEFORE, url)
        return check

    def _fetch_claimed(self, binding: Binding, url: str, target: Path, *, label: str, on_bytes, cap: int | None, redirects: str) -> Fetched:
        """`_download` while this run holds the cache file's lock."""
        from pipeline.infra import transfer

        sha256, size = binding.sha256, binding.size
        if os.path.lexists(target):
            # A complete file from an earlier run is re-used only when the manifest pins its hash and
            # its bytes hash to it now (never through a link); anything unpinned (signed files,
            # bundles) is fetched anew.
            cached = _hash_cached(target, size) if sha256 is not None else None
            if cached is not None and cached[0] == sha256:
                return Fetched(binding, target, sha256, cached[1])
            _remove_cached(target)
        kwargs: dict[str, Any] = {}
        if self.retries is not None:
            kwargs["retries"] = self.retries
        if size is None:
            kwargs["max_size"] = cap if cap is not None else MAX_UNSIZED_ASSET_BYTES
            if cap is None:
                kwargs["deadline"] = net.deadline_for(self.timeout, MAX_UNSIZED_ASSET_BYTES)
        result = transfer.download(
            url,
            target,
            label=label,
            session=self._http(),
            expected_size=size,
            expected_sha256=sha256,
            timeout=self.timeout,
            progress=self._bars,
            on_bytes=on_bytes,
            connections=self.connections,
            range_threshold=self.range_threshold,
            budget=self.budget,
            redirects=redirects,
            resume=sha256 is not None,  # unpinned bytes of an earlier run may be another version
            overall=self.deadline,
            **kwargs,
        )
        return Fetched(binding, result.path, result.sha256, result.size, resumed_at=tuple(getattr(result, "resumed_at", ())))

    # -- steps
    def load_manifest(self) -> tuple[dict[str, Any], bytes] | None:
        if self.is_url:
            problem = check_scheme(self.source)
            if problem:
                self.add(Item(f"manifest {self.shown_source}", False, problem, "manifest"))
                return None
            with tempfile.TemporaryDirectory(prefix="omp-ninfer-audit-") as tmp:
                fetched = self._download(self.source, Path(tmp) / "manifest.json", sha256=None, size=None, label="manifest.json", cap=MAX_RELEASE_MANIFEST_BYTES, redirects="none")
                if fetched.error or fetched.path is None:
                    self.add(Item(f"manifest {self.shown_source}", False, fetched.error or "download failed", "manifest"))
                    return None
                data = fetched.path.read_bytes()
        else:
            try:
                data = read_bytes_bounded(self.source, MAX_RELEASE_MANIFEST_BYTES, what="release manifest")
            except OSError as exc:
                raise InputError(f"cannot read the manifest: {exc.strerror}", file=self.source) from None
        try:
            manifest = parse_manifest(data, source=self.source, check_type=False, max_bytes=MAX_RELEASE_MANIFEST_BYTES)
        except InputError as exc:
            self.add(Item(f"manifest {self.shown_source}", False, exc.what, "manifest"))
            return None
        if not isinstance(manifest.release, str):
            self.add(Item(f"manifest {self.shown_source}", False, "is not a release manifest (no 'release')", "manifest"))
            return None
        return dict(manifest.document), data

    def run(self) -> AuditReport:
        started = time.monotonic()
        self.deadline = net.Deadline(
            self.timeout,
            what=f"the audit's overall deadline of {self.timeout:g} s",
            why="--timeout bounds the whole audit from its start: every connection, status line, header and body, retries included, plus the time its received bytes earn at 256 KiB/s; a server that trickles bytes cannot keep it running",
            fix="run the audit again with a larger --timeout, or on a faster connection (complete files in --cache are re-used, partial ones resumed)",
            paced=True,
            started=started,
        )
        loaded = self.load_manifest()
        if loaded is None:
            self.report.seconds = time.monotonic() - started
            return self.report
        manifest, data = loaded
        release = manifest["release"]
        self.report.release = release
        self.report.status = manifest.get("status")
        label = f"manifest {Path(urlsplit(self.source).path).name if self.is_url else self.source}"
        try:
            check_manifest_names(manifest, file=self.source)
        except InputError as error:
            self.add(Item(label, False, error.render(), "manifest"))
            self.report.seconds = time.monotonic() - started
            return self.report
        where = _manifest_release_problem(self.source, release)
        self.add(Item(label, where is None, where or f"release {_word(release)}, status {_word(manifest.get('status'))}, sha256 {sha256_bytes(data)}", "manifest"))
        if where is not None:  # a manifest outside its release tree binds nothing: fetch nothing it names
            self.report.seconds = time.monotonic() - started
            return self.report
        if not self._check_signer(manifest):  # a manifest that claims another authority binds nothing either
            self.report.seconds = time.monotonic() - started
            return self.report
        cache = self._cache_dir(release)
        bindings = collect_bindings(manifest)

        # A candidate's records get their raw URLs only after acceptance (the pin dance), and only the
        # ready release is signed: at status candidate those are SKIP (never OK), every asset still counts.
        candidate = manifest.get("status") == "candidate"
        if candidate:
            self.allow_unsigned = True
        runnable: list[Binding] = []
        for binding in bindings:
            problem = binding_problem(binding)
            if problem and candidate and binding.kind == "record" and binding.url is None and is_sha256_hex(binding.sha256):
                self.add(Item(binding.label, None, f"not pinned yet: {binding.field} is null at status candidate (records are pinned after acceptance); the record's SHA-256 is not checked here", binding.kind, {"field": binding.field}))
            elif problem:
                self.add(Item(binding.label, False, problem, binding.kind, {"field": binding.field}))
            elif self.skip_larger_than is not None and isinstance(binding.size, int) and binding.size > self.skip_larger_than and binding.kind != "set-file":
                self.add(Item(binding.label, None, f"{ui.human_bytes(binding.size)} is larger than --skip-larger-than {ui.human_bytes(self.skip_larger_than)}: not downloaded, its SHA-256 is not checked", binding.kind, {"field": binding.field}))
            else:
                runnable.append(binding)
        needed = sum(b.size for b in runnable if isinstance(b.size, int))
        cache.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(cache).free
        if needed > free:
            raise EnvironmentProblem(
                f"the cache folder has {ui.human_bytes(free)} free, the release binds {ui.human_bytes(needed)}",
                file=cache,
                why="every asset is kept in the cache while it is checked (and for resuming)",
                fix="pass --cache DIR on a disk with enough room",
            )
        fetched = self._fetch_all(runnable, cache)
        by_group: dict[str, list[Fetched]] = {}
        for result in fetched:
            self.add(self._judge(result))
            if result.binding.group:
                by_group.setdefault(result.binding.group, []).append(result)

        self._manifest = manifest
        for row_where, row in published_set_rows(manifest):
            lane = row.get("id") or row_where
            self._audit_set(lane, row, by_group.get(lane, []), cache)
        for row_where, row in lane_rows_at(manifest):
            self._audit_tag(row_where, row, cache)
        for result in fetched:
            if result.binding.role in ("spdx", "cdx") and result.error is None and self._matches(result):
                self._validate_sbom(result)
        self._audit_signatures(manifest, data)
        self._audit_reviews(manifest, fetched)
        self._audit_github_attestations([r for r in fetched if r.error is None and r.path is not None and self._matches(r)], cache)
        container = dig(manifest, "components.ninfer")
        if isinstance(container, dict) and "oci_reference" in container:
            self._audit_image(container)
            self._audit_image_provenance(container, cache)
        self.report.seconds = time.monotonic() - started
        return self.report

    def _audit_github_attestations(self, fetched: list[Fetched], cache: Path) -> None:
        """GitHub's own attestation of each file this audit hashed that is a GitHub release asset
        (pipeline/infra/attestations.py: the real gh verifies it; SKIP where gh, a token or immutability is missing)."""
        groups = attestations.release_asset_groups([(r.binding.url, r.path) for r in fetched if r.path is not None])
        for (slug, tag), files in sorted(groups.items()):
            answer, problem = self._api_json(f"{GITHUB_API}/repos/{slug}/releases/tags/{quote(tag, safe='')}", cache / "api", what=f"release {tag}")
            immutable, unread = attestations.immutability(answer, problem, tag=tag)
            for name, ok, reason in attestations.audit_release(files, repository=slug, tag=tag, immutable=immutable, gh=attestations.find_gh(),
                                                               trusted_root=self.github_trusted_root, unread=unread):
                self.add(Item(name, ok, reason, "github-attestation", {"repository": slug, "tag": tag}))

    def _fetch_all(self, bindings: list[Binding], cache: Path) -> list[Fetched]:
        if not bindings:
            return []
        sizes = [b.size for b in bindings]
        total = sum(sizes) if all(isinstance(n, int) for n in sizes) else None  # percent only when every size is known
        overall = _Overall()
        started = time.monotonic()
        bars = transfer_progress.TransferProgress("audit: all assets", total) if transfer_progress.wanted(self.progress) else None
        self._bars = bars or False

        def one(binding: Binding) -> Fetched:
            # Lane folders one level below the fixed kind folders, so no lane id can name one of those.
            folder = cache / "lanes" / binding.group if binding.group else cache / binding.kind
            cap = MAX_RECORD_BYTES if binding.kind == "record" else None
            result = self._download(binding.url, folder / binding.cache_name, sha256=binding.sha256, size=binding.size, label=binding.label, on_bytes=overall, cap=cap)
            result.binding = binding
            return result

        try:
            if self.jobs == 1 or len(bindings) <= 1:
                results = [one(b) for b in bindings]
            else:
                # Largest first (LPT): the model listed last would leave the other workers idle at the
                # end (12% of the wall time on the bench's release); results keep the manifest's order.
                order = sorted(range(len(bindings)), key=lambda i: bindings[i].size if isinstance(bindings[i].size, int) else 0, reverse=True)
                with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                    fetched = dict(zip(order, pool.map(one, [bindings[i] for i in order]), strict=True))
                results = [fetched[i] for i in range(len(bindings))]
        finally:
            self._bars = False
            if bars:
                bars.close()
        self.report.bytes_downloaded += overall.count
        self.report.download_seconds += time.monotonic() - started
        return results

    @staticmethod
    def _matches(result: Fetched) -> bool:
        binding = result.binding
        return result.sha256 == binding.sha256 and (binding.size is None or result.size == binding.size)

    def _judge(self, result: Fetched) -> Item:
        binding = result.binding
        details = {"field": binding.field, "url": binding.url}
        if result.error:
            return Item(binding.label, False, result.error, binding.kind, details)
        details.update({"sha256": result.sha256, "bytes": result.size})
        if binding.size is not None and result.size != binding.size:
            self._quarantine(result)
            return Item(binding.label, False, f"size mismatch: got {result.size} bytes, the manifest binds {binding.size}", binding.kind, details)
        if result.sha256 != binding.sha256:
            self._quarantine(result)
            return Item(binding.label, False, f"SHA-256 mismatch: got {result.sha256}, the manifest binds {binding.sha256}", binding.kind, details)
        note = f"{ui.human_bytes(result.size or 0)}, sha256 {result.sha256[:16]}…"
        if result.resumed_at:
            note += ", resumed with HTTP Range at byte " + ", ".join(str(offset) for offset in result.resumed_at)
        return Item(binding.label, True, note, binding.kind, details)

    def _audit_reviews(self, manifest: dict[str, Any], fetched: list[Fetched]) -> None:
        """The review ledger's gate (formats/review_ledger.py) over the published ledger: its bytes were checked
        against `reviews.sha256` with the other records; here every review must be closed, no in-scope P0/P1
        confirmed or unresolved, every deferred finding tracked, every reviewed digest one the manifest binds.
        FAIL at status ready; at draft or candidate the councils may still be at work (SKIP naming what holds)."""
        from pipeline.formats.review_ledger import bound_ledger

        release = str(manifest.get("release"))
        label = "review ledger gate"
        if "reviews" not in manifest and not review_ledger_required(release):
            self.add(Item(label, None, f"made before the review ledger ({release} binds no reviews)", "record"))
            return
        entry = manifest.get("reviews")
        result = next((r for r in fetched if r.binding.field == "reviews.public_url"), None)
        if isinstance(entry, dict) and (result is None or result.error or result.path is None or not self._matches(result)):
            self.add(Item(label, False if manifest.get("status") == "ready" else None, "the bound ledger could not be read at its URL with its SHA-256 (see the review ledger line)", "record"))
            return
        try:
            data = result.path.read_bytes() if result is not None and result.path is not None else None
            ledger, failures = bound_ledger(manifest, data, release=release, origin=str(entry.get("public_url")) if isinstance(entry, dict) else "manifest.json")
        except PipelineError as error:
            self.add(Item(label, False, error.render(), "record"))
            return
        if not failures:
            assert ledger is not None
            self.add(Item(label, True, f"{len(ledger.reviews)} reviews closed; no in-scope P0/P1 open; {len(ledger.deferred())} deferred, each tracked; every reviewed digest is bound; every bound artefact is reviewed", "record"))
            return
        text = "; ".join(failure.what for failure in failures)
        self.add(Item(label, False if manifest.get("status") == "ready" else None, text if manifest.get("status") == "ready" else f"status {_word(manifest.get('status'))}: {text}", "record"))

    @staticmethod
    def _quarantine(result: Fetched) -> None:
        """Rejected bytes are deleted: nothing that failed its pin stays in the cache."""
        if result.path is not None:
            result.path.unlink(missing_ok=True)
            result.path = None

    # -- closed sets
    def _audit_set(self, lane: str, row: dict[str, Any], results: list[Fetched], cache: Path) -> None:
        label = f"set {lane} {row.get('release_tag')}"
        sums = next((r for r in results if r.binding.role == "outer-sums"), None)
        if sums is None:
            self.add(Item(label, False, "the row binds no outer SHA256SUMS (checksums_url)", "set"))
            return
        if sums.error or not self._matches(sums) or sums.path is None:
            self.add(Item(label, False, "its outer SHA256SUMS could not be verified (see above)", "set"))
            return
        try:
            from pipeline.formats.assets import parse_sums
        except ImportError:  # pragma: no cover - pipeline/assets.py is part of the package stage
            self.add(Item(label, False, "set check not available: pipeline.formats.assets is missing from this checkout", "set"))
            return
        try:
            listed = parse_sums(sums.path.read_bytes(), file=sums.binding.url)
        except PipelineError as error:
            self.add(Item(label, False, f"SHA256SUMS: {error.what}", "set"))
            return
        problems: list[str] = []
        for result in results:
            binding = result.binding
            if binding.role == "outer-sums":
                continue
            if binding.name not in listed:
                problems.append(f"{binding.field} names {binding.name!r}, which SHA256SUMS does not list")
            elif listed[binding.name] != binding.sha256:
                problems.append(f"{binding.field.rsplit('.', 1)[0]}.{binding.field.rsplit('.', 1)[1].removesuffix('_url')}_sha256 differs from SHA256SUMS for {binding.name}")
        # Every listed file is part of the set: fetch the ones the row does not bind by field.
        bound = {r.binding.name: r for r in results}
        prefix = f"{str(row.get('repository') or '').rstrip('/')}/releases/download/{row.get('release_tag')}/"
        extra = [
            Binding(label=f"{lane} {name}", field=f"SHA256SUMS: {name}", url=prefix + name, sha256=digest, name=name, kind="set-file", group=lane, role="listed")
            for name, digest in sorted(listed.items())
            if name not in bound
        ]
        for result in self._fetch_all(extra, cache):
            self.add(self._judge(result))
            bound[result.binding.name] = result
        available = {}
        for name in [*sorted(listed), "SHA256SUMS"]:
            result = bound.get(name)
            if result is None or result.path is None or result.error or not self._matches(result):
                problems.append(f"{name} is not available with the bytes SHA256SUMS records")
            else:
                available[name] = result.path
        if problems:
            self.add(Item(label, False, "; ".join(problems), "set"))
            return
        try:
            from pipeline.formats.assets import check_assets
            from pipeline.formats.lanes import load_lanes

            lanes = load_lanes(self.lanes_dir)
            lane_obj = lanes.get(lane)
            beta = lane_obj.beta_from_tag(row.get("release_tag")) if lane_obj is not None else None
            # The set is assembled in a folder of this run's own (another audit sharing --cache
            # assembles its copy beside it), removed once it is checked.
            (cache / "sets").mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=f".{lane}.", dir=cache / "sets") as staging:
                folder = Path(staging) / lane
                folder.mkdir()
                for name, path in available.items():
                    _link(path, folder / name)
                report = check_assets(folder, lane=lane_obj, beta=beta, lanes_dir=self.lanes_dir)
        except PipelineError as error:
            self.add(Item(label, False, error.render(), "set"))
            return
        self.add(Item(label, True, f"closed set of {len(report.files)} files, SHA256SUMS matches, receipt and payload agree, SPDX {report.spdx_files} files / CycloneDX {report.cdx_components} components", "set"))
        if lane_obj is not None:
            from pipeline.formats.assets import asset_set

            self._audit_provenance(lane, asset_set(lane_obj, beta).package_root, prefix, report.files, cache, row)

    def _audit_provenance(self, lane: str, package_root: str, prefix: str, files: dict[str, str], cache: Path, row: dict[str, Any]) -> None:
        """The set's SLSA statement beside it on its component release: subjects exactly the set's files; its DSSE bundle.

        `prefix` is the row's download folder, `<repository>/releases/download/<release_tag>/`: for a
        lane rebound unchanged the component release that first shipped the set (its tag is copied).
        """
        from pipeline.formats import provenance
        from pipeline.formats.release.contract import check_set_statement

        url = prefix + provenance.set_statement_name(package_root)
        self._audit_statement(
            lane, url, cache / "provenance" / lane, row, "provenance",
            lambda statement: check_set_statement(statement, files, row, origin=url, what="the set's files"),
            lambda statement: f"{len(statement.subjects)} subjects are exactly the set's files",
        )

    def _audit_image_provenance(self, row: dict[str, Any], cache: Path) -> None:
        """The image's SLSA statement on the product release: its one subject is the image manifest digest the row binds."""
        from pipeline.formats.release.contract import check_image_statement
        from pipeline.formats.release.names import image_provenance_asset

        lane = row.get("id")
        if not isinstance(lane, str):
            return  # check_manifest_names refused an unsafe id; a row without one has no statement name
        url = self._product_release_url(image_provenance_asset(lane))
        if url is None:
            return  # no product repository: the signer item has failed already
        self._audit_statement(
            lane, url, cache / "provenance" / lane, row, "image_provenance",
            lambda statement: check_image_statement(statement, row, origin=url),
            lambda statement: f"its subject is the image manifest {row.get('oci_manifest_digest')}",
        )

    def _evidence_reason(self, row: dict[str, Any], key: str, url: str, *, product_release: bool) -> str | None:
        """Why a missing statement or bundle at `url` is SKIP, not FAIL; None when the manifest promises it (FAIL)."""
        promise = dig(self._manifest, "signing.evidence")
        if promise is None:
            return f"made before signing.evidence (the release promises no published provenance evidence); nothing at {url}"
        if not isinstance(row.get(key), dict):
            return f"the row binds no {key} record, so signing.evidence promises no statement for it; nothing at {url}"
        status = self._manifest.get("status")
        if product_release and status != "ready":
            return f"status {status}: the product release is published after ready; nothing at {url} yet"
        return None

    def _audit_statement(self, lane: str, url: str, folder: Path, row: dict[str, Any], key: str, check: Callable[[Any], None], note: Callable[[Any], str]) -> None:
        """One published provenance statement and its DSSE bundle (URL + bundle suffix), verified offline against the expected signer.

        Under `signing.evidence` a missing (404) statement or bundle the row binds is FAIL naming the URL
        (a bundle SKIP only with --allow-unsigned or at status candidate, as for signed files); a manifest
        made before the promise keeps SKIP.  A statement must pass `check` and be the tree copy the row binds.
        """
        from pipeline.formats import provenance
        from pipeline.infra.sigstore import SignatureError, verify_dsse_bundle

        name = url_file_name(url) or "statement"
        product_release = key == "image_provenance"
        label = f"provenance {lane} {name}"
        fetched = self._download(url, folder / name, sha256=None, size=None, label=name, cap=MAX_RECORD_BYTES)
        if fetched.error or fetched.path is None:
            skip = self._evidence_reason(row, key, url, product_release=product_release) if "HTTP 404" in (fetched.error or "") else None
            if skip is not None:
                self.add(Item(label, None, skip, "provenance", {"url": url}))
            elif "HTTP 404" in (fetched.error or ""):
                self.add(Item(label, False, f"not published: no provenance statement at {url} (signing.evidence promises it, with its DSSE bundle beside it)", "provenance", {"url": url}))
            else:
                self.add(Item(label, False, fetched.error or "download failed", "provenance", {"url": url}))
            return
        data = fetched.path.read_bytes()
        record = section(row, key)
        try:
            statement = provenance.read_statement(data, origin=url)
            check(statement)
            if is_sha256_hex(record.get("sha256")) and sha256_bytes(data) != record["sha256"]:
                where = row.get("id") or "the row"
                raise IntegrityError("the published statement is not the tree copy the manifest binds", file=url, field=f"{where}.{key}.sha256", found=sha256_bytes(data), expected=record["sha256"], fix="publish the statement the release tree copies, byte for byte")
        except PipelineError as error:
            self.add(Item(label, False, error.render(), "provenance", {"url": url}))
            return
        self.add(Item(label, True, f"{note(statement)}; source {statement.external['source_commit']}, builder {statement.builder_id}", "provenance", {"sha256": sha256_bytes(data), "url": url}))
        signing = section(self._manifest, "signing")
        bundle_url = url + (signing.get("bundle_suffix") or BUNDLE_SUFFIX)
        bundle = self._download(bundle_url, folder / url_file_name(bundle_url), sha256=None, size=None, label=url_file_name(bundle_url), cap=MAX_BUNDLE_BYTES)
        bundle_label = f"signature {name}"
        if bundle.error or bundle.path is None:
            missing = "HTTP 404" in (bundle.error or "")
            skip = self._evidence_reason(row, key, bundle_url, product_release=product_release) if missing else None
            if skip is None and missing and self.allow_unsigned:
                skip = f"no DSSE bundle at {bundle_url} (allowed: --allow-unsigned, or status candidate)"
            if skip is not None:
                self.add(Item(bundle_label, None, skip, "signature", {"url": bundle_url}))
            else:
                self.add(Item(bundle_label, False, f"not signed: no DSSE bundle at {bundle_url}" if missing else bundle.error or "download failed", "signature", {"url": bundle_url}))
            return
        expected = self.expected_signer
        assert expected is not None  # _check_signer ran first
        rebound = ""
        if key == "provenance" and row.get("rebound_from") is not None:
            # The set's bundle was made by the release workflow of the release that first shipped it.
            try:
                expected, rebound = self._rebound_signer(row)
            except _Refused as refused:
                self.add(Item(bundle_label, False, f"rebound set: {refused}", "signature", {"url": bundle_url}))
                return
        identity, issuer, repository, ref, trust = expected.identity, expected.issuer, expected.repository, expected.ref, expected.trust_config
        why = f" (a rebound set: {rebound}, so its bundle must be signed by {identity})" if rebound else ""
        try:
            verified = verify_dsse_bundle(data, bundle.path.read_bytes(), identity=identity, issuer=issuer, trust_config=trust, repository=repository, ref=ref, name=name)
        except SignatureError as error:
            self.add(Item(bundle_label, False, error.reason + why, "signature", {"identity": identity}))
            return
        except PipelineError as error:
            self.add(Item(bundle_label, False, error.render() + why, "signature", {"identity": identity}))
            return
        note = f"; {rebound}" if rebound else ""
        self.add(Item(bundle_label, True, f"DSSE signed by {verified.identity}, log index {verified.log_index}{note}", "signature", {**verified.to_json(), "expected_identity": identity}))

    def _product_release_url(self, name: str) -> str | None:
        """`<product repository>/releases/download/<release>/<name>`: the product release's assets (bundles, image statement)."""
        from pipeline.formats.release.names import download_url

        repository = _text(dig(self._manifest, "product.repository"))
        return download_url(repository, self._manifest["release"], name) if repository else None

    def _validate_sbom(self, result: Fetched) -> None:
        assert result.path is not None
        label = f"sbom {result.binding.name}"
        try:
            from pipeline.formats.sbom import validate_file
        except ImportError:  # pragma: no cover - pipeline/sbom.py is part of the package stage
            self.add(Item(label, False, "SBOM validation not available: pipeline.formats.sbom is missing from this checkout", "sbom"))
            return
        try:
            message = validate_file(result.path)
        except PipelineError as error:
            self.add(Item(label, False, error.render(), "sbom"))
            return
        self.add(Item(label, True, message.split(": ", 1)[-1], "sbom"))

    # -- signatures
    def _signed_source(self, release: str, relative: str) -> tuple[str, bool]:
        """Where a repository-relative signed file lives, relative to where the manifest came from.

        A manifest at `<root>/manifests/<release>/manifest.json` (a raw URL at a
        commit, or a checkout) has its files under `<root>/`; a manifest served
        elsewhere (a release asset) has them beside it, by file name.
        """
        suffix = f"manifests/{release}/manifest.json"
        if self.is_url:
            if self.source.endswith("/" + suffix):
                return self.source[: -len(suffix)] + relative, True
            return self.source.rsplit("/", 1)[0] + "/" + relative.rsplit("/", 1)[-1], True
        path = Path(self.source).resolve()
        if path.as_posix().endswith("/" + suffix):
            return str(path.parents[2] / relative), False
        return str(path.parent / relative.removeprefix(f"manifests/{release}/")), False

    def _fetch_small(self, location: str, is_url: bool, target: Path, *, cap: int) -> bytes:
        if not is_url:
            return read_bytes_bounded(location, cap, what="signed file or bundle")
        fetched = self._download(location, target, sha256=None, size=None, label=Path(urlsplit(location).path).name, cap=cap)
        if fetched.error or fetched.path is None:
            raise (net.DeadlinePassed if fetched.late else RemoteError)(fetched.error or "download failed", file=location)
        return fetched.path.read_bytes()

    def _check_signer(self, manifest: dict[str, Any]) -> bool:
        """The expected signer, from the auditor (or this tool's default), checked against what the manifest declares.

        Default: `https://github.com/<repository>/.github/workflows/release.yml@refs/tags/<release>`
        from GitHub Actions' issuer, on the production Sigstore instance, with <repository> the
        product repository (`--repository`, default alphastorm/omp-ninfer); `--certificate-identity`
        and `--certificate-oidc-issuer` replace it (sigstore-python's and cosign's flags).  The
        manifest must declare exactly that signer, a product repository of that name, and no other
        Sigstore instance than the one the auditor chose; otherwise nothing it binds is fetched.
        """
        from pipeline.formats.release.names import OIDC_ISSUER, PRODUCT_REPO_SLUG
        from pipeline.formats.release.signer import release_signer
        from pipeline.infra import sigstore

        release = manifest["release"]
        trust = self.trust_config or "production"
        if self.certificate_identity:
            identity = self.certificate_identity
            issuer = self.certificate_oidc_issuer or OIDC_ISSUER
            source = "--certificate-identity"
        else:
            repository = self.repository or PRODUCT_REPO_SLUG
            identity = release_signer(repository, release, trust_config=trust).identity  # the one rule sign and publish use
            issuer = self.certificate_oidc_issuer or OIDC_ISSUER
            source = "--repository" if self.repository else f"the default repository {PRODUCT_REPO_SLUG}"
        claimed_repository, ref = sigstore.github_claims(identity)
        self.expected_signer = sigstore.SignerIdentity(identity, issuer, claimed_repository, ref, trust)
        label = "signer"
        problems: list[str] = []
        signing = section(manifest, "signing")
        declared = (signing.get("certificate_identity"), signing.get("certificate_oidc_issuer"))
        if signing and declared != (identity, issuer):
            problems.append(f"the manifest declares the signer {declared[0]!r} (issuer {declared[1]!r}), but this audit expects {identity!r} (issuer {issuer!r}, from {source}); pass --repository OWNER/NAME or --certificate-identity to audit a release of another repository")
        declared_trust = signing.get("trust_config", "production")
        if self.trust_config is None and declared_trust != "production":
            problems.append(f"the manifest asks for the {declared_trust!r} Sigstore instance; signatures are checked on production unless you pass --trust-config {declared_trust}")
        product = _text(dig(manifest, "product.repository"))
        parts = urlsplit(product) if product else None
        product_path = parts.path.strip("/").removesuffix(".git") if parts else ""
        # GitHub itself, or a loopback server (tests, a local copy): never another host, which would
        # then serve the raw records and the release's bundles.
        on_github = parts is not None and parts.scheme == "https" and (parts.hostname or "").lower() == "github.com" and parts.port is None
        on_loopback = parts is not None and net.is_loopback(parts.hostname)
        wrong_repository = product_path.lower() != str(claimed_repository).lower() or not (on_github or on_loopback)
        if wrong_repository and not self.certificate_identity:  # an explicit identity is the auditor's own call
            problems.append(f"product.repository {product!r} is not the signer's repository https://github.com/{claimed_repository}")
        if problems:
            self.add(Item(label, False, "; ".join(problems), "signature", {"expected": self.expected_signer.to_json()}))
            return False
        self.add(Item(label, True, f"{identity} (issuer {issuer}, {trust} Sigstore; from {source})", "signature", {"expected": self.expected_signer.to_json()}))
        return True

    def _audit_signatures(self, manifest: dict[str, Any], manifest_bytes: bytes) -> None:
        from pipeline.infra import sigstore

        signing = manifest.get("signing")
        release = manifest["release"]
        if not isinstance(signing, dict):
            self.add(Item("signatures", None if self.allow_unsigned else False, "the manifest declares no signing block (expected signer and signed files)", "signature"))
            return
        files = signing.get("signed_files")
        suffix = signing.get("bundle_suffix") or BUNDLE_SUFFIX
        if not isinstance(files, list) or not files:
            self.add(Item("signatures", False, "signing block lists no signed_files", "signature"))
            return
        if f"manifests/{release}/manifest.json" not in files:
            # The manifest binds every other hash: unsigned, it authenticates nothing, whatever else is signed.
            self.add(Item("signatures", False, f"signing.signed_files does not list manifests/{release}/manifest.json: the manifest itself must be signed", "signature"))
            return
        expected = self.expected_signer
        assert expected is not None  # _check_signer ran first
        identity, issuer, repository, ref, trust = expected.identity, expected.issuer, expected.repository, expected.ref, expected.trust_config
        cache = self._cache_dir(release) / "signatures"
        for relative in files:
            label = f"signature {relative}"
            if not isinstance(relative, str) or not relative.startswith(f"manifests/{release}/") or ".." in relative.split("/"):
                self.add(Item(label, False, f"signed file {relative!r} is outside the release tree manifests/{release}/", "signature"))
                continue
            location, is_url = self._signed_source(release, relative)
            try:
                if relative == f"manifests/{release}/manifest.json":
                    data = manifest_bytes
                else:
                    data = self._fetch_small(location, is_url, cache / relative, cap=MAX_SIGNED_FILE_BYTES)
            except (PipelineError, OSError) as error:
                self.add(Item(label, False, f"cannot fetch the signed file: {getattr(error, 'what', error)}", "signature"))
                continue
            candidates = [location + suffix]
            on_release = self._product_release_url(Path(relative).name + suffix)
            if is_url and on_release:
                candidates.append(on_release)
            bundle, tried, late = None, [], None
            for candidate in candidates:
                tried.append(candidate)
                try:
                    bundle = self._fetch_small(candidate, is_url, cache / (relative + suffix), cap=MAX_BUNDLE_BYTES)
                    break
                except net.DeadlinePassed as error:
                    late = error
                    break
                except (PipelineError, OSError):
                    continue
            if bundle is None and late is not None:  # not looked for: never a SKIP, even with --allow-unsigned
                self.add(Item(label, False, f"cannot fetch the Sigstore bundle: {late.what}", "signature"))
                continue
            if bundle is None:
                self.add(Item(label, None if self.allow_unsigned else False, "no Sigstore bundle at " + " or ".join(tried), "signature"))
                continue
            try:
                verified = sigstore.verify_bundle(sigstore.Sha256Digest(sha256_bytes(data)), bundle, identity=identity, issuer=issuer, trust_config=trust, repository=repository, ref=ref)
            except sigstore.SignatureError as error:
                self.add(Item(label, False, error.reason, "signature", {"identity": identity}))
                continue
            except PipelineError as error:
                self.add(Item(label, False, error.render(), "signature"))
                continue
            self.add(Item(label, True, f"signed by {verified.identity}, log index {verified.log_index}", "signature", verified.to_json()))

    # -- component tags
    def _audit_tag(self, where: str, row: dict[str, Any], cache: Path) -> None:
        """A published row's component tag (`release_tag` in `repository`) must still name the row's `source_commit`.

        Read anonymously through GitHub's REST API (`GET /repos/{owner}/{repo}/git/ref/tags/{tag}`, an
        annotated tag dereferenced through `/git/tags/{sha}`), bounded in size and time like every other
        download and fetched through the same --mirror mapping.  A tag never moves once its component
        release is published: one that names another commit, is absent (404), or cannot be read
        (a network error, an answer that is no ref) is FAIL; nothing here is SKIP but an unpublished row.
        """
        tag = row.get("release_tag")
        repository = row.get("repository")
        base, slug, problem = _tag_api(repository)
        label = f"tag {slug or repository} {tag}"
        details: dict[str, Any] = {"field": f"{where}.release_tag", "lane": row.get("id")}
        if row.get("published") is not True:
            self.add(Item(label, None, f"{where}.published is {json.dumps(row.get('published'))}: the manifest does not say the component release exists, so its tag is not read", "tag", details))
            return
        commit = row.get("source_commit")
        if not isinstance(tag, str) or not _BARE_NAME.fullmatch(tag):
            problem = f"not bound: {where}.release_tag is null" if tag is None else f"{where}.release_tag is not a tag name (found {tag!r})"
        elif commit is None:
            problem = f"not bound: {where}.source_commit is null, so nothing says which commit the tag must name"
        elif not is_commit_hex(commit):
            problem = f"{where}.source_commit is not a 40-hex commit (found {commit!r})"
        if problem is not None:
            self.add(Item(label, False, problem, "tag", details))
            return
        assert base is not None and slug is not None and isinstance(commit, str)
        url = f"{base}/repos/{slug}/git/ref/tags/{quote(tag, safe='')}"
        details["url"] = url
        folder = cache / "api"
        answer, problem = self._api_json(url, folder, what=f"refs/tags/{tag}")
        if problem is not None:
            self.add(Item(label, False, f"absent: {slug} has no tag {tag} (HTTP 404 at {url}), but the manifest says its component release is published" if problem == "404" else problem, "tag", details))
            return
        if not isinstance(answer, dict) or answer.get("ref") != f"refs/tags/{tag}":
            found = f"a list of {len(answer)} refs" if isinstance(answer, list) else f"ref {answer.get('ref')!r}" if isinstance(answer, dict) else repr(answer)
            self.add(Item(label, False, f"GitHub's answer at {url} is not the ref refs/tags/{tag} (found {found})", "tag", details))
            return
        target, through, asked = answer.get("object"), [], url
        while True:
            kind = target.get("type") if isinstance(target, dict) else None
            sha = target.get("sha") if isinstance(target, dict) else None
            if kind not in ("commit", "tag") or not is_commit_hex(sha):
                shown = {key: target.get(key) for key in ("type", "sha")} if isinstance(target, dict) else target
                self.add(Item(label, False, f"GitHub's answer at {asked} names no commit or tag object (found object {json.dumps(shown)[:200]})", "tag", details))
                return
            if kind == "commit":
                break
            if len(through) >= MAX_TAG_DEPTH:
                self.add(Item(label, False, f"the tag is an annotated tag nested more than {MAX_TAG_DEPTH} deep; the audit does not follow it further", "tag", details))
                return
            through.append(sha)
            asked = f"{base}/repos/{slug}/git/tags/{sha}"
            answer, problem = self._api_json(asked, folder, what=f"tag object {sha}")
            if problem is not None:
                self.add(Item(label, False, f"the annotated tag object {sha} is absent (HTTP 404 at {asked})" if problem == "404" else problem, "tag", details))
                return
            target = answer.get("object") if isinstance(answer, dict) else None
        found = sha.lower()
        via = f" (through the annotated tag object{'s' if len(through) > 1 else ''} {', '.join(through)})" if through else ""
        details["commit"] = found
        if found != commit.lower():
            self.add(Item(label, False, f"names {found}{via}, the manifest binds {commit.lower()} ({where}.source_commit): a published component tag never moves", "tag", details))
            return
        self.add(Item(label, True, f"names {found}{via}", "tag", details))

    def _api_json(self, url: str, folder: Path, *, what: str) -> tuple[Any, str | None]:
        """One small JSON answer of GitHub's REST API: (document, None), (None, '404'), or (None, why it is unusable)."""
        target = folder / f"{sha256_bytes(url.encode('utf-8'))[:24]}.json"
        fetched = self._download(url, target, sha256=None, size=None, label=what, cap=MAX_API_ANSWER_BYTES)
        if fetched.error or fetched.path is None:
            error = fetched.error or "download failed"
            return None, "404" if "HTTP 404" in error else f"cannot read {what} through GitHub's API: {error}"
        try:
            return loads_document(fetched.path.read_bytes(), source=url, max_bytes=MAX_API_ANSWER_BYTES), None
        except InputError as error:
            return None, f"GitHub's answer at {url} is not a JSON document: {error.what}"

    # -- the signer of a rebound set
    def _rebound_signer(self, row: dict[str, Any]) -> tuple[Any, str]:
        """The signer a rebound row's set-statement bundle must carry, and a note naming the release it comes from.

        A lane rebound unchanged ships the bundle the release workflow of the release that first shipped
        the set made ("a rebound lane uses the bundle of the release that first shipped its set"): that
        release is found by following `rebound_from` through the predecessor manifests, each fetched beside
        this one and checked against the `predecessor.manifest_sha256` that binds it.  The identity is the
        auditor's expected signer with only its `@refs/tags/<release>` suffix replaced by that release's
        name (which passes RELEASE_RE); issuer, repository and trust configuration stay the auditor's.
        Raises _Refused when the release or the identity cannot be derived.
        """
        from pipeline.infra import sigstore

        lane = str(row.get("id"))
        if lane not in self._rebound:
            try:
                self._rebound[lane] = self._first_shipped(row)
            except _Refused as refused:
                self._rebound[lane] = refused
        first = self._rebound[lane]
        if isinstance(first, _Refused):
            raise first
        release, chain = first
        expected = self.expected_signer
        assert expected is not None  # _check_signer ran first
        suffix = f"@refs/tags/{self._manifest['release']}"
        if not expected.identity.endswith(suffix):
            raise _Refused(f"the expected signer {expected.identity} does not end with {suffix}, so the signer of {release}, which first shipped the rebound set, cannot be derived from it")
        identity = expected.identity[: -len(suffix)] + f"@refs/tags/{release}"
        repository, ref = sigstore.github_claims(identity)
        signer = sigstore.SignerIdentity(identity, expected.issuer, repository if expected.repository else None, ref if expected.ref else None, expected.trust_config)
        return signer, f"{release} first shipped the set (rebound_from {' -> '.join(chain)})"

    def _first_shipped(self, row: dict[str, Any]) -> tuple[str, list[str]]:
        from pipeline.formats.release.names import RELEASE_RE, sort_release_key

        manifest, release, current = self._manifest, str(self._manifest["release"]), row
        lane = row.get("id")
        chain: list[str] = []
        for _ in range(MAX_REBIND_CHAIN):
            rebound = current.get("rebound_from")
            if rebound is None:
                return release, chain
            where = f"the row {lane}.rebound_from of {release}"
            if not isinstance(rebound, str) or not RELEASE_RE.fullmatch(rebound):
                raise _Refused(f"{where} is not a release name (found {rebound!r})")
            if sort_release_key(rebound) >= sort_release_key(release):
                raise _Refused(f"{where} names {rebound}, which is not a release before {release}")
            predecessor = section(manifest, "predecessor")
            if predecessor.get("release") != rebound:
                raise _Refused(f"{where} names {rebound}, but the manifest of {release} has the predecessor {predecessor.get('release')!r}: a rebound row is its predecessor's row")
            digest = predecessor.get("manifest_sha256")
            if not is_sha256_hex(digest):
                raise _Refused(f"the manifest of {release} binds no predecessor.manifest_sha256 (found {digest!r}), so the manifest of {rebound} cannot be checked")
            older = self._predecessor_manifest(rebound, digest)
            old = lane_row(older, lane)
            if old is None:
                raise _Refused(f"the manifest of {rebound} ships no row {lane}, but {where} names it")
            for key in ("repository", "release_tag", "source_commit", "checksums_sha256"):
                if old.get(key) != current.get(key):
                    raise _Refused(f"the row {lane} of {rebound} binds another {key} ({old.get(key)!r}) than {release}'s ({current.get(key)!r}): the set was not rebound unchanged")
            chain.append(rebound)
            manifest, release, current = older, rebound, old
        raise _Refused(f"the row {lane} is rebound through more than {MAX_REBIND_CHAIN} releases; the audit does not follow it further")

    def _predecessor_manifest(self, release: str, digest: str) -> dict[str, Any]:
        """The manifest of an earlier release, `manifests/<release>/manifest.json` beside this one's tree, checked against its pin."""
        own = f"manifests/{self._manifest['release']}/manifest.json"
        source = self.source if self.is_url else Path(self.source).resolve().as_posix()
        relative = f"manifests/{release}/manifest.json"
        if not source.endswith("/" + own):
            raise _Refused(f"the manifest is not read from its release tree (…/{own}), so the manifest of {release} ({relative}) cannot be found beside it")
        location, is_url = self._signed_source(str(self._manifest["release"]), relative)
        try:
            data = self._fetch_small(location, is_url, self._cache_dir(str(self._manifest["release"])) / "predecessors" / release / "manifest.json", cap=MAX_RELEASE_MANIFEST_BYTES)
        except (PipelineError, OSError) as error:
            raise _Refused(f"cannot fetch the manifest of {release} at {location}: {getattr(error, 'what', error)}") from None
        if sha256_bytes(data) != digest:
            raise _Refused(f"the manifest of {release} at {location} has sha256 {sha256_bytes(data)}, but predecessor.manifest_sha256 binds {digest}")
        try:
            document = loads_document(data, source=location, max_bytes=MAX_RELEASE_MANIFEST_BYTES)
        except InputError as error:
            raise _Refused(f"the manifest of {release} at {location} is not JSON: {error.what}") from None
        if not isinstance(document, dict) or document.get("release") != release:
            raise _Refused(f"the document at {location} is not the manifest of {release}")
        return document

    # -- the container image
    def _audit_image(self, row: dict[str, Any]) -> None:
        reference = row.get("oci_reference")
        label = f"image {reference}"
        if not isinstance(reference, str) or not reference:
            self.add(Item(f"image {row.get('id') or 'container'}", False, "not bound: components.ninfer.oci_reference is null", "image"))
            return
        from pipeline.infra.image_reference import parse_digest_reference
        from pipeline.infra.registry import fetch_manifest_by_digest

        try:
            host, name, digest = parse_digest_reference(reference)
        except InputError as error:
            self.add(Item(label, False, error.what, "image"))
            return
        pinned = row.get("oci_manifest_digest")
        if pinned is not None and pinned != digest:
            self.add(Item(label, False, f"oci_manifest_digest {pinned} differs from the reference's digest {digest}", "image"))
            return
        repository = row.get("oci_repository")
        if repository is not None and repository != f"{host}/{name}":
            self.add(Item(label, False, f"oci_reference is not in oci_repository {repository}", "image"))
            return
        try:
            with net.deadlines(self.deadline):  # the registry client's requests go through this session's adapter
                body, media_type = fetch_manifest_by_digest(host, name, digest, session=self._http(), timeout=self.timeout)
        except PipelineError as error:
            self.add(Item(label, False, error.what, "image"))
            return
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        if actual != digest:
            self.add(Item(label, False, f"image digest mismatch: the registry's manifest bytes hash to {actual}", "image", {"media_type": media_type}))
            return
        self.add(Item(label, True, f"registry manifest ({media_type}, {len(body)} bytes) hashes to the pinned digest", "image"))


class _Refused(Exception):
    """Why an audit item cannot be decided from the data it needs (the message is the item's reason)."""


def _tag_api(repository: Any) -> tuple[str | None, str | None, str | None]:
    """(REST API base, 'owner/name', None) of a row's repository, or (None, slug or None, why its tags cannot be read).

    `https://github.com/OWNER/NAME` is read at https://api.github.com; a repository on a loopback
    address (tests, a local copy) at its own origin, where the GitHub stand-ins serve the API.
    """
    if not isinstance(repository, str) or not repository:
        return None, None, f"the row's repository is not a URL (found {repository!r})"
    problem = net.scheme_problem(repository)
    if problem:
        return None, None, f"the repository {repository} {problem}"
    parts = urlsplit(repository)
    slug = parts.path.strip("/").removesuffix(".git")
    if parts.query or parts.fragment or not _REPO_PATH.fullmatch(slug) or any(component_problem(p) for p in slug.split("/")):
        return None, None, f"the repository {repository} is not a GitHub repository URL https://github.com/OWNER/NAME"
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host == "github.com" and parts.port is None:
        return GITHUB_API, slug, None
    if net.is_loopback(parts.hostname):
        return f"{parts.scheme}://{parts.netloc}", slug, None
    return None, slug, f"the repository {repository} is not on GitHub: the audit reads component tags through GitHub's REST API only"


def _hash_cached(path: Path, size: int | None) -> tuple[str, int] | None:
    """The SHA-256 and size of a cache file read now, never through a link; None when it is no regular file of `size` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | ranges.NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or (size is not None and info.st_size != size):
            return None
        return hashlib.file_digest(handle, "sha256").hexdigest(), info.st_size


def _held_bytes(part: Path, sha256: Any, size: Any) -> int:
    """How many bytes of a pinned file another audit's .part holds now: its range state's intervals (read as
    hostile input, bound to the pin), else its length (a single stream's prefix); 0 when unknown."""
    from pipeline.infra.range_state import read_state, state_path

    try:
        if isinstance(size, int) and os.path.lexists(state_path(part)):
            state = read_state(state_path(part), size=size, sha256=sha256 if is_sha256_hex(sha256) else None)
            return sum(end - start for start, end in state.received) if state is not None else 0
        info = os.lstat(part)
    except (OSError, PipelineError):
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def _remove_cached(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except (IsADirectoryError, PermissionError):
        raise EnvironmentProblem(f"{path.name} is a folder, where the audit keeps a downloaded file", file=path,
                                 fix="remove that folder and run the audit again") from None


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _manifest_release_problem(source: str, release: str) -> str | None:
    """A manifest fetched from a URL must sit in its own release tree (or be a release asset)."""
    if urlsplit(source).scheme not in ("http", "https"):
        return None
    path = urlsplit(source).path
    if path.endswith(f"/manifests/{release}/manifest.json") or f"/releases/download/{release}/" in path:
        return None
    return f"points outside its release: a manifest of {release} must be served as …/manifests/{release}/manifest.json"


def _short_remote(error: PipelineError) -> str:
    text = error.what
    if error.why:
        text += f" ({error.why.rstrip('.')})"
    return text


# -- command line ----------------------------------------------------------------------


def _byte_size(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)([KMGT]?)(i?B)?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500M, 4G)")
    return int(match.group(1)) * 1024 ** "_KMGT".index(match.group(2).upper() or "_")


def _repository_slug(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}", value) or ".." in value:
        raise argparse.ArgumentTypeError(f"not a GitHub repository OWNER/NAME: {value!r}")
    return value


def _parse_mirror(value: str) -> tuple[str, str]:
    from pipeline.errors import UsageError

    source, sep, target = value.partition("=")
    if not sep or not source or not target:
        raise UsageError("--mirror takes URL_PREFIX=MIRROR_PREFIX", field="--mirror", found=value, expected="e.g. https://github.com/=https://mirror.example/github/")
    for url in (source, target):
        if urlsplit(url).scheme not in ("http", "https"):
            raise UsageError("--mirror prefixes must be HTTP(S) URLs", field="--mirror", found=url)
    problem = check_scheme(target)
    if problem:
        raise UsageError(f"the mirror {problem}", field="--mirror", found=target)
    return source, target


# -- the stage --------------------------------------------------------------------------


class AuditStage(Stage):
    """An audit on the stage contract: it observes public URLs, so it always runs; its report is a register entry."""

    name = "audit"
    always_runs = True  # what a URL serves can change at any time: an audit is never "up to date"

    def __init__(self, ctx: Context, auditor: Auditor) -> None:
        super().__init__(ctx)
        self.auditor = auditor
        self.report: AuditReport | None = None

    @property
    def key(self) -> str:
        source = self.auditor.shown_source
        # One register record per audited manifest; a very long source is named by its hash (lock file names).
        return f"audit:{source}" if len(source) <= 160 else f"audit:sha256:{sha256_bytes(source.encode('utf-8'))}"

    def describe(self) -> str:
        return self.auditor.shown_source

    def inputs(self) -> dict[str, Any]:
        auditor = self.auditor
        return {
            "manifest": auditor.shown_source,
            "allow_unsigned": auditor.allow_unsigned,
            "trust_config": auditor.trust_config,
            "mirrors": auditor.mirrors,
            "skip_larger_than": auditor.skip_larger_than,
            "repository": auditor.repository,
            "certificate_identity": auditor.certificate_identity,
            "certificate_oidc_issuer": auditor.certificate_oidc_issuer,
        }

    def run(self) -> list[Artifact]:
        from pipeline.formats.audit_report import write_report

        self.report = self.auditor.run()
        path = write_report(self.ctx.dist, self.report.to_json())
        return [
            self.ctx.register.make(
                "audit-report",
                path,
                stage=self.name,
                lane=None,
                manifest=self.report.manifest,
                release=self.report.release,
                passed=self.report.passed,
                failed=len(self.report.failed),
            )
        ]


STAGE = AuditStage  # no release_plan: audit is for outsiders re-checking a published release (road.py: outsider)


def audit_release(auditor: Auditor, *, dist: Path | str = "dist") -> AuditReport:
    """Run one audit through `stage.execute()`, recording its report in `<dist>/register.json`."""
    stage = AuditStage(Context.open(dist), auditor)
    execute(stage)
    assert stage.report is not None  # an audit always runs
    return stage.report


def run_audit(args: argparse.Namespace) -> int:
    as_json = args.json

    def emit(item: Item) -> None:
        import sys

        ui.result(item.line(), sys.stderr if as_json else None)

    if args.jobs < 1:
        from pipeline.errors import UsageError

        raise UsageError("--jobs must be at least 1", field="--jobs", found=args.jobs)
    if not 1 <= args.connections <= ranges.MAX_CONNECTIONS:
        from pipeline.errors import UsageError

        raise UsageError(f"--connections must be from 1 to {ranges.MAX_CONNECTIONS}", field="--connections", found=args.connections,
                         expected="e.g. 8 (1: one stream per file; each connection is a thread and a socket of its own)")
    if not args.timeout > 0 or args.timeout == float("inf"):
        from pipeline.errors import UsageError

        raise UsageError("--timeout must be a positive number of seconds", field="--timeout", found=args.timeout, expected="e.g. 60 (the audit's overall deadline)")
    auditor = Auditor(
        args.manifest,
        jobs=args.jobs,
        connections=args.connections,
        range_threshold=args.range_threshold,
        cache=args.cache,
        allow_unsigned=args.allow_unsigned,
        trust_config=args.trust_config,
        timeout=args.timeout,
        retries=args.retries,
        progress=not args.quiet,
        lanes_dir=args.lanes_dir,
        on_item=emit,
        mirrors=[_parse_mirror(value) for value in (args.mirror or os.environ.get("OMP_NINFER_MIRROR", "").split())],
        skip_larger_than=args.skip_larger_than,
        repository=args.repository,
        certificate_identity=args.certificate_identity,
        certificate_oidc_issuer=args.certificate_oidc_issuer,
        github_trusted_root=args.github_trusted_root,
    )
    report = audit_release(auditor, dist=args.dist)
    if as_json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        ui.result(report.verdict())
    return 0 if report.passed else 1


def register_cli(sub) -> None:
    parser = sub.add_parser(
        "audit",
        help="re-verify a published release from its manifest: every URL, size, SHA-256, set, SBOM, signature and the image digest",
        description=(
            "Download every asset a release manifest binds (parallel, resumable, hashed while downloading), "
            "verify sizes and SHA-256, each closed asset set and its SHA256SUMS, the SPDX and CycloneDX documents, "
            "the Sigstore bundles of the signed files and the image digest at the registry. "
            "Prints one OK:/FAIL: line per item and a verdict; exit 0 when all passed, 1 otherwise."
        ),
    )
    parser.add_argument("manifest", help="manifest.json path or HTTPS URL (e.g. https://raw.githubusercontent.com/<owner>/<repo>/<commit>/manifests/vX.Y.Z/manifest.json)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"parallel downloads (default {DEFAULT_JOBS})")
    parser.add_argument("--connections", type=int, default=ranges.DEFAULT_CONNECTIONS, metavar="N", help=f"the most HTTP connections all downloads hold at once (default {ranges.DEFAULT_CONNECTIONS}); a file larger than --range-threshold is fetched as parallel Range requests over the connections the other --jobs leave free; 1: one stream per file")
    parser.add_argument("--range-threshold", type=_byte_size, default=ranges.THRESHOLD, metavar="SIZE", help=f"files larger than SIZE are fetched as parallel ranges (default {ranges.THRESHOLD >> 20}M)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout (OK/FAIL lines go to stderr)")
    parser.add_argument("--cache", type=Path, default=None, help="download folder, kept for resuming (default ~/.cache/omp-ninfer-audit/<release>)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS", help="the audit's overall deadline, measured from its start: every download and read (manifest, assets, tags, statements, bundles, the registry) must end within SECONDS plus the time the bytes received so far earn at 256 KiB/s, enforced while connecting, while reading the status line and headers and while reading the body; once it passes, the item in progress FAILs and nothing more is fetched. Also the seconds without data before a request counts as failed, and each file's own deadline (SECONDS plus its bytes at 256 KiB/s, retries included) (default 60)")
    parser.add_argument("--retries", type=int, default=None, help="retries per download after a broken connection or 5xx (default 4)")
    parser.add_argument("--trust-config", default=None, help="Sigstore trust config: 'production' (default), 'staging' or a file; the manifest cannot choose it")
    parser.add_argument("--repository", default=None, metavar="OWNER/NAME", type=_repository_slug, help="the product repository whose release workflow must have signed (default alphastorm/omp-ninfer): the expected signer is its .github/workflows/release.yml at refs/tags/<release>")
    parser.add_argument("--certificate-identity", default=None, metavar="SAN", help="the exact certificate identity that must have signed (replaces --repository's)")
    parser.add_argument("--github-trusted-root", default=None, type=Path, metavar="FILE", help="a trusted_root.jsonl for GitHub's release attestations (gh --custom-trusted-root); default: the root gh fetches and verifies through its TUF client")
    parser.add_argument("--certificate-oidc-issuer", default=None, metavar="URL", help="the OIDC issuer of that identity (default https://token.actions.githubusercontent.com)")
    parser.add_argument("--allow-unsigned", action="store_true", help="report missing Sigstore bundles as SKIP instead of FAIL (pre-signing audits only)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--mirror", action="append", default=[], metavar="URL_PREFIX=MIRROR_PREFIX", help="fetch URLs starting with URL_PREFIX from MIRROR_PREFIX instead (repeatable; default: the space-separated entries of $OMP_NINFER_MIRROR); sizes, hashes and location rules are unchanged")
    parser.add_argument("--skip-larger-than", type=_byte_size, default=None, metavar="SIZE", help="do not download files larger than SIZE (e.g. 4G); they are reported as SKIP, never as OK")
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="output folder whose register records the report as dist/audit/<release>.json (default: dist)")
    parser.add_argument("--lanes-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run_audit)
