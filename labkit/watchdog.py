"""Stops the embedded server once no kernel has used it for LABKIT_IDLE_STOP seconds.

Started next to the server (``python -m labkit.watchdog HOME``), detached, so it outlives the
kernel that started it. Kernels register in the server's kernels registry; a kernel killed
outright cannot unregister, so liveness is checked by pid and start time. Every few seconds
it also kills pgbench processes whose kernel is gone. One watchdog per home (a file lock);
it exits when the server is gone.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import filelock

from . import config
from .embedded import EmbeddedServer

POLL_SECONDS = 2.0


def watch(home: Path) -> None:
    server = EmbeddedServer(home)
    try:
        with filelock.FileLock(str(home / "watchdog.lock"), timeout=0):
            idle_since = None
            while server.running():
                server.reap_orphans()
                if server.kernels.live():
                    idle_since = None
                else:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= config.idle_stop_seconds() and server.stop_if_unused():
                        return
                time.sleep(POLL_SECONDS)
    except filelock.Timeout:
        return  # another watchdog already watches this home


if __name__ == "__main__":
    watch(Path(sys.argv[1]))
