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
from urllib.parse import urlsplit

# What the code under test imports lazily, imported now: so that atheris instruments it and no
# import happens (or writes bytecode) while an input runs.
import oras.auth.token  # noqa: E402, F401, I001
import oras.container  # noqa: E402, F401
import oras.provider  # noqa: E402, F401
import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from pipeline.errors import PipelineError
from pipeline.formats import (
    acceptance,
    assets,
    ci_checks,
    cut_ledger,
    identity,
    lanes,
    provenance,
    receipts,
    routes,
    sbom,
)
from pipeline.formats.release import evidence as release_evidence
from pipeline.formats.release import manifest as release_manifest
from pipeline.formats.release import problems as release_problems
from pipeline.formats.release import spec as release_spec
from pipeline.infra import attestations, github, image_reference, oci, safetar
from pipeline.infra import registry as oci_registry
from pipeline.infra.archive import read_tar_gz
from pipeline.lanework import source as source_reader
from pipeline.stages import accept, audit, image, publish, qualify
from pipeline.stages.accept import bundle as accept_bundle
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
        assert render(cut_ledger.MAX_BETA)
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


def _manifest(data: bytes) -> release_manifest.ReleaseManifest | None:
    """What `audit` goes on with: a manifest naming its release (Auditor.load_manifest)."""
    manifest = release_manifest.parse_manifest(data, source="manifest.json", check_type=False, max_bytes=audit.MAX_RELEASE_MANIFEST_BYTES)
    if not isinstance(manifest.release, str):
        return None
    return manifest


@target("manifest", max_len=65536, tokens=MANIFEST_TOKENS, structure="json")
def fuzz_manifest(data: bytes, work: Path) -> None:
    """Release manifests: audit's name gate and binding collection, compose's pins and predecessor rows."""
    parsed = _manifest(data)
    if parsed is None:
        return
    manifest = dict(parsed.document)
    # compose and verify read the current and the predecessor's manifest of a tree
    release_evidence.collect_pins(manifest)
    for lane_id in shipped_lane_ids():
        release_evidence.predecessor_row(manifest, lane_id)
    release_manifest.acceptance_subject(manifest)
    audit.check_manifest_names(parsed, file="manifest.json")
    for binding in audit.collect_bindings(parsed):
        audit.binding_problem(binding)
        assert isinstance(binding.label, str)
    for where, row in release_manifest.published_set_rows(manifest):
        release_manifest.published_set(row, field=where)
    for record in release_manifest.evidence_records(manifest):
        assert isinstance(record.field, str)


class _Scripted(BaseAdapter):
    """A transport that answers every request from `answer(request) -> (status, headers, body)`, no socket."""

    def __init__(self, answer, limit: int = 64) -> None:
        super().__init__()
        self.answer = answer
        self.limit = limit
        self.requests: list[requests.PreparedRequest] = []

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):  # type: ignore[override]
        self.requests.append(request)
        if len(self.requests) > self.limit:
            raise AssertionError(f"more than {self.limit} requests for one input: an unbounded request loop")
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


# -- issue #18: the readers of the acceptance, provenance, source-archive and publication stages ---------

FUZZ_COMMIT = "7a25cd72f490183e4113f1e84e68e36d653ddd28"  # the commit the seed bundles name (any 40-hex commit)
FUZZ_TAG = "v0.7.0-qwen38-4090-beta.2"  # the tag the GitHub harness asks about
ROUTE_TOKENS = (b"## Route `", b"`: ", b"```sh\n", b"```powershell\n", b"```\n", b"~~~sh\n", b"~~~\n", b"````", b" example", b" requires=gpu",
                b" requires=network,oci-engine", b" requires=", b"```parameters\n", b"[OMP_NINFER_X]\n", b"NAME=value\n", b"BASH_ENV=x\n", b"LD_PRELOAD\n",
                b"<!--", b"-->", b"> ```", b"    ```", b"\t```", b"\n===\n", b"\n---\n", b"# ", b"### ", b"#", b"pinned components.ninfer.oci_reference",
                b"docker pull ghcr.io/a/b:", b":latest", b"https://", b"sha256:", b"0" * 64, b"\r", b"\t", b"\xef\xbb\xbf", b"\x00", b"\xc3\xa9", b"\xed\xa0\x80")
