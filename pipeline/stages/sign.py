"""Stage `sign`: Sigstore signatures of a release, keyless in the release workflow.

`python -m pipeline sign [--release vX.Y.Z]` runs in the release workflow on
GitHub Actions.  It signs, with the job's ambient OIDC identity (the workflow
needs `permissions: id-token: write`), the files the release tree lists in
`signing.signed_files` (the manifest and every lane's checked-in
`qualification/<lane>.SHA256SUMS`), writing `<file>.sigstore.json` beside
each, and a copy for every other file of those bytes the register knows:
each set's outer `SHA256SUMS` under `--dist`, whose bundle goes to the set's
`attestations/` folder (the set's own folder holds exactly the closed set),
where `publish --component` takes it as evidence beside the set.  Its targets come from the register:
compose's `release-tree` entries name the tree's files and their hashes (a
tree file that differs from what compose recorded is refused), and the
package stage's `outer-checksums` entries the copies.  A tree composed in
another job (the release workflow signs the committed tree) is read as it
is.  Like CPython's release tooling it signs only what is unsigned and then
verifies *every* bundle against the release tree's expected signer (the
release workflow's certificate identity and issuer), so a re-run is
idempotent and a wrong identity can never slip out.  Every bundle is
recorded as a `signature-bundle` entry (those beside tree files through
their copies under `<dist>/sign/<release>/`).  Outside GitHub Actions it
refuses (exit 7): a release is never published unsigned, and nobody signs a
release from a laptop; `--dry-run` prints the plan anywhere, and `release`
skips the stage there.

Verification is `pipeline.infra.sigstore.verify_bundle` (offline, pinned
trust roots), shared with verify, audit and publish; the expected signer is
`pipeline.formats.release.signer` (the release workflow's identity, or the one
a release tree declares), shared with publish and audit.

Provenance statements (pipeline/formats/provenance.py) of the sets and the
image the release ships are signed too, as DSSE envelopes (sigstore-python's
`Signer.sign_dsse`, payload type `application/vnd.in-toto+json`), with the
bundle `<statement>.sigstore.json` beside each; `verify_dsse_bundle` checks one
offline and requires the envelope to carry the statement's exact bytes.

Test seam: with `PIPELINE_TEST_SIGSTORE=<folder>` (a folder written by
`tests/kits/sigstore_standin.py`, resolved by
`pipeline.infra.sigstore.test_standin`), the stage signs with the kit's local
CA and transparency log instead of the ambient OIDC token and the public-good
instance, verifies with the kit's trust configuration
(`effective_trust_config`), and prints a loud warning line.  It is refused
(exit 7) unless the process that wrote the folder started this one: a test run
or a rehearsal, never an environment variable alone (docs/audit-and-sign.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.errors import EnvironmentProblem, InputError, IntegrityError, RefusedError, register_secret
from pipeline.formats.provenance import FOLDER
from pipeline.formats.release.manifest import CONTAINER_ROW, ReleaseManifest, parse_manifest
from pipeline.formats.release.names import BUNDLE_SUFFIX, OIDC_ISSUER, RELEASE_RE, sort_release_key
from pipeline.formats.release.signer import signer_from_manifest
from pipeline.infra.sigstore import (
    Sha256Digest,
    SignatureError,
    SignerIdentity,
    StandInKit,
    VerifiedSignature,
    bundle_path_for,
    effective_trust_config,
    load_trust_config,
    test_standin,
    verify_bundle,
    verify_dsse_bundle,
)
from pipeline.register import Artifact, Register
from pipeline.stage import Context, Skip, Stage, StageResult, execute
from pipeline.util import ui
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes
from pipeline.util.jsonio import loads_object
from pipeline.util.safepath import safe_relpath

MANIFEST_NAME = "manifest.json"
DEFAULT_MANIFESTS = Path("manifests")


# -- signing ---------------------------------------------------------------------


@dataclass
class SigningTarget:
    """One distinct content to sign and every file that carries it (one bundle, many copies)."""

    sha256: str
    data: bytes
    files: list[Path] = field(default_factory=list)
    dsse: bool = False  # an in-toto statement: signed as a DSSE envelope, not as a blob
    # Where a copy's bundle goes when not beside it: a set's outer SHA256SUMS lies in the closed set's folder,
    # which holds exactly the set's files, so its bundle goes to the set's attestations folder instead.
    bundle_at: dict[Path, Path] = field(default_factory=dict)

    def bundle_of(self, path: Path) -> Path:
        return self.bundle_at.get(path) or bundle_path_for(path)

    @property
    def label(self) -> str:
        return self.files[0].name if len(self.files) == 1 else f"{self.files[0].name} (+{len(self.files) - 1} copies)"


def _real_tree(directory: Path, manifests: Path) -> Path:
    """A release tree is a real folder of manifests/: a linked one holds someone else's files, never signed."""
    if directory.is_symlink() or directory.resolve().parent != manifests.resolve():
        raise InputError(
            "the release tree is a symbolic link",
            file=directory,
            found=str(directory.resolve()),
            expected=f"a real folder {directory.name}/ under {manifests}",
            why="the workflow signs the files the repository holds; a linked tree is someone else's",
            fix=f"replace the link with the tree itself (git checkout -- {directory.name})",
        )
    return directory


