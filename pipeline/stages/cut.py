"""Stage `cut`: record a lane's next component cut (`beta.N`) in its cut ledger.

    python -m pipeline cut --lane <id> --source URL_OR_PATH@COMMIT [--checkout DIR]
    python -m pipeline cut --lane <id> --source URL_OR_PATH@COMMIT --supersede N --reason TEXT

N is 1 + the highest number ever used for the lane and component version,
taken from the lane's ledger (`runtime/cuts/<lane>.json`, cuts and external
numbers), from the tags of a runtime checkout (`--checkout`, or the source
itself when it is a local checkout) and, when `GITHUB_TOKEN` is set, from the
runtime repository's releases (drafts included) and tags on GitHub.  Numbers
seen outside the ledger are recorded in it as `external`, so no number is
ever handed out twice, even for a cut whose tag was deleted.  A cut binds
the full source commit, the lane file's SHA-256 and the digest of the lane's
toolchain lock entry; the ledger is append-only (pipeline/formats/cut_ledger.py).
With `GITHUB_TOKEN` set, the lane's required checks (`[source] required_checks`) must
have concluded `success` at exactly that commit on the runtime repository
(pipeline/formats/ci_checks.py); what GitHub reported is kept in the cut record
(`<dist>/<lane>/cut.json`, `ci`).  Without a token the CI is not read here, and
`publish --component` refuses the cut until it is green.

`--supersede N --reason TEXT` marks the published cut N superseded by the cut
this run records (reason and successor kept); its tag and assets stay as they
are.  A re-run whose current cut already binds the same commit, lane file and
lock records nothing.

Build and package take the lane's current cut (`pipeline/formats/cut_binding.py`): a source
commit other than the cut's is refused, except for the embedded sample runtime,
which this repository's ledger cannot bind (every commit of the repository is
a new sample commit).  Such a build is a *rehearsal* of the current cut: it
carries the cut's names so the sample packages exactly like a release, and
`publish` refuses it because the cut's commit is not the build's.
"""

from __future__ import annotations

import argparse
import re
import string
from pathlib import Path
from typing import Any

from pipeline.errors import RefusedError, UsageError
from pipeline.formats.cut_binding import lock_digest
from pipeline.formats.cut_ledger import Cut, External, Ledger, is_beta, write_ledger
from pipeline.formats.lanes import Lane
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.util import ui
from pipeline.util.jsonio import write_json


def loose_tag_regex(lane: Lane) -> re.Pattern[str]:
    """Like the lane's tag pattern, but N may have leading zeros (to count tags made by hand)."""
    out = []
    for literal, name, _spec, _conv in string.Formatter().parse(lane.tag_pattern):
        out.append(re.escape(literal))
        if name == "version":
            out.append(re.escape(lane.version))
        elif name == "n":
            out.append(r"(?P<n>[0-9]{1,6})")
    return re.compile("".join(out))


def numbers_in(lane: Lane, tags: list[str], *, where: str) -> dict[int, str]:
    """{N: tag} of the lane's version among `tags`; non-canonical spellings are counted and named."""
    found: dict[int, str] = {}
    pattern = loose_tag_regex(lane)
    for tag in tags:
        match = pattern.fullmatch(tag)
        if not match:
            continue
        n = int(match.group("n"))
        if not is_beta(n):  # checked first: a lane renders a tag only for a number of the beta range
            ui.warn(f"{where} holds {tag!r}: beta.{n} is not a valid cut and is ignored")
            continue
        if tag != lane.tag(n):
            ui.warn(f"{where} holds the non-canonical tag {tag!r} (made by hand?); its number {n} is never handed out")
        found.setdefault(n, tag)
    return found


def checkout_tags(path: Path) -> list[str]:
    from pipeline.lanework.source import GIT
    from pipeline.util.proc import run_text

    text = run_text([*GIT, "-C", str(path), "tag", "--list"], what=f"list the tags of {path}")
    return [line.strip() for line in text.splitlines() if line.strip()]


def github_numbers(lane: Lane, github) -> dict[int, tuple[str, str]]:
    """Numbers of the lane's version on GitHub -> (tag, how it was seen): every release (drafts included)
    as `github-release`, every tag without a release as `github-tag` (docs/cuts-and-publication.md)."""
    where = f"GitHub repository {github.repository}"
    releases = [r.get("tag_name") for r in github.releases() if isinstance(r, dict) and isinstance(r.get("tag_name"), str)]
    prefix = lane.tag_pattern.format(version=lane.version, n="\0").split("\0", 1)[0]  # the tag up to N
    seen = {n: (tag, f"github-release: {tag} on {github.repository}") for n, tag in numbers_in(lane, releases, where=where).items()}
    for n, tag in numbers_in(lane, github.tag_names(prefix), where=where).items():
        seen.setdefault(n, (tag, f"github-tag: {tag} on {github.repository}"))
    return seen


