"""Moving blobs over HTTP(S): streamed, hashed while they arrive, resumable.

Used for the pinned toolchain wheels and by `audit` for every published
asset (model artefacts are tens of GiB).  The SHA-256 is computed on the bytes
as they are written, so a complete file is never read a second time; an
interrupted download resumes with an HTTP Range request from its `.part`
file: within one call the running digest simply continues after a broken
connection; only a `.part` left by an earlier run is read back, once.  Connection errors
and 5xx answers are retried with exponential backoff; a 404 is final.  The
file appears under its name only after size and hash match.

Bounded by construction (`pipeline.infra.net`): the running byte count stops a
download the moment it passes the pinned size (or, unpinned, a named cap),
and those bytes are deleted; `timeout` is both the idle timeout and an
overall deadline for the item, enforced inside every socket read (connect,
status line and headers, body: `net.deadlines`), and a caller's `overall`
deadline (audit's, for the whole run) bounds every item the same way;
redirects are followed by hand, by policy.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import IntegrityError, PipelineError, RemoteError
from pipeline.infra import net
from pipeline.util import ui

CHUNK = 1024 * 1024
RETRIES = 4
BACKOFF_SECONDS = 0.5


@dataclass
class Download:
    url: str
    path: Path
    sha256: str
    size: int
    resumed_from: int
    seconds: float
    resumed_at: tuple[int, ...] = ()  # byte offsets of every HTTP Range resume (first try included)


def _session(session=None):
    if session is not None:
        return session
    return net.deadline_session()  # the item's deadline bounds the header phase too


def _hash_existing(path: Path, digest) -> int:
    size = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK * 4):
            digest.update(chunk)
            size += len(chunk)
    return size


def download(
    url: str,
    target: Path,
    *,
    label: str | None = None,
    session=None,
    expected_size: int | None = None,
    max_size: int | None = None,
    timeout: float = 60.0,
    deadline: float | None = None,
    retries: int = RETRIES,
    progress: bool = True,
    on_bytes=None,
    redirects: str = "same-origin",
    resume: bool = True,
    overall: net.Deadline | None = None,
) -> Download:
    """Fetch `url` into `target` (resuming `target.part`), returning its SHA-256 and size.

    Bounded: at most `expected_size` bytes (the pin) or, unpinned, `max_size`
    (a named cap; one of the two is required); `timeout` seconds of silence
    fail a request; the whole item, retries included, may take `timeout`
    seconds plus what arrived at `net.DEADLINE_FLOOR_RATE`, and never more
    than `deadline` seconds (default `net.deadline_for(timeout, expected_size)`:
    an unpinned document gets `timeout`).  Bytes over the
    limit are deleted, never kept as `.part`; redirects follow `redirects`
    (`net.redirect_problem`).  `resume=False` starts from byte 0 every time
    (for unpinned documents, whose earlier bytes may belong to another version).

    `overall` is a deadline shared by many downloads (audit's whole run): the
    item fails with its error the moment it passes, in any phase, and
    starts no request once it has passed; the bytes received earn it time
    when it is paced.  On a session with `net.deadline_adapter` mounted (the
    default session has it) both deadlines bound every socket read, so a
    server that trickles header or body bytes is cut off when one passes.
    """
    import requests

    if expected_size is None and max_size is None:
        raise ValueError("an unpinned download needs max_size")
    limit = expected_size if expected_size is not None else max_size
    assert limit is not None
    http = _session(session)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    label = label or target.name
    started = time.monotonic()
    ends = started + (deadline if deadline is not None else net.deadline_for(timeout, expected_size))
    attempt = 0
    resumed_from = 0
    resumed_at: list[int] = []
    digest = hashlib.sha256()
    have = -1  # bytes of `part` already in `digest`; -1: not read yet
    if not resume:
        part.unlink(missing_ok=True)

    # The item's deadline: `timeout`, plus the bytes received in this call (a prefix from an
    # earlier run earns no time) at the floor rate, never after `ends`.
    item = net.Deadline(timeout, what=f"download of {label}", started=started, latest=ends, paced=True,
                        on_pass=lambda phase, where: net.deadline_passed(label, where, max(have, 0), phase))

    def late(phase: str) -> Exception | None:
        """The error of a deadline that has passed (the overall one first), else None."""
        if overall is not None and overall.passed():
            return overall.error(phase, url)
        return item.error(phase, url) if item.passed() else None

    def soonest() -> float:
        return min(item.ends(), overall.ends()) if overall is not None else item.ends()

    def give_up(error: Exception, *, keep: bool) -> Exception:
        if not (keep and resume):
            part.unlink(missing_ok=True)
        return error

    def out_of_retries() -> bool:
        """Count an attempt; True when none is left (by --retries, or because the deadline
        would pass during the backoff: then the failure itself is reported, not the deadline)."""
        nonlocal attempt
        attempt += 1
        delay = BACKOFF_SECONDS * 2 ** (attempt - 1)
        return attempt > retries or time.monotonic() + delay > soonest()

    with net.deadlines(overall, item):
        while True:
            error = late(net.BEFORE)
            if error is not None:
                raise give_up(error, keep=True)
            # The digest continues across retries: only a .part left by an earlier run
            # (or one whose size no longer matches what was hashed) is read back.
            if not resume:
                part.unlink(missing_ok=True)
                digest, have = hashlib.sha256(), 0
            elif have < 0 or not part.exists() or part.stat().st_size != have:
                digest = hashlib.sha256()
                have = _hash_existing(part, digest) if part.exists() else 0
            if have > limit:
                part.unlink()
                digest, have = hashlib.sha256(), 0
            if attempt == 0:
                resumed_from = have
            headers = {"Range": f"bytes={have}-"} if have else {}
            if have:
                resumed_at.append(have)
            try:
                response = net.open_stream(http, url, headers=headers, timeout=timeout, redirects=redirects, label=label)
            except requests.RequestException as exc:
                error = late(net.HEADERS)  # a session without the deadline adapter: known only now
                if error is not None:
                    raise give_up(error, keep=True) from None
                if out_of_retries():
                    raise give_up(
                        RemoteError(
                            f"cannot download {label}: {type(exc).__name__}",
                            file=url,
                            why=f"{attempt} attempts failed; the server is unreachable or the connection broke",
                            fix="check the network and the URL, then run the command again (partial bytes are kept and resumed)",
                        ),
                        keep=True,
                    ) from None
                time.sleep(BACKOFF_SECONDS * 2 ** (attempt - 1))
                continue
            except PipelineError as error:
                raise give_up(error, keep=True) from None
            with response:
                status = response.status_code
                if status == 416 and expected_size is not None and have == expected_size:
                    pass  # the part file is already complete
                elif status in (404, 410, 401, 403):
                    raise give_up(
                        RemoteError(
                            f"the server answered HTTP {status} for {label}",
                            file=url,
                            why="the asset is not published at this URL (or is not public)",
                            fix="check that the release and asset exist and are public",
                        ),
                        keep=True,
                    )
                elif status >= 500 or status == 429:
                    if out_of_retries():
                        raise give_up(RemoteError(f"the server kept answering HTTP {status} for {label}", file=url, fix="try again later"), keep=True)
                    time.sleep(BACKOFF_SECONDS * 2 ** (attempt - 1))
                    continue
                elif status not in (200, 206):
                    raise give_up(RemoteError(f"unexpected HTTP {status} for {label}", file=url), keep=True)
                else:
                    if status == 200 and have:
                        # The server ignored the Range request: start over.
                        digest, have = hashlib.sha256(), 0
                        mode = "wb"
                    else:
                        mode = "ab" if have else "wb"
                    length = response.headers.get("Content-Length")
                    total = expected_size or (int(length) + have if length and length.isdigit() else None)
                    bar = ui.ByteProgress(label, total) if progress else None
                    if bar:
                        bar.done = have
                    try:
                        with open(part, mode) as sink:
                            for chunk in net.iter_body(
                                response,
                                limit=limit - have,
                                deadline=lambda _count: soonest(),
                                label=label,
                                url=url,
                                what="a document of this kind",
                                pinned=expected_size is not None,
                            ):
                                sink.write(chunk)
                                digest.update(chunk)
                                have += len(chunk)
                                item.earn(len(chunk))
                                if overall is not None:
                                    overall.earn(len(chunk))
                                if bar:
                                    bar(len(chunk))
                                if on_bytes:
                                    on_bytes(len(chunk))
                    except (requests.RequestException, OSError) as exc:
                        error = late(net.BODY)
                        if error is not None:
                            raise give_up(error, keep=True) from None
                        if out_of_retries():
                            raise give_up(
                                RemoteError(
                                    f"download of {label} broke off after {have} bytes: {type(exc).__name__}",
                                    file=url,
                                    fix="run the command again; the partial file is resumed",
                                ),
                                keep=True,
                            ) from None
                        time.sleep(BACKOFF_SECONDS * 2 ** (attempt - 1))
                        continue
                    except net.DeadlinePassed as error:
                        # A valid prefix of a pinned file is resumed next time; the overall deadline is named first.
                        raise give_up(late(net.BODY) or error, keep=True) from None
                    except PipelineError as error:
                        raise give_up(error, keep=False) from None  # over the pin or the cap: these bytes are not the file
                    if bar:
                        bar.finish()
                    if expected_size is not None and have < expected_size:
                        if out_of_retries():
                            raise give_up(RemoteError(f"download of {label} stopped at {have} of {expected_size} bytes", file=url, fix="run the command again"), keep=True)
                        continue
            os.replace(part, target)
            return Download(url, target, digest.hexdigest(), have, resumed_from, time.monotonic() - started, tuple(resumed_at))


def download_verified(
    url: str,
    target: Path,
    *,
    expected_sha256: str,
    expected_size: int | None = None,
    max_size: int | None = None,
    label: str | None = None,
    session=None,
) -> Download:
    """A download pinned by SHA-256; without a pinned size, `max_size` bounds it (and its deadline)."""
    bounds: dict = {}
    if expected_size is None:
        if max_size is None:
            raise ValueError("a download pinned by hash only needs max_size")
        bounds = {"max_size": max_size, "deadline": net.deadline_for(60.0, max_size)}
    result = download(url, target, label=label, session=session, expected_size=expected_size, **bounds)
    if (expected_size is not None and result.size != expected_size) or result.sha256 != expected_sha256:
        target.unlink(missing_ok=True)
        raise IntegrityError(
            f"downloaded bytes of {label or target.name} do not match the pin",
            file=url,
            found=f"sha256 {result.sha256}, {result.size} bytes",
            expected=f"sha256 {expected_sha256}" + (f", {expected_size} bytes" if expected_size is not None else ""),
            why="the file at this URL is not the one that was pinned (tampered, replaced, or a wrong pin)",
            fix="do not use these bytes; check the pin's provenance",
        )
    return result