# -- what is signed ------------------------------------------------------------------

# A `release-tree` register entry (recorded by compose) names one file of `manifests/<release>/`:
# attrs `release` and TREE_PATH_ATTR, the file's path relative to that folder ("manifest.json",
# "qualification/<lane>.SHA256SUMS").  The entry's SHA-256 is what compose wrote.
TREE_PATH_ATTR = "tree_path"


def _check_release_name(release: str) -> None:
    if not RELEASE_RE.fullmatch(release):
        raise InputError("is not a release name", field="--release", found=release, expected="'vX.Y.Z', e.g. v0.13.1")


def tree_entries(register: Register, release: str) -> dict[str, Artifact]:
    """The register's `release-tree` entries of `release`, by path inside the tree ({} when compose recorded none)."""
    entries: dict[str, Artifact] = {}
    for entry in register.query("release-tree", release=release):
        rel = entry.attrs.get(TREE_PATH_ATTR)
        if not isinstance(rel, str) or not rel:
            raise InputError(
                f"a release-tree entry lacks its path inside the tree ({TREE_PATH_ATTR})",
                file=register.file,
                field=f"{entry.name}.attrs.{TREE_PATH_ATTR}",
                found=rel,
                expected=f"the file's path relative to manifests/{release}/, e.g. '{MANIFEST_NAME}'",
                fix="compose the release again with this pipeline",
            )
        entries[safe_relpath(rel, file=register.file, field=f"{entry.name}.attrs.{TREE_PATH_ATTR}")] = entry
    return entries


def find_release_dir(manifests: Path, release: str | None, register: Register | None = None) -> Path:
    """The release tree to sign: `--release`, else the newest release compose recorded, else the newest tree folder."""
    if release is None and register is not None:
        recorded = {str(entry.attrs.get("release")) for entry in register.query("release-tree")}
        recorded = {name for name in recorded if RELEASE_RE.fullmatch(name)}
        if recorded:
            release = max(recorded, key=sort_release_key)
    if release is not None:
        _check_release_name(release)
        directory = manifests / release
        if not (directory / MANIFEST_NAME).is_file():
            raise InputError("release tree has no manifest", file=directory / MANIFEST_NAME, fix="run compose for this release first")
        return _real_tree(directory, manifests)
    # A tree composed elsewhere (the release workflow signs the committed tree): the folders named as releases.
    candidates = [p for p in (manifests.iterdir() if manifests.is_dir() else ()) if RELEASE_RE.fullmatch(p.name) and (p / MANIFEST_NAME).is_file()]
    if not candidates:
        raise InputError("no release tree found", file=manifests, expected=f"{manifests}/vX.Y.Z/{MANIFEST_NAME}", fix="pass --release, or run compose first")
    return _real_tree(max(candidates, key=lambda path: sort_release_key(path.name)), manifests)


