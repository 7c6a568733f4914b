from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from repokit import edited_lane

from pipeline.errors import InputError, UsageError
from pipeline.formats.lanes import DEFAULT_LANES_DIR, find_lane, load_lane, load_lanes, pattern_regex


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
    # A tag read from a manifest row may be any JSON value (audit passes row["release_tag"]): found in
    # review of audit's set check while fixing the manifest fuzzer's findings; it was a TypeError.
    for bad in (None, 2, ["v0.7.0-qwen38-4090-beta.2"]):
        with pytest.raises(InputError, match="does not match the lane's tag pattern"):
            lane.beta_from_tag(bad)


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
    path = edited_lane(tmp_path, "rtx4090-windows-native", old, new)
    with pytest.raises(InputError) as info:
        load_lane(path)
    error = info.value
    assert error.field == field
    assert message in error.what
    rendered = error.render()
    assert "rtx4090-windows-native.toml" in rendered
    assert "found" in rendered or "missing" in rendered


def test_missing_required_key(tmp_path):
    path = edited_lane(tmp_path, "rtx5090-container", 'deployment_profile = "qwen38-5090-v0.13.0"\n', "")
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
    # `lanes` replaced the old --print-lanes switch (issue #10 §3): one command, no second spelling.
    assert main(["--print-lanes"]) == 2


# -- hostile lane files: names that would become paths, numbers that would judge gates ----------

