"""SLSA provenance: the statements the package and image stages write beside each set, and the strict reader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from winfixtures import packaged_native_set

from pipeline.errors import InputError, IntegrityError
from pipeline.formats import provenance as slsa
from pipeline.formats.assets import asset_set, check_assets
from pipeline.formats.lanes import REPO_ROOT
from pipeline.util.hashing import sha256_file

NATIVE = "rtx4090-windows-native"
ACTIONS = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "alphastorm/omp-ninfer",
    "GITHUB_WORKFLOW_REF": "alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.14.0",
    "GITHUB_RUN_ID": "123456",
    "GITHUB_RUN_ATTEMPT": "2",
}


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return packaged_native_set(tmp_path_factory)


def _statement_path(dist: Path, lane) -> Path:
    return dist / lane.id / slsa.FOLDER / slsa.set_statement_name(asset_set(lane).package_root)


# -- the statement beside a packaged set ---------------------------------------------


@pytest.mark.slow
def test_the_native_sets_statement_binds_exactly_its_eleven_files_and_stays_outside_the_set(native):
    workspace, dist = native
    lane = workspace.lane
    expected = asset_set(lane)
    path = _statement_path(dist, lane)
    statement = slsa.read_statement(path.read_bytes(), origin=str(path))
    assets_dir = dist / lane.id / "assets"
    assert statement.subjects == {name: sha256_file(assets_dir / name) for name in expected.names()}
    assert len(statement.subjects) == 11 and len(list(assets_dir.iterdir())) == 11  # the closed set keeps its count
    check_assets(assets_dir, lane=lane)  # and still checks: the statement is not in it
    assert statement.build_type == slsa.BUILD_TYPE_SET
    assert statement.external == {
        "lane": NATIVE,
        "component_tag": expected.component_tag,
        "source_repository": lane.source_repository,
        "source_commit": workspace.commit,
    }
    assert statement.builder_id == slsa.LOCAL_BUILDER
    names = [d["name"] for d in statement.dependencies()]
    assert names[:3] == ["source-commit", "source-tree", "source-tar"]
    assert "toolchain:prebuilt" in names  # built elsewhere: no wheel is claimed
    # Each binary and DLL handed to --prebuilt is a resolved dependency by its bytes' SHA-256 (read here from the folder).
    handed = {f"prebuilt:{p.name}": sha256_file(p) for p in sorted(workspace.prebuilt.iterdir())}
    assert {d["name"]: d["digest"]["sha256"] for d in statement.dependencies() if d["name"].startswith("prebuilt:")} == handed
    assert statement.dependency("prebuilt:ninfer-serve.exe")["annotations"] == {"role": "binary"}
    assert statement.dependency("prebuilt:libcurl.dll")["annotations"] == {"role": "runtime-library"}
    # The toolchain is the one the binaries' embedded identity names (winfixtures.native_identity compiled it in).
    toolchain = statement.dependency("toolchain:prebuilt")
    assert toolchain["uri"] == "pkg:generic/cuda-toolkit@13.3.73" and "digest" not in toolchain
    assert {k: toolchain["annotations"][k] for k in ("cuda_toolkit", "cuda_compiler", "cxx_compiler", "build_type")} == {
        "cuda_toolkit": "13.3.73", "cuda_compiler": "NVIDIA-13.3.73", "cxx_compiler": "MSVC-19.44.35217", "build_type": "Release"}
    assert not [n for n in names if n.startswith("build-host:")]  # not observed for --prebuilt binaries
    # The hash-locked requirements the pipeline was installed from (the release workflow's), by SHA-256.
    assert statement.dependency("requirements/release.txt")["digest"] == {"sha256": sha256_file(REPO_ROOT / "requirements" / "release.txt")}
    lane_item = statement.dependency(f"runtime/lanes/{NATIVE}.toml")
    assert lane_item is not None and lane_item["digest"]["sha256"] == lane.file_sha256
    register = json.loads((dist / "register.json").read_text())
    [entry] = [a for a in register["artifacts"] if a["kind"] == "provenance" and a["lane"] == NATIVE]
    assert entry["sha256"] == sha256_file(path) and entry["attrs"]["component_tag"] == expected.component_tag
    byproducts = {b["name"] for b in statement.document["predicate"]["runDetails"]["byproducts"]}
    assert byproducts == {"build-identity.json", expected.name_of("spdx"), expected.name_of("cdx"), expected.name_of("inner-sums")}
    text = path.read_text()
    assert "startedOn" not in text and "finishedOn" not in text  # no clock in the bytes


@pytest.mark.slow
def test_packaging_the_same_build_again_elsewhere_gives_the_same_statement_bytes(native, tmp_path):
    workspace, dist = native
    other = tmp_path / "dist"
    shutil.copytree(dist, other)
    shutil.rmtree(other / NATIVE / "assets")
    shutil.rmtree(other / NATIVE / slsa.FOLDER)
    workspace.package(other, force=True)
    assert _statement_path(other, workspace.lane).read_bytes() == _statement_path(dist, workspace.lane).read_bytes()


@pytest.mark.slow
def test_in_github_actions_the_builder_is_the_release_workflow(native, tmp_path, monkeypatch):
    workspace, dist = native
    other = tmp_path / "dist"
    shutil.copytree(dist, other)
    for key, value in ACTIONS.items():
        monkeypatch.setenv(key, value)
    workspace.package(other)  # the builder is an input: a local statement is not reused in CI
    statement = slsa.read_statement(_statement_path(other, workspace.lane).read_bytes(), origin="ci")
    assert statement.builder_id == "https://github.com/alphastorm/omp-ninfer/.github/workflows/release.yml@refs/tags/v0.14.0"
    metadata = statement.document["predicate"]["runDetails"]["metadata"]
    assert metadata == {"invocationId": "https://github.com/alphastorm/omp-ninfer/actions/runs/123456/attempts/2"}
    # The subjects do not depend on who states them.
    assert statement.subjects == slsa.read_statement(_statement_path(dist, workspace.lane).read_bytes(), origin="local").subjects


def test_builder_refuses_a_github_environment_it_cannot_state():
    with pytest.raises(InputError, match="does not name a workflow"):
        slsa.builder({**ACTIONS, "GITHUB_WORKFLOW_REF": "other/repo/.github/workflows/release.yml@refs/tags/v1"})
    assert slsa.builder({})["builder"]["id"] == slsa.LOCAL_BUILDER


# -- the pinned toolchain's wheels come from the lock ------------------------------------


def test_toolchain_wheels_are_named_by_url_and_sha256_from_the_lock():
    from pipeline.formats.lanes import find_lane
    from pipeline.formats.toolchain_lock import toolchain_spec

    lane = find_lane("5090")
    spec = toolchain_spec(lane.cuda_toolkit, lane.build_host)
    identity = {"toolchain": {"kind": "pinned", "toolkit": spec.toolkit, "lock_entry_sha256": spec.digest, "wheels": [{"distribution": w.distribution, "version": w.version, "sha256": w.sha256} for w in spec.wheels]}}
    items = slsa.toolchain_descriptors(identity, lane)
    assert [i["uri"] for i in items] == [w.url for w in spec.wheels]
    assert [i["digest"]["sha256"] for i in items] == [w.sha256 for w in spec.wheels]
    stale = {"toolchain": {**identity["toolchain"], "lock_entry_sha256": "0" * 64}}
    with pytest.raises(IntegrityError, match="no longer pins the toolchain this build used"):
        slsa.toolchain_descriptors(stale, lane)


# -- the strict reader -----------------------------------------------------------------


def _minimal(**changes) -> dict:
    document = slsa.statement(
        subjects={"a.tar.gz": "a" * 64, "SHA256SUMS": "b" * 64},
        build_type=slsa.BUILD_TYPE_SET,
        external={"lane": "rtx5090-container", "component_tag": "v0.7.0-qwen38-5090-beta.2", "source_repository": "https://x/y.git", "source_commit": "c" * 40},
        internal={},
        dependencies=[slsa.descriptor("source-commit", digest={"gitCommit": "c" * 40})],
        byproducts=[],
        run_details=slsa.builder({}),
    )
    for dotted, value in changes.items():
        node = document
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return document


def test_the_reader_accepts_what_the_writer_writes_and_the_bytes_are_canonical():
    data = slsa.statement_bytes(_minimal())
    assert data == (json.dumps(json.loads(data), sort_keys=True, indent=2) + "\n").encode()
    statement = slsa.read_statement(data, origin="x")
    assert list(statement.subjects) == ["SHA256SUMS", "a.tar.gz"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"predicate.buildDefinition.externalParameters": {"lane": "x", "component_tag": "t", "source_repository": "r", "source_commit": "c" * 40, "extra": "1"}}, "externalParameters", "not exactly the ones"),
        ({"predicate.runDetails.metadata": {"startedOn": "2026-01-01T00:00:00Z"}}, "runDetails.metadata", "wall-clock times"),
        ({"predicateType": "https://slsa.dev/provenance/v0.2"}, "predicateType", "not SLSA Provenance v1"),
        ({"subject": [{"name": "a", "digest": {"sha256": "a" * 64}}, {"name": "a", "digest": {"sha256": "b" * 64}}]}, "subject[1].name", "names a subject twice"),
        ({"subject": [{"name": "../etc/passwd", "digest": {"sha256": "a" * 64}}]}, "subject[0].name", "names no file or image"),
        ({"subject": [{"name": "a", "digest": {"sha1": "a" * 40}}]}, "subject[0].digest", "no lowercase SHA-256"),
        ({"predicate.buildDefinition.buildType": "https://example.com/other"}, "buildType", "does not define"),
    ],
)
def test_the_reader_refuses_a_malformed_statement_naming_the_field(change, field, message):
    data = (json.dumps(_minimal(**change), sort_keys=True, indent=2) + "\n").encode()
    with pytest.raises(InputError) as info:
        slsa.read_statement(data, origin="stmt.json")
    assert message in info.value.what
    assert field in (info.value.field or "")


def test_the_reader_refuses_duplicate_keys_and_nan():
    good = slsa.statement_bytes(_minimal())
    with pytest.raises(InputError, match="twice in one object"):
        slsa.read_statement(good.replace(b'"_type": ', b'"_type": "x", "_type": ', 1), origin="x")
    with pytest.raises(InputError, match="non-finite"):
        slsa.read_statement(good.replace(b'"internalParameters": {}', b'"internalParameters": {"x": NaN}'), origin="x")


def test_check_subjects_names_the_missing_extra_and_changed_files():
    statement = slsa.read_statement(slsa.statement_bytes(_minimal()), origin="x")
    slsa.check_subjects(statement, {"a.tar.gz": "a" * 64, "SHA256SUMS": "b" * 64}, origin="x")
    with pytest.raises(IntegrityError, match="not exactly the bound assets") as info:
        slsa.check_subjects(statement, {"a.tar.gz": "a" * 64, "SHA256SUMS": "b" * 64, "c.json": "c" * 64}, origin="x")
    assert "c.json" in str(info.value.found)
    with pytest.raises(IntegrityError, match="other bytes for a.tar.gz"):
        slsa.check_subjects(statement, {"a.tar.gz": "d" * 64, "SHA256SUMS": "b" * 64}, origin="x")


def test_docs_define_the_build_types_and_every_external_parameter():
    text = (REPO_ROOT / "docs" / "provenance.md").read_text()
    for anchor in ("asset-set-v1", "oci-image-v1", "local-builder", "rebuild-verifier", "rebuild-policy-v1"):
        assert f'<a id="{anchor}"></a>' in text, anchor
    for key in slsa.EXTERNAL_KEYS:
        assert f"`{key}`" in text


def test_the_documented_outsider_rebuild_command_is_one_the_cli_accepts():
    """docs/provenance.md's rebuild of a lane with host libraries: --lanes-dir and --pkg-config-path, parsed by the real parser."""
    import shlex

    from pipeline import cli

    text = (REPO_ROOT / "docs" / "provenance.md").read_text()
    [command] = [block for block in text.split("```sh\n")[1:] if "--pkg-config-path" in block.split("```")[0]]
    line = next(c for c in command.split("```")[0].replace("\\\n", " ").splitlines() if c.startswith("python -m pipeline rebuild"))
    words = shlex.split(line, comments=True)[3:]
    args = cli.build_parser(["rebuild"]).parse_args(words)
    assert args.lanes_dir == Path("./lanes") and args.pkg_config_path == ["/opt/ffmpeg-7.1/lib/pkgconfig:/opt/curl/lib/pkgconfig"]
    assert (args.verify, args.lane) == ("./download", "5090")


