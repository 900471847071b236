"""The class hub's image (docker/hub/Dockerfile), built and run as docker/hub/compose.yaml runs it.

Checked: the image builds (on the official Python image, or the local stand-in where no registry
can be reached); two students log in through the login form (each choosing a password, as the
image's authenticator asks), each gets a server running as a system user of their own inside the
container; one runs lab 00 under ``ci`` there with their own PostgreSQL; the other reaches neither
that server, nor that PostgreSQL, nor those files. Where no engine or base image is at hand,
skipped with the reason.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time

import pytest

from labkit.docker_backend import base_problem, engine_problem
from tests import docker_python_base
from tests.docker_images import drop_replaced, image_ids

from . import harness

LAB = harness.ROOT / "notebooks" / "00-start-here.ipynb"
PYTHON_BASE = docker_python_base()
PROBLEM = engine_problem() or base_problem(PYTHON_BASE)
pytestmark = [pytest.mark.docker, pytest.mark.hub, pytest.mark.timeout(1800),
              pytest.mark.skipif(PROBLEM is not None, reason=f"the hub image needs an engine and its base image: "
                                                             f"{PROBLEM}")]


def wait_for_the_build_ahead(timeout_s: float = 1500) -> str:
    """Where CI builds this image beside the tests (``LABKIT_CI_HUB_BUILD``): wait for that build to end.

    The build below then finds every layer in the cache; two builds of one Dockerfile at once would
    each do all the work. What the build ahead ended with, for the test's own output.
    """
    status = os.environ.get("LABKIT_CI_HUB_BUILD")
    if not status:
        return "no build ahead"
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(status):
        if time.monotonic() > deadline:
            return f"the build ahead did not end within {timeout_s:.0f} s"
        time.sleep(1)
    with open(status, encoding="utf-8") as ended:
        return f"the build ahead ended with status {ended.read().strip()}"


@pytest.fixture(scope="module")
def hub():
    waited = time.monotonic()
    ahead = wait_for_the_build_ahead()
    started = time.monotonic()
    before = image_ids(harness.IMAGE)
    built = subprocess.run(["docker", "build", "--quiet", "--tag", harness.IMAGE, "--build-arg",
                            f"PYTHON_IMAGE={PYTHON_BASE}", "--file", "docker/hub/Dockerfile", "."],
                           cwd=harness.ROOT, capture_output=True, encoding="utf-8", errors="replace", timeout=1500)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    drop_replaced(before)
    size = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", harness.IMAGE],
                          capture_output=True, encoding="utf-8", check=True).stdout
    print(f"{ahead} after {started - waited:.0f} s; hub image built on {PYTHON_BASE} in "
          f"{time.monotonic() - started:.0f} s, {int(size) / 1e6:.0f} MB")
    with harness.ContainerHub() as running:
        yield running


def test_students_log_in_and_run_a_lab_as_themselves_and_no_further(hub):
    passwords = {name: secrets.token_urlsafe(12) for name in ("alice", "bob")}
    for name, password in passwords.items():
        landed = hub.log_in(name, password)  # the first login sets the password and starts the server
        assert f"/user/{name}/" in landed or f"/hub/spawn-pending/{name}" in landed, landed
    for name in passwords:
        hub.wait_ready(name)
    with pytest.raises(harness.Refused) as refused:  # her password is hers from her first login
        hub.log_in("alice", "not her password")
    assert refused.value.code == 403

    tokens = {name: hub.student_token(name) for name in passwords}
    alice = harness.Kernel(hub, "alice", LAB.name, tokens["alice"])
    seconds, error = alice.run_lab(LAB)
    assert error is None, f"lab 00 in the hub's container: {error}"
    print(f"alice ran lab 00 in the hub's container in {seconds:.0f} s")

    seen = alice.json(harness.IDENTITY)
    account = hub.inside("getent", "passwd", "student-alice").split(":")
    assert seen["user"] == seen["data_owner"] == "student-alice" and seen["uid"] == int(account[2])
    assert seen["data_directory"].startswith(account[5] + "/") and seen["listen_addresses"] == ""

    bob = harness.Kernel(hub, "bob", LAB.name, tokens["bob"])
    outcome = bob.json(harness.TRESPASS.format(other=json.dumps(seen)))
    assert "Permission denied" in outcome["connect"], f"bob reached alice's PostgreSQL: {outcome['connect']}"
    assert outcome["home"] == outcome["results"] == outcome["data"] == "PermissionError", outcome
    with pytest.raises(harness.Refused) as refused:
        hub.server_request("alice", "api/sessions", token=tokens["bob"])
    assert refused.value.code == 403
    assert hub.server_request("alice", "api/sessions", token=tokens["alice"])  # her own token works
