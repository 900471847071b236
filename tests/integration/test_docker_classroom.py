"""The classroom of docker/compose.yaml, brought up for real: the lab server and JupyterLab containers.

Checked: the database publishes no port and has a generated password (the fixed one of old is
refused); JupyterLab is published on 127.0.0.1 only; inside the jupyter container labkit reaches
the server through LABKIT_DSN and LABKIT_PASSWORD_FILE, the profile's settings are applied, and
lab 00 runs under ``ci``. With the compose tool of the machine: ``docker compose`` (v2) or Debian's
``docker-compose`` 1.29, which does not know the file's top-level ``name:`` (given as ``-p`` instead).
Where no engine, compose tool or base image is at hand, skipped with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from labkit import config
from labkit.docker_backend import base_problem, engine_problem
from labkit.embedded import free_port
from tests import docker_python_base, utf8_child
from tests.docker_images import drop_replaced, image_ids

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
PROJECT = "labkit-test-classroom"  # the same each time: a killed run's containers are removed by the next
PYTHON_BASE = docker_python_base()


def compose_tool() -> list[str] | None:
    """The compose command this machine has: ``docker compose`` (v2) or ``docker-compose`` (v1)."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) and subprocess.run([*command, "version"], capture_output=True).returncode == 0:
            return command
    return None


def why_not() -> str | None:
    problem = engine_problem()
    if problem:
        return problem
    if compose_tool() is None:
        return "neither `docker compose` nor `docker-compose` is installed"
    return base_problem() or base_problem(PYTHON_BASE)


PROBLEM = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1800),
              pytest.mark.skipif(PROBLEM is not None, reason=f"the classroom compose file needs an engine, a compose "
                                                             f"tool and its base images: {PROBLEM}")]


class Classroom:
    def __init__(self, folder: Path):
        self.tool = compose_tool()
        self.port = free_port()
        file = COMPOSE
        if self.tool == ["docker-compose"]:  # 1.29 refuses the top-level name: the same file without it
            text = COMPOSE.read_text(encoding="utf-8")
            file = folder / "compose.yaml"
            file.write_text("\n".join(line for line in text.splitlines() if not line.startswith("name:")),
                            encoding="utf-8")
        self.command = [*self.tool, "--project-name", PROJECT, "--project-directory", str(COMPOSE.parent),
                        "--file", str(file)]
        self.environment = utf8_child(
            LABKIT_JUPYTER_PORT=str(self.port), LABKIT_DOCKER_BASE=config.docker_base(),
            LABKIT_DOCKER_PYTHON=PYTHON_BASE, LABKIT_PROFILE="ci", PG_MAX_CONNECTIONS="300", PG_SHARED_BUFFERS="128MB")

    def __call__(self, *arguments: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.command, *arguments], env=self.environment, capture_output=True,
                              encoding="utf-8", errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(arguments)} ended with {done.returncode}:\n{done.stdout[-3000:]}"
                                 f"\n{done.stderr[-3000:]}")
        return done

    def inside(self, *command: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """``command`` in the jupyter container, as its user."""
        return self("exec", "-T", "jupyter", *command, timeout=timeout, check=check)

    def container(self, service: str) -> dict:
        """``docker inspect`` of the service's container."""
        (identifier,) = self("ps", "-q", service).stdout.split()
        found = subprocess.run(["docker", "inspect", identifier], capture_output=True, encoding="utf-8", check=True)
        return json.loads(found.stdout)[0]


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    room = Classroom(tmp_path_factory.mktemp("classroom"))
    room("down", "--volumes", "--remove-orphans", check=False)  # what a killed earlier run left
    started = time.monotonic()
    before = image_ids("pg-concurrency-labs-postgres:18", f"{PROJECT}_jupyter", f"{PROJECT}-jupyter")  # compose v1, v2
    try:
        room("up", "--detach", "--build", timeout=1500)
        drop_replaced(before)
        print(f"classroom up in {time.monotonic() - started:.0f} s")
        deadline = time.monotonic() + 120
        while True:  # JupyterLab answers its version without a token
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{room.port}/api", timeout=5) as answer:
                    assert "version" in json.load(answer)
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"JupyterLab did not answer:\n{room('logs', '--tail', '40').stdout}") from None
                time.sleep(1)
        yield room
    finally:
        room("down", "--volumes", "--remove-orphans", timeout=300, check=False)


