"""Sessions outlive a restart of the lab server, and never hold up the interpreter's exit."""

import subprocess
import sys
import time

import pytest

from labkit import lab as lab_module
from labkit.errors import LabkitError
from labkit.sessions import Result, Waiting
from tests import utf8_child

pytestmark = pytest.mark.integration


def test_another_notebooks_restart_leaves_an_idle_session_working(lab):
    """In a class, one notebook's lab.set(max_connections=...) restarts the server all share."""
    assert lab.sql("select 1 as one", session="R1").loc[0, "one"] == 1
    assert isinstance(lab.session("R5").run("select 1"), Result)
    before_pid = lab.session("R1").pid
    other = lab_module.Lab(lab.server, "another-notebook", lab.profile, messages=[])
    before = int(lab.value("show max_connections"))
    try:
        assert other.set(max_connections=before + 1).loc[0, "restarted"]
        assert lab.sql("select 2 as two", session="R1").loc[0, "two"] == 2
        assert lab.session("R1").pid != before_pid
        again = lab.session("R5").run("select 1")  # what %%sql prints above the result
        assert isinstance(again, Result) and again.note.startswith("(R5 connected again: the lab server had restarted")
        assert lab.session("R5").run("select 1").note == ""  # said once
    finally:
        other.set(max_connections=before)
    assert lab.sql("select 3 as three", session="R1").loc[0, "three"] == 3  # and again after the second restart


def test_a_transaction_lost_to_a_restart_is_one_line_then_the_session_goes_on(lab, hot_row):
    holder = lab.session("R2")
    assert isinstance(holder.run("begin; update hot set n = n + 1 where id = 1"), Result)
    lab.server.restart()
    with pytest.raises(LabkitError, match=r"^R2's transaction was lost: the lab server restarted") as raised:
        lab.sql("commit", session="R2")
    assert "\n" not in str(raised.value)
    assert "next statement" in str(raised.value)
    # The statement that was refused did not run, and the update was rolled back with the transaction.
    assert lab.sql("select n from hot where id = 1", session="R2").loc[0, "n"] == 0
    assert lab.sql("show transaction_isolation", session="R2") is not None  # and it keeps working


def _ended(lab, session) -> None:
    lab.value("select pg_terminate_backend(%s)", (session.pid,))
    deadline = time.monotonic() + 5
    while lab.value("select count(*) from pg_stat_activity where pid = %s", (session.pid,)) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_session_whose_connection_was_ended_says_that_not_a_restart(lab, hot_row):
    """pg_terminate_backend ends one connection; the server goes on (its start time says so)."""
    holder = lab.session("E1")
    assert isinstance(holder.run("begin; update hot set n = n + 1 where id = 1"), Result)
    _ended(lab, holder)
    with pytest.raises(LabkitError, match=r"^E1's transaction was lost: the server ended its connection \(terminating "
                                          r"connection due to administrator command\), without restarting, and rolled "
                                          r"it back; this statement did not run") as raised:
        lab.sql("commit", session="E1")
    assert "restarted" not in str(raised.value)
    assert lab.sql("select n from hot where id = 1", session="E1").loc[0, "n"] == 0
    idle = lab.session("E2")
    assert isinstance(idle.run("select 1"), Result)
    _ended(lab, idle)
    again = idle.run("select 1")
    assert isinstance(again, Result) and again.note == (
        "(E2 connected again: the server had ended its connection since its last statement (terminating connection "
        "due to administrator command), without restarting, so settings made with SET are back to their defaults.)")


def test_a_session_a_timeout_ended_says_so_and_goes_on(lab):
    """idle_in_transaction_session_timeout ends the connection with a FATAL error of its own class (25P03), not a
    connection error: the session still knows it is lost, says why, and connects again."""
    session = lab.session("E3")
    assert isinstance(session.run("set idle_in_transaction_session_timeout = '100ms'"), Result)
    assert isinstance(session.run("begin"), Result)
    time.sleep(1)  # the server ends the connection meanwhile
    with pytest.raises(LabkitError, match=r"^E3's transaction was lost: the server ended its connection \(terminating "
                                          r"connection due to idle-in-transaction timeout\), without restarting"):
        lab.sql("select 1", session="E3")
    assert isinstance(session.run("select 1"), Result)


def test_the_lock_monitor_reconnects_after_a_restart(lab, hot_row):
    holder, waiter = lab.session("R3"), lab.session("R4")
    assert isinstance(holder.run("select 1"), Result) and isinstance(waiter.run("select 1"), Result)
    assert lab.sessions.lock_wait(waiter) is None  # the monitor is connected now
    lab.server.restart()
    assert isinstance(holder.run("begin; update hot set n = n + 1 where id = 1"), Result)
    try:
        waiting = waiter.run("update hot set n = n + 1 where id = 1")
        assert isinstance(waiting, Waiting) and waiting.blocked_by == ("R3",)
    finally:
        holder.run("rollback")
        if waiter.pending is not None:
            waiter.pending.result(timeout=5)
            waiter.pending = None


_BLOCKED_AT_EXIT = """
import labkit
lab = labkit.start("tests")
lab.session("X1").run("begin; update hot set n = n + 1 where id = 1")
print(lab.session("X2", lock_timeout="20s").run("update hot set n = n + 1 where id = 1").message(), flush=True)
"""


def test_the_interpreter_exits_at_once_while_a_session_waits(lab, hot_row):
    """A script (or a kernel) that ends while T2 waits must not wait for T2's lock timeout."""
    with subprocess.Popen([sys.executable, "-c", _BLOCKED_AT_EXIT], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=utf8_child(), encoding="utf-8") as child:
        try:
            said = child.stdout.readline()
            blocked = time.monotonic()
            assert "X2 is waiting for a lock held by X1" in said, child.stderr.read()
            child.wait(timeout=60)
            exited_after = time.monotonic() - blocked
        finally:
            child.kill()
        errors = child.stderr.read()
    assert exited_after < 5, f"the script took {exited_after:.1f} s to exit"
    assert child.returncode == 0, errors
    # Its sessions ended with it: nothing of theirs is left on the server.
    left = "select count(*) from pg_stat_activity where application_name in ('labkit-X1', 'labkit-X2')"
    deadline = time.monotonic() + 5
    while lab.value(left) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lab.value(left) == 0


def test_this_notebooks_own_restart_leaves_its_idle_session_working(lab):
    session = lab.session("own-restart")
    session.run("select 1")
    current = int(lab.value("show max_connections"))
    lab.set(max_connections=current + 1)
    try:
        outcome = session.run("select 2 as two")
        assert outcome.frame is not None and outcome.frame.iloc[0]["two"] == 2, outcome
    finally:
        lab.set(max_connections=current)