HOSTILE_LANE_EDITS = [
    # A stem with '../' wrote the archive, source, SBOMs and payload outside dist.
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "../../escape-v{version}-beta.{n}"', "component.stem_pattern", "contains '/' outside its placeholders"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "/tmp/escape-v{version}-beta.{n}"', "component.stem_pattern", "contains '/' outside its placeholders"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "..\\\\..\\\\escape-{n}"', "component.stem_pattern", "contains '\\\\' outside its placeholders"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "C:escape-{n}"', "component.stem_pattern", "contains ':' outside its placeholders"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = ".hidden-{n}"', "component.stem_pattern", "starts with '.'"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "CON"', "component.stem_pattern", "Windows device name CON"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "x{n:>300}"', "component.stem_pattern", "format or conversion"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "x{version!r}"', "component.stem_pattern", "format or conversion"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "x{n.real}"', "component.stem_pattern", "unknown placeholder"),
    ('stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "' + "s" * 129 + '"', "component.stem_pattern", "longer than a name pattern may be"),
    ('release_id_pattern = "qwen38-4090-native-v{version}-beta.{n}"', 'release_id_pattern = "../../x-{n}"', "component.release_id_pattern", "contains '/' outside its placeholders"),
    ('release_id_pattern = "qwen38-4090-native-v{version}-beta.{n}"', 'release_id_pattern = "nul"', "component.release_id_pattern", "Windows device name NUL"),
    ('release_id_pattern = "qwen38-4090-native-v{version}-beta.{n}"', 'release_id_pattern = "a\\u0000b{n}"', "component.release_id_pattern", "contains '\\x00' outside its placeholders"),
    ('tag_pattern = "v{version}-qwen38-4090-beta.{n}"', 'tag_pattern = "v{version}-qwen38-4090-beta.{n}' + "x" * 120 + '"', "component.tag_pattern", "longer than a name pattern may be"),
    ('deployment_profile = "qwen38-4090-native-v{version}-beta.{n}"', 'deployment_profile = "../x-{n}"', "component.deployment_profile", "contains '/' outside its placeholders"),
    ('build_profile = "native-v{version}-beta.{n}-rtx4090"', 'build_profile = "a b {n}"', "component.build_profile", "contains ' ' outside its placeholders"),
    # An absolute license_file bundled any host file into the published package.
    ('license_file = "packaging/licenses/curl.txt"', 'license_file = "/etc/hostname"', "package.redistributables[7].license_file", "is an absolute path"),
    ('license_file = "packaging/licenses/curl.txt"', 'license_file = "packaging/licenses/../../../../../../etc/hostname"', "package.redistributables[7].license_file", "'..' segment"),
    ('license_file = "packaging/licenses/curl.txt"', 'license_file = "packaging\\\\licenses\\\\curl.txt"', "package.redistributables[7].license_file", "(the separator is '/')"),
    ('license_file = "packaging/licenses/curl.txt"', 'license_file = "packaging/windows/Install-Release.ps1"', "package.redistributables[7].license_file", "not in the repository's packaging/licenses/ folder"),
    ('license_file = "packaging/licenses/curl.txt"', 'license_file = "pyproject.toml"', "package.redistributables[7].license_file", "not in the repository's packaging/licenses/ folder"),
    ('name = "libcurl.dll"', 'name = "../libcurl.dll"', "package.redistributables[7].name", "path separator"),
    # The licence text build --prebuilt takes from the folder: a plain name, never a library's.
    ('license_from_prebuilt = "LICENSE.txt"', 'license_from_prebuilt = "../LICENSE.txt"', "package.redistributables[1].license_from_prebuilt", "path separator"),
    ('license_from_prebuilt = "LICENSE.txt"', 'license_from_prebuilt = "dstoragecore.dll"', "package.redistributables[1].license_from_prebuilt", "names a library or program"),
    # Which vcpkg port a DLL comes from: one the lane's build-host dependencies install, and only for vcpkg DLLs.
    ('vcpkg_port = "curl"\n', '', "package.redistributables[7].vcpkg_port", "must name the port that installs it"),
    ('vcpkg_port = "curl"', 'vcpkg_port = "openssl"', "package.redistributables[7].vcpkg_port", "'curl' or 'ffmpeg' or 'pkgconf'"),
    ('origin = "cuda-toolkit"', 'origin = "cuda-toolkit"\nvcpkg_port = "curl"', "package.redistributables[0].vcpkg_port", "does not come from vcpkg"),
    ('"packaging/windows/Install-Release.ps1"', '"/tmp/Install-Release.ps1"', "package.support_scripts[0]", "is an absolute path"),
    ('"packaging/windows/Install-Release.ps1"', '"packaging/windows/../../../tmp/Install-Release.ps1"', "package.support_scripts[0]", "'..' segment"),
    ('"packaging/windows/Install-Release.ps1"', '"runtime/lanes/rtx4090-windows-native.toml"', "package.support_scripts[0]", "not in the repository's packaging/windows/ folder"),
    # Numbers: NaN thresholds made the decode and TTFT gates report "passed (threshold nan)".
    ("min_decode_tokens_per_second = 135.0", "min_decode_tokens_per_second = nan", "qualification.min_decode_tokens_per_second", "invalid value"),
    ("min_decode_tokens_per_second = 135.0", "min_decode_tokens_per_second = -nan", "qualification.min_decode_tokens_per_second", "invalid value"),
    ("min_decode_tokens_per_second = 135.0", "min_decode_tokens_per_second = inf", "qualification.min_decode_tokens_per_second", "invalid value"),
    ("min_decode_tokens_per_second = 135.0", "min_decode_tokens_per_second = 0", "qualification.min_decode_tokens_per_second", "invalid value"),
    ("min_decode_tokens_per_second = 135.0", "min_decode_tokens_per_second = true", "qualification.min_decode_tokens_per_second", "invalid value"),
    ("min_prefill_tokens_per_second = 1900.0", "min_prefill_tokens_per_second = -5.0", "qualification.min_prefill_tokens_per_second", "invalid value"),
    ("max_time_to_first_token_seconds = 2.0", "max_time_to_first_token_seconds = nan", "qualification.max_time_to_first_token_seconds", "invalid value"),
    ("max_time_to_first_token_seconds = 2.0", "max_time_to_first_token_seconds = inf", "qualification.max_time_to_first_token_seconds", "invalid value"),
    ("max_restart_seconds = 90.0", "max_restart_seconds = 1e300", "qualification.max_restart_seconds", "invalid value"),
    ("max_vram_mib = 23500", "max_vram_mib = 0", "qualification.max_vram_mib", "invalid value"),
    ("max_vram_mib = 23500", "max_vram_mib = 30000", "qualification.max_vram_mib", "more memory than the GPU has"),
    ("benchmark_prompt_tokens = 4541", "benchmark_prompt_tokens = 200000", "qualification.benchmark_prompt_tokens", "longer than the advertised context"),
    ("advertised_prompt_tokens = 130048", "advertised_prompt_tokens = 99999999999", "qualification.advertised_prompt_tokens", "invalid value"),
    ("vram_mib = 24564", "vram_mib = 0", "gpu.vram_mib", "invalid value"),
    # N lives in the cut ledger (tests/unit/test_cut.py refuses a ledger's N < 1 or > 99999); a hand-written
    # beta in the lane file, whatever its value, is refused.
    ('version = "0.7.0"', 'version = "0.7.0"\nbeta = 0', "component.beta", "unknown key"),
    ('version = "0.7.0"', 'version = "0.7.0"\nbeta = -1', "component.beta", "unknown key"),
    ('version = "0.7.0"', 'version = "0.7.0"\nbeta = 100000', "component.beta", "unknown key"),
    ('version = "0.7.0"', 'version = "0.7.0"\nbeta = 2', "component.beta", "unknown key"),
    ('version = "0.7.0"', 'version = "0.7.' + "0" * 40 + '"', "component.version", "invalid value"),
]


