"""Stage `push` against a real registry (Debian's docker-registry), checked with skopeo and umoci.

Faults are injected by a small proxy in front of the real registry: a 5xx in the
middle of a blob upload, a rewritten Docker-Content-Digest.  The last test runs
the whole chain build -> package -> image -> push on the compiled sample runtime
and starts `ninfer-serve --version` from the unpacked root file system.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import time
from pathlib import Path

import imagekit
import pytest
from registry import ProxyRule, RegistryServer, free_port, require_tool

from pipeline.cli import main
from pipeline.errors import ExitCode, IntegrityError, RemoteError, UsageError
from pipeline.formats.lanes import find_lane
from pipeline.formats.receipts import IMAGE_PUBLICATION_TYPE
from pipeline.infra import oci
from pipeline.infra.registry import ENV_PASSWORD, ENV_USERNAME
from pipeline.register import Register
from pipeline.stages.image import build_image
from pipeline.stages.push import choose_registry, push_image

LANE = "rtx5090-container"
pytestmark = pytest.mark.registry


@pytest.fixture(autouse=True)
def _isolated_environment(private_oci_cache, registry_lane, monkeypatch, tmp_path):  # registry_lane: images on test bases pinned by digest
    from pipeline.util import ui

    monkeypatch.setattr(ui.current(), "quiet", False)  # another test's --quiet must not hide the retry lines
    monkeypatch.delenv(ENV_USERNAME, raising=False)
    monkeypatch.delenv(ENV_PASSWORD, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def repo(request) -> str:
    """A repository of its own for each test on the shared registry."""
    return "t/" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:60].strip("-")


@pytest.fixture
def image_dist(tmp_path, pushed_base, local_base) -> tuple[Path, str]:
    """A dist with a stand-in binary archive and its image built on the base pulled from the registry."""
    lane = find_lane(LANE)
    dist = tmp_path / "dist"
    imagekit.write_package(dist, lane, binaries=imagekit.stand_in_binaries(tmp_path / "bin"))
    definition = tmp_path / "definition.toml"
    definition.write_text(imagekit.definition_text(pushed_base, local_base.index_digest))
    result = build_image(LANE, dist=dist, definition=definition)
    return dist, next(a for a in result.outputs if a.kind == "oci-layout").attrs["manifest_digest"]


def skopeo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("skopeo", "skopeo"), *args], capture_output=True, text=True, check=True)


def receipt_of(dist: Path) -> tuple[dict, Path]:
    entry = Register(dist).query("publication-receipt", lane=LANE)
    assert len(entry) == 1
    path = dist / entry[0].path
    return json.loads(path.read_bytes()), path


def local_layout(dist: Path) -> Path:
    return dist / LANE / "image" / "oci"


# -- publication ------------------------------------------------------------------

def test_push_publishes_by_digest_and_independent_tools_agree(tmp_path, image_dist, registry_server, repo):
    dist, digest = image_dist
    lane = find_lane(LANE)
    target = f"{registry_server.host}/{repo}"
    result = push_image(target, dist=dist)
    attrs = result.outputs[0].attrs
    assert attrs["image_reference"] == f"{target}@{digest}" and attrs["tag_status"] == "assigned"
    # Base layers were on the same registry (pushed_base): mounted, not sent again.
    assert attrs["mounted_blobs"] == 1 and attrs["uploaded_blobs"] == 3 and attrs["present_blobs"] == 0

    receipt, path = receipt_of(dist)
    archive = Register(dist).one("package-archive", lane=LANE, needed_by="t", produced_by="t")
    layout = Register(dist).one("oci-layout", lane=LANE, needed_by="t", produced_by="t")
    assert receipt["artifact_type"] == IMAGE_PUBLICATION_TYPE and receipt["schema_version"] == 3
    assert receipt["image_reference"] == f"{target}@{digest}" and receipt["image_digest"] == digest
    assert receipt["binary_asset"] == archive.path.split("/")[-1] and receipt["binary_sha256"] == archive.sha256
    assert receipt["source_commit"] == "a" * 40 and receipt["component_tag"] == lane.tag()
    assert receipt["base_image_digest"] == layout.attrs["base_digest"] and receipt["base_image_reference"].endswith("@" + layout.attrs["base_digest"])
    assert receipt["registry"] == registry_server.host and receipt["secret_free"] is True
    assert receipt["verification"] == {"registry_digest_header": digest, "manifest_pulled_back_by_digest": True, "blobs_pulled_back_and_rehashed": 4}
    assert path.read_bytes() == (json.dumps(receipt, indent=2, sort_keys=True) + "\n").encode()

    # The registry serves exactly our manifest bytes under our digest, and the tag names it.
    assert registry_server.tags(repo) == [lane.tag()]
    status, headers, body = registry_server.get(f"/v2/{repo}/manifests/{lane.tag()}", headers={"Accept": oci.MANIFEST})
    assert status == 200 and headers["Docker-Content-Digest"] == digest
    assert body == oci.BlobStore(local_layout(dist)).path(digest).read_bytes()

    # skopeo (an independent client) agrees on digest, labels and bytes.
    inspected = json.loads(skopeo("inspect", "--tls-verify=false", f"docker://{target}@{digest}").stdout)
    assert inspected["Digest"] == digest
    assert inspected["Labels"]["org.opencontainers.image.version"] == lane.tag()
    assert inspected["Labels"]["org.opencontainers.image.created"] == "2026-11-01T12:00:00Z"
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{target}@{digest}"], capture_output=True, check=True).stdout
    assert oci.digest_bytes(raw) == digest
    copy = tmp_path / "copy"
    skopeo("copy", "--quiet", "--preserve-digests", "--src-tls-verify=false", f"docker://{target}@{digest}", f"oci:{copy}:pulled")
    ours = {p.name: p.read_bytes() for p in (local_layout(dist) / "blobs" / "sha256").iterdir()}
    theirs = {p.name: p.read_bytes() for p in (copy / "blobs" / "sha256").iterdir()}
    assert theirs == ours

    # umoci unpacks the copy; the files are ours, with our modes.
    bundle = tmp_path / "bundle"
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    subprocess.run([require_tool("umoci", "umoci"), "unpack", *rootless, "--image", f"{copy}:pulled", str(bundle)], capture_output=True, check=True)
    rootfs = bundle / "rootfs"
    server = rootfs / "opt" / "ninfer" / "bin" / "ninfer-serve"
    assert server.stat().st_mode & 0o777 == 0o755
    sums = (rootfs / "opt" / "ninfer" / "SHA256SUMS.txt").read_text()
    assert all((rootfs / "opt" / "ninfer" / line.split("  ", 1)[1]).is_file() for line in sums.splitlines())
    config = json.loads((bundle / "config.json").read_text())
    assert config["process"]["args"] == ["/opt/ninfer/bin/ninfer-serve", "--help"] and config["process"]["cwd"] == "/opt/ninfer"


def test_second_push_uploads_no_layer_bytes(image_dist, registry_server, repo):
    dist, digest = image_dist
    target = f"{registry_server.host}/{repo}"
    push_image(target, dist=dist)
    receipt_before = receipt_of(dist)[1].read_bytes()
    assert push_image(target, dist=dist).skipped  # unchanged inputs: the stage is a no-op
    again = push_image(target, dist=dist, force=True)
    attrs = again.outputs[0].attrs
    assert (attrs["uploaded_blobs"], attrs["uploaded_bytes"], attrs["mounted_blobs"]) == (0, 0, 0)
    assert attrs["present_blobs"] == 4 and attrs["tag_status"] == "already-assigned"
    assert receipt_of(dist)[1].read_bytes() == receipt_before


def test_push_by_digest_only(image_dist, registry_server, repo):
    dist, digest = image_dist
    result = push_image(f"{registry_server.host}/{repo}", dist=dist, no_tag=True)
    assert result.outputs[0].attrs["tag_status"] == "not-requested"
    assert registry_server.tags(repo) == [] and registry_server.has_manifest(repo, digest)
    assert receipt_of(dist)[0]["tag"] is None


def test_without_registry_the_target_is_pipeline_registry_then_the_image_definitions_repository(
        image_dist, registry_server, repo, monkeypatch, capsys):
    """The release workflow names no registry: `push --dist dist` pushes where the image definition says (its
    SBOM purl's repository); the rehearsal points that job at a loopback registry with PIPELINE_REGISTRY."""
    dist, digest = image_dist
    layout = Register(dist).query("oci-layout", lane=LANE)[0]
    defined = layout.attrs["production_repository"]
    assert defined and not defined.startswith(registry_server.host)  # the definition names a real registry
    monkeypatch.setenv("PIPELINE_REGISTRY", f"{registry_server.host}/{repo}")
    assert main(["push", "--dist", str(dist), "--no-tag"]) == 0
    assert f"push target {registry_server.host}/{repo} (from PIPELINE_REGISTRY)" in capsys.readouterr().err
    assert registry_server.has_manifest(repo, digest)
    # Unset: the image's own definition is the target; --registry wins over both.
    assert choose_registry(None, [layout], {}) == (defined, "the repository of the image definition definition.toml")  # outside the repository: its name
    assert choose_registry("h:5000/x/y", [layout], {"PIPELINE_REGISTRY": "a/b"}) == ("h:5000/x/y", "--registry")
    # No definition repository recorded, or two images: named, not guessed.
    with pytest.raises(UsageError, match="no push target") as caught:
        choose_registry(None, [layout, layout], {})
    assert caught.value.field == "--registry"


# -- refusals and faults -------------------------------------------------------------

def test_existing_tag_that_names_another_image_is_refused_before_any_upload(image_dist, registry_server, repo, local_base, capsys):
    dist, digest = image_dist
    lane = find_lane(LANE)
    # Someone already published the tag for other content (here: the base image).
    skopeo("copy", "--quiet", "--all", "--preserve-digests", "--dest-tls-verify=false", f"oci:{local_base.layout}:{local_base.ref}", f"docker://{registry_server.host}/{repo}:{lane.tag()}")
    code = main(["push", "--registry", f"{registry_server.host}/{repo}", "--dist", str(dist)])
    err = capsys.readouterr().err
    assert code == ExitCode.REFUSED and "error[refused]" in err and lane.tag() in err and local_base.index_digest in err
    assert not registry_server.has_manifest(repo, digest)
    manifest = json.loads(oci.BlobStore(local_layout(dist)).path(digest).read_bytes())
    ours = manifest["layers"][-1]["digest"]
    assert registry_server.get(f"/v2/{repo}/blobs/{ours}", method="HEAD")[0] == 404, "a blob was uploaded before the refusal"
    assert Register(dist).query("publication-receipt") == [] and not (dist / LANE / "push").exists()


def test_a_registry_that_is_down_gets_bounded_retries_and_a_clear_error(image_dist, capsys):
    dist, _digest = image_dist
    port = free_port()
    started = time.monotonic()
    code = main(["push", "--registry", f"127.0.0.1:{port}/alphastorm/ninfer-runtime", "--retries", "2", "--dist", str(dist)])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == ExitCode.REMOTE and "error[remote]" in err
    assert f"cannot reach the registry 127.0.0.1:{port}" in err and "3 times" in err
    assert err.count("retry ") == 2 and elapsed < 10  # backoff 0.5 s + 1 s, then stop
    assert Register(dist).query("publication-receipt") == []


def test_a_5xx_in_the_middle_of_a_blob_upload_restarts_that_blob(image_dist, fault_proxy, registry_server, repo):
    dist, digest = image_dist
    manifest = json.loads(oci.BlobStore(local_layout(dist)).path(digest).read_bytes())
    biggest = max(manifest["layers"], key=lambda layer: layer["size"])["digest"]
    proxy = fault_proxy(ProxyRule("PUT", f"digest={biggest.replace(':', '%3A')}", times=1, action="fail-500"))
    result = push_image(f"{proxy.host}/{repo}", dist=dist)
    attrs = result.outputs[0].attrs
    assert attrs["restarted_uploads"] == 1 and attrs["uploaded_blobs"] == 4
    puts = proxy.requests("PUT", biggest.replace(":", "%3A"))
    assert [status for _m, _p, status in puts] == [500, 201]
    # The manifest went out only after every blob was in, and it verifies.
    order = [(m, p) for m, p, _s in proxy.log]
    manifest_put = order.index(("PUT", f"/v2/{repo}/manifests/{digest}"))
    assert all(index < manifest_put for index, (m, p) in enumerate(order) if m == "PUT" and "/blobs/uploads/" in p)
    assert registry_server.has_manifest(repo, digest) and receipt_of(dist)[0]["image_digest"] == digest


def test_a_blob_that_never_uploads_means_no_manifest_no_receipt_no_tag(image_dist, fault_proxy, registry_server, repo, capsys):
    dist, digest = image_dist
    proxy = fault_proxy(ProxyRule("PUT", "/blobs/uploads/", times=1000, action="fail-500"))
    code = main(["push", "--registry", f"{proxy.host}/{repo}", "--retries", "1", "--dist", str(dist)])
    err = capsys.readouterr().err
    assert code == ExitCode.REMOTE and "failed 2 times" in err and "injected failure" in err, err
    assert proxy.requests("PUT", "/manifests/") == []
    assert not registry_server.has_manifest(repo, digest) and registry_server.tags(repo) == []
    assert Register(dist).query("publication-receipt") == [] and not (dist / LANE / "push").exists()


def test_a_registry_answering_another_digest_stops_before_receipt_and_tag(image_dist, fault_proxy, registry_server, repo):
    dist, digest = image_dist
    proxy = fault_proxy(ProxyRule("PUT", "/manifests/", times=1000, action="rewrite-digest"))
    with pytest.raises(IntegrityError) as info:
        push_image(f"{proxy.host}/{repo}", dist=dist)
    message = str(info.value)
    assert "another digest" in message and digest in message and "sha256:" + "0" * 64 in message
    assert "nothing was tagged" in message and info.value.exit_code == ExitCode.INTEGRITY
    assert registry_server.tags(repo) == []
    assert len(proxy.requests("PUT", "/manifests/")) == 1, "a tag was PUT after the digest mismatch"
    assert Register(dist).query("publication-receipt") == [] and not (dist / LANE / "push").exists()


def test_a_tampered_local_blob_is_refused_before_any_request(image_dist, fault_proxy, repo):
    dist, digest = image_dist
    manifest = json.loads(oci.BlobStore(local_layout(dist)).path(digest).read_bytes())
    blob = oci.BlobStore(local_layout(dist)).path(manifest["layers"][-1]["digest"])
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    proxy = fault_proxy()
    with pytest.raises(IntegrityError, match="blob bytes do not match"):
        push_image(f"{proxy.host}/{repo}", dist=dist)
    assert proxy.log == []


# -- credentials ---------------------------------------------------------------------

def test_credentials_come_from_the_environment_and_never_show(image_dist, auth_registry, monkeypatch, capsys):
    dist, digest = image_dist
    password = auth_registry.users["pusher"]
    target = f"{auth_registry.host}/alphastorm/ninfer-runtime"
    code = main(["push", "--registry", target, "--dist", str(dist)])
    err = capsys.readouterr().err
    assert code == ExitCode.REMOTE and "requires credentials" in err and ENV_USERNAME in err

    monkeypatch.setenv(ENV_USERNAME, "pusher")
    monkeypatch.setenv(ENV_PASSWORD, password + "-wrong")
    assert main(["push", "--registry", target, "--dist", str(dist)]) == ExitCode.REMOTE
    err = capsys.readouterr().err
    assert "denied" in err and password not in err and "environment" in err

    monkeypatch.setenv(ENV_PASSWORD, password)
    assert main(["push", "--registry", target, "--dist", str(dist), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["image_digest"] == digest
    basic = base64.b64encode(f"pusher:{password}".encode()).decode()
    everything = out + err + (dist / "register.json").read_text() + receipt_of(dist)[1].read_text()
    assert password not in everything and basic not in everything
    assert auth_registry.get(f"/v2/alphastorm/ninfer-runtime/manifests/{digest}", method="HEAD")[0] == 401  # really protected


def test_credentials_from_the_docker_config_file(image_dist, auth_registry, tmp_path, monkeypatch):
    dist, digest = image_dist
    config = tmp_path / "docker-config"
    config.mkdir()
    token = base64.b64encode(f"pusher:{auth_registry.users['pusher']}".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": token}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    result = push_image(f"{auth_registry.host}/alphastorm/ninfer-runtime", dist=dist)
    assert result.outputs[0].attrs["manifest_digest"] == digest
    assert token not in receipt_of(dist)[1].read_text()


def test_credentials_on_the_command_line_are_refused_without_echo(image_dist, capsys):
    dist, _digest = image_dist
    code = main(["push", "--registry", "robot:TopSecret-42@ghcr.io/alphastorm/ninfer-runtime", "--dist", str(dist)])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE and "TopSecret-42" not in err and "carries credentials" in err


def test_secrets_never_reach_the_receipt_even_if_they_match_a_value(image_dist, registry_server, repo, monkeypatch):
    # A registered secret that happens to occur in the receipt text must stop the write.
    from pipeline.errors import register_secret

    dist, digest = image_dist
    register_secret(digest[7:23])
    try:
        with pytest.raises(IntegrityError, match="would contain a credential"):
            push_image(f"{registry_server.host}/{repo}", dist=dist, no_tag=True)
        assert Register(dist).query("publication-receipt") == []
    finally:
        from pipeline import errors

        errors.current().secrets.discard(digest[7:23])


# -- the whole chain on the compiled runtime ---------------------------------------------

@pytest.mark.slow
@pytest.mark.cuda
def test_build_package_image_push_and_run_the_unpacked_server(tmp_path, sample_repo, registry_server):
    """`nox -s build-5090 package image push` through the same CLI, twice; then run the image's binary."""
    from pipeline.lanework.toolchain import for_lane

    repo_path, commit = sample_repo
    lane = find_lane(LANE)
    cudart = for_lane(lane, "pinned").library_dir / "libcudart.so.13"
    base = imagekit.build_base_layout(tmp_path / "cuda-base", cudart=cudart.resolve())
    imagekit.push_base(base, registry_server.host, "nvidia/cuda-test")
    definition = tmp_path / "definition.toml"
    definition.write_text(imagekit.definition_text(f"{registry_server.host}/nvidia/cuda-test", base.index_digest))
    # A repository of its own: the registry is shared by the session, and other tests push the same sample bytes.
    target = f"{registry_server.host}/alphastorm/ninfer-runtime-{tmp_path.name.lower()}"

    digests = []
    for run in ("a", "b"):
        dist = tmp_path / f"dist-{run}"
        assert main(["build", "--lane", "5090", "--source", f"{repo_path}@{commit}", "--rehearsal", "--dist", str(dist)]) == 0
        assert main(["package", "--lane", LANE, "--dist", str(dist)]) == 0
        assert main(["image", "--lane", LANE, "--definition", str(definition), "--dist", str(dist)]) == 0
        digests.append(Register(dist).one("oci-layout", lane=LANE, needed_by="t", produced_by="t").attrs["manifest_digest"])
    assert digests[0] == digests[1], "two runs of the chain gave different image digests"
    assert Register(tmp_path / "dist-a").query("package-build-receipt", lane=LANE), "the real package stage did not run"
    digest = digests[0]

    dist = tmp_path / "dist-a"
    assert main(["push", "--registry", target, "--dist", str(dist)]) == 0
    first = Register(dist).query("publication-receipt")[0].attrs
    assert first["uploaded_blobs"] == 3 and first["mounted_blobs"] == 2  # config + our two layers; base mounted
    # The second run's dist pushes the same digest again: no layer bytes move.
    assert main(["push", "--registry", target, "--dist", str(tmp_path / "dist-b")]) == 0
    second = Register(tmp_path / "dist-b").query("publication-receipt")[0].attrs
    assert (second["uploaded_bytes"], second["uploaded_blobs"], second["present_blobs"]) == (0, 0, 5)
    receipt = json.loads((dist / Register(dist).query("publication-receipt")[0].path).read_bytes())
    identity = json.loads((dist / LANE / "build" / "build-identity.json").read_bytes())
    archive = Register(dist).one("package-archive", lane=LANE, needed_by="t", produced_by="t")
    assert receipt["image_digest"] == digest and receipt["source_commit"] == commit == identity["patch_stack_sha"]
    assert (receipt["binary_asset"], receipt["binary_sha256"]) == (Path(archive.path).name, archive.sha256)

    copy = tmp_path / "copy"
    skopeo("copy", "--quiet", "--preserve-digests", "--src-tls-verify=false", f"docker://{target}@{digest}", f"oci:{copy}:pulled")
    bundle = tmp_path / "bundle"
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    subprocess.run([require_tool("umoci", "umoci"), "unpack", *rootless, "--image", f"{copy}:pulled", str(bundle)], capture_output=True, check=True)
    rootfs = bundle / "rootfs"
    server = rootfs / "opt" / "ninfer" / "bin" / "ninfer-serve"
    library_path = f"{rootfs}/usr/local/cuda/lib64:{rootfs}/usr/lib/x86_64-linux-gnu"
    loader = rootfs / "usr" / "lib64" / imagekit.LOADER
    # Run it with the image's own loader and libraries (libcudart from the base image).
    listed = subprocess.run([loader, "--list", "--library-path", library_path, server], capture_output=True, text=True, check=True).stdout
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", listed, flags=re.M))
    assert Path(resolved["libcudart.so.13"]).resolve() == (rootfs / "usr/local/cuda-13.1/lib64/libcudart.so.13").resolve()
    assert all(path.startswith(str(rootfs)) for path in resolved.values()), listed
    version = subprocess.run([loader, "--library-path", library_path, server, "--version"], capture_output=True, text=True, check=True, timeout=60).stdout
    expected = "ninfer-serve " + " ".join(f"{key}={identity[key]}" for key in (
        "upstream_base_sha", "patch_stack_sha", "build_profile", "build_type", "cxx_compiler",
        "cuda_compiler", "cuda_toolkit", "cuda_architecture", "source_dirty"))
    assert version.strip() == expected
    assert json.loads((rootfs / "opt" / "ninfer" / "build-identity.json").read_bytes())["binaries"] == identity["binaries"]


def test_registry_server_helper_stops_its_process(tmp_path):
    server = RegistryServer(tmp_path / "r").start()
    pid = server.process.pid
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RemoteError):
        from pipeline.infra.registry import RegistryClient, parse_push_target

        RegistryClient(parse_push_target(f"{server.host}/a"), credentials=None, retries=0).ping()
