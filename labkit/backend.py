"""The server interface every backend implements, the lab settings, and the factory that picks one.

Three backends, one interface (:class:`Server`), so callers never ask which one they have:

- ``embedded`` (:mod:`labkit.embedded`): the wheel's PostgreSQL 18, run by labkit;
- ``external`` (:mod:`labkit.external`): any server named by ``LABKIT_DSN``; labkit runs nothing;
- ``docker`` (:mod:`labkit.docker_backend`): the image in ``docker/`` through testcontainers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import psycopg.conninfo
import psycopg.pq

from . import config
from .errors import UsageError
from .profiles import Profile

# Settings every lab server gets. Why each one:
#   shared_preload_libraries          pg_stat_statements shows where time goes per statement
#   client_connection_check_interval  a backend stuck in a lock wait notices its client died
#   synchronous_commit off            results depend on CPU and locks, not on the laptop's disk
#   log_lock_waits                    the server log names long lock waits
#   track_io_timing                   I/O waits get times in pg_stat_* views
#   jit off                           short lab queries pay no compilation time
LAB_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "client_connection_check_interval": "2s",
    "synchronous_commit": "off",
    "log_lock_waits": "on",
    "track_io_timing": "on",
    "jit": "off",
}

MANUAL = "https://www.postgresql.org/docs/18/"


@dataclass(frozen=True)
class PlatformNote:
    """Where the manual says a setting works only on some operating systems."""

    setting: str
    systems: tuple[str, ...]  # the systems (as :func:`system_of` names them) that accept the value
    manual: str  # the manual's page and anchor
    says: str  # what it says, in short
    accepted: str  # the value every system accepts (written where labkit's own is refused)
    elsewhere: str  # what labkit does where its value is refused


# Every setting labkit writes (these, max_connections, shared_buffers, and the transport's
# listen_addresses, port, unix_socket_directories, unix_socket_permissions) was read against its
# entry in the manual at 18 and its check hook. One is refused by an OS: on Windows,
# client_connection_check_interval fails its check hook for any value but 0 (there is no wait
# event that reports a closed socket), "must be set to 0 on this platform", and at startup the
# configuration file then "contains errors": the server does not start. The others' notes
# refuse nothing: shared_preload_libraries is loaded again by each backend on Windows (slower
# connections, same result); track_io_timing "may cause significant overhead on some
# platforms" (pg_test_timing measures it); unix_socket_permissions is ignored where the OS
# ignores socket permissions, which is why the socket's folder is private too.
PLATFORM_NOTES = (
    PlatformNote("client_connection_check_interval", ("linux", "macos", "bsd", "illumos"),
                 MANUAL + "runtime-config-connection.html#GUC-CLIENT-CONNECTION-CHECK-INTERVAL",
                 "relies on kernel events exposed by Linux, macOS, illumos and the BSD family; "
                 "not available on other systems", "0",
                 "left at 0; the watchdog ends the backends of a run whose kernel died, by the run's "
                 "application_name (labkit.db.terminate_runs)"),
)


def system_of(platform: str) -> str:
    """An operating system's name as the manual's platform notes use it, from ``sys.platform``.

    >>> [system_of(p) for p in ("linux", "darwin", "win32", "cygwin", "freebsd14", "sunos5")]
    ['linux', 'macos', 'windows', 'windows', 'bsd', 'illumos']
    """
    if platform.startswith(("win32", "cygwin", "msys")):
        return "windows"
    if platform == "darwin":
        return "macos"
    if platform.startswith("linux"):
        return "linux"
    if "bsd" in platform or platform.startswith("dragonfly"):
        return "bsd"
    if platform.startswith(("sunos", "illumos")):
        return "illumos"
    return platform


def system_of_version(version: str) -> str | None:
    """The operating system a server runs on, from its ``version()`` string (None if it does not say).

    >>> system_of_version("PostgreSQL 18.1 on x86_64-windows, compiled by msvc-19.44.35217, 64-bit")
    'windows'
    >>> system_of_version("PostgreSQL 18.1 on aarch64-apple-darwin24.6.0, compiled by Apple clang")
    'macos'
    >>> system_of_version("PostgreSQL 18.1 (Debian 18.1-1.pgdg13+2) on x86_64-pc-linux-gnu, compiled by gcc")
    'linux'
    """
    platform = version.lower()
    for marker, system in (("windows", "windows"), ("mingw", "windows"), ("darwin", "macos"), ("linux", "linux"),
                           ("bsd", "bsd"), ("solaris", "illumos"), ("illumos", "illumos")):
        if marker in platform:
            return system
    return None


# What lab.settings() shows.
SETTINGS_THAT_MATTER = (
    "server_version", "max_connections", "shared_buffers", "work_mem", "synchronous_commit", "fsync",
    "shared_preload_libraries", "client_connection_check_interval", "deadlock_timeout", "autovacuum",
    "gin_pending_list_limit", "max_wal_size", "jit", "listen_addresses",
)


def platform_messages(system: str) -> list[str]:
    """What a student on ``system`` is told about a setting the manual says that system refuses.

    >>> platform_messages("windows")[0].split(":")[0]
    'client_connection_check_interval is 0 on windows'
    >>> platform_messages("linux")
    []
    """
    return [f"{note.setting} is {note.accepted} on {system}: the manual says it {note.says} ({note.manual}). "
            f"labkit: {note.elsewhere}." for note in PLATFORM_NOTES if system not in note.systems]


def lab_settings(profile: Profile, system: str | None = None) -> dict[str, str]:
    """The settings a lab server on ``system`` (default: this one) should have under ``profile``.

    A setting the manual says ``system`` refuses (:data:`PLATFORM_NOTES`) is left out there.
    """
    system = system or system_of(sys.platform)
    refused = {note.setting for note in PLATFORM_NOTES if system not in note.systems}
    settings = {"max_connections": str(profile.max_connections), "shared_buffers": profile.shared_buffers,
                **LAB_SETTINGS}
    return {name: value for name, value in settings.items() if name not in refused}


def quote_setting(value) -> str:
    """A value as it is written in postgresql.conf or ALTER SYSTEM.

    >>> quote_setting("2s"), quote_setting(2000), quote_setting("it's")
    ("'2s'", "'2000'", "'it''s'")
    """
    return "'" + str(value).replace("'", "''") + "'"


@cache
def _libpq_variables() -> dict[str, str]:
    """The connection parameters libpq reads from environment variables, and those variables (libpq's own list).

    >>> _libpq_variables()["host"], _libpq_variables()["require_auth"], "keepalives" in _libpq_variables()
    ('PGHOST', 'PGREQUIREAUTH', False)
    """
    return {option.keyword.decode(): option.envvar.decode() for option in psycopg.pq.Conninfo.get_defaults()
            if option.envvar}


def libpq_environment(conninfo: str) -> dict[str, str]:
    """The libpq environment variables that carry ``conninfo``.

    A child program such as pgbench then needs no connection string (with its password) in
    its command line, where ``ps`` shows it to every user of the machine.

    >>> sorted(libpq_environment("host='labkit run' port=5432 user=postgres password=s3cret dbname=lab_x").items())
    [('PGDATABASE', 'lab_x'), ('PGHOST', 'labkit run'), ('PGPASSWORD', 's3cret'), ('PGPORT', '5432'), ('PGUSER', 'postgres')]
    """
    parameters = psycopg.conninfo.conninfo_to_dict(conninfo)
    variables = _libpq_variables()
    unknown = [name for name in parameters if name not in variables]
    if unknown:
        raise UsageError(f"labkit cannot pass the connection parameter(s) {', '.join(unknown)} to pgbench (libpq "
                         "reads them from no environment variable): leave them out of LABKIT_DSN.")
    return {variables[name]: str(value) for name, value in parameters.items()}


@dataclass(frozen=True)
class Status:
    """What ``python -m labkit server status`` prints."""

    backend: str
    running: bool
    version: str | None = None
    uri: str | None = None
    data_dir: str | None = None
    log_file: str | None = None
    pid: int | None = None
    kernels: int = 0
    listens: str | None = None

    def lines(self) -> list[str]:
        state = "running" if self.running else "stopped"
        rows = [f"backend:  {self.backend} ({state})"]
        for label, value in (("version", self.version), ("uri", self.uri), ("listens", self.listens),
                             ("data dir", self.data_dir), ("log", self.log_file), ("pid", self.pid)):
            if value:
                rows.append(f"{label + ':':<9} {value}")
        rows.append(f"kernels using it: {self.kernels}")
        return rows


class Server:
    """What every backend offers. Subclasses set ``kind`` and override what they manage."""

    kind = "server"
    #: whether labkit may restart this server (a setting that needs a restart)
    can_restart = False
    #: the folder holding the server's log (None when labkit cannot read it)
    log_file: Path | None = None

    # -- lifecycle

    def start(self, profile: Profile, *, watch: bool = True) -> bool:
        """Start the server unless it runs; True when this call started it.

        ``watch``: also start whatever stops the server once no kernel uses it (embedded only).
        """
        return False

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server; True when it was running."""
        return False

    def restart(self) -> None:
        """Restart the server (only where :attr:`can_restart`)."""
        raise UsageError(f"labkit does not restart the {self.kind} server: restart it yourself.")

    def undo_settings(self, values: dict[str, str | None]) -> bool:
        """Put these settings back and start the server again, after a restart a new value kept it from; False: cannot.

        ``values``: each setting's ALTER SYSTEM value before (None: it had none).
        """
        return False

    def running(self) -> bool:
        """Whether the server runs (for an external server: assumed)."""
        return True

    def status(self) -> Status:
        return Status(self.kind, self.running())

    # -- connecting

    def conninfo(self, database: str | None = None) -> str:
        """A libpq connection string to ``database`` (None: the administrative database)."""
        raise NotImplementedError

    def admin_conninfo(self) -> str:
        """Where labkit creates databases and changes settings."""
        return self.conninfo(None)

    def libpq_environment(self, database: str) -> dict[str, str]:
        """The environment a child program (pgbench) needs to reach ``database``."""
        return libpq_environment(self.conninfo(database))

    def uri(self, database: str | None = None) -> str:
        """A URI for psql or pgbench typed by hand."""
        return self.conninfo(database)

    def postmaster_pid(self) -> int | None:
        """The server's main process on this machine (for perf), None when it is not local."""
        return None

    # -- kernels using the server (only a server labkit runs keeps track of them)

    def register_kernel(self) -> None:
        """Note that this process uses the server (the watchdog keeps it up meanwhile)."""

    def unregister_kernel(self) -> None:
        """Note that this process no longer uses the server."""

    def other_kernels(self) -> list[int]:
        """Pids of other kernels using the server now (only a server labkit runs keeps track of them)."""
        return []

    def pgbench_registry(self):
        """Where pgbench processes are registered so that a dead kernel's are reaped (None: nowhere)."""
        return None

    def reap_orphans(self) -> list[int]:
        """Kill pgbench processes whose kernel has died; returns their pids."""
        return []


def server_for_backend(name: str | None = None) -> Server:
    """The server for LABKIT_BACKEND / LABKIT_DSN (default: the embedded one)."""
    name = name or config.backend()
    if name == "embedded":
        from .embedded import EmbeddedServer

        return EmbeddedServer()
    if name == "external":
        from .external import from_environment

        return from_environment()
    if name == "docker":
        from .docker_backend import shared

        return shared()
    raise UsageError(f"Unknown LABKIT_BACKEND={name!r}: use embedded, external or docker.")
