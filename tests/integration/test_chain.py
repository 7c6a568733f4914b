"""The whole chain on ONE release: a maintainer signs and publishes it, an auditor re-checks it from its URL.

The release is the ready sample release the pipeline made (tests/kits/releasekit.py: the RTX 4090
native lane built, packaged, qualified, composed, accepted, pinned).  The maintainer signs it with the
real `sign` stage under the test seam (`PIPELINE_TEST_SIGSTORE`: the local Sigstore stand-in of
tests/kits/sigstore_standin.py, whose bundles the real verifier accepts), publishes the component to
the lane's runtime repository and the product release to `alphastorm/omp-ninfer`, each on its own
GitHub stand-in (tests/kits/github_standin.py), dry run first and then `--apply --plan-sha256`.

The auditor works in a fresh virtual environment holding only the verifier wheel (its third-party
dependencies reach it through a `.pth` path line, so `import pipeline` is the wheel's, never this
checkout's) and runs `python -m pipeline audit <raw manifest URL>` against the GitHub URLs, fetched from
the stand-ins through `--mirror` (the component tag through GitHub's REST API on the component stand-in).
Then the published state is tampered with, one change at a time (a repointed component tag among them),
and the audit must fail naming the item.

The auditor then rebuilds the lane's set from the source archive the component release publishes
(issue #17 §3): in the same venv, the set's SHA256SUMS (checked against the manifest's pin), every file
it lists and the set's provenance statement are downloaded from the GitHub URLs through the same mirror
mapping (`rebuild` has no `--mirror`, and its manifest route would fetch github.com itself), and
`python -m pipeline rebuild --verify <folder>` must say PASSED; a source archive with one byte changed
must not.  The lane is a Windows lane packaged from prebuilt binaries, so the auditor passes those
binaries (`--prebuilt`): the rebuild re-checks the source archive and the packaging bit for bit.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from github_standin import FakeClock, StandIn, Token, declared_checks
from loopback import LoopbackServer
from releasekit import LANE, RELEASE, sample_release
from repokit import ROOT, git
from sigstore_standin import SigstoreStandIn
from winfixtures import native_workspace

from pipeline.formats.test_receipt import SKIPS_ALLOWED_FOR_PUBLICATION, make_test_receipt, write_test_receipt
from pipeline.infra.github import GitHub
from pipeline.util.hashing import sha256_bytes, sha256_file

PRODUCT = "alphastorm/omp-ninfer"
RUNTIME = "alphastorm/ninfer"
TOKEN = "ghp_chainStandinToken0123456789abcdef0123"
TREE = f"manifests/{RELEASE}"
IDENTITY = f"https://github.com/{PRODUCT}/.github/workflows/release.yml@refs/tags/{RELEASE}"
ISSUER = "https://token.actions.githubusercontent.com"
WHEEL = "omp_ninfer_pipeline-0.1.0-py3-none-any.whl"
SUMS = "omp_ninfer_pipeline-0.1.0.SHA256SUMS"




class RawServer(LoopbackServer):
    """raw.githubusercontent.com (`git show <commit>:<path>` of the product repository) and the client's release."""

    def __init__(self, root: Path, clients: dict[str, bytes]) -> None:
        self.root = root
        self.override: dict[str, bytes] = {}  # path -> bytes served instead (a tampering)
        self.log: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                server.log.append(path)
                data = server.lookup(path)
                status = 200 if data is not None else 404
                body = data if data is not None else b"Not Found"
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.clients = clients
        self.serve(Handler)

    def lookup(self, path: str) -> bytes | None:
        if path in self.override:
            return self.override[path]
        prefix = f"/raw.githubusercontent.com/{PRODUCT}/"
        if path.startswith(prefix):
            commit, _, relative = path[len(prefix):].partition("/")
            shown = subprocess.run(["git", "-C", str(self.root), "show", f"{commit}:{relative}"], capture_output=True)
            return shown.stdout if shown.returncode == 0 else None
        name = path.rsplit("/", 1)[-1]
        if path.startswith("/github.com/can1357/oh-my-pi/releases/download/") and name in self.clients:
            return self.clients[name]
        return None


