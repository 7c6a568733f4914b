"""The status model: what `status` finds (pipeline/tools/status.py) and what its text, JSON and HTML page show.

Plain data, with no reading of its own: `status.py` fills it from the register, the cut ledgers,
the lane files and the release tree, renders it as text and JSON, and `status_page.py` renders it
as the HTML page; both import it from here, so neither imports the other's module for the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The road's columns: the stage, the stage-key prefixes that count as it, and whether a record
# is a product (checked input by input: "up to date") or an act/observation ("done <digest>").
COLUMNS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("cut", ("cut",), False),
    ("build", ("build",), True),
    ("package", ("package",), True),
    ("image", ("image",), True),
    ("push", ("push",), False),
    ("qualify", ("qualify",), False),
    ("publish", ("publish", "publish-plan"), False),
)


@dataclass(frozen=True)
class Cell:
    state: str  # done | up to date | stale | missing | skipped | refused
    detail: str = ""
    digest: str | None = None
    reasons: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        if self.state == "done":
            return f"done {self.digest[:12]}" + (f" ({self.detail})" if self.detail else "") if self.digest else "done"
        return f"{self.state}: {self.detail}" if self.detail else self.state

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "detail": self.detail, "digest": self.digest, "reasons": list(self.reasons), "text": self.text}


@dataclass(frozen=True)
class LaneStatus:
    lane: str
    kind: str
    short_name: str
    cut_tag: str | None
    cut_state: str | None
    cells: dict[str, Cell]
    ci: str | None = None  # the CI at the cut's commit, as the newest record (receipt, plan, cut) saw it

    def to_json(self) -> dict[str, Any]:
        return {"lane": self.lane, "kind": self.kind, "short_name": self.short_name, "cut": {"tag": self.cut_tag, "state": self.cut_state},
                "stages": {name: cell.to_json() for name, cell in self.cells.items()}, "ci": self.ci}


@dataclass(frozen=True)
class Blocker:
    text: str
    fix: str


@dataclass(frozen=True)
class RouteStatus:
    route: str
    host: str
    lane: str | None
    receipts: tuple[str, ...]  # "<status> <short digest>" per receipt in the register


@dataclass
class ReleaseStatus:
    release: str
    state: str
    blockers: list[Blocker] = field(default_factory=list)
    routes: list[RouteStatus] = field(default_factory=list)
    acceptance: str = "none bound"
    reviews: str = "none bound"  # the review ledger: each council's state, or why there is none
    github: dict[str, Any] | None = None
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (stage key, message) of this release's stages

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "state": self.state,
            "blockers": [{"blocker": b.text, "fix": b.fix} for b in self.blockers],
            "acceptance": self.acceptance,
            "reviews": self.reviews,
            "routes": [{"route": r.route, "host": r.host, "lane": r.lane, "receipts": list(r.receipts)} for r in self.routes],
            "github": self.github,
            "refusals": [{"key": key, "message": message} for key, message in self.refusals],
        }


@dataclass
class Status:
    lanes: list[LaneStatus]
    release: ReleaseStatus | None = None
    github: dict[str, Any] | None = None  # read with a token only

    def to_json(self) -> dict[str, Any]:
        return {"artifact_type": "omp_ninfer_status", "schema_version": 1, "stages": [c[0] for c in COLUMNS],
                "lanes": [lane.to_json() for lane in self.lanes], "release": self.release.to_json() if self.release else None,
                "github": self.github}
