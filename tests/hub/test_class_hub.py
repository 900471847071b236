"""A class on one JupyterHub (docker/hub/jupyterhub_config.py), with a real hub and real students.

Three students run lab 00 at the same time, each in their own single-user server; a fourth
starts a long pgbench run and stops their server in the middle of it. Then the idle culler
stops the three once they are done. Checked: every student has a PostgreSQL of their own (data
folder, socket folder, owner), the three labs pass, the fourth student's leaving harms nobody,
no PostgreSQL or pgbench of a stopped or culled student outlives labkit's watchdog, and no
student can reach another's database, files or server.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import psutil
import pytest

from labkit.embedded import directories_setting

from . import harness

STUDENTS = ("alice", "bob", "carol")
LEAVER = "dave"
LAB = harness.ROOT / "notebooks" / "00-start-here.ipynb"
DB_IDLE_STOP_S = 2  # LABKIT_IDLE_STOP of each student's server
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


# The postgres processes initdb runs, none of them a server: its bootstrap and single-user modes, and
# the settings it tries (`postgres --check`, test_config_settings in src/bin/initdb/initdb.c).
NOT_A_SERVER = {"--boot", "--single", "--check", "-C", "--describe-config", "-V", "--version"}


def postmaster(uid: int) -> psutil.Process | None:
    """The student's PostgreSQL server: a postgres whose parent is not a postgres and that has postgres children.

    Its children (checkpointer, background writer ...) tell it from initdb's postgres processes,
    which have none; a process caught while ``/bin/sh -c`` execs postgres shows the shell's command
    line, so the flags alone do not.
    """
    for process in psutil.process_iter(["name", "uids", "ppid", "cmdline"]):
        command = process.info["cmdline"] or []
        if (process.info["name"] == "postgres" and process.info["uids"].real == uid and command
                and command[0].endswith("postgres") and not NOT_A_SERVER & set(command)):
            with contextlib.suppress(psutil.Error):
                if (psutil.Process(process.info["ppid"]).name() != "postgres"
                        and any(_named_postgres(child) for child in process.children())):
                    return process
    return None


def _named_postgres(process: psutil.Process) -> bool:
    """Whether a child is a postgres (one that ends as it is read, an autovacuum worker, is none: the others say)."""
    try:
        return process.name() == "postgres"
    except psutil.Error:
        return False


def test_a_class_of_students_each_with_their_own_postgres(hub):
    everyone = STUDENTS + (LEAVER,)
    hub.add_students(everyone)
    for name in everyone:
        hub.spawn(name)
    for name in everyone:
        hub.wait_ready(name)
    tokens = {name: hub.student_token(name) for name in everyone}
    kernels = {name: harness.Kernel(hub, name, LAB.name, tokens[name]) for name in everyone}
    uids = {name: harness.system_user(name).pw_uid for name in everyone}

    # The fourth student starts a long run first ...
    kernels[LEAVER].start(LONG_RUN)
    assert wait_until(lambda: [p for p in harness.processes_of(uids[LEAVER]) if p.startswith("pgbench")], 120), \
        "the fourth student's pgbench never started"

    # ... then the three labs, each in a thread of its own (its own event loop), all at once ...
    outcomes: dict[str, tuple[float, str | None]] = {}
    ended: dict[str, float] = {}

    def lab_of(name):
        try:
            outcomes[name] = kernels[name].run_lab(LAB)
        except Exception as failure:  # noqa: BLE001 - reported by the assertion below
            outcomes[name] = (0.0, f"{type(failure).__name__}: {failure}")
        ended[name] = time.monotonic()

    threads = [threading.Thread(target=lab_of, args=(name,)) for name in STUDENTS]
    for thread in threads:
        thread.start()

    # ... and once each of the three has their PostgreSQL, the fourth stops their server mid-run.
    servers = wait_until(lambda: all(postmaster(uids[name]) for name in STUDENTS) and
                         {name: postmaster(uids[name]) for name in STUDENTS}, 120)
    assert servers, f"the three students' PostgreSQL did not all start: {outcomes}"
    hub.stop(LEAVER)
    stopped_at = time.monotonic()
    left = wait_until(lambda: not harness.processes_of(uids[LEAVER]), WATCHDOG_S) or harness.processes_of(uids[LEAVER])
    assert left is True, f"{WATCHDOG_S} s after the fourth student stopped their server, still running: {left}"
    gone_at = time.monotonic()
    print(f"dave stopped his server while pgbench ran; his PostgreSQL and pgbench were gone {gone_at - stopped_at:.0f} s later")

    for thread in threads:
        thread.join(600)
    for name in STUDENTS:
        seconds, error = outcomes.get(name, (0.0, "did not finish in 10 minutes"))
        assert error is None, f"{name}'s lab 00 failed: {error}"
        assert ended[name] > gone_at, (f"{name}'s lab ended {gone_at - ended[name]:.0f} s before the fourth student's "
                                       "PostgreSQL was gone: it did not run through the whole of their leaving")
        print(f"{name}: lab 00 passed in {seconds:.0f} s, {ended[name] - gone_at:.0f} s after dave's PostgreSQL was gone")

    # Each student's PostgreSQL is their own (data folder, socket folder, owner, process), and the
    # one that was running when the fourth student left (not restarted since).
    seen = {name: kernels[name].json(harness.IDENTITY) for name in STUDENTS}
    replaced: dict[str, str] = {}  # a student's PostgreSQL replaced by another mid-class: said at the end
    for name, found in seen.items():
        account = harness.system_user(name)
        assert found["user"] == found["data_owner"] == account.pw_name
        assert found["data_directory"].startswith(account.pw_dir + "/")
        assert found["socket_dir"].startswith(account.pw_dir + "/") and found["listen_addresses"] == ""
        assert found["sockets"] == directories_setting(found["socket_dir"])  # what the server itself listens on
        server = psutil.Process(found["postmaster_pid"])
        assert server.uids().real == account.pw_uid and server.name() == "postgres"
        assert found["backend_parent"] == server.pid  # the kernel's own connection is served by that server
        # the server's own log says how often it started (each start line names the postmaster's pid): a
        # snapshot of processes can catch a postgres that is not the server yet, so it alone proves nothing
        starts = [int(line.split("[")[1].split("]")[0]) for line in found["log_tail"] if "starting PostgreSQL" in line]
        if not starts or server.pid != starts[-1] or (len(starts) > 1 and server.pid != servers[name].pid):
            replaced[name] = (f"{name}'s PostgreSQL was restarted while the fourth student left (running before: "
                              f"pid {servers[name].pid}, now {server.pid}); its log: {found['log_tail']}; its "
                              f"watchdog's: {found['watchdog_log']}")
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
        assert refused.value.code == 403, f"{name} on {other}'s server: HTTP {refused.value.code}"
        assert hub.server_request(other, "api/sessions", token=tokens[other])  # the owner's own token works

    # Idle now: the culler stops each server, and the watchdog each PostgreSQL, counted from its own cull.
    culled: dict[str, float] = {}
    deadline = time.monotonic() + IDLE_TIMEOUT_S + 60
    while len(culled) < len(STUDENTS) and time.monotonic() < deadline:
        for name in STUDENTS:
            if name in culled:
                continue
            server = postmaster(uids[name])  # read first: a server stopped after this is the culler's doing
            if not hub.running(name) or f"Culling server {name} (inactive" in hub.log():  # culled, or being culled
                culled[name] = time.monotonic()
            else:  # still up: their PostgreSQL must be too, the same one
                assert server, f"{name}'s PostgreSQL stopped while their server (and kernel) still ran"
                if server.pid != seen[name]["postmaster_pid"]:
                    replaced.setdefault(name, f"{name}'s PostgreSQL was replaced while their server (and kernel) still ran")
        time.sleep(1)
    assert len(culled) == len(STUDENTS), f"the idle culler left {set(STUDENTS) - set(culled)} running"
    took = {}
    for name in STUDENTS:
        assert f"Culling server {name} (inactive" in hub.log(), f"{name}'s server stopped, but not by the culler"
        left = wait_until(lambda name=name: not harness.processes_of(uids[name]),
                          max(0.0, culled[name] + WATCHDOG_S - time.monotonic()))
        assert left, f"{WATCHDOG_S} s after {name}'s server was culled, still running: {harness.processes_of(uids[name])}"
        took[name] = time.monotonic() - culled[name]
    print("the culler stopped the three servers; their PostgreSQL was gone "
          + ", ".join(f"{seconds:.0f} s" for seconds in took.values()) + " after each cull (at most)")
    assert not replaced, "; ".join(replaced.values())
