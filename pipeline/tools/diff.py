"""`python -m pipeline diff A B [--json | --markdown]`: what changed between two releases.

A and B are release trees (`manifests/vX.Y.Z`), manifest URLs or asset-set folders
(`pipeline/tools/diff_sources.py` turns each into the same facts).  The differences are reported in
a fixed order: product and channel; per lane its component tag and cut, source commit, toolchain,
assets (added, removed, changed name, size or hash), the binaries inside the package, SBOM
components (added, removed, changed version or licence, by package URL), host dependencies and
provenance inputs and every other row field; then the model artefact, qualification results and
gates, compatibility, acceptance, the review ledger (its binding and each council's state, reviewed digests and
findings) and every other manifest field (none is left out).  Leaf differences come from the release tree's one JSON-difference rule
(`formats/release/rules.py: diff`).

Exit codes follow diff(1): 0 no differences, 1 differences, 2 bad input (a message naming it).
`--markdown` is the section a maintainer pastes into release notes ("Changes since A").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from pipeline.errors import ExitCode, PipelineError, printable
from pipeline.road import TOOLS

LANE_GROUPS = (
    ("component", "component tag and cut"),
    ("source", "source commit"),
    ("toolchain", "toolchain"),
    ("assets", "assets"),
    ("binaries", "binaries inside the package"),
    ("sbom", "SBOM components"),
    ("host_dependencies", "host dependencies"),
    ("provenance", "provenance inputs"),
    ("identities", "install identities"),
    ("other", "other row fields"),
)
TAIL_SECTIONS = (("model", "model artefact"), ("qualification", "qualification results and gates"), ("compatibility", "compatibility"), ("acceptance", "acceptance routes"),
                 ("reviews", "review ledger"), ("other", "other manifest fields"))
MISSING = "(missing)"
NO_FIELD = ("(no such field)", "(no such row)")


@dataclass(frozen=True)
class Change:
    section: str  # "product and channel", "lane <id>", "model artefact", ...
    group: str  # a lane's group title, else ""
    path: str  # the field inside the group ("" for the whole group)
    change: str  # added | removed | changed
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "group": self.group, "path": self.path, "change": self.change, "old": self.old, "new": self.new}


def _leaves(old: Any, new: Any, section: str, group: str) -> list[Change]:
    from pipeline.formats.release.rules import diff
    from pipeline.tools.diff_sources import Listed

    out: list[tuple[str, Any, Any]] = []
    diff(new, old, "", out)  # (path, found = B, expected = A)
    changes = []
    for path, found, expected in out:
        item = found if isinstance(found, Listed) else expected if isinstance(expected, Listed) else None
        if item is not None:  # one item of a list of strings: the path names the list, not the item
            path = path[: -len(item) - 1]
            changes.append(Change(section, group, path, "added" if item is found else "removed", None if item is found else str(item), str(item) if item is found else None))
            continue
        if isinstance(found, str) and found == MISSING:
            changes.append(Change(section, group, path, "removed", expected, None))
        elif isinstance(expected, str) and expected in NO_FIELD:
            changes.append(Change(section, group, path, "added", None, found))
        elif old is None or (found is not None and expected is None and path == ""):
            changes.append(Change(section, group, path, "added" if expected is None else "changed", expected, found))
        else:
            changes.append(Change(section, group, path, "changed", expected, found))
    return changes


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    """Every difference from A to B, in the report's order."""
    changes = _leaves(a.get("product") or {}, b.get("product") or {}, "product and channel", "")
    lanes_a, lanes_b = a.get("lanes") or {}, b.get("lanes") or {}
    for lane in sorted(set(lanes_a) | set(lanes_b)):
        section = f"lane {lane}"
        if lane not in lanes_b:
            changes.append(Change(section, "", "", "removed", lanes_a[lane].get("component"), None))
            continue
        if lane not in lanes_a:
            changes.append(Change(section, "", "", "added", None, lanes_b[lane].get("component")))
            continue
        for key, title in LANE_GROUPS:
            changes += _leaves(lanes_a[lane].get(key) or {}, lanes_b[lane].get(key) or {}, section, title)
    for key, title in TAIL_SECTIONS:
        old, new = a.get(key), b.get(key)
        if old != new:
            changes += _leaves(old if old is not None else {}, new if new is not None else {}, title, "")
    return changes


# -- rendering ------------------------------------------------------------------------------------

MAX_SHOWN = 300  # characters of one value in the text form (--json and --markdown keep every value whole)
def _value(value: Any) -> str:
    from pipeline.formats.release.rules import abbreviate

    if value is None:
        return "(none)"
    shown = abbreviate(value)
    text = shown if isinstance(shown, str) else json.dumps(shown, sort_keys=True)
    if len(text) > MAX_SHOWN:  # a terminal's line, said to be cut: --json and --markdown show every value whole
        text = text[: MAX_SHOWN - 3] + f"... ({len(text) - MAX_SHOWN + 3} more characters: --json or --markdown shows all)"
    return printable(text)  # the one rule: no control or invisible character from data reaches a terminal


