"""Lab 02: what the flash-sale design guarantees, from the records the notebook saved; its interleavings, from its own cells."""

import pytest

from labkit import records
from labkit.experiment import plan
from labkit.profiles import Profile
from labkit.verdict import MIN_STEADY_S, compare, steady_seconds

from .steps import completions, events, outline, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

METHODS = ["plain", "skip-locked", "advisory"]  # the experiment's arms, baseline first
ROW_WAITS = ("Lock: tuple", "Lock: transactionid")


def _arms() -> dict[str, records.Repeats]:
    """The newest experiment's runs of each arm (the fixture has run the lab by then)."""
    groups = records.latest_groups(records.list_runs(notebook="02-flash-sale"))
    return {name: groups[name] for name in METHODS}


def _row_waiters(run) -> list[float]:
    """Buyers asleep on the row (a tuple lock or a seller's transaction id), at every instant the probe sampled."""
    by_instant: dict[float, float] = {}
    for row in run.probes["waits"]:
        by_instant[row["t"]] = by_instant.get(row["t"], 0.0) + (row["backends"] if row["wait"] in ROW_WAITS else 0.0)
    return list(by_instant.values())


def test_the_arms_ran_interleaved_alike_each_from_the_one_page_table(lab_runs):
    lab_runs("02-flash-sale", METHODS)
    arms = _arms()
    runs = [run for group in arms.values() for run in group]
    assert len({run.experiment for run in runs}) == 1 and None not in {run.experiment for run in runs}
    repeats = Profile.named(runs[0].profile).repeats
    assert all(len(group) == repeats for group in arms.values())
    assert [run.name for run in sorted(runs, key=lambda run: run.order)] == plan(METHODS, repeats)  # A B C, C B A ...
    first = runs[0]
    for run in runs:
        assert (run.clients, run.duration_s, run.mode) == (first.clients, first.duration_s, "prepared"), run.name
        assert run.failures == 0 and not run.errors
        assert {"work", "goodput", "useful", "pages_after", "events"} <= set(run.extra), run.name
        assert run.probes["growth"][0]["table_pages"] == 1, (run.name, run.repeat)  # reset before each run


def test_a_transaction_sells_at_most_one_unit_and_every_plain_one_sells(lab_runs):
    """What tps can and cannot count: plain's work is its transactions; the others' is at most theirs."""
    lab_runs("02-flash-sale", METHODS)
    for name, group in _arms().items():
        for run in group:
            # pgbench does not count a transaction cut off by -T, which may still have committed
            assert run.extra["work"] <= run.transactions + run.clients, (name, run.repeat)
            if name == "plain":
                assert abs(run.extra["work"] - run.transactions) <= run.clients, run.repeat


def test_buyers_who_give_up_never_sleep_on_the_row_and_plain_buyers_do(lab_runs):
    """No skip-locked or advisory client ever waits for a tuple lock or a seller's xid: they only try."""
    lab_runs("02-flash-sale", METHODS)
    arms = _arms()
    for name in ("skip-locked", "advisory"):
        for run in arms[name]:
            assert max(_row_waiters(run)) == 0, (name, run.repeat)
    for run in arms["plain"]:
        assert max(_row_waiters(run)) > 0, run.repeat  # many clients updating one row queue for it


def test_the_verdict_says_too_short_exactly_when_a_run_is(lab_runs):
    lab_runs("02-flash-sale", METHODS)
    arms = _arms()
    for name in ("skip-locked", "advisory"):
        found = compare(arms["plain"], arms[name], metric="goodput")
        shortest = min(steady_seconds(run) for run in [*arms["plain"], *arms[name]])
        assert (found.outcome == "too short") == (shortest < MIN_STEADY_S), found.sentence
        # the interleaved runs are compared pair by pair (or said to be too few once pairs with a change of load are out)
        assert found.basis in ("pairs", "too short", "load changed"), found.sentence


def test_the_stock_check_never_sells_below_zero(lab_runs):
    runs = lab_runs("02-flash-sale", ["advisory-checked", "advisory-no-check"])
    for name in ("advisory-checked", "advisory-no-check"):
        run = runs[name]
        assert run.extra["work"] == run.extra["stock"] - run.extra["stock_after"], name
    checked = runs["advisory-checked"]
    assert 0 <= checked.extra["stock_after"] <= checked.extra["stock"]


def test_the_sweep_covers_every_method(lab_runs):
    runs = lab_runs("02-flash-sale", [f"sweep-{name}" for name in METHODS])
    sweep = [run for run in records.list_runs(notebook="02-flash-sale") if run.name.startswith("sweep-")]
    by_method = {}
    for run in sweep:
        by_method.setdefault(run.extra["method"], set()).add(run.clients)
    assert set(by_method) == set(METHODS)
    assert len({frozenset(c) for c in by_method.values()}) == 1 and len(by_method["plain"]) >= 2
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
    for plain in _arms()["plain"]:
        logged = plain.extra["lock_waits_logged"]  # the embedded server's log is read for every run
        assert set(logged) == {"waits", "still_waiting_lines", "acquired", "deadlocks", "longest_wait_ms", "by_lock"}
        assert logged["deadlocks"] == 0 and logged["waits"] == sum(logged["by_lock"].values())
        assert logged["still_waiting_lines"] >= logged["waits"]  # a wait woken again before its grant logs again
        if logged["waits"]:  # a logged wait lasted at least deadlock_timeout
            assert logged["longest_wait_ms"] >= 1000


def test_a_holder_kept_3_s_makes_waits_reach_the_deadlock_timeout(lab_runs):
    """The notebook's plain-held-3s cell: a buyer queued behind the holder waits past deadlock_timeout."""
    run = lab_runs("02-flash-sale", ["plain-held-3s"])["plain-held-3s"]
    logged = run.extra["lock_waits_logged"]
    assert logged["waits"] >= 1 and logged["longest_wait_ms"] >= 1000 and logged["deadlocks"] == 0, logged
    assert run.failures == 0 and not run.errors
    assert len(run.probes["manager"]) >= 40  # sampled every 50 ms through the 5 s run


def test_a_full_page_is_pruned_only_without_an_old_snapshot_and_without_a_pin(sale_lab):
    """The notebook's pruning steps: the snapshot alone, the pin alone, then neither."""
    outcome = sale_lab.steps(steps_spec("02-flash-sale", "steps-prune"))
    runs = outcome.permutations
    assert len(runs) == 3
    pages, bought = [], []
    for run in runs:
        found = events(run)
        assert not [e.step for e in run.events if e.waiting_s is not None]  # nothing here waits for a lock
        (page,), (buy,) = found["page"], found["buy"]
        pages.append({key: int(value) for key, value in page.rows[0].items()})
        bought.append(buy.rows[0]["ctid"])
    full = pages[0]["versions"]
    assert full > 100 and all(p["versions"] == full and p["free_bytes"] < 44 for p in pages)  # page 0 full each time
    # the horizon: the old snapshot keeps every version; once it is gone, all but the live one are removable
    assert [p["deleted_before_every_snapshot"] for p in pages] == [0, full - 1, full - 1]
    # the snapshot alone and the pin alone each send the sale to page 1; with neither, page 0 is pruned
    assert bought == ["(1,1)", "(1,1)", "(0,2)"]
