"""The GPU side of the harness: host facts and VRAM/power sampling through `nvidia-smi`.

`GpuMonitor` is what the gates need (facts once, samples while a request
runs); `NvidiaSmi` is the real one.  A host without the driver has no facts
(`facts()` is None) and the gates that need them are skipped, never guessed.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


class GpuMonitor(Protocol):
    def facts(self) -> dict[str, Any] | None: ...

    def sampling(self) -> contextlib.AbstractContextManager[GpuSamples]: ...


@dataclass
class GpuSamples:
    memory_used_mib: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)

    def add(self, memory: float | None, power: float | None) -> None:
        if memory is not None:
            self.memory_used_mib.append(memory)
        if power is not None:
            self.power_w.append(power)

    def extend(self, other: GpuSamples) -> None:
        """Add another sampling window's samples (the gates' windows add up to one run's peak)."""
        self.memory_used_mib.extend(other.memory_used_mib)
        self.power_w.extend(other.power_w)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


class NvidiaSmi:
    """Host facts and VRAM/power sampling through `nvidia-smi` (absent: facts() is None)."""

    def __init__(self, executable: str = "nvidia-smi", index: int = 0, interval: float = 0.25) -> None:
        self.executable = executable
        self.index = index
        self.interval = interval
        self._facts: dict[str, Any] | None | bool = False

    def _query(self, *args: str, timeout: float = 20.0) -> str | None:
        try:
            result = subprocess.run([self.executable, *args], capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return result.stdout if result.returncode == 0 else None

    def facts(self) -> dict[str, Any] | None:
        if self._facts is not False:
            return self._facts  # type: ignore[return-value]
        self._facts = None
        rows = self._query("--query-gpu=name,driver_version,compute_cap,memory.total", "--format=csv,noheader,nounits")
        with_cc = rows is not None
        if rows is None:  # drivers before compute_cap was a query field
            rows = self._query("--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits")
        if rows is None:
            return None
        lines = [line for line in rows.splitlines() if line.strip()]
        if not lines or self.index >= len(lines):
            return None
        parts = [p.strip() for p in lines[self.index].split(",")]
        summary = self._query() or ""
        cuda = re.search(r"CUDA Version:\s*([0-9.]+)", summary)
        version = self._query("--version") or ""
        smi = re.search(r"NVIDIA-SMI version\s*:\s*(\S+)", version) or re.search(r"NVIDIA-SMI\s+([0-9.]+)", summary)
        facts: dict[str, Any] = {
            "gpu_name": parts[0],
            "driver": parts[1],
            "compute_capability": parts[2] if with_cc else None,
            "memory_total_mib": _number(parts[-1]),
            "cuda": cuda.group(1) if cuda else None,
            "nvidia_smi": smi.group(1) if smi else None,
            "gpu_index": self.index,
            "gpu_count": len(lines),
        }
        if isinstance(facts["memory_total_mib"], float) and facts["memory_total_mib"].is_integer():
            facts["memory_total_mib"] = int(facts["memory_total_mib"])
        self._facts = facts
        return facts

    def sample(self) -> tuple[float | None, float | None]:
        out = self._query(f"--id={self.index}", "--query-gpu=memory.used,power.draw", "--format=csv,noheader,nounits", timeout=5.0)
        if not out or not out.strip():
            return None, None
        parts = out.strip().splitlines()[0].split(",")
        return _number(parts[0]), _number(parts[1]) if len(parts) > 1 else None

    @contextlib.contextmanager
    def sampling(self) -> Iterator[GpuSamples]:
        samples = GpuSamples()
        if self.facts() is None:
            yield samples
            return
        stop = threading.Event()

        def loop() -> None:
            while True:
                samples.add(*self.sample())
                if stop.wait(self.interval):
                    break

        thread = threading.Thread(target=loop, name="nvidia-smi-sampler", daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join(timeout=10)
