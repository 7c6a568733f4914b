"""`publish --release`: the product release of this repository from the exact commit being tagged, and its gates
(verify, acceptance, tests, reviews, images, verifier distribution)."""

from __future__ import annotations

import copy
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import InputError, PipelineError, RefusedError, UsageError
from pipeline.formats.release.manifest import ReleaseManifest, parse_manifest
from pipeline.formats.release.names import BUNDLE_SUFFIX
from pipeline.formats.release.signer import signer_from_manifest
from pipeline.infra.git import GIT, git_show
from pipeline.infra.github import GitHub, api_url, is_loopback_url, repository_of
from pipeline.infra.sigstore import TEST_STANDIN_ENV, effective_trust_config, test_standin, verify_bundle
from pipeline.register import Artifact
from pipeline.stage import Context
from pipeline.stages.publish.evidence import check_evidence, statement_bundle
from pipeline.stages.publish.gates import Remote, remote_gates
from pipeline.stages.publish.target import VERIFIER_KINDS, Target, asset_entry, refuse
from pipeline.util.fs import atomic_write_bytes
from pipeline.util.hashing import sha256_bytes

if TYPE_CHECKING:
    from pipeline.formats.test_receipt import Selection, TestRunReceipt


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*GIT, "-C", str(root), *args], capture_output=True, check=False)
    if check and result.returncode != 0:
        raise InputError(f"git {' '.join(args[:2])} failed: {result.stderr.decode('utf-8', 'replace').strip()[:300]}", file=root)
    return result


