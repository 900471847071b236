"""LABKIT_BACKEND=docker and docker/compose.yaml, checked without a Docker engine.

The compose file's server must get the settings labkit's profiles want (labkit.backend.lab_settings
is the one list); the backend's container gets a password of its own and a port on this machine only.
"""

import os
import re
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import psycopg.conninfo
import pytest
import yaml

from labkit.backend import LAB_SETTINGS, lab_settings
from labkit.profiles import Profile
from tests import docker_fakes
from tests.docker_fakes import FakeContainer

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"


def expand(text: str, environment: dict[str, str]) -> str:
    """Compose's interpolation of ``${NAME:-default}`` and ``${NAME}``."""
    def one(match):
        name, default = match.group(1), match.group(3)
        return environment.get(name) or (default if default is not None else "")
    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", one, text)


def postgresql_conf(lines: str) -> dict[str, str]:
    settings = {}
    for line in lines.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, value = (part.strip() for part in line.split("=", 1))
            settings[name] = value.strip("'")
    return settings


def image_settings() -> dict[str, str]:
    """What docker/Dockerfile bakes into every cluster of the image."""
    text = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    return dict(re.findall(r'"(\w+) = \'([^\']*)\'"', text))


def compose_settings(environment: dict[str, str]) -> dict[str, str]:
    """The settings the compose file's server starts with (the image's, then LABKIT_SETTINGS'), under ``environment``."""
    service = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["postgres"]
    return {**image_settings(), **postgresql_conf(expand(service["environment"]["LABKIT_SETTINGS"], environment))}


def profile_variables() -> dict[str, dict[str, str]]:
    """What the compose file's header says to set for each profile (``LABKIT_PROFILE=x NAME=value ...``)."""
    found = {}
    for line in COMPOSE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"#\s+(LABKIT_PROFILE=(\w+)(?: \w+=\S+)*)", line)
        if match:
            found[match.group(2)] = dict(pair.split("=", 1) for pair in match.group(1).split())
    return found


def test_compose_gives_the_server_every_setting_of_the_laptop_profile_by_default():
    default_profile = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["jupyter"]["environment"][
        "LABKIT_PROFILE"]
    assert expand(default_profile, {}) == "laptop"
    assert compose_settings({}) == lab_settings(Profile.named("laptop"), "linux")


@pytest.mark.parametrize("profile", ["ci", "laptop", "article"])
def test_the_header_says_what_to_set_for_each_profile_and_that_gives_its_settings(profile):
    variables = profile_variables()
    assert profile in variables, f"docker/compose.yaml's header says nothing for the {profile} profile"
    assert variables[profile]["LABKIT_PROFILE"] == profile
    assert compose_settings(variables[profile]) == lab_settings(Profile.named(profile), "linux")


def test_the_image_bakes_only_what_every_profile_shares():
    assert set(image_settings()) <= set(LAB_SETTINGS)


@pytest.fixture
def engine(monkeypatch, tmp_path):
    """A fake engine (tests/docker_fakes.py), local unless the test says otherwise; labkit's files in ``tmp_path``."""
    from labkit import docker_backend

    monkeypatch.setenv("LABKIT_HOME", str(tmp_path / "home"))
    docker_fakes.fake_engine(monkeypatch)
    return docker_backend


def test_each_container_gets_a_password_of_its_own_kept_in_a_private_file(engine):
    import psycopg.conninfo

    first, second = engine.DockerServer(), engine.DockerServer()
    first.start(Profile.named("ci"))
    second.start(Profile.named("ci"))
    try:
        passwords = [psycopg.conninfo.conninfo_to_dict(server.conninfo())["password"] for server in (first, second)]
        assert passwords[0] != passwords[1] and all(len(password) >= 24 and password != "lab" for password in passwords)
        for server, container, password in zip((first, second), FakeContainer.made, passwords):
            assert container.env["POSTGRES_PASSWORD"] == password and container.options["password"] == password
            assert server.password_file.read_text(encoding="utf-8") == password
            assert os.name == "nt" or stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
            assert password not in server.uri() and str(server.password_file) in server.status().listens
    finally:
        files = [first.password_file, second.password_file]
        first.stop()
        second.stop()
    assert not [path for path in files if path.exists()]  # a stopped container's password goes with it


def test_a_local_engine_publishes_on_this_machine_only_and_says_nothing(engine, recwarn):
    server = engine.DockerServer()
    server.start(Profile.named("ci"))
    try:
        (container,) = FakeContainer.made
        assert container.ports == {"5432": ("127.0.0.1", None)}
        assert server.status().listens.startswith("127.0.0.1:49153 ")
        assert not recwarn.list
    finally:
        server.stop()


def test_a_remote_engine_says_in_one_line_where_the_server_is_published(engine, monkeypatch):
    monkeypatch.setattr(engine, "_local_engine", lambda: False)
    monkeypatch.setenv("LABKIT_DOCKER_PUBLISH", "all")  # asked for (without it: refused, test_docker_boundary)
    server = engine.DockerServer()
    with pytest.warns(UserWarning) as said:
        server.start(Profile.named("ci"))
    try:
        (container,) = FakeContainer.made
        assert container.ports == {}  # 127.0.0.1 there would be the remote host's own loopback
        (warning,) = said.list
        text = str(warning.message)
        assert "\n" not in text and "docker.example.test:49153" in text and "every address" in text
        assert server.status().listens.startswith("docker.example.test:49153 ")
    finally:
        server.stop()


