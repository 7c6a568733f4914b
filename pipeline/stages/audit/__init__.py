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
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import EnvironmentProblem, InputError
from pipeline.formats.release.manifest import ReleaseManifest, parse_manifest
from pipeline.infra import net, ranges
from pipeline.infra.net import check_scheme
from pipeline.register import Artifact
from pipeline.stage import Context, Stage, execute
from pipeline.stages.audit import github_attestations, image, provenance, reviews, sets, signatures, tags
from pipeline.stages.audit.bindings import (
    SET_FIELDS,
    binding_problem,
    check_location,
    check_manifest_names,
    check_manifest_shapes,
    check_raw_location,
    collect_bindings,
)
from pipeline.stages.audit.model import (
    MAX_API_ANSWER_BYTES,
    MAX_RELEASE_MANIFEST_BYTES,
    AuditReport,
    Binding,
    Fetched,
    Item,
    url_file_name,
    word,
)
from pipeline.stages.audit.session import DEFAULT_JOBS, DEFAULT_TIMEOUT, AuditSession
from pipeline.util import ui
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import is_sha256_hex, sha256_bytes

# What the CLI, the benchmark and the tests use: the audit's own names, wherever their job module keeps them.
__all__ = [
    "MAX_API_ANSWER_BYTES", "MAX_RELEASE_MANIFEST_BYTES", "SET_FIELDS", "STAGE", "AuditReport", "AuditStage", "Auditor", "Binding",
    "Fetched", "Item", "audit_release", "binding_problem", "check_location", "check_manifest_names", "check_manifest_shapes",
    "check_raw_location", "collect_bindings", "register_cli", "run_audit", "url_file_name",
]

class Auditor(AuditSession):
    """The audit of one manifest: reads it, gates its names and signer, fetches what it binds, runs each job."""

    def load_manifest(self) -> ReleaseManifest | None:
        if self.is_url:
            problem = check_scheme(self.source)
            if problem:
                self.add(Item(f"manifest {self.shown_source}", False, problem, "manifest"))
                return None
            with tempfile.TemporaryDirectory(prefix="omp-ninfer-audit-") as tmp:
                fetched = self.download(self.source, Path(tmp) / "manifest.json", sha256=None, size=None, label="manifest.json", cap=MAX_RELEASE_MANIFEST_BYTES, redirects="none")
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
        return manifest

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
        manifest = loaded
        release = manifest.release
        self.report.release = release
        self.report.status = manifest.status
        label = f"manifest {Path(urlsplit(self.source).path).name if self.is_url else self.source}"
        try:
            check_manifest_names(manifest, file=self.source)
        except InputError as error:
            self.add(Item(label, False, error.render(), "manifest"))
            self.report.seconds = time.monotonic() - started
            return self.report
        where = _manifest_release_problem(self.source, release)
        self.add(Item(label, where is None, where or f"release {word(release)}, status {word(manifest.status)}, sha256 {manifest.sha256}", "manifest"))
        if where is not None:  # a manifest outside its release tree binds nothing: fetch nothing it names
            self.report.seconds = time.monotonic() - started
            return self.report
        if not signatures.check_signer(self, manifest):  # a manifest that claims another authority binds nothing either
            self.report.seconds = time.monotonic() - started
            return self.report
        cache = self.cache_dir(release)
        bindings = collect_bindings(manifest)

        # A candidate's records get their raw URLs only after acceptance (the pin dance), and only the
        # ready release is signed: at status candidate those are SKIP (never OK), every asset still counts.
        candidate = manifest.status == "candidate"
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
        fetched = self.fetch_all(runnable, cache)
        by_group: dict[str, list[Fetched]] = {}
        for result in fetched:
            self.add(self.judge(result))
            if result.binding.group:
                by_group.setdefault(result.binding.group, []).append(result)

        self.manifest = manifest
        for row_where, row in manifest.published_set_rows():
            lane = row.get("id") or row_where
            sets.audit_set(self, lane, row, by_group.get(lane, []), cache)
        for row_where, row in manifest.lane_rows_at():
            tags.audit_tag(self, row_where, row, cache)
        for result in fetched:
            if result.binding.role in ("spdx", "cdx") and result.error is None and self.matches(result):
                sets.validate_sbom(self, result)
        signatures.audit_signatures(self, manifest)
        reviews.audit_reviews(self, manifest, fetched)
        github_attestations.audit_release_attestations(self, [r for r in fetched if r.error is None and r.path is not None and self.matches(r)], cache)
        container = manifest.section("components.ninfer")
        if "oci_reference" in container:
            image.audit_image(self, container)
            provenance.audit_image_statement(self, container, cache)
        self.report.seconds = time.monotonic() - started
        return self.report


def _manifest_release_problem(source: str, release: str) -> str | None:
    """A manifest fetched from a URL must sit in its own release tree (or be a release asset)."""
    if urlsplit(source).scheme not in ("http", "https"):
        return None
    path = urlsplit(source).path
    if path.endswith(f"/manifests/{release}/manifest.json") or f"/releases/download/{release}/" in path:
        return None
    return f"points outside its release: a manifest of {release} must be served as …/manifests/{release}/manifest.json"


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


class AuditStage(Stage):
    """An audit on the stage contract: it observes public URLs, so it always runs; its report is a register entry."""

    name = "audit"
    always_runs = True  # what a URL serves can change at any time: an audit is never "up to date"
    digest_beside_run = True  # an observation: its code digest is worked out while it downloads

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
