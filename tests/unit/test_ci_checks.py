"""CI at an exact commit (pipeline/formats/ci_checks.py) read through the GitHub client from the stand-in:
the gate rule, each fault of the stand-in refused with its message, hostile answers, the required-checks
declarations (a lane's `[source] required_checks`, the product's `.github/required-checks.toml`)."""

from __future__ import annotations

import pytest
from github_standin import CHECK_RUNS_DOCS, StandIn, Token

from pipeline.errors import InputError, RefusedError, RemoteError
from pipeline.formats.ci_checks import (
    CiState,
    check_recorded,
    read_ci_state,
    read_required_checks,
    require_green,
)
from pipeline.formats.lanes import DEFAULT_LANES_DIR, load_lane
from pipeline.infra.github import GitHub, GitHubError

REPO = "alphastorm/ninfer"
TOKEN = "ghp_standinTokenForCiTests0123456789abcd"
SHA, PARENT = "c" * 40, "b" * 40
REQUIRED = ("build", "test")


@pytest.fixture
def gh():
    with StandIn(REPO) as standin:
        standin.tokens[TOKEN] = Token()
        standin.add_commit(SHA)
        standin.add_commit(PARENT)
        yield standin


def client(gh: StandIn, token: str = TOKEN) -> GitHub:
    return GitHub(REPO, token, api=gh.url, uploads=gh.uploads, write_interval=0)


def gate(gh: StandIn) -> str:
    return require_green(read_ci_state(client(gh), SHA), REQUIRED, declared_in="lane")


def test_every_required_check_green_at_the_commit_passes_and_names_the_runs(gh):
    gh.pass_checks(SHA, REQUIRED)
    gh.add_check_run(SHA, "lint", conclusion="failure")  # not required: does not count
    state = read_ci_state(client(gh), SHA)
    line = require_green(state, REQUIRED, declared_in="lane")
    assert line.startswith("2 required checks succeeded at cccccccccccc") and f"build #{state.latest('build').id}" in line
    recorded = state.to_json(REQUIRED)
    assert [r["name"] for r in recorded["check_runs"]] == ["build", "test"], "the plan binds only the required names"
    check_recorded(recorded, file="plan", field="observed.ci")


@pytest.mark.parametrize(("arrange", "message"), [
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="failure"), "concluded failure"),
    (lambda gh: gh.add_check_run(SHA, "test", status="in_progress"), "is in_progress"),
    (lambda gh: gh.add_check_run(SHA, "test", status="queued"), "is queued"),
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="neutral"), "concluded neutral"),
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="skipped"), "concluded skipped"),
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="cancelled"), "concluded cancelled"),
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="timed_out"), "concluded timed_out"),
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="action_required"), "concluded action_required"),
    (lambda gh: gh.add_check_run(SHA, "test", conclusion="stale"), "concluded stale"),
    (lambda gh: (gh.add_check_run(SHA, "test"), gh.add_check_run(SHA, "test", conclusion="failure")), "concluded failure"),  # a re-run that flips
    (lambda gh: gh.add_check_run(PARENT, "test"), "'test' missing"),  # green on the parent commit only
    (lambda gh: None, "'test' missing"),
    (lambda gh: (gh.add_check_run(SHA, "test"), gh.add_status(SHA, "test", "pending")), "its commit status is pending"),
], ids=["failure", "in-progress", "queued", "neutral", "skipped", "cancelled", "timed-out", "action-required", "stale", "rerun-flips", "parent-only", "missing", "status-pending"])
def test_each_fault_is_refused_naming_the_check_its_url_and_its_conclusion(gh, arrange, message):
    gh.add_check_run(SHA, "build")
    arrange(gh)
    with pytest.raises(RefusedError) as caught:
        gate(gh)
    text = str(caught.value)
    assert message in text and "not green" in text and "Fix:" in text, text
    runs = [r for r in gh.check_runs.get(SHA, []) if r["name"] == "test"]
    if runs and "status" not in message:
        assert runs[-1]["html_url"] in text, "the refusal names the URL of the run that counts"


def test_a_rerun_that_passes_after_a_failure_counts_as_the_latest(gh):
    gh.add_check_run(SHA, "build")
    gh.add_check_run(SHA, "test", conclusion="failure")
    gh.add_check_run(SHA, "test")
    assert gate(gh).startswith("2 required checks succeeded")


