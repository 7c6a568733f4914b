"""Stage `publish`: plan, gate, apply, resume -- publish a GitHub release and never move a tag.

    python -m pipeline publish --component <lane>              # dry run: write and print the plan
    python -m pipeline publish --component <lane> --apply --plan-sha256 HEX
    python -m pipeline publish --release vX.Y.Z [--root DIR] [--commit C] [--test-receipt F] [--bundles DIR]
    python -m pipeline publish --release vX.Y.Z --apply --plan-sha256 HEX

`--component` publishes the lane's current cut as a prerelease of the runtime
repository (`make_latest: false`): its closed asset set from the register.
`--release` publishes the product release of this repository
(`make_latest: true`, set explicitly): the manifest, every signed file and its
Sigstore bundle, taken from the exact commit being tagged.

Without `--apply` the stage writes the plan (pipeline/formats/publication_plan.py:
every remote write in order, made from local bytes only, so it is
byte-identical across runs), prints its canonical JSON on stdout, its SHA-256
and a diff against what GitHub holds on stderr, and checks the gates.
`--apply --plan-sha256 HEX` recomputes the plan, refuses if it is not the
reviewed one, checks every gate before the first write, and then, in order:
creates the tag ref on the exact commit (never relying on
`target_commitish`), creates or finds the draft (by listing: get-by-tag never
returns a draft), uploads each asset reconciling by digest (absent -> upload,
same size and digest -> skip, `starter`/`open`/empty -> delete and re-upload,
other bytes or an asset the plan does not name -> stop), checks completeness,
publishes (the write spacing slept before that last check, the assets listed
again the moment the publish answers; a release public with bytes the plan did
not name is made a draft again where GitHub allows, and the run stops saying
exactly what is public), re-reads the release by tag, checks `immutable` where the
repository enables it, downloads every published asset and re-hashes it, and
records the publication receipt (and, for a component, marks the cut
published in its ledger).

Every gate refuses on its own with exit 7.  A re-run after any interruption
reconciles from GitHub's state; an ambiguous failure (timeout, reset, 5xx) is
followed by a listing before any retry.  The journal is append-only and keyed
by the plan hash.  Never: delete or move a tag, delete or replace a published
asset, publish before every planned asset is `uploaded` with its digest.
"""

from __future__ import annotations

import argparse
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError, IntegrityError, PipelineError, RefusedError, RemoteError, UsageError
from pipeline.formats import publication_plan as fmt
from pipeline.formats.assets import OUTER_SUMS
from pipeline.formats.ci_checks import read_ci_state
from pipeline.formats.cut_ledger import Publication, write_ledger
from pipeline.formats.lanes import REPO_ROOT, Lane
from pipeline.formats.release.manifest import lane_rows, section
from pipeline.formats.release.names import BUNDLE_SUFFIX
from pipeline.formats.release.signer import release_signer, signer_from_manifest
from pipeline.infra import attestations
from pipeline.infra.git import GIT, git_show
from pipeline.infra.github import (
    Ambiguous,
    GitHub,
    GitHubError,
    api_url,
    body_sha256,
    is_loopback_url,
    repository_of,
    token_from_env,
)
from pipeline.infra.sigstore import (
    TEST_STANDIN_ENV,
    Sha256Digest,
    effective_trust_config,
    test_standin,
    verify_bundle,
    verify_dsse_bundle,
)
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes, sha256_file
from pipeline.util.jsonio import canonical_bytes, parse_strict

if TYPE_CHECKING:
    from pipeline.formats.test_receipt import Selection

ATTEMPTS = 4  # per operation, after ambiguous failures
# The pipeline's own wheel, sdist, the auditor's hash-locked requirements and their SHA256SUMS (verifier-dist):
# the product release ships them for auditors.
VERIFIER_KINDS = ("verifier-wheel", "verifier-sdist", "verifier-requirements", "verifier-checksums")


@dataclass
class Target:
    """One publication: what goes where, from which local bytes."""

    kind: str
    subject: str
    repository: str
    tag: str
    commit: str
    name: str
    body: str
    prerelease: bool
    make_latest: bool
    assets: list[dict[str, Any]]
    files: dict[str, Path]  # asset name -> local file
    lane: Lane | None = None
    gates: list[tuple[str, Callable[[], str]]] = field(default_factory=list)
    # The CI that must be green at `commit` (formats/ci_checks.py): the names, the file that declares them, or why
    # they could not be read (the `ci` gate then refuses with it).
    ci_required: tuple[str, ...] = ()
    ci_declared_in: str = ""
    ci_problem: PipelineError | None = None
    test_selection: dict[str, Any] | None = None  # product: the test-run receipt's selection, which the plan binds

    @property
    def slug(self) -> str:
        return f"{self.kind}-{self.tag}"


def _asset(name: str, path: Path, root: str, relative: str) -> dict[str, Any]:
    return {"name": name, "size": path.stat().st_size, "sha256": sha256_file(path), "source": {"root": root, "path": relative}}


def _uploaded(remote: dict[str, Any] | None, planned: dict[str, Any]) -> bool:
    return bool(remote) and remote.get("state") == "uploaded" and remote.get("size") == planned["size"] and remote.get("digest") == f"sha256:{planned['sha256']}"


