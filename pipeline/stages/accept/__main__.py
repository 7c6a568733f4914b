"""`python3 -m pipeline.stages.accept run|pinned|routes ...`: the acceptance runner from a plain clone, standard library only."""

import sys

from pipeline.stages.accept import main

sys.exit(main())
