"""`status`: each cell's state from the register, the cut ledgers and the lane files, without running a stage."""

from __future__ import annotations

import json
import time

import pytest
from repokit import ROOT

from pipeline.cli import main
from pipeline.errors import EnvironmentProblem
from pipeline.formats.lanes import load_lanes
from pipeline.stage import Context, Stage, execute
from pipeline.tools.status import collect, render_text

LANE = "rtx5090-container"


class _Toy(Stage):
    """A stand-in for a lane's stage: writes one output, may read one entry, may refuse."""

    def __init__(self, ctx, name, lane, kind, value, *, reads=None, refuse=False, **attrs):
        super().__init__(ctx)
        self.name, self.lane, self.kind, self.value, self.reads, self.refuse, self.attrs = name, lane, kind, value, reads, refuse, attrs

    @property
    def key(self):
        return f"{self.name}:{self.lane.id}"

    def preflight(self):
        if self.refuse:
            raise EnvironmentProblem("this host cannot do it", why="a test says so", fix="run it elsewhere")
        if self.reads:
            self.ctx.register.one(self.reads, lane=self.lane.id, needed_by=self.name, produced_by="earlier")

    def inputs(self):
        return {"lane": self.lane.id, "lane_file_sha256": self.lane.file_sha256, "value": self.value}

    def run(self):
        path = self.ctx.dist / self.lane.id / self.name / "out.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"value": self.value}))
        return [self.ctx.register.make(self.kind, path, stage=self.name, lane=self.lane.id, **self.attrs)]


@pytest.fixture()
def road(tmp_path):
    lane = load_lanes()[LANE]
    ctx = Context.open(tmp_path / "dist", root=ROOT)
    execute(_Toy(ctx, "build", lane, "build-identity", "one"))
    execute(_Toy(ctx, "package", lane, "outer-checksums", "sums", reads="build-identity", component_tag=lane.tag()))
    return ctx, lane


def _cells(ctx, lane_id=LANE):
    status = collect(ctx.dist, ROOT, None)
    return {row.lane: row for row in status.lanes}[lane_id].cells


def test_fresh_records_are_up_to_date_and_the_rest_missing_or_skipped(road):
    ctx, lane = road
    cells = _cells(ctx)
    assert cells["build"].text == "up to date" and cells["package"].text == "up to date"
    assert cells["image"].state == "missing" and cells["qualify"].state == "missing"
    assert cells["cut"].state == "done" and cells["cut"].detail == "published"  # the ledger's current cut
    native = _cells(ctx, "rtx4090-windows-native")
    assert native["image"].text == "skipped: a native lane ships no image" and native["build"].state == "missing"


def test_an_upstream_rerun_makes_the_stage_that_read_it_stale(road):
    ctx, lane = road
    execute(_Toy(ctx, "build", lane, "build-identity", "two"))  # new bytes for the entry package read
    cells = _cells(ctx)
    assert cells["build"].text == "up to date"
    assert cells["package"].text == f"stale: {LANE}/build/out.json changed (build recorded new bytes)"


def test_an_output_changed_on_disk_is_stale(road):
    ctx, _lane = road
    (ctx.dist / LANE / "package" / "out.json").write_text("edited")
    assert _cells(ctx)["package"].text == f"stale: output {LANE}/package/out.json changed on disk"


def test_a_changed_code_file_is_named(road):
    ctx, _lane = road
    register = json.loads((ctx.dist / "register.json").read_text())
    from pipeline.codedigest import code_files

    recorded = code_files("pipeline.stages.package")
    recorded["stages/package.py"] = "0" * 64  # as if package.py had other bytes when the record was made
    register["stages"][f"package:{LANE}"]["code"] = recorded
    (ctx.dist / "register.json").write_text(json.dumps(register))
    cell = _cells(ctx)["package"]
    assert cell.text == "stale: code changed: pipeline/stages/package.py"


def test_a_cut_other_than_the_current_one_is_stale(road):
    ctx, lane = road
    execute(_Toy(ctx, "package", lane, "outer-checksums", "old", reads="build-identity", component_tag=lane.tag(1)))
    assert _cells(ctx)["package"].text == f"stale: made for {lane.tag(1)}, the lane's current cut is {lane.tag()}"


def test_a_refusal_is_shown_until_the_stage_next_succeeds(road):
    ctx, lane = road
    with pytest.raises(EnvironmentProblem):
        execute(_Toy(ctx, "image", lane, "oci-layout", "x", refuse=True, manifest_digest="sha256:" + "1" * 64))
    cell = _cells(ctx)["image"]
    assert cell.state == "refused" and "this host cannot do it" in cell.detail and "Fix: run it elsewhere" in cell.detail
    execute(_Toy(ctx, "image", lane, "oci-layout", "x", manifest_digest="sha256:" + "1" * 64))
    cell = _cells(ctx)["image"]
    assert cell.text == "up to date" and cell.digest == "1" * 64  # an image is named by its manifest digest


