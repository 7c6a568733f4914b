"""Fuzz harnesses: every reader of outside bytes, driven by arbitrary bytes.

One harness per target, `def harness(data: bytes, work: Path) -> None`,
registered in TARGETS.  A harness hands the bytes to the pipeline's own
reader the way the pipeline does (a file in its folder, an HTTP answer, an
archive member) and then uses what was read the way the next step would.
The rules, enforced by `run_input` for every input:

- a `PipelineError` (the reader refused the input, naming file and field) is
  a correct answer; any other exception is a bug (it would be an `internal
  error` traceback for the user);
- nothing may be written outside the input's scratch folder (`sandbox.py`);
- where a reader accepts the input, the harness checks what it read
  (round trips, the document the next stage would write): an
  AssertionError is a bug too.

Inputs that need several documents (a registry exchange, an image index
with its manifest and config) are split on SEP; seeds in corpus/<target>/
hold real examples (tests/fuzz/seeds.py makes them).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import re
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# What the code under test imports lazily, imported now: so that atheris instruments it and no
# import happens (or writes bytecode) while an input runs.
import oras.auth.token  # noqa: E402, F401, I001
import oras.container  # noqa: E402, F401
import oras.provider  # noqa: E402, F401
import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from pipeline.errors import PipelineError
from pipeline.formats import assets, identity, image_reference, lanes, receipts, sbom
from pipeline.formats.release import evidence as release_evidence
from pipeline.formats.release import problems as release_problems
from pipeline.formats.release import rules as release_rules
from pipeline.formats.release import spec as release_spec
from pipeline.infra import oci, safetar
from pipeline.infra import registry as oci_registry
from pipeline.infra.archive import read_tar_gz
from pipeline.stages import audit, image, qualify
from pipeline.util import jsonio, ui

from .sandbox import OutsideWrite, Sandbox

SEP = b"\xff\xfe\xfd"  # splits one input into several documents (never valid UTF-8, rare in tar)
CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class Target:
    name: str
    harness: Callable[[bytes, Path], None]
    max_len: int  # libFuzzer's -max_len: the largest input it generates
    doc: str
    tokens: tuple[bytes, ...] = ()  # libFuzzer's -dict: words the mutator splices in
    structure: str | None = None  # "json" or "toml": mutate parsed documents too (mutators.py)


TARGETS: dict[str, Target] = {}

# Words of the formats, for libFuzzer's dictionary: hostile values a byte mutator would rarely spell.
JSON_TOKENS = (b'"\\ud800"', b'"\\udc00"', b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0", b"1E400", b"9" * 30, b"true", b"false",
               b"null", b"[]", b"{}", b'""', b'"\\u0000"', b"\xef\xbb\xbf", b"\r", b'"../"', b'"/etc/passwd"', b'"C:\\\\x"', b'"NUL"', b"0", b"-1")
TOML_TOKENS = (b"[", b"[[", b"]]", b" = ", b'"""', b"'''", b"inf", b"nan", b"-inf", b"true", b"1979-05-27T07:32:00Z", b"0x10", b"1_000",
               b"{", b"}", b"{n}", b"{version}", b"{n:>9}", b"{0}", b"{version!r}", b"{{", b"../", b"/etc/passwd", b"C:", b"NUL", b"\\u0000")
TAR_TOKENS = (b"ustar\x0000", b"ustar  \x00", b"././@LongLink", b"path=", b"linkpath=", b"size=", b"GNU.sparse.map=", b"../", b"/", b"\x1f\x8b\x08",
              b"0000777\x00", b"00000000000\x00", b"77777777777\x00")
MANIFEST_TOKENS = (b'"release"', b'"components"', b'"ninfer"', b'"ninfer_variants"', b'"omp"', b'"model"', b'"platforms"', b'"product"',
                   b'"repository"', b'"signing"', b'"signed_files"', b'"qualification"', b'"public_url"', b'"summary"', b'"compatibility"',
                   b'"oci_reference"', b'"http://127.0.0.1:1/"', b'"https://[::1]/"', b'"http://["', b'"https://x@y/"', b"null", b"[]", b"{}", b"0",
                   b'"\\ud800"', b'"../"', b'"checksums_url"', b'"package_url"', b'"_sha256"', b'"_bytes"', b"-1", b"1e308")
