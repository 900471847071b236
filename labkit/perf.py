"""perf, where the machine has it and allows it; a one-line reason where it does not."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Availability:
    available: bool
    message: str


@cache
def availability() -> Availability:
    """Whether ``perf record -e cpu-clock`` works here (checked once, by trying it)."""
    if sys.platform != "linux":
        return Availability(False, f"perf is Linux-only (this is {sys.platform}): labs fall back to wait-event sampling")
    binary = shutil.which("perf")
    if binary is None:
        return Availability(False, "perf is not installed (Debian/Ubuntu: apt-get install linux-perf); "
                                   "labs fall back to wait-event sampling")
    with tempfile.TemporaryDirectory() as folder:
        try:
            result = subprocess.run([binary, "record", "-q", "-e", "cpu-clock", "-o", f"{folder}/probe.data", "--", "true"],
                                    capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as error:
            return Availability(False, f"perf did not run ({error}); labs fall back to wait-event sampling")
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["unknown reason"])[0]
        return Availability(False, f"perf is not permitted here ({reason}); labs fall back to wait-event sampling")
    return Availability(True, f"{binary} works with software events (-e cpu-clock)")