# -- every field has its type (issue 18: `annotations` of the wrong type was an AttributeError) --------------


def _with_dependency(**fields) -> dict:
    document = _minimal()
    document["predicate"]["buildDefinition"]["resolvedDependencies"] = [{"name": "source-commit", "digest": {"gitCommit": "c" * 40}, **fields}]
    return document


_DEPS = "predicate.buildDefinition.resolvedDependencies[0]"
_WRONG_TYPES = [
    (_with_dependency(annotations="local"), f"{_DEPS}.annotations", "must be an object"),
    (_with_dependency(annotations=["kind"]), f"{_DEPS}.annotations", "must be an object"),
    (_with_dependency(annotations={"kind": {"nested": 1}}), f"{_DEPS}.annotations.kind", "string, number, boolean or null"),
    (_with_dependency(annotations={"kind": 7}), f"{_DEPS}.annotations.kind", "must be a string"),
    (_with_dependency(uri=["x"]), f"{_DEPS}.uri", "non-empty string"),
    (_with_dependency(digest="c" * 40), f"{_DEPS}.digest", "malformed digest"),
    (_minimal(**{"predicate.buildDefinition.resolvedDependencies": [{"name": 5, "uri": "x"}]}), f"{_DEPS}.name", "non-empty string"),
    (_minimal(**{"predicate.buildDefinition.resolvedDependencies": {"name": "x"}}), "predicate.buildDefinition.resolvedDependencies", "array of resource descriptors"),
    (_minimal(**{"predicate.buildDefinition.resolvedDependencies": ["source-commit"]}), f"{_DEPS}", "not a resource descriptor"),
    (_minimal(**{"predicate.buildDefinition.internalParameters": {"cut": "v1"}}), "internalParameters.cut", "must be an object or null"),
    (_minimal(**{"predicate.buildDefinition.internalParameters": {"source_date_epoch": "1700000000"}}), "internalParameters.source_date_epoch", "must be a number or null"),
    (_minimal(**{"predicate.buildDefinition.internalParameters": {"source_date_epoch": True}}), "internalParameters.source_date_epoch", "must be a number or null"),
    (_minimal(**{"predicate.buildDefinition.internalParameters": []}), "internalParameters", "must be an object"),
    (_minimal(**{"predicate.runDetails": []}), "predicate.runDetails", "run details"),
    (_minimal(**{"predicate.runDetails.builder": "me"}), "predicate.runDetails.builder", "builder"),
    (_minimal(**{"predicate.runDetails.builder.id": 3}), "predicate.runDetails.builder.id", "builder's id"),
    (_minimal(**{"predicate.runDetails.builder.version": "1"}), "predicate.runDetails.builder.version", "object of strings"),
    (_minimal(**{"predicate.runDetails.metadata": "run 5"}), "predicate.runDetails.metadata", "must be an object"),
    (_minimal(**{"predicate.runDetails.metadata": {"invocationId": 5}}), "predicate.runDetails.metadata.invocationId", "must be a string"),
    (_minimal(**{"predicate.runDetails.byproducts": {"a": 1}}), "predicate.runDetails.byproducts", "array of resource descriptors"),
    (_minimal(**{"predicate.runDetails.byproducts": [{"name": "x", "digest": {"sha256": "a" * 64}, "annotations": 1}]}), "predicate.runDetails.byproducts[0].annotations", "must be an object"),
    (_minimal(**{"predicate.buildDefinition.externalParameters": {"lane": 1, "component_tag": "t", "source_repository": "r", "source_commit": "c" * 40}}), "externalParameters", "not exactly the ones"),
    (_minimal(**{"subject": {"a": "b"}}), "subject", "has no subjects"),
    (_minimal(**{"subject": ["a"]}), "subject[0]", "not {name, digest}"),
]