@dataclass
class Chain:
    root: Path  # the product repository, at the published commit
    dist: Path
    lanes: Path
    commit: str
    kit: SigstoreStandIn
    component: StandIn
    product: StandIn
    raw: RawServer
    component_tag: str
    venv: Path
    work: Path
    prebuilt: Path  # the lane's Windows binaries, as the release workflow's Windows job hands them on

    @property
    def manifest_url(self) -> str:
        return f"https://raw.githubusercontent.com/{PRODUCT}/{self.commit}/{TREE}/manifest.json"

    def mirrors(self) -> list[str]:
        return [
            f"https://github.com/{RUNTIME}/={self.component.url}/{RUNTIME}/",
            f"https://api.github.com/repos/{RUNTIME}/={self.component.url}/repos/{RUNTIME}/",  # the component tags (audit item 8)
            f"https://github.com/{PRODUCT}/={self.product.url}/{PRODUCT}/",
            f"https://github.com/can1357/={self.raw.base}/github.com/can1357/",
            f"https://raw.githubusercontent.com/={self.raw.base}/raw.githubusercontent.com/",
        ]

    def audit(self, name: str) -> subprocess.CompletedProcess[str]:
        """The auditor's command, in the verifier's own virtual environment, outside any checkout."""
        args = [str(self.venv / "bin" / "python"), "-m", "pipeline", "audit", self.manifest_url,
                "--repository", PRODUCT, "--certificate-identity", IDENTITY, "--certificate-oidc-issuer", ISSUER,
                "--trust-config", str(self.kit.trust_config_path), "--skip-larger-than", "1G",
                "--cache", str(self.work / "audit" / name / "cache"), "--dist", str(self.work / "audit" / name / "dist"), "--jobs", "4"]
        for mirror in self.mirrors():
            args += ["--mirror", mirror]
        cwd = self.work / "audit" / name
        cwd.mkdir(parents=True, exist_ok=True)
        return subprocess.run(args, cwd=cwd, env=auditor_env(), capture_output=True, text=True, timeout=300)

    def fetch(self, url: str) -> bytes:
        """A GitHub URL as the auditor gets it: through the same mirror mapping audit is given."""
        import urllib.request

        for mirror in self.mirrors():
            prefix, _, target = mirror.partition("=")
            if url.startswith(prefix):
                with urllib.request.urlopen(target + url[len(prefix):]) as answer:  # noqa: S310 - loopback
                    return answer.read()
        raise AssertionError(f"no mirror for {url}")

    def download_set(self, into: Path) -> Path:
        """The lane's published set and its provenance statement, as the manifest row names them."""
        manifest = json.loads(self.fetch(self.manifest_url))
        components = manifest["components"]
        [row] = [r for r in [components["ninfer"], *(components["ninfer_variants"] or [])] if r and r["id"] == LANE]
        sums = self.fetch(row["checksums_url"])
        assert sha256_bytes(sums) == row["checksums_sha256"]  # the SHA256SUMS the audited manifest binds
        base = f"{row['repository']}/releases/download/{row['release_tag']}/"
        into.mkdir(parents=True)
        (into / "SHA256SUMS").write_bytes(sums)
        for line in sums.decode().splitlines():
            name = line.split("  ", 1)[1]
            (into / name).write_bytes(self.fetch(base + name))  # as served: rebuild checks them
        statement = _statement(self)
        (into / statement).write_bytes(self.fetch(base + statement))
        return into

    def rebuild(self, name: str, folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        """The auditor's `rebuild --verify` of the downloaded set, in the verifier's venv.  --lanes-dir: the sample's
        lane file (the one its provenance names by hash), not the real one the wheel bundles."""
        where = self.work / "rebuild" / name
        args = [str(self.venv / "bin" / "python"), "-m", "pipeline", "rebuild", "--verify", str(folder), "--lane", LANE,
                "--lanes-dir", str(self.lanes), "--prebuilt", str(self.prebuilt), "--work", str(where / "work"), "--summary", str(where / "summary.json"), *extra]
        return subprocess.run(args, cwd=where.parent, env=auditor_env(), capture_output=True, text=True, timeout=300)

    def names(self, gh: StandIn, tag: str) -> list[str]:
        [release] = [r for r in gh.releases_for(tag) if not r.draft]
        return sorted(a.name for a in gh.assets_of(release))

    def asset(self, gh: StandIn, tag: str, name: str):
        [release] = [r for r in gh.releases_for(tag) if not r.draft]
        [asset] = [a for a in gh.assets_of(release) if a.name == name]
        return release, asset


def auditor_env() -> dict[str, str]:
    """No seam, no checkout on the path: what an outsider's shell holds (PYTEST_CURRENT_TEST is harmless)."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PIPELINE_TEST_SIGSTORE", "GITHUB_TOKEN", "PIPELINE_GITHUB_API", "PIPELINE_GITHUB_UPLOADS")
    return {k: v for k, v in os.environ.items() if k not in drop}


def _venv_with_wheel(wheel: Path, target: Path) -> Path:
    """A fresh venv: the wheel unpacked into its site-packages; third-party dependencies by a .pth path line only."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    python = target / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz-pipeline-dependencies.pth").write_text("\n".join(here) + "\n")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return target


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    from pipeline.formats.lanes import load_lane
    from pipeline.stages import verifier_dist as vd
    from pipeline.stages.publish import publish_lane, publish_release
    from pipeline.stages.sign import sign_release

    release = sample_release(tmp_path_factory)
    work = tmp_path_factory.mktemp("chain")
    dist = work / "dist"
    shutil.copytree(release.dist, dist)
    lanes = work / "w" / "lanes"
    shutil.copytree(release.lanes_dir, lanes)
    shutil.copytree(release.lanes_dir.parent / "cuts", work / "w" / "cuts")
    root = release.clone(work / "product", "ready")
    kit = SigstoreStandIn(work / "sigstore", identity=IDENTITY).write()
    clients = {name: f"sample client {platform}\n".encode() * 64 for platform, (name, _n, _h) in release.client["platforms"].items()}

    with contextlib.ExitStack() as stack:
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        mp.setenv("PIPELINE_TEST_SIGSTORE", str(kit.directory))
        component = stack.enter_context(StandIn(RUNTIME))
        product = stack.enter_context(StandIn(PRODUCT))
        raw = RawServer(root, clients)
        stack.callback(raw.close)
        for gh in (component, product):
            gh.tokens[TOKEN] = Token()

        # The verifier: `publish --release` ships the wheel of the tagged commit, so the product repository holds
        # the pipeline, as the real one does: this checkout's committed tree, added on top of the ready commit
        # (its own manifests/ and .gitattributes left out), at repokit's fixed date.
        snapshot = work / "pipeline-src"
        snapshot.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive, check=True)
        shutil.rmtree(snapshot / "manifests", ignore_errors=True)
        (snapshot / ".gitattributes").unlink(missing_ok=True)
        shutil.copytree(snapshot, root, dirs_exist_ok=True)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "the pipeline at this release")
        commit = git(root, "rev-parse", "HEAD")
        vd.build_verifier_dist(dist=dist, source=f"{root}@{commit}")

        # The maintainer: sign with the real stage (the seam's kit as Fulcio and Rekor).
        sign_release(RELEASE, dist=dist, manifests=root / "manifests")

        # publish --component: dry run, then apply the reviewed plan.
        # sign keeps the closed set's folder closed: the SHA256SUMS bundle goes to the set's attestations folder.
        assert not (dist / LANE / "assets" / "SHA256SUMS.sigstore.json").exists()
        assert (dist / LANE / "attestations" / "SHA256SUMS.sigstore.json").is_file()
        lane = load_lane(lanes / f"{LANE}.toml")
        cut = lane.ledger().current("0.7.0")
        component.add_commit(cut.source_commit, ["src/main.cpp"])
        component.pass_checks(cut.source_commit, lane.required_checks)
        client_c = GitHub(RUNTIME, TOKEN, api=component.url, uploads=component.uploads, clock=FakeClock(), write_interval=0)
        publish_lane(LANE, dist=dist, lanes_dir=lanes, github=client_c)
        plan = dist / "publish" / f"component-{cut.tag}" / "plan.json"
        publish_lane(LANE, dist=dist, lanes_dir=lanes, github=client_c, apply=True, plan_sha256=sha256_file(plan))

        # publish --release: the product commit on GitHub, a green test run of it; dry run, then apply.
        product.add_commit(commit, [f"{TREE}/manifest.json"])
        product.pass_checks(commit, declared_checks(root, commit))
        tree = git(root, "rev-parse", f"{commit}^{{tree}}")
        write_test_receipt(dist / "test-run-receipt.json", make_test_receipt(commit=commit, tree=tree, passed=812, failed=0, errors=0, skipped_tests=SKIPS_ALLOWED_FOR_PUBLICATION))
        client_p = GitHub(PRODUCT, TOKEN, api=product.url, uploads=product.uploads, clock=FakeClock(), write_interval=0)
        publish_release(RELEASE, root=root, dist=dist, lanes_dir=lanes, github=client_p)
        plan = dist / "publish" / f"product-{RELEASE}" / "plan.json"
        publish_release(RELEASE, root=root, dist=dist, lanes_dir=lanes, github=client_p, apply=True, plan_sha256=sha256_file(plan))
        mp.undo()  # the seam and the wrapper end with the maintainer's part

        # The auditor: the wheel from the product release's download URL, checked against the published sums.
        import urllib.request

        def download(name: str) -> bytes:
            with urllib.request.urlopen(f"{product.url}/{PRODUCT}/releases/download/{RELEASE}/{name}") as answer:  # noqa: S310 - loopback
                return answer.read()

        wheel = work / "auditor" / WHEEL
        wheel.parent.mkdir()
        wheel.write_bytes(download(WHEEL))
        sums = download(SUMS).decode()
        assert f"{sha256_file(wheel)}  {WHEEL}" in sums.splitlines(), sums
        venv = _venv_with_wheel(wheel, work / "auditor" / "venv")
        yield Chain(root, dist, lanes, commit, kit, component, product, raw, cut.tag, venv, work, native_workspace(tmp_path_factory).prebuilt)