def test_a_status_alone_does_not_satisfy_a_required_name_but_one_beside_a_run_must_succeed(gh):
    gh.add_check_run(SHA, "build")
    gh.add_status(SHA, "test", "success")  # anyone with statuses: write can post a green context of any name
    with pytest.raises(RefusedError, match="'test' missing: no check run by github-actions at this commit, only a commit status") as caught:
        gate(gh)
    assert "correct the declaration" in str(caught.value)
    gh.add_check_run(SHA, "test")
    gh.add_status(SHA, "test", "failure")  # the latest status of the context counts, beside the run
    with pytest.raises(RefusedError, match="its commit status is failure"):
        gate(gh)
    gh.add_status(SHA, "test", "success")
    assert gate(gh).startswith("2 required checks succeeded")


def test_a_run_posted_by_another_app_never_replaces_the_required_apps_run(gh):
    gh.add_check_run(SHA, "build")
    failed = gh.add_check_run(SHA, "test", conclusion="failure")
    gh.add_check_run(SHA, "test", app="evil-app")  # a later, green run of the same name by another app
    with pytest.raises(RefusedError, match=f"'test' run {failed['id']} concluded failure"):
        gate(gh)


def test_a_name_only_another_app_posted_is_refused_naming_that_app(gh):
    gh.add_check_run(SHA, "build")
    other = gh.add_check_run(SHA, "test", app="evil-app")
    with pytest.raises(RefusedError, match=f"run {other['id']} of that name is posted by 'evil-app', not github-actions"):
        gate(gh)


def test_a_missing_name_lists_what_github_reported_quoted_and_says_how_to_fix_the_declaration(gh):
    gh.add_check_run(SHA, "build")
    gh.add_check_run(SHA, "test (ubuntu-latest)")
    gh.add_status(SHA, "ci/\u202eevil")
    with pytest.raises(RefusedError) as caught:
        gate(gh)
    text = str(caught.value)
    assert "GitHub reported: 'build', 'ci/\\u202eevil', 'test (ubuntu-latest)'" in text, text
    assert "\u202e" not in text.replace("\\u202e", ""), "a reported name is quoted, never printed raw"
    assert "correct the declaration" in text and "matrix" in text and "push" in text
    for index in range(40):
        gh.add_check_run(SHA, f"job-{index:02d}")
    with pytest.raises(RefusedError, match=r"\(and 23 more\)"):
        gate(gh)


def test_a_combined_status_whose_total_count_disagrees_is_refused(gh):
    gh.pass_checks(SHA, REQUIRED)
    status = gh.add_status(SHA, "test", "failure")
    body = {"state": "success", "sha": SHA, "total_count": 2, "statuses": []}  # hides the failing status it counts
    gh.faults["malformed"] = {f"/repos/{REPO}/commits/{SHA}/status": body}
    with pytest.raises(RemoteError, match="the pages held 0 statuses, but GitHub's total_count says otherwise"):
        read_ci_state(client(gh), SHA)
    body["total_count"] = 1
    body["statuses"] = [status]
    with pytest.raises(RefusedError, match="its commit status is failure"):
        require_green(read_ci_state(client(gh), SHA), REQUIRED, declared_in="lane")


def test_check_runs_are_read_over_every_page(gh):
    for index in range(130):
        gh.add_check_run(SHA, f"matrix-{index}")
    gh.pass_checks(SHA, REQUIRED)  # the newest: on the first page
    gh.add_check_run(SHA, "test", conclusion="failure")  # a re-run
    state = read_ci_state(client(gh), SHA)
    assert len(state.check_runs) == 133
    assert [p for m, p, _s in gh.log if p.endswith("/check-runs")] == [f"/repos/{REPO}/commits/{SHA}/check-runs"] * 2
    with pytest.raises(RefusedError, match="concluded failure"):
        require_green(state, REQUIRED, declared_in="lane")


def test_a_run_of_another_commit_in_the_answer_is_refused(gh):
    run = gh.add_check_run(PARENT, "test")
    gh.pass_checks(SHA, REQUIRED)  # the newest run of 'test' is this commit's, and green: the answer still mixes commits
    gh.faults["malformed"] = {f"/repos/{REPO}/commits/{SHA}/check-runs": {"total_count": 3, "check_runs": [run, *gh.check_runs[SHA]]}}
    with pytest.raises(RefusedError, match=f"the required check 'test' run {run['id']} is of the commit {PARENT}, not this one"):
        gate(gh)


