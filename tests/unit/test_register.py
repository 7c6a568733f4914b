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


# -- concurrent stages on one dist ------------------------------------------------------

def _toy_artifact(register: Register, dist, key: str, value: str):
    path = dist / "toy" / f"{key}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value)
    return register.make("benchmark", path, stage="toy", lane=None, name=f"toy/{key}.txt")


def test_a_record_merges_into_what_other_processes_recorded_meanwhile(dist):
    dist.mkdir()
    # Both "processes" read the register before either records: the second must not drop the first's key.
    first, second = Register(dist), Register(dist)
    first.record_stage("toy:a", "fa", [_toy_artifact(first, dist, "a", "1")])
    second.record_stage("toy:b", "fb", [_toy_artifact(second, dist, "b", "2")])
    fresh = Register(dist)
    assert sorted(fresh.stages) == ["toy:a", "toy:b"]
    assert sorted(fresh.artifacts) == ["toy/a.txt", "toy/b.txt"]
    assert fresh.stage_is_current("toy:a", "fa") and fresh.stage_is_current("toy:b", "fb")
    # A key's new record replaces only that key's outputs, even when recorded from a stale view.
    first.record_stage("toy:b", "fb2", [_toy_artifact(first, dist, "b2", "3")])
    fresh = Register(dist)
    assert sorted(fresh.artifacts) == ["toy/a.txt", "toy/b2.txt"]
    assert fresh.stages["toy:a"]["outputs"] == ["toy/a.txt"]


RACER = r"""
import sys, time
from pathlib import Path
from pipeline.register import Register
dist, who, rounds, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
for n in range(rounds):
    register = Register(dist)  # a stage reads the register at its start ...
    path = dist / "toy" / f"{who}-{n}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{who} {n}")
    register.record_stage(f"toy:{who}", f"round {n}", [register.make("benchmark", path, stage="toy", lane=None, name=f"toy/{who}-{n}.txt")])
"""


def test_many_processes_recording_at_once_lose_no_update(dist):
    """Real processes race record_stage on one register; every key's last record survives, nothing else."""
    import subprocess
    import sys
    import time

    dist.mkdir()
    racers, rounds = 8, 12
    start = time.time() + 1.5  # all start together, after the interpreters are up
    procs = [
        subprocess.Popen([sys.executable, "-c", RACER, str(dist), f"p{i}", str(rounds), str(start)], stderr=subprocess.PIPE, text=True)
        for i in range(racers)
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    register = Register(dist)
    assert sorted(register.stages) == sorted(f"toy:p{i}" for i in range(racers))
    for i in range(racers):
        assert register.stages[f"toy:p{i}"] == {"fingerprint": f"round {rounds - 1}", "outputs": [f"toy/p{i}-{rounds - 1}.txt"]}
    assert sorted(register.artifacts) == sorted(f"toy/p{i}-{rounds - 1}.txt" for i in range(racers))
    for artifact in register.artifacts.values():
        register.verified_path(artifact)
    assert sorted(p.name for p in dist.iterdir()) == [".register.lock", "register.json", "toy"], "no temporary file left"


# -- register.json of the wrong shape ------------------------------------------------------

def _register_document(dist) -> dict:
    execute(CountingStage(Context.open(dist), "x"))
    import json

    return json.loads((dist / "register.json").read_text())


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(stages=[]), "stages"),
        (lambda d: d.update(artifacts={}), "artifacts"),
        (lambda d: d["artifacts"].append("toy/out.txt"), "artifacts[1]"),
        (lambda d: d["artifacts"][0].update(size="12"), "artifacts[0].size"),
        (lambda d: d["artifacts"][0].update(size=True), "artifacts[0].size"),
        (lambda d: d["artifacts"][0].update(attrs=["component_tag"]), "artifacts[0].attrs"),
        (lambda d: d["artifacts"][0].update(sha256="x" * 64), "artifacts[0].sha256"),
        (lambda d: d["artifacts"][0].pop("path"), "artifacts[0].path"),
        (lambda d: d["artifacts"][0].update(extra=1), "artifacts[0].extra"),
        (lambda d: d["artifacts"].append(dict(d["artifacts"][0])), "artifacts[1].name"),
        (lambda d: d["stages"].update(toy=[]), "stages.toy"),
        (lambda d: d["stages"]["toy"].update(outputs="toy/out.txt"), "stages.toy.outputs"),
        (lambda d: d["stages"]["toy"].update(fingerprint=None), "stages.toy.fingerprint"),
    ],
)
def test_a_register_of_the_wrong_shape_is_an_input_error_naming_the_field(dist, change, field):
    from pipeline.util.jsonio import write_json

    document = _register_document(dist)
    change(document)
    write_json(dist / "register.json", document)
    with pytest.raises(InputError) as caught:
        Register(dist)
    assert caught.value.field == field
    assert caught.value.file == str(dist / "register.json")


