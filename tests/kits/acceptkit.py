"""Test material for documented-route acceptance (pipeline/stages/accept/).

`container_candidate` makes, once per session and through the pipeline's own stages, a
release candidate of a sample *product repository*: a git repository holding this
checkout's pipeline, docs (the real docs/QUICKSTART.md and docs/RELEASING.md, byte for
byte), lanes and runtime, plus `manifests/v1.0.0/`.  Its RTX 5090 container lane is
compiled from the sample runtime (its own repository at a fixed commit), packaged, built
into an image on a CUDA-like base (with an ld.so.cache like NVIDIA's), pushed by digest to
the session's loopback docker-registry, qualified on the "owner's hardware" (the harness
against the protocol-faithful test server) and imported; composed, committed, promoted to
candidate.  Alongside it ships the RTX 4090 native lane of tests/kits/releasekit.py, qualified
on the owner's hardware (the container lane's GPU smoke gate needs a GPU, so that lane is a
preview here).

`AssetServer` serves the release's public URLs on 127.0.0.1 (the GitHub release assets
from the pipeline's own asset folder, the client binaries, the model); `mirror()` is the
`OMP_NINFER_MIRROR` value that sends the routes there.  `containers_config()` writes the
registries/containers/storage configuration files podman and skopeo read (a plain-HTTP
loopback registry, runc, limits within this host's hard limits, private storage).

`light_candidate` is a cheap candidate for compose's refusal tests: the RTX 4090 sample
release of tests/kits/releasekit.py at its draft commit, with a small route document and an
`[acceptance]` table added, promoted to candidate.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopback import LoopbackServer, https_urls
from repokit import ROOT, SAMPLE, git, make_repo

RELEASE = "v1.0.0"
LANE = "rtx5090-container"
VENV_BIN = str(Path(sys.executable).parent)
ROUTES = {"verify": "linux-x86_64", "audit": "linux-x86_64", "rtx5090-linux": "linux-x86_64"}


def pseudo_random(size: int, seed: bytes) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:size])


PREVIEW_REASON = "RTX 5090 hardware qualification pending: the GPU smoke gate needs the lane's GPU"


def acceptance_toml(routes: dict[str, str], *, document: str = "docs/QUICKSTART.md", lanes: dict[str, str] | None = None) -> str:
    lines = ["", "[acceptance]", f'document = "{document}"']
    for route, host in sorted(routes.items()):
        lines += ["", f"[acceptance.routes.{route}]", f'host = "{host}"']
        if lanes and route in lanes:
            lines.append(f'lane = "{lanes[route]}"')
    return "\n".join(lines) + "\n"


def product_files() -> list[str]:
    """The files of this checkout a product repository holds (tracked and new, not ignored), without tests, release trees
    and .github/ (but its required-checks declaration, which `publish --release` reads from the tagged commit)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, check=True).stdout
    out = []
    for name in sorted(set(listed.decode().split("\0"))):
        if not name or (name.startswith(("tests/", ".github/")) and name != ".github/required-checks.toml") or (name.startswith("manifests/") and name != "manifests/.gitattributes"):
            continue
        if (ROOT / name).is_file():
            out.append(name)
    return out


def make_product_repo(root: Path, *, lanes_dir: Path | None = None) -> str:
    """A product repository with this checkout's files; `lanes_dir` replaces runtime/lanes (the sample's lanes)
    and the cut ledgers beside it replace runtime/cuts (a lane's current cut is data of its ledger)."""
    from pipeline.formats.lanes import cuts_dir_for

    root.mkdir(parents=True)
    for name in product_files():
        if lanes_dir is not None and name.startswith(("runtime/lanes/", "runtime/cuts/")):
            continue
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, target)
        shutil.copymode(ROOT / name, target)
    if lanes_dir is not None:
        (root / "runtime" / "lanes").mkdir(parents=True, exist_ok=True)
        for path in sorted(lanes_dir.glob("*.toml")):
            shutil.copyfile(path, root / "runtime" / "lanes" / path.name)
        (root / "runtime" / "cuts").mkdir(parents=True, exist_ok=True)
        for path in sorted(cuts_dir_for(lanes_dir).glob("*.json")):
            shutil.copyfile(path, root / "runtime" / "cuts" / path.name)
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "config", "core.autocrlf", "false")
    return commit(root, "product repository at this checkout")


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def clone_at(source: Path, target: Path, rev: str) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(source), str(target)], check=True, capture_output=True)
    git(target, "config", "core.autocrlf", "false")
    git(target, "checkout", "-q", rev)
    return target


# -- a loopback server for the release's public URLs -------------------------------------------