# -- the stage ------------------------------------------------------------------------

class CutStage(Stage):
    name = "cut"

    def __init__(self, ctx: Context, lane: Lane, *, source: str, checkout: Path | None = None, supersede: int | None = None, reason: str | None = None, github=None) -> None:
        super().__init__(ctx)
        self.lane = lane
        self.source_text = source
        self.checkout = checkout
        self.supersede = supersede
        self.reason = reason
        self.github = github
        self.commit = ""
        self.seen: dict[int, tuple[str, str]] = {}  # n -> (tag, where)
        self.ledger = Ledger(lane.id)
        self.existing: Cut | None = None
        self.ci: dict[str, Any] | None = None  # the CI at the commit, as GitHub reported it (formats/ci_checks.py), or None unread

    @property
    def key(self) -> str:
        return f"cut:{self.lane.id}"

    def describe(self) -> str:
        return f"{self.lane.id} ({self.lane.version})"

    @property
    def record_path(self) -> Path:
        return self.ctx.dist / self.lane.id / "cut.json"

    def preflight(self) -> None:
        from pipeline.lanework.source import parse_source, resolve_source

        lane = self.lane
        if not self.source_text:
            raise UsageError("cut needs the exact source", field="--source", expected="URL@<40-hex commit> or PATH@<40-hex commit>")
        spec = parse_source(self.source_text)
        if spec.commit is None:
            raise UsageError("cut needs a full commit", field="--source", found=self.source_text, expected="URL_OR_PATH@<40-hex commit>", why="a cut binds one exact commit")
        if (self.supersede is None) != (self.reason is None):
            raise UsageError("--supersede and --reason go together", field="--reason" if self.reason is None else "--supersede", fix="pass both: --supersede N --reason TEXT")
        if self.reason is not None and not self.reason.strip():
            raise UsageError("the reason must say why the cut is superseded", field="--reason", found=self.reason)
        source = resolve_source(spec, lane)
        self.commit = source.commit
        self.ledger = lane.ledger()
        if self.supersede is not None:
            old = self.ledger.entry(lane.version, self.supersede)
            if old is None:
                raise UsageError(f"there is no cut beta.{self.supersede} of {lane.version} to supersede", field="--supersede", file=lane.ledger_file())
            if old.state != "published":
                raise RefusedError(
                    f"{old.tag} is {old.state}, not published",
                    file=lane.ledger_file(),
                    field=f"{old.tag}.state",
                    found=old.state,
                    expected="published",
                    why="only a published cut is superseded; an unpublished one is simply left behind by the next cut",
                )
        checkouts = [self.checkout] if self.checkout else ([Path(spec.location)] if spec.kind == "local" else [])
        for path in checkouts:
            for n, tag in numbers_in(lane, checkout_tags(path), where=f"checkout {path}").items():
                self.seen.setdefault(n, (tag, f"checkout-tag: {tag} in a runtime checkout"))
        if self.github is not None:
            self.check_ci()
            for n, seen in github_numbers(lane, self.github).items():
                self.seen.setdefault(n, seen)
        else:
            ui.info("no GITHUB_TOKEN: numbers used on GitHub are not checked (the ledger and local tags are)")
            ui.warn(f"no GITHUB_TOKEN: the CI at {self.commit} is not checked here; publish --component refuses the cut unless "
                    f"{', '.join(lane.required_checks)} succeeded at exactly that commit")
        current = self.ledger.current(lane.version)
        if (
            self.supersede is None
            and current is not None
            and (current.source_commit, current.lane_file_sha256, current.toolchain_lock_sha256) == (self.commit, lane.file_sha256, lock_digest(lane))
        ):
            self.existing = current

    def check_ci(self) -> None:
        """The runtime repository's required checks (the lane's `[source] required_checks`) concluded `success` at
        exactly the commit being cut, or a refusal naming the check, its URL and its conclusion."""
        from pipeline.formats.ci_checks import read_ci_state, require_green

        state = read_ci_state(self.github, self.commit)
        ui.info(f"CI of {self.github.repository}: " + require_green(state, self.lane.required_checks, declared_in=str(self.lane.file)))
        self.ci = state.to_json(self.lane.required_checks)

    def inputs(self) -> dict[str, Any]:
        return {
            "lane": self.lane.id,
            "lane_file_sha256": self.lane.file_sha256,
            "ledger": self.ledger.digest,
            "commit": self.commit,
            "seen": sorted(self.seen),
            "supersede": self.supersede,
            "reason": self.reason,
        }

    def run(self) -> list[Artifact]:
        lane = self.lane
        if self.existing is not None:
            cut = self.existing
            ui.info(f"{cut.tag} already binds commit {self.commit}, this lane file and this toolchain lock ({cut.state}): nothing new to cut")
        else:
            used = self.ledger.used(lane.version)
            external = [  # the canonical tag; the spelling found is in `seen`
                External(lane.version, n, lane.tag(n), where)
                for n, (_found, where) in sorted(self.seen.items())
                if n not in used
            ]
            ledger = self.ledger.with_external(external)
            n = ledger.highest(lane.version) + 1
            highest = max(ledger.used(lane.version), default=0)
            gaps = sorted(set(range(1, highest + 1)) - ledger.used(lane.version))
            if gaps:  # numbers below a seen one that nobody recorded: keep them unused forever, say so
                ledger = ledger.with_external([External(lane.version, g, lane.tag(g), f"history: skipped by numbers seen elsewhere (up to beta.{highest})") for g in gaps])
            cut = Cut(lane.version, n, lane.tag(n), "cut", "cut", self.commit, lane.file_sha256, lock_digest(lane))
            ledger = ledger.with_cut(cut)
            if self.supersede is not None:
                ledger = ledger.with_state(lane.version, self.supersede, state="superseded", superseded_by=n, reason=self.reason.strip() if self.reason else None)
            path = write_ledger(lane.cuts_dir or lane.ledger_file().parent, ledger, tag_for=lane.render_tag)
            for item in external:
                ui.info(f"recorded beta.{item.n} as used outside the ledger ({item.seen})")
            if self.supersede is not None:
                ui.info(f"{lane.tag(self.supersede)} is superseded by {cut.tag}: {self.reason}")
            ui.info(f"cut {cut.tag} at {self.commit}; ledger {path} (commit it)")
        record = {"artifact_type": "omp_ninfer_cut_record", "schema_version": 1, "lane": lane.id, **cut.to_json(), "ci": self.ci}
        write_json(self.record_path, record)
        entry = self.ctx.register.make("cut", self.record_path, stage=self.name, lane=lane.id, name=f"{lane.id}/cut.json", component_tag=cut.tag, n=cut.n, commit=cut.source_commit,
                                       ci=self.ci)  # what GitHub reported for the required checks at the commit (status shows it), or None unread
        return [entry]


