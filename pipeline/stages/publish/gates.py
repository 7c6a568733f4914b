"""The GitHub gates of both kinds (`Remote`: token, rate, the state the plan saw, CI at the commit, the draft's
assets) and the loop that checks them all before the first write."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from pipeline.errors import PipelineError, RefusedError, RemoteError
from pipeline.formats.ci_checks import read_ci_state
from pipeline.infra.github import GitHub, GitHubError
from pipeline.stages.publish.journal import (
    own_strays,
    plan_ops,
    planned_release_differences,
    release_block,
    started_ops,
    world_changes,
)
from pipeline.stages.publish.target import Target, refuse, uploaded_as_planned
from pipeline.util import ui

# -- remote gates, shared by both kinds -------------------------------------------------

class Remote:
    """The GitHub side of the gates; one listing of the tag's releases, reused."""

    def __init__(self, github: GitHub | None, target: Target) -> None:
        self.github = github
        self.target = target
        self.token_ok = False
        self._observed: dict[str, Any] | None = None
        self._ci_read: Any = None  # the CiState `observe` read (every name GitHub reported, for a refusal to list), or None
        self.reviewed: dict[str, Any] | None = None  # the reviewed plan's `observed`, set by --apply
        self.events: list[dict[str, Any]] = []  # this plan's journal so far (its own progress), set by --apply

    def observe(self, *, fresh: bool = False) -> dict[str, Any]:
        """What GitHub holds for the tag now (`GitHub.tag_state`), read once per run; {"read": false, "why"} without it."""
        if self._observed is None or fresh:
            if self.github is None or not self.github.token:
                self._observed = {"read": False, "why": "no GITHUB_TOKEN in the environment"}
            else:
                try:
                    observed = self.github.tag_state(self.target.tag)
                    required = self.target.ci_required
                    self._ci_read = read_ci_state(self.github, self.target.commit) if required else None
                    observed["ci"] = self._ci_read.to_json(required) if self._ci_read is not None else None
                    self._observed = observed
                except PipelineError as exc:
                    why = re.sub(r", request id \S+", "", exc.what)[:200]
                    self._observed = {"read": False, "why": f"GitHub's state could not be read: {why}"}
        return self._observed

    def _need(self) -> GitHub:
        if self.github is None or not self.github.token:
            raise refuse("not checked: there is no GitHub token", field="GITHUB_TOKEN", fix="export GITHUB_TOKEN and run again")
        if not self.token_ok:
            raise refuse("not checked: the token gate failed")
        return self.github

    def releases(self) -> list[dict[str, Any]]:
        self._need()
        observed = self.observe()
        if not observed["read"]:
            raise RemoteError(observed["why"], fix=self.read_fix())
        return observed["releases"]

    def read_fix(self) -> str:
        """What to do when GitHub's state was not read: set a token only when none is set."""
        if self.github is None or not self.github.token:
            return "export GITHUB_TOKEN (in the release workflow: env GITHUB_TOKEN: ${{ github.token }}) and run the dry run again"
        return (f"GITHUB_TOKEN is set: check that it may read {self.target.repository}'s releases, tags and commits "
                "(contents: read; checks: read and statuses: read for the CI at the commit; contents: write to publish) and GitHub's status, then run the dry run again")

    def token(self) -> str:
        t = self.target
        if self.github is None or not self.github.token:
            raise refuse(
                "there is no GitHub token in the environment",
                field="GITHUB_TOKEN",
                why="publication writes tags, releases and assets; the token is read from the environment only",
                fix="export GITHUB_TOKEN (in the release workflow: env GITHUB_TOKEN: ${{ github.token }}) and run again",
            )
        gh = self.github
        try:
            repo = gh.repo()
        except GitHubError as exc:
            raise refuse(f"the token cannot read {t.repository} (GitHub answered {exc.status})", field="GITHUB_TOKEN", fix="use a token of this repository with contents: write") from None
        permissions = repo.get("permissions") if isinstance(repo, dict) else None
        if isinstance(permissions, dict) and permissions.get("push") is False:
            raise refuse(f"the token may not write to {t.repository}", field="GITHUB_TOKEN", found="push: false", expected="push: true (contents: write)", fix="grant contents: write to the publishing job")
        if gh.scopes is not None and not gh.scopes & {"repo", "public_repo"}:
            raise refuse("the token has neither the repo nor the public_repo scope", field="GITHUB_TOKEN", found=sorted(gh.scopes), expected="repo (or public_repo)")
        commit = gh.commit(t.commit)
        if commit is None:
            raise refuse(f"the commit {t.commit} is not on GitHub in {t.repository}", field="commit", fix="push the commit first (the tag is created on it by the API)")
        files = [f.get("filename", "") for f in commit.get("files") or [] if isinstance(f, dict)]
        workflows = sorted(f for f in files if f.startswith(".github/workflows/"))
        if workflows and gh.scopes is not None and "workflow" not in gh.scopes:
            raise refuse(
                "the token lacks the workflow scope, and the commit changes .github/workflows/",
                field="GITHUB_TOKEN",
                found=sorted(gh.scopes),
                expected="a token with the workflow scope",
                why=f"GitHub answers 404 to a tag or release on a commit that changes {workflows[0]} when the token lacks that scope",
                fix="use a token with the workflow scope",
            )
        self.token_ok = True
        note = "scopes " + ",".join(sorted(gh.scopes)) if gh.scopes is not None else "installation token (scopes are not introspectable; GitHub enforces them)"
        return f"token may write {t.repository}; {note}"

    def rate_limit(self) -> str:
        gh = self._need()
        core = (gh.rate_limit().get("resources") or {}).get("core") or {}
        remaining, reset = core.get("remaining"), core.get("reset")
        needed = 20 + 3 * len(self.target.assets)
        if not isinstance(remaining, int) or remaining < needed:
            raise refuse(
                "too little rate-limit headroom for this publication",
                field="x-ratelimit-remaining",
                found=remaining,
                expected=f"at least {needed} requests",
                why="a publication interrupted by the primary limit is resumable, but starting it without headroom only makes more partial state",
                fix=f"run again after the limit resets (epoch second {reset})",
            )
        return f"{remaining} requests left (needs about {needed})"

    def tag(self) -> str:
        t = self.target
        self._need()
        current = self.observe().get("tag")
        if current is None:
            return f"tag {t.tag} is absent (will be created on {t.commit})"
        if current != t.commit:
            raise refuse(
                f"the tag {t.tag} already points at another commit",
                field=t.tag,
                found=current,
                expected=t.commit,
                why="a tag is never moved or deleted; the component or release with this name is another one",
                fix="cut a new beta.N (python -m pipeline cut …) or release a new version" if t.kind == "component" else "release a new version; never move a published tag",
            )
        return f"tag {t.tag} already points at {t.commit}"

    def single_draft(self) -> str:
        t = self.target
        rels = self.releases()
        drafts = [r for r in rels if r.get("draft")]
        published = [r for r in rels if not r.get("draft")]
        if len(drafts) > 1:
            raise refuse(
                f"GitHub holds {len(drafts)} drafts for the tag {t.tag}",
                field=t.tag,
                found=sorted(r.get("id") for r in drafts),
                expected="at most one draft",
                why="a second draft is what a blind re-run makes (get-by-tag never returns a draft); the pipeline cannot tell which one is meant",
                fix="look at the drafts on GitHub, delete the one that is not yours by hand, and run again",
            )
        if published:
            if drafts:
                raise refuse(f"GitHub holds a published release and a draft for {t.tag}", field=t.tag, found=[r.get("id") for r in rels], fix="delete the stray draft by hand")
            release = published[0]
            remote = {a["name"]: a for a in release["assets"]}
            wanted = {a["name"]: a for a in t.assets}
            if set(remote) != set(wanted) or not all(uploaded_as_planned(remote[n], wanted[n]) for n in wanted):
                raise refuse(
                    f"{t.tag} is already published with other assets than the plan",
                    field=t.tag,
                    found=sorted(remote),
                    expected=sorted(wanted),
                    why="a published release is never changed: no asset is added, replaced or deleted",
                    fix="cut a new beta.N" if t.kind == "component" else "release a new version",
                )
            differences = planned_release_differences(release, release_block(t), self._need().latest_release_id())
            if differences:
                raise refuse(
                    f"{t.tag} is already published with the planned assets, but not as planned: {'; '.join(differences)}",
                    field=t.tag,
                    found=differences,
                    expected="the planned name, body, prerelease and make_latest",
                    why="a release with the planned bytes under other notes or flags is not this plan's publication: someone else published it",
                    fix="look at the release on GitHub: if it is meant to be this one, edit its fields to the plan's; otherwise "
                        + ("cut a new beta.N" if t.kind == "component" else "release a new version"),
                )
            return f"{t.tag} is already published exactly as planned (release {release['id']}): apply only re-checks it"
        return f"one draft of {t.tag} to reuse (release {drafts[0]['id']})" if drafts else f"no release of {t.tag} yet"

    def draft_assets(self) -> str:
        """The draft to reuse holds nothing the plan would have to stop at: only planned names, each either the
        planned bytes (skipped) or an unfinished upload (deleted and uploaded again)."""
        t = self.target
        drafts = [r for r in self.releases() if r.get("draft")]
        if not drafts:
            return "no draft: every asset is uploaded fresh"
        wanted = {a["name"]: a for a in t.assets}
        strays = own_strays(drafts[0]["assets"], t.assets, started_ops(self.events), plan_ops(t.assets))
        kept = 0
        for asset in drafts[0]["assets"]:
            planned = wanted.get(asset["name"])
            if planned is None and asset["name"] in strays:
                continue  # this plan's own upload, stored under another name with its answer lost: apply renames it
            if planned is None:
                raise refuse(
                    f"the draft {drafts[0]['id']} holds the asset {asset['name']}, which the plan does not name",
                    field=asset["name"],
                    found=f"{asset['size']} bytes, {asset['digest']}",
                    expected=sorted(wanted),
                    why="the pipeline never deletes or replaces an asset it did not plan; publishing would ship it",
                    fix=f"look at the draft on GitHub; delete {asset['name']} there by hand if it is not meant to ship, then run the dry run again",
                )
            if uploaded_as_planned(asset, planned):
                kept += 1
            elif asset["state"] == "uploaded" and asset["size"]:
                raise refuse(
                    f"the draft {drafts[0]['id']} holds {asset['name']} with other bytes than the plan",
                    field=asset["name"],
                    found=f"{asset['size']} bytes, {asset['digest']}",
                    expected=f"{planned['size']} bytes, sha256:{planned['sha256']}",
                    why="an uploaded asset is never replaced without a person deciding: it may be someone else's",
                    fix="compare it with the local file; delete it by hand on GitHub if it is wrong, then run the dry run again",
                )
        return f"the draft {drafts[0]['id']} holds {kept} planned assets with their planned bytes and nothing else"

    def ci(self) -> str:
        """Every required check concluded `success` at exactly the planned commit (formats/ci_checks.py), as GitHub
        reports it now: at the dry run for the plan, again before the apply's first write."""
        from pipeline.formats.ci_checks import from_recorded, require_green

        t = self.target
        if t.ci_problem is not None:
            raise refuse(f"the required checks of {t.repository} are not known: {t.ci_problem.what}", file=t.ci_problem.file, field=t.ci_problem.field, fix=t.ci_problem.fix)
        now = self.observe()
        if not now["read"]:
            raise refuse(f"the CI of {t.commit} was not read ({now['why']})", field="observed.ci",
                          why="a commit is published only when its required checks passed at exactly that commit", fix=self.read_fix())
        if now["ci"] is None:
            raise refuse("no required checks are declared", file=t.ci_declared_in or None, why="a publication is gated on CI at its exact commit",
                          fix="declare them (a lane: [source] required_checks; the product: .github/required-checks.toml)")
        state, required = from_recorded(now["ci"], file="GitHub's answer", field="ci")
        if self._ci_read is not None and self._ci_read.sha == state.sha:
            state = self._ci_read  # the same read, unfiltered: a missing name's refusal lists what GitHub did report
        return require_green(state, required, declared_in=t.ci_declared_in)

    def unchanged(self) -> str:
        """GitHub holds what the reviewed plan observed, apart from this plan's own journalled progress."""
        now = self.observe()
        if not now["read"]:
            raise refuse(f"GitHub's state for {self.target.tag} was not read ({now['why']})", field="observed",
                          why="a plan is reviewed against what GitHub holds; without reading it, nothing binds the writes to it",
                          fix=self.read_fix())
        reviewed = self.reviewed if self.reviewed is not None else now
        if not reviewed["read"]:
            raise refuse("the reviewed plan did not read GitHub's state", field="observed.read", found=False, expected=True,
                          why=reviewed.get("why"), fix="run the dry run again where it can read GitHub's state, review the plan, and apply its hash")
        changes = world_changes(reviewed, now, self.target, self.events)
        if changes:
            raise refuse(
                f"{changes[0]}: run the dry run again and review it",
                field="observed",
                found=changes,
                why="the reviewed plan binds the GitHub state it was made against; what changed since is not this plan's own progress",
                fix="run the publish command without --apply, review the new plan, and apply its hash",
            )
        mine = "" if now == reviewed else " (apart from this plan's own journalled writes)"
        return f"GitHub holds what the reviewed plan observed{mine}"