REGISTRY_TOKENS = (b'"mediaType"', b'"manifests"', b'"layers"', b'"config"', b'"digest"', b'"size"', b'"annotations"', b'"platform"',
                   b'"sha256:', b'"schemaVersion"', b'"rootfs"', b'"diff_ids"', b'"os"', b'"architecture"', b'"variant"', b"null", b"[]", b"{}",
                   b"Bearer ", b"Basic ", b'realm="', b'service="', b'scope="', b'"token"', b'"access_token"', b'"errors"', b'"tags"', SEP)


def target(name: str, *, max_len: int = 16384, tokens: tuple[bytes, ...] = (), structure: str | None = None):
    def register(function: Callable[[bytes, Path], None]) -> Callable[[bytes, Path], None]:
        TARGETS[name] = Target(name, function, max_len, (function.__doc__ or "").strip().splitlines()[0], tokens, structure)
        return function

    return register


def dictionary(name: str) -> str:
    """The target's tokens in libFuzzer's dictionary format."""
    return "".join('"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\x{b:02x}" for b in token) + '"\n' for token in TARGETS[name].tokens)


class HarnessFailure(AssertionError):
    """The input made the code under test misbehave: an unexpected exception or a write outside its folder."""


_SANDBOX: Sandbox | None = None


def sandbox() -> Sandbox:
    global _SANDBOX
    if _SANDBOX is None:
        ui.set_quiet(True)
        sys.dont_write_bytecode = True  # a lazy import must not write __pycache__ outside the scratch folder
        # The runner names a scratch root it removes itself (libFuzzer may end the process without atexit).
        _SANDBOX = Sandbox(Path(os.environ["PIPELINE_FUZZ_SCRATCH"]) if os.environ.get("PIPELINE_FUZZ_SCRATCH") else None)
    return _SANDBOX


def run_input(name: str, data: bytes) -> None:
    """Run one input through one harness; raise on a bug (PipelineError refusals are fine)."""
    box = sandbox()
    work = box.enter()
    try:
        TARGETS[name].harness(bytes(data), work)
    except PipelineError:
        pass  # a refusal that names the input: the correct answer to hostile bytes
    except OutsideWrite:
        pass  # recorded by the sandbox: reported below
    finally:
        violations = box.leave()
    if violations:
        raise HarnessFailure(f"{name}: wrote outside the scratch folder: {violations[0]}" + (f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""))


def corpus_files(name: str) -> list[Path]:
    folder = CORPUS / name
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def split(data: bytes, count: int) -> list[bytes]:
    """`count` documents from one input (missing ones are empty)."""
    parts = data.split(SEP, count - 1)
    return parts + [b""] * (count - len(parts))


def _refused(call: Callable[[], object]) -> object | None:
    """The result of a reader, or None when it refused (a PipelineError)."""
    try:
        return call()
    except PipelineError:
        return None


# -- the JSON reader ----------------------------------------------------------------


@target("json", max_len=65536, tokens=JSON_TOKENS, structure="json")
def fuzz_json(data: bytes, work: Path) -> None:
    """The strict JSON reader (util/jsonio.py): bytes, files, shapes, and the canonical form of what it accepts."""
    try:
        document = jsonio.loads_document(data, source="fuzz.json")
    except PipelineError:
        document = None
    else:
        # What the strict reader accepts, Python's json reads the same way (nothing is read differently)...
        assert json.loads(data.decode("utf-8")) == document
        # ...and the pipeline can write it back and read it again (every reader's output may be re-written).
        again = jsonio.loads_document(jsonio.canonical_bytes(document, file="fuzz.json"), source="canonical")
        assert again == document, "canonical bytes do not read back as the same document"
        jsonio.compact_identity_bytes(document)
    path = work / "cwd" / "document.json"
    path.write_bytes(data)
    strict = _refused(lambda: jsonio.read_json(path))
    if strict is not None:
        assert strict == document
    _refused(lambda: jsonio.read_json_object(path, strict_bytes=False))
    _refused(lambda: jsonio.loads_object(data, source="fuzz.json"))
    _refused(lambda: jsonio.expect_list(document, source="fuzz.json", field="x"))
    # The older reader of test-run receipts (formats/test_receipt.py) refuses the same hostile shapes.
    older = _refused(lambda: jsonio.parse_strict(data, file="fuzz.json"))
    if older is not None:
        jsonio.canonical_bytes(older, file="fuzz.json")


# -- lane files -----------------------------------------------------------------------

_LANE_ID = re.compile(rb'^id = "(rtx[0-9]{4}-(?:container|windows-native))"', re.MULTILINE)


@target("lane", max_len=16384, tokens=TOML_TOKENS, structure="toml")
def fuzz_lane(data: bytes, work: Path) -> None:
    """Lane files (lanes.py): load_lane, then every name a stage renders from the lane."""
    match = _LANE_ID.search(data)
    folder = work / "lanes"
    folder.mkdir()
    path = folder / f"{match.group(1).decode() if match else 'rtx4090-windows-native'}.toml"
    path.write_bytes(data)
    lane = lanes.load_lane(path)
    # A lane that loads can name its cut: the tag round-trips and every rendered name is one file name.
    assert lane.beta_from_tag(lane.tag()) == lane.beta
    for render in (lane.tag, lane.stem, lane.release_id, lane.deployment_profile, lane.build_profile):
        assert render(lanes.MAX_BETA)
    names = assets.asset_set(lane).names()
    assert all("/" not in name and name not in (".", "..") for name in names)
    assets.payload_required(lane, [lane.binary_file(name) for name in lane.binaries])


# -- SHA256SUMS -----------------------------------------------------------------------


@target("sums", max_len=8192, tokens=(b"  ", b"\n", b"/", b"..", b"\\", b"SHA256SUMS", b"0" * 64, b"a/b", b"\r\n", b".", b"-"))
def fuzz_sums(data: bytes, work: Path) -> None:
    """Checksum files (assets.parse_sums): outer and inner sets (bare names) and the payload's (paths)."""
    for paths in (False, True):
        entries = _refused(lambda paths=paths: assets.parse_sums(data, file="SHA256SUMS", paths=paths))
        if entries is not None:
            # Exactly one way to write a set: what parses renders back to the same bytes.
            assert assets.render_sums(entries, paths=paths) == data
    _refused(lambda: assets.parse_sums(data, file="manifests/v0.13.1/rtx4090-windows-native.SHA256SUMS"))


# -- the tar and gzip reader ----------------------------------------------------------


@target("tar", max_len=65536, tokens=TAR_TOKENS)
def fuzz_tar(data: bytes, work: Path) -> None:
    """The bounded tar reader (infra/safetar.py): gzip and plain streams, member data, extraction, layers."""
    mode = data[0] % 6 if data else 0
    payload = data[1:]
    folder = work / "cwd"
    if mode == 0:  # a .tar.gz as check-assets, qualify and the image stage read it
        with safetar.SafeTar(payload, compression="gz") as archive:
            for member in archive:
                if member.isreg():
                    for _chunk in archive.chunks(member):
                        pass
    elif mode == 1:  # a plain tar, small members read into memory
        with safetar.SafeTar(payload, compression=None) as archive:
            for member in archive:
                if member.isreg():
                    archive.read_member(member, 1 << 16)
            archive.drain()
    elif mode == 2:  # extraction: nothing may land outside the target folder
        out = folder / "out"
        out.mkdir()
        with safetar.SafeTar(payload, compression=None) as archive:
            archive.extract_all(out)
    elif mode == 3:  # the package reader of check-assets (archive.read_tar_gz), on a gzip of the tar
        path = folder / "package.tar.gz"
        path.write_bytes(gzip.compress(payload, compresslevel=1, mtime=0))
        for entry in read_tar_gz(path):
            assert entry.name and not entry.name.startswith("/")
    elif mode == 4:  # the source archive check: a bounded gunzip
        path = folder / "source.tar.gz"
        path.write_bytes(payload)
        for _chunk in safetar.inflate_chunks(path):
            pass
    else:  # an image layer's diff_id (oci.uncompressed_digest), visiting every member
        path = folder / "layer.tar"
        path.write_bytes(payload)
        oci.uncompressed_digest(path, oci.LAYER_TAR, on_member=lambda member, tar: member.name)


# -- check-assets on a folder ---------------------------------------------------------

SEED_EPOCH = 1_793_534_400  # the fixed member time of the seed packages (2026-11-01)
SCRIPT_TEXT = {name: f"# {name}: lifecycle script of the fuzz set\n".encode() for name in assets.SUPPORT_SCRIPT_KEYS}
SOURCE_TAR = b""  # filled in lazily: the tar inside the set's source archive


def _source_tar() -> bytes:
    global SOURCE_TAR
    if not SOURCE_TAR:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            info = tarfile.TarInfo("ninfer/README.md")
            body = b"sample source\n"
            info.size, info.mtime, info.mode = len(body), SEED_EPOCH, 0o644
            archive.addfile(info, io.BytesIO(body))
        SOURCE_TAR = buffer.getvalue()
    return SOURCE_TAR


@functools.cache
def fuzz_lane_4090() -> lanes.Lane:
    return lanes.find_lane("4090")


@functools.cache
def shipped_lane_ids() -> tuple[str, ...]:
    return tuple(lanes.load_lanes())


def write_asset_set(folder: Path, package: bytes, lane: lanes.Lane) -> assets.AssetSet:
    """A downloaded set around `package` with every checksum and the receipt bound to its bytes
    (the attacker's repack: only the package reader itself can refuse what is inside)."""
    expected = assets.asset_set(lane)
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        expected.name_of("package"): package,
        expected.name_of("source"): gzip.compress(_source_tar(), mtime=SEED_EPOCH),
        expected.name_of("spdx"): b"{}\n",
        expected.name_of("cdx"): b"{}\n",
        **{name: SCRIPT_TEXT[name] for name in expected.scripts()},
    }
    digest = {name: hashlib.sha256(body).hexdigest() for name, body in files.items()}
    files[expected.name_of("inner-sums")] = assets.render_sums({name: digest[name] for name in expected.inner_names()})
    digest[expected.name_of("inner-sums")] = hashlib.sha256(files[expected.name_of("inner-sums")]).hexdigest()
    receipt = {
        "artifact_type": assets.RECEIPT_TYPES[expected.layout],
        "schema_version": assets.RECEIPT_SCHEMA,
        "lane": expected.lane_id,
        "component_tag": expected.component_tag,
        "package": {"filename": expected.name_of("package"), "sha256": digest[expected.name_of("package")], "bytes": len(package)},
        "source_archive": {"filename": expected.name_of("source"), "sha256": digest[expected.name_of("source")]},
        "sboms": {"spdx": {"sha256": digest[expected.name_of("spdx")]}, "cyclonedx": {"sha256": digest[expected.name_of("cdx")]}},
        "inner_checksums": {"filename": expected.name_of("inner-sums"), "sha256": digest[expected.name_of("inner-sums")]},
        "checksums": {"filename": assets.OUTER_SUMS, "role": "closed-outer-distribution-set", "entries": len(expected.outer_names()), "line_ending": "LF"},
        "qualification_status": "hardware-pending",
        "secret_values_recorded": 0,
        "support_assets": {assets.SUPPORT_SCRIPT_KEYS[name]: digest[name] for name in expected.scripts()},
    }
    files[assets.RECEIPT] = jsonio.canonical_bytes(receipt)
    digest[assets.RECEIPT] = hashlib.sha256(files[assets.RECEIPT]).hexdigest()
    files[assets.OUTER_SUMS] = assets.render_sums({name: digest[name] for name in expected.outer_names()})
    for name, body in files.items():
        (folder / name).write_bytes(body)
    return expected


