"""Which processes use the embedded server, and which pgbench processes belong to which kernel.

A registry is a folder with one small JSON file per process::

    {"pid": 4242, "created": 1763800000.12, "owner": 4100, "owner_created": 1763799000.5,
     "notebook": "02-flash-sale", "application_name": "labkit-run-1a2b3c4d"}

``created`` is the process's start time, so a recycled pid is never taken for the process that
registered. ``owner``, ``notebook`` and ``application_name`` are set for a pgbench process: the
kernel that started it, whose run it is (a restart that would stop it names that notebook), and
the name its clients carry (so that the backends of a run whose kernel died can be ended). A
kernel killed outright cannot remove its entries, so readers drop the dead ones themselves:

- the *kernels* registry tells the watchdog whether anyone still uses the server
  (a ``pinned`` entry keeps it up without a kernel: ``python -m labkit server start``);
- the *pgbench* registry lets the watchdog and the next ``labkit.start()`` kill a pgbench
  whose kernel died (macOS has no parent-death signal, and a Windows job may be refused),
  and end that run's backends.

On Windows a file another process is reading cannot be replaced or removed for that moment
(a sharing violation, ``PermissionError``): writes and removals are retried briefly.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from . import processes
from .config import ENCODING, RETRY_S, retrying, write_private

PINNED = "pinned"


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` so that a reader sees the old file or the new one, never half of one (mode 0600)."""
    write_private(path, text)


def unlink(path: Path) -> None:
    """Remove ``path`` if it is there (retried while another process reads it)."""
    with contextlib.suppress(FileNotFoundError):
        retrying(path.unlink)


def read_json(path: Path, seconds: float = RETRY_S):
    """A JSON file written by :func:`write_whole` (retried while Windows has it locked)."""
    return json.loads(retrying(path.read_text, ENCODING, seconds=seconds))


class ProcessRegistry:
    """A folder of process entries (see the module's docstring for the file format)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def add(self, pid: int | None = None, *, owner: int | None = None, notebook: str | None = None,
            application_name: str | None = None) -> Path | None:
        """Register ``pid`` (default: this process), owned by ``owner``; None if it has already ended."""
        pid = pid or os.getpid()
        entry: dict[str, object] = {"pid": pid, "created": processes.started_at(pid)}
        if entry["created"] is None:
            return None
        if owner is not None:
            entry.update(owner=owner, owner_created=processes.started_at(owner))
        if notebook is not None:
            entry["notebook"] = notebook
        if application_name is not None:
            entry["application_name"] = application_name
        path = self.folder / f"{pid}.json"
        write_whole(path, json.dumps(entry))
        return path

    def remove(self, pid: int | None = None) -> None:
        with contextlib.suppress(OSError):
            unlink(self.folder / f"{pid or os.getpid()}.json")

    def pin(self, pinned: bool = True) -> None:
        """Keep the server up without any kernel (``python -m labkit server start``), or stop doing so."""
        marker = self.folder / f"{PINNED}.json"
        if pinned:
            write_whole(marker, json.dumps({PINNED: True}))
        else:
            with contextlib.suppress(OSError):
                unlink(marker)

    def _entries(self):
        if not self.folder.exists():
            return
        for path in self.folder.glob("*.json"):
            try:
                yield path, read_json(path, seconds=0.2)
            except (OSError, ValueError):
                # Unreadable: being replaced right now, or left broken long ago (only then removed).
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > 60:
                        unlink(path)

    def live(self) -> list[int]:
        """Pids of the registered processes that still run (0 for the pinned entry); dead entries are removed."""
        return [entry.get("pid", 0) for entry in self.live_entries()]

    def live_entries(self) -> list[dict]:
        """The entries of the processes that still run, and the pinned one; dead entries are removed."""
        found = []
        for path, entry in self._entries():
            if entry.get(PINNED) or processes.alive(entry["pid"], entry.get("created")):
                found.append(entry)
            else:
                with contextlib.suppress(OSError):
                    unlink(path)
        return found

    def reap_orphans(self) -> list[dict]:
        """Kill registered processes whose owner has ended, and forget them.

        Returns their entries, each with ``killed``: whether it was still running (a pgbench
        that the OS already ended with its kernel was not).
        """
        orphans = []
        for path, entry in self._entries():
            owner = entry.get("owner")
            if owner is not None and processes.alive(owner, entry.get("owner_created")):
                continue
            orphans.append({**entry, "killed": processes.kill(entry["pid"], entry.get("created"))})
            with contextlib.suppress(OSError):
                unlink(path)
        return orphans
