"""Child processes on every OS: liveness, a child that dies with us, an interrupt, a detached helper.

What each platform offers, and what labkit uses:

| need                          | Linux                 | macOS                 | Windows                          |
|-------------------------------|-----------------------|-----------------------|----------------------------------|
| a child dies with its parent  | parent-death signal   | the watchdog reaps it | a Job Object that kills on close |
| interrupt a child             | SIGINT, then kill     | SIGINT, then kill     | CTRL_BREAK_EVENT, then terminate |
| a helper outliving its parent | a new session         | a new session         | its own group, out of our job    |
| no console window             | (none)                | (none)                | CREATE_NO_WINDOW (see below)     |

Windows gives a console program (pgbench, and python.exe: a venv's python.exe is a launcher that
starts the real interpreter as a console program) a console window of its own when its parent
has no console to share, as a Jupyter kernel often has not; closing that window kills the
program. So children get ``CREATE_NO_WINDOW`` there (a console without a window), and the
detached helper is never started with ``DETACHED_PROCESS`` (no console at all, which its
interpreter would then open in a new window).

Liveness is a pid *and* its start time (psutil), so a recycled pid is never mistaken for
the process that was registered.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil

from . import config

WINDOWS = sys.platform == "win32"
log = logging.getLogger(__name__)
# How long an interrupted child gets to stop by itself before it is killed.
INTERRUPT_GRACE_S = 2.0

# Windows process creation flags (winbase.h), named here so that the choice is tested on every OS.
CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000
CREATE_BREAKAWAY_FROM_JOB = 0x01000000


def windows_flags(kind: str, *, has_console: bool, breakaway: bool = True) -> int:
    """Creation flags for a Windows child: ``child`` (pgbench, a server program) or ``helper`` (detached).

    A child shares this process's console when there is one, so that Ctrl+Break reaches it;
    with none, it gets a console without a window. A helper always gets a console of its own
    without a window, and leaves this process's job (``breakaway``) so that it outlives it.

    >>> hex(windows_flags("child", has_console=True)), hex(windows_flags("child", has_console=False))
    ('0x200', '0x8000200')
    >>> hex(windows_flags("helper", has_console=True)), hex(windows_flags("helper", has_console=True, breakaway=False))
    ('0x9000200', '0x8000200')
    """
    flags = CREATE_NEW_PROCESS_GROUP
    if kind == "helper":
        return flags | CREATE_NO_WINDOW | (CREATE_BREAKAWAY_FROM_JOB if breakaway else 0)
    return flags if has_console else flags | CREATE_NO_WINDOW


def _has_console() -> bool:
    """Whether this process has a console its children can share (Windows only)."""
    if sys.platform != "win32":
        return True  # a POSIX child shares its parent's terminal, if any
    import ctypes

    return ctypes.WinDLL("kernel32").GetConsoleCP() != 0


def started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None if it does not exist."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def alive(pid: int, created: float | None = None) -> bool:
    """Whether ``pid`` runs and (when ``created`` is given) is the same process as before."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return created is None or abs(process.create_time() - created) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def kill(pid: int, created: float | None = None) -> bool:
    """Kill ``pid`` (if it is still the process that started at ``created``); True when it was."""
    if not alive(pid, created):
        return False
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).kill()
        return True
    return False


def child_options() -> dict:
    """``subprocess.Popen`` options for a child that can be interrupted on its own and dies with us.

    The child gets its own process group (so a Ctrl+C in a terminal reaches labkit first, and
    labkit decides), and on Linux a parent-death signal. On Windows the caller also puts the
    child in :func:`bind_to_this_process`'s job.
    """
    if WINDOWS:
        return {"creationflags": windows_flags("child", has_console=_has_console())}
    if sys.platform == "linux":
        return {"start_new_session": True, "preexec_fn": _die_with_parent}  # posix-only: Windows returned above
    return {"start_new_session": True}  # posix-only: Windows returned above


if sys.platform == "linux":
    import ctypes

    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child may only make the call
    _PR_SET_PDEATHSIG = 1

    def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
        """Linux: the child gets SIGKILL when its parent dies. Nothing else runs there (the parent has threads)."""
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)  # posix-only: defined on Linux alone (sys.platform check above)


