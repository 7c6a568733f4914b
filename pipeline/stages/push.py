"""Stage `push`: publish the image layout by digest, verify it, write the receipt, then tag.

The order is the publication contract (anchor §19.2, issue 4), and nothing
is half-published when any step fails:

1. **Local bytes first.** The layout's `index.json` is checked against the
   register, then the manifest and every blob it names are re-hashed; no
   request is sent before that.
2. **Tag check.** When a tag is to be assigned and it already names another
   digest, the push is refused before any upload (tags are never moved).
3. **Blobs.** Each blob is looked up with HEAD; only missing ones are sent
   (base layers already on the same registry are mounted, not sent), so a
   re-push of an unchanged image uploads zero layer bytes.  A 5xx or a broken
   connection during an upload restarts that blob; retries are bounded.
   Before the manifest goes out, every blob is HEADed again: a manifest
   whose blobs are missing is never PUT.
4. **Manifest.** The exact bytes of the local manifest are PUT by digest and
   the registry's `Docker-Content-Digest` must equal ours.
5. **Pull-back.** The manifest is fetched by digest and every blob is
   downloaded again and hashed (oras-py verifies nothing it pulls).
6. **Receipt** `ninfer_runtime_image_publication_receipt` is written
   (atomically), binding image digest, base, binary archive, source commit
   and component tag, with `secret_free` checked, not assumed.
7. **Tag**, only now: refused if it exists and points elsewhere; after the PUT
   it must resolve to our digest.

A mismatch at 4 or 5 stops the stage with exit 5: no receipt, no tag.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, IntegrityError, RefusedError, RemoteError, UsageError, redact
from pipeline.formats.lanes import Lane, find_lane, load_lanes
from pipeline.formats.receipts import IMAGE_PUBLICATION_SCHEMA, IMAGE_PUBLICATION_TYPE
from pipeline.infra import oci
from pipeline.infra.image_reference import TAG_EXPECTED, is_tag
from pipeline.infra.registry import (
    Credentials,
    RegistryClient,
    Repository,
    UploadStats,
    credentials_for,
    parse_push_target,
)
from pipeline.register import Artifact, Register
from pipeline.stage import Context, Stage, StageResult, execute
from pipeline.util import ui
from pipeline.util.jsonio import canonical_bytes, loads_document, write_json

RECEIPT_FILE = "image-publication-receipt.json"


@dataclass
class LocalImage:
    entry: Artifact
    layout: Path
    manifest_bytes: bytes
    manifest_digest: str
    config: oci.Descriptor
    layers: tuple[oci.Descriptor, ...]
    paths: dict[str, Path]

    @property
    def blobs(self) -> tuple[oci.Descriptor, ...]:
        return (self.config, *self.layers)

    @property
    def total_size(self) -> int:
        return len(self.manifest_bytes) + sum(d.size for d in self.blobs)


def load_local_image(register: Register, lane: Lane) -> LocalImage:
    """The registered layout with every byte re-hashed: index, manifest, config, layers."""
    entry = register.one("oci-layout", lane=lane.id, needed_by="the push stage", produced_by="image")
    index_path = register.verified_path(entry)
    layout = index_path.parent
    index = oci.read_layout_index(layout)
    manifests = oci.parse_index(index, origin=str(index_path))
    digest = entry.attrs["manifest_digest"]
    if len(manifests) != 1 or manifests[0].digest != digest or manifests[0].media_type != oci.MANIFEST:
        raise IntegrityError(
            "the image layout's index does not name the registered manifest",
            file=index_path,
            found=[m.digest for m in manifests],
            expected=f"one {oci.MANIFEST} {digest}",
            fix="re-run the image stage",
        )
    store = oci.BlobStore(layout)
    manifest_bytes = store.read_verified(manifests[0], origin=str(index_path))
    manifest = oci.parse_manifest(oci.parse_json_blob(manifest_bytes, origin=digest), origin=digest, media_type=oci.MANIFEST)
    paths = {manifest.config.digest: store.verify_file(manifest.config, origin=f"manifest {digest}")}
    for layer in manifest.layers:
        paths[layer.digest] = store.verify_file(layer, origin=f"manifest {digest}")
    return LocalImage(entry, layout, manifest_bytes, digest, manifest.config, manifest.layers, paths)


def _safe_component(value: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in value)


def workflow_url() -> str | None:
    server, repository, run_id = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repository}/actions/runs/{run_id}" if server and repository and run_id else None


class PushStage(Stage):
    name = "push"

    def __init__(
        self,
        ctx: Context,
        lane: Lane,
        target: Repository,
        *,
        tag: str | None,
        retries: int = 4,
        backoff: float = 0.5,
        timeout: float = 60.0,
    ) -> None:
        super().__init__(ctx)
        self.lane = lane
        self.target = target
        self.tag = tag
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.image: LocalImage | None = None
        self.credentials: Credentials | None = None
        self.stats = UploadStats()
        self.client: RegistryClient | None = None

    @property
    def key(self) -> str:
        return f"push:{self.lane.id}:{self.target.name}"

    def describe(self) -> str:
        return f"{self.lane.id} -> {self.target.name}"

    @property
    def out_dir(self) -> Path:
        host = _safe_component(self.target.host)
        return self.ctx.dist / self.lane.id / "push" / host / Path(*self.target.path.split("/"))

    # -- preflight -----------------------------------------------------------
    def preflight(self) -> None:
        if self.tag is not None and not is_tag(self.tag):
            raise UsageError("is not a valid tag", field="--tag", found=self.tag, expected=TAG_EXPECTED)
        self.image = load_local_image(self.ctx.register, self.lane)
        self.credentials = credentials_for(self.target.host, use_environment=True)
        source = self.credentials.source if self.credentials else "none (anonymous)"
        ui.info(
            f"image {self.image.manifest_digest}: {len(self.image.blobs)} blobs, {ui.human_bytes(self.image.total_size)}, all re-hashed; "
            f"credentials: {source}; transport: {self.target.scheme}"
        )

    def inputs(self) -> dict[str, Any]:
        assert self.image is not None
        return {
            "lane": self.lane.id,
            "manifest_digest": self.image.manifest_digest,
            "target": self.target.name,
            "plain_http": self.target.plain_http,
            "tag": self.tag,
            "workflow_url": workflow_url(),
        }

    # -- run -------------------------------------------------------------------
    def run(self) -> list[Artifact]:
        assert self.image is not None
        image = self.image
        client = RegistryClient(self.target, credentials=self.credentials, retries=self.retries, backoff=self.backoff, timeout=self.timeout)
        self.client = client
        digest = image.manifest_digest
        client.ping()
        if self.tag is not None:
            self._check_tag_free(client, digest, stage="before any upload")

        self._send_blobs(client, image)
        self._confirm_blobs(client, image)

        answered = client.put_manifest(digest, image.manifest_bytes, oci.MANIFEST)
        if answered is None:
            ui.warn(f"{self.target.api_host} sent no Docker-Content-Digest for the manifest; the pull-back below is the check")
        elif answered != digest:
            raise IntegrityError(
                f"the registry {self.target.api_host} answered another digest for our manifest",
                file=self.target.at(digest),
                field="Docker-Content-Digest",
                found=answered,
                expected=digest,
                why="the registry stored or computed something other than the exact bytes sent; nothing was tagged and no receipt was written",
                fix="check for a proxy that rewrites content or a registry that converts manifests, then push again",
            )
        ui.info(f"manifest {digest} accepted, registry digest {answered or 'not given'}")
        verified = self._pull_back(client, image)

        receipt_path = self.out_dir / RECEIPT_FILE
        receipt = self._receipt(image, answered, verified)
        data = canonical_bytes(receipt)
        if redact(data.decode("utf-8")) != data.decode("utf-8"):
            raise IntegrityError("the publication receipt would contain a credential", file=receipt_path, why="a registered secret appears in its text", fix="report this as a bug")
        write_json(receipt_path, receipt)
        ui.info(f"receipt {receipt_path}")

        tag_status = "not-requested"
        if self.tag is not None:
            tag_status = self._assign_tag(client, image)
        ui.step(self.name, f"published {self.target.at(digest)}" + (f" as :{self.tag}" if self.tag else "") + f" ({self._stats_line()})")
        return [
            self.ctx.register.make(
                "publication-receipt",
                receipt_path,
                stage=self.name,
                lane=self.lane.id,
                name=f"{self.lane.id}/push/{self.target.name}",
                image_reference=self.target.at(digest),
                manifest_digest=digest,
                registry=self.target.host,
                repository=self.target.name,
                tag=self.tag,
                tag_status=tag_status,
                component_tag=image.entry.attrs.get("component_tag"),
                uploaded_blobs=self.stats.uploaded_blobs,
                uploaded_bytes=self.stats.uploaded_bytes,
                mounted_blobs=self.stats.mounted_blobs,
                present_blobs=self.stats.present_blobs,
                restarted_uploads=self.stats.restarted_uploads,
            )
        ]

    def _stats_line(self) -> str:
        s = self.stats
        return (
            f"{s.uploaded_blobs} blobs uploaded ({ui.human_bytes(s.uploaded_bytes)}), {s.mounted_blobs} mounted, "
            f"{s.present_blobs} already present ({ui.human_bytes(s.present_bytes)}), {s.restarted_uploads} uploads restarted"
        )

    def _check_tag_free(self, client: RegistryClient, digest: str, *, stage: str) -> str | None:
        assert self.tag is not None
        current = client.manifest_digest(self.tag)
        if current is not None and current != digest:
            raise RefusedError(
                f"the tag {self.tag} already exists in {self.target.name} and names another image",
                file=f"{self.target.name}:{self.tag}",
                found=current,
                expected=f"an unused tag, or one that already names {digest}",
                why=f"published tags are never moved (checked {stage}; nothing was changed)",
                fix="cut the next beta (a new component tag) or push by digest only with --no-tag",
            )
        return current

    def _send_blobs(self, client: RegistryClient, image: LocalImage) -> None:
        attrs = image.entry.attrs
        base_layers = {row["digest"] for row in attrs.get("layers", []) if row.get("origin") == "base"}
        mount_from = None
        base_repository = attrs.get("base_repository")
        if base_repository:
            host, _, path = base_repository.partition("/")
            if host == self.target.host and path != self.target.path:
                mount_from = path
        for number, descriptor in enumerate(image.blobs, 1):
            label = "config" if number == 1 else f"layer {number - 1}/{len(image.layers)}"
            size = client.blob_size(descriptor.digest)
            if size is not None:
                if size not in (-1, descriptor.size):
                    raise IntegrityError(
                        f"the registry holds blob {descriptor.digest} with another size",
                        file=self.target.at(descriptor.digest),
                        found=size,
                        expected=descriptor.size,
                    )
                self.stats.present_blobs += 1
                self.stats.present_bytes += descriptor.size
                continue
            if mount_from and descriptor.digest in base_layers and client.mount_blob(descriptor.digest, mount_from):
                self.stats.mounted_blobs += 1
                ui.info(f"{label}: mounted from {mount_from}")
                continue
            restarts = client.upload_blob(image.paths[descriptor.digest], descriptor, label=label)
            self.stats.uploaded_blobs += 1
            self.stats.uploaded_bytes += descriptor.size
            self.stats.restarted_uploads += restarts
            ui.info(f"{label}: uploaded {ui.human_bytes(descriptor.size)}" + (f" after {restarts} restart(s)" if restarts else ""))

    def _confirm_blobs(self, client: RegistryClient, image: LocalImage) -> None:
        for descriptor in image.blobs:
            size = client.blob_size(descriptor.digest)
            if size is None or size not in (-1, descriptor.size):
                raise IntegrityError(
                    f"blob {descriptor.digest} is not on the registry after its upload",
                    file=self.target.at(descriptor.digest),
                    found="absent" if size is None else f"{size} bytes",
                    expected=f"{descriptor.size} bytes",
                    why="a manifest whose blobs are missing is never pushed; nothing was published",
                    fix="run push again",
                )

    def _pull_back(self, client: RegistryClient, image: LocalImage) -> int:
        digest = image.manifest_digest
        fetched = client.get_manifest(digest, accept=oci.MANIFEST)  # verifies sha256(bytes) == digest
        if fetched is None:
            raise IntegrityError(
                f"the registry {self.target.api_host} does not serve the manifest it just accepted",
                file=self.target.at(digest),
                why="nothing was tagged and no receipt was written",
            )
        if fetched[0] != image.manifest_bytes:
            raise IntegrityError("the pulled-back manifest differs from the pushed bytes", file=self.target.at(digest))
        for descriptor in image.blobs:
            client.fetch_blob(descriptor, None, label=f"verify {descriptor.digest[:19]}…")
        ui.info(f"pulled back by digest: manifest and {len(image.blobs)} blobs re-hashed, all match")
        return len(image.blobs)

    def _receipt(self, image: LocalImage, answered: str | None, verified: int) -> dict[str, Any]:
        attrs = image.entry.attrs
        register = self.ctx.register
        sboms = register.query("image-sbom", lane=self.lane.id, manifest_digest=image.manifest_digest)
        base_name = attrs["base_repository"] + (f":{attrs['base_tag']}" if attrs.get("base_tag") else "")
        return {
            "artifact_type": IMAGE_PUBLICATION_TYPE,
            "schema_version": IMAGE_PUBLICATION_SCHEMA,
            "lane": self.lane.id,
            "component_tag": attrs["component_tag"],
            "release_tag": attrs["component_tag"],
            "source_commit": attrs["source_commit"],
            "source_commit_time": attrs["created"],
            "binary_asset": attrs["binary_archive"],
            "binary_sha256": attrs["binary_archive_sha256"],
            "base_image": base_name,
            "base_image_digest": attrs["base_digest"],
            "base_image_reference": attrs["base_reference"],
            "base_platform_manifest_digest": attrs["base_manifest_digest"],
            "registry": self.target.host,
            "repository": self.target.name,
            "image_reference": self.target.at(image.manifest_digest),
            "image_digest": image.manifest_digest,
            "image_config_digest": image.config.digest,
            "image_layers": [d.digest for d in image.layers],
            "image_bytes": image.total_size,
            "platform": attrs["platform"],
            "image_sbom": {"name": Path(sboms[0].path).name, "sha256": sboms[0].sha256} if len(sboms) == 1 else None,
            "tag": self.tag,
            "tag_assigned_after_receipt": self.tag is not None,
            "verification": {
                "registry_digest_header": answered,
                "manifest_pulled_back_by_digest": True,
                "blobs_pulled_back_and_rehashed": verified,
            },
            "workflow_url": workflow_url(),
            "secret_free": True,
        }

    def _assign_tag(self, client: RegistryClient, image: LocalImage) -> str:
        assert self.tag is not None
        digest = image.manifest_digest
        if self._check_tag_free(client, digest, stage="again right before tagging") == digest:
            ui.info(f"tag {self.tag} already names {digest}; left as it is")
            return "already-assigned"
        answered = client.put_manifest(self.tag, image.manifest_bytes, oci.MANIFEST)
        resolved = client.manifest_digest(self.tag)
        fetched = client.get_manifest(self.tag, accept=oci.MANIFEST)
        pulled = oci.digest_bytes(fetched[0]) if fetched else None
        if answered not in (None, digest) or resolved != digest or pulled != digest:
            raise IntegrityError(
                f"the tag {self.tag} does not resolve to the pushed image after assignment",
                file=f"{self.target.name}:{self.tag}",
                found=f"PUT answered {answered}, HEAD {resolved}, GET {pulled}",
                expected=digest,
                why="another push raced this one or the registry rewrote the manifest; the image itself is published by digest and its receipt stands",
                fix="inspect the tag with 'skopeo inspect' and resolve the conflict by hand; tags are never moved automatically",
            )
        ui.info(f"tag {self.tag} -> {digest}")
        return "assigned"


# -- front door ------------------------------------------------------------------

def _default_lane(register: Register, lanes_dir: Path | None) -> str:
    lanes = sorted({a.lane for a in register.query("oci-layout") if a.lane})
    if len(lanes) == 1:
        return lanes[0]
    containers = [lane.id for lane in load_lanes(lanes_dir).values() if lane.kind == "container"]
    if not lanes and len(containers) == 1:
        return containers[0]
    raise UsageError("choose the lane to push", field="--lane", found=lanes or containers, expected="--lane <id>")


REGISTRY_VARIABLE = "PIPELINE_REGISTRY"  # the push target when --registry is not given (nox -s push, the rehearsal)


def choose_registry(registry: str | None, layouts: list, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The push target and where it came from: `--registry`, else PIPELINE_REGISTRY, else the repository the image
    was defined for (the image definition's `repository`, recorded by the image stage as the layout's
    `production_repository`; the SBOM's purl already names it).  The release workflow names none of them, so a
    release pushes where its definition says, and a rehearsal points the job at a loopback registry through
    PIPELINE_REGISTRY in the job's environment, with the workflow unchanged."""
    environ = os.environ if environ is None else environ
    if registry:
        return registry, "--registry"
    if environ.get(REGISTRY_VARIABLE):
        return environ[REGISTRY_VARIABLE], REGISTRY_VARIABLE
    defined = {str(layout.attrs.get("production_repository") or "") for layout in layouts}
    if len(layouts) == 1 and defined != {""}:
        definition = layouts[0].attrs.get("definition")  # its path in the repository, as the image stage recorded it
        return defined.pop(), f"the repository of the image definition {definition}" if definition else "the repository of the image definition"
    raise UsageError("no push target", field="--registry", found=sorted(defined) or None,
                     expected="--registry HOST[:PORT]/REPO, PIPELINE_REGISTRY, or one image whose definition names its repository",
                     fix="set `repository` in the image definition (containers/<name>.toml) and build the image again, "
                         "or pass --registry")


