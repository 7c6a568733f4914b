"""`build --work DIR`: a build empties only a folder it made (issue #27 §5: `--work .` emptied the checkout)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from pipeline.errors import UsageError
from pipeline.stages.build import WORK_MARKER, check_work_dir, claim_work_dir


def tree(root: Path) -> dict[str, str]:
    """Every entry under `root` with the SHA-256 of a file's bytes or a link's target."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "folder"
    return out


def a_checkout(root: Path) -> Path:
    (root / "pipeline").mkdir(parents=True)
    (root / "README.md").write_text("# a checkout\n")
    (root / "pipeline" / "stage.py").write_text("print('work in progress, not committed')\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


def test_build_work_dot_in_a_checkout_is_refused_and_its_files_stay(tmp_path, monkeypatch, capsys):
    from pipeline.cli import main

    checkout = a_checkout(tmp_path / "checkout")
    before = tree(checkout)
    monkeypatch.chdir(checkout)
    assert main(["build", "--lane", "5090", "--work", ".", "--dist", str(tmp_path / "dist")]) == 2
    err = capsys.readouterr().err
    assert f"error[usage]: --work: --work names a folder that holds files the pipeline did not make (found {str(checkout)!r}" in err, err
    assert "Traceback" not in err and "name a new folder" in err
    assert tree(checkout) == before


def test_a_marker_copied_or_committed_into_another_folder_claims_nothing(tmp_path):
    """The marker names the folder it was written in (device and inode): a clone of a repository that
    commits one, or a copy of a build folder, is not a folder a build made."""
    made = tmp_path / "made"
    claim_work_dir(made)
    checkout = a_checkout(tmp_path / "checkout")
    shutil.copy(made / WORK_MARKER, checkout / WORK_MARKER)
    before = tree(checkout)
    with pytest.raises(UsageError) as caught:
        claim_work_dir(checkout)
    assert caught.value.field == "--work" and caught.value.found == str(checkout)
    assert tree(checkout) == before
    (checkout / WORK_MARKER).unlink()
    (checkout / WORK_MARKER).symlink_to(made / WORK_MARKER)
    with pytest.raises(UsageError):
        check_work_dir(checkout)


def test_a_build_claims_a_new_or_empty_folder_and_empties_only_its_own(tmp_path):
    new = tmp_path / "deep" / "new"
    claim_work_dir(new)
    assert [p.name for p in new.iterdir()] == [WORK_MARKER]
    empty = tmp_path / "empty"
    empty.mkdir()
    claim_work_dir(empty)
    assert [p.name for p in empty.iterdir()] == [WORK_MARKER]
    # A folder a build made is emptied again, its links removed and never followed.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the build's\n")
    (new / "CMakeCache.txt").write_text("stale\n")
    (new / "objects").mkdir()
    (new / "objects" / "a.o").write_bytes(b"\x7fELF")
    (new / "to-outside").symlink_to(outside)
    claim_work_dir(new)
    assert [p.name for p in new.iterdir()] == [WORK_MARKER]
    assert (outside / "keep.txt").read_text() == "not the build's\n"
    # A file, or a link to a folder, is not a build folder.
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(outside)
    for path in (tmp_path / "file", tmp_path / "link"):
        with pytest.raises(UsageError) as caught:
            claim_work_dir(path)
        assert "is not a folder" in caught.value.render()
    assert (tmp_path / "file").read_text() == "x" and tree(outside) == {"keep.txt": hashlib.sha256(b"not the build's\n").hexdigest()}


def test_the_build_stage_refuses_a_foreign_work_folder_before_any_work(tmp_path):
    """BuildStage is also what rebuild --verify drives: a --work it did not make is refused when the stage is made."""
    from pipeline.formats.lanes import find_lane
    from pipeline.lanework.source import parse_source
    from pipeline.stage import Context
    from pipeline.stages.build import BuildStage

    checkout = a_checkout(tmp_path / "checkout")
    before = tree(checkout)
    with pytest.raises(UsageError):
        BuildStage(Context.open(tmp_path / "dist"), find_lane("5090"), source=parse_source(None), work_dir=checkout)
    assert tree(checkout) == before