def test_the_release_lists_every_blocker_with_its_command(road):
    ctx, _lane = road
    manifest = json.loads((ROOT / "manifests" / "v0.13.1" / "manifest.json").read_text())
    status = collect(ctx.dist, ROOT, "v0.13.1")
    assert status.release.state == manifest["status"] == "draft"
    assert [b.text for b in status.release.blockers] == manifest["publication"]["blockers"]
    fixes = {b.text.split(": ", 1)[0]: b.fix for b in status.release.blockers}
    assert fixes["pins"] == "python -m pipeline compose rebind --release v0.13.1 --pin HEAD"
    assert fixes["external-install"].startswith("python -m pipeline compose accept --release v0.13.1 --record FILE")
    assert fixes["components.ninfer.qualification"].startswith(f"python -m pipeline qualify --lane {LANE} --import RECEIPT")
    assert {r.route for r in status.release.routes} >= {"rtx5090-wsl2", "audit"}
    assert all(r.receipts == () for r in status.release.routes)
    text = render_text(status)
    assert "release v0.13.1: draft" in text and "clear: python -m pipeline compose rebind --release v0.13.1 --pin HEAD" in text


def test_the_command_prints_text_json_and_a_reproducible_page(road, tmp_path, capsys):
    ctx, _lane = road
    started = time.perf_counter()
    assert main(["status", "--dist", str(ctx.dist), "--release", "v0.13.1", "--json"]) == 0
    assert time.perf_counter() - started < 1.0  # cheap: no stage runs
    document = json.loads(capsys.readouterr().out)
    assert document["stages"] == ["cut", "build", "package", "image", "push", "qualify", "publish"]
    assert {row["lane"]: row["stages"]["build"]["state"] for row in document["lanes"]}[LANE] == "up to date"
    pages = []
    for name in ("a.html", "b.html"):
        assert main(["status", "--dist", str(ctx.dist), "--release", "v0.13.1", "--html", str(tmp_path / name), "--quiet"]) == 0
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1]
    assert b"<script" not in pages[0] and b"src=" not in pages[0] and b"href=" not in pages[0]


def test_hostile_text_is_escaped_in_the_page(road):
    from pipeline.tools.status_page import render_page

    ctx, lane = road
    with pytest.raises(EnvironmentProblem):
        execute(_Toy(ctx, "image", lane, "oci-layout", "<script>alert(1)</script>", refuse=True, manifest_digest="sha256:" + "1" * 64))
    log = json.loads((ctx.dist / "refusals.json").read_text())
    log["refusals"][f"image:{LANE}"]["message"] = "<script>alert(1)</script><img src=x>"
    (ctx.dist / "refusals.json").write_text(json.dumps(log))
    page = render_page(collect(ctx.dist, ROOT, None))
    assert b"<script>" not in page and b"<img" not in page and b"&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x&gt;" in page


def test_a_bad_release_name_is_a_usage_error(road, capsys):
    ctx, _lane = road
    assert main(["status", "--dist", str(ctx.dist), "--release", "../etc"]) == 2
    assert "error[usage]" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value", "named"), [
    ("read", "garbage", "read"),
    ("inputs", {"lane": 7}, "inputs.lane"),
    ("code", {"/etc/passwd": "0" * 64}, "code"),
    ("code", {"../../etc/passwd": "0" * 64}, "code"),
    ("lane", ["a list"], "lane"),
])
def test_a_record_with_malformed_facts_is_refused_naming_the_field(road, capsys, field, value, named):
    ctx, _lane = road
    register = json.loads((ctx.dist / "register.json").read_text())
    register["stages"][f"package:{LANE}"][field] = value
    (ctx.dist / "register.json").write_text(json.dumps(register))
    assert main(["status", "--dist", str(ctx.dist)]) == 1  # no traceback, and no file outside pipeline/ hashed
    err = capsys.readouterr().err
    assert err.startswith("error[input]") and f"stages.package:{LANE}.{named}" in err


def test_a_refusal_with_a_malformed_exit_code_or_lane_is_refused(road, capsys):
    ctx, lane = road
    with pytest.raises(EnvironmentProblem):
        execute(_Toy(ctx, "image", lane, "oci-layout", "x", refuse=True))
    log = json.loads((ctx.dist / "refusals.json").read_text())
    for field, value in (("exit_code", "3"), ("lane", {"id": LANE})):
        bad = json.loads(json.dumps(log))
        bad["refusals"][f"image:{LANE}"][field] = value
        (ctx.dist / "refusals.json").write_text(json.dumps(bad))
        assert main(["status", "--dist", str(ctx.dist)]) == 1
        assert f"refusals.image:{LANE}.{field}" in capsys.readouterr().err


