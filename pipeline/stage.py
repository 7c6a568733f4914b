"""The stage contract and the ordered pipe list.

A stage is a small named unit: `preflight()` runs cheap checks (tools on
PATH, host platform, register entries it needs) before any work; `inputs()`
returns everything its output depends on; `run()` does the work and returns
the artefacts it wrote.  `execute()` wires them: preflight, fingerprint, skip
when the register says the same inputs already produced intact outputs, else
run and record.  Like goreleaser's pipes, the release order is one list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .register import Artifact, Register, fingerprint
from .util import ui
from .util.fs import exclusive_lock, remove_leftovers

# The release order.  Each name is a module with one stage (pipeline/ or pipeline/stages/).
# `accept` runs the documented routes on the candidate that `compose` promoted.
PIPES = ("cut", "build", "package", "image", "push", "qualify", "compose", "accept", "verify", "audit", "sign", "publish")

DEFAULT_DIST = Path("dist")
LOCKS_DIR = ".locks"  # under the dist: one lock file per stage key


@dataclass
class Context:
    dist: Path
    register: Register
    lanes_dir: Path | None = None

    @classmethod
    def open(cls, dist: Path | str | None = None, lanes_dir: Path | None = None) -> Context:
        directory = Path(dist) if dist else DEFAULT_DIST
        directory.mkdir(parents=True, exist_ok=True)
        return cls(dist=directory, register=Register(directory), lanes_dir=lanes_dir)


@dataclass
class StageResult:
    key: str
    skipped: bool
    outputs: list[Artifact]


class Stage:
    name: ClassVar[str]

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @property
    def key(self) -> str:
        return self.name

    def preflight(self) -> None:  # pragma: no cover - default does nothing
        pass

    def inputs(self) -> dict[str, Any]:
        raise NotImplementedError

    def run(self) -> list[Artifact]:
        raise NotImplementedError

    def describe(self) -> str:
        return self.key

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
    lock = stage.ctx.dist / LOCKS_DIR / _lock_name(stage.key)
    with exclusive_lock(lock, waiting=f"another run of {stage.key} is working in {stage.ctx.dist}; waiting for it", on_wait=ui.info):
        for folder, patterns in stage.leftovers():
            for path in remove_leftovers(folder, patterns):
                ui.info(f"removed {path}, left behind by an interrupted run of {stage.key}")
        # Another run may have finished while we waited: see what is on disk now.
        stage.ctx.register.reload()
        return _execute_locked(stage, force=force)


def _execute_locked(stage: Stage, *, force: bool) -> StageResult:
    ui.step(stage.name, f"{stage.describe()}: preflight")
    stage.preflight()
    digest = fingerprint(stage.inputs())
    register = stage.ctx.register
    if not force and register.stage_is_current(stage.key, digest):
        outputs = register.outputs_of(stage.key)
        ui.step(stage.name, f"{stage.describe()}: up to date, nothing to do (inputs unchanged, {len(outputs)} outputs intact)")
        return StageResult(stage.key, True, outputs)
    outputs = stage.run()
    register.record_stage(stage.key, digest, outputs)
    ui.step(stage.name, f"{stage.describe()}: done, {len(outputs)} artefacts recorded in {register.file}")
    return StageResult(stage.key, False, outputs)
