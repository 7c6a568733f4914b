"""`publish --component`: plan, gates, apply and resume against the GitHub stand-in (tests/kits/github_standin.py).

The native workspace (tests/kits/winfixtures.py) is the embedded sample runtime in its own repository:
`cut` recorded beta.2 of its commit, the 4090 lane was built from mingw-built binaries and
packaged into its closed 11-file set.  Each test publishes a copy of it as a prerelease of the
stand-in's `alphastorm/ninfer`, with faults switched on, and checks that GitHub converges on one
release whose assets are exactly the set: nothing duplicated, lost or moved.
"""

from __future__ import annotations

import email.utils
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from github_standin import IMMUTABLE_RELEASES_DOCS, FakeClock, StandIn, Token, documented_token_permissions
from repokit import ROOT
from sigstore_standin import SigstoreStandIn, record_statement_bundle
from winfixtures import copy_lanes, packaged_native_set

from pipeline.errors import IntegrityError, PipelineError, RefusedError, RemoteError
from pipeline.formats.assets import asset_set
from pipeline.formats.lanes import load_lane
from pipeline.formats.publication_plan import Journal, read_journal, read_receipt
from pipeline.infra.github import GitHub, GitHubError
from pipeline.register import Register
from pipeline.stages.publish import publish_lane
from pipeline.util.hashing import sha256_file

LANE = "rtx4090-windows-native"
TAG = "v0.7.0-qwen38-4090-beta.2"
TOKEN = "ghp_standinTokenForPublishTests0123456789"
REPO = "alphastorm/ninfer"




@pytest.fixture(scope="module")
def packaged(tmp_path_factory):
    return packaged_native_set(tmp_path_factory)


PRODUCT_RELEASE = "v0.14.0"  # the product release whose workflow signed the set's statement


@pytest.fixture(scope="module")
def sigstore_kit(tmp_path_factory):
    return SigstoreStandIn(tmp_path_factory.mktemp("sigstore")).write()


@pytest.fixture(autouse=True)
def _standin_trust(sigstore_kit, monkeypatch):
    monkeypatch.setenv("PIPELINE_TEST_SIGSTORE", str(sigstore_kit.directory))


class Setup:
    """A private copy of the packaged set (dist, lanes, cut ledgers) and a stand-in holding its commit."""

    def __init__(self, packaged, tmp: Path, gh: StandIn) -> None:
        workspace, dist = packaged
        self.workspace = workspace
        self.dist = tmp / "dist"
        shutil.copytree(dist, self.dist)
        self.lanes = copy_lanes(workspace, tmp / "w")
        self.gh = gh
        self.clock = FakeClock()
        gh.tokens[TOKEN] = Token()
        gh.add_commit(workspace.commit, ["src/main.cpp"])
        gh.pass_checks(workspace.commit, load_lane(self.lanes / f"{LANE}.toml").required_checks)  # CI green at the cut's commit
        self.statement = next(p for p in (self.dist / LANE / "attestations").iterdir() if p.name.endswith(".provenance.intoto.json"))
        self.set_names = asset_set(load_lane(self.lanes / f"{LANE}.toml")).names()
        self.names = sorted([*self.set_names, self.statement.name, self.statement.name + ".sigstore.json", "SHA256SUMS.sigstore.json"])

    def local(self, name: str) -> Path:
        return self.dist / LANE / ("assets" if name in self.set_names else "attestations") / name  # the evidence beside the set

    def sign(self, kit: SigstoreStandIn) -> None:
        record_statement_bundle(kit, self.dist, self.statement, PRODUCT_RELEASE)

    def client(self, token: str = TOKEN) -> GitHub:
        return GitHub(REPO, token, api=self.gh.url, uploads=self.gh.uploads, clock=self.clock, write_interval=0)

    def dry(self, **kwargs):
        return publish_lane("4090", dist=self.dist, lanes_dir=self.lanes, github=kwargs.pop("github", None) or self.client(), **kwargs)

    @property
    def folder(self) -> Path:
        return self.dist / "publish" / f"component-{TAG}"

    def plan_sha(self) -> str:
        self.dry()
        return Register(self.dist).one("publication-plan", lane=LANE, needed_by="t", produced_by="t").attrs["plan_sha256"]

    def apply(self, sha: str | None = None, **kwargs):
        sha = sha or self.plan_sha()
        return publish_lane("4090", dist=self.dist, lanes_dir=self.lanes, apply=True, plan_sha256=sha, github=kwargs.pop("github", None) or self.client(), **kwargs)

    def converged(self) -> None:
        """Exactly one release for the tag, published as a prerelease, not latest, assets exactly the set."""
        releases = self.gh.releases_for(TAG)
        assert len(releases) == 1, [(r.id, r.draft) for r in releases]
        release = releases[0]
        assert not release.draft and release.prerelease and release.make_latest == "false" and self.gh.latest_id is None
        assets = self.gh.assets_of(release)
        assert sorted(a.name for a in assets) == self.names, "an asset is missing or duplicated"
        for asset in assets:
            assert asset.state == "uploaded" and asset.digest == "sha256:" + sha256_file(self.local(asset.name)), asset.name
        assert self.gh.refs[TAG] == self.workspace.commit, "the tag must name the cut's commit"
        ledger = load_lane(self.lanes / f"{LANE}.toml").ledger()
        cut = ledger.entry("0.7.0", 2)
        assert cut.state == "published" and cut.publication.release_id == release.id
        receipt = read_receipt(self.folder / "receipt.json")
        assert receipt["release_id"] == release.id and receipt["tag"] == TAG and receipt["commit"] == self.workspace.commit
        assert [a["name"] for a in receipt["assets"]] == self.names
        assert TOKEN not in (self.folder / "receipt.json").read_text()
        assert cut.publication.receipt_sha256 == sha256_file(self.folder / "receipt.json")
        assert receipt["ci"]["sha"] == self.workspace.commit and {r["conclusion"] for r in receipt["ci"]["check_runs"]} == {"success"}, "the receipt keeps the CI that gated it"


