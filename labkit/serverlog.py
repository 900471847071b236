"""What the server itself logged: the lock waits of a run (``log_lock_waits``), why a start failed.

With ``log_lock_waits`` on (every lab server has it), a backend whose lock wait reaches
``deadlock_timeout`` runs the deadlock check and then logs ``process N still waiting for ... after
X ms``; when it gets the lock it logs ``process N acquired ... after Y ms`` (``ProcSleep`` in
src/backend/storage/lmgr/proc.c). A backend woken again before its lock is granted (its latch set
by anything) logs "still waiting" once more, so one wait can leave several such lines: the waits
are counted per process, from its first "still waiting" line to its "acquired" line (or the end),
which is how many waits lasted ``deadlock_timeout`` or longer, each of which ran the deadlock check
once: a direct count that a sampled probe cannot give, and one a transaction's latency cannot either
(a transaction can wait many times, each wait short).

Only a server whose log labkit can read (the embedded one) gives these figures; elsewhere the
record says so (None). The log is read from where it stood when the run began: lines that other
sessions of the same server wrote meanwhile are counted too.

A server that does not start says why in its log, on a ``FATAL`` line (``could not map anonymous
shared memory``, a library it cannot load, a port already taken): :func:`refusal` finds it.
"""

from __future__ import annotations

import re
from pathlib import Path

LOCK_LINE = re.compile(r"process (\d+) (still waiting for|acquired) (\w+) on (\w+)[^\n]* after ([\d.]+) ms")
DEADLOCK = re.compile(r"ERROR:\s+deadlock detected")
FATAL = re.compile(r"\b(?:FATAL|PANIC):\s+(.*)")
PORT_TAKEN = re.compile(r"could not (?:bind|create any TCP/IP sockets)")


def position(log_file: Path | str | None) -> int | None:
    """Where the log ends now (bytes), None when there is no log to read."""
    try:
        return Path(log_file).stat().st_size if log_file else None
    except OSError:
        return None


def lock_waits(log_file: Path | str | None, since: int | None) -> dict | None:
    """The lock-wait lines logged after ``since``: counts, and the longest wait a line reported.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "server.log"
    >>> _ = path.write_text("old line\\n")
    >>> start = position(path)
    >>> _ = path.write_text("old line\\n"
    ...     "2026-11-26 LOG:  process 7 still waiting for ShareLock on transaction 9 after 1000.1 ms\\n"
    ...     "2026-11-26 DETAIL:  Process holding the lock: 8. Wait queue: 7.\\n"
    ...     "2026-11-26 LOG:  process 7 still waiting for ShareLock on transaction 9 after 1200.0 ms\\n"
    ...     "2026-11-26 LOG:  process 7 acquired ShareLock on transaction 9 after 1523.4 ms\\n")
    >>> lock_waits(path, start)
    {'waits': 1, 'still_waiting_lines': 2, 'acquired': 1, 'deadlocks': 0, 'longest_wait_ms': 1523.4, 'by_lock': {'ShareLock on transaction': 1}}
    >>> lock_waits(None, None) is None
    True
    """
    if since is None or not log_file or position(log_file) is None:
        return None
    text = _since(log_file, since)
    open_waits: set[str] = set()  # processes between their first "still waiting" line and "acquired"
    waits = lines = acquired = 0
    by_lock: dict[str, int] = {}
    longest: float | None = None
    for pid, what, mode, kind, ms in LOCK_LINE.findall(text):
        longest = max(longest or 0.0, float(ms))
        if what == "acquired":
            acquired += 1
            open_waits.discard(pid)
            continue
        lines += 1
        if pid not in open_waits:  # a new wait; a second line of the same one otherwise
            open_waits.add(pid)
            waits += 1
            by_lock[f"{mode} on {kind}"] = by_lock.get(f"{mode} on {kind}", 0) + 1
    return {"waits": waits, "still_waiting_lines": lines, "acquired": acquired,
            "deadlocks": len(DEADLOCK.findall(text)), "longest_wait_ms": longest, "by_lock": by_lock}


def _since(log_file: Path | str | None, since: int | None) -> str:
    """The log's text written after byte ``since`` ('' when there is none to read)."""
    if since is None or not log_file:
        return ""
    try:
        with open(log_file, "rb") as handle:
            handle.seek(since)
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def refusal_in(text: str) -> str | None:
    """The server's reason for not starting: its first FATAL (or PANIC) message in ``text``, None without one.

    >>> refusal_in("2026-12-01 22:25:06.325 UTC [17946] LOG:  database system is shut down\\n"
    ...            "2026-12-01 22:25:06.378 UTC [17996] FATAL:  could not map anonymous shared memory: Cannot "
    ...            "allocate memory\\n2026-12-01 22:25:06.378 UTC [17996] HINT:  This error usually means ...\\n")
    'could not map anonymous shared memory: Cannot allocate memory'
    >>> refusal_in("LOG:  database system is ready to accept connections\\n") is None
    True
    """
    found = FATAL.search(text)
    return found.group(1).strip() if found else None


def refusal(log_file: Path | str | None, since: int | None) -> str | None:
    """Why the server did not start, from what its log says after ``since`` (None when it does not say)."""
    return refusal_in(_since(log_file, since))

