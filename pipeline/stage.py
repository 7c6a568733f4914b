"""The stage contract.

A stage is a small named unit: `preflight()` runs cheap checks (tools on
PATH, host platform, register entries it needs) before any work; `inputs()`
returns everything its output depends on; `run()` does the work and returns
the artefacts it wrote.  `execute()` wires them: preflight, fingerprint (the
inputs plus the code of the stage's module and every pipeline module it
imports, `pipeline.codedigest`, and of the stages it runs, `Stage.runs_pipes`), skip when the register says the same
fingerprint already produced intact outputs, else run and record.  A stage
that observes the world rather than making bytes from files (verify, audit,
qualify against a live endpoint) sets `always_runs`: it is never skipped; one that only observes
(audit) also sets `digest_beside_run`, and its code digest is worked out in a thread beside its run,
for the record.  A stage that does not
apply raises `Skip(reason)`, as goreleaser's pipes do.  The ordered pipe list
is `pipeline/road.py: PIPES`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pipeline.codedigest import code_digest, code_files
from pipeline.errors import PipelineError, UsageError
from pipeline.register import Artifact, Register, fingerprint
from pipeline.road import pipe
from pipeline.util import ui
from pipeline.util.fs import exclusive_lock, remove_leftovers

DEFAULT_DIST = Path("dist")
LOCKS_DIR = ".locks"  # under the dist: one lock file per stage key


@dataclass
class Context:
    dist: Path
    register: Register
    lanes_dir: Path | None = None

    @classmethod
    def open(cls, dist: Path | str | None = None, lanes_dir: Path | None = None, *, root: Path | str | None = None) -> Context:
        """The run's output folder and its register; `root` is the repository whose files some
        entries name (`root: "repository"`, e.g. the release tree under manifests/), by default
        the checkout this pipeline runs from."""
        directory = Path(dist) if dist else DEFAULT_DIST
        directory.mkdir(parents=True, exist_ok=True)
        if root is None:
            from pipeline.formats.lanes import REPO_ROOT

            root = REPO_ROOT
        return cls(dist=directory, register=Register(directory, repo_root=Path(root)), lanes_dir=lanes_dir)

    @property
    def repo_root(self) -> Path:
        if self.register.repo_root is None:
            raise UsageError("this run names no repository root", why="the stage reads or writes files of the repository (manifests/)", fix="open the context with Context.open(..., root=PATH)")
        return self.register.repo_root


class Skip(Exception):  # noqa: N818 - a typed skip, not an error
    """The stage does not apply to this run; `reason` says why (printed as 'skipped: <reason>')."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class StageResult:
    key: str
    skipped: bool  # True: up to date, nothing was run
    outputs: list[Artifact]


class Stage:
    name: ClassVar[str]
    # An observation (a live endpoint, a release tree, public URLs): never "up to date".
    always_runs: ClassVar[bool] = False
    # A stage that always runs and only observes (audit: no write outside its own report and download cache) may
    # work out its code digest beside its run instead of before it.  One that changes things (sign, promote)
    # keeps the digest first: a code digest that fails must stop it before its first write.
    digest_beside_run: ClassVar[bool] = False
    # The pipes whose stages this one runs inside its own run, looked up through the road (rebuild runs build and
    # package): their code is part of this stage's code, so a change to them makes its record stale.
    runs_pipes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def inner_stage_class(self, pipe_name: str, class_name: str = "STAGE") -> type:
        """The stage class this stage runs inside its own run, found through the road (stages never import each
        other); only a pipe it names in `runs_pipes`, so its fingerprint always covers the code it runs."""
        if pipe_name not in self.runs_pipes:
            raise LookupError(f"{type(self).__name__} runs pipe {pipe_name!r} without naming it in runs_pipes {self.runs_pipes!r}")
        return pipe(pipe_name).stage_class(class_name)

    @property
    def key(self) -> str:
        return self.name

    @property
    def lock_key(self) -> str:
        """What runs exclude each other on (one lock per value): the stage key, unless several keys
        write one place (compose's actions on one release tree)."""
        return self.key

    def preflight(self) -> None:  # pragma: no cover - default does nothing
        pass

    def inputs(self) -> dict[str, Any]:
        raise NotImplementedError

    def run(self) -> list[Artifact]:
        raise NotImplementedError

    def describe(self) -> str:
        return self.key

    @property
    def lane_id(self) -> str | None:
        """The lane this run is for (None for a product-wide stage), as `status` shows it."""
        lane = getattr(self, "lane", None) or getattr(getattr(self, "target", None), "lane", None)
        return getattr(lane, "id", None)

    def leftovers(self) -> list[tuple[Path, tuple[str, ...]]]:
        """(folder, glob patterns) of the temporary names this stage stages under.

        An interrupted run (kill -9, power loss) leaves them behind; the next
        run of the same stage key removes them while it holds the stage lock,
        which proves that no live run of this key is still using them.  List
        only names no other stage key ever makes in that folder.
        """
        return []