def test_a_refusal_quoting_a_huge_value_is_kept_bounded(road):
    from pipeline.register import MAX_REFUSAL_CHARS

    class _Huge(_Toy):
        def preflight(self):
            raise EnvironmentProblem("this host cannot do it: " + "y" * 1_000_000, found="x" * 1_000_000)

    ctx, lane = road
    with pytest.raises(EnvironmentProblem):
        execute(_Huge(ctx, "image", lane, "oci-layout", "x"))
    message = json.loads((ctx.dist / "refusals.json").read_text())["refusals"][f"image:{LANE}"]["message"]
    assert len(message) == MAX_REFUSAL_CHARS and message.startswith("this host cannot do it: yyy") and message.endswith("\u2026")
    # A found value is bounded where the error is rendered (`errors.quoted`), before any record.
    assert "(and 999800 more characters)" in EnvironmentProblem("x", found="x" * 1_000_000).render()


def test_a_success_under_another_key_of_the_same_stage_and_lane_ends_its_refusal(road):
    """publish keys name the tag (publish:component-<tag>): a refused publish of one cut must not stay
    'refused' after the next cut's publish succeeded."""

    class _Publish(_Toy):
        def __init__(self, *args, key_tag, **kwargs):
            super().__init__(*args, **kwargs)
            self.key_tag = key_tag

        @property
        def key(self):
            return f"publish:component-{self.key_tag}"

    ctx, lane = road
    attrs = {"plan_sha256": "2" * 64, "release_id": 7, "repository": "o/r", "tag": lane.tag()}
    with pytest.raises(EnvironmentProblem):
        execute(_Publish(ctx, "publish", lane, "release-publication", "x", refuse=True, key_tag=lane.tag(1), **attrs))
    assert _cells(ctx)["publish"].state == "refused"
    execute(_Publish(ctx, "publish", lane, "release-publication", "y", key_tag=lane.tag(), **attrs))
    assert _cells(ctx)["publish"].state == "done"
    assert not (ctx.dist / "refusals.json").exists()  # the log goes when its last refusal is answered
    assert "refusals" not in json.loads((ctx.dist / "register.json").read_text())


def test_a_stage_that_runs_another_records_only_what_it_read_itself(road):
    """rebuild runs build and package, accept binds through compose: the inner run's reads are its own."""
    ctx, lane = road

    class _Outer(_Toy):
        def run(self):
            self.ctx.register.one("outer-checksums", lane=lane.id, needed_by="outer", produced_by="package")
            execute(_Toy(ctx, "image", lane, "oci-layout", "inner", reads="build-identity", manifest_digest="sha256:" + "1" * 64))
            return super().run()

    execute(_Outer(ctx, "qualify", lane, "lane-receipt", "x", status="passed", component_tag=lane.tag()))
    stages = json.loads((ctx.dist / "register.json").read_text())["stages"]
    assert list(stages[f"qualify:{LANE}"]["read"]) == [f"{LANE}/package/out.json"]
    assert list(stages[f"image:{LANE}"]["read"]) == [f"{LANE}/build/out.json"]


def test_a_record_made_before_records_kept_their_facts_is_not_called_up_to_date(road):
    ctx, _lane = road
    register = json.loads((ctx.dist / "register.json").read_text())
    for name in ("lane", "inputs", "code", "read"):
        del register["stages"][f"package:{LANE}"][name]
    (ctx.dist / "register.json").write_text(json.dumps(register))
    cell = _cells(ctx)["package"]
    assert cell.state == "done" and "run the stage again to know" in cell.detail


def test_a_refusal_quoting_a_secret_keeps_it_out_of_the_register(road):
    from pipeline.errors import register_secret
    from pipeline.runcontext import run_context

    class _Leaky(_Toy):
        def preflight(self):
            raise EnvironmentProblem("the registry refused the login", found="Bearer ghp_s3cr3tT0ken", fix="check the token")

    ctx, lane = road
    with run_context(quiet=True):
        register_secret("ghp_s3cr3tT0ken")
        with pytest.raises(EnvironmentProblem):
            execute(_Leaky(ctx, "image", lane, "oci-layout", "x"))
    text = (ctx.dist / "refusals.json").read_text()
    assert "ghp_s3cr3tT0ken" not in text and "Bearer [REDACTED]" in text
    assert "ghp_s3cr3tT0ken" not in (ctx.dist / "register.json").read_text()