def signed_files(manifest: ReleaseManifest, release_dir: Path, *, file: Path) -> list[Path]:
    """The files `signing.signed_files` names (repository-relative), each inside the release tree."""
    listed = manifest.section("signing").get("signed_files")
    if listed is None:
        raise InputError(
            "declares no signed files",
            file=file,
            field="signing.signed_files",
            expected=f"the repository-relative files to sign, {release_dir.as_posix()}/{MANIFEST_NAME} among them",
            why="sign signs what the release tree lists, nothing it finds by looking around",
            fix="compose the release tree again; it writes the list",
        )
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        raise InputError("must be a list of repository-relative paths", file=file, field="signing.signed_files", found=listed)
    root = release_dir.resolve().parents[1]
    tree = release_dir.resolve()
    paths = []
    for index, relative in enumerate(listed):
        safe_relpath(relative, file=file, field=f"signing.signed_files[{index}]")
        path = (root / relative).resolve()
        if tree not in path.parents and path != tree:
            raise InputError("names a file outside the release tree", file=file, field=f"signing.signed_files[{index}]", found=relative, expected=f"a path under {release_dir.as_posix()}/")
        if not path.is_file():
            raise InputError("names a file that does not exist", file=file, field=f"signing.signed_files[{index}]", found=relative, fix="compose the release tree again")
        paths.append(path)
    if (release_dir / MANIFEST_NAME).resolve() not in paths:
        raise InputError("does not list the manifest itself", file=file, field="signing.signed_files", found=listed, expected=f"{release_dir.as_posix()}/{MANIFEST_NAME} among them")
    return paths


def _tree_bytes(path: Path, release_dir: Path, entries: dict[str, Artifact] | None, register: Register | None) -> bytes:
    """A tree file's bytes; with compose's entries, only the bytes compose recorded."""
    data = path.read_bytes()
    if entries is None:
        return data
    assert register is not None
    rel = path.relative_to(release_dir.resolve()).as_posix()
    entry = entries.get(rel)
    if entry is None:
        raise InputError(
            f"the register holds no release-tree entry for {rel}",
            file=register.file,
            field="release-tree",
            found=sorted(entries),
            expected=f"an entry with {TREE_PATH_ATTR} = {rel!r}",
            why="a file the release tree lists for signing must be one compose wrote",
            fix=f"compose the release again with --dist {register.dist}",
        )
    actual = sha256_bytes(data)
    if actual != entry.sha256 or len(data) != entry.size:
        raise IntegrityError(
            "the release tree's file differs from the bytes compose recorded",
            file=path,
            found=actual,
            expected=entry.sha256,
            why="a file of the release tree was edited after compose wrote it; signing it would sign unreviewed bytes",
            fix="compose the release again, or restore the file (git checkout -- it)",
        )
    return data


@dataclass
class SignPlan:
    """What one sign run covers: the release tree, its expected signer and one target per distinct content."""

    release_dir: Path
    manifest_file: Path
    signer: SignerIdentity
    targets: list[SigningTarget]
    from_register: bool

    @property
    def release(self) -> str:
        return self.release_dir.name

    def to_json(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "signer": self.signer.to_json(),
            "targets": [{"sha256": t.sha256, "dsse": t.dsse, "files": [str(p) for p in t.files], "bundle": [str(t.bundle_of(p)) for p in t.files]} for t in self.targets],
        }


def plan_signing(manifests: Path, release: str | None, register: Register | None, *, trust_config: str | None = None) -> SignPlan:
    """The release tree's signed files, one target per content; identical outer SHA256SUMS of the register join their target.

    With compose's `release-tree` entries in the register, every signed file
    (the manifest first) must be one of them, byte for byte.  Without them
    (a tree composed in another job, as the release workflow's committed
    tree), the tree's files are taken as they are.
    """
    release_dir = find_release_dir(manifests, release, register)
    entries = tree_entries(register, release_dir.name) if register is not None else {}
    known = entries or None
    manifest_file = release_dir / MANIFEST_NAME
    manifest = parse_manifest(_tree_bytes(manifest_file.resolve(), release_dir, known, register), source=str(manifest_file), check_type=False)
    signer = signer_from_manifest(manifest, file=manifest_file)
    if trust_config:
        signer = SignerIdentity(signer.identity, signer.issuer, signer.repository, signer.ref, trust_config)
    targets: dict[str, SigningTarget] = {}
    for path in signed_files(manifest, release_dir, file=manifest_file):
        data = _tree_bytes(path, release_dir, known, register)
        digest = sha256_bytes(data)
        target = targets.setdefault(digest, SigningTarget(digest, data))
        if path not in target.files:
            target.files.append(path)
    for artifact in register.query("outer-checksums") if register is not None else []:
        path = register.verified_path(artifact).resolve()
        target = targets.get(artifact.sha256)
        if target is None:
            # Only what the release tree lists is signed: a set the release does not ship stays unsigned.
            ui.warn(f"{path}: not among the release tree's signed files (a lane this release does not ship); not signed")
            continue
        if path not in target.files:
            target.files.append(path)  # the same bytes: the bundle is copied for the component's upload
            target.bundle_at[path] = path.parent.parent / FOLDER / (path.name + BUNDLE_SUFFIX)
    shipped_image = dig_manifest_digest(manifest)
    for artifact in register.query("provenance") if register is not None else []:
        path = register.verified_path(artifact).resolve()
        target = statement_target(path, targets, shipped_image)
        if target is None:
            ui.warn(f"{path}: the statement describes a set or image this release does not ship; not signed")
            continue
        targets.setdefault(f"dsse:{target.sha256}", target)
    return SignPlan(release_dir, manifest_file, signer, list(targets.values()), bool(entries))


