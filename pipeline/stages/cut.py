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

Build and package take the lane's current cut (`binding_for_build`): a source
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, RefusedError, UsageError
from pipeline.formats.cut_ledger import Cut, External, Ledger, write_ledger
from pipeline.formats.lanes import Lane
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.util import ui
from pipeline.util.jsonio import write_json


def lock_digest(lane: Lane) -> str:
    """The digest of the lane's toolchain lock entry (its toolkit, on its build host)."""
    from pipeline.infra.toolchain import toolchain_spec

    return toolchain_spec(lane.cuda_toolkit, lane.build_host).digest


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
        if tag != lane.tag(n) or n < 1:
            ui.warn(f"{where} holds the non-canonical tag {tag!r} (made by hand?); its number {n} is never handed out" if n >= 1 else f"{where} holds {tag!r}: beta.0 is not a valid cut and is ignored")
            if n < 1:
                continue
        found.setdefault(n, tag)
    return found


def checkout_tags(path: Path) -> list[str]:
    from pipeline.infra.source import GIT
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


@dataclass(frozen=True)
class CutBinding:
    """Which cut a build is, as build and package record it."""

    n: int
    tag: str
    commit: str | None  # the cut's source commit (None: a record whose commit is unknown)
    rehearsal: bool  # the embedded sample built under the current cut's names: never publishable

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "tag": self.tag, "commit": self.commit, "rehearsal": self.rehearsal}


def binding_for_build(lane: Lane, *, commit: str, source_kind: str, stage: str) -> CutBinding:
    """The lane's current cut for a build of `commit`; refuses a commit that is not the cut's."""
    ledger = lane.ledger()
    cut = ledger.current(lane.version)
    fix_cut = f"record a cut of this commit first: python -m pipeline cut --lane {lane.id} --source URL_OR_PATH@{commit}"
    if cut is None:
        if source_kind == "embedded-sample":
            n = ledger.highest(lane.version) + 1
            ui.warn(f"{lane.id} has no cut of {lane.version}: the embedded sample is built as a rehearsal of the next one, {lane.tag(n)} (never publishable)")
            return CutBinding(n, lane.tag(n), None, True)
        raise RefusedError(
            f"lane {lane.id} has no cut of version {lane.version}",
            file=lane.ledger_file(),
            why=f"{stage} takes the component tag and source commit from the lane's current cut",
            fix=fix_cut,
        )
    if cut.source_commit != commit:
        if source_kind == "embedded-sample":
            ui.warn(f"the embedded sample ({commit[:12]}) is not the source of {cut.tag}: built as a rehearsal under its names (never publishable)")
            return CutBinding(cut.n, cut.tag, cut.source_commit, True)
        raise RefusedError(
            f"the source commit is not the one {cut.tag} was cut from",
            file=lane.ledger_file(),
            field=f"{cut.tag}.source_commit",
            found=commit,
            expected=cut.source_commit or "the cut's commit (the record names none: cut the lane again)",
            why="a component tag names exactly one commit; building another would publish other bytes under it",
            fix=fix_cut + " (a new beta.N), or build the cut's commit",
        )
    if cut.lane_file_sha256 is None or cut.toolchain_lock_sha256 is None:
        ui.warn(f"{cut.tag} is a record from release notes: its lane file and toolchain lock are not bound, only its commit is checked")
    if cut.lane_file_sha256 is not None and cut.lane_file_sha256 != lane.file_sha256:
        raise RefusedError(
            f"the lane file changed since {cut.tag} was cut",
            file=lane.file,
            found=lane.file_sha256,
            expected=cut.lane_file_sha256,
            why="a cut binds the lane file it was made with; a build with another lane file is not that cut",
            fix=f"cut again (python -m pipeline cut --lane {lane.id} --source URL_OR_PATH@{commit}), or restore the lane file",
        )
    if cut.toolchain_lock_sha256 is not None and cut.toolchain_lock_sha256 != lock_digest(lane):
        raise RefusedError(
            f"the toolchain lock entry changed since {cut.tag} was cut",
            file="runtime/toolchain.lock.json",
            field=f"toolkits.{lane.cuda_toolkit}.platforms.{lane.build_host}",
            found=lock_digest(lane),
            expected=cut.toolchain_lock_sha256,
            fix=f"cut again (python -m pipeline cut --lane {lane.id} --source URL_OR_PATH@{commit}), or restore the lock",
        )
    return CutBinding(cut.n, cut.tag, cut.source_commit, False)


