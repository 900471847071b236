"""What can go wrong, as the student sees it (the package docstring lists the whole contract).

- :class:`UsageError`: a mistake in what was asked (an unknown option, too many clients);
  one line that says what to do. The magics show it without a traceback.
- :class:`RunFailed`: pgbench stopped on its own; the message is pgbench's own.
- :class:`ServerGone`: the lab server stopped answering; one line, what to do.
- :class:`ServerStartFailed`: a backend that cannot start; the tail of its log is attached.
- Database errors that are the lesson (deadlock, lock timeout, serialization failure) are
  ``psycopg.Error`` and pass through unchanged, with their SQLSTATE.
"""

from __future__ import annotations

from typing import Any


class LabkitError(RuntimeError):
    """A problem labkit can explain in a sentence or two.

    ``short`` is the sentence; ``detail`` (a log's tail, the command that ran) follows it in
    ``str(error)``. The magics show the message as it is, without a traceback.
    """

    def __init__(self, message: str, *, detail: str | None = None):
        self.detail = detail
        self.short = message
        self.run: Any = None  # a run measured whose record the error kept from being saved (the caller keeps it)
        super().__init__(message if not detail else f"{message}\n{detail}")


class UsageError(LabkitError):
    """Bad input from the user: an unknown option, an out-of-range value, a missing step."""


class RunFailed(LabkitError):
    """pgbench stopped before doing any work (its own message says why)."""


class ServerGone(LabkitError):
    """The lab server does not answer any more (stopped, restarted, or the machine slept)."""


class ServerStartFailed(LabkitError):
    """A server backend could not start; ``detail`` holds the tail of its log, ``reason`` the server's own word."""

    def __init__(self, message: str, *, detail: str | None = None, reason: str | None = None):
        super().__init__(message, detail=detail)
        self.reason = reason  # what the server logged as it refused to start (its FATAL message), when known


def tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` non-blank lines of ``text`` (for attaching a log to an error).

    >>> tail("a\\n\\nb\\nc\\n", 2)
    'b\\nc'
    """
    rows = [row for row in text.splitlines() if row.strip()]
    return "\n".join(rows[-lines:])


def connection_problem(error: BaseException) -> str:
    """One line on why a connection failed: libpq's reason (its first line), without the hint below it.

    >>> connection_problem(Exception('connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\\n\\tIs the server running on that host?'))
    'connection to server at "127.0.0.1", port 1 failed: Connection refused'
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[0].removeprefix("connection failed: ")
