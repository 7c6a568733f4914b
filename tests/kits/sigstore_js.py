"""sigstore-js (@sigstore/verify, pinned in tools/node) as a second verifier of Sigstore bundles.

`verify_js(bundle, trust_root, artifact=..., identity=..., issuer=...)` runs
tools/node/verify-sigstore-bundle.cjs offline against the given trusted root (a ClientTrustConfig
or a bare trusted root) and returns its one-line JSON answer: `{"ok": true, "identity", "issuer"}`
or `{"ok": false, "code", "message"}`.  The process's status must agree with the answer (0 with
ok, 1 without); anything else (usage error, crash) fails the test, so a broken harness never reads
as a refused bundle.  Node policy: tests/kits/nodekit.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from nodekit import node_command

LIBRARIES = ("@sigstore/verify", "@sigstore/bundle", "@sigstore/protobuf-specs", "sigstore")


def verify_js(bundle: Path, trust_root: Path, *, artifact: Path | None = None, identity: str | None = None,
              issuer: str | None = None, tlog_threshold: int | None = None, ctlog_threshold: int | None = None) -> dict[str, Any]:
    command = node_command("verify-sigstore-bundle.cjs", *LIBRARIES, purpose="the sigstore-js cross-check of Sigstore bundles")
    command += ["--bundle", os.fspath(bundle), "--trust-root", os.fspath(trust_root)]
    for option, value in (("--artifact", artifact), ("--identity", identity), ("--issuer", issuer)):
        if value is not None:
            command += [option, os.fspath(value)]
    for option, count in (("--tlog-threshold", tlog_threshold), ("--ctlog-threshold", ctlog_threshold)):
        if count is not None:
            command += [option, str(count)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    lines = result.stdout.splitlines()
    if result.returncode not in (0, 1) or len(lines) != 1:
        raise AssertionError(f"sigstore-js could not run (rc {result.returncode}): {result.stdout.strip()} {result.stderr.strip()}")
    answer = json.loads(lines[0])
    if answer["ok"] is not (result.returncode == 0):
        raise AssertionError(f"sigstore-js answered {answer} with exit status {result.returncode}")
    return answer