def parse_binding(recorded: Any, lane: Lane, *, file: str | Path, field: str) -> CutBinding:
    """A cut binding as a build identity or a provenance statement records it (untrusted): {n, tag, commit, rehearsal}."""
    from pipeline.formats.lanes import MAX_BETA, MIN_BETA
    from pipeline.util.hashing import is_commit_hex

    fix = "rebuild with the pipeline that made the set (its build identity records the cut it was built as)"
    if not isinstance(recorded, dict) or set(recorded) != {"n", "tag", "commit", "rehearsal"}:
        raise InputError("records no cut binding", file=file, field=field, found=sorted(recorded) if isinstance(recorded, dict) else recorded, expected="{n, tag, commit, rehearsal}", fix=fix)
    n, tag, commit, rehearsal = recorded["n"], recorded["tag"], recorded["commit"], recorded["rehearsal"]
    if isinstance(n, bool) or not isinstance(n, int) or not MIN_BETA <= n <= MAX_BETA:
        raise InputError("is not a beta number", file=file, field=f"{field}.n", found=n, expected=f"an integer {MIN_BETA}..{MAX_BETA}")
    if tag != lane.tag(n):
        raise InputError(f"is not lane {lane.id}'s tag for beta.{n}", file=file, field=f"{field}.tag", found=tag, expected=lane.tag(n))
    if commit is not None and not is_commit_hex(commit):
        raise InputError("is not a full 40-hex commit or null", file=file, field=f"{field}.commit", found=commit)
    if not isinstance(rehearsal, bool):
        raise InputError("must be true or false", file=file, field=f"{field}.rehearsal", found=rehearsal)
    if not rehearsal and commit is None:
        raise InputError("a cut build names no cut commit", file=file, field=f"{field}.commit", found=None, expected="the cut's source commit (only a rehearsal may have none)")
    return CutBinding(n, tag, commit, rehearsal)


def ledger_check_for_rebuild(lane: Lane, binding: CutBinding, *, source_commit: str, lane_file_sha256: str | None) -> tuple[bool, str]:
    """(ok, detail): what this checkout's ledger says of the cut a published set was built as.

    Not the lane's current cut: a set of a cut superseded since is still rebuilt as
    that cut (its bytes carry its names).  A cut build must be a cut this ledger
    records, of the set's commit (and lane file, where the cut binds one); a
    rehearsal is the cut's names on another commit and binds nothing in the ledger.
    """
    where = lane.ledger_file()
    if binding.rehearsal:
        of = f"cut at {binding.commit}" if binding.commit else "cut whose commit was not known"
        return True, f"a rehearsal of {binding.tag} (the names of the {of}, the source {source_commit}): rebuilt as that rehearsal; publish refuses a rehearsal"
    cut = lane.ledger().entry(lane.version, binding.n)
    if cut is None:
        return False, f"{where} records no cut {binding.tag}, which the set says it was built as (check out the pipeline whose ledger records it)"
    if cut.source_commit != binding.commit or binding.commit != source_commit:
        return False, f"{where}: {binding.tag} was cut from {cut.source_commit}, but the set was built as that cut from {source_commit}"
    if cut.lane_file_sha256 is not None and lane_file_sha256 is not None and cut.lane_file_sha256 != lane_file_sha256:
        return False, f"{where}: {binding.tag} binds the lane file {cut.lane_file_sha256}, but the set was made with {lane_file_sha256}"
    return True, f"{binding.tag} at {binding.commit}, {cut.state} in {where.name}" + (f" (superseded by beta.{cut.superseded_by})" if cut.superseded_by else "")


