"""util/fs: published folders are readable by others; a half-made one never replaces the old."""

from __future__ import annotations

import os
import stat

import pytest

from pipeline.util.fs import atomic_output_dir


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits: Windows folders have ACLs, and os.stat reports 0o777 for every folder")
def test_a_published_folder_is_0755_although_it_was_staged_private(tmp_path):
    target = tmp_path / "lane" / "assets"
    seen = []
    with atomic_output_dir(target) as staging:
        seen.append(_mode(staging))
        (staging / "file").write_text("x")
    assert seen == [0o700], "staging stays private while it fills"
    assert _mode(target) == 0o755
    # Replacing an existing folder: same mode, old content gone, no .old or .staging left beside it.
    with atomic_output_dir(target) as staging:
        (staging / "other").write_text("y")
    assert _mode(target) == 0o755 and sorted(p.name for p in target.iterdir()) == ["other"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["assets"]


def test_a_failed_block_leaves_the_old_folder_and_no_staging(tmp_path):
    target = tmp_path / "assets"
    with atomic_output_dir(target) as staging:
        (staging / "good").write_text("1")
    with pytest.raises(RuntimeError), atomic_output_dir(target) as staging:
        (staging / "half").write_text("2")
        raise RuntimeError("stop")
    assert sorted(p.name for p in target.iterdir()) == ["good"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assets"]


def test_a_bounded_read_that_the_system_refuses_is_an_input_error_naming_the_file(tmp_path):
    from pipeline.errors import InputError
    from pipeline.util.fs import read_bytes_bounded

    (tmp_path / "file").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for path in (tmp_path / "file" / "child", tmp_path / "loop"):  # NotADirectoryError, ELOOP
        with pytest.raises(InputError) as caught:
            read_bytes_bounded(path, 10)
        assert caught.value.file == str(path) and "could not be read" in caught.value.what
