"""Lab 02: the shape of the flash-sale result, from the records the notebook saved."""

import pytest

from labkit import records
from labkit.profiles import Profile
from labkit.sessions import Result, Waiting

from .steps import replay, tagged_steps

pytestmark = pytest.mark.integration

METHODS = ["plain", "skip-locked", "advisory"]
REPEATED = [*METHODS, "plain-deadlock-10s"]  # the runs the lab's verdicts compare


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
    runs = lab_runs("02-flash-sale", METHODS)
    assert runs["advisory"].extra["goodput"] > runs["plain"].extra["goodput"]


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


def test_at_the_sell_out_only_the_session_already_queued_waits(fresh_lab):
    """The notebook's three-session sell-out: T2 queued before it waits, T3 arriving after takes no lock."""
    lab = fresh_lab("test-02-sellout")
    outcomes = replay(lab, tagged_steps("02-flash-sale", "schema") + tagged_steps("02-flash-sale", "sellout"))
    waits = [o for o in outcomes if isinstance(o, Waiting)]
    assert [(w.session, w.blocked_by) for w in waits] == [("T2", ("T1",))]
    # T2 queued while T1 sold the last unit; after T1's commit it rechecks cnt > 0 and sells nothing
    t2 = [o for o in outcomes if isinstance(o, Result) and o.session == "T2"]
    assert len(t2) == 1 and t2[0].statuses[-1] == "UPDATE 0"
    # T3 starts after the sell-out while T1 holds the row: it does not wait, and matches nothing
    t3 = [o for o in outcomes if isinstance(o, Result) and o.session == "T3" and "update tbl" in o.sql]
    assert len(t3) == 1 and t3[0].statuses[-1] == "UPDATE 0"
    locks = next(o.frame for o in outcomes if isinstance(o, Result) and "pg_locks" in o.sql)
    assert set(locks["locktype"]) == {"relation", "virtualxid"}  # no tuple, no transactionid
    assert locks["xid"].isna().all()  # it wrote nothing, so it has no transaction id


def test_the_deadlock_timeout_run_differs_from_plain_in_that_setting_only(lab_runs):
    runs = lab_runs("02-flash-sale", ["plain", "plain-deadlock-10s"])
    plain, longer = runs["plain"], runs["plain-deadlock-10s"]
    assert plain.server["settings"]["deadlock_timeout"] == "1000"
    assert longer.server["settings"]["deadlock_timeout"] == "10000"
    assert (longer.clients, longer.duration_s, longer.mode) == (plain.clients, plain.duration_s, plain.mode)
    assert [s["text"].strip() for s in longer.scripts] == [s["text"].strip() for s in plain.scripts]
    assert longer.failures == 0 and "work" in longer.extra
