"""A class on one JupyterHub (docker/hub/jupyterhub_config.py), with a real hub and real students.

Three students run lab 00 at the same time, each in their own single-user server; a fourth
starts a long pgbench run and stops their server in the middle of it. Then the idle culler
stops the three once they are done. Checked: every student has a PostgreSQL of their own (data
folder, socket folder, owner), the three labs pass, the fourth student's leaving harms nobody,
no PostgreSQL or pgbench of a stopped or culled student outlives labkit's watchdog, and no
student can reach another's database, files or server.
"""

from __future__ import annotations

import json
import threading
import time

import psutil
import pytest

from . import harness

STUDENTS = ("alice", "bob", "carol")
LEAVER = "dave"
LAB = harness.ROOT / "notebooks" / "00-start-here.ipynb"
DB_IDLE_STOP_S = 10  # LABKIT_IDLE_STOP of each student's server
IDLE_TIMEOUT_S = 45  # the culler's: longer than any one cell of lab 00 stays silent
# The watchdog notices within its poll (2 s) once no kernel is left, waits DB_IDLE_STOP_S, then
# stops PostgreSQL (a fast shutdown); the rest is room for a busy machine.
WATCHDOG_S = DB_IDLE_STOP_S + 30

# A long run of the fourth student's, still going when they stop their server.
LONG_RUN = """
import labkit
lab = labkit.start("00-start-here")
lab.sql("create table if not exists counter (id int primary key, n int not null default 0)")
lab.sql("insert into counter values (1) on conflict do nothing")
lab.pgbench("update counter set n = n + 1 where id = 1;", name="long", clients=4, duration=600, live=False)
"""

pytestmark = [pytest.mark.linux, pytest.mark.hub, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def hub():
    reason = harness.why_not()
    if reason:
        pytest.skip(reason)
    settings = {"LABKIT_HUB_DB_IDLE_STOP": str(DB_IDLE_STOP_S), "LABKIT_HUB_IDLE_TIMEOUT": str(IDLE_TIMEOUT_S),
                "LABKIT_HUB_CULL_EVERY": "5", "LABKIT_HUB_ACTIVITY": "5"}
    with harness.Hub(settings) as running:
        yield running


def wait_until(check, timeout: float, step: float = 0.5):
    """``check()`` once it is true, or its last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def test_a_class_of_students_each_with_their_own_postgres(hub):
    everyone = STUDENTS + (LEAVER,)
    hub.add_students(everyone)
    for name in everyone:
        hub.spawn(name)
    for name in everyone:
        hub.wait_ready(name)
    tokens = {name: hub.student_token(name) for name in everyone}
    kernels = {name: harness.Kernel(hub, name, LAB.name, tokens[name]) for name in everyone}

    # The three labs, each in a thread of its own (its own event loop), all at once.
    outcomes: dict[str, tuple[float, str | None]] = {}

    def lab_of(name):
        try:
            outcomes[name] = kernels[name].run_lab(LAB)
        except Exception as failure:  # noqa: BLE001 - reported by the assertion below
            outcomes[name] = (0.0, f"{type(failure).__name__}: {failure}")

    threads = [threading.Thread(target=lab_of, args=(name,)) for name in STUDENTS]
    for thread in threads:
        thread.start()

    # Meanwhile the fourth student starts a long run and stops their server in the middle of it.
    dave = harness.system_user(LEAVER)
    kernels[LEAVER].start(LONG_RUN)
    assert wait_until(lambda: [p for p in harness.processes_of(dave.pw_uid) if p.startswith("pgbench")], 120), \
        "the fourth student's pgbench never started"
    still_running = [name for name in STUDENTS if name not in outcomes]
    hub.stop(LEAVER)
    stopped_at = time.monotonic()
    left = wait_until(lambda: not harness.processes_of(dave.pw_uid), WATCHDOG_S) or harness.processes_of(dave.pw_uid)
    assert left is True, f"{WATCHDOG_S} s after the fourth student stopped their server, still running: {left}"
    print(f"dave stopped his server at pgbench's height; his PostgreSQL and pgbench were gone "
          f"{time.monotonic() - stopped_at:.0f} s later; labs still running then: {still_running}")
    assert still_running, "the labs finished before the fourth student left: nothing showed they were unharmed"

    for thread in threads:
        thread.join(600)
    for name in STUDENTS:
        seconds, error = outcomes.get(name, (0.0, "did not finish in 10 minutes"))
        assert error is None, f"{name}'s lab 00 failed: {error}"
        print(f"{name}: lab 00 passed in {seconds:.0f} s")

    # Each student's PostgreSQL is their own: data folder, socket folder, owner, process.
    seen = {name: kernels[name].json(harness.IDENTITY) for name in STUDENTS}
    for name, found in seen.items():
        account = harness.system_user(name)
        assert found["user"] == found["data_owner"] == account.pw_name
        assert found["data_directory"].startswith(account.pw_dir + "/")
        assert found["socket_dir"].startswith(account.pw_dir + "/") and found["listen_addresses"] == ""
        postmaster = psutil.Process(found["postmaster_pid"])
        assert postmaster.uids().real == account.pw_uid and postmaster.name() == "postgres"
    for key in ("data_directory", "socket_dir", "postmaster_pid", "home"):
        assert len({found[key] for found in seen.values()}) == len(STUDENTS), f"two students share a {key}"

    # No student reaches another's database, files or server.
    for name, other in zip(STUDENTS, STUDENTS[1:] + STUDENTS[:1]):
        outcome = kernels[name].json(harness.TRESPASS.format(other=json.dumps(seen[other])))
        assert "Permission denied" in outcome["connect"], f"{name} reached {other}'s PostgreSQL: {outcome['connect']}"
        assert outcome["home"] == outcome["results"] == outcome["data"] == "PermissionError", \
            f"{name} read {other}'s files: {outcome}"
        with pytest.raises(harness.Refused) as refused:
            hub.server_request(other, "api/sessions", token=tokens[name])
        assert refused.value.code in (403, 404), f"{name} used {other}'s server: HTTP {refused.value.code}"

    # Idle now: the culler stops the three servers, and the watchdog their PostgreSQL.
    idle_since = time.monotonic()
    culled = wait_until(lambda: not any(hub.running(name) for name in STUDENTS), IDLE_TIMEOUT_S + 60, step=2)
    assert culled, f"the idle culler left {[n for n in STUDENTS if hub.running(n)]} running {IDLE_TIMEOUT_S + 60} s after their last cell"
    culled_after = time.monotonic() - idle_since
    uids = [harness.system_user(name).pw_uid for name in STUDENTS]
    left = wait_until(lambda: not any(harness.processes_of(uid) for uid in uids), WATCHDOG_S)
    assert left, f"{WATCHDOG_S} s after the culler, still running: {[harness.processes_of(uid) for uid in uids]}"
    print(f"the culler stopped the three servers {culled_after:.0f} s after their last cell; "
          f"their PostgreSQL stopped {time.monotonic() - idle_since - culled_after:.0f} s later")
    assert "idle-culler" in hub.log() and "Culling server" in hub.log()
