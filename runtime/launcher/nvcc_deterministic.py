#!/usr/bin/env python3
"""CMake compiler launcher that makes nvcc's output deterministic.

nvcc names its temporary files after its PID and draws random module IDs in
-rdc mode; both end up in the object files.  For every compile step this
launcher appends `-frandom-seed=<the -o path>` (stable: Ninja passes paths
relative to the build directory, and each object has its own) and `-objtemp`
(temporary files beside the object, not tmpxft_<pid> names).  Every other
command (device link, linking, CMake's probes) runs unchanged.  Standard
library only: it runs before the pipeline's environment exists.
"""

import os
import sys

COMPILE_FLAGS = {"-c", "--compile", "-dc", "--device-c", "-dw", "--device-w"}


def launch(argv: list[str]) -> list[str]:
    if not argv:
        raise SystemExit("nvcc_deterministic: no compiler command given")
    if COMPILE_FLAGS.intersection(argv) and "-o" in argv:
        index = argv.index("-o")
        if index + 1 < len(argv):
            output = argv[index + 1]
            return [*argv, f"-frandom-seed={output}", "-objtemp"]
    return list(argv)


if __name__ == "__main__":
    command = launch(sys.argv[1:])
    os.execvp(command[0], command)