def dig_manifest_digest(manifest: ReleaseManifest) -> str | None:
    """The container lane's image manifest digest a release binds (components.ninfer.oci_manifest_digest)."""
    row = manifest.section(CONTAINER_ROW)
    digest = row.get("oci_manifest_digest")
    return digest.removeprefix("sha256:") if isinstance(digest, str) else None


def statement_target(path: Path, targets: dict[str, SigningTarget], shipped_image: str | None) -> SigningTarget | None:
    """A provenance statement to sign as DSSE, when its set's outer SHA256SUMS (or its image) is what the release ships."""
    from pipeline.formats.provenance import read_statement

    data = path.read_bytes()
    statement = read_statement(data, origin=str(path))
    sums = statement.subjects.get("SHA256SUMS")  # the subject naming the set's outer SHA256SUMS
    shipped = (sums is not None and sums in targets) or (shipped_image is not None and shipped_image in statement.subjects.values())
    return SigningTarget(sha256_bytes(data), data, [path], dsse=True) if shipped else None


def refuse_outside_ci(environ: dict[str, str] | os._Environ = os.environ) -> None:
    if environ.get("GITHUB_ACTIONS") != "true":
        raise RefusedError(
            "sign runs only in the release workflow on GitHub Actions",
            why="keyless Sigstore signing binds the signature to the release workflow's OIDC identity, which exists only inside that job; "
            "a release is never published unsigned, and a signature made anywhere else would not match the release tree's expected signer",
            fix="push the release tag (or dispatch .github/workflows/release.yml on it); to see what would be signed, run 'python -m pipeline sign --dry-run'",
        )
    if not environ.get("ACTIONS_ID_TOKEN_REQUEST_URL") or not environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        raise RefusedError(
            "this GitHub Actions job cannot request an OIDC identity token",
            why="the job lacks 'permissions: id-token: write' (or runs for a pull request from a fork, which never gets one)",
            fix="give only the signing job 'permissions: {id-token: write, contents: read}'",
        )


def ambient_identity_token():
    """The job's OIDC token for audience 'sigstore', as a sigstore IdentityToken."""
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential

    try:
        raw = detect_credential()
    except IdentityError as exc:
        raise RefusedError(f"ambient OIDC credential detection failed: {exc}", fix="give the signing job 'permissions: id-token: write'") from None
    if not raw:
        raise RefusedError("no ambient OIDC credential was found", fix="run sign in the release workflow's signing job, which has 'id-token: write'")
    register_secret(raw)
    try:
        return IdentityToken(raw)
    except IdentityError as exc:
        raise RefusedError(f"the ambient OIDC token is unusable: {exc}") from None


def _token_identity(token) -> str:
    """The certificate SAN Fulcio will issue for this token.

    For GitHub Actions that is `https://github.com/<job_workflow_ref>` (the
    token's `sub` is `repo:<owner>/<repo>:ref:<ref>`, not the SAN).  The claims
    are read without a signature check: this only refuses early; the offline
    verification of the written bundle is what decides.
    """
    claims: dict[str, Any] = {}
    try:
        payload = str(token).split(".")[1]
        claims = loads_object(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)), source="the OIDC token's claims", max_bytes=64 * 1024)
    except (IndexError, ValueError, TypeError, InputError):
        claims = {}
    if claims.get("iss") == OIDC_ISSUER and isinstance(claims.get("job_workflow_ref"), str):
        return f"https://github.com/{claims['job_workflow_ref']}"
    return str(getattr(token, "identity", "") or "")