def test_a_page_that_cannot_be_written_is_a_usage_error(road, tmp_path, capsys):
    ctx, _lane = road
    (tmp_path / "file").write_text("x")
    assert main(["status", "--dist", str(ctx.dist), "--html", str(tmp_path / "file" / "page.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error[usage]") and "the status page could not be written" in err and "--html" in err


def test_a_stage_that_reads_its_own_earlier_output_is_not_stale_by_it(road):
    ctx, lane = road

    class _Again(_Toy):
        def preflight(self):  # e.g. a stage comparing with what it made last time
            if self.ctx.register.query("lane-receipt", lane=lane.id):
                self.ctx.register.one("lane-receipt", lane=lane.id, needed_by="qualify", produced_by="qualify")

    execute(_Again(ctx, "qualify", lane, "lane-receipt", "first", status="passed", component_tag=lane.tag()))
    execute(_Again(ctx, "qualify", lane, "lane-receipt", "second", status="passed", component_tag=lane.tag()))
    cell = _cells(ctx)["qualify"]
    assert cell.state == "done" and cell.detail == "passed", cell.text


def test_a_urls_password_reaches_neither_the_refusal_log_nor_the_register_nor_the_page(road):
    from pipeline.errors import RemoteError
    from pipeline.tools.status_page import render_page

    class _Fetching(_Toy):
        def preflight(self):
            raise RemoteError("cannot download http://user:PW-one@mirror.test/x.json", file="https://user:PW-two@mirror.test/x.json", found="https://a:PW-three@h.test/")

    ctx, lane = road
    with pytest.raises(RemoteError):
        execute(_Fetching(ctx, "image", lane, "oci-layout", "x"))
    refusals = (ctx.dist / "refusals.json").read_text()
    assert "PW-" not in refusals and "https://[REDACTED]@mirror.test/x.json" in refusals
    log = json.loads(refusals)
    log["refusals"][f"image:{LANE}"]["message"] = "planted http://u:PW-five@h.test/ in the log"
    (ctx.dist / "refusals.json").write_text(json.dumps(log))
    page = render_page(collect(ctx.dist, ROOT, None))
    assert b"PW-" not in page and b"http://[REDACTED]@h.test/" in page
    # A stage's record that names a URL: its password never reaches register.json.
    execute(_Toy(ctx, "image", lane, "oci-layout", "x", manifest_digest="sha256:" + "1" * 64, source_url="https://u:PW-four@mirror.test/y"))
    register = (ctx.dist / "register.json").read_text()
    assert "PW-" not in register and "https://[REDACTED]@mirror.test/y" in register


def _ci_block(sha):
    run = {"id": 7, "name": "build", "head_sha": sha, "status": "completed", "conclusion": "success", "html_url": None, "app": "github-actions"}
    return {"repository": "alphastorm/ninfer", "sha": sha, "required": ["build"], "check_runs": [run], "statuses": []}


def _plan_entry(ctx, lane, commit, name):
    from pipeline.formats import publication_plan as plans

    observed = {"read": True, "tag": None, "immutable_releases": None, "releases": [], "ci": _ci_block(commit)}
    plan = plans.make_plan(kind="component", subject=lane.id, repository="alphastorm/ninfer", tag=lane.tag(), commit=commit, name=lane.tag(), body="b",
                           prerelease=True, make_latest=False, gates=[], observed=observed,
                           assets=[{"name": "a.tar.zst", "size": 1, "sha256": "1" * 64, "source": {"root": "dist", "path": "a.tar.zst"}}])
    path = ctx.dist / lane.id / "publish" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(plans.plan_bytes(plan))
    return ctx.register.make("publication-plan", path, stage="publish", lane=lane.id, name=f"{lane.id}/{name}",
                             plan_sha256=plans.plan_sha256(plan), repository="alphastorm/ninfer", tag=lane.tag())


def test_the_ci_line_shows_only_a_record_of_the_current_cuts_commit(road, monkeypatch):
    import dataclasses

    from pipeline.tools import status

    ctx, lane = road
    now, earlier = "a" * 40, "e" * 40
    cut = dataclasses.replace(lane.ledger().current(lane.version), source_commit=now)
    monkeypatch.setattr(status, "_current_cut", lambda _lane: cut)  # the seeded ledger's current cut records no commit
    ctx.register.record_stage("publish:old", "f" * 64, [_plan_entry(ctx, lane, earlier, "old-plan.json")])
    assert status.ci_recorded(lane, ctx.register) is None, "a plan of an earlier cut's commit says nothing about this cut's CI"
    ctx.register.record_stage("publish:new", "f" * 64, [_plan_entry(ctx, lane, now, "new-plan.json")])
    assert status.ci_recorded(lane, ctx.register) == "green at aaaaaaaaaaaa: build #7 success (publication plan)"
    monkeypatch.setattr(status, "_current_cut", lambda _lane: dataclasses.replace(cut, source_commit=None))
    assert status.ci_recorded(lane, ctx.register) is None, "a cut without a commit has no CI to show"