ACCEPTANCE_TOKENS = JSON_TOKENS + (b'"artifact_type"', b'"omp_ninfer_acceptance_bundle"', b'"omp_ninfer_acceptance_run_receipt"', b'"release-route"',
                                   b'"runbook"', b'"release"', b'"candidate_commit"', b'"manifest"', b'"document"', b'"route"', b'"parameters"', b'"steps"',
                                   b'"text"', b'"sha256"', b'"requires"', b'"host_kind"', b'"environment"', b'"variables"', b'"capabilities"', b'"status"',
                                   b'"passed"', b'"not-run"', b'"BASH_ENV"', b'"PATH"', b'"LD_PRELOAD"', b'"../etc/passwd"', b'"/abs"', b'"v0.13.1"', SEP)
PROVENANCE_TOKENS = JSON_TOKENS + (b'"_type"', b'"subject"', b'"predicateType"', b'"predicate"', b'"buildDefinition"', b'"runDetails"', b'"buildType"',
                                   b'"externalParameters"', b'"internalParameters"', b'"resolvedDependencies"', b'"byproducts"', b'"builder"', b'"metadata"',
                                   b'"annotations"', b'"digest"', b'"gitCommit"', b'"gitTree"', b'"source-tar"', b'"source-commit"', b'"source-tree"',
                                   b'"commit_time"', b'"subdir"', b'"kind"', b'"invocationId"', b'"builderDependencies"', b'"uri"', b'"startedOn"')
GITHUB_TOKENS = JSON_TOKENS + (b'"id"', b'"tag_name"', b'"name"', b'"draft"', b'"prerelease"', b'"immutable"', b'"upload_url"', b'"assets"', b'"size"',
                               b'"digest"', b'"state"', b'"uploaded"', b'"starter"', b'"object"', b'"type"', b'"sha"', b'"commit"', b'"tag"', b'"enabled"',
                               b'"resources"', b'"core"', b'"remaining"', b'"files"', b'"filename"', b'"permissions"', b'"push"', b'"ref"', b'"message"',
                               b'"errors"', b'"_status"', b'"_headers"', b'"retry-after"', b'"x-ratelimit-remaining"', b'"link"', b'"' + FUZZ_TAG.encode() + b'"', SEP)


def _accepted(call: Callable[[], object], what: str) -> object:
    """The result of a step that must not refuse (the pipeline wrote or accepted the input before): a refusal is a bug."""
    try:
        return call()
    except PipelineError as exc:
        raise HarnessFailure(f"{what} refused what the pipeline accepted before: {exc.render()}") from exc


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- route documents ------------------------------------------------------------------------


@functools.cache
def _release_manifest() -> dict:
    """The candidate manifest the static checks of a release route read (the shipped v0.13.1 manifest)."""
    root = Path(__file__).resolve().parents[2]
    return jsonio.loads_object((root / "manifests" / "v0.13.1" / "manifest.json").read_bytes(), source="manifest.json")