def _refuse(what: str, **kwargs: Any) -> RefusedError:
    return RefusedError(what, **kwargs)


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
            raise _refuse("not checked: there is no GitHub token", field="GITHUB_TOKEN", fix="export GITHUB_TOKEN and run again")
        if not self.token_ok:
            raise _refuse("not checked: the token gate failed")
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
            raise _refuse(
                "there is no GitHub token in the environment",
                field="GITHUB_TOKEN",
                why="publication writes tags, releases and assets; the token is read from the environment only",
                fix="export GITHUB_TOKEN (in the release workflow: env GITHUB_TOKEN: ${{ github.token }}) and run again",
            )
        gh = self.github
        try:
            repo = gh.repo()
        except GitHubError as exc:
            raise _refuse(f"the token cannot read {t.repository} (GitHub answered {exc.status})", field="GITHUB_TOKEN", fix="use a token of this repository with contents: write") from None
        permissions = repo.get("permissions") if isinstance(repo, dict) else None
        if isinstance(permissions, dict) and permissions.get("push") is False:
            raise _refuse(f"the token may not write to {t.repository}", field="GITHUB_TOKEN", found="push: false", expected="push: true (contents: write)", fix="grant contents: write to the publishing job")
        if gh.scopes is not None and not gh.scopes & {"repo", "public_repo"}:
            raise _refuse("the token has neither the repo nor the public_repo scope", field="GITHUB_TOKEN", found=sorted(gh.scopes), expected="repo (or public_repo)")
        commit = gh.commit(t.commit)
        if commit is None:
            raise _refuse(f"the commit {t.commit} is not on GitHub in {t.repository}", field="commit", fix="push the commit first (the tag is created on it by the API)")
        files = [f.get("filename", "") for f in commit.get("files") or [] if isinstance(f, dict)]
        workflows = sorted(f for f in files if f.startswith(".github/workflows/"))
        if workflows and gh.scopes is not None and "workflow" not in gh.scopes:
            raise _refuse(
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
            raise _refuse(
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
            raise _refuse(
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
            raise _refuse(
                f"GitHub holds {len(drafts)} drafts for the tag {t.tag}",
                field=t.tag,
                found=sorted(r.get("id") for r in drafts),
                expected="at most one draft",
                why="a second draft is what a blind re-run makes (get-by-tag never returns a draft); the pipeline cannot tell which one is meant",
                fix="look at the drafts on GitHub, delete the one that is not yours by hand, and run again",
            )
        if published:
            if drafts:
                raise _refuse(f"GitHub holds a published release and a draft for {t.tag}", field=t.tag, found=[r.get("id") for r in rels], fix="delete the stray draft by hand")
            release = published[0]
            remote = {a["name"]: a for a in release["assets"]}
            wanted = {a["name"]: a for a in t.assets}
            if set(remote) != set(wanted) or not all(_uploaded(remote[n], wanted[n]) for n in wanted):
                raise _refuse(
                    f"{t.tag} is already published with other assets than the plan",
                    field=t.tag,
                    found=sorted(remote),
                    expected=sorted(wanted),
                    why="a published release is never changed: no asset is added, replaced or deleted",
                    fix="cut a new beta.N" if t.kind == "component" else "release a new version",
                )
            differences = planned_release_differences(release, release_block(t), self._need().latest_release_id())
            if differences:
                raise _refuse(
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
        strays = own_strays(drafts[0]["assets"], t.assets, started_ops(self.events), _ops(t.assets))
        kept = 0
        for asset in drafts[0]["assets"]:
            planned = wanted.get(asset["name"])
            if planned is None and asset["name"] in strays:
                continue  # this plan's own upload, stored under another name with its answer lost: apply renames it
            if planned is None:
                raise _refuse(
                    f"the draft {drafts[0]['id']} holds the asset {asset['name']}, which the plan does not name",
                    field=asset["name"],
                    found=f"{asset['size']} bytes, {asset['digest']}",
                    expected=sorted(wanted),
                    why="the pipeline never deletes or replaces an asset it did not plan; publishing would ship it",
                    fix=f"look at the draft on GitHub; delete {asset['name']} there by hand if it is not meant to ship, then run the dry run again",
                )
            if _uploaded(asset, planned):
                kept += 1
            elif asset["state"] == "uploaded" and asset["size"]:
                raise _refuse(
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
            raise _refuse(f"the required checks of {t.repository} are not known: {t.ci_problem.what}", file=t.ci_problem.file, field=t.ci_problem.field, fix=t.ci_problem.fix)
        now = self.observe()
        if not now["read"]:
            raise _refuse(f"the CI of {t.commit} was not read ({now['why']})", field="observed.ci",
                          why="a commit is published only when its required checks passed at exactly that commit", fix=self.read_fix())
        if now["ci"] is None:
            raise _refuse("no required checks are declared", file=t.ci_declared_in or None, why="a publication is gated on CI at its exact commit",
                          fix="declare them (a lane: [source] required_checks; the product: .github/required-checks.toml)")
        state, required = from_recorded(now["ci"], file="GitHub's answer", field="ci")
        if self._ci_read is not None and self._ci_read.sha == state.sha:
            state = self._ci_read  # the same read, unfiltered: a missing name's refusal lists what GitHub did report
        return require_green(state, required, declared_in=t.ci_declared_in)

    def unchanged(self) -> str:
        """GitHub holds what the reviewed plan observed, apart from this plan's own journalled progress."""
        now = self.observe()
        if not now["read"]:
            raise _refuse(f"GitHub's state for {self.target.tag} was not read ({now['why']})", field="observed",
                          why="a plan is reviewed against what GitHub holds; without reading it, nothing binds the writes to it",
                          fix=self.read_fix())
        reviewed = self.reviewed if self.reviewed is not None else now
        if not reviewed["read"]:
            raise _refuse("the reviewed plan did not read GitHub's state", field="observed.read", found=False, expected=True,
                          why=reviewed.get("why"), fix="run the dry run again where it can read GitHub's state, review the plan, and apply its hash")
        changes = world_changes(reviewed, now, self.target, self.events)
        if changes:
            raise _refuse(
                f"{changes[0]}: run the dry run again and review it",
                field="observed",
                found=changes,
                why="the reviewed plan binds the GitHub state it was made against; what changed since is not this plan's own progress",
                fix="run the publish command without --apply, review the new plan, and apply its hash",
            )
        mine = "" if now == reviewed else " (apart from this plan's own journalled writes)"
        return f"GitHub holds what the reviewed plan observed{mine}"


def release_block(target: Target) -> dict[str, Any]:
    """The plan's `release` block for a target (publication_plan.make_plan's): what the publish call sets."""
    return {"name": target.name, "body": target.body, "prerelease": target.prerelease, "make_latest": "true" if target.make_latest else "false"}


def planned_release_differences(release: dict[str, Any], planned: dict[str, Any], latest_id: int | None) -> list[str]:
    """Every planned field a published release does not carry (`release` as `GitHub.tag_state` shapes it, with
    `body_sha256`): its name, its body, prerelease, and make_latest as GitHub shows it (the release marked latest).
    `make_latest: true` also holds when a release made later than this one is latest now."""
    differences = []
    if release.get("name") != planned["name"]:
        differences.append(f"its name is {release.get('name')!r}, the plan's {planned['name']!r}")
    if release.get("body_sha256") != body_sha256(planned["body"]):
        differences.append(f"its body has SHA-256 {release.get('body_sha256')}, the plan's {body_sha256(planned['body'])}")
    if release.get("prerelease") is not planned["prerelease"]:
        differences.append(f"prerelease is {release.get('prerelease')}, the plan's {planned['prerelease']}")
    latest = latest_id == release["id"]
    if planned["make_latest"] == "false" and latest:
        differences.append("GitHub marks it the latest release; the plan says make_latest false")
    if planned["make_latest"] == "true" and not latest and (latest_id is None or latest_id < release["id"]):
        differences.append(f"GitHub does not mark it the latest release (latest: {latest_id}); the plan says make_latest true")
    return differences


DRAFT_MARKER = "<!-- omp-ninfer publication draft {nonce} -->"


def draft_body(body: str, nonce: str) -> str:
    """The body a create-draft sends: the planned body and a marker whose random nonce the journal records before the
    call, so a draft is recognised as this plan's own only when it carries a nonce only this plan's journal holds
    (the publish call sets the planned body again)."""
    return f"{body}\n\n{DRAFT_MARKER.format(nonce=nonce)}\n"


def own_draft_digests(events: list[dict[str, Any]], body: str) -> set[str]:
    """The body digests a draft created by this plan can have: one per journalled create-draft attempt."""
    return {body_sha256(draft_body(body, e["detail"]["marker"])) for e in events
            if e.get("event") == "op-start" and e.get("op") == 0 and isinstance((e.get("detail") or {}).get("marker"), str)}


def own_release_ids(events: list[dict[str, Any]], ops: dict[str, int]) -> set[int]:
    """Releases this plan's journal names as its own: the draft it created (answer received), the draft it adopted by
    the adoption rule (`Publisher.draft`), and the release whose publish it started."""
    ids = set()
    for e in events:
        detail = e.get("detail") or {}
        created = e.get("event") == "op-done" and e.get("op") == ops["create-draft"]
        adopted = e.get("event") == "op-skip" and e.get("op") == ops["create-draft"] and detail.get("reason") == ADOPTED
        publishing = e.get("event") == "op-start" and e.get("op") == ops["publish"]
        if (created or adopted or publishing) and isinstance(detail.get("release_id"), int):
            ids.add(detail["release_id"])
    return ids


ADOPTED = "draft found by listing, this plan's own"


def own_strays(assets: list[dict[str, Any]], planned: list[dict[str, Any]], started: set[int], ops: dict[str, int]) -> dict[str, str]:
    """Unplanned names holding exactly a planned asset's size and digest, whose upload this plan's journal shows started
    while the planned name holds no finished upload: GitHub stored this plan's own upload under another name and the
    answer that said so was lost.  {stray name: planned name}; a stray two planned assets could explain is nobody's."""
    names = {a["name"]: a for a in assets}
    wanted = {a["name"] for a in planned}
    strays: dict[str, str] = {}
    for asset in assets:
        if asset["name"] in wanted or asset.get("state") != "uploaded":
            continue
        candidates = [p["name"] for p in planned if ops[f"upload-asset:{p['name']}"] in started and _uploaded({**asset, "name": p["name"]}, p)
                      and not _uploaded(names.get(p["name"]), p)]
        if len(candidates) == 1:
            strays[asset["name"]] = candidates[0]
    if len(set(strays.values())) != len(strays):  # two strays for one planned name: not a lost answer
        return {}
    return strays


def _ops(target_assets: list[dict[str, Any]]) -> dict[str, int]:
    """Operation indices of a plan (publication_plan.make_plan's order): draft, uploads by name, tag, publish."""
    names = sorted(a["name"] for a in target_assets)
    ops = {"create-draft": 0, **{f"upload-asset:{n}": i for i, n in enumerate(names, start=1)}}
    ops["create-tag"] = len(names) + 1
    ops["publish"] = len(names) + 2
    return ops


def _describe(release: dict[str, Any]) -> str:
    return f"{'draft' if release['draft'] else 'published release'} {release['id']} {release['name']!r}"


def started_ops(events: list[dict[str, Any]]) -> set[int]:
    """The operations a plan's journal shows it started (whether or not GitHub's answer arrived)."""
    return {e.get("op") for e in events if e.get("event") in ("op-start", "op-ambiguous", "op-done", "op-retry")}


def world_changes(reviewed: dict[str, Any], now: dict[str, Any], target: Target, events: list[dict[str, Any]]) -> list[str]:
    """Every difference between the reviewed plan's observed GitHub state and `now` that is not this plan's
    own progress, as recorded in its journal (`events`): a draft it created (its id journalled, or its body carrying
    a marker only this plan's journal holds), assets it started uploading (under their names, or under another
    name GitHub gave one whose answer was lost: `own_strays`), the tag it started creating on the planned commit,
    the publish it started."""
    ops = _ops(target.assets)
    started = started_ops(events)
    created = own_release_ids(events, ops)
    markers = own_draft_digests(events, target.body)
    planned = {a["name"]: a for a in target.assets}
    from pipeline.formats.ci_checks import changes as ci_changes

    changes: list[str] = ci_changes(reviewed.get("ci"), now.get("ci"))
    if now["tag"] != reviewed["tag"]:
        own = reviewed["tag"] is None and now["tag"] == target.commit and ops["create-tag"] in started
        if not own:
            changes.append(f"the tag {target.tag} is now {'at ' + now['tag'] if now['tag'] else 'absent'}; the reviewed plan saw it {'at ' + reviewed['tag'] if reviewed['tag'] else 'absent'}")
    if reviewed["immutable_releases"] is True and now["immutable_releases"] is False:
        changes.append("the repository no longer enables immutable releases; the reviewed plan saw them enabled")
    elif reviewed["immutable_releases"] is True and now["immutable_releases"] is None:
        changes.append("the repository's immutable-releases setting can no longer be read; the reviewed plan saw it enabled")

    def own_asset(asset: dict[str, Any], strays: dict[str, str]) -> bool:
        if asset["name"] in strays:
            return True
        wanted = planned.get(asset["name"])
        return wanted is not None and ops[f"upload-asset:{asset['name']}"] in started and (_uploaded(asset, wanted) or asset["state"] != "uploaded" or not asset["size"])

    def own_release_fields(release: dict[str, Any]) -> bool:  # what the publish call sets, once it was started
        return (ops["publish"] in started and release["name"] == target.name and release["prerelease"] == target.prerelease
                and release.get("body_sha256") == body_sha256(target.body))

    before = {r["id"]: r for r in reviewed["releases"]}
    for release in now["releases"]:
        old = before.pop(release["id"], None)
        if old is None:
            mine = release["id"] in created or release.get("body_sha256") in markers
            if not mine or (not release["draft"] and ops["publish"] not in started):
                changes.append(f"GitHub now holds {_describe(release)} that the reviewed plan did not see")
                continue
            old = {**release, "draft": True, "immutable": False, "assets": []}
        if release["draft"] != old["draft"] and (release["draft"] or ops["publish"] not in started):
            changes.append(f"{_describe(old)} is now {'a draft' if release['draft'] else 'published'}; the reviewed plan saw it {'a draft' if old['draft'] else 'published'}")
        for key in ("name", "prerelease", "body_sha256"):  # `immutable` follows publishing and the setting: not a change of its own
            if release.get(key) != old.get(key) and not own_release_fields(release):
                changes.append(f"{_describe(old)}: its {key} is now {release.get(key)!r}; the reviewed plan saw {old.get(key)!r}")
        then = {a["name"]: a for a in old["assets"]}
        strays = own_strays(release["assets"], target.assets, started, ops)
        for asset in release["assets"]:
            seen = then.pop(asset["name"], None)
            if seen != asset and not own_asset(asset, strays):
                was = "did not see it" if seen is None else f"saw {seen['size']} bytes, {seen['digest']}, {seen['state']}"
                changes.append(f"{_describe(release)} now holds the asset {asset['name']} ({asset['size']} bytes, {asset['digest']}, {asset['state']}); the reviewed plan {was}")
        for name, asset in sorted(then.items()):
            deleted_own = (name in planned and ops[f"upload-asset:{name}"] in started and (asset["state"] != "uploaded" or not asset["size"])) or name in _renamed_by_plan(events)
            if not deleted_own:
                changes.append(f"{_describe(release)} no longer holds the asset {name} that the reviewed plan saw")
    for release in before.values():
        changes.append(f"the {_describe(release)} that the reviewed plan saw is gone")
    return changes


def _renamed_by_plan(events: list[dict[str, Any]]) -> set[str]:
    """Stray names this plan's journal shows it started renaming or deleting (its own uploads under another name)."""
    return {e["detail"].get("stray") for e in events if e.get("event") == "op-start" and (e.get("detail") or {}).get("action") in ("rename-stray", "delete-stray")}


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


# -- evidence: provenance statements and their DSSE bundles -------------------------------

def statement_bundle(register, statement_sha256: str) -> Artifact | None:
    """The `signature-bundle` entry `sign` recorded for a statement's exact bytes (its `release` names the signing workflow's tag)."""
    for entry in register.query("signature-bundle"):
        if entry.attrs.get("signed_sha256") == statement_sha256 and isinstance(entry.attrs.get("release"), str):
            return entry
    return None


def _release_workflow_signer(release: str):
    """The product release workflow's identity at `release`, verified with the trust config in force (the test seam's under it)."""
    from dataclasses import replace

    from pipeline.formats.release.names import PRODUCT_REPOSITORY
    signer = release_signer(repository_of(PRODUCT_REPOSITORY), release)
    return replace(signer, trust_config=effective_trust_config(signer.trust_config))


def check_evidence(statement: Path, bundle: Path | None, release: str, *, what: str, fix: str) -> str:
    """A statement ships only with a DSSE bundle that verifies, offline, against the release workflow that signed it."""
    if bundle is None:
        raise _refuse(f"{what} has no DSSE bundle in the register", file=statement, field="signature-bundle",
                      why="auditors check every published statement against its Sigstore bundle; a statement without one cannot be checked", fix=fix)
    signer = _release_workflow_signer(release)
    try:
        verified = verify_dsse_bundle(statement.read_bytes(), bundle, identity=signer.identity, issuer=signer.issuer, trust_config=signer.trust_config,
                                           repository=signer.repository, ref=signer.ref, name=statement.name)
    except PipelineError as exc:
        raise _refuse(f"the DSSE bundle of {what} does not verify: {exc.what}", file=bundle, fix=fix) from None
    return f"{statement.name} and its DSSE bundle (signed by {verified.identity}, log index {verified.log_index})"


def check_sums_signature(register, sums: Path, bundle: Artifact | None, *, fix: str) -> str:
    """The set's SHA256SUMS ships with the Sigstore bundle of the release workflow that signed it (its tree copy)."""
    if bundle is None:
        raise _refuse(f"the set's {sums.name} has no Sigstore bundle in the register", file=sums, field="signature-bundle",
                      why="the SHA256SUMS is what the product release signs for this set; the component release carries that signature", fix=fix)
    signer = _release_workflow_signer(bundle.attrs["release"])
    try:
        verified = verify_bundle(Sha256Digest(sha256_file(sums)), register.verified_path(bundle), identity=signer.identity, issuer=signer.issuer,
                                      trust_config=signer.trust_config, repository=signer.repository, ref=signer.ref)
    except PipelineError as exc:
        raise _refuse(f"the Sigstore bundle of the set's {sums.name} does not verify: {exc.what}", file=register.path_of(bundle), fix=fix) from None
    return f"{sums.name} signed by {verified.identity}"


# -- component -----------------------------------------------------------------------

def component_target(ctx: Context, lane: Lane, github_of: Callable[[str], GitHub | None]) -> tuple[Target, Remote]:
    from pipeline.formats.assets import asset_set, check_assets

    register = ctx.register
    # The closed set's entries; the set's provenance statement is recorded beside the set, not in it.
    entries = [e for e in register.outputs_of(f"package:{lane.id}") if e.kind != "provenance"]
    if not entries:
        raise InputError(f"the register holds no packaged asset set of {lane.id}", file=register.file, fix=f"run 'python -m pipeline package --lane {lane.id}' first, with the same --dist")
    tags = sorted({e.attrs.get("component_tag") for e in entries})
    if len(tags) != 1:
        raise InputError("the register's asset set names more than one component tag", file=register.file, found=tags)
    tag = tags[0]
    beta = lane.beta_from_tag(tag)
    expected = asset_set(lane, beta)
    identity_entry = register.one("build-identity", lane=lane.id, needed_by="publish", produced_by="build")
    identity = parse_strict(register.verified_path(identity_entry).read_bytes(), file=register.path_of(identity_entry))
    commit = identity.get("patch_stack_sha")
    if not isinstance(commit, str) or len(commit) != 40:
        raise InputError("the build identity names no full source commit", file=register.path_of(identity_entry), field="patch_stack_sha", found=commit)
    assets_dir = ctx.dist / lane.id / "assets"
    files = {name: assets_dir / name for name in expected.names()}
    # Beside the set (not in it): its provenance statement with its DSSE bundle, and its SHA256SUMS's bundle (fmt.evidence_names).
    statements = [e for e in register.outputs_of(f"package:{lane.id}") if e.kind == "provenance"]
    statement = register.verified_path(statements[0]) if len(statements) == 1 else None
    bundle = statement_bundle(register, statements[0].sha256) if statement is not None else None
    sums = files.get(OUTER_SUMS)
    sums_bundle = statement_bundle(register, sha256_file(sums)) if sums is not None and sums.is_file() else None
    if statement is not None:
        _, statement_bundle_name, sums_bundle_name = fmt.evidence_names(statement.name)
        files[statement.name] = statement
        if bundle is not None:
            files[statement_bundle_name] = register.path_of(bundle)
        if sums_bundle is not None:
            files[sums_bundle_name] = register.path_of(sums_bundle)
    assets = [_asset(name, path, "dist", path.relative_to(ctx.dist).as_posix()) for name, path in sorted(files.items()) if path.is_file()]
    repository = repository_of(lane.component_repository)
    sums = files.get("SHA256SUMS")
    body = (
        f"Component {tag} of the OMP NInfer lane {lane.id} ({lane.title}).\n\n"
        f"Source commit: {commit}\n"
        f"Closed asset set: {len(expected.names())} files"
        + (f"; SHA256SUMS {sha256_file(sums)}" if sums is not None and sums.is_file() else "")
        + f"\nCut: beta.{beta} of {lane.version} (runtime/cuts/{lane.id}.json), published by the OMP NInfer release pipeline.\n"
    )
    target = Target("component", lane.id, repository, tag, commit, tag, body, True, False, assets, files, lane,
                    ci_required=lane.required_checks, ci_declared_in=str(lane.file))
    remote = Remote(github_of(repository), target)

    def gate_evidence() -> str:
        from pipeline.formats.release.names import RELEASE_RE

        fix = f"sign the release in the release workflow (python -m pipeline sign --dist {ctx.dist}) before publishing the component"
        signed_by = sorted({str(b.attrs.get("release")) for b in (bundle, sums_bundle) if b is not None})
        if len(signed_by) > 1 or not all(RELEASE_RE.fullmatch(r) for r in signed_by):
            raise _refuse("the set's DSSE bundle and SHA256SUMS bundle do not name one product release that signed them", file=register.file, field="signature-bundle.release",
                          found=signed_by, expected="one release name vX.Y.Z[-beta.N], the same for both", fix=fix)
        if statement is None:
            raise _refuse(f"the register holds {len(statements)} provenance statements of {lane.id}'s set", file=register.file, field="provenance", found=len(statements), expected=1,
                          fix=f"package the lane again (python -m pipeline package --lane {lane.id})")
        path = register.verified_path(bundle) if bundle is not None else None  # the bytes sign recorded, or an IntegrityError naming the change
        done = check_evidence(statement, path, bundle.attrs["release"] if bundle is not None else "", what=f"the provenance statement of {tag}", fix=fix)
        return f"{done}; {check_sums_signature(register, files[OUTER_SUMS], sums_bundle, fix=fix)}"

    def gate_assets() -> str:
        missing = sorted(n for n in expected.names() if not files[n].is_file())
        if missing:
            raise _refuse(f"the asset set lacks {missing[0]}", file=assets_dir, found=sorted(p.name for p in assets_dir.iterdir()) if assets_dir.is_dir() else [], expected=expected.names())
        try:
            report = check_assets(assets_dir, lane=lane, beta=beta, deep=True)
        except PipelineError as exc:
            raise _refuse(f"check-assets refuses the set: {exc.what}", file=exc.file, field=exc.field, fix=exc.fix or f"package the lane again (python -m pipeline package --lane {lane.id})") from None
        return f"check-assets: {report.component_tag} is a complete, intact set of {len(report.files)} files"

    def gate_register() -> str:
        by_name = {Path(e.path).name: e for e in entries}
        if sorted(by_name) != expected.names():
            raise _refuse("the register's package entries are not the asset set", file=register.file, found=sorted(by_name), expected=expected.names())
        for name, entry in sorted(by_name.items()):
            actual = sha256_file(files[name]) if name in files and files[name].is_file() else None
            if entry.sha256 != actual:
                raise _refuse(f"the register records other bytes for {name}", file=files[name], field=f"{entry.name}.sha256", found=actual, expected=entry.sha256, fix=f"package the lane again (python -m pipeline package --lane {lane.id})")
        return f"the register's {len(by_name)} entries equal the set"

    def gate_cut() -> str:
        ledger = lane.ledger()
        cut = ledger.current(lane.version)
        if identity_entry.attrs.get("cut", {}).get("rehearsal"):
            raise _refuse(f"the build is a rehearsal under {tag}'s names, not the cut", file=register.path_of(identity_entry), field="cut.rehearsal", found=True, expected=False,
                          why="the embedded sample or a --rehearsal build carries the cut's names without being its source", fix=f"build the cut's commit: python -m pipeline build --lane {lane.id} --source URL_OR_PATH@<the cut's commit>")
        if cut is None or cut.tag != tag:
            raise _refuse(f"{tag} is not the lane's current cut", file=lane.ledger_file(), found=tag, expected=cut.tag if cut else "a cut (python -m pipeline cut)")
        if cut.source_commit != commit:
            raise _refuse("the cut's commit is not the build identity's patch_stack_sha", file=lane.ledger_file(), field=f"{tag}.source_commit", found=cut.source_commit, expected=commit, fix="build and package the cut's commit")
        return f"{tag} ({cut.state}) binds {commit}, the build identity's patch_stack_sha"

    def gate_limits() -> str:
        big = [a for a in assets if a["size"] > fmt.MAX_ASSET_BYTES]
        if big:
            raise _refuse(f"{big[0]['name']} is too large for a GitHub release asset", found=big[0]["size"], expected=f"< 2 GiB ({fmt.MAX_ASSET_BYTES + 1} bytes)")
        if len(assets) > fmt.MAX_ASSETS:
            raise _refuse("too many assets for one GitHub release", found=len(assets), expected=f"at most {fmt.MAX_ASSETS}")
        return f"{len(assets)} assets, largest {max((a['size'] for a in assets), default=0)} bytes"

    target.gates = [
        ("check-assets", gate_assets),
        ("register-equals-set", gate_register),
        ("evidence", gate_evidence),
        ("cut-commit", gate_cut),
        ("asset-limits", gate_limits),
        *remote_gates(remote),
    ]
    return target, remote


# -- product ------------------------------------------------------------------------

def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*GIT, "-C", str(root), *args], capture_output=True, check=False)
    if check and result.returncode != 0:
        raise InputError(f"git {' '.join(args[:2])} failed: {result.stderr.decode('utf-8', 'replace').strip()[:300]}", file=root)
    return result


def product_target(
    ctx: Context,
    root: Path,
    release: str,
    *,
    commit: str | None,
    test_receipt: Path,
    bundles: Path | None,
    lanes_dir: Path | None,
    github_of: Callable[[str], GitHub | None],
) -> tuple[Target, Remote]:
    from pipeline.formats.ci_checks import REQUIRED_CHECKS_FILE, read_required_checks
    from pipeline.formats.release.names import RELEASE_RE
    from pipeline.formats.test_receipt import read_test_receipt, require_green_for
    if not RELEASE_RE.fullmatch(release or ""):
        raise UsageError("--release is not a product release name", field="--release", found=release, expected="vX.Y.Z or vX.Y.Z-beta.N")
    rev = commit or "HEAD"
    resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    commit = resolved.stdout.decode().strip()
    if resolved.returncode != 0 or len(commit) != 40:
        raise UsageError("--commit names no commit of the product repository", field="--commit", found=rev, file=root)
    tree_id = _git(root, "rev-parse", f"{commit}^{{tree}}").stdout.decode().strip()
    base = f"manifests/{release}"

    def show(path: str) -> bytes | None:
        result = _git(root, "show", f"{commit}:{path}", check=False)
        return result.stdout if result.returncode == 0 else None

    manifest_bytes = show(f"{base}/manifest.json")
    if manifest_bytes is None:
        raise InputError(f"the commit holds no {base}/manifest.json", file=root, field="--commit", found=commit, fix="publish the commit that holds the ready release tree")
    manifest = parse_strict(manifest_bytes, file=f"{commit}:{base}/manifest.json")
    notes = (show(f"{base}/NOTES.md") or b"").decode("utf-8", "replace")
    title = next((line[2:].strip() for line in notes.splitlines() if line.startswith("# ")), release)
    signing = section(manifest, "signing")
    signed = [p for p in signing.get("signed_files") or [] if isinstance(p, str)]
    product = section(manifest, "product")
    repository = repository_of(str(product.get("repository", "")))
    channel = manifest.get("channel")
    prerelease = channel != "public" or "-beta." in release
    files_dir = ctx.dist / "publish" / f"product-{release}" / "files"
    if files_dir.exists():
        shutil.rmtree(files_dir)
    files_dir.mkdir(parents=True)
    files: dict[str, Path] = {}
    (ctx.dist / "publish").mkdir(parents=True, exist_ok=True)

    def bundle_of(rel: str) -> Path:
        # Bundles are made by the release workflow after the commit: they come from the working tree.
        return root / (rel + BUNDLE_SUFFIX) if bundles is None else bundles / (Path(rel).name + BUNDLE_SUFFIX)

    for rel in signed:
        name = Path(rel).name
        data = show(rel)
        if data is None or not rel.startswith(base + "/"):
            raise InputError("a signed file is not in the release tree of the commit", file=root, field="signing.signed_files", found=rel)
        if name in files:
            raise InputError("two signed files would publish under one asset name", field="signing.signed_files", found=name)
        atomic_write_bytes(files_dir / name, data)
        files[name] = files_dir / name
        bundle = bundle_of(rel)
        if bundle.is_file():
            shutil.copyfile(bundle, files_dir / bundle.name)
            files[bundle.name] = files_dir / bundle.name
    images = _image_statements(ctx, manifest, show, files_dir, files, bundles, release)
    verifier = {kind: ctx.register.query(kind) for kind in VERIFIER_KINDS}
    for entries in verifier.values():
        for entry in entries:
            files[Path(entry.path).name] = ctx.register.path_of(entry)
    assets = [_asset(n, p, "dist", p.relative_to(ctx.dist).as_posix()) for n, p in sorted(files.items())]
    target = Target("product", release, repository, release, commit, title, notes, prerelease, not prerelease, assets, files)
    target.ci_declared_in = f"{commit[:12]}:{REQUIRED_CHECKS_FILE}"
    try:  # the checks the product repository requires, as the tagged commit itself declares them
        target.ci_required = read_required_checks(show(REQUIRED_CHECKS_FILE), source=target.ci_declared_in)
    except PipelineError as exc:
        target.ci_problem = exc
    target.test_selection = planned_test_selection(test_receipt)
    remote = Remote(github_of(repository), target)

    def gate_verify() -> str:
        from pipeline.formats.release.contract import verify_release

        work = Path(tempfile.mkdtemp(prefix=f"verify-{commit[:12]}-", dir=ctx.dist / "publish"))
        worktree = work / "tree"
        try:
            _git(root, "worktree", "add", "--detach", "--quiet", str(worktree), commit)
            status = _git(worktree, "status", "--porcelain", "--untracked-files=all").stdout.strip()
            if status:
                raise _refuse("the detached worktree of the commit is not clean", file=worktree, found=status[:200].decode("utf-8", "replace"))
            report = verify_release(worktree, release, require="ready", check_pins=True, lanes_dir=lanes_dir)
        finally:
            _git(root, "worktree", "remove", "--force", str(worktree), check=False)
            shutil.rmtree(work, ignore_errors=True)
        if not report.valid:
            first = report.problems.items[0]
            raise _refuse(
                f"verify --release {release} --require-ready --check-pins fails on a clean checkout of {commit[:12]} ({len(report.problems.items)} errors; first: {first.message()})",
                file=f"{base}/manifest.json",
                fix=f"run 'python -m pipeline verify --release {release} --require-ready --check-pins' on that commit and fix what it lists",
            )
        return f"verify --require-ready --check-pins passes on a clean detached worktree of {commit[:12]}"

    def gate_tests() -> str:
        receipt = read_test_receipt(test_receipt)
        api = remote.github.api if remote.github is not None else api_url()
        if receipt.selection.to_json() != target.test_selection:  # the plan binds the selection it was made with
            raise _refuse("the test-run receipt's selection changed since the plan was made", file=test_receipt, field="selection",
                          found=receipt.selection.to_json(), expected=target.test_selection, fix="run the publish command without --apply again and review the new plan")
        stand_in = subset_allowance(receipt.selection, api=api, root=root, commit=commit, file=test_receipt)
        require_green_for(receipt, commit=commit, tree=tree_id, file=test_receipt, subset_allowed=stand_in)
        scope = "" if receipt.selection.is_full else f" of {receipt.selection.describe()}, allowed because {stand_in}"
        return f"test run{scope} on {commit[:12]}: {receipt.passed} passed, {receipt.skipped} skipped, 0 failed"

    def gate_signatures() -> str:
        if not signed:
            raise _refuse("the manifest names no signed files", file=f"{base}/manifest.json", field="signing.signed_files")
        signer = signer_from_manifest(manifest, file=f"{base}/manifest.json")
        for rel in signed:
            name = Path(rel).name
            bundle = files.get(name + BUNDLE_SUFFIX)
            if bundle is None:
                raise _refuse(f"{rel} has no Sigstore bundle", file=bundle_of(rel), fix="sign the release in the release workflow (python -m pipeline sign) and pass its bundles with --bundles")
            try:
                verify_bundle(files[name].read_bytes(), bundle, identity=signer.identity, issuer=signer.issuer, trust_config=effective_trust_config(signer.trust_config), repository=signer.repository, ref=signer.ref)
            except PipelineError as exc:
                raise _refuse(f"the Sigstore bundle of {rel} does not verify: {exc.what}", file=bundle, fix=exc.fix) from None
        return f"{len(signed)} signed files verify against {signer.identity}"

    target.gates = [
        ("verify-ready", gate_verify),
        ("acceptance", _acceptance_gate(manifest, show, base, release)),
        ("reviews", _review_gate(manifest, show, release)),
        ("test-run", gate_tests),
        ("signatures", gate_signatures),
        ("evidence", _image_evidence_gate(images, release)),
        ("verifier", _verifier_gate(ctx, verifier, root, commit)),
        *remote_gates(remote),
    ]
    return target, remote


def _acceptance_gate(manifest: dict[str, Any], show: Callable[[str], bytes | None], base: str, release: str) -> Callable[[], str]:
    """Gate `acceptance` of a product publication: a passing external-installation record is bound in the tree, and
    the commit holds it with its recorded hash."""

    def gate() -> str:
        qualification = section(manifest, "qualification")
        acceptance = qualification.get("acceptance") if isinstance(qualification.get("acceptance"), dict) else None
        if acceptance is None or acceptance.get("status") != "passed" or qualification.get("external_installation_passed") is not True:
            raise _refuse(
                "no passing external-installation acceptance record is bound in the release tree",
                file=f"{base}/manifest.json",
                field="qualification.acceptance",
                found=acceptance.get("status") if acceptance else None,
                expected="a bound record with status passed (compose accept)",
                fix=f"run the acceptance stage on the candidate and bind its record: python -m pipeline compose accept --release {release} --record FILE",
            )
        data = show(str(acceptance.get("path")))
        if data is None or sha256_bytes(data) != acceptance.get("sha256"):
            raise _refuse("the bound acceptance record is not in the commit with its recorded hash", file=str(acceptance.get("path")), field="qualification.acceptance.sha256", found=sha256_bytes(data) if data else None, expected=acceptance.get("sha256"))
        return f"acceptance passed on candidate {str(acceptance.get('candidate_commit'))[:12]}"

    return gate


def planned_test_selection(test_receipt: Path) -> dict[str, Any] | None:
    """The test selection the product plan binds (the whole suite, or a declared subset by name and SHA-256), read
    from the test-run receipt; None when the receipt cannot be read: gate test-run then refuses and says why."""
    from pipeline.formats.test_receipt import read_test_receipt

    try:
        return read_test_receipt(test_receipt).selection.to_json()
    except PipelineError:
        return None


def subset_allowance(selection: Selection, *, api: str, root: Path, commit: str, file: Path) -> str | None:
    """Why a declared subset's test-run receipt may pass gate test-run, or None for the whole suite's.

    A subset receipt is what the release workflow's rehearsal writes; it may carry a publish only in a stand-in
    world, never to a real release.  A loopback GitHub API alone proves nothing (an Enterprise Server through a tunnel, a local proxy to
    github.com with the real token), so the proof is two facts a real workflow run cannot produce together: the
    Sigstore trust this publish verifies bundles with is the test stand-in, which infra/sigstore.py accepts only in
    the process tree that made it (`_require_owner_lineage`), AND the GitHub API is on this machine.  The subset must
    also be declared at the published commit, with the SHA-256 the receipt names (formats/test_subset.py)."""
    from pipeline.formats.test_subset import require_declared_at, subset_path

    if selection.is_full:
        return None
    loopback = is_loopback_url(api)
    try:
        standin, refused = test_standin(), None
    except PipelineError as exc:  # named but refused (not this process tree's, or not a stand-in): not the stand-in world
        standin, refused = None, exc.what
    if standin is None or not loopback:
        trust = (f"the test stand-in {standin.directory}" if standin is not None
                 else f"{TEST_STANDIN_ENV} refused ({refused})" if refused else f"the release signer's pinned configuration ({TEST_STANDIN_ENV} unset)")
        raise RefusedError(
            f"the test-run receipt is of {selection.describe()}, not of the whole suite, and this publish is not in the rehearsal's stand-in world",
            file=file, field="selection",
            found=f"Sigstore trust: {trust}; GitHub API: {api} ({'loopback' if loopback else 'not loopback'})",
            expected="the whole suite; a declared subset only with the Sigstore test stand-in of this process tree in force and a GitHub API on loopback",
            why="a loopback GitHub API alone is no proof of the rehearsal (an Enterprise Server through a tunnel, a proxy to github.com); "
                "a release is published only after the whole suite passed on its commit",
            fix="unset PIPELINE_TEST_SUBSET and run the whole suite (.nox/nox/bin/nox -s tests) on a clean checkout of the commit being tagged, then publish again",
        )
    where = f"at the published commit {commit[:12]}"
    try:
        require_declared_at(selection.name, selection.sha256, git_show(root, commit, subset_path(selection.name).as_posix()), where=where)
    except InputError as exc:
        raise RefusedError(f"the test-run receipt's subset {selection.name!r} {exc.what}", file=file, field=exc.field, found=exc.found,
                           expected=exc.expected, why=exc.why, fix=exc.fix) from None
    return (f"the Sigstore trust in force is the test stand-in of this process tree ({standin.directory}) and the GitHub API {api} "
            f"is on this machine: the rehearsal's stand-in world; the subset is declared {where}")


def _review_gate(manifest: dict[str, Any], show: Callable[[str], bytes | None], release: str) -> Callable[[], str]:
    """Gate `reviews` of a product publication: the review ledger at the commit is the one the manifest binds, and it
    clears the release (formats/review_ledger.py: every review closed, no in-scope P0/P1 confirmed or unresolved,
    every deferred finding tracked, every reviewed digest one the release binds, every bound artefact covered by a closed
    review; the councils release.toml requires hold the release through compose's blockers, which verify --require-ready checks)."""
    def gate() -> str:
        from pipeline.formats.review_ledger import bound_ledger, ledger_path

        rel = ledger_path(release)
        ledger, failures = bound_ledger(manifest, show(rel), release=release, origin=rel)
        if failures:
            first = failures[0]
            raise _refuse(
                f"the review ledger holds the release: {first.what}" + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""),
                file=rel,
                field=f"reviews.{first.council}" + (f".findings.{first.finding}" if first.finding else "") if first.council else "reviews",
                found=[failure.what for failure in failures],
                fix=first.fix + f", then python -m pipeline compose rebind --release {release}, promote and publish the new ready commit",
            )
        if ledger is None:
            return "made before the review ledger (no reviews bound)"
        deferred = ledger.deferred()
        return f"{len(ledger.reviews)} reviews closed ({', '.join(r.council for r in ledger.reviews)}); no in-scope P0/P1 open; {len(deferred)} deferred, each tracked"

    return gate


def _image_evidence_gate(images: list[tuple[Path, Path | None]], release: str) -> Callable[[], str]:
    """Gate `evidence` of a product publication: each image statement's DSSE bundle verifies against this release's workflow."""
    def gate() -> str:
        fix = f"sign the release in the release workflow (python -m pipeline sign --release {release}) and pass its bundles with --bundles"
        done = [check_evidence(statement, bundle, release, what=f"the image statement {statement.name}", fix=fix) for statement, bundle in images]
        return "; ".join(done) if done else "the release ships no image statement"

    return gate


def _verifier_gate(ctx: Context, verifier: dict[str, list[Artifact]], root: Path, commit: str) -> Callable[[], str]:
    """Gate `verifier`: exactly one verifier wheel, sdist, auditor's lock and SHA256SUMS in the register, built from the tagged commit, intact."""
    def gate() -> str:
        for kind, entries in verifier.items():
            if len(entries) != 1 or entries[0].attrs.get("commit") != commit:
                raise _refuse(f"the register holds no single {kind} built from {commit[:12]}", file=ctx.register.file, field=kind,
                              found=[e.attrs.get("commit") for e in entries], expected=commit,
                              why="auditors install the verifier this release ships; it must be the pipeline of the tagged commit",
                              fix=f"python -m pipeline verifier-dist --dist {ctx.dist} --source {root}@{commit}")
            ctx.register.verified_path(entries[0])
        wheel = verifier["verifier-wheel"][0]
        return f"verifier {Path(wheel.path).name} of {commit[:12]} (sha256 {wheel.sha256[:12]}), its sdist, the auditor's requirements lock and SHA256SUMS"

    return gate


def _image_statements(ctx: Context, manifest: dict[str, Any], show: Callable[[str], bytes | None], files_dir: Path, files: dict[str, Path],
                      bundles: Path | None, release: str) -> list[tuple[Path, Path | None]]:
    """The image provenance statements the tree binds (container rows' `image_provenance`), copied from the commit
    into the publication's files under their asset names, each with its DSSE bundle (the register's, else --bundles)."""
    from pipeline.formats.release.names import image_provenance_asset

    rows = lane_rows(manifest)
    found = []
    for row in rows:
        record = row.get("image_provenance") if isinstance(row, dict) else None
        if not isinstance(record, dict) or not isinstance(row.get("id"), str):
            continue
        data = show(str(record.get("path")))
        if data is None or sha256_bytes(data) != record.get("sha256"):
            raise InputError("the image statement the tree binds is not in the commit with its recorded hash", field=f"components.{row['id']}.image_provenance", found=record.get("path"))
        name = image_provenance_asset(row["id"])
        atomic_write_bytes(files_dir / name, data)
        files[name] = files_dir / name
        entry = statement_bundle(ctx.register, sha256_bytes(data))
        bundle = ctx.register.verified_path(entry) if entry is not None else (bundles / (name + BUNDLE_SUFFIX) if bundles is not None else None)
        if bundle is not None and bundle.is_file():
            shutil.copyfile(bundle, files_dir / (name + BUNDLE_SUFFIX))
            files[name + BUNDLE_SUFFIX] = files_dir / (name + BUNDLE_SUFFIX)
        found.append((files[name], files.get(name + BUNDLE_SUFFIX)))
    return found


# -- plan, diff, apply -------------------------------------------------------------------

def plan_of(target: Target, observed: dict[str, Any]) -> dict[str, Any]:
    return fmt.make_plan(
        kind=target.kind,
        subject=target.subject,
        repository=target.repository,
        tag=target.tag,
        commit=target.commit,
        name=target.name,
        body=target.body,
        prerelease=target.prerelease,
        make_latest=target.make_latest,
        assets=target.assets,
        gates=[name for name, _check in target.gates],
        observed=observed,
        test_selection=target.test_selection,
    )


def diff_lines(plan: dict[str, Any]) -> list[str]:
    """What each planned write would do against the GitHub state the plan observed."""
    observed = plan["observed"]
    if not observed["read"]:
        return [f"  (GitHub's state not read: {observed['why']})"]
    lines = []
    current = observed["tag"]
    tag_state = "absent: create, after every asset is uploaded" if current is None else ("exists at the commit: skip" if current == plan["commit"] else f"points at {current}: REFUSED")
    drafts = [r for r in observed["releases"] if r["draft"]]
    published = [r for r in observed["releases"] if not r["draft"]]
    release = (published or drafts or [None])[0]
    if published:
        lines.append(f"  release: published (id {published[0]['id']}): nothing to write, re-check only")
    elif len(drafts) > 1:
        lines.append(f"  release: {len(drafts)} drafts: REFUSED")
    else:
        lines.append(f"  draft: {'reuse id ' + str(drafts[0]['id']) + ' ' + repr(drafts[0]['name']) if drafts else 'none: create'}")
    remote = {a["name"]: a for a in (release["assets"] if release else [])}
    for asset in plan["assets"]:
        have = remote.get(asset["name"])
        if have is None:
            state = "absent: upload"
        elif _uploaded(have, asset):
            state = "uploaded, same size and digest: skip"
        elif have["state"] in ("starter", "open") or not have["size"]:
            state = f"{have['state']} (not uploaded): delete and upload"
        else:
            state = f"uploaded with other bytes ({have['digest']}): REFUSED"
        lines.append(f"  asset {asset['name']} ({asset['size']} bytes, sha256 {asset['sha256'][:16]}…): {state}")
    for name in sorted(set(remote) - {a["name"] for a in plan["assets"]}):
        lines.append(f"  asset {name}: not in the plan: REFUSED")
    ci = observed.get("ci")
    if ci is not None:
        runs = ", ".join(f"{r['name']} #{r['id']} {r['conclusion'] or r['status']}" for r in ci["check_runs"]) or "no check run"
        lines.append(f"  CI at {plan['commit'][:12]} (required: {', '.join(ci['required'])}): {runs}" + "".join(f", status {x['context']} {x['state']}" for x in ci["statuses"]))
    lines.append(f"  tag {plan['tag']} -> {plan['commit']}: {tag_state}")
    lines.append(f"  publish (make_latest {plan['release']['make_latest']}): {'done already' if published else 'after the tag'}")
    return lines


class Publisher:
    """Apply one plan against GitHub, reconciling from GitHub's state at every step."""

    def __init__(self, github: GitHub, plan: dict[str, Any], plan_sha: str, files: dict[str, Path], journal: fmt.Journal, work: Path) -> None:
        self.gh = github
        self.plan = plan
        self.plan_sha = plan_sha
        self.files = files
        self.journal = journal
        self.work = work
        self.ops = {op["op"] + (f":{op['name']}" if op["op"] == "upload-asset" else ""): i for i, op in enumerate(plan["operations"])}
        self.wrote: list[str] = []  # what this run changed on GitHub, for a refusal after a write
        self.published_here = False
        self.tagged = False
        self.strays: dict[str, str] = {}  # {name GitHub gave: planned name} of this plan's own uploads (own_strays)
        self.public: dict[str, Any] | None = None  # the release, once it is known to be public (published here or found so)

    # Each step lists GitHub's state first; after an ambiguous failure the loop lists again.
    def tag(self) -> None:
        """The one write never undone: only after the draft holds every planned asset, right before publishing."""
        tag, commit, op = self.plan["tag"], self.plan["commit"], self.ops["create-tag"]
        for _ in range(ATTEMPTS):
            current = self.gh.tag_commit(tag)
            if current == commit:
                self.journal.event("op-skip", op=op, tag=tag, reason="the tag already names the commit")
                self.tagged = True
                return
            if current is not None:
                raise RefusedError(f"the tag {tag} points at {current}, not {commit}", field=tag, why="a tag is never moved", fix="cut a new beta.N or release a new version")
            self.journal.event("op-start", op=op, tag=tag, commit=commit)
            try:
                reply = self.gh.create_tag(tag, commit)
            except Ambiguous as exc:
                self.journal.event("op-ambiguous", op=op, request_id=exc.request_id, status=exc.status)
                continue
            except GitHubError as exc:
                if exc.status == 422:  # "Reference already exists": someone (or a lost answer) made it
                    self.journal.event("op-retry", op=op, request_id=exc.request_id, status=422)
                    continue
                raise
            self.journal.event("op-done", op=op, request_id=reply.request_id)
            self.wrote.append(f"the tag {tag} on {commit}")
            self.tagged = True
            ui.info(f"created tag {tag} on {commit}")
            return
        raise RemoteError(f"could not create the tag {tag} after {ATTEMPTS} attempts", fix="run the same command again")

    def draft(self) -> dict[str, Any]:
        tag = self.plan["tag"]
        for _ in range(ATTEMPTS):
            rels = [r for r in self.gh.releases() if r.get("tag_name") == tag]
            published = [r for r in rels if not r.get("draft")]
            drafts = [r for r in rels if r.get("draft")]
            if published:
                self._published_as_planned(published[0])
                self.journal.event("op-skip", op=0, release_id=published[0]["id"], reason="already published")
                self.public = published[0]
                return published[0]
            if len(drafts) > 1:
                raise RefusedError(f"GitHub holds {len(drafts)} drafts for {tag}", field=tag, found=sorted(r["id"] for r in drafts), fix="delete the stray draft by hand, then run again")
            if drafts:
                self._adoptable(drafts[0])
                self.journal.event("op-skip", op=0, release_id=drafts[0]["id"], reason=ADOPTED)
                return drafts[0]
            nonce = secrets.token_hex(16)  # journalled before the call: the marker only this plan can have written
            self.journal.event("op-start", op=0, tag=tag, marker=nonce)
            payload = {"tag_name": tag, "target_commitish": self.plan["commit"], "name": self.plan["release"]["name"],
                       "body": draft_body(self.plan["release"]["body"], nonce), "draft": True, "prerelease": self.plan["release"]["prerelease"]}
            try:
                reply = self.gh.create_release(payload)
            except Ambiguous as exc:
                self.journal.event("op-ambiguous", op=0, request_id=exc.request_id, status=exc.status)
                continue  # list again: the draft may have landed
            self.journal.event("op-done", op=0, request_id=reply.request_id, release_id=reply.body["id"])
            self.wrote.append(f"the draft {reply.body['id']}")
            ui.info(f"created draft release {reply.body['id']} for {tag}")
            return reply.body
        raise RemoteError(f"could not create the draft of {tag} after {ATTEMPTS} attempts", fix="run the same command again")

    def _adoptable(self, draft: dict[str, Any]) -> None:
        """A listed draft is this plan's only when its id is journalled, its body carries a marker this plan's journal
        holds, or the reviewed plan saw it (a person reviewed reusing it): never a stranger's draft that merely has
        the planned name, e.g. after a kill before create-draft was answered."""
        events = fmt.read_journal(self.journal.path)
        observed = self.plan["observed"]
        reviewed = {r["id"] for r in observed["releases"]} if observed.get("read") else set()
        if draft["id"] in own_release_ids(events, self.ops) | reviewed or body_sha256(draft.get("body")) in own_draft_digests(events, self.plan["release"]["body"]):
            return
        raise RefusedError(
            f"GitHub holds draft {draft['id']} {draft.get('name')!r} for {self.plan['tag']}, which this plan did not create and the reviewed plan did not see",
            field=self.plan["tag"],
            found=draft["id"],
            why="a draft is this plan's own only when its id is journalled or it carries the marker this plan's create-draft wrote; "
                "a draft with the planned name alone may be anyone's, and publishing it would ship what they put in it",
            fix="look at the draft on GitHub; delete it by hand if it is not yours, then run the dry run again and review it",
        )

    def _published_as_planned(self, release: dict[str, Any]) -> None:
        shaped = {"id": release["id"], "name": release.get("name"), "prerelease": release.get("prerelease") is True, "body_sha256": body_sha256(release.get("body"))}
        differences = planned_release_differences(shaped, self.plan["release"], self.gh.latest_release_id())
        if differences:
            raise RefusedError(f"{self.plan['tag']} is already published, but not as planned: {'; '.join(differences)}", field=self.plan["tag"], found=differences,
                               why="a release with the planned bytes under other notes or flags is not this plan's publication",
                               fix="look at the release on GitHub; this plan never changes a published release")

    def _listing(self, release: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The release's assets by name; an unplanned name refuses unless it is this plan's own upload stored under
        another name (`own_strays`, kept in `self.strays` for `uploads` to rename)."""
        remote: dict[str, dict[str, Any]] = {}
        for asset in self.gh.assets(release["id"]):
            remote[asset.get("name")] = asset
        self.strays = own_strays(list(remote.values()), self.plan["assets"], started_ops(fmt.read_journal(self.journal.path)), self.ops)
        extra = sorted(set(remote) - {a["name"] for a in self.plan["assets"]} - set(self.strays))
        if extra:
            raise RefusedError(
                f"the release holds an asset the plan does not name: {extra[0]}",
                field=extra[0],
                found=sorted(remote),
                expected=[a["name"] for a in self.plan["assets"]],
                why="the pipeline never deletes or replaces an asset it did not plan",
                fix="look at the draft on GitHub; remove the stray asset by hand if it is not meant to be there",
            )
        return remote

    def _reclaim(self, remote: dict[str, dict[str, Any]]) -> None:
        """This plan's own uploads that GitHub stored under another name (the answer lost): rename each to its planned
        name; where GitHub does not keep that name, delete it so the upload runs again (and is checked as any upload)."""
        by_name = {a["name"]: a for a in self.plan["assets"]}
        for stray, name in sorted(self.strays.items()):
            asset, index = remote.pop(stray), self.ops[f"upload-asset:{name}"]
            self.journal.event("op-start", op=index, name=name, action="rename-stray", stray=stray, asset_id=asset["id"])
            try:
                reply = self.gh.rename_asset(asset["id"], name)
                body = reply.body if isinstance(reply.body, dict) else {}
            except (Ambiguous, GitHubError) as exc:
                self.journal.event("op-ambiguous", op=index, name=name, action="rename-stray", status=getattr(exc, "status", None))
                body = {}
            if body.get("name") == name and _uploaded(body, by_name[name]):
                self.journal.event("op-done", op=index, name=name, action="rename-stray", asset_id=asset["id"], request_id=reply.request_id)
                self.wrote.append(f"renamed this plan's upload {stray} to {name}")
                remote[name] = body
                continue
            self.journal.event("op-start", op=index, name=name, action="delete-stray", stray=stray, asset_id=asset["id"])
            reply = self.gh.delete_asset(asset["id"])
            self.journal.event("op-done", op=index, name=name, action="delete-stray", asset_id=asset["id"], request_id=reply.request_id)
            self.wrote.append(f"deleted this plan's upload {stray} (GitHub did not keep the name {name})")
        self.strays = {}

    def uploads(self, release: dict[str, Any]) -> None:
        remote = self._listing(release)
        if self.strays and release.get("draft"):
            self._reclaim(remote)
        for planned in self.plan["assets"]:
            name = planned["name"]
            index = self.ops[f"upload-asset:{name}"]
            for _ in range(ATTEMPTS):
                have = remote.get(name)
                if _uploaded(have, planned):
                    self.journal.event("op-skip", op=index, name=name, asset_id=have["id"], reason="uploaded with the planned size and digest")
                    break
                if not release.get("draft"):
                    raise IntegrityError(f"the published release lacks {name} or holds other bytes", field=name, found=have, why="a published release is never changed")
                if have is not None:
                    if have.get("state") in ("starter", "open") or not have.get("size"):
                        self.journal.event("op-start", op=index, name=name, action="delete-not-uploaded", asset_id=have["id"], state=have.get("state"))
                        reply = self.gh.delete_asset(have["id"])
                        self.journal.event("op-done", op=index, name=name, action="delete-not-uploaded", request_id=reply.request_id)
                        self.wrote.append(f"deleted the unfinished upload {name} ({have.get('state')})")
                    else:
                        raise RefusedError(
                            f"the draft holds {name} with other bytes than the plan",
                            field=name,
                            found=have.get("digest"),
                            expected=f"sha256:{planned['sha256']}",
                            why="an uploaded asset is never replaced without a person deciding: it may be someone else's",
                            fix="compare it with the local file; delete it by hand on GitHub if it is wrong, then run again",
                        )
                self.journal.event("op-start", op=index, name=name, size=planned["size"], sha256=planned["sha256"])
                try:
                    reply = self.gh.upload_asset(release, name, self.files[name], size=planned["size"], content_type=planned["content_type"])
                except Ambiguous as exc:
                    self.journal.event("op-ambiguous", op=index, name=name, request_id=exc.request_id, status=exc.status)
                    remote = self._listing(release)  # it may have landed: list before retrying
                    continue
                except GitHubError as exc:
                    if exc.status == 422 and "already_exists" in exc.error_codes():
                        self.journal.event("op-retry", op=index, name=name, request_id=exc.request_id, status=422)
                        remote = self._listing(release)
                        continue
                    raise
                self._check_stored(index, planned, reply)
                self.journal.event("op-done", op=index, name=name, request_id=reply.request_id, asset_id=reply.body["id"])
                self.wrote.append(f"uploaded {name}")
                remote[name] = reply.body
                ui.info(f"uploaded {name} ({planned['size']} bytes)")
                break
            else:
                raise RemoteError(f"could not upload {name} after {ATTEMPTS} attempts", fix="run the same command again; it resumes from GitHub's state")

    def _check_stored(self, index: int, planned: dict[str, Any], reply) -> None:
        """GitHub's answer to an upload names what it stored: the planned name, size and digest, or the pipeline
        deletes what it just wrote (it knows the id) and refuses."""
        body = reply.body if isinstance(reply.body, dict) else {}
        name, stored = planned["name"], body.get("name")
        if stored == name and _uploaded(body, planned):
            return
        asset_id = body.get("id")
        what = (f"GitHub stored the upload of {name} under another name: {stored}" if stored != name
                else f"GitHub recorded {name} with another size or digest than was sent")
        cleaned = "the answer named no asset id, so nothing could be deleted: look at the draft on GitHub"
        if isinstance(asset_id, int) and not isinstance(asset_id, bool):
            self.journal.event("op-start", op=index, name=name, action="delete-mis-stored", asset_id=asset_id, stored=str(stored)[:255])
            try:
                self.gh.delete_asset(asset_id)
                cleaned = f"the pipeline deleted what it just uploaded (asset {asset_id}); the draft is as before"
                self.journal.event("op-done", op=index, name=name, action="delete-mis-stored", asset_id=asset_id)
            except PipelineError as exc:
                cleaned = f"deleting what it just uploaded (asset {asset_id}) failed ({exc.what[:200]}): delete it on GitHub"
        raise RefusedError(
            f"{what}; {cleaned}",
            field=name,
            found={"name": stored, "size": body.get("size"), "digest": body.get("digest")},
            expected={"name": name, "size": planned["size"], "digest": f"sha256:{planned['sha256']}"},
            why="a release asset must be the planned file under its planned name: the manifest and SHA256SUMS name it so",
            fix="give the file a name GitHub keeps as it is (letters, digits, '.', '-', '_', '+'), package again, and run the dry run again"
            if stored != name else "run the same command again; if GitHub keeps recording other bytes, compare the local file with the plan",
        )

    def complete(self, release: dict[str, Any]) -> list[dict[str, Any]]:
        remote = self._listing(release)
        public = f"the release {release['id']} is already public: GitHub now holds other bytes than the plan"
        if self.strays:
            stray = sorted(self.strays)[0]
            raise IntegrityError(f"the release holds {stray}, this plan's own upload of {self.strays[stray]} under another name", field=stray,
                                 why="nothing is published while it holds an asset the plan does not name" if release.get("draft") else public,
                                 fix="run the same command again: it renames or deletes it")
        why = "nothing is published before every planned asset is in place" if release.get("draft") else public
        for planned in self.plan["assets"]:
            if not _uploaded(remote.get(planned["name"]), planned):
                raise IntegrityError(f"{planned['name']} is not uploaded with its planned digest", field=planned["name"], found=remote.get(planned["name"]), expected=f"uploaded, sha256:{planned['sha256']}", why=why)
        self.journal.event("check", name="complete", assets=len(remote))
        return list(remote.values())

    def publish(self, release: dict[str, Any]) -> dict[str, Any]:
        op = len(self.plan["operations"]) - 1
        meta = self.plan["release"]
        for _ in range(ATTEMPTS):
            # GitHub has no conditional publish: the write spacing is slept now, before the check, so only the check's
            # own round trips lie between what it saw and the PATCH (docs/cuts-and-publication.md, "the last window").
            self.gh.wait_for_write_slot()
            current = self.gh.release(release["id"])
            if current is None:
                raise RemoteError(f"the draft {release['id']} disappeared", fix="run again; a new draft is made")
            if not current.get("draft"):
                self.journal.event("op-skip", op=op, release_id=current["id"], reason="already published")
                self.public = current
                self.check_public(current)
                return current
            self.complete(current)
            self.journal.event("op-start", op=op, release_id=current["id"])
            payload = {"draft": False, "name": meta["name"], "body": meta["body"], "prerelease": meta["prerelease"], "make_latest": meta["make_latest"]}
            try:
                reply = self.gh.update_release(current["id"], payload)
            except Ambiguous as exc:
                self.journal.event("op-ambiguous", op=op, request_id=exc.request_id, status=exc.status)
                continue  # re-read: it may be published already
            self.journal.event("op-done", op=op, request_id=reply.request_id)
            self.wrote.append(f"published the release {current['id']}")
            self.published_here = True
            self.public = reply.body
            self.check_public(reply.body)  # re-listed at once: what went public is looked at, not assumed
            ui.info(f"published {self.plan['tag']} (release {current['id']}, make_latest {meta['make_latest']})")
            return reply.body
        raise RemoteError(f"could not publish {self.plan['tag']} after {ATTEMPTS} attempts", fix="run the same command again")

    def check_public(self, release: dict[str, Any]) -> None:
        """Right after publishing: the public release holds exactly the planned bytes.  When it holds anything else
        (an asset replaced or added between the last check and the PATCH), make it a draft again where GitHub allows
        (not immutable), then stop, saying exactly what is (or was) public and what to do."""
        listed = {a.get("name"): a for a in self.gh.assets(release["id"])}
        planned = {a["name"]: a for a in self.plan["assets"]}
        wrong = [a for name, a in sorted(listed.items()) if name not in planned or not _uploaded(a, planned[name])]
        missing = sorted(name for name in planned if name not in listed)
        if not wrong and not missing:
            self.journal.event("check", name="public-equals-plan", release_id=release["id"], assets=len(listed))
            return
        public = [f"{a.get('name')} ({a.get('size')} bytes, {a.get('digest')})" + ("" if a.get("name") in planned else ", not in the plan") for a in wrong]
        public += [f"{name} missing" for name in missing]
        reverted, why_not = self._unpublish(release)
        self.journal.event("check", name="public-equals-plan", release_id=release["id"], failed=public, reverted=reverted)
        tag, rid = self.plan["tag"], release["id"]
        if reverted:
            self.public = None
            state = f"it was public for a moment and is a draft again (release {rid}, not immutable)"
            fix = (f"look at the draft {rid} on GitHub: whoever changed {', '.join(str(a.get('name')) for a in wrong) or ', '.join(missing)} "
                   "has push access; delete what the plan does not name, then run the dry run again and review it (the tag stays on the planned commit)")
        else:
            state = f"it STAYS PUBLIC (release {rid}): {why_not}"
            fix = (f"tell users not to use {tag} (edit its notes on GitHub to say so), find out who has push access and changed it, "
                   + ("cut a new beta.N" if self.plan["kind"] == "component" else "and release a new version") + "; a published immutable release is never changed")
        raise IntegrityError(
            f"{tag} was published with assets the plan did not name: {'; '.join(public)}; {state}",
            field="assets",
            found=public,
            expected=[f"{a['name']} ({a['size']} bytes, sha256:{a['sha256']})" for a in self.plan["assets"]],
            why="someone changed the draft's assets between the last listing and the publish call; GitHub has no conditional publish",
            fix=fix,
        )

    def _unpublish(self, release: dict[str, Any]) -> tuple[bool, str]:
        """Make a just-published release a draft again; (done, why not).  An immutable release cannot be."""
        if release.get("immutable") is True:
            return False, "it is immutable, and GitHub never makes an immutable release a draft again"
        try:
            reply = self.gh.update_release(release["id"], {"draft": True})
        except PipelineError as exc:
            return False, f"making it a draft again failed ({exc.what[:200]})"
        if not (isinstance(reply.body, dict) and reply.body.get("draft") is True):
            return False, "GitHub did not make it a draft again"
        self.wrote.append(f"made the release {release['id']} a draft again")
        return True, ""

    def immutability(self, final: dict[str, Any]) -> tuple[bool | None, str | None]:
        """The repository's immutable-releases setting (None: the token may not read it) and, where the release's own
        `immutable` field needs one, the reason recorded in the receipt."""
        tag, immutable = self.plan["tag"], final.get("immutable") is True
        enabled = self.gh.immutable_releases()
        reason = None
        if enabled is None:  # an Actions github.token: the release's own field is what GitHub says about this release
            reason = (f"the repository's immutable-releases setting is unknown ({self.gh.immutable_unknown}); "
                      f"the published release's own immutable field is {str(immutable).lower()}")
        elif enabled and not immutable:
            if self.published_here and self.plan["observed"].get("immutable_releases") is True:
                raise IntegrityError(f"{tag} is published but not immutable, although the repository enables immutable releases", field="immutable", found=final.get("immutable"), expected=True,
                                     why="the reviewed plan saw immutable releases enabled, so GitHub should have made this release immutable when it was published")
            reason = "published before the repository enabled immutable releases; GitHub applies immutability only to releases published after it is enabled"
            ui.warn(f"{tag} is not immutable: {reason}")
        self.journal.event("check", name="immutable-if-enabled", enabled=enabled, immutable=final.get("immutable"), reason=reason)
        return enabled, reason

    def after(self, release_id: int) -> tuple[dict[str, Any], list[dict[str, Any]], bool, str | None]:
        tag = self.plan["tag"]
        final = self.gh.release_by_tag(tag)
        if final is None or final.get("id") != release_id or final.get("draft"):
            raise IntegrityError(f"reading {tag} back by tag does not give the published release {release_id}", found=final.get("id") if final else None, expected=release_id)
        if self.gh.tag_commit(tag) != self.plan["commit"]:
            raise IntegrityError(f"the tag {tag} does not name the planned commit after publishing", expected=self.plan["commit"])
        assets = self.complete(final)
        self.journal.event("check", name="re-read-by-tag", release_id=release_id)
        enabled, reason = self.immutability(final)
        # Audit: every published URL, downloaded again and re-hashed.
        folder = self.work / "published"
        if folder.exists():
            shutil.rmtree(folder)
        by_name = {a["name"]: a for a in assets}
        for planned in self.plan["assets"]:
            url = by_name[planned["name"]].get("browser_download_url")
            digest, size = self.gh.download_sha256(url, folder / planned["name"], max_bytes=planned["size"])
            if (digest, size) != (planned["sha256"], planned["size"]):
                raise IntegrityError(f"the published {planned['name']} is not the planned bytes", file=url, found=digest, expected=planned["sha256"])
        self.journal.event("check", name="audit-published-assets", assets=len(self.plan["assets"]))
        ui.info(f"audit: {len(self.plan['assets'])} published assets downloaded again, sizes and SHA-256 equal the plan")
        return final, assets, enabled, reason


# -- the stage ---------------------------------------------------------------------------

class PublishStage(Stage):
    name = "publish"

    def __init__(self, ctx: Context, target: Target, remote: Remote, *, apply: bool, plan_sha256: str | None) -> None:
        super().__init__(ctx)
        self.target = target
        self.remote = remote
        self.apply = apply
        self.expected_sha = plan_sha256
        self.plan: dict[str, Any] = {}
        self.plan_sha = ""

    @property
    def key(self) -> str:
        return f"{'publish' if self.apply else 'publish-plan'}:{self.target.slug}"

    def describe(self) -> str:
        return f"{self.target.kind} {self.target.tag} -> {self.target.repository}"

    @property
    def folder(self) -> Path:
        return self.ctx.dist / "publish" / self.target.slug

    def preflight(self) -> None:
        if not self.apply:
            self.plan = plan_of(self.target, self.remote.observe())
            self.plan_sha = fmt.plan_sha256(self.plan)
            return
        reviewed = self._reviewed_plan()
        if reviewed is None:  # no reviewed plan in this dist: the hash must then come out of GitHub's state as it is now
            self.plan = plan_of(self.target, self.remote.observe())
        else:
            self.plan = plan_of(self.target, reviewed["observed"])
            self.remote.reviewed = reviewed["observed"]
        self.plan_sha = fmt.plan_sha256(self.plan)
        if not self.expected_sha:
            raise UsageError("--apply needs the reviewed plan's hash", field="--plan-sha256", fix=f"run without --apply, review the plan, then pass --plan-sha256 {self.plan_sha}")
        if self.expected_sha != self.plan_sha:
            raise RefusedError(
                "the plan is not the one that was reviewed",
                field="--plan-sha256",
                found=self.plan_sha,
                expected=self.expected_sha,
                why="an input changed since the dry run (an asset, the commit, the cut or the release tree)" if reviewed is not None
                else f"no reviewed plan with that hash is in {self.folder / 'plan.json'}, and GitHub's state now gives another plan",
                fix="run without --apply again, review the new plan, and apply its hash",
            )
        self.remote.events = fmt.read_journal(self.folder / "journal" / f"{self.plan_sha}.jsonl")

    def _reviewed_plan(self) -> dict[str, Any] | None:
        """The dry run's plan in this dist, when it is the one whose hash the maintainer passed."""
        path = self.folder / "plan.json"
        if not self.expected_sha or not path.is_file():
            return None
        data = path.read_bytes()
        if sha256_bytes(data) != self.expected_sha:  # hash before parse: only the reviewed bytes are read
            return None
        return fmt.check_plan(parse_strict(data, file=path, max_bytes=8 * 1024 * 1024), file=path)

    def inputs(self) -> dict[str, Any]:
        return {"plan": self.plan_sha, "apply": self.apply}

    def run(self) -> list[Artifact]:
        plan_path = self.folder / "plan.json"
        atomic_write_bytes(plan_path, fmt.plan_bytes(self.plan))
        if not self.apply:
            return self._dry_run(plan_path)
        run_gates(self.target.gates)  # every gate before the first write
        github = self.remote.github
        assert github is not None
        journal = fmt.Journal(self.folder / "journal", self.plan_sha)
        journal.event("run-start", plan_sha256=self.plan_sha, resumed=journal.seq > 0)
        publisher = Publisher(github, self.plan, self.plan_sha, self.target.files, journal, self.folder)
        # Whether this plan published the release is the journal's record, not this process's memory (a re-run after a kill).
        publisher.published_here = publisher.ops["publish"] in started_ops(self.remote.events)
        try:
            release = publisher.draft()
            publisher.uploads(release)
            publisher.complete(release)
            publisher.tag()
            release = publisher.publish(release)
            final, assets, enabled, reason = publisher.after(release["id"])
        except PipelineError as exc:
            journal.event("run-failed", error=exc.label, what=exc.what[:300], wrote=publisher.wrote)
            _say_what_was_written(exc, publisher.wrote, tagged=publisher.tagged or self.remote.observe().get("tag") == self.target.commit, public=publisher.public)
            raise
        receipt = fmt.make_receipt(self.plan, self.plan_sha, final, assets, immutable_enabled=enabled, immutable_reason=reason)
        receipt_path = self.folder / "receipt.json"
        receipt_bytes = canonical_bytes(receipt)
        atomic_write_bytes(receipt_path, receipt_bytes)
        journal.event("run-done", release_id=final["id"], receipt_sha256=sha256_bytes(receipt_bytes))
        fine, line = attestations.record_after_publishing(github, repository=self.target.repository, tag=self.target.tag, commit=self.target.commit,
                                                          assets={a["name"]: a["sha256"] for a in self.plan["assets"]}, immutable=final.get("immutable"), folder=self.folder)
        (ui.info if fine else ui.warn)(line)
        if self.target.lane is not None:
            self._mark_published(final["id"], sha256_bytes(receipt_bytes))
        ui.info(f"published {self.target.tag}: {final.get('html_url')} ({len(assets)} assets); receipt {receipt_path}")
        lane_id = self.target.lane.id if self.target.lane else None
        return [self.ctx.register.make("release-publication", receipt_path, stage="publish", lane=lane_id, name=f"publish/{self.target.slug}/receipt.json",
                                       plan_sha256=self.plan_sha, tag=self.target.tag, repository=self.target.repository, release_id=final["id"], publication_kind=self.target.kind)]

    def _dry_run(self, plan_path: Path) -> list[Artifact]:
        """Print the plan and its diff against the GitHub state it observed, then check every gate:
        a problem is a FAIL and exit 7, and only a plan that passes them all gets an `apply with:` line."""
        sys.stdout.write(fmt.plan_bytes(self.plan).decode("utf-8"))
        sys.stdout.flush()
        lines = [f"plan {plan_path}: sha256 {self.plan_sha}", "writes, in order:"]
        for index, op in enumerate(self.plan["operations"]):
            detail = ", ".join(f"{k}={v}" for k, v in op.items() if k != "op")
            lines.append(f"  {index}. {op['op']}: {detail}")
        lines.append("against GitHub as the plan observed it:")
        lines += diff_lines(self.plan)
        for line in lines:
            sys.stderr.write(line + "\n")
        run_gates(self.target.gates)
        sys.stderr.write(f"apply with: --apply --plan-sha256 {self.plan_sha}\n")
        return [self.ctx.register.make("publication-plan", plan_path, stage="publish", lane=self.target.lane.id if self.target.lane else None,
                                       name=f"publish/{self.target.slug}/plan.json", plan_sha256=self.plan_sha, tag=self.target.tag, repository=self.target.repository)]

    def _mark_published(self, release_id: int, receipt_sha: str) -> None:
        lane = self.target.lane
        assert lane is not None
        ledger = lane.ledger()
        n = lane.beta_from_tag(self.target.tag)
        cut = ledger.entry(lane.version, n)
        publication = Publication(self.target.repository, release_id, self.plan_sha, receipt_sha)
        if cut is None:
            raise InputError(f"the ledger has no cut {self.target.tag}", file=lane.ledger_file())
        if cut.state == "cut":
            write_ledger(lane.cuts_dir or lane.ledger_file().parent, ledger.with_state(lane.version, n, state="published", publication=publication), tag_for=lane.render_tag)
            ui.info(f"{lane.ledger_file()}: {self.target.tag} is published (commit the ledger)")
        elif cut.publication != publication:
            ui.warn(f"{self.target.tag} is {cut.state} in the ledger with another publication record; the ledger is left as it is")


def _say_what_was_written(exc: PipelineError, wrote: list[str], *, tagged: bool, public: dict[str, Any] | None = None) -> None:
    """A refusal after a write names what this run wrote and how the next run reconciles it; once the release is
    public it says so first (never "nothing" after a publish)."""
    if public is not None:
        exc.what += f"; the release {public.get('id')} of {public.get('tag_name')} IS PUBLIC"
    if not wrote:
        exc.what += "; this run wrote nothing to GitHub"
    else:
        exc.what += (f"; this run wrote: {', '.join(wrote)}; the tag {'exists' if tagged else 'was not created'}; the next run with the same "
                     "--plan-sha256 finds these by listing and goes on from them (the draft reused, uploaded assets skipped by digest)")
    exc.args = (exc.render(),)


def make_github_factory(github: GitHub | None = None, **options: Any) -> Callable[[str], GitHub | None]:
    def factory(repository: str) -> GitHub | None:
        if github is not None:
            return github
        token = token_from_env()
        return GitHub(repository, token, **options) if token else None

    return factory


def publish_lane(lane_name: str, *, dist: Path | str = "dist", lanes_dir: Path | None = None, apply: bool = False, plan_sha256: str | None = None, github: GitHub | None = None):
    from pipeline.formats.lanes import find_lane
    from pipeline.stage import execute

    lane = find_lane(lane_name, lanes_dir)
    ctx = Context.open(dist, lanes_dir)
    target, remote = component_target(ctx, lane, make_github_factory(github))
    return execute(PublishStage(ctx, target, remote, apply=apply, plan_sha256=plan_sha256), force=True)


def publish_release(release: str, *, root: Path = REPO_ROOT, dist: Path | str = "dist", commit: str | None = None, test_receipt: Path | None = None, bundles: Path | None = None,
                    lanes_dir: Path | None = None, apply: bool = False, plan_sha256: str | None = None, github: GitHub | None = None):
    from pipeline.formats.test_receipt import default_path
    from pipeline.stage import execute

    ctx = Context.open(dist, lanes_dir)
    target, remote = product_target(ctx, Path(root), release, commit=commit, test_receipt=test_receipt or default_path(ctx.dist), bundles=bundles, lanes_dir=lanes_dir, github_of=make_github_factory(github))
    return execute(PublishStage(ctx, target, remote, apply=apply, plan_sha256=plan_sha256), force=True)


def run_publish(args: argparse.Namespace) -> int:
    """`publish`: the command line's front door to `publish_lane` (--component) / `publish_release` (--release)."""
    if args.component:
        publish_lane(args.component, dist=args.dist, lanes_dir=args.lanes_dir, apply=args.apply, plan_sha256=args.plan_sha256)
    else:
        publish_release(args.release, root=args.root, dist=args.dist, commit=args.commit, test_receipt=args.test_receipt, bundles=args.bundles, lanes_dir=args.lanes_dir, apply=args.apply, plan_sha256=args.plan_sha256)
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("publish", help="plan (default) or apply a GitHub publication: a lane's component prerelease or the product release",
                            description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--component", metavar="LANE", help="publish the lane's current cut as a prerelease of the runtime repository")
    which.add_argument("--release", metavar="vX.Y.Z", help="publish the product release of this repository")
    parser.add_argument("--apply", action="store_true", help="execute the plan (default: write and print it, check the gates)")
    parser.add_argument("--plan-sha256", metavar="HEX", help="the reviewed plan's SHA-256 (required with --apply)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="product repository checkout (--release; default: this checkout)")
    parser.add_argument("--commit", help="the exact commit to tag (--release; default: HEAD of --root)")
    parser.add_argument("--test-receipt", type=Path, help="test-run receipt of that commit (default: <dist>/test-run-receipt.json)")
    parser.add_argument("--bundles", type=Path, help="folder with the Sigstore bundles <file>.sigstore.json (default: beside the signed files)")
    add_common(parser)
    parser.set_defaults(func=run_publish)


STAGE = PublishStage


def release_plan(ctx, lanes, options) -> list:
    from pipeline.stage import Skip

    raise Skip("publication is planned and applied by hand: 'python -m pipeline publish --component LANE | --release vX.Y.Z', then --apply --plan-sha256 HEX")