def _where(change: Change) -> str:
    return " ".join(p for p in (change.group, change.path) if p) or "lane"


def _line(change: Change) -> str:
    if change.change == "added":
        return f"{_where(change)}: added {_value(change.new)}"
    if change.change == "removed":
        return f"{_where(change)}: removed (was {_value(change.old)})"
    return f"{_where(change)}: {_value(change.old)} -> {_value(change.new)}"


def _sections(changes: list[Change]) -> list[tuple[str, list[Change]]]:
    grouped: dict[str, list[Change]] = {}
    for change in changes:
        grouped.setdefault(change.section, []).append(change)
    return list(grouped.items())


def render_text(a: str, b: str, changes: list[Change]) -> str:
    if not changes:
        return f"no differences between {_value(a)} and {_value(b)}\n"
    lines = [f"{len(changes)} difference{'s' if len(changes) != 1 else ''} from {_value(a)} to {_value(b)}"]
    for section, items in _sections(changes):
        lines.append(_value(section))
        lines += [f"  {_line(item)}" for item in items]
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    """Data for release notes, which GitHub renders, as one code span holding all of it: no HTML, link (bare `www.`
    ones included), image, emphasis, @mention or #reference is made inside one.  The fence is one backtick longer
    than the longest run of backticks inside (a backtick in the data cannot close it), padded with a space where
    CommonMark strips one; controls, invisible characters and line separators are escaped (`printable`: a line break
    would end the span's block)."""
    text = printable(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    edge = text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ") and text.strip(" ") != "")
    pad = " " if edge else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_value(value: Any) -> str:
    """A value in full (no cut: release notes keep the whole of it), as a code span."""
    if value is None:
        return "(none)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return _code(text) if text else "(empty)"


def _md_section(section: str) -> str:
    """A section title: the report's own words as they are; a lane's id, which is data, as a code span."""
    return f"lane {_code(section.removeprefix('lane '))}" if section.startswith("lane ") else section


def _md_line(change: Change) -> str:
    path = _code(change.path) if change.path else ""  # a field path from data (a purl, a key)
    where = " ".join(p for p in (change.group, path) if p) or "lane"
    if change.change == "added":
        return f"{where}: added {_md_value(change.new)}"
    if change.change == "removed":
        return f"{where}: removed (was {_md_value(change.old)})"
    return f"{where}: {_md_value(change.old)} -> {_md_value(change.new)}"


def render_markdown(a_name: str, changes: list[Change]) -> str:
    lines = [f"## Changes since {_md_value(a_name)}", ""]
    if not changes:
        return "\n".join([*lines, "No differences.", ""])
    for section, items in _sections(changes):
        lines += [f"### {_md_section(section)}", ""]
        lines += [f"- {_md_line(item)}" for item in items]
        lines.append("")
    return "\n".join(lines)


def release_name(facts: dict[str, Any], fallback: str) -> str:
    """How a side is named in a report: its release, else its one lane's component tag, else as given."""
    release = (facts.get("product") or {}).get("release")
    if isinstance(release, str):
        return release
    lanes = facts.get("lanes") or {}
    tags = [lane.get("component", {}).get("release_tag") for lane in lanes.values()]
    return tags[0] if len(tags) == 1 and isinstance(tags[0], str) else fallback


# -- command --------------------------------------------------------------------------------------

def run_diff(args: argparse.Namespace) -> int:
    from pipeline.tools.diff_sources import load_source

    try:
        a, b = load_source(args.a, lanes_dir=args.lanes_dir), load_source(args.b, lanes_dir=args.lanes_dir)
    except PipelineError as error:  # diff(1): 2 is trouble, 1 is "they differ"
        sys.stderr.write(f"error[{error.label}]: {error.render()}\n")
        return int(ExitCode.USAGE)
    changes = compare(a, b)
    name_a, name_b = release_name(a, args.a), release_name(b, args.b)
    if args.json:
        document = {"a": name_a, "b": name_b, "identical": not changes, "differences": [c.to_json() for c in changes]}
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    elif args.markdown:
        sys.stdout.write(render_markdown(name_a, changes))
    else:
        sys.stdout.write(render_text(name_a, name_b, changes))
    return 1 if changes else 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("diff", help=TOOLS["diff"][1],
                            description="Compare two releases: release trees (manifests/vX.Y.Z), manifest URLs or asset-set folders. "
                                        "Exit 0 no differences, 1 differences, 2 bad input.")
    parser.add_argument("a", metavar="A", help="the earlier release: a tree folder, a manifest URL or an asset-set folder")
    parser.add_argument("b", metavar="B", help="the later release, of the same kind")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the differences as JSON on stdout")
    out.add_argument("--markdown", action="store_true", help="print the 'Changes since A' section for release notes")
    add_common(parser, dist=False)
    parser.set_defaults(func=run_diff)
