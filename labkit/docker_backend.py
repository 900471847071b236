"""LABKIT_BACKEND=docker: the image in docker/, started through testcontainers.

Only for machines with a Docker engine. When none answers, labkit says so within a few
seconds instead of hanging. Each container gets a superuser password of its own, kept in a
file only the user can read while it runs. On an engine of this machine its port is published
on 127.0.0.1 only. An engine elsewhere (DOCKER_HOST) could only publish it on every address of
its host, out of this machine's loopback: labkit refuses that unless the user asks for it
(LABKIT_DOCKER_PUBLISH=all), and warns when it does.

The image is built on ``postgres:18`` (LABKIT_DOCKER_BASE names another: a mirror, or the local
stand-in that ``docker/standins/build.sh`` makes where no registry can be reached). Where the
base image is neither in the engine's store nor to be had from a registry, :func:`base_problem`
says so in one line, before any build is tried.

A kernel that ends removes its container; testcontainers' clean-up container (Ryuk) removes the
container of a killed one. Where Ryuk cannot run (no registry: TESTCONTAINERS_RYUK_DISABLED), the
next start removes the containers of this machine's processes that are gone (:func:`remove_orphans`).
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import secrets
import socket
import tarfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import psycopg
import psycopg.conninfo

from . import config, db, processes
from .backend import Server, Status, lab_settings, quote_setting
from .errors import LabkitError, ServerStartFailed, tail
from .profiles import Profile

log = logging.getLogger(__name__)

IMAGE_TAG = "pg-concurrency-labs-postgres:18"
# On every lab server container: "host pid start-time" of the process whose container it is.
OWNER_LABEL = "pg-concurrency-labs.owner"


def owner_label() -> str:
    """This process, as OWNER_LABEL names it."""
    return f"{socket.gethostname()} {os.getpid()} {processes.started_at(os.getpid()) or 0:.3f}"


def remove_orphans(client) -> list[str]:
    """Remove the containers labelled OWNER_LABEL whose process, on this machine, is gone; their short ids.

    Only this machine's (by host name): a process elsewhere cannot be asked whether it still runs.
    """
    host, removed = socket.gethostname(), []
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        owner = container.labels.get(OWNER_LABEL, "").split()
        if len(owner) != 3 or owner[0] != host or not owner[1].isdigit():
            continue
        if processes.alive(int(owner[1]), float(owner[2])):
            continue
        container.remove(force=True, v=True)
        removed.append(container.short_id)
    return removed


def docker_dir() -> Path:
    """The image's build context (``docker/``): inside the installed package, or at a checkout's top."""
    return config.shipped("docker")


def _engine_host() -> str:
    """Where testcontainers will find the engine: its own settings, DOCKER_HOST, the CLI's context, else the default."""
    from testcontainers.core.docker_client import get_docker_host

    return get_docker_host() or ("npipe:////./pipe/docker_engine" if os.name == "nt" else "unix:///var/run/docker.sock")


def _unix_socket_silent(host: str, timeout: float) -> str | None:
    """Why nothing answers at a ``unix://`` engine address (None: something listens, or it is no such address)."""
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://"):]
    if not os.path.exists(path):
        return f"no Docker engine answers: there is no socket at {path}"
    family = getattr(socket, "AF_UNIX", None)  # a unix:// address on a Python without Unix sockets: not checked here
    if family is None:
        return None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(path)
        except OSError as error:
            return f"no Docker engine answers at {host}: {error.strerror or type(error).__name__}"
    return None


def engine_problem(timeout: float = 3.0) -> str | None:
    """None when a Docker engine answers, else why not (in a few words)."""
    try:
        from testcontainers.core.docker_client import DockerClient
    except ImportError:
        return "the docker Python package is missing (pip install testcontainers)"

    # the engine found as testcontainers will find it when starting the container (a Unix socket,
    # or Docker Desktop's named pipe on Windows, by default)
    host = _engine_host()
    silent = _unix_socket_silent(host, timeout)
    if silent:  # said at once; the docker package would leak the socket of a connection refused
        return silent
    client = None
    try:
        client = DockerClient(timeout=timeout).client
        client.ping()
        system = client.info().get("OSType")
    except Exception as error:  # noqa: BLE001 - any failure means: no engine to use
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"no Docker engine answers at {host}: {text[:120]}"
    finally:
        if client is not None:
            client.close()
    if system != "linux":  # Docker on a Windows host in Windows-containers mode cannot run postgres:18
        return f"the Docker engine at {host} runs {system} containers; the lab image needs Linux containers"
    return None