def _lock_name(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key) + ".lock"


def execute(stage: Stage, *, force: bool = False) -> StageResult:
    # One run per stage key and dist at a time: a second one waits, then usually finds its work done.
    lock = stage.ctx.dist / LOCKS_DIR / _lock_name(stage.lock_key)
    with exclusive_lock(lock, waiting=f"another run of {stage.key} is working in {stage.ctx.dist}; waiting for it", on_wait=ui.info):
        for folder, patterns in stage.leftovers():
            for path in remove_leftovers(folder, patterns):
                ui.info(f"removed {path}, left behind by an interrupted run of {stage.key}")
        # Another run may have finished while we waited: see what is on disk now.
        stage.ctx.register.reload()
        try:
            return _execute_locked(stage, force=force)
        except PipelineError as error:
            _remember_refusal(stage, error)
            raise


def _remember_refusal(stage: Stage, error: PipelineError) -> None:
    """`status` shows a stage's last refusal; recording it never hides the refusal itself."""
    try:
        stage.ctx.register.record_refusal(stage.key, message=error.render(), label=error.label, exit_code=int(error.exit_code), lane=stage.lane_id)
    except (OSError, PipelineError) as problem:
        ui.warn(f"could not record the refusal of {stage.key} in {stage.ctx.register.file}: {problem}")


def code_modules(stage: Stage) -> tuple[str, ...]:
    """The modules whose code a stage's fingerprint covers: its own, and those of the stages it runs (`Stage.runs_pipes`)."""
    return (type(stage).__module__, *(pipe(name).module for name in stage.runs_pipes))


def run_facts(stage: Stage, inputs: dict, read: dict[str, str]) -> dict:
    """What a record keeps beside its fingerprint so `status` can say which input changed without running it."""
    return {
        "lane": stage.lane_id,
        "inputs": {name: fingerprint(value) for name, value in sorted(inputs.items())},
        "code": code_files(code_modules(stage)),
        "read": dict(sorted(read.items())),
    }


def _settle(future: Future[str], work: Callable[[], str]) -> None:
    try:
        future.set_result(work())
    except BaseException as error:  # noqa: BLE001 - raised by whoever waits on the future
        future.set_exception(error)


def _execute_locked(stage: Stage, *, force: bool) -> StageResult:
    register = stage.ctx.register
    # A stage may run another on the same register (rebuild runs build and package, accept binds through
    # compose): each records the entries it read itself, and the outer one's log goes on after the inner's.
    outer_log, register.read_log = register.read_log, {}
    try:
        return _run_or_skip(stage, register, force=force)
    finally:
        register.read_log = outer_log


def _run_or_skip(stage: Stage, register: Register, *, force: bool) -> StageResult:
    ui.step(stage.name, f"{stage.describe()}: preflight")
    stage.preflight()
    inputs = stage.inputs()
    modules = code_modules(stage)
    beside = stage.always_runs and stage.digest_beside_run
    if beside:
        # Needed only for the record after the run: its closure is parsed (0.5 s and more under load) beside
        # the run, not before it, where the user would wait; an error is raised when the record needs it.
        code: Future[str] = Future()
        threading.Thread(target=_settle, args=(code, lambda: code_digest(modules)), name="code-digest", daemon=True).start()
    else:
        digest = fingerprint({"inputs": inputs, "code": code_digest(modules)})
        if not force and not stage.always_runs and register.stage_is_current(stage.key, digest):
            outputs = register.outputs_of(stage.key)
            ui.step(stage.name, f"{stage.describe()}: up to date, nothing to do (inputs unchanged, {len(outputs)} outputs intact)")
            return StageResult(stage.key, True, outputs)
    outputs = stage.run()
    if beside:
        digest = fingerprint({"inputs": inputs, "code": code.result()})
    # An entry the run replaced is its own earlier output, not an input: kept, it would make the record stale at once.
    read = {name: sha for name, sha in register.read_log.items() if name not in {a.name for a in outputs}}
    register.record_stage(stage.key, digest, outputs, facts=run_facts(stage, inputs, read))
    ui.step(stage.name, f"{stage.describe()}: done, {len(outputs)} artefacts recorded in {register.file}")
    return StageResult(stage.key, False, outputs)