def product_target(
    ctx: Context,
    root: Path,
    release: str,
    *,
    commit: str | None,
    test_receipt: Path,
    bundles: Path | None,
    lanes_dir: Path | None,
    github_of: Callable[[str], GitHub | None],
) -> tuple[Target, Remote]:
    from pipeline.formats.ci_checks import REQUIRED_CHECKS_FILE, read_required_checks
    from pipeline.formats.release.names import RELEASE_RE
    from pipeline.formats.test_receipt import require_green_for
    if not RELEASE_RE.fullmatch(release or ""):
        raise UsageError("--release is not a product release name", field="--release", found=release, expected="vX.Y.Z or vX.Y.Z-beta.N")
    rev = commit or "HEAD"
    resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    commit = resolved.stdout.decode().strip()
    if resolved.returncode != 0 or len(commit) != 40:
        raise UsageError("--commit names no commit of the product repository", field="--commit", found=rev, file=root)
    tree_id = _git(root, "rev-parse", f"{commit}^{{tree}}").stdout.decode().strip()
    base = f"manifests/{release}"

    def show(path: str) -> bytes | None:
        result = _git(root, "show", f"{commit}:{path}", check=False)
        return result.stdout if result.returncode == 0 else None

    manifest_bytes = show(f"{base}/manifest.json")
    if manifest_bytes is None:
        raise InputError(f"the commit holds no {base}/manifest.json", file=root, field="--commit", found=commit, fix="publish the commit that holds the ready release tree")
    # check_type off: a manifest of the wrong type is verify's refusal (gate verify-ready), with its message
    manifest = parse_manifest(manifest_bytes, source=f"{commit}:{base}/manifest.json", check_type=False, strict_bytes=True)
    notes = (show(f"{base}/NOTES.md") or b"").decode("utf-8", "replace")
    title = next((line[2:].strip() for line in notes.splitlines() if line.startswith("# ")), release)
    signing = manifest.section("signing")
    signed = [p for p in signing.get("signed_files") or [] if isinstance(p, str)]
    product = manifest.section("product")
    repository = repository_of(str(product.get("repository", "")))
    channel = manifest.value("channel")
    prerelease = channel != "public" or "-beta." in release
    files_dir = ctx.dist / "publish" / f"product-{release}" / "files"
    if files_dir.exists():
        shutil.rmtree(files_dir)
    files_dir.mkdir(parents=True)
    files: dict[str, Path] = {}
    (ctx.dist / "publish").mkdir(parents=True, exist_ok=True)

    def bundle_of(rel: str) -> Path:
        # Bundles are made by the release workflow after the commit: they come from the working tree.
        return root / (rel + BUNDLE_SUFFIX) if bundles is None else bundles / (Path(rel).name + BUNDLE_SUFFIX)

    for rel in signed:
        name = Path(rel).name
        data = show(rel)
        if data is None or not rel.startswith(base + "/"):
            raise InputError("a signed file is not in the release tree of the commit", file=root, field="signing.signed_files", found=rel)
        if name in files:
            raise InputError("two signed files would publish under one asset name", field="signing.signed_files", found=name)
        atomic_write_bytes(files_dir / name, data)
        files[name] = files_dir / name
        bundle = bundle_of(rel)
        if bundle.is_file():
            shutil.copyfile(bundle, files_dir / bundle.name)
            files[bundle.name] = files_dir / bundle.name
    images = _image_statements(ctx, manifest, show, files_dir, files, bundles, release)
    verifier = {kind: ctx.register.query(kind) for kind in VERIFIER_KINDS}
    for entries in verifier.values():
        for entry in entries:
            files[Path(entry.path).name] = ctx.register.path_of(entry)
    assets = [asset_entry(n, p, "dist", p.relative_to(ctx.dist).as_posix()) for n, p in sorted(files.items())]
    target = Target("product", release, repository, release, commit, title, notes, prerelease, not prerelease, assets, files)
    target.ci_declared_in = f"{commit[:12]}:{REQUIRED_CHECKS_FILE}"
    try:  # the checks the product repository requires, as the tagged commit itself declares them
        target.ci_required = read_required_checks(show(REQUIRED_CHECKS_FILE), source=target.ci_declared_in)
    except PipelineError as exc:
        target.ci_problem = exc
    tests_run = TestRunRead.of(test_receipt)  # read once: the plan binds its selection, gate test-run judges it
    target.test_selection = tests_run.selection
    remote = Remote(github_of(repository), target)

    def gate_verify() -> str:
        from pipeline.formats.release.contract import verify_release

        work = Path(tempfile.mkdtemp(prefix=f"verify-{commit[:12]}-", dir=ctx.dist / "publish"))
        worktree = work / "tree"
        try:
            _git(root, "worktree", "add", "--detach", "--quiet", str(worktree), commit)
            status = _git(worktree, "status", "--porcelain", "--untracked-files=all").stdout.strip()
            if status:
                raise refuse("the detached worktree of the commit is not clean", file=worktree, found=status[:200].decode("utf-8", "replace"))
            report = verify_release(worktree, release, require="ready", check_pins=True, lanes_dir=lanes_dir)
        finally:
            _git(root, "worktree", "remove", "--force", str(worktree), check=False)
            shutil.rmtree(work, ignore_errors=True)
        if not report.valid:
            first = report.problems.items[0]
            raise refuse(
                f"verify --release {release} --require-ready --check-pins fails on a clean checkout of {commit[:12]} ({len(report.problems.items)} errors; first: {first.message()})",
                file=f"{base}/manifest.json",
                fix=f"run 'python -m pipeline verify --release {release} --require-ready --check-pins' on that commit and fix what it lists",
            )
        return f"verify --require-ready --check-pins passes on a clean detached worktree of {commit[:12]}"

    def gate_tests() -> str:
        # the very receipt whose selection the plan binds (a receipt changed since the reviewed plan changes the
        # plan's hash, which --apply refuses), so the gate cannot judge other bytes than the plan names
        receipt = tests_run.receipt()
        api = remote.github.api if remote.github is not None else api_url()
        stand_in = subset_allowance(receipt.selection, api=api, root=root, commit=commit, file=test_receipt)
        require_green_for(receipt, commit=commit, tree=tree_id, file=test_receipt, subset_allowed=stand_in)
        scope = "" if receipt.selection.is_full else f" of {receipt.selection.describe()}, allowed because {stand_in}"
        return f"test run{scope} on {commit[:12]}: {receipt.passed} passed, {receipt.skipped} skipped, 0 failed"

    def gate_signatures() -> str:
        if not signed:
            raise refuse("the manifest names no signed files", file=f"{base}/manifest.json", field="signing.signed_files")
        signer = signer_from_manifest(manifest, file=f"{base}/manifest.json")
        for rel in signed:
            name = Path(rel).name
            bundle = files.get(name + BUNDLE_SUFFIX)
            if bundle is None:
                raise refuse(f"{rel} has no Sigstore bundle", file=bundle_of(rel), fix="sign the release in the release workflow (python -m pipeline sign) and pass its bundles with --bundles")
            try:
                verify_bundle(files[name].read_bytes(), bundle, identity=signer.identity, issuer=signer.issuer, trust_config=effective_trust_config(signer.trust_config), repository=signer.repository, ref=signer.ref)
            except PipelineError as exc:
                raise refuse(f"the Sigstore bundle of {rel} does not verify: {exc.what}", file=bundle, fix=exc.fix) from None
        return f"{len(signed)} signed files verify against {signer.identity}"

    target.gates = [
        ("verify-ready", gate_verify),
        ("acceptance", _acceptance_gate(manifest, show, base, release)),
        ("reviews", _review_gate(manifest, show, release)),
        ("test-run", gate_tests),
        ("signatures", gate_signatures),
        ("evidence", _image_evidence_gate(images, release)),
        ("verifier", _verifier_gate(ctx, verifier, root, commit)),
        *remote_gates(remote),
    ]
    return target, remote