def test_the_classroom_publishes_no_database_port_and_writes_no_password():
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    postgres, jupyter = services["postgres"], services["jupyter"]
    assert "ports" not in postgres and "network_mode" not in postgres
    assert jupyter["ports"] == ["127.0.0.1:${LABKIT_JUPYTER_PORT:-8888}:8888"]
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    assert "password" not in psycopg.conninfo.conninfo_to_dict(jupyter["environment"]["LABKIT_DSN"])
    # the server makes the password file; the jupyter container only reads it
    secret = postgres["environment"]["POSTGRES_PASSWORD_FILE"]
    assert jupyter["environment"]["LABKIT_PASSWORD_FILE"] == secret
    assert f"secret:{Path(secret).parent.as_posix()}" in postgres["volumes"]
    assert f"secret:{Path(secret).parent.as_posix()}:ro" in jupyter["volumes"]
    # healthy once the real server listens on TCP, not while the cluster is made (socket only)
    assert postgres["healthcheck"]["test"][:4] == ["CMD", "pg_isready", "--host", "127.0.0.1"]
    assert "database:/var/lib/postgresql" in postgres["volumes"]  # kept by `down`, like the notebooks


@pytest.mark.posix
def test_the_image_entrypoint_makes_a_password_file_once(tmp_path):
    """docker/entrypoint.sh with the postgres image's entrypoint replaced by one that prints what it gets."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker-entrypoint.sh").write_text('#!/bin/sh\necho "official: $*"\n', encoding="utf-8")
    (bin_dir / "docker-entrypoint.sh").chmod(0o755)
    secret = tmp_path / "a secret folder" / "password"

    def start(**environment):
        return subprocess.run(["sh", str(ROOT / "docker" / "entrypoint.sh"), "postgres", "-c", "x=1"],
                              env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **environment},
                              capture_output=True, encoding="utf-8", check=True).stdout

    assert start(POSTGRES_PASSWORD="given") == "official: postgres -c x=1\n"
    assert not secret.parent.exists()  # without POSTGRES_PASSWORD_FILE nothing is made
    assert start(POSTGRES_PASSWORD_FILE=str(secret)) == "official: postgres -c x=1\n"
    first = secret.read_text(encoding="ascii")
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o444
    start(POSTGRES_PASSWORD_FILE=str(secret))
    assert secret.read_text(encoding="ascii") == first  # kept: the cluster was made with it
    other = tmp_path / "other" / "password"
    start(POSTGRES_PASSWORD_FILE=str(other))
    assert other.read_text(encoding="ascii") != first


def test_each_container_is_labelled_with_the_process_it_belongs_to(engine):
    engine.DockerServer().start(Profile.named("ci"))
    (container,) = FakeContainer.made
    host, pid, started = container.kwargs["labels"][engine.OWNER_LABEL].split()
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())
    assert abs(float(started) - psutil.Process().create_time()) < 1


class Listed:
    """A container as docker-py lists it."""

    def __init__(self, owner: str):
        self.labels = {"pg-concurrency-labs.owner": owner}
        self.short_id = owner.replace(" ", "_")[:40]
        self.removed = False

    def remove(self, force, v):
        self.removed = force and v


def test_only_containers_of_this_machines_processes_that_are_gone_are_removed():
    from labkit.docker_backend import owner_label, remove_orphans

    host, me = socket.gethostname(), psutil.Process()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    containers = {
        "mine": Listed(owner_label()),
        "a process that ended": Listed(f"{host} {gone.pid} {time.time() - 5:.3f}"),
        "my number, reused": Listed(f"{host} {me.pid} {me.create_time() - 3600:.3f}"),
        "another machine's": Listed(f"elsewhere.example {gone.pid} 1.000"),
        "unreadable": Listed("x"),
    }

    class Client:
        class containers:  # noqa: N801 - docker-py's attribute
            @staticmethod
            def list(all, filters):
                assert all and filters == {"label": "pg-concurrency-labs.owner"}
                return list(containers.values())

    removed = remove_orphans(Client())
    assert {name for name, container in containers.items() if container.removed} == {
        "a process that ended", "my number, reused"}
    assert len(removed) == 2


@pytest.mark.posix
@pytest.mark.parametrize("check", ["engine_problem", "base_problem"])
def test_an_engine_socket_nobody_listens_on_is_said_and_no_socket_is_left_open(monkeypatch, check):
    import gc
    import tempfile

    from labkit import docker_backend

    folder = Path(tempfile.mkdtemp(prefix="labkit-engine-"))  # short: a socket path has a length limit
    path = folder / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:  # bound, never listening: connect is refused
        bound.bind(str(path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        problem = getattr(docker_backend, check)(timeout=2.0)
        gc.collect()  # a socket left unclosed would warn here, which the suite's settings make an error
    finally:
        path.unlink()
        folder.rmdir()
    assert problem is not None and "no Docker engine answers" in problem, problem