def test_a_wrong_shape_through_the_command_line_is_a_clear_error_not_a_traceback(dist, capsys):
    from pipeline.cli import main
    from pipeline.util.jsonio import write_json

    document = _register_document(dist)
    document["stages"] = ["package:rtx5090-container"]
    write_json(dist / "register.json", document)
    assert main(["package", "--lane", "5090", "--dist", str(dist)]) == 1
    err = capsys.readouterr().err
    assert "error[input]" in err and "stages" in err and "Traceback" not in err and "internal error" not in err


# -- one run per stage key; an interrupted run's leftovers --------------------------------

class StagingStage(CountingStage):
    name = "toy"

    def leftovers(self):
        return [(self.ctx.dist / "toy", (".out.*.staging",))]


def test_the_next_run_removes_its_own_leftovers_only(dist):
    ctx = Context.open(dist)
    folder = dist / "toy"
    (folder / ".out.abc.staging" / "deep").mkdir(parents=True)
    (folder / ".out.abc.staging" / "deep" / "half-written").write_text("x")
    (folder / ".other.abc.staging").mkdir()  # someone else's name: never touched
    (folder / ".out.tmp").write_text("not ours either")
    execute(StagingStage(ctx, "a"))
    assert sorted(p.name for p in folder.iterdir()) == [".other.abc.staging", ".out.tmp", "out.txt"]