@pytest.mark.slow
def test_the_published_release_audits_with_only_the_verifier_wheel(chain):
    where = subprocess.run([str(chain.venv / "bin" / "python"), "-c", "import pipeline; print(pipeline.__file__)"],
                           cwd=chain.work, env=auditor_env(), capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(chain.venv), where.stdout  # the wheel's, not this checkout's
    result = chain.audit("clean")
    out = result.stdout + result.stderr
    print(out)
    assert result.returncode == 0, out
    assert f"AUDIT PASSED: {RELEASE}: all " in out
    assert "FAIL:" not in out
    lines = out.splitlines()
    statement = next(n for n in chain.names(chain.component, chain.component_tag) if n.endswith(".provenance.intoto.json"))
    # Every signature the maintainer's sign stage made verifies for the auditor (the kit's trust root, given by flag).
    for signed in (f"{TREE}/manifest.json", f"{TREE}/qualification/{LANE}.SHA256SUMS"):
        assert any(line.startswith(f"OK: signature {signed} (signed by {IDENTITY}") for line in lines), out
    assert any(line.startswith(f"OK: signature {statement} (DSSE signed by {IDENTITY}") for line in lines), out
    assert any(line.startswith(f"OK: provenance {LANE} {statement} (11 subjects are exactly the set's files") for line in lines), out
    assert any(line.startswith(f"OK: set {LANE} {chain.component_tag} (closed set of 11 files") for line in lines), out
    # The component tag, read through the GitHub API on the stand-in, still names the set's commit.
    assert any(line.startswith(f"OK: tag {RUNTIME} {chain.component_tag} (names ") for line in lines), out
    # The only skips are the 19 GiB model and GitHub's own release attestations (no release here is immutable, and the
    # wheel's environment has no gh); the set and statement came from the component release on its stand-in.
    skips = [line for line in lines if line.startswith("SKIP:") and not line.startswith("SKIP: GitHub attestation ")]
    assert skips == [next(line for line in lines if line.startswith("SKIP: model "))], out
    assert any(line.startswith(f"SKIP: GitHub attestation {RUNTIME} {chain.component_tag}: ") for line in lines), out
    assert any(path.startswith(f"/{RUNTIME}/releases/download/{chain.component_tag}/{statement}") for _m, path, status in chain.component.log if status == 200)


# -- tamperings on GitHub after publication, each alone -----------------------------------------


def _statement(chain: Chain) -> str:
    return next(n for n in chain.names(chain.component, chain.component_tag) if n.endswith(".provenance.intoto.json"))


@contextlib.contextmanager
def _one_byte_changed(chain: Chain, suffix: str):
    """The component asset ending in `suffix` served with its middle byte flipped; yields (name, the bytes served)."""
    name = next(n for n in chain.names(chain.component, chain.component_tag) if n.endswith(suffix))
    _release, asset = chain.asset(chain.component, chain.component_tag, name)
    original = asset.data
    data = bytearray(original)
    data[len(data) // 2] ^= 0x01
    asset.data = bytes(data)
    try:
        yield name, asset.data
    finally:
        asset.data = original


@contextlib.contextmanager
def _swapped_byte(chain: Chain):
    with _one_byte_changed(chain, "-rtx4090.tar.gz") as (name, _data):
        yield name


@contextlib.contextmanager
def _deleted_bundle(chain: Chain):
    name = _statement(chain) + ".sigstore.json"
    release, asset = chain.asset(chain.component, chain.component_tag, name)
    index = release.asset_ids.index(asset.id)
    release.asset_ids.remove(asset.id)
    try:
        yield _statement(chain)
    finally:
        release.asset_ids.insert(index, asset.id)


@contextlib.contextmanager
def _other_subjects(chain: Chain):
    """The statement re-written for other bytes (its first subject's digest), served under its name."""
    name = _statement(chain)
    _release, asset = chain.asset(chain.component, chain.component_tag, name)
    original = asset.data
    document = json.loads(original)
    document["subject"][0]["digest"]["sha256"] = sha256_bytes(b"other bytes")
    asset.data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    try:
        yield name
    finally:
        asset.data = original


@contextlib.contextmanager
def _repointed_tag(chain: Chain):
    original = chain.component.refs[chain.component_tag]
    chain.component.set_ref(chain.component_tag, "f" * 40)
    try:
        yield chain.component_tag
    finally:
        chain.component.set_ref(chain.component_tag, original)


@contextlib.contextmanager
def _other_manifest(chain: Chain):
    """A manifest that is not the signed one, at the raw URL the auditor was given (one field changed)."""
    path = f"/raw.githubusercontent.com/{PRODUCT}/{chain.commit}/{TREE}/manifest.json"
    document = json.loads(chain.raw.lookup(path))
    document["publication"]["blockers"] = ["added after signing"]
    chain.raw.override[path] = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    try:
        yield f"{TREE}/manifest.json"
    finally:
        del chain.raw.override[path]


TAMPERINGS = {
    "swapped-byte": _swapped_byte,
    "deleted-bundle": _deleted_bundle,
    "other-subjects": _other_subjects,
    "repointed-tag": _repointed_tag,
    "other-manifest": _other_manifest,
}


def _expected(chain: Chain, case: str, item: str) -> list[str]:
    """The FAIL lines each tampering must give, and no others (prefixes: what follows names the bytes)."""
    statement_url = f"https://github.com/{RUNTIME}/releases/download/{chain.component_tag}/{_statement(chain)}"
    return {
        "swapped-byte": [f"FAIL: {LANE} {item}: SHA-256 mismatch: got ",
                         f"FAIL: set {LANE} {chain.component_tag}: {item} is not available with the bytes SHA256SUMS records"],
        "deleted-bundle": [f"FAIL: signature {item}: not signed: no DSSE bundle at {statement_url}.sigstore.json"],
        "other-subjects": [f"FAIL: provenance {LANE} {item}: {statement_url}: subject "],
        "repointed-tag": [f"FAIL: tag {RUNTIME} {item}: names {'f' * 40}, the manifest binds "],
        "other-manifest": [f"FAIL: signature {item}: "],
    }[case]


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    "swapped-byte", "deleted-bundle", "other-subjects", "other-manifest",
    "repointed-tag",  # audit item 8 reads the component tag through GitHub's REST API (mirrored to the stand-in)
])
def test_a_tampering_on_github_fails_the_audit_naming_the_item(chain, case):
    with TAMPERINGS[case](chain) as item:
        result = chain.audit(case)
    out = result.stdout + result.stderr
    fails = [line for line in out.splitlines() if line.startswith("FAIL:")]
    expected = _expected(chain, case, item)
    assert result.returncode == 1, out
    assert f"AUDIT FAILED: {RELEASE}: {len(expected)} of " in out, out
    assert len(fails) == len(expected) and all(line.startswith(prefix) for line, prefix in zip(fails, expected, strict=True)), "\n".join(fails)