@pytest.mark.parametrize(("document", "field", "message"), _WRONG_TYPES, ids=[f"{i}-{c[1].rsplit('.', 1)[-1]}" for i, c in enumerate(_WRONG_TYPES)])
def test_a_field_of_the_wrong_type_is_an_input_error_naming_it(document, field, message):
    data = (json.dumps(document, sort_keys=True, indent=2) + "\n").encode()
    with pytest.raises(InputError) as info:
        slsa.read_statement(data, origin="stmt.json")
    assert message in info.value.what, info.value.render()
    assert field in (info.value.field or ""), info.value.field


def test_build_and_rebuild_refuse_a_statement_with_annotations_of_the_wrong_type_without_a_traceback(tmp_path):
    """The CLI: exit 1 (input) with the field named, not `internal error: AttributeError`."""
    import subprocess
    import sys

    document = _with_dependency(annotations="local")
    statement = tmp_path / "s.provenance.intoto.json"
    statement.write_text(json.dumps(document, sort_keys=True, indent=2) + "\n")
    archive = tmp_path / "source.tar"
    archive.write_bytes(bytes(1024))
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "build", "--lane", "5090", "--source-archive", str(archive), "--provenance", str(statement), "--rehearsal", "--dist", str(tmp_path / "dist")],
        capture_output=True, text=True, cwd=REPO_ROOT, check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert f"{_DEPS}.annotations" in result.stderr and "must be an object" in result.stderr
