"""Lab 02: the shape of the flash-sale result, from the records the notebook saved; its interleavings, from its own cells."""

import pytest

from labkit import records
from labkit.profiles import Profile

from .steps import completions, events, outline, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

METHODS = ["plain", "skip-locked", "advisory"]
REPEATED = METHODS  # the runs the lab's verdicts compare


def _groups():
    """The newest repeats of each name (the fixture has run the lab by then)."""
    return records.latest_groups(records.list_runs(notebook="02-flash-sale"))


def _lock_waiters(run) -> float:
    table = records.waits_frame([run])
    return float(table[run.name][[w for w in table.index if w.startswith("Lock:")]].sum())


def test_the_three_methods_ran_alike(lab_runs):
    runs = lab_runs("02-flash-sale", METHODS)
    plain = runs["plain"]
    for name in METHODS:
        run = runs[name]
        assert run.mode == "prepared"
        assert (run.clients, run.duration_s) == (plain.clients, plain.duration_s)
        assert run.profile == "ci" and run.failures == 0 and not run.errors
        assert {"work", "goodput", "useful"} <= set(run.extra)


def test_advisory_sells_more_per_second_than_plain(lab_runs):
    """Over the repeats (their means), as the lab's verdict reads them: on 2 cores it stood at 1.8x (0.9x on one CPU)."""
    lab_runs("02-flash-sale", METHODS)
    groups = _groups()
    assert groups["advisory"].mean("goodput") > groups["plain"].mean("goodput")


def test_tps_counts_attempts_that_sold_nothing(lab_runs):
    lab_runs("02-flash-sale", METHODS)
    groups = _groups()
    for plain in groups["plain"]:  # every repeat
        # every plain transaction sells one unit (a transaction cut off by -T may still commit)
        assert abs(plain.extra["work"] - plain.transactions) <= plain.clients
    for name in ("skip-locked", "advisory"):
        for run in groups[name]:
            assert run.extra["work"] < run.transactions
            assert run.extra["goodput"] < run.tps


def test_the_compared_runs_are_repeated_each_from_the_one_page_table(lab_runs):
    newest = lab_runs("02-flash-sale", REPEATED)
    groups = _groups()
    for name in REPEATED:
        group, last = groups[name], newest[name]
        assert len(group) == Profile.named(last.profile).repeats >= 2, name
        assert [run.repeat for run in group] == list(range(1, len(group) + 1)) and group.last.path == last.path
        for run in group:
            assert (run.clients, run.duration_s, run.mode) == (last.clients, last.duration_s, "prepared")
            assert run.failures == 0 and not run.errors and {"work", "goodput", "useful"} <= set(run.extra)
            assert run.probes["growth"][0]["table_pages"] == 1, (name, run.repeat)  # the reset before each repeat


def test_plain_queues_on_locks_and_the_others_do_not(lab_runs):
    runs = lab_runs("02-flash-sale", METHODS)
    clients = runs["plain"].clients
    assert _lock_waiters(runs["plain"]) > 0.3 * clients
    for name in ("skip-locked", "advisory"):
        assert _lock_waiters(runs[name]) < 0.05 * clients


def test_the_stock_check_stops_at_zero(lab_runs):
    runs = lab_runs("02-flash-sale", ["advisory-checked", "advisory-no-check"])
    checked = runs["advisory-checked"]
    assert checked.extra["stock_after"] == 0
    assert checked.extra["work"] == checked.extra["stock"]
    # without the check the same load oversells: the risk the lab shows
    assert runs["advisory-no-check"].extra["stock_after"] < 0


def test_the_sweep_covers_every_method(lab_runs):
    runs = lab_runs("02-flash-sale", [f"sweep-{name}" for name in METHODS])
    sweep = [run for run in records.list_runs(notebook="02-flash-sale") if run.name.startswith("sweep-")]
    by_method = {}
    for run in sweep:
        by_method.setdefault(run.extra["method"], set()).add(run.clients)
    assert set(by_method) == set(METHODS)
    assert len({frozenset(c) for c in by_method.values()}) == 1 and len(by_method["plain"]) >= 3
    assert all("goodput" in run.extra for run in runs.values())


@pytest.fixture(scope="module")
def sale_lab(fresh_lab):
    lab = fresh_lab("test-02-steps")
    replay(lab, tagged_steps("02-flash-sale", "schema"))  # the one-row table and the row_locks view
    return lab


def _lock(event) -> tuple:
    return event.lock.get("locktype"), event.lock.get("mode"), event.lock.get("held_by")


