"""The status page in a real browser: Debian's chromium, headless, renders every lane and blocker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from repokit import ROOT

from pipeline.formats.lanes import load_lanes
from pipeline.tools.status import collect
from pipeline.tools.status_page import render_page

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium; CI installs it)")


class _Text(HTMLParser):
    """The text a reader sees: everything outside <style>, <script> and <head>."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("style", "script", "head")

    def handle_endtag(self, tag):
        self._skip -= tag in ("style", "script", "head")

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args], capture_output=True, text=True, timeout=90, check=False)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    work = tmp_path_factory.mktemp("status-page")
    status = collect(work / "dist", ROOT, "v0.13.1")
    path = work / "status.html"
    path.write_bytes(render_page(status))
    return work, path, status


def test_chromium_renders_every_lane_and_blocker(page):
    work, path, status = page
    done = _chromium(work, "--dump-dom", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    reader = _Text()
    reader.feed(done.stdout)
    text = " ".join(" ".join(reader.parts).split())
    for lane in load_lanes().values():
        assert lane.id in text
    for row in status.lanes:
        for cell in row.cells.values():
            assert " ".join(cell.state.split()) in text
    blockers = json.loads((ROOT / "manifests" / "v0.13.1" / "manifest.json").read_text())["publication"]["blockers"]
    assert len(status.release.blockers) == len(blockers) == 19
    for blocker in status.release.blockers:
        assert " ".join(blocker.text.split()) in text and " ".join(blocker.fix.split()) in text
    assert "Release v0.13.1 draft" in text and f"Blockers ({len(blockers)})" in text


def test_chromium_screenshots_the_page(page):
    work, path, _status = page
    shot = work / "status.png"
    done = _chromium(work, f"--screenshot={shot}", "--window-size=1400,1200", path.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one