@target("routes", max_len=65536, tokens=ROUTE_TOKENS)
def fuzz_routes(data: bytes, work: Path) -> None:
    """Route documents (routes.scan) on hostile Markdown: what scans, bundles, validates and matches itself again."""
    path = "docs/QUICKSTART.md"
    document = routes.scan(data, path)
    lines = data.decode("utf-8").split("\n")
    assert document.sha256 == _sha256(data) and document.bytes == len(data) and document.routes
    for route_id, route in document.routes.items():
        assert route.id == route_id and route.steps and {s.shell for s in route.steps} == {route.shell}
        for position, step in enumerate(route.steps, start=1):
            # A step is exactly the lines between its fences, each with its LF, and hashes to its recorded digest.
            assert step.index == position and route.heading_line < step.line_start <= step.line_end <= route.end_line
            assert step.text == "".join(line + "\n" for line in lines[step.line_start - 1 : step.line_end])
            assert _sha256(step.text.encode()) == step.sha256 and len(step.text.encode()) == step.bytes
        declared = document.parameters_of(route_id)
        assert all(routes.parameter_name_problem(p.name) is None for p in declared)
        # Every declaration states a known grammar that its default matches; no step holds a hidden character.
        assert all(p.kind in routes.PARAMETER_KINDS and (p.default is None or routes.parameter_value_problem(p.kind, p.default) is None) for p in declared)
        assert all(routes.hidden_character(step.text) is None for step in route.steps)
        # What `accept bundle` makes of the route (a runbook and a release route), `accept run` must read back
        # and find to be the document's own text.
        findings, fields = _accepted(lambda route_id=route_id: accept.static_findings(document, route_id, manifest=None, release=None), "static_findings")  # type: ignore[misc]
        _accepted(lambda route_id=route_id: accept.static_findings(document, route_id, manifest=_release_manifest(), release="v0.13.1"), "static_findings")
        bundle = accept_bundle._bundle_document("runbook", None, None, None, path, data, FUZZ_COMMIT, document, route_id, acceptance.DEFAULT_HOST_KIND[route.shell], None, False, fields)
        written = acceptance.canonical(bundle)
        read = _accepted(lambda written=written: acceptance.validate_bundle(acceptance.loads_strict(written, file="bundle.json"), file="bundle.json"), "validate_bundle")
        _accepted(lambda read=read: acceptance.check_against_document(read, document, file="bundle.json", where="the fuzz document"), "check_against_document")  # type: ignore[arg-type]
        assert [p["name"] for p in read["parameters"]] == [p.name for p in declared]  # type: ignore[index]


# -- acceptance bundles and run receipts --------------------------------------------------------

# The route document of the acceptance seeds (a fixed text, so that the seeds do not follow docs/QUICKSTART.md).
ROUTE_DOCUMENT = b"""# Fuzz runbook

The route document the acceptance harness checks bundles against.

```parameters
# a mirror, optional
[OMP_NINFER_MIRROR]: mirrors
```

## Route `check`: check a clone

```parameters
GIT_AUTHOR_NAME: text = fuzz
OMP_NINFER_LANE: lane
```

```sh
echo "lane $OMP_NINFER_LANE"
python3 -m pipeline verify --release "$OMP_NINFER_RELEASE"
```

```sh requires=network
python3 -m pip install --quiet -e .
```

```sh example
echo not a step
```

## Route `windows`: a Windows route

```powershell
Write-Output "hello $env:OMP_NINFER_LANE"
```
"""
ROUTE_DOCUMENT_PATH = "docs/RUNBOOK.md"


@functools.cache
def route_document() -> routes.Document:
    return routes.scan(ROUTE_DOCUMENT, ROUTE_DOCUMENT_PATH)


@target("acceptance", max_len=65536, tokens=ACCEPTANCE_TOKENS, structure="json")
def fuzz_acceptance(data: bytes, work: Path) -> None:
    """Acceptance bundles and run receipts (formats/acceptance.py): as accept run and accept compose read them."""
    bundle_bytes, receipt_bytes = split(data, 2)
    document = route_document()
    bundle = _refused(lambda: acceptance.validate_bundle(acceptance.loads_strict(bundle_bytes, file="bundle.json"), file="bundle.json"))
    if isinstance(bundle, dict):
        # What `accept run` does before the first step: where its receipt goes, the document check, the environment.
        dist = work / "cwd" / "dist"
        dist.mkdir()
        where = accept.receipt_path(dist, bundle, _sha256(bundle_bytes), file="bundle.json")
        assert where.resolve().is_relative_to((dist / accept.OUTPUT_DIR).resolve()), where
        _refused(lambda: acceptance.check_against_document(bundle, document, file="bundle.json", where="the fuzz clone"))
        options = accept.RunOptions(clone=work / "cwd", offered={"OMP_NINFER_LANE": "rtx4090-windows-native"})
        made = _refused(lambda: accept.run_environment(bundle, options, work / "cwd" / "run"))
        if made is not None:
            env, sources = made  # type: ignore[misc]
            assert set(env) <= accept.RUNNER_VARIABLES | set(sources), sorted(env)
            assert all(routes.parameter_name_problem(name) is None for name in sources)
        for step in bundle["steps"]:
            acceptance.check_block(step["text"], step["line_start"], manifest=None, release=None)
    receipt = acceptance.validate_receipt(acceptance.loads_strict(receipt_bytes, file="receipt.json"), file="receipt.json")
    acceptance.canonical(receipt)
    if not isinstance(bundle, dict):
        return
    # What `accept compose` checks of a receipt and its bundle.
    item = accept.Loaded(Path("receipt.json"), receipt_bytes, receipt, bundle_bytes, bundle, "bundle.json")
    _refused(lambda: accept.check_receipt(item, bundle["route"]["host_kind"]))
    accept.check_receipt_parameters(item, document)