def push_image(
    registry: str | None,
    *,
    dist: Path | str = "dist",
    lane_name: str | None = None,
    tag: str | None = None,
    no_tag: bool = False,
    plain_http: bool | None = None,
    retries: int = 4,
    backoff: float = 0.5,
    timeout: float = 60.0,
    lanes_dir: Path | None = None,
    force: bool = False,
) -> StageResult:
    ctx = Context.open(dist, lanes_dir)
    lane = find_lane(lane_name or _default_lane(ctx.register, lanes_dir), lanes_dir)
    if no_tag and tag:
        raise UsageError("--tag and --no-tag exclude each other", field="--tag")
    layouts = ctx.register.query("oci-layout", lane=lane.id)
    registry, source = choose_registry(registry, layouts)
    target = parse_push_target(registry, plain_http=plain_http)
    ui.info(f"push target {target.name} (from {source})")
    chosen = None
    if not no_tag:
        if tag:
            chosen = tag
        else:
            chosen = layouts[0].attrs.get("component_tag") if len(layouts) == 1 else None
    stage = PushStage(ctx, lane, target, tag=chosen, retries=retries, backoff=backoff, timeout=timeout)
    return execute(stage, force=force)


def run_push(args: argparse.Namespace) -> int:
    """`push`: the command line's front door to `push_image`; prints the image reference (or --json the receipt)."""
    if args.retries < 0 or args.retries > 20:
        raise UsageError("retries must be between 0 and 20", field="--retries", found=args.retries)
    result = push_image(
        args.registry,
        dist=args.dist,
        lane_name=args.lane,
        tag=args.tag,
        no_tag=args.no_tag,
        plain_http=args.plain_http,
        retries=args.retries,
        lanes_dir=args.lanes_dir,
        force=args.force,
    )
    receipt = next((a for a in result.outputs if a.kind == "publication-receipt"), None)
    if receipt is None:
        raise InputError("push recorded no receipt")
    path = Path(args.dist) / receipt.path
    if args.json:
        print(json.dumps(loads_document(path.read_bytes(), source=path), indent=2, sort_keys=True))
    else:
        print(receipt.attrs["image_reference"])
    return 0