def cut_lane(lane_name: str, *, source: str, dist: Path | str = "dist", lanes_dir: Path | None = None, checkout: Path | None = None, supersede: int | None = None, reason: str | None = None, github=None, use_github: bool = True):
    from pipeline.formats.lanes import find_lane
    from pipeline.infra.github import GitHub, repository_of, token_from_env
    from pipeline.stage import execute

    lane = find_lane(lane_name, lanes_dir)
    if github is None and use_github:
        token = token_from_env()
        if token:
            github = GitHub(repository_of(lane.component_repository), token)
    stage = CutStage(Context.open(dist, lanes_dir), lane, source=source, checkout=checkout, supersede=supersede, reason=reason, github=github)
    return execute(stage, force=True)


def run_cut(args: argparse.Namespace) -> int:
    """`cut`: the command line's front door to `cut_lane`."""
    cut_lane(args.lane, source=args.source, dist=args.dist, lanes_dir=args.lanes_dir, checkout=args.checkout, supersede=args.supersede, reason=args.reason)
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser("cut", help="record a lane's next component cut (beta.N) in its cut ledger", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lane", required=True, help="lane id or short name")
    parser.add_argument("--source", required=True, help="URL@COMMIT or PATH@COMMIT: the exact runtime commit of the cut")
    parser.add_argument("--checkout", type=Path, help="a runtime checkout whose tags count too (default: the --source checkout when it is local)")
    parser.add_argument("--supersede", type=int, metavar="N", help="mark the published cut N superseded by this one")
    parser.add_argument("--reason", help="why cut N is superseded (recorded in the ledger)")
    add_common(parser)
    parser.set_defaults(func=run_cut)


STAGE = CutStage


def release_plan(ctx, lanes, options) -> list:
    from pipeline.stage import Skip

    raise Skip("a cut is recorded deliberately, never by a release run: 'python -m pipeline cut --lane ID --source URL@COMMIT'")
