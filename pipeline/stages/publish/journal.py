"""What this plan's own journal says it wrote on GitHub: the draft marker, its own drafts, releases and stray
uploads, and every change of GitHub's state since the reviewed plan that is not this plan's own progress."""

from __future__ import annotations

from typing import Any

from pipeline.infra.github import body_sha256
from pipeline.stages.publish.target import Target, uploaded_as_planned


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
        candidates = [p["name"] for p in planned if ops[f"upload-asset:{p['name']}"] in started and uploaded_as_planned({**asset, "name": p["name"]}, p)
                      and not uploaded_as_planned(names.get(p["name"]), p)]
        if len(candidates) == 1:
            strays[asset["name"]] = candidates[0]
    if len(set(strays.values())) != len(strays):  # two strays for one planned name: not a lost answer
        return {}
    return strays


def plan_ops(target_assets: list[dict[str, Any]]) -> dict[str, int]:
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
    ops = plan_ops(target.assets)
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
        return wanted is not None and ops[f"upload-asset:{asset['name']}"] in started and (uploaded_as_planned(asset, wanted) or asset["state"] != "uploaded" or not asset["size"])

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