def base_problem(base: str | None = None, timeout: float = 10.0) -> str | None:
    """None when the lab image's base is in the engine's store or a registry offers it, else why not.

    Asks the engine only (no pull): its local store first, then the registry through the engine's
    own network, which fails at once on a machine that cannot reach one.
    """
    base = base or config.docker_base()
    from testcontainers.core.docker_client import DockerClient

    silent = _unix_socket_silent(_engine_host(), timeout)
    if silent:
        return f"the Docker engine did not answer: {silent}"

    import docker

    client = None
    try:
        client = DockerClient(timeout=timeout).client
        try:
            client.images.get(base)
            return None
        except docker.errors.ImageNotFound:
            pass
        try:
            client.api.inspect_distribution(base)
            return None
        except Exception as error:  # noqa: BLE001 - no registry, no such image, no credentials
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return (f"the base image {base} is not in the Docker engine's store and no registry offers it "
                    f"({first[:140]}): build the local stand-in (docker/standins/build.sh) and set "
                    f"LABKIT_DOCKER_BASE, or pull {base} where a registry can be reached")
    except Exception as error:  # noqa: BLE001 - the engine went away
        return f"the Docker engine did not answer: {str(error)[:120]}"
    finally:
        if client is not None:
            client.close()


def container_environment(profile: Profile, password: str) -> dict[str, str]:
    """The container's environment: its superuser's password, the profile's settings as postgresql.conf lines.

    The image appends them to postgresql.conf when it makes the cluster
    (``docker/initdb/labkit-settings.sh``), where ``ALTER SYSTEM`` can still override them, as
    on the embedded server. A ``-c`` option on the server's command line would win over
    ``ALTER SYSTEM``, so that ``lab.set(max_connections=...)`` would change nothing.

    >>> container_environment(Profile.named("ci"), "s3cret")["LABKIT_SETTINGS"].splitlines()[0]
    "max_connections = '300'"
    """
    lines = [f"{name} = {quote_setting(value)}" for name, value in lab_settings(profile, "linux").items()]
    return {"POSTGRES_PASSWORD": password, "LABKIT_SETTINGS": "\n".join(lines)}


def wait_until_answers(conninfo: Callable[[], str], timeout_s: float = 60.0, pause_s: float = 0.25,
                       gone: Callable[[], str | None] = lambda: None) -> int:
    """Wait until the server at ``conninfo()`` (asked anew each time) accepts a connection; the attempts made.

    A restarted container may come back on another port, and answers only once recovery is done.
    ``gone()`` says why the server will not come back (its container stopped), None while it may.
    """
    deadline = time.monotonic() + timeout_s
    attempts = 0
    while True:
        attempts += 1
        why = gone()
        if why is not None:
            raise ServerStartFailed("The lab server's container stopped after a restart: its server would not "
                                    "start.", detail=why, reason=_reason(why))
        try:
            address = conninfo()
        except (ConnectionError, TimeoutError, LabkitError) as error:  # stopping: its port is not published now
            if time.monotonic() >= deadline:
                raise ServerStartFailed(f"The lab server's container did not answer within {timeout_s:.0f} s "
                                        f"after a restart: {error}") from None
            time.sleep(pause_s)
            continue
        try:
            with db.connect(address, timeout_s=2) as connection:
                connection.execute("select 1")
            return attempts
        except psycopg.OperationalError as error:
            if time.monotonic() >= deadline:
                raise ServerStartFailed(f"The lab server's container did not answer within {timeout_s:.0f} s "
                                        f"after a restart: {db.message(error)}") from None
            log.debug("waiting for the restarted container: %s", db.message(error))
        time.sleep(pause_s)


_OFFLINE_HINT = ("Docker could not download an image. testcontainers also starts its clean-up container "
                 "(testcontainers/ryuk); on a machine without access to Docker Hub, set "
                 "TESTCONTAINERS_RYUK_DISABLED=true and have postgres:18 in the local image store.")


def _local_engine() -> bool:
    """True when the engine runs on this machine (a Unix socket or a named pipe), so published ports are on our loopback."""
    from testcontainers.core.docker_client import get_docker_host

    host = get_docker_host()
    return host is None or host.startswith(("unix://", "npipe://"))