def _write_bundle(target: SigningTarget, bundle_json: bytes) -> list[Path]:
    written = []
    for path in target.files:
        out = target.bundle_of(path)
        atomic_write_bytes(out, bundle_json)
        written.append(out)
    return written


@dataclass
class SignReport:
    signer: SignerIdentity
    signed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    verified: list[dict[str, Any]] = field(default_factory=list)
    bundles: list[Path] = field(default_factory=list)


def sign_targets(
    targets: Iterable[SigningTarget],
    signer: SignerIdentity,
    *,
    context_factory: Callable[[Any], Any] | None = None,
    token_provider: Callable[[], Any] | None = None,
    overwrite: bool = False,
) -> SignReport:
    """Sign every target without a valid bundle, then verify every bundle against `signer`.

    `context_factory(trust_config)` returns an object with sigstore's
    `SigningContext.signer(token, cache=True)` interface (default:
    `SigningContext.from_trust_config`); `token_provider()` returns the identity
    token (default: the ambient GitHub Actions credential).
    """
    targets = list(targets)
    report = SignReport(signer)
    trust = load_trust_config(signer.trust_config)

    def check(target: SigningTarget, bundle_file: Path) -> VerifiedSignature:
        if target.dsse:
            return verify_dsse_bundle(
                target.data,
                bundle_file,
                identity=signer.identity,
                issuer=signer.issuer,
                trust_config=trust,
                repository=signer.repository,
                ref=signer.ref,
                name=target.files[0].name,
            )
        return verify_bundle(
            Sha256Digest(target.sha256),
            bundle_file,
            identity=signer.identity,
            issuer=signer.issuer,
            trust_config=trust,
            repository=signer.repository,
            ref=signer.ref,
        )

    pending: list[SigningTarget] = []
    for target in targets:
        existing = [target.bundle_of(p) for p in target.files if target.bundle_of(p).exists()]
        valid = None
        for bundle_file in existing:
            try:
                check(target, bundle_file)
                valid = bundle_file
                break
            except SignatureError as error:
                if not overwrite:
                    raise RefusedError(
                        f"an existing bundle does not verify: {error.reason}",
                        file=bundle_file,
                        why="sign keeps valid bundles and refuses to replace invalid ones silently",
                        fix="inspect it, then re-run with --overwrite to replace it",
                    ) from None
        if valid is not None:
            bundle_json = valid.read_bytes()
            report.bundles += _write_bundle(target, bundle_json)
            report.kept.append(target.label)
        else:
            pending.append(target)

    if pending:
        if token_provider is None:
            token_provider = ambient_identity_token
        if context_factory is None:
            from sigstore.sign import SigningContext

            context_factory = SigningContext.from_trust_config
        token = token_provider()
        actual = _token_identity(token)
        if actual and actual != signer.identity:
            raise RefusedError(
                "the workflow's identity is not the release tree's expected signer",
                found=actual,
                expected=signer.identity,
                why="the signature would name another workflow or ref than auditors are told to trust (a branch run, a renamed workflow, or the wrong tag)",
                fix="run the release workflow on the release tag, or compose the release tree for this tag",
            )
        context = context_factory(trust)
        with context.signer(token, cache=True) as handle:
            for target in pending:
                ui.info(f"signing {target.label} (sha256 {target.sha256[:12]}{', DSSE' if target.dsse else ''}) as {signer.identity}")
                if target.dsse:
                    from sigstore.dsse import Statement

                    bundle = handle.sign_dsse(Statement(target.data))  # the envelope carries these exact bytes
                else:
                    bundle = handle.sign_artifact(target.data)
                text = bundle.to_json()
                report.bundles += _write_bundle(target, text.encode("utf-8") if isinstance(text, str) else text)
                report.signed.append(target.label)

    for target in targets:
        bundle_file = target.bundle_of(target.files[0])
        try:
            verified = check(target, bundle_file)
        except SignatureError as error:
            for path in target.files:  # never leave a bundle that does not verify
                target.bundle_of(path).unlink(missing_ok=True)
            raise SignatureError(
                f"the bundle just written for {target.label} does not verify against the expected signer",
                reason=error.reason,
                file=bundle_file,
                why=error.why,
                fix="check the pinned trust configuration (pipeline/data/sigstore/README.md) and the expected signer in the release tree",
            ) from None
        report.verified.append({**verified.to_json(), "files": [str(p) for p in target.files]})
    return report


