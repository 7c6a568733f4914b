"""The cut binding: which cut of its lane a build is, and the rules that hold a build and a package to it.

A build records the cut it was made as (`CutBinding`: {n, tag, commit, rehearsal}) in its
build identity and its provenance statement; the cut ledger (pipeline/formats/cut_ledger.py)
records what each cut binds (source commit, lane file, toolchain lock entry).  The rules
that compare the two live here, once, for the stages that apply them: build takes the
lane's current cut (`binding_for_build`), package checks its build is still that cut
(`check_binding_current`, `check_build_binding`), rebuild reads the binding a published
set records (`parse_binding`) and asks the ledger about it (`ledger_check_for_rebuild`),
and cut records `lock_digest` in each new cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, RefusedError
from pipeline.formats.cut_ledger import BETA_EXPECTED, is_beta
from pipeline.formats.lanes import Lane
from pipeline.util import ui
from pipeline.util.hashing import is_commit_hex


def lock_digest(lane: Lane) -> str:
    """The digest of the lane's toolchain lock entry (its toolkit, on its build host)."""
    from pipeline.formats.toolchain_lock import toolchain_spec

    return toolchain_spec(lane.cuda_toolkit, lane.build_host).digest


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
    fix = "rebuild with the pipeline that made the set (its build identity records the cut it was built as)"
    if not isinstance(recorded, dict) or set(recorded) != {"n", "tag", "commit", "rehearsal"}:
        raise InputError("records no cut binding", file=file, field=field, found=sorted(recorded) if isinstance(recorded, dict) else recorded, expected="{n, tag, commit, rehearsal}", fix=fix)
    n, tag, commit, rehearsal = recorded["n"], recorded["tag"], recorded["commit"], recorded["rehearsal"]
    if not is_beta(n):
        raise InputError("is not a beta number", file=file, field=f"{field}.n", found=n, expected=BETA_EXPECTED)
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