def test_three_buyers_queue_and_t3_queues_again_behind_t2(sale_lab):
    """The notebook's queue: T2 waits for T1's xid, T3 for the tuple lock; after T1's rollback T3 waits for T2."""
    outcome = sale_lab.steps(steps_spec("02-flash-sale", "steps-queue"))
    assert outline(outcome) == [
        "Parsed test spec with 4 sessions", "",
        "starting permutation: T1_buy T2_buy T3_buy locks T1_end locks T2_commit",
        "step T1_buy: <sql>",
        "       cnt|ctid ", "----------+-----", "1999999999|(0,2)", "(1 row)", "",
        "step T2_buy: <sql> <waiting ...>",
        "step T3_buy: <sql> <waiting ...>",
        "step locks: <sql>",
        "session|locktype     |mode         |granted|on               ",
        "-------+-------------+-------------+-------+-----------------",
        "T1     |transactionid|ExclusiveLock|t      |xid of T1        ",
        "T2     |transactionid|ExclusiveLock|t      |xid of T2        ",
        "T2     |tuple        |ExclusiveLock|t      |row version (0,1)",
        "T2     |transactionid|ShareLock    |f      |xid of T1        ",
        "T3     |transactionid|ExclusiveLock|t      |xid of T3        ",
        "T3     |tuple        |ExclusiveLock|f      |row version (0,1)",
        "(6 rows)", "",
        "step T1_end: <sql>",
        "step T2_buy: <... completed>",
        "       cnt|ctid ", "----------+-----", "1999999999|(0,3)", "(1 row)", "",
        "step locks: <sql>",
        "session|locktype     |mode         |granted|on               ",
        "-------+-------------+-------------+-------+-----------------",
        "T2     |transactionid|ExclusiveLock|t      |xid of T2        ",
        "T3     |transactionid|ExclusiveLock|t      |xid of T3        ",
        "T3     |tuple        |ExclusiveLock|t      |row version (0,1)",
        "T3     |transactionid|ShareLock    |f      |xid of T2        ",
        "(4 rows)", "",
        "step T2_commit: <sql>",
        "step T3_buy: <... completed>",
        "       cnt|ctid ", "----------+-----", "1999999998|(0,4)", "(1 row)", "",
    ]
    (run,) = outcome.permutations
    found = events(run)
    (t2,), (t3,) = found["T2_buy"], found["T3_buy"]
    assert _lock(t2) == ("transactionid", "ShareLock", ["T1"]) and t2.released_by == "T1_end"
    assert _lock(t3) == ("tuple", "ExclusiveLock", ["T2"]) and t3.released_by == "T2_commit"
    assert t3.lock["what"] == "tbl page 0 tuple 1"  # the version it first queued on, not the one it updated
    assert completions(run) == ["T1_buy", "locks", "T1_end", "T2_buy", "locks", "T2_commit", "T3_buy"]
    assert t2.rows == [{"cnt": "1999999999", "ctid": "(0,3)"}] and t3.rows == [{"cnt": "1999999998", "ctid": "(0,4)"}]


def test_with_t1_committing_both_waiters_sell_in_an_order_the_permutation_does_not_fix(sale_lab):
    """The edit the text suggests (commit instead of rollback): both sell after T1, whichever gets T1's version first."""
    spec = steps_spec("02-flash-sale", "steps-queue")
    assert "step T1_end    { rollback; }" in spec
    (run,) = sale_lab.steps(spec.replace("step T1_end    { rollback; }", "step T1_end    { commit; }")).permutations
    found = events(run)
    (t2,), (t3,) = found["T2_buy"], found["T3_buy"]
    assert _lock(t2) == ("transactionid", "ShareLock", ["T1"]) and _lock(t3)[:2] == ("tuple", "ExclusiveLock")
    assert t2.error is None and t3.error is None
    sold = sorted(int(e.rows[0]["cnt"]) for e in (t2, t3))
    assert sold == [1999999997, 1999999998]  # three units sold, one each, in one order or the other