@pytest.mark.parametrize(("body", "field"), [
    ({"total_count": 1, "check_runs": "none"}, "page 1"),
    ({"total_count": 1, "check_runs": [{"id": 1, "name": "test", "head_sha": SHA, "status": "completed", "conclusion": "great"}]}, "check_runs[0].conclusion"),
    ({"total_count": 1, "check_runs": [{"id": "1", "name": "test", "head_sha": SHA, "status": "completed", "conclusion": "success"}]}, "check_runs[0].id"),
    ({"total_count": 1, "check_runs": [{"id": 1, "name": "te\nst", "head_sha": SHA, "status": "completed", "conclusion": "success"}]}, "check_runs[0].name"),
    ({"total_count": 5, "check_runs": [{"id": 1, "name": "test", "head_sha": SHA, "status": "completed", "conclusion": "success"}]}, "total_count"),
    ([1, 2], "check-runs"),
])
def test_an_answer_in_another_shape_is_a_clear_remote_error(gh, body, field):
    gh.faults["malformed"] = {f"/repos/{REPO}/commits/{SHA}/check-runs": body}
    with pytest.raises(RemoteError) as caught:
        read_ci_state(client(gh), SHA)
    assert field in str(caught.value) and "Traceback" not in str(caught.value)


def test_a_token_without_checks_read_gets_githubs_403_and_the_fix(gh):
    gh.tokens["ghs_contentsOnly0123456789abcdefghijkl"] = Token(permissions={"contents": "write"})
    with pytest.raises(GitHubError) as caught:
        read_ci_state(client(gh, "ghs_contentsOnly0123456789abcdefghijkl"), SHA)
    assert caught.value.status == 403 and "Resource not accessible by integration" in str(caught.value) and CHECK_RUNS_DOCS in str(caught.value)
    assert "checks: read" in str(caught.value)
    gh.tokens["ghs_checksOnly0123456789abcdefghijklmn"] = Token(permissions={"contents": "read", "checks": "read"})
    with pytest.raises(GitHubError, match="statuses: read"):
        read_ci_state(client(gh, "ghs_checksOnly0123456789abcdefghijklmn"), SHA)
    gh.tokens["ghs_both0123456789abcdefghijklmnopqrs"] = Token(permissions={"checks": "read", "statuses": "read"})
    assert isinstance(read_ci_state(client(gh, "ghs_both0123456789abcdefghijklmnopqrs"), SHA), CiState)


def test_the_lane_files_declare_their_required_checks_and_a_bad_list_is_refused(tmp_path):
    for path in sorted(DEFAULT_LANES_DIR.glob("*.toml")):
        assert load_lane(path).required_checks == REQUIRED
    source = (DEFAULT_LANES_DIR / "rtx5090-container.toml").read_text()
    lanes = tmp_path / "runtime" / "lanes"
    lanes.mkdir(parents=True)
    for bad, why in (('["build", "build"]', "names a check twice"), ("[]", "is not a list of required check names"), ('["build", " test"]', "is not a check name")):
        (lanes / "rtx5090-container.toml").write_text(source.replace('required_checks = ["build", "test"]', f"required_checks = {bad}"))
        with pytest.raises(InputError, match=why):
            load_lane(lanes / "rtx5090-container.toml")


def test_the_product_declaration_is_required_and_strict():
    assert read_required_checks(b'schema_version = 1\nrequired_checks = [".ci/run"]\n', source="f") == (".ci/run",)
    with pytest.raises(RefusedError, match="declares no required checks"):
        read_required_checks(None, source="c:.github/required-checks.toml")
    with pytest.raises(InputError, match="schema 1"):
        read_required_checks(b'required_checks = ["x"]\nextra = 1\n', source="f")
    with pytest.raises(InputError, match="is not a recorded CI state"):
        check_recorded({"repository": REPO, "sha": SHA, "required": ["x"], "check_runs": [{"id": 1}], "statuses": []}, file="plan", field="observed.ci")


def test_a_recorded_block_keeps_only_the_required_names_and_says_so_when_one_is_missing(gh):
    from pipeline.formats.ci_checks import from_recorded

    gh.add_check_run(SHA, "build")
    gh.add_check_run(SHA, "test (ubuntu-latest)")
    state = read_ci_state(client(gh), SHA)
    with pytest.raises(RefusedError, match="GitHub reported: 'build', 'test \\(ubuntu-latest\\)'"):
        require_green(state, REQUIRED, declared_in="lane")
    recorded, required = from_recorded(state.to_json(REQUIRED), file="plan", field="observed.ci")
    with pytest.raises(RefusedError, match="the record keeps only the required names") as caught:
        require_green(recorded, required, declared_in="lane")
    assert "GitHub reported no checks at all" not in str(caught.value), "a filtered record does not claim GitHub reported nothing"
