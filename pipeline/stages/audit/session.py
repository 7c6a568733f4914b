"""The plumbing of one audit run that every job uses (goreleaser's shared context): settings, downloads, items."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.errors import InputError, PipelineError, RemoteError, redact_url_credentials
from pipeline.formats.release.manifest import ReleaseManifest
from pipeline.infra import net, ranges
from pipeline.infra import progress as transfer_progress
from pipeline.infra.download_cache import DownloadCache
from pipeline.stages.audit.model import (
    MAX_API_ANSWER_BYTES,
    MAX_RECORD_BYTES,
    MAX_UNSIZED_ASSET_BYTES,
    AuditReport,
    Binding,
    Fetched,
    Item,
)
from pipeline.util import ui
from pipeline.util.fs import read_bytes_bounded
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import loads_document

DEFAULT_JOBS = 4
DEFAULT_TIMEOUT = 60.0


class _Overall:
    """The bytes all parallel downloads received (the report's `bytes_downloaded`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0

    def __call__(self, count: int) -> None:
        with self.lock:
            self.count += count


class AuditSession:
    """One audit's settings, its report and the plumbing every job uses: downloads through the shared cache
    (`infra/download_cache.py`), the item list, where a signed file lives."""

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
        # Every download (assets, records, statements, bundles, API answers) goes through one cache
        # policy: one budget of --connections for all of them at once, the run's overall deadline.
        self.downloads = DownloadCache(session=self.http, timeout=timeout, retries=retries, connections=connections,
                                       range_threshold=range_threshold, unsized_cap=MAX_UNSIZED_ASSET_BYTES)
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
        self.manifest: ReleaseManifest | None = None  # the audited manifest, once its names and signer passed
        self.rebound: dict[str, Any] = {}  # lane -> (first release, chain) or Refused

    @property
    def deadline(self) -> net.Deadline | None:
        """The run's overall deadline, from the start of run(): the download cache enforces it on every request."""
        return self.downloads.deadline

    @deadline.setter
    def deadline(self, value: net.Deadline | None) -> None:
        self.downloads.deadline = value

    def http(self):
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

    def cache_dir(self, release: str) -> Path:
        if self.cache_root is not None:
            return self.cache_root / release
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return base / "omp-ninfer-audit" / release

    def download(self, url: str, target: Path, *, sha256: str | None, size: int | None, label: str, on_bytes=None, cap: int | None = None, redirects: str = "same-origin") -> Fetched:
        """Fetch into target through the shared cache (`infra/download_cache.py`): resumed, hashed while writing,
        a complete cached copy re-used only when pinned and re-hashed; a failure is the result's error.

        Bounded by the pinned `size`, else by `cap` (unpinned documents), else
        by MAX_UNSIZED_ASSET_BYTES (hash-pinned files without a recorded size).
        """
        binding = Binding(label=label, field="", url=url, sha256=sha256, size=size)
        try:
            got = self.downloads.fetch(self.fetch_url(url), target, sha256=sha256, size=size, label=label, on_bytes=on_bytes, cap=cap, redirects=redirects)
        except PipelineError as error:
            return Fetched(binding, None, None, None, error=short_remote(error), late=isinstance(error, net.DeadlinePassed))
        return Fetched(binding, got.path, got.sha256, got.size, resumed_at=got.resumed_at)

    def fetch_all(self, bindings: list[Binding], cache: Path) -> list[Fetched]:
        if not bindings:
            return []
        sizes = [b.size for b in bindings]
        total = sum(sizes) if all(isinstance(n, int) for n in sizes) else None  # percent only when every size is known
        overall = _Overall()
        started = time.monotonic()
        bars = transfer_progress.TransferProgress("audit: all assets", total) if transfer_progress.wanted(self.progress) else None
        self.downloads.progress = bars or False

        def one(binding: Binding) -> Fetched:
            # Lane folders one level below the fixed kind folders, so no lane id can name one of those.
            folder = cache / "lanes" / binding.group if binding.group else cache / binding.kind
            cap = MAX_RECORD_BYTES if binding.kind == "record" else None
            result = self.download(binding.url, folder / binding.cache_name, sha256=binding.sha256, size=binding.size, label=binding.label, on_bytes=overall, cap=cap)
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
            self.downloads.progress = False
            if bars:
                bars.close()
        self.report.bytes_downloaded += overall.count
        self.report.download_seconds += time.monotonic() - started
        return results

    @staticmethod
    def matches(result: Fetched) -> bool:
        binding = result.binding
        return result.sha256 == binding.sha256 and (binding.size is None or result.size == binding.size)

    def judge(self, result: Fetched) -> Item:
        binding = result.binding
        details = {"field": binding.field, "url": binding.url}
        if result.error:
            return Item(binding.label, False, result.error, binding.kind, details)
        details.update({"sha256": result.sha256, "bytes": result.size})
        if binding.size is not None and result.size != binding.size:
            self.quarantine(result)
            return Item(binding.label, False, f"size mismatch: got {result.size} bytes, the manifest binds {binding.size}", binding.kind, details)
        if result.sha256 != binding.sha256:
            self.quarantine(result)
            return Item(binding.label, False, f"SHA-256 mismatch: got {result.sha256}, the manifest binds {binding.sha256}", binding.kind, details)
        note = f"{ui.human_bytes(result.size or 0)}, sha256 {result.sha256[:16]}…"
        if result.resumed_at:
            note += ", resumed with HTTP Range at byte " + ", ".join(str(offset) for offset in result.resumed_at)
        return Item(binding.label, True, note, binding.kind, details)

    @staticmethod
    def quarantine(result: Fetched) -> None:
        """Rejected bytes are deleted: nothing that failed its pin stays in the cache."""
        if result.path is not None:
            result.path.unlink(missing_ok=True)
            result.path = None

    def signed_source(self, release: str, relative: str) -> tuple[str, bool]:
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

    def fetch_small(self, location: str, is_url: bool, target: Path, *, cap: int) -> bytes:
        if not is_url:
            return read_bytes_bounded(location, cap, what="signed file or bundle")
        fetched = self.download(location, target, sha256=None, size=None, label=Path(urlsplit(location).path).name, cap=cap)
        if fetched.error or fetched.path is None:
            raise (net.DeadlinePassed if fetched.late else RemoteError)(fetched.error or "download failed", file=location)
        return fetched.path.read_bytes()

    def api_json(self, url: str, folder: Path, *, what: str) -> tuple[Any, str | None]:
        """One small JSON answer of GitHub's REST API: (document, None), (None, '404'), or (None, why it is unusable)."""
        target = folder / f"{sha256_bytes(url.encode('utf-8'))[:24]}.json"
        fetched = self.download(url, target, sha256=None, size=None, label=what, cap=MAX_API_ANSWER_BYTES)
        if fetched.error or fetched.path is None:
            error = fetched.error or "download failed"
            return None, "404" if "HTTP 404" in error else f"cannot read {what} through GitHub's API: {error}"
        try:
            return loads_document(fetched.path.read_bytes(), source=url, max_bytes=MAX_API_ANSWER_BYTES), None
        except InputError as error:
            return None, f"GitHub's answer at {url} is not a JSON document: {error.what}"

    def product_release_url(self, name: str) -> str | None:
        """`<product repository>/releases/download/<release>/<name>`: the product release's assets (bundles, image statement)."""
        from pipeline.formats.release.names import download_url

        manifest = self.release_manifest()
        repository = manifest.product_repository()
        return download_url(repository, manifest.release, name) if repository else None

    def release_manifest(self) -> ReleaseManifest:
        """The audited manifest: the jobs run only after run() read it."""
        assert self.manifest is not None, "a job ran before the audit read its manifest"
        return self.manifest


def short_remote(error: PipelineError) -> str:
    text = error.what
    if error.why:
        text += f" ({error.why.rstrip('.')})"
    return text
