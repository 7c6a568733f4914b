"""Job: each published row's component tag, read through GitHub's REST API, still names the row's source commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from pipeline.infra import net
from pipeline.stages.audit.model import BARE_NAME, GITHUB_API, REPO_PATH, Item
from pipeline.stages.audit.session import AuditSession
from pipeline.util.hashing import is_commit_hex
from pipeline.util.safepath import component_problem

MAX_TAG_DEPTH = 4  # annotated tags of annotated tags followed before the audit gives up


def audit_tag(auditor: AuditSession, where: str, row: dict[str, Any], cache: Path) -> None:
    """A published row's component tag (`release_tag` in `repository`) must still name the row's `source_commit`.

    Read anonymously through GitHub's REST API (`GET /repos/{owner}/{repo}/git/ref/tags/{tag}`, an
    annotated tag dereferenced through `/git/tags/{sha}`), bounded in size and time like every other
    download and fetched through the same --mirror mapping.  A tag never moves once its component
    release is published: one that names another commit, is absent (404), or cannot be read
    (a network error, an answer that is no ref) is FAIL; nothing here is SKIP but an unpublished row.
    """
    tag = row.get("release_tag")
    repository = row.get("repository")
    base, slug, problem = _tag_api(repository)
    label = f"tag {slug or repository} {tag}"
    details: dict[str, Any] = {"field": f"{where}.release_tag", "lane": row.get("id")}
    if row.get("published") is not True:
        auditor.add(Item(label, None, f"{where}.published is {json.dumps(row.get('published'))}: the manifest does not say the component release exists, so its tag is not read", "tag", details))
        return
    commit = row.get("source_commit")
    if not isinstance(tag, str) or not BARE_NAME.fullmatch(tag):
        problem = f"not bound: {where}.release_tag is null" if tag is None else f"{where}.release_tag is not a tag name (found {tag!r})"
    elif commit is None:
        problem = f"not bound: {where}.source_commit is null, so nothing says which commit the tag must name"
    elif not is_commit_hex(commit):
        problem = f"{where}.source_commit is not a 40-hex commit (found {commit!r})"
    if problem is not None:
        auditor.add(Item(label, False, problem, "tag", details))
        return
    assert base is not None and slug is not None and isinstance(commit, str)
    url = f"{base}/repos/{slug}/git/ref/tags/{quote(tag, safe='')}"
    details["url"] = url
    folder = cache / "api"
    answer, problem = auditor.api_json(url, folder, what=f"refs/tags/{tag}")
    if problem is not None:
        auditor.add(Item(label, False, f"absent: {slug} has no tag {tag} (HTTP 404 at {url}), but the manifest says its component release is published" if problem == "404" else problem, "tag", details))
        return
    if not isinstance(answer, dict) or answer.get("ref") != f"refs/tags/{tag}":
        found = f"a list of {len(answer)} refs" if isinstance(answer, list) else f"ref {answer.get('ref')!r}" if isinstance(answer, dict) else repr(answer)
        auditor.add(Item(label, False, f"GitHub's answer at {url} is not the ref refs/tags/{tag} (found {found})", "tag", details))
        return
    target, through, asked = answer.get("object"), [], url
    while True:
        kind = target.get("type") if isinstance(target, dict) else None
        sha = target.get("sha") if isinstance(target, dict) else None
        if kind not in ("commit", "tag") or not is_commit_hex(sha):
            shown = {key: target.get(key) for key in ("type", "sha")} if isinstance(target, dict) else target
            auditor.add(Item(label, False, f"GitHub's answer at {asked} names no commit or tag object (found object {json.dumps(shown)[:200]})", "tag", details))
            return
        if kind == "commit":
            break
        if len(through) >= MAX_TAG_DEPTH:
            auditor.add(Item(label, False, f"the tag is an annotated tag nested more than {MAX_TAG_DEPTH} deep; the audit does not follow it further", "tag", details))
            return
        through.append(sha)
        asked = f"{base}/repos/{slug}/git/tags/{sha}"
        answer, problem = auditor.api_json(asked, folder, what=f"tag object {sha}")
        if problem is not None:
            auditor.add(Item(label, False, f"the annotated tag object {sha} is absent (HTTP 404 at {asked})" if problem == "404" else problem, "tag", details))
            return
        target = answer.get("object") if isinstance(answer, dict) else None
    found = sha.lower()
    via = f" (through the annotated tag object{'s' if len(through) > 1 else ''} {', '.join(through)})" if through else ""
    details["commit"] = found
    if found != commit.lower():
        auditor.add(Item(label, False, f"names {found}{via}, the manifest binds {commit.lower()} ({where}.source_commit): a published component tag never moves", "tag", details))
        return
    auditor.add(Item(label, True, f"names {found}{via}", "tag", details))


def _tag_api(repository: Any) -> tuple[str | None, str | None, str | None]:
    """(REST API base, 'owner/name', None) of a row's repository, or (None, slug or None, why its tags cannot be read).

    `https://github.com/OWNER/NAME` is read at https://api.github.com; a repository on a loopback
    address (tests, a local copy) at its own origin, where the GitHub stand-ins serve the API.
    """
    if not isinstance(repository, str) or not repository:
        return None, None, f"the row's repository is not a URL (found {repository!r})"
    problem = net.scheme_problem(repository)
    if problem:
        return None, None, f"the repository {repository} {problem}"
    parts = urlsplit(repository)
    slug = parts.path.strip("/").removesuffix(".git")
    if parts.query or parts.fragment or not REPO_PATH.fullmatch(slug) or any(component_problem(p) for p in slug.split("/")):
        return None, None, f"the repository {repository} is not a GitHub repository URL https://github.com/OWNER/NAME"
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host == "github.com" and parts.port is None:
        return GITHUB_API, slug, None
    if net.is_loopback(parts.hostname):
        return f"{parts.scheme}://{parts.netloc}", slug, None
    return None, slug, f"the repository {repository} is not on GitHub: the audit reads component tags through GitHub's REST API only"
