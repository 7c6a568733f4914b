"""The plan of a publication (formats/publication_plan.py makes it) and its diff against what GitHub holds."""

from __future__ import annotations

from typing import Any

from pipeline.formats import publication_plan as fmt
from pipeline.stages.publish.target import Target, uploaded_as_planned


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
        elif uploaded_as_planned(have, asset):
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
