"""What a rebuild's verification summary says of this machine's folders: nothing private."""

from __future__ import annotations

from pipeline.formats.lanes import find_lane
from pipeline.stage import Context
from pipeline.stages.rebuild import RebuildStage


def test_a_check_naming_the_pkg_config_prefix_or_the_provenance_folder_states_neither(tmp_path):
    prefix = tmp_path / "someone" / "ffmpeg-7.1.5"
    work = tmp_path / "work"
    stage = RebuildStage(Context.open(work / "dist"), find_lane("5090"), published=work / "set", resource_uri=None,
                         pkg_config_path=(str(prefix / "lib" / "pkgconfig"), "/usr/lib/x86_64-linux-gnu/pkgconfig"))
    stage.statement_path = tmp_path / "downloads" / "x.intoto.json"
    detail = (f"{prefix}/include/libavutil/ffversion.h: error; explicit folders now: {prefix}/lib/pkgconfig, "
              f"/usr/lib/x86_64-linux-gnu/pkgconfig; {stage.statement_path}: subjects differ; {work}/set/a.tar.gz")
    text = stage._without_local_paths(detail, work)
    assert str(tmp_path) not in text, text
    assert text == ("<--pkg-config-path 1 prefix>/include/libavutil/ffversion.h: error; explicit folders now: <--pkg-config-path 1>, "
                    "<--pkg-config-path 2>; <--provenance folder>/x.intoto.json: subjects differ; set/a.tar.gz")
