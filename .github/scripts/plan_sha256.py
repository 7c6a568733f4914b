"""Print `sha256=<hex>` (for $GITHUB_OUTPUT) from the output of a `pipeline publish` dry run (used by release.yml).

The dry run prints the plan and, on a line of its own, the plan's SHA-256 (`plan sha256: <64 hex>`;
`plan_sha256=`, `plan SHA-256:` are read too).  Exactly one such value must be there: none, or two
different ones, stop the job before `--apply` instead of applying a plan nobody printed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LINE = re.compile(r"^\s*plan[ _-]?sha-?256\s*[:=]\s*((?-i:[0-9a-f]{64}))\s*$", re.IGNORECASE | re.MULTILINE)


def main(path: str) -> int:
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    found = sorted(set(LINE.findall(text)))
    if len(found) != 1:
        what = "no plan SHA-256 line" if not found else f"{len(found)} different plan SHA-256 values"
        print(f"::error::the publish dry run printed {what} (expected one 'plan sha256: <64 hex>' line); nothing was applied", file=sys.stderr)
        return 1
    print(f"sha256={found[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
