"""Stops the embedded server once no kernel has used it for LABKIT_IDLE_STOP seconds.

Started next to the server (``python -m labkit.watchdog HOME``), detached, so it outlives the
kernel that started it. Kernels register in the server's kernels registry; a kernel killed
outright cannot unregister, so liveness is checked by pid and start time. Every few seconds
it also kills pgbench processes whose kernel is gone, and ends their runs' backends. One
watchdog per home (a file lock); it says who it is in ``watchdog.json`` (so that
``labkit.start()`` starts another when it has died), logs to ``log/watchdog.log`` in the
server's home (where what it prints goes too: a traceback from before its logging is set up),
and exits when the server is gone. A check that fails is logged and tried
again at the next poll: the watchdog does not die of it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from pathlib import Path

import filelock

from . import config, processes
from .embedded import EmbeddedServer
from .registry import write_whole

POLL_SECONDS = 2.0
log = logging.getLogger("labkit.watchdog")  # not __name__: run as a program, that is "__main__"


class _LogFile(logging.FileHandler):
    """A log file opened never through a link: the log folder is the server's user's (see config.append_no_link)."""

    def _open(self):
        return io.TextIOWrapper(config.append_no_link(Path(self.baseFilename)), encoding=self.encoding,
                                line_buffering=True)


def _log_to(path: Path) -> None:
    """Everything labkit logs in this process (the watchdog's own lines, and db's ended backends) goes to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = _LogFile(path, encoding=config.ENCODING)
    handler.setFormatter(logging.Formatter("%(asctime)s watchdog %(process)d %(levelname)s: %(message)s"))
    root = logging.getLogger("labkit")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _check(server: EmbeddedServer, idle_since: float | None) -> tuple[bool, float | None]:
    """One poll: reap orphans, then stop the server if it has been unused long enough; (stopped, idle_since)."""
    killed = server.reap_orphans()
    if killed:
        log.info("killed pgbench %s: its kernel is gone", ", ".join(map(str, killed)))
    if server.kernels.live():
        return False, None
    idle_since = idle_since or time.monotonic()
    if time.monotonic() - idle_since >= config.idle_stop_seconds() and server.stop_if_unused():
        log.info("stopped the server: no kernel used it for %.0f s", config.idle_stop_seconds())
        return True, idle_since
    return False, idle_since


def _stopped(server: EmbeddedServer) -> bool:
    """Whether the server is stopped, asked under its start lock.

    A restart (a setting, lab.set) leaves no postmaster.pid for a moment (about 0.1 s): read then,
    "not running" would end the watch and leave the restarted server unwatched. Every start, stop
    and restart holds the lock; one under way now answers "not stopped" (asked again at the next poll).
    """
    # stopped is no postmaster: one whose socket file is gone still runs, and is still watched (idle stop, reaping)
    if server.postmaster_pid() is not None:
        return False
    if not server.home.exists():  # removed (a test's clean-up, a reset): taking the lock would make it again
        return True
    try:
        with server.start_lock(timeout_s=POLL_SECONDS):
            return server.postmaster_pid() is None
    except filelock.Timeout:
        return False


def watch(home: Path) -> None:
    server = EmbeddedServer(home)
    if not home.is_dir():  # removed before this watchdog began: its lock file would make the home again
        return
    try:
        with filelock.FileLock(str(home / "watchdog.lock"), timeout=0):
            _log_to(server.watchdog_log)
            write_whole(server.watchdog_file, json.dumps({"pid": os.getpid(),
                                                          "created": processes.started_at(os.getpid())}))
            log.info("watching %s", home)
            idle_since, stopped_before = None, False
            while True:
                try:
                    # Gone only when found stopped at two polls in a row: a restart that failed is put right
                    # between two holds of the lock (lab.set puts back the setting, then starts the server).
                    if _stopped(server):
                        if stopped_before or not home.exists():
                            log.info("the server is gone: exiting")
                            return
                        stopped_before = True
                        time.sleep(POLL_SECONDS)
                        continue
                    stopped_before = False
                    stopped, idle_since = _check(server, idle_since)
                    if stopped:
                        return
                except Exception:  # noqa: BLE001 - a failed check must not end the watch
                    log.exception("a check failed; trying again in %.0f s", POLL_SECONDS)
                time.sleep(POLL_SECONDS)
    except filelock.Timeout:
        return  # another watchdog already watches this home


if __name__ == "__main__":
    watch(Path(sys.argv[1]))