def test_skip_locked_and_advisory_give_up_at_once_and_a_plain_update_waits_until_its_lock_timeout(sale_lab):
    outcome = sale_lab.steps(steps_spec("02-flash-sale", "steps-give-up"))
    assert outline(outcome) == [
        "Parsed test spec with 3 sessions", "",
        "starting permutation: T1_buy T2_skip T2_advisory T3_plain T3_read T1_commit",
        "step T1_buy: <sql>", "       cnt", "----------", "1999999999", "(1 row)", "",
        "step T2_skip: <sql>", "cnt", "---", "(0 rows)", "",
        "step T2_advisory: <sql>", "cnt", "---", "(0 rows)", "",
        "step T3_plain: <sql> <waiting ...>",
        "step T3_plain: <... completed>",
        "ERROR:  canceling statement due to lock timeout",
        "step T3_read: <sql>", "       cnt", "----------", "2000000000", "(1 row)", "",
        "step T1_commit: <sql>",
    ]
    (run,) = outcome.permutations
    found = events(run)
    assert [e.step for e in run.events if e.waiting_s is not None] == ["T3_plain"]
    (t3,) = found["T3_plain"]
    assert _lock(t3) == ("transactionid", "ShareLock", ["T1"])
    assert t3.error == "ERROR:  canceling statement due to lock timeout"
    assert t3.completed_s - t3.launched_s >= 0.9  # its one-second lock_timeout, not a release
    assert found["T2_skip"][0].rows == [] and found["T2_advisory"][0].rows == []
    assert completions(run) == ["T1_buy", "T2_skip", "T2_advisory", "T3_plain", "T3_read", "T1_commit"]


def test_at_the_sell_out_only_the_session_already_queued_waits(sale_lab):
    """The notebook's sell-out: T2, queued before it, waits and sells nothing; T3, arriving after, takes no row lock."""
    outcome = sale_lab.steps(steps_spec("02-flash-sale", "steps-sellout"))
    assert outline(outcome) == [
        "Parsed test spec with 4 sessions", "",
        "starting permutation: T1_buy T2_buy T1_commit T1_hold T3_buy T3_locks T3_commit T1_end",
        "step T1_buy: <sql>", "cnt", "---", "  0", "(1 row)", "",
        "step T2_buy: <sql> <waiting ...>",
        "step T1_commit: <sql>",
        "step T2_buy: <... completed>", "cnt", "---", "(0 rows)", "",
        "step T1_hold: <sql>", "cnt", "---", "  0", "(1 row)", "",
        "step T3_buy: <sql>", "cnt", "---", "(0 rows)", "",
        "step T3_locks: <sql>",
        "locktype  |relation|mode            |granted|xid",
        "----------+--------+----------------+-------+---",
        "relation  |tbl     |RowExclusiveLock|t      |   ",
        "relation  |tbl_pkey|RowExclusiveLock|t      |   ",
        "virtualxid|        |ExclusiveLock   |t      |   ",
        "(3 rows)", "",
        "step T3_commit: <sql>",
        "step T1_end: <sql>",
    ]
    (run,) = outcome.permutations
    found = events(run)
    (t2,), (t3,) = found["T2_buy"], found["T3_buy"]
    # T2 queued while T1 sold the last unit; after T1's commit it rechecks cnt > 0 and sells nothing
    assert _lock(t2) == ("transactionid", "ShareLock", ["T1"]) and t2.released_by == "T1_commit" and t2.rows == []
    # T3 starts after the sell-out while T1 holds the row: it does not wait, and matches nothing
    assert t3.waiting_s is None and t3.rows == []
    locks = found["T3_locks"][0].rows
    assert {row["locktype"] for row in locks} == {"relation", "virtualxid"}  # no tuple, no transactionid
    assert all(row["xid"] is None for row in locks)  # it wrote nothing, so it has no transaction id
    assert completions(run) == ["T1_buy", "T1_commit", "T2_buy", "T1_hold", "T3_buy", "T3_locks", "T3_commit",
                                "T1_end"]


def test_each_plain_run_counts_the_waits_that_reached_the_deadlock_timeout(lab_runs):
    lab_runs("02-flash-sale", METHODS)
    for plain in _groups()["plain"]:
        logged = plain.extra["lock_waits_logged"]  # the embedded server's log is read for every run
        assert set(logged) == {"still_waiting", "acquired", "deadlocks", "longest_wait_ms", "by_lock"}
        assert logged["deadlocks"] == 0 and logged["still_waiting"] == sum(logged["by_lock"].values())
        # a logged wait lasted at least deadlock_timeout, and no transaction is shorter than its waits
        if logged["still_waiting"]:
            assert logged["longest_wait_ms"] >= 1000


def test_a_holder_kept_2_s_makes_waits_reach_the_deadlock_timeout(lab_runs):
    """The notebook's plain-held-2s cell: waits that do run the deadlock check, counted from the server's log."""
    run = lab_runs("02-flash-sale", ["plain-held-2s"])["plain-held-2s"]
    logged = run.extra["lock_waits_logged"]
    assert logged["still_waiting"] >= run.clients // 2, logged  # most clients were waiting when the second passed
    assert logged["longest_wait_ms"] >= 1000 and logged["deadlocks"] == 0, logged
    assert run.failures == 0 and not run.errors