# -- provenance statements ----------------------------------------------------------------------


@target("provenance", max_len=65536, tokens=PROVENANCE_TOKENS, structure="json")
def fuzz_provenance(data: bytes, work: Path) -> None:
    """Provenance statements (provenance.read_statement), and what build, rebuild and audit read of one."""
    origin = "set.provenance.intoto.json"
    statement = provenance.read_statement(data, origin=origin)
    assert statement.external["source_commit"] and statement.build_type in provenance.BUILD_TYPES and statement.builder_id
    # What the pipeline writes of a statement it read reads back as the same statement.
    written = _refused(lambda: jsonio.canonical_bytes(statement.document, indent=2))
    if written is not None:
        again = _accepted(lambda: provenance.read_statement(written, origin="canonical"), "read_statement")  # type: ignore[arg-type]
        assert again.subjects == statement.subjects and again.external == statement.external and again.document == statement.document  # type: ignore[attr-defined]
    provenance.check_subjects(statement, dict(statement.subjects), origin=origin)  # its own subjects: never refused
    external = statement.external
    provenance.check_parameters(statement, lane=external["lane"], tag=external["component_tag"], source_commit=external["source_commit"], origin=origin)
    for item in statement.dependencies():
        assert statement.dependency(item["name"]) is not None
    for name in ("runtime/lanes/rtx4090-windows-native.toml", provenance.LOCK_NAME):  # rebuild --verify's instructions check
        item = statement.dependency(name)
        recorded = (item or {}).get("digest", {}).get("sha256")
        assert recorded is None or isinstance(recorded, str)
    # build --source-archive: the archive's claim, and the source the build identity records from it.
    claim = provenance.archive_claim(statement, origin=origin, strict=False)
    spec = source_reader.SourceSpec("archive", str(work / "cwd" / "source.tar"), claim.commit, claim=claim)
    resolved = source_reader.ResolvedSource(spec, "", claim.commit, claim.tree, 0, str(claim.recorded_dict.get("subdir") or ""), archive=b"")
    assert isinstance(resolved.kind, str)
    jsonio.canonical_bytes(resolved.to_json())


# -- source archives ----------------------------------------------------------------------------


@target("source_archive", max_len=65536, tokens=TAR_TOKENS + (b"comment=", b"52 comment=" + FUZZ_COMMIT.encode() + b"\n", b"pax_global_header", b"host-dependencies.toml",
                                                                 b"13 mtime=nan\n", b"13 mtime=inf\n", b"16 mtime=1e+300\n", b"12 mtime=-5\n"))
def fuzz_source_archive(data: bytes, work: Path) -> None:
    """Source archives (lanework/source.py): hash first, then the bounded reader, as build --source-archive and rebuild --verify read one."""
    path = work / "cwd" / ("source.tar.gz" if data[:2] == b"\x1f\x8b" else "source.tar")
    path.write_bytes(data)
    digest, size = source_reader.hash_archive(path)  # before a single header is parsed
    tar = source_reader.read_archive(path)
    assert _sha256(tar) == digest and len(tar) == size
    facts = source_reader.archive_facts(path, origin=str(path))
    # The file and the bytes read from it are one archive: the same facts.
    assert source_reader.archive_facts(tar, origin="bytes") == facts, facts
    commit, mtime = facts
    assert commit is None or len(commit) == 40
    assert isinstance(mtime, int)
    claim = source_reader.ArchiveClaim(digest, commit or FUZZ_COMMIT, "0" * 40, (("commit_time", mtime), ("kind", "local"), ("location", None), ("subdir", "")), strict=False)
    spec = source_reader.SourceSpec("archive", str(path), claim.commit, claim=claim)
    resolved = source_reader.ResolvedSource(spec, "", claim.commit, claim.tree, mtime, "", archive=tar)
    for name in ("host-dependencies.toml", "README.md"):
        found = source_reader.source_file(resolved, name)
        assert found is None or isinstance(found, bytes)
    assert source_reader.archive_tar(resolved) == tar
    source_reader.export_tree(tar, work / "cwd" / "tree")