def register_cli(sub) -> None:
    from pipeline.cli import add_common

    parser = sub.add_parser(
        "push",
        help="push the image by digest to an OCI registry, verify it, write the publication receipt, then tag",
        description=(
            "Credentials come only from the environment (PIPELINE_REGISTRY_USERNAME and PIPELINE_REGISTRY_PASSWORD) "
            "or the Docker config file ($DOCKER_CONFIG/config.json, else ~/.docker/config.json), never from arguments."
        ),
    )
    parser.add_argument("--registry", help="HOST[:PORT]/REPO, e.g. ghcr.io/alphastorm/ninfer-runtime (default: PIPELINE_REGISTRY, "
                        "else the repository the image definition names, as recorded with the image)")
    parser.add_argument("--lane", help="container lane (default: the one lane with an image in the register)")
    parser.add_argument("--tag", help="tag to assign after the receipt (default: the component tag, e.g. v0.7.0-qwen38-5090-beta.2)")
    parser.add_argument("--no-tag", action="store_true", help="publish by digest only")
    parser.add_argument("--plain-http", action="store_true", default=None, help="talk HTTP instead of HTTPS (automatic for loopback registries)")
    parser.add_argument("--retries", type=int, default=4, help="retries per request and restarts per blob (default 4, exponential backoff)")
    parser.add_argument("--force", action="store_true", help="push again even when inputs are unchanged")
    add_common(parser, json_output="print the receipt as JSON on stdout")
    parser.set_defaults(func=run_push)


__all__ = ["PushStage", "push_image", "load_local_image", "RemoteError"]


STAGE = PushStage


def release_plan(ctx: Context, lanes: list, options) -> list:
    """`release`: push each lane's image when a --registry is given."""
    from pipeline.stage import Skip

    steps: list = []
    for lane in lanes:
        if not ctx.register.query("oci-layout", lane=lane.id):
            steps.append((lane.id, Skip("no image of this lane in the register")))
        elif not getattr(options, "registry", None):
            steps.append((lane.id, Skip("no --registry given")))
        else:
            steps.append((lane.id, lambda lane=lane: push_image(options.registry, dist=ctx.dist, lane_name=lane.id, lanes_dir=options.lanes_dir)))
    return steps