@pytest.mark.parametrize(("old", "new", "field", "message"), HOSTILE_LANE_EDITS)
def test_a_hostile_lane_file_is_refused_at_load_naming_file_and_field(tmp_path, old, new, field, message):
    path = edited_lane(tmp_path, "rtx4090-windows-native", old, new)
    with pytest.raises(InputError) as info:
        load_lane(path)
    error = info.value
    assert (error.file, error.field) == (str(path), field)
    assert message in error.render()


def test_the_stem_of_the_container_lane_may_omit_the_beta_and_every_shipped_name_is_a_plain_file_name():
    from pipeline.formats.assets import asset_set
    from pipeline.util.safepath import component_problem

    for lane in load_lanes().values():
        for beta in (1, lane.beta, 99999):
            for name in [*asset_set(lane, beta).names(), lane.release_id(beta), lane.tag(beta), lane.deployment_profile(beta)]:
                assert component_problem(name) is None, name


@pytest.mark.parametrize("beta", [0, -1, 100000, True])
def test_a_lane_never_renders_a_name_for_a_beta_that_is_no_cut(beta):
    lane = find_lane("4090")
    for render in (lane.tag, lane.stem, lane.release_id, lane.deployment_profile, lane.build_profile):
        with pytest.raises(InputError, match="is not a beta number") as info:
            render(beta)
        assert info.value.field == "component.beta"


@pytest.mark.parametrize(
    "argv",
    [
        ["check-assets", ".", "--beta", "0"],
        ["check-assets", ".", "--beta", "-3"],
        ["check-assets", ".", "--beta", "x"],
    ],
)
def test_every_beta_option_refuses_a_beta_below_one(argv, tmp_path, capsys):
    from pipeline.cli import main
    from pipeline.errors import ExitCode

    sentinel = _sentinel(tmp_path)
    dist = tmp_path / "dist"
    extra = ["--dist", str(dist)] if argv[0] != "check-assets" else []
    assert main([*argv, *extra]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "error[usage]: argument --beta:" in err and ("beta must be 1..99999" in err or "not a beta number" in err)
    assert not dist.exists() and _sentinel(tmp_path) == sentinel


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--lane", "5090", "--beta", "2"],
        ["build", "--lane", "5090", "--beta", "0"],
        ["package", "--lane", "5090", "--beta", "0"],
        ["package", "--all", "--beta", "0"],
    ],
)
def test_build_and_package_take_no_beta_option(argv, tmp_path, capsys):
    """build and package take N from the lane's current cut (runtime/cuts/), never from the command line."""
    from pipeline.cli import main
    from pipeline.errors import ExitCode

    sentinel = _sentinel(tmp_path)
    dist = tmp_path / "dist"
    assert main([*argv, "--dist", str(dist)]) == ExitCode.USAGE
    assert "error[usage]: unrecognized arguments: --beta" in capsys.readouterr().err
    assert not dist.exists() and _sentinel(tmp_path) == sentinel