# -- the auditor rebuilds the set from its published source archive ------------------------------

def _source_archive(folder: Path) -> str:
    [name] = [p.name for p in folder.iterdir() if p.name.endswith("-source.tar.gz")]
    return name


@pytest.mark.slow
def test_the_auditor_rebuilds_the_set_from_the_downloaded_source_archive(chain):
    folder = chain.download_set(chain.work / "rebuild" / "clean" / "download")
    assert (folder / _source_archive(folder)).stat().st_size > 0
    result = chain.rebuild("clean", folder)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "PASSED: verification summary " in result.stdout and "FAIL:" not in out, out
    summary = json.loads((chain.work / "rebuild" / "clean" / "summary.json").read_bytes())
    predicate = summary["predicate"]
    assert predicate["verificationResult"] == "PASSED", predicate
    assert (predicate["rebuild"]["lane"], predicate["rebuild"]["component_tag"]) == (LANE, chain.component_tag)
    listed = dict(reversed(line.split("  ", 1)) for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert {s["name"]: s["digest"]["sha256"] for s in summary["subject"]} == {**listed, "SHA256SUMS": sha256_file(folder / "SHA256SUMS")}
    assert predicate["resourceUri"] == f"https://github.com/{RUNTIME}/releases/download/{chain.component_tag}/"
    assert all(f["result"] == "same" for f in predicate["rebuild"]["files"]) and predicate["rebuild"]["files"]


@pytest.mark.slow
def test_the_auditors_rebuild_fails_a_source_archive_with_one_byte_changed(chain):
    with _one_byte_changed(chain, "-source.tar.gz") as (name, data):
        folder = chain.download_set(chain.work / "rebuild" / "one-byte" / "download")
    assert sha256_file(folder / name) == sha256_bytes(data)
    result = chain.rebuild("one-byte", folder, "--no-diffoscope")
    out = result.stdout + result.stderr
    assert result.returncode == 5, out
    assert "PASSED" not in result.stdout and "FAILED: verification summary " in result.stdout, out
    fails = [line for line in result.stdout.splitlines() if line.startswith("FAIL:")]
    assert any(line.startswith("FAIL: published set: ") and name in line for line in fails), out
    assert any(line.startswith("FAIL: provenance subjects: ") and name in line for line in fails), out
    # The archive is then built anyway (to show what it changes): this one is no readable gzip any more.
    assert any(line.startswith(("FAIL: rebuild: ", "FAIL: source archive: ")) for line in fails), out
    assert any(line.startswith(f"FAIL: {name}: ") for line in fails), out
    summary = json.loads((chain.work / "rebuild" / "one-byte" / "summary.json").read_bytes())
    assert summary["predicate"]["verificationResult"] == "FAILED"
    assert summary["predicate"]["rebuild"]["component_tag"] == chain.component_tag