def seed_payload(lane: lanes.Lane) -> dict[str, bytes]:
    """The payload of a well-formed package of `lane` (relative path -> bytes), SHA256SUMS.txt included."""
    binaries = {lane.binary_file(name): f"binary {name}\n".encode() for name in lane.binaries}
    payload: dict[str, bytes] = {
        "LICENSE": b"Apache License 2.0 (sample)\n",
        "VERSION": f"{lane.tag()}\n".encode(),
        "README.md": b"# sample package\n",
        "RELEASE_NOTES.md": b"# notes\n",
        **{f"{assets.BIN_DIR}/{name}": body for name, body in binaries.items()},
    }
    if lane.package_layout == "native-asset-set":
        payload["server-config.json"] = b"{}\n"
        payload["release-spec.json"] = b"{}\n"
        payload.update({name: SCRIPT_TEXT[name] for name in assets.SUPPORT_SCRIPT_KEYS})
    payload["build-identity.json"] = jsonio.canonical_bytes({
        "binaries": {name: hashlib.sha256(body).hexdigest() for name, body in binaries.items()},
        "runtime_dependencies": {},
        "source_tar_sha256": hashlib.sha256(_source_tar()).hexdigest(),
    })
    payload[assets.PAYLOAD_SUMS] = assets.render_sums({name: hashlib.sha256(body).hexdigest() for name, body in payload.items()}, paths=True)
    return payload