# -- publish's GitHub answers ----------------------------------------------------------------


class _FuzzClock(github.Clock):
    """GitHub's clock for the harness: sleeping only advances it."""

    def __init__(self) -> None:
        self.time = 1_793_534_400.0

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += max(0.0, seconds)


GITHUB_ENDPOINTS = ("releases", "assets", "ref", "tag", "immutable", "repo", "commit", "rate_limit", "release", "matching")
GITHUB_MAX_REQUESTS = 300  # then the transport fails (a connection error): an answer that keeps the client asking ends


def _github_endpoint(path: str) -> str:
    """Which answer of the input a request reads."""
    tail = path.split("/repos/alphastorm/ninfer", 1)[-1]
    if path.endswith("/rate_limit"):
        return "rate_limit"
    if tail in ("", "/"):
        return "repo"
    for prefix, name in (("/releases/tags/", "release"), ("/git/ref/tags/", "ref"), ("/git/tags/", "tag"), ("/git/matching-refs/", "matching"),
                         ("/commits/", "commit"), ("/immutable-releases", "immutable")):
        if tail.startswith(prefix):
            return name
    if tail.startswith("/releases/") and tail.endswith("/assets"):
        return "assets"
    if tail.startswith("/releases/"):
        return "release"
    return "releases"


def _github_answers(data: bytes) -> tuple[dict[str, bytes | None], dict[str, int], dict[str, dict[str, str]]]:
    """The answer bodies, statuses and headers of one input: releases, assets, ref and tag as raw bytes, the rest
    (and `_status`/`_headers` per endpoint) from a JSON object in the fifth part."""
    releases, assets_, ref, tag, rest_bytes = split(data, 5)
    bodies: dict[str, bytes | None] = {"releases": releases, "assets": assets_, "ref": ref or None, "tag": tag}
    statuses: dict[str, int] = {}
    headers: dict[str, dict[str, str]] = {}
    rest = _refused(lambda: jsonio.loads_document(rest_bytes, source="rest"))
    if isinstance(rest, dict):
        for name in GITHUB_ENDPOINTS[4:]:
            if name in rest:
                bodies[name] = json.dumps(rest[name], allow_nan=True).encode()
        for name, status in (rest.get("_status") if isinstance(rest.get("_status"), dict) else {}).items():
            if name in GITHUB_ENDPOINTS and isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599:
                statuses[name] = status
        for name, values in (rest.get("_headers") if isinstance(rest.get("_headers"), dict) else {}).items():
            if name in GITHUB_ENDPOINTS and isinstance(values, dict):
                # header names and values as a server can send them (token characters; latin-1 text without CR/LF)
                headers[name] = {str(k): str(v) for k, v in values.items() if isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9-]{1,64}", k)
                                 and isinstance(v, str) and len(v) <= 1024 and all(" " <= c <= "\xff" and c != "\x7f" for c in v)}
    return bodies, statuses, headers


def github_target() -> publish.Target:
    """The component publication the gates and the dry-run diff are checked for (two planned assets)."""
    assets_ = [{"name": name, "size": size, "sha256": _sha256(name.encode()), "source": {"root": "dist", "path": name}}
               for name, size in (("SHA256SUMS", 1234), ("ninfer-v0.7.0-windows-x86_64.tar.gz", 56789))]
    return publish.Target(kind="component", subject="rtx4090-windows-native", repository="alphastorm/ninfer", tag=FUZZ_TAG, commit=FUZZ_COMMIT,
                          name=f"NInfer {FUZZ_TAG}", body="notes", prerelease=True, make_latest=False, assets=assets_, files={})