def remote_gates(remote: Remote) -> list[tuple[str, Callable[[], str]]]:
    """The GitHub gates of both kinds, in order: who may write, how much, whether GitHub still holds what the plan
    saw, and whether what it holds lets the plan run to the end."""
    return [
        ("token", remote.token),
        ("rate-limit", remote.rate_limit),
        ("github-unchanged", remote.unchanged),
        ("ci-at-commit", remote.ci),
        ("tag", remote.tag),
        ("single-draft", remote.single_draft),
        ("draft-assets", remote.draft_assets),
    ]


def run_gates(gates: list[tuple[str, Callable[[], str]]]) -> None:
    """Check every gate; print OK/FAIL per gate; raise the first failure (exit 7)."""
    failures: list[tuple[str, PipelineError]] = []
    for name, check in gates:
        try:
            detail = check()
        except RefusedError as exc:
            failures.append((name, exc))
            ui.result(f"FAIL: gate {name}: {exc.render()}", sys.stderr)
            continue
        except PipelineError as exc:  # a gate that cannot be checked refuses too
            refused = RefusedError(f"gate {name} could not be checked: {exc.what}", file=exc.file, field=exc.field, fix=exc.fix)
            failures.append((name, refused))
            ui.result(f"FAIL: gate {name}: {refused.render()}", sys.stderr)
            continue
        ui.result(f"OK:   gate {name}: {detail}", sys.stderr)
    if failures:
        name, first = failures[0]
        first.what = f"gate {name} refused: {first.what}"
        if len(failures) > 1:
            first.what += f" (and {len(failures) - 1} more gate(s) listed above)"
        first.args = (first.render(),)
        raise first
