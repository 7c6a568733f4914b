"""Which GitHub the client talks to (pipeline/infra/github.py: api_url, uploads_url).

A release job on GitHub Enterprise Server, and the release workflow's rehearsal against the GitHub stand-in,
name their API only in the runner's GITHUB_API_URL; PIPELINE_GITHUB_API stays the operator's explicit override.
"""

from __future__ import annotations

import pytest
from github_standin import FakeClock, StandIn, Token

from pipeline.errors import UsageError
from pipeline.infra.github import API, UPLOADS, GitHub, api_url, is_loopback_url, uploads_url

GHES = "https://ghe.example.com/api/v3"


@pytest.mark.parametrize(
    ("explicit", "environ", "expected"),
    [
        (None, {}, API),
        (None, {"GITHUB_API_URL": GHES}, GHES),
        (None, {"GITHUB_API_URL": GHES + "/"}, GHES),
        (None, {"GITHUB_API_URL": GHES, "PIPELINE_GITHUB_API": "http://127.0.0.1:8080"}, "http://127.0.0.1:8080"),
        (None, {"GITHUB_API_URL": "", "PIPELINE_GITHUB_API": ""}, API),
        ("http://127.0.0.1:9", {"GITHUB_API_URL": GHES, "PIPELINE_GITHUB_API": "http://127.0.0.1:8080"}, "http://127.0.0.1:9"),
    ],
)
def test_the_api_is_the_argument_then_pipeline_github_api_then_github_api_url_then_github_com(explicit, environ, expected):
    assert api_url(explicit, environ) == expected


@pytest.mark.parametrize(
    ("api", "environ", "expected"),
    [
        (API, {}, UPLOADS),
        (GHES, {}, "https://ghe.example.com/api/uploads"),  # GitHub Enterprise Server's documented uploads path
        ("http://127.0.0.1:8080", {}, "http://127.0.0.1:8080/uploads"),  # the stand-ins
        (GHES, {"PIPELINE_GITHUB_UPLOADS": "https://up.example.com/"}, "https://up.example.com"),
    ],
)
def test_uploads_follow_the_api_unless_named(api, environ, expected):
    assert uploads_url(api, None, environ) == expected


def test_the_client_reads_github_api_url_and_a_non_https_one_elsewhere_is_refused(monkeypatch):
    monkeypatch.delenv("PIPELINE_GITHUB_API", raising=False)
    monkeypatch.delenv("PIPELINE_GITHUB_UPLOADS", raising=False)
    monkeypatch.setenv("GITHUB_API_URL", GHES)
    client = GitHub("alphastorm/omp-ninfer", None)
    assert (client.api, client.uploads) == (GHES, "https://ghe.example.com/api/uploads")
    assert not is_loopback_url(client.api) and client.write_interval >= 0.75  # GitHub's own write pacing
    monkeypatch.setenv("GITHUB_API_URL", "http://ghe.example.com/api/v3")
    with pytest.raises(UsageError, match="must use https") as caught:
        GitHub("alphastorm/omp-ninfer", "ghp_secret0123456789")
    assert "GITHUB_API_URL" in caught.value.fix


def test_a_job_that_names_the_stand_in_only_in_github_api_url_reaches_it(monkeypatch):
    """The rehearsal gives its jobs GITHUB_API_URL, as a runner does, and nothing of PIPELINE_GITHUB_*."""
    with StandIn("alphastorm/omp-ninfer") as gh:
        gh.tokens["ghp_rehearsal0123456789abcdef"] = Token()
        monkeypatch.delenv("PIPELINE_GITHUB_API", raising=False)
        monkeypatch.delenv("PIPELINE_GITHUB_UPLOADS", raising=False)
        monkeypatch.setenv("GITHUB_API_URL", gh.url)
        client = GitHub("alphastorm/omp-ninfer", "ghp_rehearsal0123456789abcdef", clock=FakeClock(), write_interval=0)
        assert (client.api, client.uploads) == (gh.url, gh.uploads) and is_loopback_url(client.api)
        assert client.repo()["full_name"] == "alphastorm/omp-ninfer"
        assert client.release_by_tag("v0.13.1") is None
