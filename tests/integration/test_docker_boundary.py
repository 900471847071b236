"""LABKIT_BACKEND=docker up to the engine: what labkit asks of it, tested where no engine exists.

The engine itself is replaced (tests/docker_fakes.py records what labkit asks); the PostgreSQL
side is real: the image's settings script is run and read back with ``postgres -C``, and the
restart wait is tested against the session's lab server.
"""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from labkit import docker_backend
from labkit.backend import lab_settings
from labkit.binaries import program
from labkit.docker_backend import DockerServer, container_environment, wait_until_answers
from labkit.errors import ServerStartFailed
from labkit.profiles import Profile
from tests import docker_fakes
from tests.docker_fakes import FakeContainer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_engine(monkeypatch):
    return docker_fakes.fake_engine(monkeypatch)


def settings_the_image_applies(environment: dict, folder: Path, names) -> dict[str, str]:
    """What the image's settings script makes of ``environment``, as the real PostgreSQL reads it back (``postgres -C``)."""
    data = folder / "données du cluster"  # a space and non-ASCII, as a student's folder may have
    data.mkdir()
    (data / "postgresql.conf").write_text("max_connections = 100\n", encoding="utf-8")
    subprocess.run(["sh", str(ROOT / "docker" / "initdb" / "labkit-settings.sh")],
                   env={**os.environ, "PGDATA": str(data), **environment}, check=True)
    return {name: subprocess.run([str(program("postgres")), "-C", name, "-D", str(data)], capture_output=True,
                                 encoding="utf-8", check=True).stdout.strip() for name in names}


@pytest.mark.posix  # the image's script runs under the Linux image's sh
@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh here")
def test_the_server_gets_its_settings_where_alter_system_can_change_them(fake_engine, tmp_path):
    server = DockerServer()
    assert server.start(Profile.named("laptop"))
    try:
        (container,) = fake_engine
        assert not [entry for entry in container.log if entry[0] == "command"]  # no -c: it would beat ALTER SYSTEM
        # what the container was given, as the image and its PostgreSQL make of it
        assert set(container.env) == {"POSTGRES_PASSWORD", "LABKIT_SETTINGS"}
        assert container.env["POSTGRES_PASSWORD"] == server.password_file.read_text(encoding="utf-8")
        wanted = lab_settings(Profile.named("laptop"), "linux")
        applied = settings_the_image_applies(container.env, tmp_path, wanted)
        assert applied == {"max_connections": "600", "shared_buffers": "32768", "shared_preload_libraries":
                           "pg_stat_statements", "client_connection_check_interval": "2000", "synchronous_commit": "off",
                           "log_lock_waits": "on", "track_io_timing": "on", "jit": "off"}
        (image,) = FakeContainer.images
        assert image.options == {"buildargs": {"BASE_IMAGE": "postgres:18"}}  # the official image by default
    finally:
        server.stop()


def test_the_base_image_can_be_a_local_stand_in(fake_engine, monkeypatch):
    monkeypatch.setenv("LABKIT_DOCKER_BASE", "pg-concurrency-labs-standin/postgres:18")
    server = DockerServer()
    assert server.start(Profile.named("ci"))
    try:
        (image,) = FakeContainer.images
        assert image.options == {"buildargs": {"BASE_IMAGE": "pg-concurrency-labs-standin/postgres:18"}}
    finally:
        server.stop()


def test_a_missing_base_image_is_said_before_any_build(fake_engine, monkeypatch):
    monkeypatch.setattr(docker_backend, "base_problem",
                        lambda base=None, timeout=10.0: "the base image postgres:18 is not in the Docker engine's store")
    with pytest.raises(ServerStartFailed, match="Cannot build the lab server's image: the base image postgres:18"):
        DockerServer().start(Profile.named("ci"))
    assert FakeContainer.images == [] and fake_engine == []


def test_a_remote_engine_publishes_nothing_unless_asked(fake_engine, monkeypatch):
    monkeypatch.setattr(docker_backend, "_local_engine", lambda: False)
    monkeypatch.delenv("LABKIT_DOCKER_PUBLISH", raising=False)
    with pytest.raises(ServerStartFailed, match="LABKIT_DOCKER_PUBLISH=all"):
        DockerServer().start(Profile.named("ci"))
    assert fake_engine == []  # no container was made
    monkeypatch.setenv("LABKIT_DOCKER_PUBLISH", "all")
    monkeypatch.setattr(FakeContainer, "get_container_host_ip", lambda self: "203.0.113.7", raising=False)
    monkeypatch.setattr(FakeContainer, "get_exposed_port", lambda self, port: 49153, raising=False)
    server = DockerServer()
    with pytest.warns(UserWarning, match="published on every address of the Docker host"):
        assert server.start(Profile.named("ci"))
    try:
        (container,) = fake_engine
        assert container.ports == {}  # asked for: every address of that host
    finally:
        server.stop()


@pytest.mark.posix  # the image's script runs under the Linux image's sh
@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh here")
def test_the_images_script_writes_the_profile_and_alter_system_still_wins(tmp_path):
    settings_the_image_applies(container_environment(Profile.named("article"), "pw"), tmp_path, ["max_connections"])
    data = tmp_path / "données du cluster"

    def effective(*extra):
        done = subprocess.run([str(program("postgres")), "-C", "max_connections", "-D", str(data), *extra],
                              capture_output=True, encoding="utf-8", check=True)
        return done.stdout.strip()

    assert effective() == str(Profile.named("article").max_connections)
    (data / "postgresql.auto.conf").write_text("max_connections = '2500'\n", encoding="utf-8")  # as ALTER SYSTEM
    assert effective() == "2500"
    # What labkit used to do: a -c option on the command line, which no ALTER SYSTEM can change.
    assert effective("-c", "max_connections=600") == "600"


def test_restart_returns_only_once_the_server_answers(fake_engine, lab):
    server = DockerServer()
    server.start(Profile.named("ci"))
    (container,) = fake_engine
    attempts = []

    def conninfo(database=None):
        attempts.append(time.monotonic())
        restarted = [t for what, t in container.log if what == "restart"]
        if restarted and time.monotonic() - restarted[-1] < 1.0:  # the container's port is closed for a second
            return "host=127.0.0.1 port=1 user=postgres dbname=postgres"
        return lab.conninfo

    server.conninfo = conninfo
    try:
        server.restart()
        returned = time.monotonic()
        restarted = [t for what, t in container.log if what == "restart"][-1]
        assert returned - restarted >= 1.0 and len(attempts) > 1
    finally:
        server.stop()


def test_a_server_that_never_answers_is_said_in_a_sentence():
    started = time.monotonic()
    with pytest.raises(ServerStartFailed, match="did not answer within 1 s after a restart"):
        wait_until_answers(lambda: "host=127.0.0.1 port=1 user=postgres dbname=postgres", timeout_s=1.0)
    assert time.monotonic() - started < 10