def seed_package_tar(lane: lanes.Lane) -> bytes:
    """An uncompressed tar of a well-formed package of `lane` (what the check_assets harness gzips)."""
    root = assets.asset_set(lane).package_root
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        folders = sorted({root} | {f"{root}/{name.rsplit('/', 1)[0]}" for name in seed_payload(lane) if "/" in name})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, SEED_EPOCH
            archive.addfile(info)
        for name, body in sorted(seed_payload(lane).items()):
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime = len(body), SEED_EPOCH
            info.mode = 0o755 if name.startswith(assets.BIN_DIR + "/") else 0o644
            archive.addfile(info, io.BytesIO(body))
    return trim_tar(buffer.getvalue())


def trim_tar(data: bytes) -> bytes:
    """A tar without tarfile's record padding: the members and the two zero blocks that end it."""
    end = len(data)
    while end >= 512 and data[end - 512 : end] == bytes(512):
        end -= 512
    return data[:end] + bytes(1024)


@target("check_assets", max_len=65536, tokens=TAR_TOKENS + (b"SHA256SUMS.txt", b"build-identity.json", b'"binaries"', b'"runtime_dependencies"', b'"source_tar_sha256"'))
def fuzz_check_assets(data: bytes, work: Path) -> None:
    """check-assets on a downloaded set whose package holds the input (a tar, gzipped here; or gzip bytes as given)."""
    lane = fuzz_lane_4090()
    package = data if data[:2] == b"\x1f\x8b" else gzip.compress(data, compresslevel=1, mtime=SEED_EPOCH)
    folder = work / "cwd" / "download"
    write_asset_set(folder, package, lane)
    # The lane is passed (as audit does): identifying it by name would load every lane file per input.
    assets.check_assets(folder, lane=lane)


