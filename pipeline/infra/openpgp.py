"""OpenPGP verification of a clearsigned document (a repository's `InRelease`) with Debian's `gpgv`.

The cryptography is gpgv's (GnuPG's verify-only tool, what apt used before APT 3.0 moved to
Sequoia's `sqv`; both are maintained by Debian): this module decides only what counts as trusted.

- The keyring is a file in the repository pinned by SHA-256 in the image definition: its bytes
  are hashed before gpgv sees them, and gpgv runs with an empty home folder of its own, so no
  keyring of this machine's user or of apt takes part.
- A signature counts only when gpgv reports it good (`GOODSIG` and `VALIDSIG`) and the primary
  key's fingerprint (VALIDSIG's last field) is one the definition lists: a key that happens to
  be in the keyring file but is not listed signs nothing.  A bad signature (`BADSIG`), an expired
  or revoked key (`EXPKEYSIG`, `REVKEYSIG`) is refused outright, even beside a good one.
- The text that is parsed afterwards is the text gpgv wrote out from the verified signature
  (`--output`), never the file as downloaded: words outside the signed block cannot reach the
  parser.  A document with more than one signed block, or bytes after its signature, is refused
  first (apt's rule in `SplitClearSignedFile`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import IntegrityError
from pipeline.util.hashing import sha256_bytes
from pipeline.util.proc import require_tool, run

BEGIN_SIGNED = b"-----BEGIN PGP SIGNED MESSAGE-----"
BEGIN_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----"
END_SIGNATURE = b"-----END PGP SIGNATURE-----"
GPGV_TIMEOUT = 60.0


@dataclass(frozen=True)
class Verified:
    text: bytes  # the signed text exactly as gpgv returned it
    signers: tuple[str, ...]  # primary fingerprints of the good signatures by listed keys, sorted


def _check_shape(data: bytes, *, label: str) -> None:
    stripped = data.strip()
    problems = []
    if not stripped.startswith(BEGIN_SIGNED):
        problems.append("it does not start with the clearsigned header")
    if data.count(BEGIN_SIGNED) != 1 or data.count(BEGIN_SIGNATURE) != 1 or data.count(END_SIGNATURE) != 1:
        problems.append("it holds more or fewer than one signed block")
    if not stripped.endswith(END_SIGNATURE):
        problems.append("bytes follow its signature")
    if problems:
        raise IntegrityError(
            "is not one clearsigned document",
            file=label,
            found="; ".join(problems),
            expected="exactly one '-----BEGIN PGP SIGNED MESSAGE-----' block ending with its signature",
            why="text outside the signed block is not covered by the signature and is refused rather than ignored",
            fix="fetch the file again from the archive; if it stays so, the mirror serves something else",
        )


def _status(lines: list[str], tag: str) -> list[list[str]]:
    return [line.split()[2:] for line in lines if line.startswith("[GNUPG:] " + tag + " ") or line == "[GNUPG:] " + tag]


def normalize_fingerprint(value: str) -> str:
    return value.replace(" ", "").upper()


def verify_clearsigned(data: bytes, *, keyring: bytes, keyring_name: str, fingerprints: tuple[str, ...], label: str) -> Verified:
    """The signed text of `data` if a listed key signed it well; else an IntegrityError naming what was found."""
    _check_shape(data, label=label)
    gpgv = require_tool("gpgv", purpose="verify the repository's InRelease signature", debian_package="gpgv")
    allowed = {normalize_fingerprint(fpr) for fpr in fingerprints}
    with tempfile.TemporaryDirectory(prefix="omp-ninfer-gpgv-") as home:
        keyring_path = Path(home) / "keyring.gpg"
        keyring_path.write_bytes(keyring)
        output = Path(home) / "signed.txt"
        document = Path(home) / "InRelease"
        document.write_bytes(data)
        result = run(
            [gpgv, "--homedir", home, "--keyring", keyring_path, "--status-fd", "1", "--output", output, document],
            what=f"verify the signature of {label}", failure=IntegrityError, check=False, timeout=GPGV_TIMEOUT,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "GNUPGHOME": home},
        )
        lines = result.stdout.decode("utf-8", "replace").splitlines()
        text = output.read_bytes() if output.is_file() else b""
    bad = [" ".join(fields) for tag in ("BADSIG", "EXPKEYSIG", "REVKEYSIG", "EXPSIG") for fields in _status(lines, tag)]
    good_keyids = {fields[0].upper() for fields in _status(lines, "GOODSIG") if fields}
    valid = {normalize_fingerprint(fields[-1]) for fields in _status(lines, "VALIDSIG")
             if len(fields) >= 10 and normalize_fingerprint(fields[0])[-16:] in good_keyids}
    signers = tuple(sorted(valid & allowed))
    # gpgv exits 2 when any signature's key is missing (Debian signs with several keys): like apt, one good
    # signature by a listed key and no bad one is the rule, whatever the exit status says.
    if bad or not signers:
        reasons = [f"bad or expired signature: {item}" for item in bad]
        missing = [fields[0] for fields in _status(lines, "NO_PUBKEY") if fields]
        if valid - allowed:
            reasons.append("good signatures only by keys the definition does not list: " + ", ".join(sorted(valid - allowed)))
        if missing:
            reasons.append("signed by keys that are not in the keyring: " + ", ".join(missing))
        if not reasons:
            reasons.append(f"gpgv found no good signature (exit status {result.returncode})")
        raise IntegrityError(
            "is not signed by a key the image definition trusts",
            file=label,
            found="; ".join(reasons),
            expected="a good signature by " + " or ".join(sorted(allowed)) + f" (keyring {keyring_name}, sha256 {sha256_bytes(keyring)})",
            why="only a signature by a listed key makes the Release file's index hashes, and so every package pinned from them, trustworthy",
            fix="check the archive URL and suite; if the archive rotated its key, add the new fingerprint and keyring deliberately, after checking it out of band",
        )
    if not text:
        raise IntegrityError("gpgv verified the signature but wrote no signed text", file=label, fix="check the gpgv installation")
    return Verified(text, signers)
