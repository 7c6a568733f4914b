"""Parallel-range downloads of large pinned files (pipeline/infra/ranges.py through transfer.download).

Against the hostile server on 127.0.0.1 (tests/kits/hostile_http.py, route kind `ranged`) with a
small file and a lowered threshold: the bytes and their SHA-256 are the file's, every range went
through the redirect rule, a server that ignores Range or misreports the range falls back to one
stream, another total size fails closed and leaves nothing, an interrupted download resumes range
by range from its checked state file, and the bytes held for hashing stay under their bound.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hostile_http import Route, hostile_server

from pipeline.errors import EnvironmentProblem, IntegrityError, PipelineError, RemoteError
from pipeline.infra import range_state, ranges, transfer

BODY = random.Random(19).randbytes(3 << 20)
DIGEST = hashlib.sha256(BODY).hexdigest()


def fetch(url, target, **kwargs):
    options = {"expected_size": len(BODY), "expected_sha256": DIGEST, "progress": False, "timeout": 5, "connections": 4, "range_threshold": 1 << 20, "retries": 1}
    options.update(kwargs)
    return transfer.download(url, target, **options)


def ranged_requests(server) -> list[tuple[int, int]]:
    spans = []
    for header in server.ranges:
        if header:
            start, _, end = header.removeprefix("bytes=").partition("-")
            spans.append((int(start), int(end)))
    return sorted(spans)


@pytest.fixture(scope="module")
def server():
    with hostile_server() as running:
        yield running


def test_parallel_ranges_deliver_the_pinned_bytes_and_their_hash(server, tmp_path):
    url = server.add("/model.bin", Route("ranged", BODY))
    server.ranges.clear()
    result = fetch(url, tmp_path / "model.bin")
    assert result.sha256 == DIGEST and (tmp_path / "model.bin").read_bytes() == BODY
    assert result.connections > 1 and result.reread == 0  # hashed from memory as the prefix completed
    spans = ranged_requests(server)
    assert len(spans) > 4 and spans[0][0] == 0 and spans[-1][1] == len(BODY) - 1
    covered = ranges.Intervals(tuple((start, end + 1) for start, end in spans))
    assert covered.spans() == ((0, len(BODY)),) and len({start for start, _ in spans}) == len(spans), "the ranges cover the file, none asked twice"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]  # no .part, no state file


def test_the_hashing_buffer_is_bounded_and_what_did_not_fit_is_read_back(server, tmp_path, monkeypatch):
    url = server.add("/bounded.bin", Route("ranged", BODY))
    peak = [0]
    deposit = ranges._Ranges.deposit

    def watched(self, offset, data):
        deposit(self, offset, data)
        peak[0] = max(peak[0], self.buffered)

    monkeypatch.setattr(ranges._Ranges, "deposit", watched)
    original = ranges.fetch
    monkeypatch.setattr(ranges, "fetch", lambda *a, **k: original(*a, **{**k, "memory": 256 << 10}))
    result = fetch(url, tmp_path / "bounded.bin", connections=6)
    assert result.sha256 == DIGEST and result.reread < len(BODY)
    assert peak[0] <= (256 << 10) + (1 << 20)  # the bound, plus at most the one chunk at the prefix


@pytest.mark.parametrize("fault", ["ignore-range", "wrong-range", "no-content-range", "long-body"])
def test_a_server_that_does_not_serve_ranges_faithfully_gets_one_stream(server, tmp_path, fault):
    url = server.add(f"/{fault}.bin", Route("ranged", BODY, fault=fault))
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.connections == 1 and (tmp_path / "asset").read_bytes() == BODY
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asset"]


def test_a_range_answer_that_stalls_ends_by_the_deadline_and_keeps_what_arrived(server, tmp_path):
    url = server.add("/stall.bin", Route("ranged", BODY, fault="stall"))
    started = time.monotonic()
    with pytest.raises(RemoteError):  # the deadline, or the idle timeout with no time left for a retry
        fetch(url, tmp_path / "asset", timeout=0.5, deadline=1.0, retries=1)
    assert time.monotonic() - started < 4, "every range's reads are bounded by the item's deadline"
    assert not [t for t in threading.enumerate() if t.name.startswith("range-")], "no connection thread outlives the download"
    state = range_state.read_state(tmp_path / "asset.part.ranges", size=len(BODY), sha256=DIGEST)
    assert state is not None and state.received, "the halves that arrived are recorded, for the next run"
    assert (tmp_path / "asset.part").read_bytes()[: state.received[0][1]] == BODY[: state.received[0][1]]


def test_ranges_ask_for_the_identity_representation(server, tmp_path):
    # A CDN that compresses when the client accepts gzip serves ranges of the compressed bytes, whose total is
    # not the pinned size: asked for by requests' default Accept-Encoding, that read as a replaced file.
    url = server.add("/cdn-gzip.bin", Route("ranged", BODY, fault="gzip-when-asked"))
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.connections > 1


def test_an_encoded_range_answer_is_a_fallback_not_a_replaced_file(server, tmp_path):
    url = server.add("/gzip-always.bin", Route("ranged", BODY, fault="gzip-always"))
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.connections == 1 and (tmp_path / "asset").read_bytes() == BODY


def test_another_total_size_fails_closed_and_leaves_nothing(server, tmp_path):
    url = server.add("/other-total.bin", Route("ranged", BODY, fault="other-total"))
    with pytest.raises(IntegrityError, match=f"is {len(BODY) + 1} bytes, {len(BODY)} are pinned"):
        fetch(url, tmp_path / "asset")
    assert list(tmp_path.iterdir()) == []


def test_every_range_request_follows_the_redirect_rule(server, tmp_path):
    # Same-origin for the first range, then elsewhere: each range is checked, not only the first.
    url = server.add("/hop.bin", Route("ranged", BODY, fault="redirect-later", location="http://127.0.0.2:9/stolen"))
    with pytest.raises(RemoteError, match="refused to follow the redirect") as caught:
        fetch(url, tmp_path / "asset", retries=0)
    assert "leaves the origin" in str(caught.value)


def test_a_broken_range_resumes_where_it_stopped_within_the_run(server, tmp_path):
    url = server.add("/flaky.bin", Route("ranged", BODY, fault="break", breaks=3))
    server.ranges.clear()
    result = fetch(url, tmp_path / "asset", retries=2)
    assert result.sha256 == DIGEST
    asked = [tuple(int(n) for n in h.removeprefix("bytes=").split("-")) for h in server.ranges if h]
    for start, end in asked[:3]:  # these hung up after half their bytes
        assert (start + (end - start + 1) // 2, end) in asked, "the range was asked again from where it broke, not from its start"


def test_an_interrupted_download_resumes_range_by_range_from_its_state(server, tmp_path):
    url = server.add("/resume.bin", Route("ranged", BODY, fault="break", breaks=10**6))  # every range breaks
    target = tmp_path / "asset"
    with pytest.raises(RemoteError, match="broke off"):
        fetch(url, target, retries=0)
    part = tmp_path / "asset.part"
    state = range_state.read_state(range_state.state_path(part), size=len(BODY), sha256=DIGEST)
    assert state is not None and state.received and part.stat().st_size == len(BODY)
    for start, end in state.received:
        assert part.read_bytes()[start:end] == BODY[start:end]
    kept = sum(end - start for start, end in state.received)
    server.add("/resume.bin", Route("ranged", BODY))
    server.ranges.clear()
    result = fetch(url, target)
    assert result.sha256 == DIGEST and result.resumed_from == kept and target.read_bytes() == BODY
    asked = ranges.Intervals(tuple((start, end + 1) for start, end in ranged_requests(server)))
    assert list(asked.spans()) == ranges.Intervals(state.received).missing(len(BODY)), "only the missing bytes were fetched again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asset"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda doc: doc.update(received=[[0, len(BODY) + 1]]),
        lambda doc: doc.update(received=[[10, 5]]),
        lambda doc: doc.update(received=[[0, 10], [5, 20]]),
        lambda doc: doc.update(received=[[0, True]]),
        lambda doc: doc.update(sha256="0" * 64),
        lambda doc: doc.update(size=7),
        lambda doc: doc.update(extra=1),
    ],
)
def test_a_state_file_that_does_not_check_out_starts_the_file_over(server, tmp_path, tamper):
    url = server.add("/state.bin", Route("ranged", BODY))
    part = tmp_path / "asset.part"
    part.write_bytes(b"\0" * len(BODY))  # bytes the hostile state claims are the file's
    document = {"artifact_type": range_state.STATE_TYPE, "schema_version": 1, "size": len(BODY), "sha256": DIGEST, "received": [[0, len(BODY)]]}
    tamper(document)
    range_state.state_path(part).write_text(json.dumps(document))
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 0


def _state(part, received):
    document = {"artifact_type": range_state.STATE_TYPE, "schema_version": 1, "size": len(BODY), "sha256": DIGEST, "received": received}
    range_state.state_path(part).write_text(json.dumps(document))


def test_bytes_a_valid_state_vouches_for_are_hashed_as_they_are_on_disk(server, tmp_path):
    url = server.add("/altered.bin", Route("ranged", BODY))
    part = tmp_path / "asset.part"
    altered = bytearray(BODY)
    altered[100] ^= 1  # inside a range the state calls received
    part.write_bytes(bytes(altered))
    _state(part, [[0, 1 << 20]])
    result = fetch(url, tmp_path / "asset")
    assert result.resumed_from == 1 << 20 and result.reread >= 1 << 20
    assert result.sha256 == hashlib.sha256(bytes(altered)).hexdigest() != DIGEST, "the digest is the real bytes', so the pin check fails"


def test_a_symlink_at_the_part_path_is_replaced_never_written_through(server, tmp_path):
    url = server.add("/link.bin", Route("ranged", BODY))
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "asset.part").symlink_to(victim)
    _state(tmp_path / "asset.part", [[0, 1 << 20]])
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 0 and victim.read_bytes() == b"precious"


def test_a_single_stream_prefix_is_kept_as_the_first_range(server, tmp_path):
    url = server.add("/prefix.bin", Route("ranged", BODY))
    (tmp_path / "asset.part").write_bytes(BODY[: 1 << 20])
    server.ranges.clear()
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 1 << 20 and result.reread == 1 << 20
    assert ranged_requests(server)[0][0] == 1 << 20


def test_a_full_size_part_without_its_state_starts_over(server, tmp_path):
    url = server.add("/holes.bin", Route("ranged", BODY))
    (tmp_path / "asset.part").write_bytes(bytes(len(BODY)))  # preallocated, the state file lost
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 0


def test_small_files_and_one_connection_stay_one_stream(server, tmp_path):
    url = server.add("/small.bin", Route("ranged", BODY))
    server.ranges.clear()
    assert fetch(url, tmp_path / "a", range_threshold=len(BODY)).connections == 1
    assert fetch(url, tmp_path / "b", connections=1).connections == 1
    assert server.ranges == ["", ""]


def test_the_connection_budget_is_shared(server, tmp_path):
    url = server.add("/budget.bin", Route("ranged", BODY))
    budget = threading.BoundedSemaphore(3)
    result = fetch(url, tmp_path / "asset", connections=8, budget=budget)
    assert result.sha256 == DIGEST and 1 < result.connections <= 3
    assert budget.acquire(blocking=False) and budget.acquire(blocking=False) and budget.acquire(blocking=False), "every connection was given back"


def test_intervals_merge():
    spans = ranges.Intervals()
    for start, end in [(10, 20), (30, 40), (20, 30), (0, 5), (50, 60)]:
        spans.add(start, end)
    assert spans.spans() == ((0, 5), (10, 40), (50, 60))
    assert spans.end_at(12) == 40 and spans.end_at(5) is None and spans.end_at(0) == 5
    assert spans.missing(70) == [(5, 10), (40, 50), (60, 70)]


def test_progress_is_one_line_per_file_over_all_its_ranges_and_only_on_a_terminal(monkeypatch):
    from pipeline.infra import progress
    from pipeline.util import ui

    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    assert progress.wanted() is False  # a pipe or a log: no live display
    bars = progress.TransferProgress("all", 3000)
    try:
        line = bars.file("model", 2000, done=500)
        threads = [threading.Thread(target=lambda: [line(10) for _ in range(15)]) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        tasks = {task.description: task for task in bars.progress.tasks}
        assert tasks["model"].completed == 500 + 600 and tasks["all"].completed == 500 + 600
        line.finish()
        assert [task.description for task in bars.progress.tasks] == ["all"]
        retry = bars.file("model", 2000, done=1100)
        assert bars.progress.tasks[0].completed == 1100, "a retry's line does not count the bytes on disk twice"
        retry.finish()
        bars.file("model", 2000, done=0)  # the ranges were discarded: one stream from the start
        assert bars.progress.tasks[0].completed == 0, "discarded bytes leave the overall line"
    finally:
        bars.close()
    ui.set_quiet(True)
    try:
        assert progress.wanted() is False
    finally:
        ui.set_quiet(False)


@pytest.mark.parametrize("count", ["0", str(ranges.MAX_CONNECTIONS + 1), "100000"])
def test_connections_outside_their_bounds_is_a_usage_error(capsys, count):
    from pipeline.cli import main

    assert main(["audit", "manifest.json", "--connections", count]) == 2
    assert f"--connections must be from 1 to {ranges.MAX_CONNECTIONS}" in capsys.readouterr().err


def test_free_connections_take_over_half_of_the_longest_piece_at_the_end(server, tmp_path, monkeypatch):
    url = server.add("/steal.bin", Route("ranged", BODY, interval=0.02))  # 64 KiB per 20 ms and connection
    monkeypatch.setattr(ranges, "piece_size", lambda size, connections: size)  # one piece (cut in two by the stagger)
    server.ranges.clear()
    result = fetch(url, tmp_path / "asset", connections=4)
    assert result.sha256 == DIGEST and (tmp_path / "asset").read_bytes() == BODY
    starts = {int(h.removeprefix("bytes=").partition("-")[0]) for h in server.ranges if h}
    assert len(starts) > 2 and result.connections > 2, "connections beyond the two pieces split the rest"


def test_a_single_stream_resume_checks_the_content_range_too(server, tmp_path):
    # A resumed single stream whose 206 answer starts elsewhere starts over; another total fails closed.
    url = server.add("/shifted.bin", Route("ranged", BODY, fault="wrong-range"))
    (tmp_path / "a.part").write_bytes(BODY[:1000])
    assert fetch(url, tmp_path / "a", connections=1).sha256 == DIGEST
    url = server.add("/grown.bin", Route("ranged", BODY, fault="other-total"))
    (tmp_path / "b.part").write_bytes(BODY[:1000])
    with pytest.raises(IntegrityError, match="are pinned"):
        fetch(url, tmp_path / "b", connections=1)
    assert not (tmp_path / "b.part").exists()


def test_a_single_stream_resume_asks_for_the_identity_representation(server, tmp_path):
    url = server.add("/resume-gzip.bin", Route("ranged", BODY, fault="gzip-when-asked"))
    (tmp_path / "a.part").write_bytes(BODY[:1000])
    result = fetch(url, tmp_path / "a", connections=1)
    assert result.sha256 == DIGEST and result.resumed_from == 1000


@pytest.mark.parametrize("name", ["asset.part", "asset.part.ranges"])
def test_a_folder_at_the_part_or_state_path_is_named_not_a_traceback(server, tmp_path, name):
    url = server.add("/folder.bin", Route("ranged", BODY))
    (tmp_path / name).mkdir()
    if name == "asset.part":
        _state(tmp_path / "asset.part", [[0, 1 << 20]])
    with pytest.raises(EnvironmentProblem, match="is a folder") as caught:
        fetch(url, tmp_path / "asset")
    assert caught.value.file == str(tmp_path / name) and (tmp_path / name).is_dir()


def test_a_failing_disk_is_named_not_retried_as_a_broken_connection(server, tmp_path, monkeypatch):
    import os

    url = server.add("/disk.bin", Route("ranged", BODY))

    def full(*_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ranges.os, "pwrite", full)
    with pytest.raises(EnvironmentProblem, match="cannot write asset.part: No space left on device"):
        fetch(url, tmp_path / "asset", retries=3)
    assert range_state.state_path(tmp_path / "asset.part").exists(), "what arrived before stays resumable"


def test_a_single_stream_never_writes_through_a_symlink_at_the_part_path(server, tmp_path):
    url = server.add("/stream-link.bin", Route("ranged", BODY))
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "a.part").symlink_to(victim)
    result = fetch(url, tmp_path / "a", connections=1)
    assert result.sha256 == DIGEST and result.resumed_from == 0 and victim.read_bytes() == b"precious"
    assert not (tmp_path / "a").is_symlink()


def test_a_single_stream_names_a_failing_disk(server, tmp_path):
    url = server.add("/stream-full.bin", Route("ranged", BODY))
    (tmp_path / "a.part").write_bytes(BODY[:10])
    from pipeline.infra import transfer

    real_open = transfer._open_sink

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, _data):
            raise OSError(28, "No space left on device")

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(transfer, "_open_sink", lambda part, *, append: Full(real_open(part, append=append)))
    try:
        with pytest.raises(EnvironmentProblem, match="cannot write a.part: No space left on device"):
            fetch(url, tmp_path / "a", connections=1, retries=3)
    finally:
        monkeypatch.undo()
    assert (tmp_path / "a.part").read_bytes() == BODY[:10], "the prefix stays, to resume"


@pytest.mark.parametrize("connections", [4, 1], ids=["ranges", "one-stream"])
@pytest.mark.parametrize("with_state", [False, True], ids=["prefix", "state"])
def test_a_hard_link_planted_as_part_is_refused_and_its_target_unchanged(server, tmp_path, connections, with_state):
    url = server.add("/hardlink.bin", Route("ranged", BODY))
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(BODY[:4096] if not with_state else bytes(len(BODY)))
    folder = tmp_path / "cache"
    folder.mkdir()
    os.link(victim, folder / "asset.part")
    if with_state:
        _state(folder / "asset.part", [[0, 1 << 20]])
    before = victim.read_bytes()
    with pytest.raises(EnvironmentProblem, match="asset.part is not a download's own partial file .*found '2 names'"):
        fetch(url, folder / "asset", connections=connections)
    assert victim.read_bytes() == before and not (folder / "asset").exists()


def test_the_part_is_flushed_before_each_state_that_vouches_for_it(server, tmp_path, monkeypatch):
    url = server.add("/flushed.bin", Route("ranged", BODY, interval=0.01))  # ~0.2 s: several saves at 10 ms
    events = []
    real_write_state = ranges.write_state
    flushing_threads = set()
    monkeypatch.setattr(ranges, "_flush", lambda fd: (events.append("flush"), flushing_threads.add(threading.current_thread().name)))
    monkeypatch.setattr(ranges, "write_state", lambda path, state: (events.append(("state", state.received)), real_write_state(path, state)))
    monkeypatch.setattr(ranges, "SAVE_SECONDS", 0.01)
    assert fetch(url, tmp_path / "asset").sha256 == DIGEST
    saves = [index for index, event in enumerate(events) if event != "flush"]
    assert events[saves[0]] == ("state", ()) and len(saves) > 2, events  # the empty state when the .part is made whole, then saves as pieces land
    assert all(events[index - 1] == "flush" for index in saves[1:]), events  # the first vouches for nothing
    assert events.count("flush") == len(saves) - 1, "one flush per state write, none per chunk"
    assert flushing_threads == {"range-state"}, "no receiving connection waits for the disk"


def test_a_state_file_with_a_second_name_vouches_for_nothing(server, tmp_path):
    url = server.add("/linked-state.bin", Route("ranged", BODY))
    part = tmp_path / "cache" / "asset.part"
    part.parent.mkdir()
    part.write_bytes(bytes(len(BODY)))  # holes a planted state would call bytes
    outside = tmp_path / "outside.json"
    _state(outside.with_name("outside.json.part"), [[0, len(BODY) // 2]])  # a valid state, written elsewhere
    range_state.state_path(outside.with_name("outside.json.part")).rename(outside)
    before = outside.read_bytes()
    os.link(outside, range_state.state_path(part))
    result = fetch(url, tmp_path / "cache" / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 0, "the linked state was not trusted"
    assert outside.read_bytes() == before


def test_a_claimed_size_reserves_no_disk_before_the_server_confirms_it(server, tmp_path, monkeypatch):
    # A manifest may claim a 20 GB file: while the server has none (404), no room is asked for, nothing is made
    # whole and no state vouches for anything.
    asked = []
    monkeypatch.setattr(ranges.shutil, "disk_usage", lambda path, real=shutil.disk_usage: asked.append(path) or real(path))
    with pytest.raises(RemoteError):
        fetch(server.url("/no-such-file.bin"), tmp_path / "asset", expected_size=20 << 30, retries=0)
    assert asked == []
    part = tmp_path / "asset.part"
    assert not part.exists() or part.stat().st_size == 0
    assert not range_state.state_path(part).exists()


def test_the_whole_file_is_made_once_the_first_answer_confirms_its_size(server, tmp_path, monkeypatch):
    url = server.add("/reserved.bin", Route("ranged", BODY))
    asked = []
    monkeypatch.setattr(ranges.shutil, "disk_usage", lambda path, real=shutil.disk_usage: asked.append(path) or real(path))
    assert fetch(url, tmp_path / "asset").sha256 == DIGEST
    assert asked == [tmp_path]


def test_no_room_for_the_rest_is_said_before_any_byte_is_written_and_a_prefix_survives(server, tmp_path, monkeypatch):
    url = server.add("/full-disk.bin", Route("ranged", BODY))
    part = tmp_path / "asset.part"
    part.write_bytes(BODY[: 1 << 20])  # what a single stream left
    monkeypatch.setattr(ranges.shutil, "disk_usage", lambda path: SimpleNamespace(total=1 << 40, used=1 << 40, free=len(BODY) - (1 << 20) - 1))
    with pytest.raises(EnvironmentProblem, match=f"no room for {len(BODY)} bytes of asset.part"):
        fetch(url, tmp_path / "asset", retries=0)
    assert part.read_bytes() == BODY[: 1 << 20] and not range_state.state_path(part).exists()
    monkeypatch.undo()
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 1 << 20


@pytest.mark.parametrize("status", [503, 404])
def test_a_single_streams_prefix_survives_a_first_ranged_answer_that_fails(tmp_path, status):
    with hostile_server() as own:
        part = tmp_path / "asset.part"
        part.write_bytes(BODY[: 1 << 20])  # what a single stream left
        url = own.add("/f.bin", Route("body", b"x", status=status))
        with pytest.raises(PipelineError):
            fetch(url, tmp_path / "asset", retries=0)
        assert part.read_bytes() == BODY[: 1 << 20] and not range_state.state_path(part).exists()
        own.add("/f.bin", Route("ranged", BODY))
        result = fetch(url, tmp_path / "asset")
        assert result.sha256 == DIGEST and result.resumed_from == 1 << 20


def test_a_large_file_costs_few_requests_and_a_round_of_pieces_ahead_of_the_prefix_is_no_lag():
    """Each request waits for its first byte (50 ms at a CDN): a 4 GiB file over 8 connections is cut into
    64 MiB pieces (2% of a piece's time at 25 MiB/s; 16 MiB cost 7%, 1.7 s).  A round of such pieces in
    flight is that far ahead of the hashed prefix anyway (what is past the hashing buffer is read back from
    the .part): only more than that makes a free connection help the lowest piece instead of taking the next."""
    size, connections = 4 << 30, 8
    job = ranges._Ranges(None, -1, Path("model.part"), size=size, sha256=None, received=ranges.Intervals(), connections=connections,
                         budget=None, piece=ranges.piece_size(size, connections), memory=ranges.HASH_BUFFER, on_bytes=None)
    assert len(job.pending) <= size // (64 << 20) + connections
    flying = [job.take() for _ in range(connections)]
    lowest = list(flying[0])
    for slot in flying[1:]:  # every piece but the lowest has arrived: 7 pieces ahead of the prefix
        job.received.add(slot[0], slot[1])
    assert job.received.total() > ranges.HASH_BUFFER  # past the buffer, not past a round
    following = job.pending[0]
    assert job.take() == list(following) and flying[0] == lowest, "the next piece, the lowest left whole"
    job.received.add(following[0], following[1])
    job.received.add(following[1], following[1] + job.lag_limit)  # far more than a round ahead: the lowest holds the prefix back
    taken = job.take()
    assert flying[0][1] < lowest[1] and taken == [flying[0][1], lowest[1]], "the second half of the lowest piece"


def _interrupted(server, tmp_path, name):
    """A ranged download broken off: its .part whole (sparse), its state beside it; the server then heals."""
    url = server.add(f"/{name}", Route("ranged", BODY, fault="break", breaks=10**6))
    with pytest.raises(RemoteError):
        fetch(url, tmp_path / "asset", retries=0)
    part = tmp_path / "asset.part"
    assert part.stat().st_size == len(BODY) and range_state.state_path(part).exists()
    server.add(f"/{name}", Route("ranged", BODY))
    return url, part


def test_a_one_stream_rerun_never_takes_a_ranged_part_for_its_prefix(server, tmp_path):
    url, _part = _interrupted(server, tmp_path, "one-stream-after-ranges.bin")
    result = fetch(url, tmp_path / "asset", connections=1)
    assert result.sha256 == DIGEST and result.resumed_from == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asset"]


def test_a_resumed_whole_part_still_checks_the_room_for_its_gaps(server, tmp_path, monkeypatch):
    url, _part = _interrupted(server, tmp_path, "resumed-room.bin")
    monkeypatch.setattr(ranges.shutil, "disk_usage", lambda path: SimpleNamespace(total=1, used=1, free=0))
    with pytest.raises(EnvironmentProblem, match="no room for"):
        fetch(url, tmp_path / "asset")


def test_two_downloads_into_one_file_system_count_each_others_room(server, tmp_path, monkeypatch):
    url = server.add("/room-for-one.bin", Route("ranged", BODY, interval=0.01))
    monkeypatch.setattr(ranges.shutil, "disk_usage", lambda path: SimpleNamespace(total=1, used=1, free=len(BODY) + 10))
    outcome = {}

    def one(index):
        try:
            outcome[index] = fetch(url, tmp_path / f"asset{index}").sha256 == DIGEST
        except EnvironmentProblem as problem:
            outcome[index] = problem.what

    threads = [threading.Thread(target=one, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(str, outcome.values())) == ["True", f"no room for {len(BODY)} bytes of asset{1 - [k for k, v in outcome.items() if v is True][0]}.part"]


def test_a_failure_making_the_part_whole_is_named_and_keeps_the_prefix(server, tmp_path, monkeypatch):
    url = server.add("/efbig.bin", Route("ranged", BODY))
    part = tmp_path / "asset.part"
    part.write_bytes(BODY[: 1 << 20])

    def too_large(fd, size):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    monkeypatch.setattr(ranges.os, "ftruncate", too_large)
    with pytest.raises(EnvironmentProblem, match="cannot write asset.part: File too large"):
        fetch(url, tmp_path / "asset", retries=0)
    monkeypatch.undo()
    result = fetch(url, tmp_path / "asset")
    assert result.sha256 == DIGEST and result.resumed_from == 1 << 20


def test_a_state_save_that_fails_after_a_write_failure_does_not_hide_it(server, tmp_path, monkeypatch):
    url = server.add("/two-failures.bin", Route("ranged", BODY))
    real_write_state, calls = ranges.write_state, []

    def state_then_full(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write_state(*args, **kwargs)

    def full(*_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ranges, "write_state", state_then_full)
    monkeypatch.setattr(ranges.os, "pwrite", full)
    with pytest.raises(EnvironmentProblem, match="cannot write asset.part: No space left on device"):
        fetch(url, tmp_path / "asset", retries=0)