@pytest.mark.parametrize("n", [0, -1, 100000])
def test_the_stage_functions_refuse_a_ledger_beta_outside_1_to_99999_before_touching_dist(tmp_path, n):
    """The beta number a stage function uses comes from the cut ledger; a ledger naming beta.0 (or below,
    or above the range) is refused when the lane is loaded, before anything is written."""
    import json

    from pipeline.stages.build import build_lane
    from pipeline.stages.package import package_lane

    lanes = tmp_path / "lanes"
    shutil.copytree(DEFAULT_LANES_DIR, lanes)
    shutil.copytree(DEFAULT_LANES_DIR.parent / "cuts", tmp_path / "cuts")
    ledger_file = tmp_path / "cuts" / "rtx5090-container.json"
    ledger = json.loads(ledger_file.read_text())
    ledger["cuts"][0].update(n=n, tag=f"v0.7.0-qwen38-5090-beta.{n}")
    ledger_file.write_text(json.dumps(ledger, indent=2, sort_keys=True) + "\n", newline="\n")
    dist = tmp_path / "dist"
    for call in (lambda: build_lane("5090", dist=dist, lanes_dir=lanes), lambda: package_lane("5090", dist=dist, lanes_dir=lanes)):
        with pytest.raises(InputError, match="is not a valid number") as info:
            call()
        assert info.value.file == str(ledger_file) and info.value.field.endswith(".n")
    assert not dist.exists()


def _sentinel(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(root.rglob("*"))}


def test_a_pattern_whose_rendered_asset_names_exceed_a_file_name_is_refused(tmp_path):
    """A pattern within its own bound can still render names too long for a file system."""
    path = edited_lane(tmp_path, "rtx4090-windows-native", 'stem_pattern = "ninfer-rtx4090-native-v{version}-beta.{n}"', 'stem_pattern = "' + "{version}" * 14 + '"')
    path.write_text(path.read_text().replace('version = "0.7.0"', 'version = "1234567890.1234567890.1234567890"', 1).replace("0.7.0", "1234567890.1234567890.1234567890"), newline="\n")
    with pytest.raises(InputError) as info:
        load_lane(path)
    assert info.value.field == "component.stem_pattern"
    assert "over the bound of 255" in info.value.what


# Found by the lane-file fuzzer (tests/fuzz, target 'lane'): bytes that are not UTF-8, or arrays
# nested past the interpreter's recursion limit, were an internal error (UnicodeDecodeError,
# RecursionError from tomllib) instead of a refusal naming the file.
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\n\xd7\x0e", "is not valid UTF-8 (invalid continuation byte at byte 1)"),
        (b"schema_version = 1\nid = \"\xff\"\n", "is not valid UTF-8 (invalid start byte at byte 25)"),
        (b"a = " + b"[" * 5000, "nests arrays or inline tables too deeply"),
        (b"a = " + b"{b = " * 5000, "nests arrays or inline tables too deeply"),
    ],
)
def test_a_lane_file_that_is_not_utf8_or_nests_too_deeply_is_an_input_error(tmp_path, data, message):
    path = tmp_path / "rtx4090-windows-native.toml"
    path.write_bytes(data)
    with pytest.raises(InputError) as caught:
        load_lane(path)
    assert caught.value.what == message and caught.value.file == str(path)