class AssetServer(LoopbackServer):
    """Serves bytes by URL path on 127.0.0.1 (GET and HEAD); files are read when requested."""

    def __init__(self, resolver=None) -> None:
        self.files: dict[str, bytes | Path] = {}
        self.resolver = resolver  # path -> bytes | Path | None, for files made while the server runs
        self.log: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self) -> bytes | None:
                path = self.path.split("?", 1)[0]
                server.log.append(path)
                item = server.files.get(path)
                if item is None and server.resolver is not None:
                    item = server.resolver(path)
                if isinstance(item, Path):
                    return item.read_bytes() if item.is_file() else None
                return item

            def do_GET(self):  # noqa: N802 - http.server's name
                body = self._body()
                status = 200 if body is not None else 404
                body = body if body is not None else b"Not Found"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                self.wfile.write(body)

            def do_HEAD(self):  # noqa: N802
                body = self._body()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()

        self.serve(Handler)

    def mirror(self) -> str:
        return " ".join(f"https://{host}/={self.base}/{host}/" for host in ("github.com", "api.github.com", "huggingface.co", "raw.githubusercontent.com"))

    def publish(self, url: str, data: bytes | Path) -> None:
        self.files["/" + url.split("://", 1)[1]] = data



def serve_release(server: AssetServer, manifest: dict[str, Any], assets: dict[str, Path], client: dict[str, Any]) -> None:
    """Publish every https URL of the manifest that names a file we hold: component assets by tag and
    name (from the pipeline's asset folders, read at request time), client binaries, the model."""
    clients = {name: (f"sample client {platform}\n".encode() * 64) for platform, (name, _n, _h) in client["platforms"].items()}
    for url in https_urls(manifest):
        name = url.rsplit("/", 1)[-1]
        tag = url.rsplit("/", 2)[-2]
        if "/releases/download/" in url and tag in assets and (assets[tag] / name).is_file():
            server.publish(url, assets[tag] / name)
            for statement in sorted((assets[tag].parent / "attestations").glob("*.provenance.intoto.json")):  # beside the set, as publish --component uploads it
                server.publish(url.rsplit("/", 1)[0] + "/" + statement.name, statement)
        elif name in clients:
            server.publish(url, clients[name])
        # The model (20 GB, bound by its real hash) is not served: the audit route skips it by size.
    for path, body in tag_answers(manifest).items():
        server.files[path] = body


def tag_answers(manifest: dict[str, Any]) -> dict[str, bytes]:
    """GitHub's REST answers for every published component row's tag (`GET /repos/{slug}/git/ref/tags/{tag}`,
    naming the row's source commit), by the path the mirror sends audit's tag reads to."""
    from urllib.parse import quote

    components = manifest.get("components") or {}
    rows = [components.get("ninfer"), *(components.get("ninfer_variants") or [])]
    out: dict[str, bytes] = {}
    for row in rows:
        if not isinstance(row, dict) or row.get("published") is not True:
            continue
        repository, tag, source = row.get("repository"), row.get("release_tag"), row.get("source_commit")
        if not (isinstance(repository, str) and repository.startswith("https://github.com/") and isinstance(tag, str) and isinstance(source, str)):
            continue
        slug = repository.removeprefix("https://github.com/").removesuffix(".git").strip("/")
        out[f"/api.github.com/repos/{slug}/git/ref/tags/{quote(tag, safe='')}"] = json.dumps({"ref": f"refs/tags/{tag}", "object": {"type": "commit", "sha": source}}).encode()
    return out


def containers_config(folder: Path, registry_host: str) -> dict[str, str]:
    """The containers configuration files for podman and skopeo; returns the route parameters naming them."""
    folder.mkdir(parents=True, exist_ok=True)
    registries = folder / "registries.conf"
    registries.write_text(f'unqualified-search-registries = []\n\n[[registry]]\nlocation = "{registry_host}"\ninsecure = true\n')
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1024)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)
    containers = folder / "containers.conf"
    # runc: crun refuses this host's hybrid cgroup layout; limits within the hard limits (no CAP_SYS_RESOURCE here).
    containers.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    storage = folder / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{folder / "storage"}"\nrunroot = "{folder / "run"}"\n')
    return {"CONTAINERS_REGISTRIES_CONF": str(registries), "CONTAINERS_CONF": str(containers), "CONTAINERS_STORAGE_CONF": str(storage)}


