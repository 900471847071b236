"""Which processes use the embedded server, and which pgbench processes belong to which kernel.

A registry is a folder with one small JSON file per process::

    {"pid": 4242, "created": 1763800000.12, "owner": 4100, "owner_created": 1763799000.5,
     "notebook": "02-flash-sale"}

``created`` is the process's start time, so a recycled pid is never taken for the process that
registered. ``owner`` and ``notebook`` are set for a pgbench process: the kernel that started it,
and whose run it is (a restart that would stop it names that notebook). A kernel
killed outright cannot remove its entries, so readers drop the dead ones themselves:

- the *kernels* registry tells the watchdog whether anyone still uses the server
  (a ``pinned`` entry keeps it up without a kernel: ``python -m labkit server start``);
- the *pgbench* registry lets the watchdog and the next ``labkit.start()`` kill a pgbench
  whose kernel died (macOS has no parent-death signal, and a Windows job may be refused).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from . import processes
from .config import ENCODING, private_dir

PINNED = "pinned"


def _write_whole(path: Path, entry: dict) -> None:
    """Write an entry so that a reader sees the old file or the new one, never half of one."""
    private_dir(path.parent)
    partial = path.with_name(path.name + f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(entry), encoding=ENCODING)
    os.replace(partial, path)


class ProcessRegistry:
    """A folder of process entries (see the module's docstring for the file format)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def add(self, pid: int | None = None, *, owner: int | None = None, notebook: str | None = None) -> Path | None:
        """Register ``pid`` (default: this process), owned by ``owner``; None if it has already ended."""
        pid = pid or os.getpid()
        entry = {"pid": pid, "created": processes.started_at(pid)}
        if entry["created"] is None:
            return None
        if owner is not None:
            entry.update(owner=owner, owner_created=processes.started_at(owner))
        if notebook is not None:
            entry["notebook"] = notebook
        path = self.folder / f"{pid}.json"
        _write_whole(path, entry)
        return path

    def remove(self, pid: int | None = None) -> None:
        with contextlib.suppress(OSError):
            (self.folder / f"{pid or os.getpid()}.json").unlink()

    def pin(self, pinned: bool = True) -> None:
        """Keep the server up without any kernel (``python -m labkit server start``), or stop doing so."""
        marker = self.folder / f"{PINNED}.json"
        if pinned:
            _write_whole(marker, {PINNED: True})
        else:
            with contextlib.suppress(OSError):
                marker.unlink()

    def _entries(self):
        if not self.folder.exists():
            return
        for path in self.folder.glob("*.json"):
            try:
                yield path, json.loads(path.read_text(encoding=ENCODING))
            except (OSError, ValueError):
                # Unreadable: being replaced right now, or left broken long ago (only then removed).
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > 60:
                        path.unlink()

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
                path.unlink(missing_ok=True)
        return found

    def reap_orphans(self) -> list[int]:
        """Kill registered processes whose owner has ended; returns the pids killed."""
        killed = []
        for path, entry in self._entries():
            owner = entry.get("owner")
            if owner is not None and processes.alive(owner, entry.get("owner_created")):
                continue
            if processes.kill(entry["pid"], entry.get("created")):
                killed.append(entry["pid"])
            path.unlink(missing_ok=True)
        return killed