# -- the stage ---------------------------------------------------------------------

BUNDLES_DIR = "sign"  # <dist>/sign/<release>/<path in the tree>.sigstore.json: every bundle, in the register


class SignStage(Stage):
    """Sign a release's signed files in the release workflow; record one `signature-bundle` entry per bundle."""

    name = "sign"
    # Every run verifies every bundle offline against the expected signer (what the release promises);
    # signing itself is idempotent (valid bundles are kept), so running again costs no new signature.
    always_runs = True

    def __init__(
        self,
        ctx: Context,
        release: str | None,
        *,
        manifests: Path = DEFAULT_MANIFESTS,
        trust_config: str | None = None,
        overwrite: bool = False,
        environ: Mapping[str, str] | None = None,
        context_factory: Callable[[Any], Any] | None = None,
        token_provider: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(ctx)
        self.release = release
        self.manifests = manifests
        self.trust_config = trust_config
        self.overwrite = overwrite
        self.environ = os.environ if environ is None else environ
        self.context_factory = context_factory
        self.token_provider = token_provider
        self.plan: SignPlan | None = None
        self.report: SignReport | None = None
        self.standin: StandInKit | None = None

    @property
    def key(self) -> str:
        return f"sign:{self.release}" if self.release else "sign"  # sign_release always names the release

    def describe(self) -> str:
        return self.release or "newest release"

    def preflight(self) -> None:
        self.standin = test_standin(self.environ)  # the test seam (refused outside the process tree that made the kit)
        if self.standin is None:
            refuse_outside_ci(self.environ)  # before reading anything: a release is signed only in its workflow
        else:
            self.standin.warn()
        trust_config = effective_trust_config(self.trust_config, self.environ)
        self.plan = plan_signing(self.manifests, self.release, self.ctx.register, trust_config=trust_config)
        ui.step("sign", f"{self.plan.release}: {len(self.plan.targets)} distinct files, expected signer {self.plan.signer.describe()}")
        try:
            import sigstore  # noqa: F401
        except ImportError:  # pragma: no cover - the dependency is in pyproject
            raise EnvironmentProblem("the sigstore library is not installed", fix="pip install 'sigstore>=4.5,<5'") from None

    def inputs(self) -> dict[str, Any]:
        assert self.plan is not None
        return {
            "release": self.plan.release,
            "signer": self.plan.signer.to_json(),
            "targets": {t.sha256: sorted(str(p) for p in t.files) for t in self.plan.targets},
            "overwrite": self.overwrite,
        }

    def run(self) -> list[Artifact]:
        assert self.plan is not None
        plan, register = self.plan, self.ctx.register
        context_factory, token_provider = self.context_factory, self.token_provider
        if self.standin is not None:  # the test seam: the kit's "Fulcio" and "Rekor", and a token for its job
            context_factory = context_factory or self.standin.context_factory
            token_provider = token_provider or self.standin.token_provider(plan.signer.identity)
        self.report = sign_targets(plan.targets, plan.signer, context_factory=context_factory, token_provider=token_provider, overwrite=self.overwrite)
        dist = self.ctx.dist.resolve()
        tree = plan.release_dir.resolve()
        outputs: list[Artifact] = []
        for target in plan.targets:
            bundle = target.bundle_of(target.files[0]).read_bytes()  # verified by sign_targets, identical for every copy
            for path in target.files:
                if path.is_relative_to(dist):
                    lanes = [a.lane for a in register.query("outer-checksums") if register.path_of(a).resolve() == path]
                    where, lane = target.bundle_of(path), (lanes[0] if lanes else None)
                else:
                    # A bundle beside a tree file lives outside the output folder: its copy under dist is the register's.
                    where, lane = self.ctx.dist / BUNDLES_DIR / plan.release / (path.relative_to(tree).as_posix() + BUNDLE_SUFFIX), None
                    atomic_write_bytes(where, bundle)
                outputs.append(register.make("signature-bundle", where, stage=self.name, lane=lane, signed_name=path.name, signed_sha256=target.sha256, release=plan.release))
        return outputs


def sign_release(
    release: str | None,
    *,
    dist: Path | str = "dist",
    manifests: Path = DEFAULT_MANIFESTS,
    trust_config: str | None = None,
    overwrite: bool = False,
    environ: Mapping[str, str] | None = None,
    context_factory: Callable[[Any], Any] | None = None,
    token_provider: Callable[[], Any] | None = None,
) -> tuple[StageResult, SignStage]:
    ctx = Context.open(dist)
    # The stage key names the release, also when it is found rather than given (one register record per release).
    release = release or find_release_dir(manifests, None, ctx.register).name
    stage = SignStage(
        ctx,
        release,
        manifests=manifests,
        trust_config=trust_config,
        overwrite=overwrite,
        environ=environ,
        context_factory=context_factory,
        token_provider=token_provider,
    )
    return execute(stage), stage


STAGE = SignStage


def release_plan(ctx: Context, lanes: list, options) -> list:
    """`release`: sign only where keyless signing can happen (the release workflow's signing job), or under the test seam."""
    if test_standin() is not None:
        release = getattr(options, "release", None)
        if not release:
            raise Skip("no --release given")
        return [(release, lambda: sign_release(release, dist=ctx.dist)[0])]
    if os.environ.get("GITHUB_ACTIONS") != "true":
        raise Skip("signs only in the release workflow on GitHub Actions (keyless OIDC identity); 'python -m pipeline sign --dry-run' shows the plan")
    if not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL") or not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN"):
        raise Skip("this GitHub Actions job cannot request an OIDC identity token (it lacks 'permissions: id-token: write')")
    release = getattr(options, "release", None)
    if not release:
        raise Skip("no --release given")
    return [(release, lambda: sign_release(release, dist=ctx.dist)[0])]