def check_binding_current(lane: Lane, recorded: dict[str, Any], *, file: Path, stage: str) -> CutBinding:
    """Package-time check: the build's cut is still the lane's current cut and still binds its commit."""
    try:
        binding = CutBinding(int(recorded["n"]), str(recorded["tag"]), recorded.get("commit"), bool(recorded["rehearsal"]))
    except (KeyError, TypeError, ValueError):
        raise InputError("the build records no cut", file=file, field="attrs.cut", fix="build the lane again (the build stage records which cut it built)") from None
    ledger = lane.ledger()
    cut = ledger.current(lane.version)
    current_n = cut.n if cut is not None else ledger.highest(lane.version) + 1
    if binding.n != current_n:
        raise RefusedError(
            f"the build in the register is of {binding.tag}, but the lane's current cut is {lane.tag(current_n)}",
            file=file,
            field="component_tag",
            found=binding.tag,
            expected=lane.tag(current_n),
            why=f"{stage} takes the lane's current cut; a build of another cut cannot be relabelled",
            fix=f"build the lane again (python -m pipeline build --lane {lane.id} …)",
        )
    if not binding.rehearsal and (cut is None or cut.source_commit != binding.commit):
        raise RefusedError(f"{binding.tag} no longer binds the build's commit", file=lane.ledger_file(), field=f"{binding.tag}.source_commit", found=cut.source_commit if cut else None, expected=binding.commit)
    return binding


def check_build_binding(lane: Lane, identity: dict[str, Any], binding: CutBinding, *, stage: str) -> None:
    """Package-time check of the whole binding, not only N and the commit: the build was made with this lane file and
    this toolchain lock entry, and (a cut build) those are the ones the ledger's cut binds."""
    recorded_lane = identity.get("lane_file_sha256")
    fix = f"build the lane again with this checkout (python -m pipeline build --lane {lane.id} …), or {stage} from the checkout the build ran in"
    if recorded_lane != lane.file_sha256:
        raise RefusedError(
            "the lane file is not the one the build was made with",
            file=lane.file,
            field="lane_file_sha256",
            found=lane.file_sha256,
            expected=f"{recorded_lane} (build-identity.json lane_file_sha256)",
            why=f"{stage} takes names, libraries and licences from the lane file; another one would describe other bytes than the build's",
            fix=fix,
        )
    toolchain = identity.get("toolchain") or {}
    if toolchain.get("kind") == "pinned" and toolchain.get("lock_entry_sha256") != lock_digest(lane):
        raise RefusedError(
            "the toolchain lock entry is not the one the build was made with",
            file="runtime/toolchain.lock.json",
            field=f"toolkits.{lane.cuda_toolkit}.platforms.{lane.build_host}",
            found=lock_digest(lane),
            expected=f"{toolchain.get('lock_entry_sha256')} (build-identity.json toolchain.lock_entry_sha256)",
            fix=fix,
        )
    if binding.rehearsal:
        return
    cut = lane.ledger().entry(lane.version, binding.n)
    if cut is None:
        raise RefusedError(f"the ledger records no cut {binding.tag}, which the build says it is", file=lane.ledger_file(), field=binding.tag, fix=fix)
    for key, bound, actual in (("lane_file_sha256", cut.lane_file_sha256, lane.file_sha256), ("toolchain_lock_sha256", cut.toolchain_lock_sha256, lock_digest(lane) if toolchain.get("kind") == "pinned" else None)):
        if bound is not None and actual is not None and bound != actual:
            raise RefusedError(
                f"{binding.tag} binds another {key.removesuffix('_sha256').replace('_', ' ')} than the build was made with",
                file=lane.ledger_file(),
                field=f"{binding.tag}.{key}",
                found=actual,
                expected=bound,
                why="a cut binds its commit, lane file and toolchain lock entry; a set made with others is not that cut",
                fix=f"cut again (python -m pipeline cut --lane {lane.id} …), or restore the lane file and lock the cut binds",
            )


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
        from pipeline.infra.source import parse_source, resolve_source

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
        from pipeline.formats.ci_checks import require_green

        state = self.github.ci_state(self.commit)
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