def _acceptance_gate(manifest: ReleaseManifest, show: Callable[[str], bytes | None], base: str, release: str) -> Callable[[], str]:
    """Gate `acceptance` of a product publication: a passing external-installation record is bound in the tree, and
    the commit holds it with its recorded hash."""

    def gate() -> str:
        qualification = manifest.section("qualification")
        acceptance = qualification.get("acceptance") if isinstance(qualification.get("acceptance"), dict) else None
        if acceptance is None or acceptance.get("status") != "passed" or qualification.get("external_installation_passed") is not True:
            raise refuse(
                "no passing external-installation acceptance record is bound in the release tree",
                file=f"{base}/manifest.json",
                field="qualification.acceptance",
                found=acceptance.get("status") if acceptance else None,
                expected="a bound record with status passed (compose accept)",
                fix=f"run the acceptance stage on the candidate and bind its record: python -m pipeline compose accept --release {release} --record FILE",
            )
        data = show(str(acceptance.get("path")))
        if data is None or sha256_bytes(data) != acceptance.get("sha256"):
            raise refuse("the bound acceptance record is not in the commit with its recorded hash", file=str(acceptance.get("path")), field="qualification.acceptance.sha256", found=sha256_bytes(data) if data else None, expected=acceptance.get("sha256"))
        return f"acceptance passed on candidate {str(acceptance.get('candidate_commit'))[:12]}"

    return gate


@dataclass(frozen=True)
class TestRunRead:
    """The test-run receipt of a product plan, read once: the plan binds its selection (the whole suite, or a
    declared subset by name and SHA-256) and gate test-run judges the same parsed receipt.  A receipt that cannot
    be read leaves the selection None and the gate refuses with the reader's own error."""

    __test__ = False  # not a pytest class, whatever its name
    parsed: TestRunReceipt | None
    problem: PipelineError | None

    @classmethod
    def of(cls, path: Path) -> TestRunRead:
        from pipeline.formats.test_receipt import read_test_receipt

        try:
            return cls(read_test_receipt(path), None)
        except PipelineError as exc:
            return cls(None, exc)

    @property
    def selection(self) -> dict[str, Any] | None:
        return None if self.parsed is None else self.parsed.selection.to_json()

    def receipt(self) -> TestRunReceipt:
        if self.parsed is None:
            raise copy.copy(self.problem)  # a fresh error on every call: run_gates prefixes the one it raises
        return self.parsed