# -- the build identity line ----------------------------------------------------------


@target("identity", max_len=4096, tokens=(b"NINFER-BUILD-IDENTITY:v1 ", b"=", b" ", b"\x00", b"true", b"false", b"upstream_base_sha=", b"source_dirty=", b"\n"))
def fuzz_identity(data: bytes, work: Path) -> None:
    """The build identity (identity.py): a binary's --version line and the identity embedded in a binary."""
    line = data.decode("utf-8", "replace")  # as build.py decodes the binary's stdout
    found = _refused(lambda: identity.parse_version_line(line, binary="ninfer-serve", origin="ninfer-serve --version"))
    if found is not None:
        again = identity.parse_identity_text(found.text(), origin="identity")  # type: ignore[attr-defined]
        assert again.values == found.values  # type: ignore[attr-defined]
        identity.check_expected(found, dict(found.values), origin="identity")  # type: ignore[arg-type, attr-defined]
    path = work / "cwd" / "ninfer-serve.exe"
    path.write_bytes(data)
    identity.embedded_identity(path)


# -- release manifests and the audit ----------------------------------------------------


def _manifest(data: bytes) -> dict | None:
    """What `audit` goes on with: a JSON object naming its release (Auditor.load_manifest)."""
    document = jsonio.loads_document(data, source="manifest.json", max_bytes=audit.MAX_RELEASE_MANIFEST_BYTES)
    if not isinstance(document, dict) or not isinstance(document.get("release"), str):
        return None
    return document


