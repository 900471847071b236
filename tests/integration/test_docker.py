"""LABKIT_BACKEND=docker: the image in docker/ through testcontainers. Needs a Docker engine.

Where no engine answers (these CI machines), the tests are skipped with the engine's own reason;
the failure path without an engine is tested in test_server.py.
"""

import os
import subprocess
import sys

import pytest

import labkit
from labkit.backend import lab_settings
from labkit.docker_backend import base_problem, engine_problem
from labkit.errors import UsageError
from tests import utf8_child

# an engine, and the lab image's base in its store or a registry (where neither: one line says which)
PROBLEM = engine_problem() or base_problem()
pytestmark = [pytest.mark.integration, pytest.mark.docker,
              pytest.mark.skipif(PROBLEM is not None, reason=f"LABKIT_BACKEND=docker needs an engine and "
                                                             f"its base image: {PROBLEM}")]


@pytest.fixture(scope="module")
def docker_lab():
    with pytest.MonkeyPatch.context() as patch:  # later tests must find the environment as it was, even on failure
        patch.setenv("LABKIT_BACKEND", "docker")
        lab = labkit.start("docker-check")
        try:
            yield lab
        finally:
            lab.close()
            lab.server.stop()
            from labkit import lab as lab_module

            # the magics of later tests in this process must not find a lab on the stopped container
            lab_module._CURRENT[:] = [started for started in lab_module._CURRENT if started.server is not lab.server]


def test_the_image_has_the_lab_settings_and_extensions(docker_lab):
    assert docker_lab.server.kind == "docker"
    assert docker_lab.value("show server_version_num").startswith("18")
    assert "pg_stat_statements" in docker_lab.value("show shared_preload_libraries")
    assert docker_lab.value("select count(*) from pg_extension where extname in ('pageinspect', 'pgstattuple')") == 2


def test_the_container_has_every_setting_of_the_profile(docker_lab):
    """max_connections and shared_buffers (the profile's sizes) as well as the settings every profile shares."""
    wanted = lab_settings(docker_lab.profile, "linux")
    assert {name: docker_lab.value(f"show {name}") for name in wanted} == {
        name: value.strip("'") for name, value in wanted.items()}
    assert not [message for message in docker_lab.messages if "did not apply" in message], docker_lab.messages


def test_the_engine_publishes_the_server_on_this_machines_loopback_only(docker_lab):
    """What the engine itself did with labkit's request (tests/integration/test_docker_boundary.py checks the request)."""
    wrapped = docker_lab.server.container.get_wrapped_container()
    wrapped.reload()
    bindings = wrapped.attrs["NetworkSettings"]["Ports"]["5432/tcp"]
    assert bindings and {binding["HostIp"] for binding in bindings} == {"127.0.0.1"}, bindings
    assert docker_lab.server.status().listens.startswith(f"127.0.0.1:{bindings[0]['HostPort']} ")


def test_a_setting_that_needs_a_restart_restarts_the_same_container(docker_lab):
    container = docker_lab.server.container.get_wrapped_container().id
    before = int(docker_lab.value("show max_connections"))
    try:
        docker_lab.set(max_connections=before + 7)
        assert int(docker_lab.value("show max_connections")) == before + 7  # ALTER SYSTEM, kept by the restart
        assert docker_lab.server.container.get_wrapped_container().id == container
    finally:
        docker_lab.set(max_connections=before)
    assert int(docker_lab.value("show max_connections")) == before


def test_a_setting_the_server_cannot_start_with_is_put_back_in_the_same_container(docker_lab):
    """Left in the container's postgresql.auto.conf, the value would keep its server down; the next labkit.start()
    would then start a new container, with an empty cluster: the notebook's tables gone."""
    container = docker_lab.server.container.get_wrapped_container().id
    docker_lab.sql("create table if not exists kept_through_a_refused_restart (x int)")
    with pytest.raises(UsageError) as raised:
        docker_lab.set(shared_preload_libraries="labkit_no_such_library")
    said = str(raised.value)
    assert said.startswith("The server would not start with shared_preload_libraries='labkit_no_such_library': "
                           'could not access file "labkit_no_such_library"'), said
    assert "labkit put shared_preload_libraries back to its default and started the server again" in said
    assert docker_lab.server.container.get_wrapped_container().id == container
    assert docker_lab.value("select to_regclass('kept_through_a_refused_restart') is not null")


def test_starting_again_in_the_same_process_reuses_the_container(docker_lab):
    container = docker_lab.server.container.get_wrapped_container().id
    again = labkit.start("docker-check")
    assert again.server is docker_lab.server
    assert again.server.container.get_wrapped_container().id == container
    assert not any("Started" in message for message in again.messages)


def test_a_run_against_the_container(docker_lab):
    docker_lab.sql("drop table if exists hot; create table hot (id int primary key, n int); insert into hot values (1, 0)")
    run = docker_lab.pgbench("update hot set n = n + 1 where id = 1;", name="docker", clients=4, duration=2, live=False)
    assert run.transactions > 0 and run.failures == 0 and run.server["backend"] == "docker"
    assert docker_lab.value("select n from hot") == run.transactions
    perf = docker_lab.pgbench("select 1;", name="docker-perf", clients=1, duration=1, live=False, perf=True)
    assert perf.extra["perf"]["available"] is False  # the server is not a local process labkit started


def test_a_process_that_ends_removes_its_container():
    import docker

    code = "import labkit; lab = labkit.start('docker-exit'); print(lab.server.container.get_wrapped_container().id)"
    done = subprocess.run([sys.executable, "-c", code], env=utf8_child(LABKIT_BACKEND="docker"),
                          capture_output=True, encoding="utf-8", errors="replace", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    container = done.stdout.strip().splitlines()[-1]
    client = docker.from_env()
    try:
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container)
    finally:
        client.close()


def test_a_container_left_by_a_killed_process_is_removed_by_the_next_start():
    """Killed, a process runs no clean-up; without Ryuk (no registry) its container stays until the next start."""
    import docker

    code = ("import sys, time, labkit; lab = labkit.start('docker-killed'); "
            "print(lab.server.container.get_wrapped_container().id, flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code], env=utf8_child(LABKIT_BACKEND="docker"),
                             stdout=subprocess.PIPE, encoding="utf-8")
    try:
        left = child.stdout.readline().strip()
    finally:
        child.kill()
        child.wait(30)
        child.stdout.close()
    client = docker.from_env()
    try:
        if os.environ.get("TESTCONTAINERS_RYUK_DISABLED", "").lower() == "true":
            assert client.containers.get(left).status == "running"  # nothing removed it at the kill
        code = "import labkit; lab = labkit.start('docker-next'); print(lab.value('select 1'))"
        done = subprocess.run([sys.executable, "-c", code], env=utf8_child(LABKIT_BACKEND="docker"),
                              capture_output=True, encoding="utf-8", errors="replace", timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(left)
    finally:
        client.close()