def test_only_jupyterlab_is_published_and_on_this_machine_only(classroom):
    postgres = classroom.container("postgres")
    assert not postgres["HostConfig"]["PortBindings"]
    assert all(binding is None for binding in postgres["NetworkSettings"]["Ports"].values())
    assert postgres["HostConfig"]["NetworkMode"] not in ("host", "bridge")  # the project's own network
    jupyter = classroom.container("jupyter")
    assert jupyter["HostConfig"]["PortBindings"] == {"8888/tcp": [{"HostIp": "127.0.0.1",
                                                                   "HostPort": str(classroom.port)}]}


def test_the_address_printed_for_the_students_is_the_published_one(classroom):
    said = classroom("logs", "jupyter").stdout
    # the first address printed: the published port, opening lab 00
    first = said[said.index("is running at:"):].splitlines()[1]
    assert f"http://127.0.0.1:{classroom.port}/lab/tree/00-start-here.ipynb?token=" in first, said[-2000:]


def test_the_password_is_generated_and_the_fixed_one_refused(classroom):
    password = classroom.inside("cat", "/run/labkit-secret/password").stdout
    assert len(password) == 64 and int(password, 16) and password != "lab"
    try_old = ("import psycopg\ntry:\n    psycopg.connect(host='postgres', user='postgres', password='lab', "
               "dbname='postgres', connect_timeout=10)\n    print('connected')\nexcept psycopg.OperationalError as e:\n"
               "    print(e)")
    assert "password authentication failed" in classroom.inside("python", "-c", try_old).stdout
    # and the file can be read but not changed from the jupyter container
    assert classroom.inside("sh", "-c", "echo x > /run/labkit-secret/password", check=False).returncode != 0


def test_labkit_reaches_the_server_with_the_profile_settings(classroom):
    probe = ("import json, labkit; lab = labkit.start('classroom-check'); print(json.dumps({'kind': lab.server.kind, "
             "'shared_buffers': lab.value('show shared_buffers'), 'max_connections': lab.value('show max_connections'), "
             "'messages': lab.messages}))")
    seen = json.loads(classroom.inside("python", "-c", probe).stdout.splitlines()[-1])
    assert (seen["kind"], seen["shared_buffers"], seen["max_connections"]) == ("external", "128MB", "300")
    assert not [message for message in seen["messages"] if "did not apply" in message], seen["messages"]


def test_lab_00_runs_in_the_jupyter_container(classroom):
    started = time.monotonic()
    done = classroom.inside("python", "-m", "labkit", "execute", "notebooks/00-start-here.ipynb", "--profile", "ci",
                            "--output", "/tmp/executed", "--no-html", timeout=900, check=False)
    print(f"lab 00 in the classroom: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_down_and_up_keep_the_database_and_its_password(classroom):
    """The cluster lives in the `database` volume: the tables a class made survive `down` (as the notebooks do)."""
    password = classroom.inside("cat", "/run/labkit-secret/password").stdout
    make = "import labkit; labkit.start('classroom-kept').sql('create table if not exists kept (n int); insert into kept values (42)')"
    classroom.inside("python", "-c", make)
    classroom("down", timeout=300)
    classroom("up", "--detach", timeout=600)
    read = "import labkit; print(labkit.start('classroom-kept').value('select sum(n) from kept'))"
    assert classroom.inside("python", "-c", read).stdout.split()[-1] == "42"
    assert classroom.inside("cat", "/run/labkit-secret/password").stdout == password
