from __future__ import annotations

import pytest

from pipeline.errors import InputError, IntegrityError
from pipeline.register import Register
from pipeline.stage import Context, Stage, execute


class CountingStage(Stage):
    name = "toy"

    def __init__(self, ctx, value: str):
        super().__init__(ctx)
        self.value = value
        self.runs = 0

    def inputs(self):
        return {"value": self.value}

    def run(self):
        self.runs += 1
        path = self.ctx.dist / "toy" / "out.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.value)
        return [self.ctx.register.make("benchmark", path, stage=self.name, lane=None, name="toy/out.txt")]


def test_rerun_with_same_inputs_is_a_noop(dist):
    ctx = Context.open(dist)
    stage = CountingStage(ctx, "a")
    assert execute(stage).skipped is False
    assert execute(stage).skipped is True
    assert stage.runs == 1
    # A fresh process reads the register from disk and still knows.
    stage2 = CountingStage(Context.open(dist), "a")
    assert execute(stage2).skipped is True and stage2.runs == 0
    # Changed inputs run again; a damaged output runs again.
    stage3 = CountingStage(Context.open(dist), "b")
    assert execute(stage3).skipped is False
    (dist / "toy" / "out.txt").write_text("tampered")
    stage4 = CountingStage(Context.open(dist), "b")
    assert execute(stage4).skipped is False


def test_query_one_and_tamper_detection(dist):
    ctx = Context.open(dist)
    execute(CountingStage(ctx, "x"))
    register = Register(dist)
    artifact = register.one("benchmark", needed_by="test", produced_by="toy")
    assert register.verified_path(artifact).read_text() == "x"
    (dist / artifact.path).write_text("y")
    with pytest.raises(IntegrityError, match="changed on disk"):
        register.verified_path(artifact)
    with pytest.raises(InputError, match="has no binary entry"):
        register.one("binary", lane="rtx5090-container", needed_by="package", produced_by="build")


def test_register_file_is_canonical_json(dist):
    execute(CountingStage(Context.open(dist), "x"))
    data = (dist / "register.json").read_bytes()
    assert data.endswith(b"\n") and b"\r" not in data and not data.startswith(b"\xef\xbb\xbf")
    assert b'"artifact_type": "omp_ninfer_artifact_register"' in data
