"""Named sessions block and unblock each other without freezing the caller."""

import time

import pytest

from labkit.errors import UsageError
from labkit.sessions import Failed, Result, Waiting

pytestmark = pytest.mark.integration


def test_blocked_session_is_reported_and_finishes_after_commit(lab, hot_row):
    t1, t2 = lab.session("T1"), lab.session("T2")
    assert isinstance(t1.run("begin; update hot set n = n + 1 where id = 1"), Result)
    started = time.monotonic()
    waiting = t2.run("update hot set n = n + 1 where id = 1")
    assert isinstance(waiting, Waiting)
    assert time.monotonic() - started < 3
    assert waiting.blocked_by == ("T1",)
    assert waiting.wait_event == "Lock: transactionid"
    assert "T2 is waiting for a lock held by T1" in waiting.message()
    blockers = lab.sql("select application_name, pg_blocking_pids(pid) from pg_stat_activity "
                       "where application_name = 'labkit-T2'")
    assert list(blockers.iloc[0, 1]) == [t1.pid]
    assert t1.run("commit").statuses == ("COMMIT",)
    finished = lab.sessions.finished_elsewhere("T1", settle_s=5)
    assert [(o.session, o.statuses) for o in finished] == [("T2", ("UPDATE 1",))]
    assert lab.value("select n from hot where id = 1") == 2


def test_skip_locked_and_advisory_lock_return_at_once(lab, hot_row):
    t1, t2 = lab.session("S1"), lab.session("S2")
    t1.run("begin; select * from hot where id = 1 for update; select pg_advisory_lock(1)")
    skipped = t2.run("select * from hot where id = 1 for update skip locked")
    assert isinstance(skipped, Result) and skipped.frame.empty
    tried = t2.run("select pg_try_advisory_xact_lock(1) as got")
    assert bool(tried.frame.loc[0, "got"]) is False
    t1.run("commit; select pg_advisory_unlock(1)")


def test_lock_timeout_guards_a_session(lab, hot_row):
    holder = lab.session("H1")
    holder.run("begin; update hot set n = n where id = 1")
    impatient = lab.session("H2", lock_timeout="300ms")
    outcome = impatient.run("update hot set n = n where id = 1", report_wait_after=30)
    assert isinstance(outcome, Failed)
    assert outcome.sqlstate == "55P03"
    assert outcome.error.startswith("ERROR:  canceling statement due to lock timeout")
    holder.run("rollback")


def test_sql_errors_are_one_short_message(lab):
    outcome = lab.session("main").run("select * from no_such_table")
    assert isinstance(outcome, Failed)
    assert outcome.error.splitlines()[0] == 'ERROR:  relation "no_such_table" does not exist'
    assert "Traceback" not in outcome.error


def test_a_busy_session_refuses_a_second_statement(lab, hot_row):
    holder, waiter = lab.session("B1"), lab.session("B2")
    holder.run("begin; update hot set n = n where id = 1")
    assert isinstance(waiter.run("update hot set n = n where id = 1"), Waiting)
    with pytest.raises(Exception, match="still running its previous statement"):
        waiter.run("select 1")
    waiter.cancel()
    holder.run("rollback")


def test_a_blocked_update_holds_the_tuple_lock_and_waits_for_the_holders_transaction(lab, hot_row):
    """What lab 00 shows from pg_locks: T2 first in line for the row, waiting for T1's transaction id."""
    holder, waiter = lab.session("L1"), lab.session("L2")
    holder.run("begin; update hot set n = n + 1 where id = 1")
    try:
        assert "waiting for a lock held by L1" in waiter.run("update hot set n = n + 1 where id = 1").message()
        rows = lab.sql("""
            select a.application_name as session, l.locktype, l.mode, l.granted,
                   l.transactionid = a.backend_xid as own_xid
            from pg_locks l join pg_stat_activity a using (pid)
            where a.application_name in ('labkit-L1', 'labkit-L2') and l.locktype in ('tuple', 'transactionid')
            order by session, l.locktype, l.granted desc""")
        assert [tuple(row) for row in rows.itertuples(index=False)] == [
            ("labkit-L1", "transactionid", "ExclusiveLock", True, True),
            ("labkit-L2", "transactionid", "ExclusiveLock", True, True),
            ("labkit-L2", "transactionid", "ShareLock", False, False),
            ("labkit-L2", "tuple", "ExclusiveLock", True, None),
        ]
    finally:
        holder.run("rollback")
        waiter.pending.result(timeout=5)
        waiter.pending = None


def test_new_timeouts_for_a_busy_session_are_refused_at_once(lab, hot_row):
    """Configuring a session whose statement waits must not wait with it (for up to its lock timeout)."""
    holder, waiter = lab.session("C1"), lab.session("C2", lock_timeout="3s")
    holder.run("begin; update hot set n = n where id = 1")
    try:
        assert isinstance(waiter.run("update hot set n = n where id = 1"), Waiting)
        started = time.monotonic()
        with pytest.raises(UsageError, match=r"^C2 is still running its previous statement .*cancel\(\)"):
            lab.session("C2", lock_timeout="2s")
        assert time.monotonic() - started < 1
    finally:
        holder.run("rollback")
        waiter.pending.result(timeout=5)
        waiter.pending = None
    assert lab.sql("show lock_timeout", session="C2").iloc[0, 0] == "3s"  # the refused change changed nothing


def test_a_sessions_own_timeout_outlives_the_transaction_it_was_set_in(lab):
    session = lab.session("D1")
    session.run("begin")
    lab.session("D1", lock_timeout="2s")
    assert lab.sql("show lock_timeout", session="D1").iloc[0, 0] == "2s"
    session.run("rollback")  # which undoes what was set inside the transaction
    assert lab.sql("show lock_timeout", session="D1").iloc[0, 0] == "2s"
    with pytest.raises(UsageError, match=r"^D1: invalid value for parameter \"lock_timeout\""):
        lab.session("D1", lock_timeout="soon")


def test_a_cell_whose_second_timeout_is_refused_leaves_the_first_unset(lab):
    session = lab.session("half-set")
    outcome = session.run("select 1", timeouts={"lock_timeout": "2s", "statement_timeout": "10y"})
    assert "invalid value" in outcome.error  # the server's own words, for the cell
    shown = session.run("select current_setting('lock_timeout') as l, current_setting('statement_timeout') as s")
    assert (shown.frame.iloc[0]["l"], shown.frame.iloc[0]["s"]) == ("5min", "10min")


def test_a_new_session_with_a_bad_timeout_is_one_line(lab):
    from labkit.errors import UsageError

    with pytest.raises(UsageError, match=r"T9: invalid value for parameter \"lock_timeout\""):
        lab.session("T9", lock_timeout="soon")
