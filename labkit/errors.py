"""The one exception type students see: a short sentence that says what to do."""

from __future__ import annotations


class LabkitError(RuntimeError):
    """A problem labkit can explain in a sentence or two.

    The message is shown to the student as it is (the magics print it without a
    traceback), so it says what happened and what to do about it.
    """

    def __init__(self, message: str, *, detail: str | None = None):
        self.detail = detail
        super().__init__(message if not detail else f"{message}\n{detail}")
        self.short = message


class UsageError(LabkitError):
    """Bad input from the user: an unknown option, an out-of-range value."""


def tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` lines of ``text`` (for attaching a log to an error)."""
    rows = [row for row in text.splitlines() if row.strip()]
    return "\n".join(rows[-lines:])
