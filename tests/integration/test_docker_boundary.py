"""LABKIT_BACKEND=docker up to the engine: what labkit asks of it, tested where no engine exists.

The engine itself is replaced (a fake container records what labkit asks); the PostgreSQL
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
from labkit.binaries import program
from labkit.docker_backend import DockerServer, container_environment, wait_until_answers
from labkit.errors import ServerStartFailed
from labkit.profiles import Profile

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


class FakeWrapped:
    def __init__(self, log):
        self.log = log
        self.status = "running"

    def restart(self):
        self.log.append(("restart", time.monotonic()))

    def reload(self):
        pass


class FakeContainer:
    """What labkit calls on testcontainers' PostgresContainer, recorded."""

    made = []

    def __init__(self, image, **options):
        self.log = [("image", image)]
        self.env = {}
        self.port = 5432
        self.ports = {}
        self.wrapped = FakeWrapped(self.log)
        FakeContainer.made.append(self)

    def with_env(self, name, value):
        self.env[name] = value
        return self

    def with_kwargs(self, **kwargs):
        self.kwargs = kwargs
        return self

    def with_command(self, command):
        self.log.append(("command", command))
        return self

    def start(self):
        self.log.append(("start", time.monotonic()))
        return self

    def stop(self):
        self.log.append(("stop", time.monotonic()))

    def get_wrapped_container(self):
        return self.wrapped


@pytest.fixture
def fake_engine(monkeypatch):
    import testcontainers.community.postgres
    import testcontainers.core.image

    class FakeImage:
        made = []

        def __init__(self, path, tag, **build_options):
            self.path, self.tag, self.options = path, tag, build_options
            FakeImage.made.append(self)

        def build(self):
            return self

    FakeContainer.made.clear()
    monkeypatch.delenv("LABKIT_DOCKER_BASE", raising=False)  # the default base, whatever the machine set
    monkeypatch.setattr(docker_backend, "engine_problem", lambda timeout=3.0: None)
    monkeypatch.setattr(docker_backend, "base_problem", lambda base=None, timeout=10.0: None)
    monkeypatch.setattr(docker_backend, "_local_engine", lambda: True)
    monkeypatch.setattr(docker_backend.DockerServer, "_remove_orphans", staticmethod(lambda: None))  # no engine
    FakeContainer.images = FakeImage.made
    FakeImage.made.clear()
    monkeypatch.setattr(testcontainers.core.image, "DockerImage", FakeImage)
    monkeypatch.setattr(testcontainers.community.postgres, "PostgresContainer", FakeContainer)
    return FakeContainer.made


def test_the_server_gets_its_settings_where_alter_system_can_change_them(fake_engine):
    server = DockerServer()
    assert server.start(Profile.named("laptop"))
    try:
        (container,) = fake_engine
        assert not [entry for entry in container.log if entry[0] == "command"]  # no -c: it would beat ALTER SYSTEM
        assert container.env == container_environment(Profile.named("laptop"), server.password)
        assert "max_connections = '600'" in container.env["LABKIT_SETTINGS"].splitlines()
        assert container.ports == {"5432": ("127.0.0.1", None)}  # this machine only
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
    data = tmp_path / "données du cluster"  # a space and non-ASCII, as a student's folder may have
    data.mkdir()
    (data / "postgresql.conf").write_text("max_connections = 100\n", encoding="utf-8")
    environment = {**os.environ, "PGDATA": str(data), **container_environment(Profile.named("article"), "pw")}
    subprocess.run(["sh", str(ROOT / "docker" / "initdb" / "labkit-settings.sh")], env=environment, check=True)

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

