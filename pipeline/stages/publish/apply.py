"""`publish --apply`: one plan applied against GitHub, reconciling from GitHub's state at every step (tag, draft,
uploads, publish, the audit of what was published)."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

from pipeline.errors import IntegrityError, PipelineError, RefusedError, RemoteError
from pipeline.formats import publication_plan as fmt
from pipeline.infra.github import Ambiguous, GitHub, GitHubError, body_sha256
from pipeline.stages.publish.journal import (
    ADOPTED,
    draft_body,
    own_draft_digests,
    own_release_ids,
    own_strays,
    planned_release_differences,
    started_ops,
)
from pipeline.stages.publish.target import ATTEMPTS, uploaded_as_planned
from pipeline.util import ui


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
            if body.get("name") == name and uploaded_as_planned(body, by_name[name]):
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
                if uploaded_as_planned(have, planned):
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
        if stored == name and uploaded_as_planned(body, planned):
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
            if not uploaded_as_planned(remote.get(planned["name"]), planned):
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
        wrong = [a for name, a in sorted(listed.items()) if name not in planned or not uploaded_as_planned(a, planned[name])]
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