def engine_can_run(params: dict[str, str], rootfs: Path) -> tuple[bool, str]:
    """Whether podman runs a container here with this configuration, and if not, the command and its error."""
    podman = shutil.which("podman")
    if podman is None:
        return False, "podman is not installed (Debian package podman)"
    loader = "/usr/lib64/ld-linux-x86-64.so.2"
    command = [podman, "run", "--rm", "--network=none", "--rootfs", str(rootfs), loader, "--version"]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(rootfs.parent), **params}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode == 0:
        return True, ""
    return False, f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}"


# -- the container candidate --------------------------------------------------------------------

@dataclass
class ContainerCandidate:
    root: Path
    dist: Path
    work: Path
    registry: str
    image_repository: str
    source: str
    definition: Path
    config: Path
    owner_receipt: Path
    client: dict[str, Any]
    base_rootfs: Path
    lanes_dir: Path
    commits: dict[str, str] = field(default_factory=dict)

    def clone(self, target: Path, state: str = "candidate") -> Path:
        return clone_at(self.root, target, self.commits[state])

    def manifest(self, root: Path | None = None) -> dict[str, Any]:
        return json.loads(((root or self.root) / "manifests" / RELEASE / "manifest.json").read_bytes())

    def assets(self) -> dict[str, Path]:
        """Component tag -> the lane's published asset folder (both lanes' sets have a SHA256SUMS)."""
        out = {}
        for lane in (LANE, "rtx4090-windows-native"):
            folder = self.dist / lane / "assets"
            receipt = json.loads((folder / "package-build-receipt.json").read_bytes())
            out[receipt["component_tag"]] = folder
        return out


_CACHE: dict[str, Any] = {}


def build_container_lane(dist: Path, work: Path, registry_host: str, *, repository: str, lanes_dir: Path) -> dict[str, Any]:
    """cut -> build -> package -> image -> push of the 5090 lane from the sample repository (fixed commit), through the CLI.

    The cut is recorded in `lanes_dir`'s ledgers by the real cut stage, without GitHub (the documented
    cut step is host-only), so the build of that commit is the lane's current cut, not a rehearsal."""
    import imagekit

    from pipeline.cli import main
    from pipeline.formats.lanes import find_lane
    from pipeline.lanework.toolchain import for_lane
    from pipeline.stages.cut import cut_lane

    repo = work / "ninfer"
    source_commit = make_repo(repo, SAMPLE)
    source = f"{repo}@{source_commit}"
    cut_lane("5090", source=source, dist=dist, lanes_dir=lanes_dir, use_github=False)
    lane = find_lane(LANE, lanes_dir)
    assert lane.ledger().current(lane.version).source_commit == source_commit
    common = ["--dist", str(dist), "--quiet", "--lanes-dir", str(lanes_dir)]
    assert main(["build", "--lane", "5090", "--source", source, *common]) == 0
    assert main(["package", "--lane", LANE, *common]) == 0
    cudart = for_lane(lane, "pinned").library_dir / "libcudart.so.13"
    base = imagekit.build_base_layout(work / "cuda-base", cudart=cudart.resolve(), ld_cache=True)
    imagekit.push_base(base, registry_host, "nvidia/cuda-accept")
    definition = work / "definition.toml"
    definition.write_text(imagekit.definition_text(f"{registry_host}/nvidia/cuda-accept", base.index_digest))
    assert main(["image", "--lane", LANE, "--definition", str(definition), *common]) == 0
    assert main(["push", "--registry", f"{registry_host}/{repository}", "--dist", str(dist), "--quiet"]) == 0
    config = work / "server-config.json"
    from pipeline.util.jsonio import canonical_bytes

    config.write_bytes(canonical_bytes({"deployment_profile": lane.deployment_profile(), "max_context": 131072, "port": 8080}))
    # The base's root file system, for the engine probe (podman run --rootfs).
    rootfs = work / "base-rootfs"
    subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{base.layout}:{base.ref}", str(work / "base-bundle")], check=True, capture_output=True)
    (work / "base-bundle" / "rootfs").rename(rootfs)
    return {"lane": lane, "source": source, "definition": definition, "config": config, "rootfs": rootfs}