HOLDER = r"""
import sys, time
from pathlib import Path
from pipeline.util.fs import exclusive_lock
with exclusive_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_live_run_of_the_same_key_is_waited_for_and_its_staging_left_alone(dist):
    """A second run of a key waits for the live one (which holds the stage lock) before it touches anything."""
    import subprocess
    import sys
    import threading

    from pipeline.stage import LOCKS_DIR

    ctx = Context.open(dist)
    live = dist / "toy" / ".out.live.staging"
    live.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(dist / LOCKS_DIR / "toy.lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        stage = StagingStage(ctx, "a")
        done = threading.Event()
        thread = threading.Thread(target=lambda: (execute(stage), done.set()))
        thread.start()
        assert not done.wait(1.0), "the second run must wait while the first holds the stage lock"
        assert live.is_dir() and stage.runs == 0
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert done.wait(30)
        thread.join()
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (its lock with it): now the folder is a dead run's, and it was removed.
    assert stage.runs == 1 and not live.exists()


# -- entries naming files of the repository (root "repository") ---------------------------------

class TreeStage(CountingStage):
    """Writes a file of the repository (as compose writes manifests/<release>/) and records it there."""

    name = "tree"

    def run(self):
        self.runs += 1
        path = self.ctx.repo_root / "manifests" / "v1.0.0" / "NOTES.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.value)
        return [self.ctx.register.make("release-tree", path, stage="compose", lane=None, name="manifests/v1.0.0/NOTES.md",
                                       root="repository", release="v1.0.0", role="rendering")]


def test_an_entry_of_the_repository_is_resolved_against_the_repository_root_and_rehashed(tmp_path):
    from pipeline.util.hashing import sha256_bytes

    repo, dist = tmp_path / "repo", tmp_path / "dist"
    repo.mkdir()
    stage = TreeStage(Context.open(dist, root=repo), "a")
    assert execute(stage).skipped is False
    entry = Register(dist, repo_root=repo).one("release-tree", needed_by="t", produced_by="compose")
    # The path is relative to the repository, not to the dist, and says so.
    assert (entry.path, entry.attrs["root"], entry.sha256) == ("manifests/v1.0.0/NOTES.md", "repository", sha256_bytes(b"a"))
    assert not (dist / entry.path).exists()
    assert Register(dist, repo_root=repo).verified_path(entry) == repo / "manifests" / "v1.0.0" / "NOTES.md"
    again = TreeStage(Context.open(dist, root=repo), "a")
    assert execute(again).skipped is True and again.runs == 0
    # A changed file of the repository is a changed output: the stage runs again, a reader refuses it.
    (repo / "manifests" / "v1.0.0" / "NOTES.md").write_text("edited")
    with pytest.raises(IntegrityError, match="changed on disk"):
        Register(dist, repo_root=repo).verified_path(entry)
    third = TreeStage(Context.open(dist, root=repo), "a")
    assert execute(third).skipped is False and third.runs == 1
    # Without a repository root the entry cannot be read, and the error says why.
    from pipeline.errors import UsageError

    with pytest.raises(UsageError, match="without a repository root"):
        Register(dist).path_of(entry)


def test_a_repository_entry_that_leaves_the_repository_is_refused(tmp_path):
    from pipeline.register import Artifact
    from pipeline.util.jsonio import write_json

    repo, dist, outside = tmp_path / "repo", tmp_path / "dist", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    (outside / "NOTES.md").write_text("a")
    execute(TreeStage(Context.open(dist, root=repo), "a"))
    # '..' and absolute paths never make an entry, whichever root it names.
    for bad in ("../outside/NOTES.md", "/etc/passwd"):
        with pytest.raises(ValueError, match="must stay inside"):
            Artifact("release-tree", "x", bad, "0" * 64, 1, "compose", None, {"release": "v1.0.0", "root": "repository", "role": "rendering"})
    with pytest.raises(ValueError, match="unknown root"):
        Artifact("release-tree", "x", "manifests/x", "0" * 64, 1, "compose", None, {"release": "v1.0.0", "root": "home", "role": "rendering"})
    # A register edited to point one outside is an input error naming the entry, when it is read.
    document = _register_document(dist)
    document["artifacts"][0]["path"] = "manifests/../../outside/NOTES.md"
    write_json(dist / "register.json", document)
    with pytest.raises(InputError) as caught:
        Register(dist, repo_root=repo)
    assert caught.value.field == "artifacts[0]"
    # A link inside the repository that leads out of it is refused by the same gate as every name from data.
    document["artifacts"][0]["path"] = "link/NOTES.md"
    write_json(dist / "register.json", document)
    (repo / "link").symlink_to(outside, target_is_directory=True)
    register = Register(dist, repo_root=repo)
    entry = register.artifacts["manifests/v1.0.0/NOTES.md"]
    with pytest.raises(InputError, match="resolves outside the repository") as caught:
        register.verified_path(entry)
    assert caught.value.field == "manifests/v1.0.0/NOTES.md.path"
    with pytest.raises(InputError, match="resolves outside the repository"):
        register.stage_is_current("tree", register.stages["tree"]["fingerprint"])


class AlwaysStage(CountingStage):
    always_runs = True
    digest_beside_run = True

    def __init__(self, ctx, value: str):
        super().__init__(ctx, value)
        import threading

        self.started = threading.Event()

    def run(self):
        self.started.set()
        return super().run()


def test_a_stage_that_always_runs_works_out_its_code_digest_beside_the_run_and_records_it(dist, monkeypatch):
    """Audit never skips: its code digest (every module of its closure parsed) is not waited for before the run."""
    import pipeline.stage as stage_module
    from pipeline.register import fingerprint

    stage = AlwaysStage(Context.open(dist), "a")
    seen_running = []

    def digest_while_running(modules):
        seen_running.append(stage.started.wait(5))
        return "digest-of-the-code"

    monkeypatch.setattr(stage_module, "code_digest", digest_while_running)
    assert execute(stage).skipped is False and seen_running == [True]
    assert stage.ctx.register.stage_is_current(stage.key, fingerprint({"inputs": {"value": "a"}, "code": "digest-of-the-code"}))

    def broken(modules):
        raise OSError("a module of its closure cannot be read")

    monkeypatch.setattr(stage_module, "code_digest", broken)
    with pytest.raises(OSError, match="cannot be read"):
        execute(AlwaysStage(Context.open(dist), "b"))


class ChangingStage(CountingStage):
    always_runs = True  # never skipped, and it changes things (as sign and promote do)


def test_a_stage_that_changes_things_works_out_its_code_digest_before_its_run(dist, monkeypatch):
    import pipeline.stage as stage_module

    stage = ChangingStage(Context.open(dist), "c")

    def broken(modules):
        raise OSError("a module of its closure cannot be read")

    monkeypatch.setattr(stage_module, "code_digest", broken)
    with pytest.raises(OSError, match="cannot be read"):
        execute(stage)
    assert stage.runs == 0, "a failing code digest stops it before its first write"
    monkeypatch.undo()
    assert [execute(ChangingStage(Context.open(dist), "c")).skipped for _ in range(2)] == [False, False], "never up to date"