@target("manifest", max_len=65536, tokens=MANIFEST_TOKENS, structure="json")
def fuzz_manifest(data: bytes, work: Path) -> None:
    """Release manifests: audit's name gate and binding collection, compose's pins and predecessor rows."""
    manifest = _manifest(data)
    if manifest is None:
        return
    # compose and verify read the current and the predecessor's manifest of a tree
    release_evidence.collect_pins(manifest)
    for lane_id in shipped_lane_ids():
        release_evidence.predecessor_row(manifest, lane_id)
    release_rules.acceptance_subject(manifest)
    audit.check_manifest_names(manifest, file="manifest.json")
    for binding in audit.collect_bindings(manifest):
        audit.binding_problem(binding)
        assert isinstance(binding.label, str)
    audit._lane_rows(manifest)


class _Scripted(BaseAdapter):
    """A transport that answers every request from `answer(request) -> (status, headers, body)`, no socket."""

    def __init__(self, answer) -> None:
        super().__init__()
        self.answer = answer
        self.requests: list[requests.PreparedRequest] = []

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):  # type: ignore[override]
        self.requests.append(request)
        if len(self.requests) > 64:
            raise AssertionError("more than 64 requests for one input: an unbounded request loop")
        status, headers, body = self.answer(request)
        raw = urllib3.HTTPResponse(body=io.BytesIO(body), headers=headers, status=status, preload_content=False, decode_content=False, request_url=request.url)
        return HTTPAdapter.build_response(HTTPAdapter.__new__(HTTPAdapter), request, raw)

    def close(self) -> None:
        pass


def scripted_session(answer) -> requests.Session:
    session = requests.Session()
    adapter = _Scripted(answer)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


@target("audit", max_len=65536, tokens=MANIFEST_TOKENS, structure="json")
def fuzz_audit(data: bytes, work: Path) -> None:
    """A whole offline audit of a manifest file (every server answers 404), its cache inside the scratch folder."""
    if _manifest(data) is None:
        return
    folder = work / "cwd" / "manifests" / "v0.13.1"
    folder.mkdir(parents=True)
    path = folder / "manifest.json"
    path.write_bytes(data)
    session = scripted_session(lambda request: (404, {"Content-Type": "text/plain"}, b"not found\n"))
    auditor = audit.Auditor(str(path), jobs=1, cache=work / "cache" / "audit", session=session, retries=0, timeout=2.0, progress=False)
    report = auditor.run()
    report.to_json()
    report.verdict()
    json.dumps(report.to_json())


# -- lane receipts ----------------------------------------------------------------------


@target("receipt", max_len=32768, tokens=JSON_TOKENS + (b'"status"', b'"gates"', b'"gates_not_run"', b'"identity"', b'"redacted"', b'"imported"', b'"passed"', b'"failed"', b'"hardware-pending"', b'"skipped"'), structure="json")
def fuzz_receipt(data: bytes, work: Path) -> None:
    """Lane receipts: qualify.validate_receipt / load_receipt and what compose reads from them (releasetree)."""
    root = work / "cwd" / "repo"
    rel = "manifests/v0.13.1/rtx4090-windows-native.receipt.json"
    (root / rel).parent.mkdir(parents=True)
    (root / rel).write_bytes(data)
    problems = release_problems.Problems()
    document = release_evidence.read_evidence_json(root, rel, problems, "receipts")
    if document is not None:
        facts = receipts.receipt_facts(document)
        assert isinstance(facts.gates, dict)
        receipts.publication_facts(document)
        image_reference.split_digest_reference(document.get("image_reference"))
    for problem in problems.items:
        problem.message()
        problem.to_json()
    valid = qualify.load_receipt(root / rel)
    assert valid["status"] in receipts.LANE_RECEIPT_STATUSES
    qualify.identity_differences(valid["identity"], valid["identity"])
    jsonio.canonical_bytes(valid)


# -- registry manifests and token answers ------------------------------------------------