# -- command line ----------------------------------------------------------------


def run_sign(args: argparse.Namespace) -> int:
    if args.dry_run:
        # Works anywhere and writes nothing: not even the output folder is created.
        register = Register(args.dist)
        plan = plan_signing(args.manifests, args.release, register, trust_config=args.trust_config)
        ui.step("sign", f"{plan.release}: {len(plan.targets)} distinct files, expected signer {plan.signer.describe()}")
        print(json.dumps(plan.to_json(), indent=2, sort_keys=True))
        return 0
    if test_standin() is None:  # the test seam is validated (and refused outside tests) here, before anything is touched
        refuse_outside_ci()  # before the output folder is touched
    result, stage = sign_release(args.release, dist=args.dist, manifests=args.manifests, trust_config=args.trust_config, overwrite=args.overwrite)
    report = stage.report
    assert report is not None and not result.skipped  # sign always runs
    for entry in report.verified:
        for name in entry["files"]:
            ui.result(f"OK: {name}: signed by {entry['identity']} (log index {entry['log_index']})")
    ui.step("sign", f"{len(report.signed)} signed, {len(report.kept)} already signed and verified, {len(report.bundles)} bundles")
    return 0


def register_cli(sub) -> None:
    parser = sub.add_parser(
        "sign",
        help="keyless Sigstore signing of the release manifest and outer SHA256SUMS (GitHub Actions only)",
        description=(
            "Sign the release manifest and every asset set's outer SHA256SUMS with the release workflow's "
            "ambient OIDC identity (Sigstore keyless), writing <file>.sigstore.json beside each, then verify every "
            "bundle offline against the release tree's expected signer. Refuses outside GitHub Actions (exit 7)."
        ),
    )
    parser.add_argument("--release", default=None, help="release to sign (default: the newest release compose recorded in the register, else the newest tree under --manifests)")
    parser.add_argument("--manifests", type=Path, default=DEFAULT_MANIFESTS, help="folder of release trees (default: manifests)")
    parser.add_argument("--dist", type=Path, default=Path("dist"), help="output folder whose register lists the release tree and the asset sets (default: dist)")
    parser.add_argument("--trust-config", default=None, help="'production' (default), 'staging' or a ClientTrustConfig file")
    parser.add_argument("--overwrite", action="store_true", help="replace existing bundles that do not verify")
    parser.add_argument("--dry-run", action="store_true", help="print what would be signed and the expected signer; sign nothing (works anywhere)")
    parser.add_argument("--quiet", action="store_true", help="print only errors and results")
    parser.set_defaults(func=run_sign)
