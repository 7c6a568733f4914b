"""Tools that report on what the stages made, never running a stage: `status` (where each lane and a
release stand) and `diff` (what changed between two releases).  Each is imported only when chosen
(`pipeline/road.py: TOOLS`); they read through the format owners and the register."""