def _rebind(data: bytes, bind: Callable[[dict], None]) -> bytes:
    """`data` with its descriptors pointed at the blobs the harness wrote (when it is a JSON object)."""
    try:
        document = jsonio.loads_document(data, source="rebind")
    except PipelineError:
        return data
    if not isinstance(document, dict):
        return data
    bind(document)
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@target("registry_manifest", max_len=32768, tokens=REGISTRY_TOKENS, structure="json")
def fuzz_registry_manifest(data: bytes, work: Path) -> None:
    """Registry manifests: an index, its platform manifest and the config, read by image.acquire_base from a layout."""
    top, platform_manifest, config, layer = split(data, 4)
    store = oci.BlobStore(work / "cwd" / "layout")

    def put(body: bytes) -> tuple[str, int]:
        digest = oci.digest_bytes(body)
        path = store.path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        return digest, len(body)

    config_digest, config_size = put(config)
    layer_digest, layer_size = put(layer)

    def bind_manifest(document: dict) -> None:
        if isinstance(document.get("config"), dict):
            document["config"].update(digest=config_digest, size=config_size)
        layers = document.get("layers")
        if isinstance(layers, list) and layers and isinstance(layers[0], dict):
            layers[0].update(digest=layer_digest, size=layer_size)

    manifest_digest, manifest_size = put(_rebind(platform_manifest, bind_manifest))

    def bind_top(document: dict) -> None:
        entries = document.get("manifests")
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, dict):
                    entry.update(digest=manifest_digest, size=manifest_size)
        bind_manifest(document)

    top_bytes = _rebind(top, bind_top)
    top_digest, top_size = put(top_bytes)
    (store.root / "oci-layout").write_bytes(b'{"imageLayoutVersion":"1.0.0"}')
    (store.root / "index.json").write_bytes(top_bytes)
    repository = oci_registry.parse_repository("docker.io/nvidia/cuda", origin="fuzz", field_name="base")
    spec = image.BaseSpec(repository, "docker.io/nvidia/cuda", None, top_digest)
    _refused(lambda: oci.read_layout_index(store.root))
    base = image.acquire_base(spec, "linux/amd64", layout=store.root)
    assert base.config_descriptor.digest == config_digest


@target("token", max_len=16384, tokens=REGISTRY_TOKENS, structure="json")
def fuzz_token(data: bytes, work: Path) -> None:
    """Registry answers: the bearer challenge, the token service's answer, the manifest, error bodies, tag lists."""
    challenge, answer, content_type, body = split(data, 4)
    challenge_text = challenge.decode("latin-1")
    digest = oci.digest_bytes(body)

    def registry(request):
        if "/v2/" not in request.url:  # the token realm
            return 200, {"Content-Type": "application/json"}, answer
        if request.headers.get("Authorization"):
            return 200, {"Content-Type": content_type.decode("latin-1")}, body
        return 401, {"WWW-Authenticate": challenge_text}, b""

    session = scripted_session(registry)
    fetched, media_type = oci_registry.fetch_manifest_by_digest("127.0.0.1:5000", "alphastorm/ninfer-runtime", digest, session=session, timeout=5.0)
    assert fetched == body and isinstance(media_type, str)


@target("token_answer", max_len=16384, tokens=REGISTRY_TOKENS, structure="json")
def fuzz_token_answer(data: bytes, work: Path) -> None:
    """One registry answer body read by the push client: oras' token backend, an error body, a tag list."""
    raw = urllib3.HTTPResponse(body=io.BytesIO(data), headers={"Content-Type": "application/json"}, status=200, preload_content=False, request_url="https://ghcr.io/token")
    response = HTTPAdapter.build_response(HTTPAdapter.__new__(HTTPAdapter), requests.Request("GET", "https://ghcr.io/token").prepare(), raw)
    backend = oci_registry._strict_token_backend(requests.Session(), plain_http=False)
    token = backend._token_of(response, "https://ghcr.io/token")
    assert token is None or (isinstance(token, str) and token)
    assert isinstance(oci_registry.registry_error_text(response), str)
    oci_registry.bearer_challenge(data.decode("latin-1"))
    tags = jsonio.loads_object(data, source="tags")
    jsonio.expect_list(tags.get("tags") or [], source="tags", field="tags")


