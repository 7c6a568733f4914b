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

One module per job, as goreleaser's sub-pipes (this package's `__init__` holds the stage and its CLI):
`target` (what one publication is), `component` and `product` (the two kinds and their own gates),
`evidence` (provenance statements, DSSE and SHA256SUMS signatures), `gates` (GitHub's gates and the loop that
checks them), `journal` (what this plan's journal says it wrote), `plan` (plan and diff) and `apply` (the writes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, PipelineError, RefusedError, UsageError
from pipeline.formats import publication_plan as fmt
from pipeline.formats.cut_ledger import Publication, write_ledger
from pipeline.formats.lanes import REPO_ROOT
from pipeline.infra import attestations
from pipeline.infra.github import GitHub, token_from_env
from pipeline.register import Artifact
from pipeline.stage import Context, Stage
from pipeline.stages.publish.apply import Publisher
from pipeline.stages.publish.component import component_target
from pipeline.stages.publish.gates import Remote, remote_gates, run_gates
from pipeline.stages.publish.journal import started_ops, world_changes
from pipeline.stages.publish.plan import diff_lines, plan_of
from pipeline.stages.publish.product import product_target
from pipeline.stages.publish.target import VERIFIER_KINDS, Target
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import canonical_bytes, parse_strict

# The names the CLI, the road and the tests use, whichever job module holds them.
__all__ = ["STAGE", "VERIFIER_KINDS", "PublishStage", "Publisher", "Remote", "Target", "diff_lines", "make_github_factory", "plan_of",
           "publish_lane", "publish_release", "register_cli", "release_plan", "remote_gates", "run_publish", "world_changes"]


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
