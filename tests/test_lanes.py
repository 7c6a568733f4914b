from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.errors import InputError, UsageError
from pipeline.lanes import DEFAULT_LANES_DIR, find_lane, load_lane, load_lanes, pattern_regex


def test_shipped_lanes_are_the_three_of_the_release():
    lanes = load_lanes()
    assert sorted(lanes) == ["rtx3090-windows-native", "rtx4090-windows-native", "rtx5090-container"]
    lane = lanes["rtx4090-windows-native"]
    assert (lane.cuda_architecture, lane.cuda_toolkit, lane.build_host) == ("89", "13.3", "windows-x86_64")
    assert lane.tag(2) == "v0.7.0-qwen38-4090-beta.2"
    assert lane.stem(2) == "ninfer-rtx4090-native-v0.7.0-beta.2"
    assert lane.asset_platform == "windows-x86_64-cuda13.3-rtx4090"
    assert lanes["rtx3090-windows-native"].cuda_architecture == "86"
    fivek = lanes["rtx5090-container"]
    assert (fivek.cuda_architecture, fivek.cuda_toolkit, fivek.build_host) == ("120a", "13.1", "linux-x86_64")
    assert fivek.stem() == "ninfer-qwen38-rtx5090-v0.7.0"


def test_lookup_by_short_name_and_unknown_lane():
    assert find_lane("3090").id == "rtx3090-windows-native"
    with pytest.raises(UsageError, match="unknown lane '7090'"):
        find_lane("7090")


def test_tag_regex_accepts_exact_beta_tags_only():
    lane = find_lane("4090")
    assert lane.beta_from_tag("v0.7.0-qwen38-4090-beta.12") == 12
    for bad in ("v0.7.0-qwen38-4090-beta.0", "v0.7.0-qwen38-4090-beta.01", "v0.7.1-qwen38-4090-beta.2",
                "v0.7.0-qwen38-3090-beta.2", "v0.7.0-qwen38-4090-beta.2-x"):
        with pytest.raises(InputError, match="does not match the lane's tag pattern"):
            lane.beta_from_tag(bad)
    assert pattern_regex("v{version}-x-beta.{n}", "1.2.3").fullmatch("v1.2.3-x-beta.7")


def _edited(tmp_path: Path, lane_id: str, old: str, new: str) -> Path:
    directory = tmp_path / "lanes"
    directory.mkdir(exist_ok=True)
    target = directory / f"{lane_id}.toml"
    text = (DEFAULT_LANES_DIR / f"{lane_id}.toml").read_text()
    assert old in text, f"fixture text {old!r} not in lane file"
    target.write_text(text.replace(old, new, 1))
    return target


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        ('architecture = "89"', 'architecture = "87"', "cuda.architecture", "invalid value"),
        ('architecture = "89"', 'architecture = "86"', "gpu.compute_capability", "does not match the CUDA architecture"),
        ('title = "RTX 4090 native Windows package"', 'title = "x"\ncolour = "green"', "colour", "unknown key"),
        ('tag_pattern = "v{version}-qwen38-4090-beta.{n}"', 'tag_pattern = "v{version}-qwen38-4090-beta"', "component.tag_pattern", "must contain the beta number placeholder"),
        ('tag_pattern = "v{version}-qwen38-4090-beta.{n}"', 'tag_pattern = "v{version}-{lane}-beta.{n}"', "component.tag_pattern", "unknown placeholder"),
        ("cmake_args = []", 'cmake_args = ["-DCMAKE_CUDA_ARCHITECTURES=90"]', "build.cmake_args[0]", "sets a value the pipeline owns"),
        ('toolkit = "13.3"', "toolkit = 13.3", "cuda.toolkit", "wrong type"),
        ('short_name = "4090"', 'short_name = "3090"', "short_name", "GPU number in the id"),
        ('commit = "7a25cd72f490183e4113f1e84e68e36d653ddd28"', 'commit = "7a25cd72"', "source.commit", "invalid value"),
    ],
)
def test_lane_errors_name_file_key_found_and_expected(tmp_path, old, new, field, message):
    path = _edited(tmp_path, "rtx4090-windows-native", old, new)
    with pytest.raises(InputError) as info:
        load_lane(path)
    error = info.value
    assert error.field == field
    assert message in error.what
    rendered = error.render()
    assert "rtx4090-windows-native.toml" in rendered
    assert "found" in rendered or "missing" in rendered


def test_missing_required_key(tmp_path):
    path = _edited(tmp_path, "rtx5090-container", 'deployment_profile = "qwen38-5090-v0.13.0"\n', "")
    with pytest.raises(InputError, match="required key is missing") as info:
        load_lane(path)
    assert info.value.field == "component.deployment_profile"


def test_lane_id_must_match_file_name(tmp_path):
    directory = tmp_path / "lanes"
    directory.mkdir()
    shutil.copy(DEFAULT_LANES_DIR / "rtx5090-container.toml", directory / "rtx5090-other.toml")
    with pytest.raises(InputError, match="lane id must equal the file name"):
        load_lanes(directory)


def test_cli_lists_lanes(capsys):
    from pipeline.cli import main

    assert main(["lanes"]) == 0
    out = capsys.readouterr().out
    assert "rtx4090-windows-native" in out and "v0.7.0-qwen38-4090-beta.2" in out
    assert main(["--print-lanes"]) == 0
