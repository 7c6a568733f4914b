"""Print a lane's current cut as URL@COMMIT for `build --source` (used by release.yml).

A release is built from the exact commit of the lane's current cut (the highest beta.N
that is `cut` or `published` in runtime/cuts/<lane>.json, the ledger `python -m pipeline
cut` writes), never from the embedded sample runtime. A lane without such a cut, or a cut
whose commit is unknown, stops the job with an error annotation.  Standard library only:
the Windows build job runs this before the pipeline is installed.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

COMMIT = re.compile(r"[0-9a-f]{40}")
MAX_LEDGER_BYTES = 4 << 20


def _error(path: Path, message: str) -> int:
    print(f"::error file={path.as_posix()}::{message}", file=sys.stderr)
    return 1


def _reject_constant(name: str):
    raise ValueError(f"not a JSON number: {name}")


def main(lane: str) -> int:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,99}", lane):
        print(f"::error::not a lane id: {lane!r}", file=sys.stderr)
        return 2
    lane_path = Path("runtime/lanes") / f"{lane}.toml"
    data = tomllib.loads(lane_path.read_text(encoding="utf-8"))
    repository = (data.get("source") or {}).get("repository")
    version = (data.get("component") or {}).get("version")
    ledger_path = Path("runtime/cuts") / f"{lane}.json"
    if not ledger_path.is_file():
        return _error(ledger_path, f"lane {lane} has no cut ledger; cut it first: python -m pipeline cut --lane {lane} --source URL@COMMIT")
    raw = ledger_path.read_bytes()
    if len(raw) > MAX_LEDGER_BYTES:
        return _error(ledger_path, f"the cut ledger is larger than {MAX_LEDGER_BYTES} bytes")
    try:
        ledger = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as error:
        return _error(ledger_path, f"the cut ledger is not JSON: {error}")
    cuts = ledger.get("cuts") if isinstance(ledger, dict) else None
    if not isinstance(cuts, list):
        return _error(ledger_path, "the cut ledger holds no list of cuts (field cuts)")
    live = [c for c in cuts if isinstance(c, dict) and c.get("version") == version and c.get("state") in ("cut", "published")]
    if not live:
        return _error(ledger_path, f"lane {lane} has no current cut of version {version} (every cut is superseded, or none was made); cut it: python -m pipeline cut --lane {lane} --source URL@COMMIT")
    cut = max(live, key=lambda c: c.get("n") if isinstance(c.get("n"), int) else -1)
    commit = cut.get("source_commit")
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        unknown = cut.get("unknown") if isinstance(cut.get("unknown"), dict) else {}
        reason = str(unknown.get("source_commit", ""))
        return _error(ledger_path, f"the current cut {cut.get('tag')} of lane {lane} names no full source commit, so it cannot be built for a release. {reason}".rstrip())
    if not isinstance(repository, str) or not repository.startswith("https://"):
        return _error(lane_path, f"lane {lane} names no https source repository")
    print(f"{repository}@{commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