def bind_to_this_process(process: subprocess.Popen) -> None:
    """On Windows, put ``process`` in a job that Windows closes, killing it, when this process ends.

    Elsewhere nothing is needed here: Linux has the parent-death signal, and on macOS the
    watchdog reaps a child whose owner is gone. Where the job cannot be made (a parent job that
    forbids it), the watchdog remains.
    """
    if not WINDOWS:
        return
    from . import _windows

    with contextlib.suppress(OSError):
        _windows.kill_on_close_job().assign(process.pid)


def interrupt(process: subprocess.Popen, grace_s: float = INTERRUPT_GRACE_S) -> None:
    """Ask ``process`` to stop as an interactive Ctrl+C would; kill it if it has not within ``grace_s``."""
    if process.poll() is None:
        try:
            if sys.platform == "win32":
                process.send_signal(signal.CTRL_BREAK_EVENT)  # Windows has no SIGINT for another process
            else:
                process.send_signal(signal.SIGINT)  # posix-only: Windows above
        except (OSError, ValueError):
            grace_s = 0  # no console to share (a Windows kernel often has none): end it at once
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class HeldInterrupts:
    """Ctrl+C held from :meth:`hold` until :meth:`release`, which says whether one came meanwhile.

    For what must not stop halfway once it has begun (a finished run's record, the ending of an
    interrupted run's backends): a second Ctrl+C there would lose the run or leave its backends
    waiting. Only the main thread hears SIGINT (Windows' console and a kernel's interrupt, sent
    there through ``_thread.interrupt_main``, included); elsewhere nothing is held.
    """

    def __init__(self, what: str):
        self.what = what
        self.came = False
        self._previous: Any = None
        self._held = False

    def hold(self) -> None:
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)  # every OS; SIG_DFL and SIG_IGN are put back as found
        self._previous = signal.default_int_handler if previous is None else previous  # None: set outside Python
        signal.signal(signal.SIGINT, self._note)  # every OS: Python raises SIGINT for Ctrl+C on Windows too
        self._held = True

    def _note(self, _signum, _frame) -> None:
        self.came = True
        log.info("interrupt held until %s", self.what)

    def release(self) -> bool:
        if self._held:
            signal.signal(signal.SIGINT, self._previous)  # every OS, as in hold()
            self._previous, self._held = None, False
        return self.came


def spawn_detached(argv: list[str], log: Path | None = None) -> None:
    """Start ``argv`` so that it outlives this process, and is never this process's child.

    A short-lived launcher starts it and exits: the helper is then nobody's zombie and no
    ``Popen`` object of ours warns about it at exit. The helper's output, and the launcher's
    if it fails, is appended to ``log`` (else discarded): a helper that dies before it can
    log anything (an import that fails) leaves its traceback there.
    """
    launcher = "import json, sys; from labkit.processes import _popen_detached; _popen_detached(*json.loads(sys.argv[1]))"
    options: dict[str, Any] = {}
    if WINDOWS:
        options["creationflags"] = windows_flags("helper", has_console=False, breakaway=False)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", launcher, json.dumps([argv, str(log) if log else None])], check=False,
                          timeout=30, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"}, **options)  # every file labkit writes is UTF-8
    if done.returncode != 0 and log is not None:
        with config.append_no_link(Path(log)) as handle:
            handle.write(done.stderr)


def _popen_detached(argv: list[str], log: str | None = None) -> None:
    with config.append_no_link(Path(log)) if log else contextlib.nullcontext(subprocess.DEVNULL) as output:  # the helper has its own copy
        options: dict = {"stdin": subprocess.DEVNULL, "stdout": output, "stderr": subprocess.STDOUT, "close_fds": True}
        if not WINDOWS:
            subprocess.Popen(argv, start_new_session=True, **options)  # posix-only: Windows below
            return
        try:  # out of any job the kernel runs in, so that closing the job does not end the helper
            subprocess.Popen(argv, creationflags=windows_flags("helper", has_console=False), **options)
        except OSError:  # the job forbids breaking away: the helper then lives as long as the job
            subprocess.Popen(argv, creationflags=windows_flags("helper", has_console=False, breakaway=False), **options)