REVIEWED_STATE = {"read": True, "tag": None, "immutable_releases": True, "releases": []}  # the state the reviewed plan saw


@target("github", max_len=32768, tokens=GITHUB_TOKENS, structure="json")
def fuzz_github(data: bytes, work: Path) -> None:
    """publish's GitHub answers (infra/github.py): tag_state, the shape checks, publish's gates and its dry-run diff."""
    bodies, statuses, headers = _github_answers(data)
    count = [0]

    def answer(request):
        count[0] += 1
        if count[0] > GITHUB_MAX_REQUESTS:
            raise requests.ConnectionError("the fuzz server stops answering")
        endpoint = _github_endpoint(urlsplit(request.url).path)
        body = bodies.get(endpoint)
        status = statuses.get(endpoint, 404 if body is None else 200)
        return status, {"Content-Type": "application/json", **headers.get(endpoint, {})}, body or b""

    client = github.GitHub("alphastorm/ninfer", "fuzz-token-0123456789", api="https://api.github.com", uploads="https://uploads.github.com",
                           clock=_FuzzClock(), max_attempts=2, max_wait=30.0, write_interval=0.0)
    adapter = _Scripted(answer, limit=GITHUB_MAX_REQUESTS + 16)  # past its own bound above the transport fails: never a finding
    client._session.mount("https://", adapter)
    state = _refused(lambda: client.tag_state(FUZZ_TAG))
    if isinstance(state, dict):
        # The normalized state is what a plan binds: plain JSON of the documented shape.
        assert state["read"] is True and (state["tag"] is None or re.fullmatch(r"[0-9a-f]{40}", state["tag"]))
        assert state["immutable_releases"] in (True, False, None)  # None: the token may not read the setting (a 403)
        for release in state["releases"]:
            assert isinstance(release["id"], int) and release["id"] > 0 and isinstance(release["draft"], bool)
            assert all(isinstance(a["name"], str) and isinstance(a["size"], int) for a in release["assets"])
        jsonio.canonical_bytes(state)
    # Each reader on its own, as cut and publish call them.
    _refused(lambda: client.release_by_tag(FUZZ_TAG))
    _refused(lambda: client.release(1))
    _refused(lambda: client.tag_names("v0.7.0"))
    _refused(lambda: client.tag_commit(FUZZ_TAG))
    _refused(lambda: client.immutable_releases())
    # publish: every gate against this GitHub (each refusal is a PipelineError), then the dry-run diff of the plan.
    target_ = github_target()
    remote = publish.Remote(client, target_)
    remote.reviewed = json.loads(json.dumps(REVIEWED_STATE))
    for _name, gate in publish.remote_gates(remote):
        _refused(gate)
    observed = remote.observe()
    if observed["read"]:
        publish.world_changes(REVIEWED_STATE, observed, target_, [])
        publish.world_changes(observed, observed, target_, [])
    plan = publish.plan_of(target_, observed)
    assert all(isinstance(line, str) for line in publish.diff_lines(plan))
    jsonio.canonical_bytes(plan)
    for body in bodies.values():  # GitHub's own words from any answer, as an error shows them
        parsed = _refused(lambda body=body: jsonio.loads_document(body or b"null", source="answer"))
        assert isinstance(github.error_text(parsed), str)



# -- GitHub's release attestations (issue #30 §3) -----------------------------------------------------

ATTESTATION_REPOSITORY = "alphastorm/omp-ninfer"
ATTESTATION_TAG = "v0.13.2"
ATTESTATION_ASSETS = {"SHA256SUMS": "5" * 64, "ninfer.tar.gz": "6" * 64}
ATTESTATION_TOKENS = JSON_TOKENS + (b'"attestations"', b'"bundle"', b'"dsseEnvelope"', b'"payload"', b'"payloadType"', b'"application/vnd.in-toto+json"',
                                    b'"subject"', b'"digest"', b'"sha256"', b'"sha1"', b'"predicateType"', b'"predicate"', b'"repository"', b'"tag"', b'"uri"')