@target("registry_client", max_len=16384, tokens=REGISTRY_TOKENS, structure="json")
def fuzz_registry_client(data: bytes, work: Path) -> None:
    """The push/pull client (oci_registry.RegistryClient) against a registry whose every answer is the input."""
    challenge, answer, body, tags = split(data, 4)
    challenge_text = challenge.decode("latin-1")

    def registry(request):
        path = request.url.split("?", 1)[0]
        if "/v2/" not in path:
            return 200, {"Content-Type": "application/json"}, answer
        if not request.headers.get("Authorization"):
            return 401, {"WWW-Authenticate": challenge_text}, b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}'
        if path.endswith("/tags/list"):
            return 200, {"Content-Type": "application/json"}, tags
        if "/manifests/" in path:
            return 200, {"Content-Type": oci.MANIFEST, "Docker-Content-Digest": oci.digest_bytes(body)}, body
        return 404, {"Content-Type": "application/json"}, answer

    repository = oci_registry.parse_push_target("ghcr.io/alphastorm/ninfer-runtime")
    client = oci_registry.RegistryClient(repository, credentials=None, retries=0, sleep=lambda seconds: None)
    adapter = _Scripted(registry)
    client._oras.session.mount("https://", adapter)
    client._oras.session.mount("http://", adapter)
    client._oras.auth.session = client._oras.session
    fetched = client.get_manifest(oci.digest_bytes(body))
    assert fetched is None or fetched[0] == body
    client.get_manifest("latest")
    client.manifest_digest("latest")
    listed = client.tags()
    assert all(isinstance(tag, str) for tag in listed)


# -- SBOMs -------------------------------------------------------------------------------

SBOM_PACKAGE = "ninfer-sample-windows-x86_64.tar.gz"
SBOM_PACKAGE_SHA256 = hashlib.sha256(b"the package archive").hexdigest()
SBOM_PAYLOAD = {"bin/ninfer-serve.exe": b"binary ninfer-serve\n", "LICENSE": b"Apache License 2.0 (sample)\n"}


def sbom_digests() -> dict[str, tuple[str, str]]:
    return {name: (hashlib.sha256(body).hexdigest(), hashlib.sha1(body, usedforsecurity=False).hexdigest()) for name, body in SBOM_PAYLOAD.items()}


@target("sbom", max_len=32768, tokens=JSON_TOKENS + (b'"spdxVersion"', b'"SPDX-2.3"', b'"creationInfo"', b'"packages"', b'"files"', b'"relationships"',
                                                      b'"checksums"', b'"SPDXID"', b'"bomFormat"', b'"specVersion"', b'"components"', b'"dependencies"',
                                                      b'"properties"', b'"hashes"', b'"bom-ref"', b'"dependsOn"'), structure="json")
def fuzz_sbom(data: bytes, work: Path) -> None:
    """SBOMs of a downloaded set (sbom.py): SPDX 2.3 and CycloneDX 1.6 as check-assets and audit read them."""
    cdx = b'"bomFormat"' in data
    path = work / "cwd" / ("sample.cdx.json" if cdx else "sample.spdx.json")
    path.write_bytes(data)
    _refused(lambda: sbom.validate_file(path))
    if cdx:
        count = sbom.verify_cdx(path, sbom_digests(), package_sha256=SBOM_PACKAGE_SHA256)
    else:
        count = sbom.verify_spdx(path, sbom_digests(), package_name=SBOM_PACKAGE, package_sha256=SBOM_PACKAGE_SHA256)
    assert isinstance(count, int)


# -- release.toml -------------------------------------------------------------------------


_RELEASE_NAME = re.compile(rb'^release = "(v[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})"', re.MULTILINE)


@functools.cache
def shipped_lanes() -> dict[str, lanes.Lane]:
    return lanes.load_lanes()


@target("release_toml", max_len=16384, tokens=TOML_TOKENS + (b"[lanes.rtx4090-windows-native]", b'from = "pins"', b'checksums_file = "', b"predecessor = "),
        structure="toml")
def fuzz_release_toml(data: bytes, work: Path) -> None:
    """release.toml, the release input compose and verify read (releasetree.load_release_toml)."""
    named = _RELEASE_NAME.search(data)
    name = named.group(1).decode() if named else "v0.13.1"  # the folder the file names (vX.Y.Z only)
    root = work / "cwd" / "repo"
    path = root / "manifests" / name / "release.toml"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    release = release_spec.load_release_toml(root, name, shipped_lanes())
    assert release.release == name and set(release.lanes) <= set(shipped_lanes())
    for lane_input in release.lanes.values():
        if "checksums_file" in lane_input.pins:  # what compose copies: a file of the repository only
            assert (root / lane_input.pins["checksums_file"]).resolve().is_relative_to(root.resolve())