def subset_allowance(selection: Selection, *, api: str, root: Path, commit: str, file: Path) -> str | None:
    """Why a declared subset's test-run receipt may pass gate test-run, or None for the whole suite's.

    A subset receipt is what the release workflow's rehearsal writes; it may carry a publish only in a stand-in
    world, never to a real release.  A loopback GitHub API alone proves nothing (an Enterprise Server through a tunnel, a local proxy to
    github.com with the real token), so the proof is two facts a real workflow run cannot produce together: the
    Sigstore trust this publish verifies bundles with is the test stand-in, which infra/sigstore.py accepts only in
    the process tree that made it (`_require_owner_lineage`), AND the GitHub API is on this machine.  The subset must
    also be declared at the published commit, with the SHA-256 the receipt names (formats/test_subset.py)."""
    from pipeline.formats.test_subset import require_declared_at, subset_path

    if selection.is_full:
        return None
    loopback = is_loopback_url(api)
    try:
        standin, refused = test_standin(), None
    except PipelineError as exc:  # named but refused (not this process tree's, or not a stand-in): not the stand-in world
        standin, refused = None, exc.what
    if standin is None or not loopback:
        trust = (f"the test stand-in {standin.directory}" if standin is not None
                 else f"{TEST_STANDIN_ENV} refused ({refused})" if refused else f"the release signer's pinned configuration ({TEST_STANDIN_ENV} unset)")
        raise RefusedError(
            f"the test-run receipt is of {selection.describe()}, not of the whole suite, and this publish is not in the rehearsal's stand-in world",
            file=file, field="selection",
            found=f"Sigstore trust: {trust}; GitHub API: {api} ({'loopback' if loopback else 'not loopback'})",
            expected="the whole suite; a declared subset only with the Sigstore test stand-in of this process tree in force and a GitHub API on loopback",
            why="a loopback GitHub API alone is no proof of the rehearsal (an Enterprise Server through a tunnel, a proxy to github.com); "
                "a release is published only after the whole suite passed on its commit",
            fix="unset PIPELINE_TEST_SUBSET and run the whole suite (.nox/nox/bin/nox -s tests) on a clean checkout of the commit being tagged, then publish again",
        )
    where = f"at the published commit {commit[:12]}"
    try:
        require_declared_at(selection.name, selection.sha256, git_show(root, commit, subset_path(selection.name).as_posix()), where=where)
    except InputError as exc:
        raise RefusedError(f"the test-run receipt's subset {selection.name!r} {exc.what}", file=file, field=exc.field, found=exc.found,
                           expected=exc.expected, why=exc.why, fix=exc.fix) from None
    return (f"the Sigstore trust in force is the test stand-in of this process tree ({standin.directory}) and the GitHub API {api} "
            f"is on this machine: the rehearsal's stand-in world; the subset is declared {where}")


def _review_gate(manifest: ReleaseManifest, show: Callable[[str], bytes | None], release: str) -> Callable[[], str]:
    """Gate `reviews` of a product publication: the review ledger at the commit is the one the manifest binds, and it
    clears the release (formats/review_ledger.py: every review closed, no in-scope P0/P1 confirmed or unresolved,
    every deferred finding tracked, every reviewed digest one the release binds, every bound artefact covered by a closed
    review; the councils release.toml requires hold the release through compose's blockers, which verify --require-ready checks)."""
    def gate() -> str:
        from pipeline.formats.review_ledger import bound_ledger, ledger_path

        rel = ledger_path(release)
        ledger, failures = bound_ledger(manifest, show(rel), release=release, origin=rel)
        if failures:
            first = failures[0]
            raise refuse(
                f"the review ledger holds the release: {first.what}" + (f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""),
                file=rel,
                field=f"reviews.{first.council}" + (f".findings.{first.finding}" if first.finding else "") if first.council else "reviews",
                found=[failure.what for failure in failures],
                fix=first.fix + f", then python -m pipeline compose rebind --release {release}, promote and publish the new ready commit",
            )
        if ledger is None:
            return "made before the review ledger (no reviews bound)"
        deferred = ledger.deferred()
        return f"{len(ledger.reviews)} reviews closed ({', '.join(r.council for r in ledger.reviews)}); no in-scope P0/P1 open; {len(deferred)} deferred, each tracked"

    return gate


