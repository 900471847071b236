"""What the operating system allows a lab: open files, pgbench's clients, semaphores.

Said before a run, not in the middle of one: ``labkit.start()`` and ``python -m labkit doctor``
list what a profile asks for beyond these limits, and what to do.

- Open files: each pgbench client is a socket. macOS gives a process 256 by default; labkit
  raises its own soft limit up to the hard one, and on macOS up to ``kern.maxfilesperproc``
  (pgbench inherits it).
- pgbench waits on its sockets with ``ppoll`` on Linux but with ``select`` on macOS and
  Windows, which cannot watch more than ``FD_SETSIZE`` (1024) sockets: about 1,020 clients
  per pgbench on macOS ("socket file descriptor out of range for select()"), and 1,023 per
  pgbench thread (``-j``) on Windows.
- PostgreSQL on macOS uses System V semaphores; macOS allows 87,381 by default, far more
  than any profile needs, but a Mac whose limits were lowered is told what to raise.
"""

from __future__ import annotations

import os
import subprocess
import sys

from .profiles import Profile

MACOS = sys.platform == "darwin"
WINDOWS = sys.platform == "win32"
# macOS refuses a soft limit above kern.maxfilesperproc (10240 by default), whatever the hard limit says.
MACOS_OPEN_MAX = 10240
# pgbench with select(): FD_SETSIZE (1024), less the files pgbench itself holds open.
SELECT_CLIENTS = 1020


def file_limit() -> tuple[int, int] | None:
    """(soft, hard) limit of open files for this process; None where there is no such limit (Windows)."""
    if sys.platform == "win32":
        return None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def raise_file_limit() -> int | None:
    """Raise this process's soft limit of open files as far as the OS lets it; the new limit (None: no limit)."""
    if sys.platform == "win32":
        return None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if MACOS:
        wanted = min(wanted, _sysctl("kern.maxfilesperproc") or MACOS_OPEN_MAX)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            return wanted
        except (ValueError, OSError):
            return soft
    return soft


def pgbench_client_limit(threads: int = 1) -> int | None:
    """The most clients one pgbench can drive here with ``threads`` threads (None: no such limit)."""
    if MACOS:
        return SELECT_CLIENTS
    if WINDOWS:
        return (SELECT_CLIENTS + 3) * threads
    return None


def check_pgbench_clients(clients: int, threads: int) -> None:
    """Refuse a run pgbench would abort here for want of sockets it can wait on (macOS, Windows)."""
    from .errors import UsageError

    most = pgbench_client_limit(threads)
    if most is not None and clients > most:
        remedy = "raise -j" if WINDOWS else "lower -c, or run pgbench on Linux"
        raise UsageError(f"pgbench on {sys.platform} drives at most {most} clients with -j {threads} "
                         f"(it waits with select()): {remedy}.")


def semaphores_needed(max_connections: int) -> int:
    """System V semaphores PostgreSQL 18 needs for ``max_connections`` (sets of 16, plus one each).

    With the default worker settings PostgreSQL 18 needs ``max_connections + 74`` process
    semaphores (``postgres -C num_os_semaphores``).

    >>> semaphores_needed(100), semaphores_needed(600)
    (187, 731)
    """
    sets = -(-(max_connections + 74) // 16)
    return sets * 17


def _sysctl(name: str) -> int | None:
    try:
        result = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, encoding="ascii",
                                errors="replace", timeout=5)
        return int(result.stdout.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def problems(profile: Profile, *, clients: int | None = None) -> list[str]:
    """What ``profile`` (and a run of ``clients``) asks for beyond this OS's limits, each with what to do."""
    found = []
    clients = clients or profile.largest_clients
    limit = file_limit()
    if limit is not None and limit[0] < clients + 64:
        found.append(f"This process may open {limit[0]} files and the '{profile.name}' profile runs up to {clients} "
                     f"clients (one socket each): raise the limit before starting Jupyter (ulimit -n {clients + 256}).")
    most = pgbench_client_limit(threads=os.cpu_count() or 1)
    if most is not None and clients > most:
        found.append(f"pgbench on {sys.platform} drives at most about {most} clients (it waits with select()); the "
                     f"'{profile.name}' profile asks for {clients}: use the laptop profile, or run pgbench on Linux.")
    if MACOS:
        available = _sysctl("kern.sysv.semmns")
        needed = semaphores_needed(profile.max_connections)
        if available is not None and available < needed:
            found.append(f"PostgreSQL on macOS needs {needed} System V semaphores for max_connections="
                         f"{profile.max_connections}; this Mac allows {available}. Raise it once with "
                         f"sudo sysctl -w kern.sysv.semmns={needed} kern.sysv.semmni={needed // 17 + 1} "
                         f"(or use a smaller profile).")
    return found


__all__ = ["check_pgbench_clients", "file_limit", "pgbench_client_limit", "problems", "raise_file_limit", "semaphores_needed"]
