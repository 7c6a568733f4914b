"""`status` on the sample release the pipeline made (real build, package, qualify records), with and without GitHub."""

from __future__ import annotations

import time

import pytest
from github_standin import StandIn, Token
from releasekit import LANE, RELEASE, sample_release

from pipeline.tools.status import collect


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return sample_release(tmp_path_factory)


def test_the_ready_sample_release_reads_in_under_a_second(release, tmp_path):
    root = release.clone(tmp_path / "product", "ready")
    collect(release.dist, root, RELEASE, lanes_dir=release.lanes_dir)  # warm: imports and the code closure parse
    started = time.perf_counter()
    status = collect(release.dist, root, RELEASE, lanes_dir=release.lanes_dir)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"status took {elapsed:.2f} s"
    cells = {row.lane: row for row in status.lanes}[LANE].cells
    assert cells["build"].text == "up to date" and cells["package"].text == "up to date"
    assert cells["qualify"].state == "done" and cells["qualify"].detail == "passed"
    assert cells["image"].state == "skipped" and cells["publish"].state == "missing"
    assert status.release.state == "ready" and status.release.blockers == []
    assert status.release.acceptance.startswith("passed")


def test_a_draft_lists_its_blockers_and_a_changed_lane_file_makes_the_records_stale(release, tmp_path):
    import shutil

    root = release.clone(tmp_path / "product", "draft")
    status = collect(release.dist, root, RELEASE, lanes_dir=release.lanes_dir)
    assert status.release.state == "draft" and status.release.blockers
    assert all(b.fix.startswith(("python -m pipeline", "set the value", "resolve it", "record the councils' reviews")) for b in status.release.blockers)
    lanes = tmp_path / "lanes"
    shutil.copytree(release.lanes_dir, lanes)
    shutil.copytree(release.lanes_dir.parent / "cuts", tmp_path / "cuts")
    lane_file = lanes / f"{LANE}.toml"
    lane_file.write_text(lane_file.read_text() + "\n# an edit\n")
    cells = {row.lane: row for row in collect(release.dist, root, None, lanes_dir=lanes).lanes}[LANE].cells
    assert cells["build"].text == f"stale: {LANE}.toml changed"
    assert cells["cut"].text.startswith(f"stale: {LANE}.toml changed since")


def test_with_a_token_the_component_prerelease_on_github_is_read(release, tmp_path, monkeypatch):
    from pipeline.formats.lanes import load_lanes

    tag = load_lanes(release.lanes_dir)[LANE].tag()
    with StandIn("alphastorm/ninfer") as gh:
        gh.tokens["t0ken-status"] = Token()
        gh.add_release(tag, draft=False, prerelease=True)
        for key, value in gh.env("t0ken-status").items():
            monkeypatch.setenv(key, value)
        status = collect(release.dist, release.root, None, lanes_dir=release.lanes_dir, token="t0ken-status")
        writes = [entry for entry in gh.log if entry[0] != "GET"]
    cells = {row.lane: row for row in status.lanes}[LANE].cells
    assert cells["publish"].text.startswith("done") and "prerelease on GitHub" in cells["publish"].text
    assert status.github["components"][LANE]["state"] == "prerelease"
    assert writes == []  # read only