def _image_evidence_gate(images: list[tuple[Path, Path | None]], release: str) -> Callable[[], str]:
    """Gate `evidence` of a product publication: each image statement's DSSE bundle verifies against this release's workflow."""
    def gate() -> str:
        fix = f"sign the release in the release workflow (python -m pipeline sign --release {release}) and pass its bundles with --bundles"
        done = [check_evidence(statement, bundle, release, what=f"the image statement {statement.name}", fix=fix) for statement, bundle in images]
        return "; ".join(done) if done else "the release ships no image statement"

    return gate


def _verifier_gate(ctx: Context, verifier: dict[str, list[Artifact]], root: Path, commit: str) -> Callable[[], str]:
    """Gate `verifier`: exactly one verifier wheel, sdist, auditor's lock and SHA256SUMS in the register, built from the tagged commit, intact."""
    def gate() -> str:
        for kind, entries in verifier.items():
            if len(entries) != 1 or entries[0].attrs.get("commit") != commit:
                raise refuse(f"the register holds no single {kind} built from {commit[:12]}", file=ctx.register.file, field=kind,
                              found=[e.attrs.get("commit") for e in entries], expected=commit,
                              why="auditors install the verifier this release ships; it must be the pipeline of the tagged commit",
                              fix=f"python -m pipeline verifier-dist --dist {ctx.dist} --source {root}@{commit}")
            ctx.register.verified_path(entries[0])
        wheel = verifier["verifier-wheel"][0]
        return f"verifier {Path(wheel.path).name} of {commit[:12]} (sha256 {wheel.sha256[:12]}), its sdist, the auditor's requirements lock and SHA256SUMS"

    return gate


def _image_statements(ctx: Context, manifest: ReleaseManifest, show: Callable[[str], bytes | None], files_dir: Path, files: dict[str, Path],
                      bundles: Path | None, release: str) -> list[tuple[Path, Path | None]]:
    """The image provenance statements the tree binds (container rows' `image_provenance`), copied from the commit
    into the publication's files under their asset names, each with its DSSE bundle (the register's, else --bundles)."""
    from pipeline.formats.release.names import image_provenance_asset

    rows = manifest.lane_rows()
    found = []
    for row in rows:
        record = row.get("image_provenance") if isinstance(row, dict) else None
        if not isinstance(record, dict) or not isinstance(row.get("id"), str):
            continue
        data = show(str(record.get("path")))
        if data is None or sha256_bytes(data) != record.get("sha256"):
            raise InputError("the image statement the tree binds is not in the commit with its recorded hash", field=f"components.{row['id']}.image_provenance", found=record.get("path"))
        name = image_provenance_asset(row["id"])
        atomic_write_bytes(files_dir / name, data)
        files[name] = files_dir / name
        entry = statement_bundle(ctx.register, sha256_bytes(data))
        bundle = ctx.register.verified_path(entry) if entry is not None else (bundles / (name + BUNDLE_SUFFIX) if bundles is not None else None)
        if bundle is not None and bundle.is_file():
            shutil.copyfile(bundle, files_dir / (name + BUNDLE_SUFFIX))
            files[name + BUNDLE_SUFFIX] = files_dir / (name + BUNDLE_SUFFIX)
        found.append((files[name], files.get(name + BUNDLE_SUFFIX)))
    return found