@pytest.fixture
def setup(packaged, tmp_path, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        yield s


# -- plan ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_dry_run_writes_the_plan_prints_it_and_writes_nothing_remote(setup, capsys, tmp_path, packaged):
    setup.dry()
    out, err = capsys.readouterr()
    plan_path = setup.folder / "plan.json"
    plan = json.loads(plan_path.read_bytes())
    assert out == plan_path.read_text(), "stdout carries the plan's canonical JSON"
    assert [op["op"] for op in plan["operations"]] == ["create-draft", *["upload-asset"] * 14, "create-tag", "publish"], "the tag is the last write before publishing"
    ci = plan["observed"].pop("ci")
    assert plan["observed"] == {"read": True, "tag": None, "immutable_releases": False, "releases": []}, "the plan binds what GitHub held"
    assert ci["sha"] == setup.workspace.commit and ci["required"] == ["build", "test"] and ci["statuses"] == []
    assert [(r["name"], r["head_sha"], r["conclusion"]) for r in ci["check_runs"]] == [("build", setup.workspace.commit, "success"), ("test", setup.workspace.commit, "success")]
    assert "OK:   gate ci-at-commit: 2 required checks succeeded at" in err
    assert plan["release"] == {"name": TAG, "body": plan["release"]["body"], "prerelease": True, "make_latest": "false"}
    assert plan["commit"] == setup.workspace.commit and plan["repository"] == REPO
    uploads = [op for op in plan["operations"] if op["op"] == "upload-asset"]
    assert [op["name"] for op in uploads] == setup.names
    assert all(op["sha256"] == sha256_file(setup.local(op["name"])) and op["content_type"] for op in uploads)
    assert f"sha256 {sha256_file(plan_path)}" in err and "absent: upload" in err and "tag v0.7.0-qwen38-4090-beta.2" in err
    assert all(f"OK:   gate {name}" in err for name in plan["gates"])
    assert setup.gh.writes == 0 and not setup.gh.releases
    # Byte-identical across runs, and from another folder holding the same inputs.
    first = plan_path.read_bytes()
    setup.dry()
    assert plan_path.read_bytes() == first
    other = Setup(packaged, tmp_path / "other", setup.gh)
    shutil.copytree(setup.dist, other.dist, dirs_exist_ok=True)  # the same signed evidence
    other.dry()
    assert (other.folder / "plan.json").read_bytes() == first


@pytest.mark.slow
def test_apply_publishes_the_closed_set_and_a_rerun_changes_nothing(setup, capsys):
    sha = setup.plan_sha()
    with pytest.raises(PipelineError, match="needs the reviewed plan's hash"):
        publish_lane("4090", dist=setup.dist, lanes_dir=setup.lanes, apply=True, github=setup.client())
    with pytest.raises(RefusedError, match="not the one that was reviewed") as caught:
        setup.apply("0" * 64)
    assert caught.value.exit_code == 7 and setup.gh.writes == 0
    setup.apply(sha)
    setup.converged()
    entry = Register(setup.dist).one("release-publication", lane=LANE, needed_by="t", produced_by="t")
    assert entry.attrs["tag"] == TAG and entry.attrs["plan_sha256"] == sha
    writes = setup.gh.writes
    assert writes == 17  # draft, 14 uploads, tag, publish
    journal = read_journal(setup.folder / "journal" / f"{sha}.jsonl")
    assert [e["event"] for e in journal][0] == "run-start" and journal[-1]["event"] == "run-done"
    assert all(e["request_id"].startswith("STANDIN:") for e in journal if e["event"] == "op-done")
    assert TOKEN not in (setup.folder / "journal" / f"{sha}.jsonl").read_text()
    # The re-run reconciles from GitHub's state: it writes nothing and says so.
    setup.apply(sha)
    assert setup.gh.writes == writes
    setup.converged()
    assert "already published exactly as planned" in capsys.readouterr().err
    # `status` shows the CI that gated the publication, from the receipt (read only: no token, nothing run).
    from pipeline.tools.status import collect, render_text

    status = collect(setup.dist, ROOT, None, lanes_dir=setup.lanes, token=None)
    row = {r.lane: r for r in status.lanes}[LANE]
    assert row.ci.startswith(f"green at {setup.workspace.commit[:12]}: build #") and ", test #" in row.ci and row.ci.endswith("(publication receipt)"), row.ci
    assert f"  ci       {row.ci}" in render_text(status) and {r["lane"]: r["ci"] for r in status.to_json()["lanes"]}[LANE] == row.ci
    from html import escape

    from pipeline.tools.status_page import render_page

    assert f"<small>CI {escape(row.ci)}</small>" in render_page(status).decode("utf-8"), "the status page shows it beside the cut"


# -- CI at the cut's exact commit ---------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize(("conclusion", "status", "shown"), [("failure", "completed", "concluded failure"), (None, "in_progress", "is in_progress")], ids=["failed", "pending"])
def test_a_cut_whose_ci_is_not_green_at_its_commit_is_never_published(setup, capsys, conclusion, status, shown):
    run = setup.gh.add_check_run(setup.workspace.commit, "test", conclusion=conclusion, status=status)  # a re-run: the latest counts
    with pytest.raises(RefusedError) as caught:
        setup.dry()
    text = str(caught.value)
    assert caught.value.exit_code == 7 and f"gate ci-at-commit refused: CI of {REPO} at {setup.workspace.commit} is not green: the required check 'test' run {run['id']} {shown}" in text, text
    assert run["html_url"] in text and "apply with:" not in capsys.readouterr().err
    with pytest.raises(RefusedError, match=f"gate ci-at-commit refused: .*'test' run {run['id']} {shown}"):
        setup.apply(fmt_sha(setup))  # the plan's own hash: every gate runs before the first write
    assert setup.gh.writes == 0 and not setup.gh.releases and TAG not in setup.gh.refs, "nothing is written"
    assert load_lane(setup.lanes / f"{LANE}.toml").ledger().entry("0.7.0", 2).state == "cut"


@pytest.mark.slow
def test_a_green_run_of_another_app_does_not_replace_a_failed_ci_run(setup):
    failed = setup.gh.add_check_run(setup.workspace.commit, "test", conclusion="failure")
    setup.gh.add_check_run(setup.workspace.commit, "test", app="other-app")  # later and green, but not GitHub Actions'
    with pytest.raises(RefusedError, match=f"gate ci-at-commit refused: .*'test' run {failed['id']} concluded failure"):
        setup.dry()
    assert setup.gh.writes == 0


@pytest.mark.slow
def test_a_required_name_ci_never_reported_is_refused_listing_what_github_reported(setup):
    commit = setup.workspace.commit
    setup.gh.check_runs[commit] = [r for r in setup.gh.check_runs[commit] if r["name"] != "test"]
    setup.gh.add_check_run(commit, "test (ubuntu-latest)")  # a matrix job's name, not the declared one
    with pytest.raises(RefusedError) as caught:
        setup.dry()
    text = str(caught.value)
    assert "gate ci-at-commit refused: " in text and "'test' missing" in text and "GitHub reported: 'build', 'test (ubuntu-latest)'" in text, text
    assert "correct the declaration" in text and setup.gh.writes == 0


@pytest.mark.slow
def test_a_rerun_that_flips_between_the_dry_run_and_the_apply_is_caught(setup):
    setup.gh.faults["ci_rerun_after_read"] = ("test", "failure")  # re-run right after the dry run read the checks
    sha = setup.plan_sha()
    [_first, rerun] = [r for r in setup.gh.check_runs[setup.workspace.commit] if r["name"] == "test"]
    with pytest.raises(RefusedError) as caught:
        setup.apply(sha)
    text = str(caught.value)
    assert f"gate github-unchanged refused: the check 'test' at {setup.workspace.commit[:12]} is now run {rerun['id']} completed/failure; the reviewed plan saw run" in text, text
    assert "(and 1 more gate(s) listed above)" in text, "ci-at-commit refuses the failing re-run as well"
    assert setup.gh.writes == 0


# -- faults, each followed by convergence --------------------------------------------------

@pytest.mark.slow
def test_a_502_mid_upload_leaves_a_starter_asset_that_is_deleted_and_uploaded_again(setup):
    setup.gh.faults["upload_502_starter"] = setup.names[3]
    setup.apply()
    setup.converged()
    assert ("DELETE" in [m for m, _p, _s in setup.gh.log]), "the starter asset must be deleted first"
    events = read_journal(next((setup.folder / "journal").glob("*.jsonl")))
    assert any(e["event"] == "op-ambiguous" and e["detail"]["name"] == setup.names[3] for e in events)
    assert any(e["detail"].get("action") == "delete-not-uploaded" and e["detail"].get("state") == "starter" for e in events)


@pytest.mark.slow
def test_a_connection_reset_after_the_upload_landed_is_not_uploaded_twice(setup):
    name = setup.names[5]
    setup.gh.faults["upload_reset_after_landing"] = name
    setup.apply()
    setup.converged()
    posts = [p for m, p, status in setup.gh.log if m == "POST" and "/uploads/" in p]
    assert len(posts) == 14, "the landed upload must be found by listing, not sent again"
    assert 0 in [status for _m, _p, status in setup.gh.log], "the stand-in really reset the connection"


@pytest.mark.slow
@pytest.mark.parametrize("retry_after", [61, None])
def test_a_secondary_rate_limit_is_waited_out_on_the_injected_clock(setup, retry_after):
    setup.gh.faults["secondary_limit"] = (2, retry_after)
    setup.apply()
    setup.converged()
    waits = setup.clock.sleeps
    if retry_after is None:
        assert waits[:2] == [60.0, 120.0], "without retry-after: at least 60 s, then exponential"
    else:
        assert waits[:2] == [61.0, 61.0], "retry-after is honoured"


@pytest.mark.slow
@pytest.mark.parametrize("applied", [False, True])
def test_a_5xx_on_the_publish_call_converges_without_a_second_release(setup, applied):
    setup.gh.faults["publish_5xx"] = (502, applied)
    setup.apply()
    setup.converged()
    patches = [p for m, p, _s in setup.gh.log if m == "PATCH"]
    assert len(patches) == (1 if applied else 2), "after an applied publish the re-read sees it published"


@pytest.mark.slow
def test_a_second_draft_or_a_tag_elsewhere_is_refused_before_any_write(setup):
    sha = setup.plan_sha()
    first, second = setup.gh.add_release(TAG, draft=True), setup.gh.add_release(TAG, draft=True)
    with pytest.raises(RefusedError, match=f"gate github-unchanged refused: GitHub now holds draft {first.id} '{TAG}' that the reviewed plan did not see: run the dry run again") as caught:
        setup.apply(sha)
    assert caught.value.exit_code == 7 and setup.gh.writes == 0
    assert "1 more gate" in str(caught.value), "the single-draft gate refuses as well"
    with pytest.raises(RefusedError, match="gate single-draft refused: GitHub holds 2 drafts"):  # the dry run sees them too: a gate, no apply line
        setup.dry()
    for release in (first, second):
        del setup.gh.releases[release.id]
    sha = setup.plan_sha()  # reviewed again on a clean GitHub
    setup.gh.add_commit("9" * 40)
    setup.gh.set_ref(TAG, "9" * 40)
    with pytest.raises(RefusedError, match="gate github-unchanged refused: the tag v0.7.0-qwen38-4090-beta.2 is now at 9{40}; the reviewed plan saw it absent"):
        setup.apply(sha)
    with pytest.raises(RefusedError, match="gate tag refused: the tag v0.7.0-qwen38-4090-beta.2 already points at another commit"):
        setup.dry()
    assert setup.gh.writes == 0 and setup.gh.refs[TAG] == "9" * 40, "a tag is never moved"


def _no_tag(setup) -> None:
    assert TAG not in setup.gh.refs, "no tag is created before the last refusal point"


@pytest.mark.slow
def test_a_set_without_a_verifying_dsse_bundle_is_never_published(packaged, tmp_path, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)  # packaged, not signed
        with pytest.raises(RefusedError, match=f"gate evidence refused: the provenance statement of {TAG} has no DSSE bundle in the register") as caught:
            s.dry()
        assert caught.value.exit_code == 7
        bundle = record_statement_bundle(sigstore_kit, s.dist, s.statement, PRODUCT_RELEASE)
        other = SigstoreStandIn(tmp_path / "other-instance").write()  # signed on a Sigstore instance the verifier does not trust
        bundle.write_bytes(other.sign_dsse(s.statement.read_bytes(), other.token(f"https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/{PRODUCT_RELEASE}")).to_bytes())
        with pytest.raises(RefusedError, match="gate evidence refused"):  # the register's hash of the bundle no longer matches, or it does not verify
            s.dry()
        record_statement_bundle(sigstore_kit, s.dist, s.statement, "v0.14.0/../x")  # the signing release must be a release name
        with pytest.raises(RefusedError, match="gate evidence refused: the set's DSSE bundle and SHA256SUMS bundle do not name one product release"):
            s.dry()
        record_statement_bundle(other, s.dist, s.statement, PRODUCT_RELEASE)  # recorded, but not verifiable against the trusted instance
        with pytest.raises(RefusedError, match="gate evidence refused: the DSSE bundle of the provenance statement of .* does not verify"):
            s.dry()
        assert gh.writes == 0 and TAG not in gh.refs


MALFORMED = {
    "a release without an id": ("/releases", [{"tag_name": TAG, "draft": True}]),
    "a list of strings": ("/releases", ["v0.7.0", "beta"]),
    "a ref as a list": (f"/git/ref/tags/{TAG}", [{"object": {"type": "commit", "sha": "a" * 40}}]),
    "the repository as a string": ("", "alphastorm/ninfer"),
    "rate limits as a list": ("/rate_limit", []),
    "commit files as a string": (None, "files"),
    "a draft's asset without a name": ("assets", [{"id": 5, "size": 3, "state": "uploaded"}]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_github_answers_are_refused_clearly_never_a_traceback(setup, case, capsys):
    where, body = MALFORMED[case]
    if where is None:  # the commit's answer with `files` of the wrong type
        path, body = f"/repos/{REPO}/commits/{setup.workspace.commit}", {"sha": setup.workspace.commit, "files": "src/main.cpp"}
    elif where == "assets":  # the listing of a draft's assets
        path = f"/repos/{REPO}/releases/{setup.gh.add_release(TAG, draft=True, name=TAG).id}/assets"
    elif where == "/rate_limit":
        path = "/rate_limit"
    else:
        path = f"/repos/{REPO}{where}"
    setup.gh.faults["malformed"] = {path: body}
    with pytest.raises(PipelineError) as caught:
        setup.dry()
        setup.apply()
    assert isinstance(caught.value, RefusedError | RemoteError), type(caught.value)
    assert "GitHub" in str(caught.value) and "Traceback" not in str(caught.value)
    assert "apply with:" not in capsys.readouterr().err
    assert setup.gh.writes == 0 and TAG not in setup.gh.refs


@pytest.mark.slow
def test_a_strangers_draft_after_the_dry_run_is_never_adopted(setup):
    sha = setup.plan_sha()
    stranger = setup.gh.add_release(TAG, draft=True, prerelease=False, name="x")
    with pytest.raises(RefusedError, match=f"GitHub now holds draft {stranger.id} 'x' that the reviewed plan did not see: run the dry run again and review it") as caught:
        setup.apply(sha)
    assert caught.value.exit_code == 7 and setup.gh.writes == 0
    assert (stranger.draft, stranger.prerelease, stranger.name, setup.gh.assets_of(stranger)) == (True, False, "x", []), "the stranger's draft is untouched"
    _no_tag(setup)


@pytest.mark.slow
def test_every_dry_run_problem_is_a_gate_with_no_apply_line(setup, capsys):
    draft = setup.gh.add_release(TAG, draft=True, name=TAG)
    setup.gh.add_asset(draft, setup.names[0], b"other bytes")
    with pytest.raises(RefusedError, match=f"gate draft-assets refused: the draft {draft.id} holds {setup.names[0]} with other bytes than the plan") as caught:
        setup.dry()
    err = capsys.readouterr().err
    assert caught.value.exit_code == 7 and "FAIL: gate draft-assets" in err and "apply with:" not in err and "REFUSED" in err
    setup.gh.assets_of(draft)[0].data = setup.local(setup.names[0]).read_bytes()  # the planned bytes: skipped, not a problem
    setup.gh.add_asset(draft, "notes.txt", b"a stranger's file")
    with pytest.raises(RefusedError, match=f"the draft {draft.id} holds the asset notes.txt, which the plan does not name"):
        setup.dry()
    assert "apply with:" not in capsys.readouterr().err
    assert setup.gh.writes == 0
    _no_tag(setup)


@pytest.mark.slow
def test_a_strangers_asset_in_the_reviewed_draft_is_refused_before_any_write(setup):
    draft = setup.gh.add_release(TAG, draft=True, name=TAG)
    sha = setup.plan_sha()
    setup.gh.add_asset(draft, setup.names[1], setup.local(setup.names[1]).read_bytes())
    with pytest.raises(RefusedError, match=f"draft {draft.id} '{TAG}' now holds the asset {setup.names[1]} .*; the reviewed plan did not see it"):
        setup.apply(sha)
    assert setup.gh.writes == 0
    _no_tag(setup)


@pytest.mark.slow
def test_an_asset_appearing_mid_apply_stops_before_the_tag_and_says_what_was_written(setup):
    def stranger(gh):
        gh.add_asset(gh.releases_for(TAG)[0], "extra.bin", b"planted")

    setup.gh.faults["on_write"] = (4, stranger)  # after the draft and two uploads
    with pytest.raises(RefusedError, match="the release holds an asset the plan does not name: extra.bin") as caught:
        setup.apply()
    message = str(caught.value)
    draft = setup.gh.releases_for(TAG)[0]
    assert f"this run wrote: the draft {draft.id}, uploaded {setup.names[0]}, uploaded {setup.names[1]}" in message and "the tag was not created" in message
    assert draft.draft
    _no_tag(setup)


@pytest.mark.slow
def test_an_upload_stored_under_another_name_is_deleted_and_refused(setup):
    name = next(n for n in setup.names if "x86_64" in n)
    renamed = name.replace("x86_64", "x86.64")
    setup.gh.faults["rename_upload"] = {name: renamed}
    with pytest.raises(RefusedError, match=f"GitHub stored the upload of {name} under another name: {renamed}; the pipeline deleted what it just uploaded") as caught:
        setup.apply()
    assert caught.value.exit_code == 7 and "delete it by hand" not in str(caught.value)
    draft = setup.gh.releases_for(TAG)[0]
    assert renamed not in [a.name for a in setup.gh.assets_of(draft)], "the pipeline cleans up its own write"
    _no_tag(setup)
    del setup.gh.faults["rename_upload"]
    setup.apply()  # a new review sees the pipeline's own draft and finishes from it
    setup.converged()


@pytest.mark.slow
def test_a_release_published_before_immutability_was_enabled_reaches_the_ledger(setup, capsys):
    setup.gh.faults["enable_immutable_after_publish"] = True
    sha = setup.plan_sha()
    setup.apply(sha)
    setup.converged()
    receipt = read_receipt(setup.folder / "receipt.json")
    assert receipt["immutable"] is False and receipt["immutable_releases_enabled"] is True
    assert "published before the repository enabled immutable releases" in receipt["immutable_reason"]
    assert "is not immutable: published before" in capsys.readouterr().err
    setup.apply(sha)  # a re-run of the reviewed plan, which now sees the setting on, still accepts it
    setup.converged()


@pytest.mark.slow
def test_githubs_error_text_is_kept(setup):
    setup.gh.faults["reject_release"] = [{"resource": "Release", "code": "custom", "field": "tag_name", "message": "tag_name is not a valid tag"},
                                         {"resource": "Release", "code": "custom", "message": "Published releases must have a valid tag"}]
    with pytest.raises(GitHubError) as caught:
        setup.apply()
    message = str(caught.value)
    assert "(Validation Failed)" in message and "Release tag_name custom: tag_name is not a valid tag" in message
    assert "Published releases must have a valid tag" in message and "see https://docs.github.com/rest/releases/releases#create-a-release" in message
    assert "this run wrote nothing to GitHub" in message
    _no_tag(setup)


@pytest.mark.slow
def test_retry_after_as_an_http_date_is_honoured(setup):
    setup.gh.faults["secondary_limit"] = (1, email.utils.formatdate(setup.clock.t + 90, usegmt=True))
    setup.apply()
    setup.converged()
    assert setup.clock.sleeps[0] == pytest.approx(90.0, abs=1.0), "the date's distance from now, not the 60 s fallback"


@pytest.mark.slow
def test_a_token_without_the_workflow_scope(setup):
    setup.gh.commits[setup.workspace.commit] = [".github/workflows/release.yml"]
    setup.gh.tokens["ghp_noWorkflowScope0000"] = Token(scopes=("repo",))
    with pytest.raises(RefusedError, match="gate token refused: the token lacks the workflow scope"):
        setup.apply(github=setup.client("ghp_noWorkflowScope0000"))
    assert setup.gh.writes == 0
    # A token whose scopes cannot be read (an installation token): GitHub's own 404 stops the first write.
    setup.gh.tokens["ghs_installationToken0000"] = Token(scopes=("contents:write",), classic=False)
    with pytest.raises(GitHubError, match="GitHub answered 404") as caught:
        setup.apply(github=setup.client("ghs_installationToken0000"))
    assert caught.value.exit_code == 6 and "workflow scope" in str(caught.value)
    assert TAG not in setup.gh.refs and not setup.gh.releases


@pytest.mark.slow
def test_gates_of_the_set_refuse_each_on_its_own(setup):
    sha = setup.plan_sha()
    stray = setup.dist / LANE / "assets" / "notes.txt"  # not in the closed set (the register does not list it)
    stray.write_text("a file dropped beside the set\n")
    with pytest.raises(RefusedError, match="gate check-assets refused: check-assets refuses the set") as caught:
        setup.apply(sha)
    assert "(and" not in caught.value.what, "only this gate may refuse"
    stray.unlink()
    register = Register(setup.dist)
    entry = register.artifacts[f"{LANE}/assets/SHA256SUMS"]
    from dataclasses import replace

    register.artifacts[entry.name] = replace(entry, sha256="0" * 64)
    register.save()
    with pytest.raises(RefusedError, match="gate register-equals-set refused: the register records other bytes for SHA256SUMS") as caught:
        setup.apply(sha)
    assert "(and" not in caught.value.what
    register.artifacts[entry.name] = entry
    register.save()
    setup.gh.remaining = 10
    with pytest.raises(RefusedError, match="gate rate-limit refused: too little rate-limit headroom"):
        setup.apply(sha)
    setup.gh.remaining = 5000
    with pytest.raises(RefusedError, match="gate token refused: there is no GitHub token"):
        setup.apply(sha, github=GitHub(REPO, None, api=setup.gh.url, uploads=setup.gh.uploads, clock=setup.clock))
    assert setup.gh.writes == 0
    setup.apply(sha)
    setup.converged()


@pytest.mark.slow
def test_a_rehearsal_build_is_never_published(packaged, tmp_path, sigstore_kit):
    """The embedded sample under the cut's names (a rehearsal): the cut-commit gate refuses it."""
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        register = Register(s.dist)
        entry = register.artifacts[f"{LANE}/build-identity.json"]
        from dataclasses import replace

        register.artifacts[entry.name] = replace(entry, attrs={**entry.attrs, "cut": {**entry.attrs["cut"], "rehearsal": True}})
        register.save()
        with pytest.raises(RefusedError, match="gate cut-commit refused: the build is a rehearsal") as caught:
            s.apply()
        assert caught.value.exit_code == 7 and gh.writes == 0


@pytest.mark.slow
def test_an_immutable_published_release_refuses_added_assets(setup):
    setup.gh.immutable_enabled = True
    setup.apply()
    setup.converged()
    [release] = setup.gh.releases_for(TAG)
    assert release.immutable and read_receipt(setup.folder / "receipt.json")["immutable"] is True
    client = setup.client()
    extra = setup.dist / "extra.txt"
    extra.write_text("late provenance\n")
    with pytest.raises(GitHubError, match="422 \\(Cannot upload assets to an immutable release.\\)"):
        client.upload_asset(setup.gh.release_json(release), "extra.txt", extra, size=extra.stat().st_size, content_type="text/plain")
    with pytest.raises(GitHubError, match="Cannot delete asset from an immutable release"):
        client.request("DELETE", f"/repos/{REPO}/releases/assets/{release.asset_ids[0]}", expect=(204,))
    assert sorted(a.name for a in setup.gh.assets_of(release)) == setup.names
    # After publishing an immutable release, publish asked GitHub for its release attestation by each asset's digest
    # (pipeline/infra/attestations.py; this stand-in has none, so nothing is recorded and a warning says so).
    asked = {path for method, path, _status in setup.gh.log if method == "GET" and "/attestations/" in path}
    planned = read_receipt(setup.folder / "receipt.json")["assets"]
    assert asked == {f"/repos/{REPO}/attestations/sha256:{a['sha256']}" for a in planned}


# -- kill -9 between any two writes ---------------------------------------------------------

WRITES = 17  # create-draft, 14 uploads (the 11-file set, its statement, its DSSE bundle, the SHA256SUMS bundle), create-tag, publish
# Killed while write k is in flight, after GitHub applied it (k = 1..14) or before (k = 1, and one
# upload).  "Before write k" leaves GitHub as "after write k-1" does, so this covers every gap
# between two writes; the journal differs, and the re-run must not care.
KILLS = [(k, True) for k in range(1, WRITES + 1)] + [(1, False), (7, False), (WRITES - 1, False)]


@pytest.mark.slow
@pytest.mark.parametrize(("k", "applied"), KILLS, ids=[f"{k}-{'after' if a else 'before'}-write" for k, a in KILLS])
def test_kill_9_at_any_write_then_rerun_converges(packaged, tmp_path, k, applied, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        sha = s.plan_sha()
        gh.faults["hang_on_write"] = (k, applied)
        env = dict(os.environ, **gh.env(TOKEN), PIPELINE_GITHUB_WRITE_INTERVAL="0", PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "publish", "--component", "4090", "--apply", "--plan-sha256", sha,
             "--dist", str(s.dist), "--lanes-dir", str(s.lanes), "--quiet"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            if not gh.hold_event.wait(120):
                proc.kill()
                pytest.fail(f"the publish never reached write {k}: {proc.communicate()[1].decode()[-2000:]}")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        assert gh.writes == k
        s.apply(sha)
        s.converged()


def test_publish_is_in_the_cli_and_needs_a_target(capsys):
    from pipeline.cli import main

    assert main(["publish", "--dist", "x"]) == 2
    assert "one of the arguments --component --release is required" in capsys.readouterr().err


def test_client_retries_reads_and_never_writes_blindly(tmp_path):
    """The client: bounded retries, honest Ambiguous on a write, token never in an error."""
    with StandIn(REPO) as gh:
        gh.tokens[TOKEN] = Token()
        clock = FakeClock()
        client = GitHub(REPO, TOKEN, api=gh.url, uploads=gh.uploads, clock=clock, write_interval=0, max_wait=100)
        gh.faults["secondary_limit"] = (5, 90)
        with pytest.raises(RemoteError, match="the total wait would pass 100 s"):
            client.create_release({"tag_name": "v1", "draft": True})
        assert not gh.releases
        # The primary limit: wait until x-ratelimit-reset, then the same read succeeds.
        gh.faults["primary_limit"] = 1
        gh.reset_at = int(clock.now()) + 300
        gh.remaining = 5000
        client = GitHub(REPO, TOKEN, api=gh.url, uploads=gh.uploads, clock=clock, write_interval=0)
        before = list(clock.sleeps)
        assert client.repo()["full_name"] == REPO
        assert clock.sleeps[len(before):] == [301.0]
        # Pagination follows link rel="next" only on the configured origin.
        for n in range(150):
            gh.add_release(f"v9.{n}.0", draft=False)
        assert len(client.releases()) == 150
        with pytest.raises(PipelineError) as caught:
            GitHub(REPO, "ghp_wrongToken1234", api=gh.url, uploads=gh.uploads, clock=clock).repo()
        assert "401" in str(caught.value) and "ghp_wrongToken1234" not in str(caught.value)
        with pytest.raises(PipelineError, match="https"):
            GitHub(REPO, TOKEN, api="http://example.com", clock=clock)


@pytest.mark.cuda
@pytest.mark.slow
def test_the_sample_cut_built_packaged_and_published_end_to_end(tmp_path, sample_repo, sigstore_kit):
    """cut -> build (real nvcc) -> package -> publish --component, for the container lane, from the sample runtime."""
    from repokit import have_nvcc

    from pipeline.formats.lanes import DEFAULT_LANES_DIR, REPO_ROOT
    from pipeline.stages.build import build_lane
    from pipeline.stages.cut import cut_lane
    from pipeline.stages.package import package_lane

    repo, commit = sample_repo
    lanes = tmp_path / "runtime" / "lanes"
    shutil.copytree(DEFAULT_LANES_DIR, lanes)
    shutil.copytree(REPO_ROOT / "runtime" / "cuts", tmp_path / "runtime" / "cuts")
    dist = tmp_path / "dist"
    cut_lane("5090", source=f"{repo}@{commit}", dist=dist, lanes_dir=lanes, use_github=False)
    tag = "v0.7.0-qwen38-5090-beta.3"  # beta.1 (history) and beta.2 (published) are used
    build_lane("5090", dist=dist, source=str(repo), toolchain="system" if have_nvcc() else "pinned", lanes_dir=lanes)
    package_lane("5090", dist=dist, lanes_dir=lanes)
    lane = load_lane(lanes / "rtx5090-container.toml")
    statement = next((dist / lane.id / "attestations").glob("*.provenance.intoto.json"))
    record_statement_bundle(sigstore_kit, dist, statement, PRODUCT_RELEASE)
    names = sorted([*asset_set(lane, 3).names(), statement.name, statement.name + ".sigstore.json", "SHA256SUMS.sigstore.json"])
    with StandIn(REPO) as gh:
        gh.tokens[TOKEN] = Token()
        gh.add_commit(commit)
        gh.pass_checks(commit, lane.required_checks)
        client = GitHub(REPO, TOKEN, api=gh.url, uploads=gh.uploads, clock=FakeClock(), write_interval=0)
        publish_lane("5090", dist=dist, lanes_dir=lanes, github=client)
        sha = Register(dist).one("publication-plan", lane=lane.id, needed_by="t", produced_by="t").attrs["plan_sha256"]
        publish_lane("5090", dist=dist, lanes_dir=lanes, github=client, apply=True, plan_sha256=sha)
        [release] = gh.releases_for(tag)
        assert not release.draft and release.prerelease and gh.refs[tag] == commit
        assert sorted(a.name for a in gh.assets_of(release)) == names and len(names) == 10, "the 7-file set, its statement, DSSE bundle and SHA256SUMS bundle"
        for asset in gh.assets_of(release):
            local = statement.parent / asset.name if asset.name.endswith((".intoto.json", ".sigstore.json")) else dist / lane.id / "assets" / asset.name
            assert asset.digest == "sha256:" + sha256_file(local)
    cut = load_lane(lanes / "rtx5090-container.toml").ledger().entry("0.7.0", 3)
    assert (cut.state, cut.source_commit, cut.publication.release_id) == ("published", commit, release.id)


def test_the_journal_survives_a_torn_last_line(tmp_path):
    journal = Journal(tmp_path, "a" * 64)
    journal.event("run-start", plan_sha256="a" * 64)
    journal.event("op-done", op=0, request_id="R1")
    with open(journal.path, "ab") as handle:
        handle.write(b'{"seq":3,"event":"op-st')  # killed while appending
    assert [e["event"] for e in read_journal(journal.path)] == ["run-start", "op-done"]
    again = Journal(tmp_path, "a" * 64)
    again.event("run-start", resumed=True)
    entries = read_journal(again.path)
    assert [(e["seq"], e["event"]) for e in entries] == [(1, "run-start"), (2, "op-done"), (3, "run-start")]
    journal.path.write_bytes(b'not json\n{"seq":1,"event":"run-start"}\n')
    with pytest.raises(PipelineError, match="line 1 is not a journal entry"):
        read_journal(journal.path)


def _kill_at_write(s: Setup, sha: str, k: int, applied: bool) -> None:
    """Run `publish --apply` in a child process and kill -9 it while GitHub holds write k (applied or not)."""
    s.gh.faults["hang_on_write"] = (k, applied)
    env = dict(os.environ, **s.gh.env(TOKEN), PIPELINE_GITHUB_WRITE_INTERVAL="0", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "publish", "--component", "4090", "--apply", "--plan-sha256", sha,
         "--dist", str(s.dist), "--lanes-dir", str(s.lanes), "--quiet"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        if not s.gh.hold_event.wait(120):
            proc.kill()
            pytest.fail(f"the publish never reached write {k}: {proc.communicate()[1].decode()[-2000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL and s.gh.writes == k


# -- the token in hand (#25): the component job's RUNTIME_RELEASE_TOKEN -----------------------------

RUNTIME_TOKEN = "github_pat_runtimeReleaseToken0123456789"


@pytest.mark.slow
def test_the_runtime_release_token_as_documented_publishes_the_component(setup, capsys):
    """RUNTIME_RELEASE_TOKEN carries exactly what docs/cuts-and-publication.md declares for it (no administration):
    GitHub's 403 on the immutable-releases setting makes it unknown, and the component is published."""
    permissions = documented_token_permissions(ROOT / "docs" / "cuts-and-publication.md", "RUNTIME_RELEASE_TOKEN")
    assert "administration" not in permissions
    setup.gh.tokens[RUNTIME_TOKEN] = Token(permissions=permissions)
    client = setup.client(RUNTIME_TOKEN)
    forbidden = client.request("GET", f"/repos/{REPO}/immutable-releases", expect=(403,))
    assert forbidden.body == {"message": "Resource not accessible by integration", "documentation_url": IMMUTABLE_RELEASES_DOCS, "status": "403"}
    setup.dry(github=client)
    err = capsys.readouterr().err
    assert "apply with:" in err and err.count("immutable-releases setting unknown") == 1, err
    plan = json.loads((setup.folder / "plan.json").read_bytes())
    assert plan["observed"]["immutable_releases"] is None, "unknown, not false"
    setup.apply(fmt_sha(setup), github=setup.client(RUNTIME_TOKEN))
    setup.converged()
    receipt = read_receipt(setup.folder / "receipt.json")
    assert receipt["immutable_releases_enabled"] is None and receipt["immutable"] is False
    assert "setting is unknown" in receipt["immutable_reason"] and "own immutable field is false" in receipt["immutable_reason"]
    assert capsys.readouterr().err.count("immutable-releases setting unknown") == 1, "warned once in the apply run"


def fmt_sha(setup) -> str:
    return sha256_file(setup.folder / "plan.json")


def test_the_standin_answers_for_the_token_in_hand():
    """A token carrying permissions may use exactly the endpoints they cover; anything else is GitHub's 403 body."""
    with StandIn(REPO) as gh:
        gh.tokens["read-only"] = Token(permissions={"contents": "read"})
        gh.add_commit("a" * 40)
        client = GitHub(REPO, "read-only", api=gh.url, uploads=gh.uploads, clock=FakeClock(), write_interval=0)
        assert client.repo()["permissions"]["push"] is False, "metadata: read is every token's"
        assert client.commit("a" * 40) is not None and client.releases() == []
        assert client.immutable_releases() is None and "403 (Resource not accessible by integration)" in client.immutable_unknown
        with pytest.raises(GitHubError) as caught:
            client.create_tag("v1", "a" * 40)
        assert caught.value.status == 403 and caught.value.body["message"] == "Resource not accessible by integration"
        assert set(caught.value.body) == {"message", "documentation_url", "status"} and "v1" not in gh.refs
        gh.tokens["admin"] = Token(permissions={"contents": "write", "administration": "read"})
        admin = GitHub(REPO, "admin", api=gh.url, uploads=gh.uploads, clock=FakeClock(), write_interval=0)
        assert admin.immutable_releases() is False and admin.immutable_unknown is None  # 404: not enabled, known


# -- s5b, a4, r1/r2: lookalikes and lost answers ---------------------------------------------------

def _planned_body(setup) -> str:
    setup.dry()
    return json.loads((setup.folder / "plan.json").read_bytes())["release"]["body"]


@pytest.mark.slow
@pytest.mark.parametrize("differs", ["name", "prerelease", "body", "latest"])
def test_a_strangers_release_with_our_bytes_but_other_fields_is_not_ours(setup, differs):
    body = _planned_body(setup)
    fields = {"name": TAG, "prerelease": True, "body": body}
    fields.update({"name": {"name": "not the plan's"}, "prerelease": {"prerelease": False}, "body": {"body": body + "edited\n"}}.get(differs, {}))
    release = setup.gh.add_release(TAG, draft=False, prerelease=fields["prerelease"], name=fields["name"])
    release.body = fields["body"]
    for name in setup.names:
        setup.gh.add_asset(release, name, setup.local(name).read_bytes())
    setup.gh.set_ref(TAG, setup.workspace.commit)
    if differs == "latest":
        release.prerelease = False  # a stranger published it as a full release marked latest; the plan's component never is
        setup.gh.latest_id = release.id
    with pytest.raises(RefusedError, match="is already published with the planned assets, but not as planned") as caught:
        setup.dry()
    assert caught.value.exit_code == 7
    if differs == "latest":
        assert "marks it the latest release" in str(caught.value)
    assert setup.gh.writes == 0


@pytest.mark.slow
def test_a_release_published_exactly_as_planned_is_accepted(setup, capsys):
    body = _planned_body(setup)
    release = setup.gh.add_release(TAG, draft=False, prerelease=True, name=TAG)
    release.body = body
    for name in setup.names:
        setup.gh.add_asset(release, name, setup.local(name).read_bytes())
    setup.gh.set_ref(TAG, setup.workspace.commit)
    setup.dry()
    assert "already published exactly as planned" in capsys.readouterr().err


@pytest.mark.slow
def test_a_strangers_draft_after_a_kill_before_create_draft_landed_is_not_adopted(packaged, tmp_path, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        sha = s.plan_sha()
        _kill_at_write(s, sha, 1, applied=False)  # the journal says create-draft started; GitHub never saw it
        stranger = gh.add_release(TAG, draft=True, prerelease=True, name=TAG)  # the planned name and flags, not ours
        gh.add_asset(stranger, s.names[0], s.local(s.names[0]).read_bytes())
        with pytest.raises(RefusedError, match=f"GitHub now holds draft {stranger.id} '{TAG}' that the reviewed plan did not see"):
            s.apply(sha)
        assert stranger.draft and gh.writes == 1 and TAG not in gh.refs, "nothing written on a stranger's draft"


@pytest.mark.slow
def test_a_draft_created_by_the_killed_run_is_recognised_by_its_marker(packaged, tmp_path, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        sha = s.plan_sha()
        _kill_at_write(s, sha, 1, applied=True)  # the draft landed; its answer (and id) never reached the journal
        [draft] = gh.releases_for(TAG)
        started = [e for e in read_journal(s.folder / "journal" / f"{sha}.jsonl") if e["event"] == "op-start" and e["op"] == 0]
        assert started[0]["detail"]["marker"] in draft.body, "the draft carries the journalled marker"
        s.apply(sha)
        s.converged()
        assert gh.releases_for(TAG)[0].body == json.loads((s.folder / "plan.json").read_bytes())["release"]["body"], "publishing sets the planned body"


@pytest.mark.slow
def test_an_upload_renamed_by_github_with_its_answer_lost_is_reclaimed_and_converges(packaged, tmp_path, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        sha = s.plan_sha()
        name = next(n for n in s.names if "x86_64" in n)
        renamed = name.replace("x86_64", "x86.64")
        gh.faults["rename_upload"] = {name: renamed}
        _kill_at_write(s, sha, s.names.index(name) + 2, applied=True)  # write 1 is the draft
        [draft] = gh.releases_for(TAG)
        assert renamed in [a.name for a in gh.assets_of(draft)], "GitHub kept the upload under another name"
        s.apply(sha)  # the same reviewed plan: the stray is this plan's own upload, renamed to its planned name
        s.converged()
        events = read_journal(s.folder / "journal" / f"{sha}.jsonl")
        assert any(e["detail"].get("action") == "rename-stray" and e["event"] == "op-done" for e in events)


@pytest.mark.slow
def test_a_renamed_upload_github_will_not_rename_back_is_replaced_and_converges(packaged, tmp_path, sigstore_kit):
    with StandIn(REPO) as gh:
        s = Setup(packaged, tmp_path, gh)
        s.sign(sigstore_kit)
        sha = s.plan_sha()
        name = next(n for n in s.names if "x86_64" in n)
        gh.faults["rename_upload"] = {name: name.replace("x86_64", "x86.64")}
        _kill_at_write(s, sha, s.names.index(name) + 2, applied=True)
        del gh.faults["rename_upload"]
        gh.faults["rename_asset"] = {name: name.replace("x86_64", "x86-64")}  # GitHub keeps neither name on a rename
        s.apply(sha)
        s.converged()
        events = read_journal(s.folder / "journal" / f"{sha}.jsonl")
        assert any(e["detail"].get("action") == "delete-stray" and e["event"] == "op-done" for e in events), "replaced: deleted, then uploaded"


# -- e4-e6, e8: the last window before the publish call ---------------------------------------

# (what the stranger does between publish's last listing and its PATCH, which asset, immutable releases on)
LAST_WINDOW = [("replace", "bundle", False), ("replace", "sums-bundle", False), ("replace", "statement", False), ("add", "extra.bin", False), ("replace", "bundle", True)]


@pytest.mark.slow
@pytest.mark.parametrize(("act", "which", "immutable"), LAST_WINDOW, ids=[f"{a}-{w}-{'immutable' if i else 'mutable'}" for a, w, i in LAST_WINDOW])
def test_an_asset_replaced_right_before_the_publish_call_is_caught_at_once(setup, act, which, immutable):
    setup.gh.immutable_enabled = immutable
    name = {"bundle": setup.statement.name + ".sigstore.json", "sums-bundle": "SHA256SUMS.sigstore.json", "statement": setup.statement.name}.get(which, which)

    def stranger(gh):  # between publish's last listing and its PATCH
        draft = gh.releases_for(TAG)[0]
        for old in [a for a in gh.assets_of(draft) if a.name == name]:
            del gh.assets[old.id]
            draft.asset_ids.remove(old.id)
        gh.add_asset(draft, name, b'{"a": "forged bundle"}')

    setup.gh.faults["on_write"] = (WRITES, stranger)
    with pytest.raises(IntegrityError) as caught:
        setup.apply()
    message = str(caught.value)
    [release] = setup.gh.releases_for(TAG)
    assert f"{TAG} was published with assets the plan did not name: {name} (22 bytes, sha256:" in message
    assert ("not in the plan" in message) is (act == "add")
    assert "wrote nothing" not in message and "Nothing is published" not in message
    if immutable:
        assert not release.draft and "STAYS PUBLIC" in message and "IS PUBLIC" in message and "tell users not to use" in message
    else:
        assert release.draft, "a mutable release is made a draft again at once"
        assert "is a draft again" in message and "made the release" in message and "IS PUBLIC" not in message
        assert setup.gh.refs[TAG] == setup.workspace.commit, "the tag stays; it is never moved or deleted"
    assert not (setup.folder / "receipt.json").exists()


@pytest.mark.slow
def test_the_write_spacing_is_slept_before_the_last_check_not_inside_the_window(setup):
    """Between the listing publish checks and its PATCH nothing sleeps: the spacing was spent before the check."""
    trace: list[tuple] = []

    class Clock(FakeClock):
        def sleep(self, seconds: float) -> None:
            trace.append(("sleep", seconds))
            super().sleep(seconds)

    client = GitHub(REPO, TOKEN, api=setup.gh.url, uploads=setup.gh.uploads, clock=Clock(), write_interval=0.75,
                    on_reply=lambda method, path, reply: trace.append((method, path)))
    setup.apply(github=client)
    setup.converged()
    publish_at = max(i for i, t in enumerate(trace) if t[0] == "PATCH")
    last_check = max(i for i, t in enumerate(trace[:publish_at]) if t[0] == "GET")
    assert trace[last_check][1].endswith("/assets"), trace[last_check - 2:publish_at + 1]
    assert not [t for t in trace[last_check:publish_at] if t[0] == "sleep"], trace[last_check - 3:publish_at + 1]
    assert any(t[0] == "sleep" for t in trace[publish_at - 4:last_check]), "the spacing is still kept, before the check"


def test_a_public_release_without_the_planned_bytes_is_never_called_unpublished(tmp_path):
    """complete() after a publish: the refusal says the release is public, never that nothing is published."""
    from pipeline.formats import publication_plan as fmt
    from pipeline.stages.publish import Publisher

    plan = fmt.make_plan(kind="component", subject=LANE, repository=REPO, tag=TAG, commit="a" * 40, name=TAG, body="notes", prerelease=True, make_latest=False,
                         assets=[{"name": "SHA256SUMS", "size": 3, "sha256": "c" * 64, "source": {"root": "dist", "path": "SHA256SUMS"}}], gates=[],
                         observed={"read": True, "tag": None, "immutable_releases": False, "releases": [], "ci": None})

    class Listing:
        def assets(self, release_id: int) -> list[dict]:
            return [{"id": 1, "name": "SHA256SUMS", "size": 3, "state": "uploaded", "digest": "sha256:" + "d" * 64}]

    publisher = Publisher(Listing(), plan, "e" * 64, {}, fmt.Journal(tmp_path / "journal", "e" * 64), tmp_path)
    with pytest.raises(IntegrityError) as caught:
        publisher.complete({"id": 7, "draft": False})
    assert "release 7 is already public" in str(caught.value) and "nothing is published" not in str(caught.value).lower()
    with pytest.raises(IntegrityError, match="Nothing is published before every planned asset is in place"):  # a draft: true
        publisher.complete({"id": 7, "draft": True})
