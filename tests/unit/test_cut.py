"""Cuts as data: the ledger format (pipeline/formats/cut_ledger.py), the `cut` stage, and how
build and package take the lane's current cut (pipeline/stages/cut.py, pipeline/formats/cut_binding.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from github_standin import StandIn, Token
from repokit import SAMPLE, git, make_repo

from pipeline.cli import main
from pipeline.errors import InputError, RefusedError, UsageError
from pipeline.formats.cut_binding import lock_digest
from pipeline.formats.cut_ledger import (
    Cut,
    Ledger,
    Publication,
    check_append_only,
    load_ledger,
    parse_ledger,
    write_ledger,
)
from pipeline.formats.lanes import DEFAULT_LANES_DIR, REPO_ROOT, find_lane, load_lane
from pipeline.infra.github import Clock, GitHub
from pipeline.lanework.source import parse_source
from pipeline.stage import Context
from pipeline.stages.build import BuildStage
from pipeline.stages.cut import cut_lane

LANE = "rtx5090-container"
TAG = "v0.7.0-qwen38-5090-beta.{}"
C1, C2 = "1" * 40, "2" * 40
H = "a" * 64


def tag_for(version: str, n: int) -> str:
    return f"v{version}-qwen38-5090-beta.{n}"


def ledger_doc(cuts: list[dict], external: list[dict] | None = None) -> bytes:
    return json.dumps({"artifact_type": "omp_ninfer_cut_ledger", "schema_version": 1, "lane": LANE, "cuts": cuts, "external": external or []}).encode()


def cut_doc(n: int, **changes) -> dict:
    doc = Cut("0.7.0", n, TAG.format(n), "cut", "cut", C1, H, H).to_json()
    doc.update(changes)
    return doc


def parse(data: bytes) -> Ledger:
    return parse_ledger(data, file="cuts/x.json", lane=LANE, tag_for=tag_for)


# -- the format -----------------------------------------------------------------------

def test_the_seeded_ledgers_state_only_what_the_repository_knows():
    for lane_id in ("rtx4090-windows-native", "rtx3090-windows-native"):
        lane = find_lane(lane_id)
        ledger = lane.ledger()
        first, second = ledger.cuts
        assert (first.n, first.state, first.superseded_by, first.source_commit) == (1, "superseded", 2, None)
        assert "eecb437f" in first.unknown["source_commit"] and "fixture failure" in first.reason
        assert (second.n, second.state, second.source_commit) == (2, "published", "7a25cd72f490183e4113f1e84e68e36d653ddd28")
        assert lane.beta == 2 and lane.tag() == f"v0.7.0-qwen38-{lane.short_name}-beta.2"
    lane = find_lane("5090")
    ledger = lane.ledger()
    assert [c.n for c in ledger.cuts] == [2] and ledger.cuts[0].source_commit is None
    assert "6d4d0a05" in ledger.cuts[0].unknown["source_commit"]  # a prefix is a reason, never a value
    assert [(e.n, e.seen.split(":")[0]) for e in ledger.external] == [(1, "history")]
    assert lane.beta == 2
    for path in (REPO_ROOT / "runtime" / "cuts").glob("*.json"):  # canonical bytes: sorted keys, LF
        lane_id = path.stem
        assert load_ledger(path.parent, lane_id).to_bytes() == path.read_bytes()
    for path in DEFAULT_LANES_DIR.glob("*.toml"):
        assert "\nbeta =" not in path.read_text(), "the lane file must not carry a hand-written beta"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (ledger_doc([cut_doc(1), cut_doc(3)]), "gap in its numbers"),
        (ledger_doc([cut_doc(2)]), "gap in its numbers"),
        (ledger_doc([cut_doc(1), cut_doc(1)]), "same version and number twice"),
        (ledger_doc([cut_doc(2), cut_doc(1)]), "not sorted"),
        (ledger_doc([cut_doc(0, tag=TAG.format(0))]), "not a valid number"),
        (ledger_doc([cut_doc(-1, tag=TAG.format(-1))]), "not a valid number"),
        (ledger_doc([cut_doc(100000, tag=TAG.format(100000))]), "not a valid number"),  # above the names a lane renders
        (ledger_doc([cut_doc(1, tag="v0.7.0-qwen38-5090-beta.01")]), "leading zero"),
        (ledger_doc([cut_doc(1, tag="v0.7.0-qwen38-5090-beta.0")]), "leading zero or beta.0"),
        (ledger_doc([cut_doc(1, tag="v0.7.0-qwen38-4090-beta.1")]), "not the lane's tag"),
        (ledger_doc([cut_doc(1)], [{"version": "0.7.0", "n": 1, "tag": TAG.format(1), "seen": "history: x"}]), "both a cut and an external"),
        (ledger_doc([cut_doc(1, state="superseded", superseded_by=2, reason="r", publication={"repository": "a/b", "release_id": 1, "plan_sha256": H, "receipt_sha256": H})]), "successor that is not a cut"),
        (ledger_doc([cut_doc(2, state="superseded", superseded_by=1, reason="r", publication={"repository": "a/b", "release_id": 1, "plan_sha256": H, "receipt_sha256": H})], [{"version": "0.7.0", "n": 1, "tag": TAG.format(1), "seen": "history: x"}]), "not a valid number"),
        (ledger_doc([cut_doc(1, state="superseded", superseded_by=2, publication={"repository": "a/b", "release_id": 1, "plan_sha256": H, "receipt_sha256": H}), cut_doc(2)]), "needs its reason"),
        (ledger_doc([cut_doc(1, state="published")]), "records no publication"),
        (ledger_doc([cut_doc(1, source_commit=None)]), "null in a cut the pipeline recorded"),
        (ledger_doc([cut_doc(1, origin="record", source_commit=None)]), "null without a reason"),
        (ledger_doc([cut_doc(1, source_commit="7a25cd72")]), "a prefix is never a value"),
        (ledger_doc([cut_doc(1, extra=1)]), "unknown key"),
        (ledger_doc([cut_doc(1, reason="why")]), "only a superseded cut"),
        (b'{"artifact_type":"omp_ninfer_cut_ledger","artifact_type":"x"}', "duplicate key"),
    ],
)
def test_the_loader_refuses_what_cut_never_writes(data, message):
    with pytest.raises(InputError, match=message):
        parse(data)


def test_history_records_and_external_numbers_close_the_sequence():
    ledger = parse(ledger_doc(
        [cut_doc(2, origin="record", source_commit=None, lane_file_sha256=None, toolchain_lock_sha256=None, state="published",
                 unknown={"source_commit": "the notes name only a prefix", "lane_file_sha256": "x", "toolchain_lock_sha256": "y"})],
        [{"version": "0.7.0", "n": 1, "tag": TAG.format(1), "seen": "history: used before the ledger"}],
    ))
    assert ledger.current("0.7.0").n == 2 and ledger.highest("0.7.0") == 2 and ledger.current("0.8.0") is None


def test_the_writer_is_append_only(tmp_path):
    base = Ledger(LANE, (Cut("0.7.0", 1, TAG.format(1), "cut", "cut", C1, H, H),))
    write_ledger(tmp_path, base, tag_for=tag_for)
    published = base.with_state("0.7.0", 1, state="published", publication=Publication("a/b", 5, H, H))
    write_ledger(tmp_path, published, tag_for=tag_for)
    with pytest.raises(RefusedError, match="state backwards"):
        write_ledger(tmp_path, base, tag_for=tag_for)
    with pytest.raises(RefusedError, match="remove a recorded cut"):
        write_ledger(tmp_path, Ledger(LANE), tag_for=tag_for)
    moved = Ledger(LANE, (Cut("0.7.0", 1, TAG.format(1), "published", "cut", C2, H, H, publication=Publication("a/b", 5, H, H)),))
    with pytest.raises(RefusedError, match="change what a recorded cut binds"):
        write_ledger(tmp_path, moved, tag_for=tag_for)
    with pytest.raises(RefusedError, match="change a recorded publication"):
        check_append_only(published, published.with_state("0.7.0", 1, publication=Publication("a/b", 6, H, H)), file="x")
    assert load_ledger(tmp_path, LANE, tag_for=tag_for) == published


# -- the cut stage --------------------------------------------------------------------

@pytest.fixture
def runtime(tmp_path):
    """A runtime repository (the sample at a fixed date) and a lanes folder whose 5090 lane was never cut."""
    repo = tmp_path / "ninfer"
    commit = make_repo(repo, SAMPLE)
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    shutil.copyfile(DEFAULT_LANES_DIR / f"{LANE}.toml", lanes / f"{LANE}.toml")
    return repo, commit, lanes


def commit_more(repo: Path, name: str) -> str:
    (repo / name).write_text(name + "\n")
    git(repo, "add", name)
    git(repo, "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD")


def test_cut_numbers_bindings_noop_checkout_tags_and_supersede(runtime, tmp_path, capsys):
    repo, first, lanes = runtime
    dist = tmp_path / "dist"
    cut_lane("5090", source=f"{repo}@{first}", dist=dist, lanes_dir=lanes, use_github=False)
    lane = load_lane(lanes / f"{LANE}.toml")
    [cut] = lane.ledger().cuts
    assert (cut.n, cut.tag, cut.state, cut.origin, cut.source_commit) == (1, TAG.format(1), "cut", "cut", first)
    assert cut.lane_file_sha256 == lane.file_sha256 and cut.toolchain_lock_sha256 == lock_digest(lane)
    record = json.loads((dist / LANE / "cut.json").read_text())
    assert record["tag"] == TAG.format(1) and record["source_commit"] == first
    before = (lanes.parent / "cuts" / f"{LANE}.json").read_bytes()

    # The same commit, lane file and lock again: nothing new.
    assert main(["cut", "--lane", "5090", "--source", f"{repo}@{first}", "--dist", str(dist), "--lanes-dir", str(lanes)]) == 0
    assert "nothing new to cut" in capsys.readouterr().err
    assert (lanes.parent / "cuts" / f"{LANE}.json").read_bytes() == before

    # A tag made by hand in the checkout (beta.04): its number is never handed out; the gap below it is recorded.
    second = commit_more(repo, "later.txt")
    git(repo, "tag", TAG.format("04"))
    cut_lane("5090", source=f"{repo}@{second}", dist=dist, lanes_dir=lanes, use_github=False)
    ledger = load_lane(lanes / f"{LANE}.toml").ledger()
    assert [c.n for c in ledger.cuts] == [1, 5] and ledger.current("0.7.0").source_commit == second
    assert [(e.n, e.seen.split(":")[0]) for e in ledger.external] == [(2, "history"), (3, "history"), (4, "checkout-tag")]
    assert "non-canonical tag 'v0.7.0-qwen38-5090-beta.04'" in capsys.readouterr().err

    # Supersede: only a published cut, with its reason; the successor is the cut this run records.
    with pytest.raises(RefusedError, match="is cut, not published"):
        cut_lane("5090", source=f"{repo}@{second}", dist=dist, lanes_dir=lanes, supersede=5, reason="x", use_github=False)
    cuts = lanes.parent / "cuts"
    write_ledger(cuts, ledger.with_state("0.7.0", 5, state="published", publication=Publication("alphastorm/ninfer", 9, H, H)), tag_for=tag_for)
    with pytest.raises(UsageError, match="go together"):
        cut_lane("5090", source=f"{repo}@{second}", dist=dist, lanes_dir=lanes, supersede=5, use_github=False)
    cut_lane("5090", source=f"{repo}@{second}", dist=dist, lanes_dir=lanes, supersede=5, reason="a fork CI test-fixture failure", use_github=False)
    ledger = load_lane(lanes / f"{LANE}.toml").ledger()
    old, new = ledger.entry("0.7.0", 5), ledger.entry("0.7.0", 6)
    assert (old.state, old.superseded_by, old.reason, old.publication.release_id) == ("superseded", 6, "a fork CI test-fixture failure", 9)
    assert (new.state, new.source_commit) == ("cut", second) and ledger.current("0.7.0") == new


def test_cut_counts_releases_and_tags_on_github_drafts_included(runtime, tmp_path):
    repo, commit, lanes = runtime
    with StandIn("alphastorm/ninfer") as gh:
        gh.tokens["t0ken-cut"] = Token()
        gh.add_release(TAG.format(7), draft=True)  # a draft: invisible to get-by-tag, seen by listing
        gh.set_ref(TAG.format(3), "9" * 40)
        for n in range(120):  # more than one page of 100: the listing must follow the link header
            gh.add_release(f"v0.6.{n}-qwen38-5090-beta.1", draft=False)
        gh.pass_checks(commit, load_lane(lanes / f"{LANE}.toml").required_checks)
        client = GitHub("alphastorm/ninfer", "t0ken-cut", api=gh.url, uploads=gh.uploads, clock=Clock(), write_interval=0)
        cut_lane("5090", source=f"{repo}@{commit}", dist=tmp_path / "dist", lanes_dir=lanes, github=client)
        assert [p for m, p, _ in gh.log if m == "GET" and p.endswith("/releases")] == ["/repos/alphastorm/ninfer/releases"] * 2
    ledger = load_lane(lanes / f"{LANE}.toml").ledger()
    assert ledger.current("0.7.0").n == 8
    assert {e.n: e.seen.split(":")[0] for e in ledger.external} == {1: "history", 2: "history", 3: "github-tag", 4: "history", 5: "history", 6: "history", 7: "github-release"}, "a number seen only as a tag is labelled github-tag"


@pytest.mark.parametrize(("arrange", "message"), [
    (lambda gh, c, parent: (gh.add_check_run(c, "build"), gh.add_check_run(c, "test", conclusion="failure")), "the required check 'test' run {id} concluded failure"),
    (lambda gh, c, parent: (gh.add_check_run(c, "build"), gh.add_check_run(c, "test", status="in_progress")), "the required check 'test' run {id} is in_progress"),
    (lambda gh, c, parent: (gh.pass_checks(parent, ["build", "test"]), gh.add_check_run(c, "build")), "the required check 'test' missing"),
], ids=["failing", "pending", "green-on-the-parent-only"])
def test_cut_refuses_a_commit_whose_ci_is_not_green_at_exactly_that_commit(runtime, tmp_path, arrange, message):
    repo, first, lanes = runtime
    second = commit_more(repo, "next.txt")  # `first` is its parent
    with StandIn("alphastorm/ninfer") as gh:
        gh.tokens["t0ken-cut"] = Token()
        arrange(gh, second, first)
        runs = [r for r in gh.check_runs.get(second, []) if r["name"] == "test"]
        client = GitHub("alphastorm/ninfer", "t0ken-cut", api=gh.url, uploads=gh.uploads, clock=Clock(), write_interval=0)
        with pytest.raises(RefusedError) as caught:
            cut_lane("5090", source=f"{repo}@{second}", dist=tmp_path / "dist", lanes_dir=lanes, github=client)
    text = str(caught.value)
    assert message.format(id=runs[-1]["id"] if runs else "") in text and f"at {second}" in text, text
    if runs:
        assert runs[-1]["html_url"] in text
    assert caught.value.exit_code == 7
    assert not (lanes.parent / "cuts" / f"{LANE}.json").exists() and not (tmp_path / "dist" / LANE / "cut.json").exists(), "a refused cut records nothing"
    with StandIn("alphastorm/ninfer") as gh:  # the same commit once its CI is green: cut, and the record keeps what GitHub said
        gh.tokens["t0ken-cut"] = Token()
        gh.pass_checks(second, ["build", "test"])
        client = GitHub("alphastorm/ninfer", "t0ken-cut", api=gh.url, uploads=gh.uploads, clock=Clock(), write_interval=0)
        cut_lane("5090", source=f"{repo}@{second}", dist=tmp_path / "dist", lanes_dir=lanes, github=client)
    record = json.loads((tmp_path / "dist" / LANE / "cut.json").read_bytes())
    assert record["ci"]["sha"] == second and [(r["name"], r["conclusion"]) for r in record["ci"]["check_runs"]] == [("build", "success"), ("test", "success")]


def test_build_takes_the_current_cut_and_refuses_another_commit(runtime, tmp_path):
    repo, first, lanes = runtime
    lane = load_lane(lanes / f"{LANE}.toml")
    with pytest.raises(RefusedError, match="has no cut of version 0.7.0") as caught:
        BuildStage(Context.open(tmp_path / "d0"), lane, source=parse_source(str(repo))).preflight()
    assert "python -m pipeline cut --lane rtx5090-container" in str(caught.value)
    cut_lane("5090", source=f"{repo}@{first}", dist=tmp_path / "dist", lanes_dir=lanes, use_github=False)
    lane = load_lane(lanes / f"{LANE}.toml")
    stage = BuildStage(Context.open(tmp_path / "d1"), lane, source=parse_source(str(repo)))
    stage.preflight()
    assert stage.cut.to_json() == {"n": 1, "tag": TAG.format(1), "commit": first, "rehearsal": False}
    later = commit_more(repo, "later.txt")
    with pytest.raises(RefusedError, match="not the one v0.7.0-qwen38-5090-beta.1 was cut from") as caught:
        BuildStage(Context.open(tmp_path / "d2"), lane, source=parse_source(str(repo))).preflight()
    assert caught.value.found == later and caught.value.expected == first and caught.value.exit_code == 7
    rehearsal = BuildStage(Context.open(tmp_path / "d3"), lane, source=parse_source(str(repo)), rehearsal=True)
    rehearsal.preflight()
    assert rehearsal.cut.rehearsal and rehearsal.cut.tag == TAG.format(1)
    # The lane file changed since the cut: that build is not the cut any more.
    git(repo, "checkout", "-q", first)
    (lanes / f"{LANE}.toml").write_text((lanes / f"{LANE}.toml").read_text().replace("max_restart_seconds = 120.0", "max_restart_seconds = 121.0"), newline="\n")
    changed = load_lane(lanes / f"{LANE}.toml")
    with pytest.raises(RefusedError, match="lane file changed since v0.7.0-qwen38-5090-beta.1 was cut"):
        BuildStage(Context.open(tmp_path / "d4"), changed, source=parse_source(str(repo))).preflight()


def test_the_embedded_sample_is_a_rehearsal_of_the_current_cut(tmp_path):
    import subprocess

    if subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "runtime/sample"], capture_output=True, text=True).stdout.strip():
        pytest.skip("runtime/sample has uncommitted changes in this checkout (the build rightly refuses them); CI uses a clean clone")
    lane = find_lane("5090")
    stage = BuildStage(Context.open(tmp_path / "d"), lane, source=parse_source(None))
    stage.preflight()
    assert stage.cut.rehearsal and stage.cut.tag == "v0.7.0-qwen38-5090-beta.2" and stage.cut.commit is None


def test_the_release_tree_renders_superseded_cuts_and_later_cuts_do_not_change_it(tmp_path):
    from pipeline.formats.release.contract import verify_release

    notes = (REPO_ROOT / "manifests" / "v0.13.1" / "NOTES.md").read_text()
    assert "## Superseded cuts" in notes
    for short in ("4090", "3090"):
        assert (f"`v0.7.0-qwen38-{short}-beta.1` (source commit not recorded in full: the v0.13.1 notes name only the source prefix eecb437f "
                f"of the beta.1 cut) was published, then superseded by `v0.7.0-qwen38-{short}-beta.2` at 7a25cd72f490183e4113f1e84e68e36d653ddd28") in notes
    assert "Superseded" not in (REPO_ROOT / "manifests" / "v0.13.0" / "NOTES.md").read_text()
    # beta.2 superseded later by beta.3: the v0.13.1 rendering (and so its verification) does not move.
    lanes = tmp_path / "lanes"
    shutil.copytree(DEFAULT_LANES_DIR, lanes)
    shutil.copytree(REPO_ROOT / "runtime" / "cuts", tmp_path / "cuts")
    lane = load_lane(lanes / "rtx4090-windows-native.toml")
    ledger = lane.ledger()
    later = ledger.with_cut(Cut("0.7.0", 3, "v0.7.0-qwen38-4090-beta.3", "cut", "cut", C1, H, H))
    later = later.with_state("0.7.0", 2, state="superseded", superseded_by=3, reason="a later fix")
    write_ledger(tmp_path / "cuts", later, tag_for=lane.render_tag)
    report = verify_release(REPO_ROOT, "v0.13.1", lanes_dir=lanes)
    assert report.valid, [p.message() for p in report.problems.items]


def test_tags_outside_the_beta_range_are_ignored_with_a_warning_not_a_refusal(capsys):
    """beta.0 and a number above MAX_BETA match the loose tag pattern but are no cut: the lane cannot render
    their tags, so the range rule is asked first (it refused the whole listing before)."""
    from pipeline.formats.cut_ledger import MAX_BETA
    from pipeline.stages.cut import numbers_in

    lane = find_lane("5090")
    zero, above = lane.tag(1).replace("beta.1", "beta.0"), lane.tag(1).replace("beta.1", f"beta.{MAX_BETA + 1}")
    assert numbers_in(lane, [zero, above, lane.tag(2)], where="the checkout") == {2: lane.tag(2)}
    err = capsys.readouterr().err
    assert f"{zero!r}: beta.0 is not a valid cut" in err and f"beta.{MAX_BETA + 1} is not a valid cut" in err