def _reason(log_text: str) -> str | None:
    """The server's reason for not starting, from its container's log: the last FATAL that is not a client's refusal.

    >>> _reason("FATAL:  the database system is starting up\\nFATAL:  could not access file 'x': No such file")
    "could not access file 'x': No such file"
    """
    from .serverlog import FATAL

    found = [match.strip() for match in FATAL.findall(log_text) if not match.startswith("the database system is")]
    return found[-1] if found else None


def _container_log(container) -> str | None:
    """The tail of a container's own log (attached to a failed start), None when there is none."""
    try:
        raw = container.get_wrapped_container().logs()
    except Exception:  # noqa: BLE001 - no container was created, or the engine went away
        return None
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    return ("container log:\n" + tail(text, 12)) if text.strip() else None


class DockerServer(Server):
    """The bundled image run by testcontainers; the same interface as the embedded server."""

    kind = "docker"
    can_restart = True

    def __init__(self):
        self.container = None
        self.password = ""
        # in the server's home, as the embedded server's; named for this process, whose container it opens
        self.password_file = config.home() / "docker" / f"password-{os.getpid()}-{secrets.token_hex(4)}"

    def _new_password(self) -> None:
        """A password for the next container, in a file only the user can read; files of processes gone are removed."""
        self.password = secrets.token_urlsafe(24)
        folder = config.private_dir(self.password_file.parent)
        for stale in folder.glob("password-*"):
            pid = stale.name.split("-")[1]
            if pid.isdigit() and int(pid) != os.getpid() and not processes.alive(int(pid)):
                stale.unlink(missing_ok=True)
        config.write_private(self.password_file, self.password)

    def start(self, profile: Profile, *, watch: bool = True) -> bool:
        if self.running():
            return False
        problem = engine_problem()
        if problem:
            raise ServerStartFailed(f"LABKIT_BACKEND=docker, but {problem}. Start Docker, or unset LABKIT_BACKEND "
                                    "to use the embedded PostgreSQL.")
        from testcontainers.community.postgres import PostgresContainer
        from testcontainers.core.image import DockerImage

        try:
            context = docker_dir()
        except FileNotFoundError as missing:
            raise ServerStartFailed(str(missing)) from None
        local = _local_engine()
        if not local and not config.docker_publish_everywhere():
            raise ServerStartFailed(
                "LABKIT_BACKEND=docker with an engine on another machine (DOCKER_HOST): its container could only be "
                "published on every address of that host, beyond this machine's reach of its loopback. Set "
                "LABKIT_DOCKER_PUBLISH=all to accept that (anyone who reaches the host may then try the password), "
                "or use an engine on this machine.")
        missing_base = base_problem()
        if missing_base:
            raise ServerStartFailed(f"Cannot build the lab server's image: {missing_base}.")
        self._remove_orphans()
        image = DockerImage(path=str(context), tag=IMAGE_TAG, buildargs={"BASE_IMAGE": config.docker_base()})
        try:
            image.build()
        except Exception as error:  # noqa: BLE001 - docker-py raises BuildError, APIError ...
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ServerStartFailed(f"Could not build the lab server's image on {config.docker_base()}: "
                                    f"{first[:300]}") from None
        self._new_password()
        self.container = PostgresContainer(IMAGE_TAG, username="postgres", password=self.password, dbname="postgres",
                                           driver=None)
        for name, value in container_environment(profile, self.password).items():
            self.container.with_env(name, value)
        self.container.with_kwargs(labels={OWNER_LABEL: owner_label()})
        if local:
            # Docker publishes on every address by default; the lab server answers this machine only.
            self.container.ports[str(self.container.port)] = ("127.0.0.1", None)  # type: ignore[assignment]  # docker-py takes (address, port)
        try:
            self.container.start()
        except Exception as error:  # noqa: BLE001 - docker and testcontainers raise many kinds
            container, self.container = self.container, None
            self.password_file.unlink(missing_ok=True)
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            detail = _OFFLINE_HINT if "registry" in first or "pull" in first else _container_log(container)
            raise ServerStartFailed(f"Could not start the lab server's container: {first[:300]}",
                                    detail=detail) from None
        if not local:  # 127.0.0.1 there would be that host's own loopback, out of labkit's reach
            warnings.warn(f"The lab server's container is published on every address of the Docker host, at "
                          f"{self._address()} (DOCKER_HOST is not this machine, LABKIT_DOCKER_PUBLISH=all): anyone "
                          f"who reaches that host may try its password (in {self.password_file}).", stacklevel=2)
        # A kernel that ends normally removes its container itself; Ryuk covers a killed one.
        atexit.register(self._stop_at_exit)
        return True

    @staticmethod
    def _remove_orphans() -> None:
        """The containers of killed kernels, removed before a new one starts (never an obstacle to starting)."""
        from testcontainers.core.docker_client import DockerClient

        try:
            removed = remove_orphans(DockerClient().client)
        except Exception as error:  # noqa: BLE001 - docker-py raises many kinds; the start goes on
            log.warning("could not look for the containers of killed kernels: %s", error)
            return
        if removed:
            log.warning("removed %d lab server container(s) left by a kernel that was killed: %s", len(removed),
                        ", ".join(removed))

    def _address(self) -> str:
        """host:port where the container's server is published."""
        assert self.container is not None
        host = "127.0.0.1" if _local_engine() else self.container.get_container_host_ip()
        return f"{host}:{self.container.get_exposed_port(5432)}"

    def stop(self, mode: str = "fast") -> bool:
        if self.container is None:
            return False
        self.container.stop()
        self.container = None
        self.password_file.unlink(missing_ok=True)
        return True

    def _stop_at_exit(self) -> None:
        try:
            self.stop()
        except Exception:  # noqa: BLE001 - the engine may be gone already; Ryuk then cleans up
            pass

    def restart(self) -> None:
        """Restart the container and return once the server in it answers again."""
        if self.container is None:
            raise LabkitError("The docker server is not started: run labkit.start() first.")
        log.info("restarting the lab server's container")
        self.container.get_wrapped_container().restart()
        wait_until_answers(self.conninfo, gone=self._exited)

    def _exited(self) -> str | None:
        """The container's own log when it has stopped (its server would not start), None while it runs."""
        if self.container is None:
            return "the container was stopped"
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status in ("running", "restarting", "created"):
            return None
        return _container_log(self.container) or f"the container is {wrapped.status}"

    def undo_settings(self, values: dict[str, str | None]) -> bool:
        """After a restart the server refused: these settings put back, and the container started again.

        They are written in the stopped container's postgresql.auto.conf (the engine copies files in
        and out of a stopped container), so it starts with its data as it was. False while it still
        runs (nothing to undo here).
        """
        from .embedded import AUTO_CONF, with_settings

        if self.container is None:
            return False
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status == "running":
            return False
        env = dict(item.split("=", 1) for item in wrapped.attrs["Config"]["Env"] or [] if "=" in item)
        folder = env.get("PGDATA", "/var/lib/postgresql/data")
        stream, _ = wrapped.get_archive(f"{folder}/{AUTO_CONF}")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.getmembers()[0]
            extracted = archive.extractfile(member)
            text = extracted.read().decode("utf-8") if extracted is not None else ""
        written = with_settings(text, values).encode("utf-8")
        member.size = len(written)
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as archive:
            archive.addfile(member, io.BytesIO(written))  # its owner and mode as they were
        wrapped.put_archive(folder, out.getvalue())
        wrapped.start()
        wait_until_answers(self.conninfo, gone=self._exited)
        log.info("put back %s in the container and started it again", ", ".join(values))
        return True

    def running(self) -> bool:
        if self.container is None:
            return False
        try:
            wrapped = self.container.get_wrapped_container()
            wrapped.reload()
        except Exception:  # noqa: BLE001 - removed behind our back, or the engine went away
            return False
        return wrapped.status == "running"

    def conninfo(self, database: str | None = None) -> str:
        if self.container is None:
            raise LabkitError("The docker server is not started: run labkit.start() first.")
        host, port = self._address().rsplit(":", 1)
        return psycopg.conninfo.make_conninfo(host=host, port=port, user="postgres", password=self.password,
                                              dbname=database or "postgres")

    def uri(self, database: str | None = None) -> str:
        """A URI for psql or pgbench typed by hand (the password is in the password file)."""
        if self.container is None:
            raise LabkitError("The docker server is not started: run labkit.start() first.")
        return f"postgresql://postgres@{self._address()}/{database or 'postgres'}"

    def status(self) -> Status:
        listens = None
        if self.container is not None:
            where = "this machine only" if _local_engine() else "every address of the Docker host"
            listens = f"{self._address()} (the container's port, {where}; password in {self.password_file})"
        return Status(self.kind, self.running(), listens=listens)


_SHARED: DockerServer | None = None


def shared() -> DockerServer:
    """This process's one docker server: every labkit.start() in a kernel reuses its container."""
    global _SHARED
    if _SHARED is None:
        _SHARED = DockerServer()
    return _SHARED