def container_candidate(tmp_path_factory, registry_host: str) -> ContainerCandidate:
    """The RTX 4090 lane of tests/kits/releasekit.py (qualified on the owner's hardware) plus the RTX 5090
    container lane built here.  The container lane's GPU smoke gate runs the packaged selftest for
    real, so without a GPU its receipt stays hardware-pending: it ships as a preview, deferred with
    its reason, and the release reaches ready on the native lane (tests/integration/test_compose.py does the same)."""
    if "container" in _CACHE:
        return _CACHE["container"]
    from releasekit import LANE as NATIVE
    from releasekit import qualify_pending, release_toml, sample_release

    from pipeline.formats.lanes import cuts_dir_for
    from pipeline.stages.compose import compose_release, promote_release
    from pipeline.util import ui

    native = sample_release(tmp_path_factory)
    ui.set_quiet(True)
    work = tmp_path_factory.mktemp("accept-candidate")
    dist = work / "dist"
    shutil.copytree(native.dist, dist)  # the native lane, already qualified on the owner's hardware
    repository = "alphastorm/ninfer-runtime-accept"
    # The sample release's lanes with their cut ledgers, copied: the container lane's cut is recorded here.
    lanes_dir = work / "runtime" / "lanes"
    shutil.copytree(native.lanes_dir, lanes_dir)
    shutil.copytree(cuts_dir_for(native.lanes_dir), cuts_dir_for(lanes_dir))
    built = build_container_lane(dist, work, registry_host, repository=repository, lanes_dir=lanes_dir)
    qualify_pending(dist, built["lane"], config=built["config"])

    root = work / "product"
    commits = {"empty": make_product_repo(root, lanes_dir=lanes_dir)}
    toml = root / "manifests" / RELEASE / "release.toml"
    toml.parent.mkdir(parents=True)
    text = release_toml(native.client, register={NATIVE: "qualified", LANE: "preview"}, preview_reason=PREVIEW_REASON)
    toml.write_text(text.replace('release = "v1.0.0"', f'release = "{RELEASE}"') + acceptance_toml(ROUTES, lanes={"rtx5090-linux": LANE}))
    compose_release(root, RELEASE, dist=dist, lanes_dir=lanes_dir)  # the product repository's lanes and cuts
    commits["draft"] = commit(root, "draft: the native lane qualified, the container lane a preview")
    promote_release(root, RELEASE, "candidate", lanes_dir=lanes_dir)
    commits["candidate"] = commit(root, "candidate")
    ui.set_quiet(False)
    candidate = ContainerCandidate(
        root=root, dist=dist, work=work, registry=registry_host, image_repository=f"{registry_host}/{repository}",
        source=built["source"], definition=built["definition"], config=built["config"], owner_receipt=native.owner_receipt,
        client=native.client, base_rootfs=built["rootfs"], lanes_dir=lanes_dir, commits=commits,
    )
    _CACHE["container"] = candidate
    return candidate


# -- a cheap candidate for compose's refusals ---------------------------------------------------

LIGHT_DOCUMENT = """# Sample routes

```parameters
GREETING: text = hello
```

## Route `first`: a first route

```sh
echo "$GREETING from $OMP_NINFER_RELEASE"
test -f "manifests/$OMP_NINFER_RELEASE/manifest.json"
```

```sh
printf 'two\\n'
```

```sh requires=gpu
nvidia-smi -L
```

## Route `second`: a second route

```sh
git rev-parse HEAD > /dev/null
```

## Route `third`: a route that fails

```sh
echo one
```

```sh
echo "about to fail" >&2
exit 3
```

```sh
echo never
```
"""


@dataclass
class LightCandidate:
    root: Path
    release: str
    lanes_dir: Path
    commits: dict[str, str]
    document: str = "docs/ROUTES.md"

    def clone(self, target: Path, state: str = "candidate") -> Path:
        return clone_at(self.root, target, self.commits[state])


def light_candidate(tmp_path: Path, tmp_path_factory, *, routes: dict[str, str] | None = None, document: str = LIGHT_DOCUMENT) -> LightCandidate:
    from releasekit import RELEASE as SAMPLE_RELEASE
    from releasekit import release_toml, sample_release

    from pipeline.formats.lanes import load_lanes
    from pipeline.stages.compose import promote_release, rebind
    from pipeline.util import ui

    release = sample_release(tmp_path_factory)
    root = release.clone(tmp_path / "product", "draft")
    ui.set_quiet(True)
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "ROUTES.md").write_text(document)
    toml = root / "manifests" / SAMPLE_RELEASE / "release.toml"
    toml.write_text(release_toml(release.client, status="qualified") + acceptance_toml(routes or {"first": "linux-x86_64", "second": "linux-x86_64"}, document="docs/ROUTES.md"))
    rebind(root, SAMPLE_RELEASE, lanes=load_lanes(release.lanes_dir))
    commits = {"draft": commit(root, "draft with acceptance routes")}
    promote_release(root, SAMPLE_RELEASE, "candidate", lanes_dir=release.lanes_dir)
    commits["candidate"] = commit(root, "candidate")
    ui.set_quiet(False)
    return LightCandidate(root, SAMPLE_RELEASE, release.lanes_dir, commits)

