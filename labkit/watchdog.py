"""Stops the embedded server once no kernel has used it for LABKIT_IDLE_STOP seconds.

Started next to the server (``python -m labkit.watchdog HOME``) in its own session, so it
outlives the kernel that started it. Kernels register their pid under ``HOME/clients``;
a kernel killed with SIGKILL cannot unregister, so liveness is checked by pid and start
time. One watchdog per home (a file lock); it exits when the server is gone.
"""

from __future__ import annotations

import fcntl
import sys
import time
from pathlib import Path

from . import config
from .server import EmbeddedServer

POLL_SECONDS = 2.0


def watch(home: Path) -> None:
    server = EmbeddedServer(home)
    with open(home / "watchdog.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another watchdog already watches this home
        idle_since = None
        while server.running():
            clients = server.live_clients()
            server.reap_stale_runs()
            if clients:
                idle_since = None
            else:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= config.idle_stop_seconds():
                    server.stop()
                    return
            time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    watch(Path(sys.argv[1]))
