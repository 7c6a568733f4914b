"""The merged root file system of an OCI image, assembled from its layer blobs for checks.

`RootFS` holds the paths of the image as a container runtime would see them
once every layer is applied in order: files, folders, symbolic and hard
links, with whiteouts (`.wh.<name>`) and opaque folders (`.wh..wh..opq`)
applied (the OCI image layer spec).  It keeps no file contents except the
loader's configuration (`/etc/ld.so.conf`, `/etc/ld.so.conf.d/*.conf`), so it
can answer what the image stage must know before it writes a manifest: does
the entrypoint resolve to an executable file, and does the dynamic loader
find every library a binary needs (RUNPATH, LD_LIBRARY_PATH, ld.so.conf,
the default folders; symlinks followed component by component, like the
kernel, at most 40 hops).  Layers are read through the bounded tar reader
(`pipeline.infra.oci.uncompressed_digest`, `pipeline.infra.safetar`).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.infra import oci

MAX_LD_CONF_BYTES = 65536
MAX_LINK_HOPS = 40  # the kernel's limit for one path resolution

# ld.so's built-in search folders (after RUNPATH, LD_LIBRARY_PATH and ld.so.conf), per architecture.
DEFAULT_LIBRARY_DIRS = {
    "amd64": ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"),
    "arm64": ("/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"),
}



def library_folders(architecture: str) -> frozenset[str]:
    """The loader's default folders of `architecture` as layer paths (no leading '/'): where a shipped library is found by name."""
    return frozenset(folder.strip("/") for folder in DEFAULT_LIBRARY_DIRS.get(architecture, ()))

@dataclass
class Node:
    kind: str  # "file", "dir", "link", "hardlink"
    mode: int = 0o644
    target: str = ""
    text: str | None = None  # contents of ld.so.conf files


def _clean(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def _is_ld_conf(path: str) -> bool:
    return path == "etc/ld.so.conf" or (path.startswith("etc/ld.so.conf.d/") and path.endswith(".conf"))


class RootFS:
    """Paths of the merged image file system (whiteouts applied), enough to resolve files and links."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {"": Node("dir", 0o755)}

    # -- assembly ----------------------------------------------------------------
    def apply_layer(self, entries: list[tuple[str, Node]], whiteouts: list[str], opaque: list[str]) -> None:
        for folder in opaque:
            prefix = folder + "/" if folder else ""
            for path in [p for p in self.nodes if p.startswith(prefix) and p != folder]:
                del self.nodes[path]
        for path in whiteouts:
            self.nodes.pop(path, None)
            prefix = path + "/"
            for child in [p for p in self.nodes if p.startswith(prefix)]:
                del self.nodes[child]
        for path, node in entries:
            parts = path.split("/")
            for depth in range(1, len(parts)):
                self.nodes.setdefault("/".join(parts[:depth]), Node("dir", 0o755))
            if node.kind != "dir" or path not in self.nodes:
                self.nodes[path] = node
            else:
                self.nodes[path].mode = node.mode

    def collector(self):
        """(visit, finish): visit each tar member of one layer, then apply the layer."""
        entries: list[tuple[str, Node]] = []
        whiteouts: list[str] = []
        opaque: list[str] = []

        def visit(member: tarfile.TarInfo, tar) -> None:
            path = _clean(member.name)
            folder, _, base = path.rpartition("/")
            if base == ".wh..wh..opq":
                opaque.append(folder)
                return
            if base.startswith(".wh."):
                whiteouts.append(f"{folder}/{base[4:]}" if folder else base[4:])
                return
            if member.isdir():
                entries.append((path, Node("dir", member.mode)))
            elif member.issym():
                entries.append((path, Node("link", member.mode, member.linkname)))
            elif member.islnk():
                entries.append((path, Node("hardlink", member.mode, _clean(member.linkname))))
            elif member.isreg():
                text = None
                if _is_ld_conf(path) and member.size < MAX_LD_CONF_BYTES:
                    text = tar.read_member(member, MAX_LD_CONF_BYTES).decode("utf-8", "replace")
                entries.append((path, Node("file", member.mode, text=text)))

        def finish() -> None:
            self.apply_layer(entries, whiteouts, opaque)

        return visit, finish

    def add_layer_blob(self, blob: Path, media_type: str) -> str:
        """Apply one layer blob on top (bounded read); return its diff_id (SHA-256 of the uncompressed tar)."""
        visit, finish = self.collector()
        diff_id = oci.uncompressed_digest(blob, media_type, on_member=visit)
        finish()
        return diff_id

    # -- questions -----------------------------------------------------------------
    def resolve(self, path: str, *, hops: int = 0) -> tuple[str, Node] | None:
        """Follow symlinks component by component (like the kernel), from the image's root."""
        parts = [p for p in path.strip("/").split("/") if p and p != "."]
        current: list[str] = []
        while parts:
            part = parts.pop(0)
            if part == "..":
                if current:
                    current.pop()
                continue
            candidate = "/".join([*current, part])
            node = self.nodes.get(candidate)
            if node is None:
                return None
            if node.kind == "link":
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return None
                target = node.target
                parts = [p for p in target.split("/") if p] + parts
                if target.startswith("/"):
                    current = []
                continue
            if node.kind == "hardlink":
                node = self.nodes.get(node.target) or node
            current.append(part)
        key = "/".join(current)
        found = self.nodes.get(key)
        if found is not None and found.kind == "hardlink":
            found = self.nodes.get(found.target)
        return (key, found) if found is not None else None

    def is_file(self, path: str) -> bool:
        resolved = self.resolve(path)
        return resolved is not None and resolved[1].kind == "file"

    def is_executable_file(self, path: str) -> bool:
        resolved = self.resolve(path)
        return resolved is not None and resolved[1].kind == "file" and bool(resolved[1].mode & 0o111)

    def ld_conf_dirs(self) -> list[str]:
        dirs: list[str] = []
        for path in sorted(self.nodes):
            node = self.nodes[path]
            if node.text is None:
                continue
            for line in node.text.splitlines():
                line = line.split("#", 1)[0].strip()
                if line.startswith("/") and " " not in line:
                    dirs.append(line)
        return dirs

    def find_program(self, program: str, env: Mapping[str, str]) -> str:
        """Where a command without '/' resolves on the image's PATH (executable files only); else as given."""
        if "/" in program:
            return program
        candidates = [f"{folder}/{program}" for folder in env.get("PATH", "").split(":") if folder.startswith("/")]
        return next((c for c in candidates if self.is_executable_file(c)), program)

    def loader_dirs(self, env: Mapping[str, str], architecture: str) -> list[str]:
        """The loader's folders after a binary's own RUNPATH: LD_LIBRARY_PATH, ld.so.conf, the defaults."""
        dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
        dirs += self.ld_conf_dirs()
        dirs += list(DEFAULT_LIBRARY_DIRS.get(architecture, ()))
        return dirs

    def library_search(self, image_path: str, runpath: Iterable[str], common: Iterable[str]) -> list[str]:
        """The folders searched for a library of the binary at `image_path` ($ORIGIN expanded)."""
        origin = image_path.rsplit("/", 1)[0] or "/"
        return [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in runpath] + list(common)

    def has_library(self, name: str, folders: Iterable[str]) -> bool:
        return any(self.is_file(f"{folder}/{name}") for folder in folders)