@target("release_attestation", max_len=32768, tokens=ATTESTATION_TOKENS, structure="json")
def fuzz_release_attestation(data: bytes, work: Path) -> None:
    """GitHub's release attestations (infra/attestations.py): the attestations API answer publish reads, each bundle's statement, and the pins."""
    client = github.GitHub(ATTESTATION_REPOSITORY, "fuzz-token-0123456789", api="https://api.github.com", uploads="https://uploads.github.com",
                           clock=_FuzzClock(), max_attempts=2, max_wait=30.0, write_interval=0.0)
    client._session.mount("https://", _Scripted(lambda request: (200, {"Content-Type": "application/json"}, data), limit=8))
    found = _refused(lambda: attestations.fetch_release_attestations(client, ATTESTATION_ASSETS))
    for attestation in found or []:
        assert attestation.statement.get("predicateType") in attestations.RELEASE_PREDICATE_TYPES
        _refused(lambda a=attestation: attestations.check_release_statement(a.statement, repository=ATTESTATION_REPOSITORY, tag=ATTESTATION_TAG,
                                                                            commit=None, assets=ATTESTATION_ASSETS, origin="fuzz"))
    fine, line = attestations.record_after_publishing(client, repository=ATTESTATION_REPOSITORY, tag=ATTESTATION_TAG, commit="7" * 40,
                                                      assets=ATTESTATION_ASSETS, immutable=True, folder=work / "publish")
    assert isinstance(fine, bool) and isinstance(line, str)
    # The same bytes as one bundle on its own (what audit's gh output carries).
    statement = _refused(lambda: attestations.statement_of(data, origin="fuzz.sigstore.json"))
    if isinstance(statement, dict):
        _refused(lambda: attestations.check_release_statement(statement, repository=ATTESTATION_REPOSITORY, tag=ATTESTATION_TAG, commit="7" * 40,
                                                              assets=ATTESTATION_ASSETS, origin="fuzz"))
# -- CI at an exact commit (issue #30 §1) --------------------------------------------------------------

CI_TOKENS = (b'"total_count"', b'"check_runs"', b'"head_sha"', b'"status"', b'"conclusion"', b'"completed"', b'"in_progress"', b'"success"',
             b'"failure"', b'"neutral"', b'"skipped"', b'"html_url"', b'"app"', b'"slug"', b'"statuses"', b'"context"', b'"state"', b'"sha"',
             b'"target_url"', b'"pending"', b'"build"', b'"test"', SEP)
CI_REQUIRED = ("build", "test")


@target("ci_checks", max_len=32768, tokens=CI_TOKENS, structure="json")
def fuzz_ci_checks(data: bytes, work: Path) -> None:
    """CI at a commit (formats/ci_checks.py through ci_checks.read_ci_state): check-runs and combined-status answers, the gate, the recorded block."""
    runs_body, status_body, link = split(data, 3)

    def answer(request):
        path = urlsplit(request.url).path
        headers = {"Content-Type": "application/json"}
        if path.endswith("/check-runs") and link and "page=" not in (urlsplit(request.url).query or "").replace("per_page=", ""):
            headers["Link"] = f'<https://api.github.com{path}?page=2>; rel="next"'  # a second page: the same body again
        return 200, headers, runs_body if path.endswith("/check-runs") else status_body

    client = github.GitHub("alphastorm/ninfer", "fuzz-token-0123456789", api="https://api.github.com", uploads="https://uploads.github.com",
                           clock=_FuzzClock(), max_attempts=2, max_wait=30.0, write_interval=0.0)
    client._session.mount("https://", _Scripted(answer, limit=github.MAX_PAGES * 2 + 8))
    state = _refused(lambda: ci_checks.read_ci_state(client, FUZZ_COMMIT))
    if state is None:
        return
    line = _refused(lambda: ci_checks.require_green(state, CI_REQUIRED, declared_in="fuzz"))
    assert line is None or (isinstance(line, str) and not ci_checks.refusals(state, CI_REQUIRED))
    recorded = state.to_json(CI_REQUIRED)
    jsonio.canonical_bytes(recorded)
    again, required = ci_checks.from_recorded(json.loads(json.dumps(recorded)), file="fuzz", field="ci")  # what a plan binds reads back the same
    assert required == CI_REQUIRED and again.to_json(CI_REQUIRED) == recorded
    assert ci_checks.changes(recorded, recorded) == [] and isinstance(ci_checks.summary(recorded, file="fuzz", field="ci"), str)


