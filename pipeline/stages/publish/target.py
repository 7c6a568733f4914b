"""What one publication is (`Target`): what goes where, from which local bytes, and the small rules every job of
`publish` shares (an asset entry, an asset uploaded as planned, a refusal)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import PipelineError, RefusedError
from pipeline.formats.lanes import Lane
from pipeline.util.hashing import sha256_file

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


def asset_entry(name: str, path: Path, root: str, relative: str) -> dict[str, Any]:
    return {"name": name, "size": path.stat().st_size, "sha256": sha256_file(path), "source": {"root": root, "path": relative}}


def uploaded_as_planned(remote: dict[str, Any] | None, planned: dict[str, Any]) -> bool:
    return bool(remote) and remote.get("state") == "uploaded" and remote.get("size") == planned["size"] and remote.get("digest") == f"sha256:{planned['sha256']}"


def refuse(what: str, **kwargs: Any) -> RefusedError:
    return RefusedError(what, **kwargs)