# -- Debian package bases (issue #29) --------------------------------------------------------------

APT_TOKENS = (b"Package: ", b"Version: ", b"Architecture: ", b"Depends: ", b"Pre-Depends: ", b"Provides: ", b"Conflicts: ", b"Breaks: ",
              b"Multi-Arch: ", b"Filename: ", b"Size: ", b"SHA256:", b"Source: ", b" (>= ", b" | ", b":any", b"\n ", b"\n\n", b"1:", b"~",
              b"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", b"Files: *", b"License: ", b" or ", b" and ")


@target("apt_index", max_len=32768, tokens=APT_TOKENS)
def fuzz_apt_index(data: bytes, work: Path) -> None:
    """Debian repository documents (formats/apt_repository.py): a Release text, a Packages index resolved, a DEP-5 copyright."""
    from pipeline.formats import apt_repository
    from pipeline.lanework.apt_resolve import Universe, resolve

    release = _refused(lambda: apt_repository.parse_release(data, source="Release"))
    if release is not None:
        assert all(apt_repository.relpath_problem(path, hidden=True, portable=False) is None for path in release.files)
    packages = _refused(lambda: apt_repository.parse_packages(data, source="Packages", origin=0, architecture="amd64"))
    if packages:
        universe = Universe(packages, "amd64")
        selected = _refused(lambda: resolve(universe, sorted(universe.candidates)[:3], file="definition.toml"))
        if selected is not None:
            assert all(chosen.package.name == name for name, chosen in selected.items())
    licence, note = apt_repository.dep5_licence(data)
    assert isinstance(note, str) and (licence is None or isinstance(licence, str))


@target("apt_lock", max_len=16384, tokens=JSON_TOKENS, structure="json")
def fuzz_apt_lock(data: bytes, work: Path) -> None:
    """The image's package lock (formats/apt_lock.py): read, and what it accepts written back to the same reading."""
    from pipeline.formats import apt_lock

    lock = _refused(lambda: apt_lock.read_lock_bytes(data, work / "x.lock.json"))
    if lock is not None:
        for package in lock.packages:
            assert apt_lock.relpath_problem(package.filename, hidden=True, portable=False) is None and 0 <= package.source < len(lock.sources)


@target("deb", max_len=65536, tokens=TAR_TOKENS + (b"!<arch>\n", b"debian-binary   ", b"control.tar.xz  ", b"data.tar.xz     ", b"data.tar.zst    ", b"2.0\n"))
def fuzz_deb(data: bytes, work: Path) -> None:
    """A .deb (infra/deb.py) placed into a package layer (lanework/package_layer.py): ar, control and data tars, every refusal."""
    from pipeline.formats.apt_lock import LockedPackage
    from pipeline.lanework import package_layer

    path = work / "package.deb"
    path.write_bytes(data)
    locked = LockedPackage("fuzzed", "1.0-1", "amd64", "no", "pool/f/fuzzed.deb", max(len(data), 1), "0" * 64, "fuzzed", "1.0-1", 0,
                           {"package": None, "field": "base.packages", "relation": "fuzzed"})
    tree = package_layer.PackageTree("amd64", work / "tree", 1_700_000_000)
    if _refused(lambda: tree.add_package(locked, path, {})) is None:
        return
    for name, entry in tree.entries.items():  # nothing placed leaves the root or replaces a merged-/usr link
        assert ".." not in name.split("/") and not name.startswith("/")
        assert entry.kind in ("dir", "file", "symlink")
    assert tree.entries["lib"].target == "usr/lib"
    with open(work / "layer.tar", "wb") as sink:
        tree.write_tar(sink)
