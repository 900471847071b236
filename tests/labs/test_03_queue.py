"""Lab 03: what the queue experiment's design guarantees, from the records the notebook saved; its interleavings, from its own cells."""

import pytest

from labkit import records
from labkit.experiment import plan
from labkit.profiles import Profile
from labkit.sessions import Result
from labkit.verdict import MIN_STEADY_S, compare, steady_seconds

from .steps import completions, events, outline, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

METHODS = ["for-update", "skip-locked", "skip-locked-1", "advisory", "advisory-fixed", "advisory-fixed-commit",
           "advisory-partitioned"]
EVERY_PICK_MOVES_AN_ORDER = [name for name in METHODS if name != "advisory"]


def _arms() -> dict[str, records.Repeats]:
    """The newest experiment's runs of each arm (the fixture has run the lab by then)."""
    groups = records.latest_groups(records.list_runs(notebook="03-queue"))
    return {name: groups[name] for name in METHODS}


def test_the_arms_ran_interleaved_alike_each_on_a_refilled_queue_that_never_ran_dry(lab_runs):
    lab_runs("03-queue", METHODS)
    arms = _arms()
    runs = [run for group in arms.values() for run in group]
    assert len({run.experiment for run in runs}) == 1 and None not in {run.experiment for run in runs}
    repeats = Profile.named(runs[0].profile).repeats
    assert repeats >= 2 and all(len(group) == repeats for group in arms.values())
    assert [run.name for run in sorted(runs, key=lambda run: run.order)] == plan(METHODS, repeats)  # A B ... F, F ... A
    first = runs[0]
    for run in runs:
        assert (run.clients, run.duration_s, run.mode) == (first.clients, first.duration_s, "prepared"), run.name
        assert run.failures == 0 and not run.errors, run.name
        assert {"work", "goodput", "useful", "consumed", "duplicates", "least_left", "entries_per_order",
                "scans_per_order", "events"} <= set(run.extra)
        assert "horizon" in run.probes, run.name  # every arm sampled alike, the control's pair included
        assert run.extra["duplicates"] == 0, (run.name, run.repeat)  # t_order_u's unique order_id
        # no worker found its queue (or its partition) empty: every second was a second of full load
        assert run.extra["least_left"] > 0, (run.name, run.repeat)
        # the id sequence counts a recorded order that a cut-off transaction rolled back, never one less
        assert run.extra["consumed"] <= run.extra["work"] <= run.extra["consumed"] + run.clients, (run.name, run.repeat)


def test_every_pick_moves_an_order_except_the_articles_advisory_statement(lab_runs):
    """SKIP LOCKED moves on past a row deleted since its snapshot; the advisory statement commits with nothing."""
    lab_runs("03-queue", METHODS)
    arms = _arms()
    for name in EVERY_PICK_MOVES_AN_ORDER:
        for run in arms[name]:
            # pgbench does not count a transaction cut off by -T, which may still have committed
            assert abs(run.extra["work"] - run.transactions) <= run.clients, (name, run.repeat)
    for name in ("advisory-fixed", "advisory-fixed-commit"):  # a retry scans the key twice: pick, delete by id
        for run in arms[name]:
            assert run.extra["scans_per_order"] >= 2.0, (name, run.repeat)
    for run in arms["advisory"]:  # the race of the step-by-step cell, many times over under load
        assert run.extra["work"] < run.transactions - run.clients, run.repeat


def test_each_verdict_says_too_short_exactly_when_a_run_had_under_two_steady_seconds(lab_runs):
    lab_runs("03-queue", METHODS)
    arms = _arms()
    for a, b in zip(METHODS, METHODS[1:]):
        found = compare(arms[a], arms[b], metric="goodput")
        shortest = min(steady_seconds(run) or 0.0 for run in list(arms[a]) + list(arms[b]))
        assert (found.outcome == "too short") == (shortest < MIN_STEADY_S), (a, b, found.sentence)


@pytest.fixture(scope="module")
def queue_lab(fresh_lab):
    lab = fresh_lab("test-03-queue")  # with labkit's extensions, as the notebook's own database
    replay(lab, tagged_steps("03-queue", "schema"))
    return lab


def _frames(outcomes, text):
    return [frame for o in outcomes if isinstance(o, Result) and text in o.sql for frame in o.frames]


def _lock(event) -> tuple:
    return event.lock.get("locktype"), event.lock.get("mode"), event.lock.get("held_by")


def test_the_advisory_statement_walks_the_primary_key_in_order(queue_lab):
    """The plan the race cells rely on: one advisory lock at a time, in id order."""
    outcomes = replay(queue_lab, tagged_steps("03-queue", "race"))
    assert [row["id"] for row in _frames(outcomes, "limit 3")[0].to_dict("records")] == [1, 2, 3]  # restart identity
    plan_text = "\n".join(_frames(outcomes, "explain")[0].iloc[:, 0])
    assert "Index Scan using t_order_q_pkey" in plan_text


def test_for_update_workers_all_queue_on_the_first_order_then_move_on_to_the_next(queue_lab):
    outcome = queue_lab.steps(steps_spec("03-queue", "steps-for-update"))
    assert outline(outcome) == [
        "Parsed test spec with 5 sessions", "",
        "starting permutation: W1_pick W2_pick W3_pick W4_pick blockers W1_delete W1_commit",
        "step W1_pick: <sql>", "id", "--", " 1", "(1 row)", "",
        "step W2_pick: <sql> <waiting ...>",
        "step W3_pick: <sql> <waiting ...>",
        "step W4_pick: <sql> <waiting ...>",
        "step blockers: <sql>",
        "worker|waiting_for        |blocked_by",
        "------+-------------------+----------",
        "W1    |Client: ClientRead |{}        ",
        "W2    |Lock: transactionid|{W1}      ",
        "W3    |Lock: tuple        |{W2}      ",
        "W4    |Lock: tuple        |{W2,W3}   ",
        "(4 rows)", "",
        "step W1_delete: <sql>",
        "step W1_commit: <sql>",
        "step W2_pick: <... completed>", "id", "--", " 2", "(1 row)", "",
        "step W3_pick: <... completed>", "id", "--", " 2", "(1 row)", "",
        "step W4_pick: <... completed>", "id", "--", " 2", "(1 row)", "",
    ]
    (run,) = outcome.permutations
    found = events(run)
    (w2,), (w3,), (w4,) = found["W2_pick"], found["W3_pick"], found["W4_pick"]
    assert _lock(w2) == ("transactionid", "ShareLock", ["W1"]) and w2.released_by == "W1_commit"
    assert _lock(w3) == ("tuple", "AccessExclusiveLock", ["W2"])  # FOR UPDATE's strength, on one row version
    assert _lock(w4) == ("tuple", "AccessExclusiveLock", ["W2", "W3"])  # pg_blocking_pids: the holder, then the one ahead
    assert w3.lock["what"] == w4.lock["what"] == "t_order_q page 0 tuple 1"  # order 1's row
    # the markers fix the order the completions are printed in, whichever waiter locked order 2 first
    assert completions(run) == ["W1_pick", "blockers", "W1_delete", "W1_commit", "W2_pick", "W3_pick", "W4_pick"]
    assert [e.rows for e in (w2, w3, w4)] == [[{"id": "2"}]] * 3


def test_skip_locked_workers_pass_each_other_their_row_locks_in_the_rows_not_the_lock_manager(queue_lab):
    outcome = queue_lab.steps(steps_spec("03-queue", "steps-skip-locked"))
    (run,) = outcome.permutations
    found = events(run)
    assert [found[step][0].waiting_s for step in ("W1_pick", "W2_pick")] == [None, None]  # nobody waited
    assert [e.rows for e in (found["W1_pick"][0], found["W2_pick"][0])] == [[{"id": "1"}], [{"id": "2"}]]
    tuples, activity = found["row_locks"][0].rows, found["activity"][0].rows
    xids = {row["worker"]: row["backend_xid"] for row in activity}
    assert [(row["tuple"], row["xmax"], row["lock_only"]) for row in tuples] == [
        ("1", xids["W1"], "t"), ("2", xids["W2"], "t"), ("3", "0", "f")]
    assert [(row["state"], row["tuple_locks"]) for row in activity] == [("idle in transaction", "0")] * 2


def test_the_advisory_race_step_by_step_consumes_nothing(queue_lab):
    """The notebook's two sessions: T2 passes T1 at once, then its snapshot predates T1's commit and it deletes 0 rows."""
    outcome = queue_lab.steps(steps_spec("03-queue", "steps-race"))
    assert outline(outcome) == [
        "Parsed test spec with 3 sessions", "",
        "starting permutation: T1_take T2_take counts T2_take_waiting T1_commit counts",
        "step T1_take: <sql>",
        "step T2_take: <sql>",
        "step counts: <sql>", "recorded|left_in_queue", "--------+-------------", "       1|          999", "(1 row)", "",
        "step T2_take_waiting: <sql> <waiting ...>",
        "step T1_commit: <sql>",
        "step T2_take_waiting: <... completed>",
        "step counts: <sql>", "recorded|left_in_queue", "--------+-------------", "       2|          998", "(1 row)", "",
    ]
    (run,) = outcome.permutations
    found = events(run)
    assert found["T2_take"][0].waiting_s is None  # the try-lock passed T1's order at once
    (waiting,) = found["T2_take_waiting"]
    assert _lock(waiting) == ("advisory", "ExclusiveLock", ["T1"]) and waiting.released_by == "T1_commit"
    assert waiting.lock["what"] == "0,1"  # the first order's key (id 1: classid, objid)
    assert waiting.error is None
    assert [e.rows for e in found["counts"]] == [[{"recorded": "1", "left_in_queue": "999"}],
                                                 [{"recorded": "2", "left_in_queue": "998"}]]


def test_the_fixed_loop_retries_with_new_snapshots_but_keeps_the_first_ones_xmin(queue_lab):
    outcome = queue_lab.steps(steps_spec("03-queue", "steps-fixed"))
    text = outline(outcome)
    assert text[text.index("step T1_commit: <sql>"):text.index("step T3_commit: <sql>")][:2] == [
        "step T1_commit: <sql>", "T2: NOTICE:  order 1: consumed f"]
    assert text[text.index("step T3_commit: <sql>"):][:4] == [
        "step T3_commit: <sql>", "T2: NOTICE:  order 2: consumed f", "T2: NOTICE:  order 3: consumed t",
        "step T2_take_order: <... completed>"]
    (run,) = outcome.permutations
    found = events(run)
    before, during = ({row["session"]: row for row in e.rows} for e in found["horizon"])
    # T1 has committed and T2's second attempt took a new snapshot, yet T2's xmin is still T1's xid
    assert during["T1"]["backend_xid"] is None and during["T2"]["state"] == "active"
    assert during["T2"]["backend_xmin"] == before["T1"]["backend_xid"] is not None
    (t2,) = found["T2_take_order"]
    assert _lock(t2) == ("advisory", "ExclusiveLock", ["T1"]) and t2.released_by == "T1_commit"
    assert [e.rows for e in found["counts"]] == [[{"recorded": "3", "left_in_queue": "997"}]]
    assert completions(run)[-2:] == ["T2_take_order", "counts"]


def test_a_scan_prunes_the_deleted_rows_and_vacuum_frees_their_pointers(queue_lab):
    outcomes = replay(queue_lab, tagged_steps("03-queue", "prune"))
    pages = [frame.iloc[0] for frame in _frames(outcomes, "line_pointers('t_order_q')") if "dead_pointers" in frame]
    after_delete, after_pgstattuple, after_pick, after_second, after_vacuum = pages
    assert (after_delete["deleted"], after_delete["dead_pointers"]) == (50, 0)
    assert after_pgstattuple.equals(after_delete)  # pgstattuple reads without pruning
    assert (after_pick["deleted"], after_pick["dead_pointers"]) == (0, 50)  # pruned by the pick's scan
    assert after_pick["free_bytes"] > after_delete["free_bytes"] + 50 * 40
    # a second batch on the page pruned once: it has room now (over BLCKSZ / 10), so the scan leaves it
    assert after_second["free_bytes"] > 8192 // 10
    assert (after_second["deleted"], after_second["dead_pointers"]) == (50, 50)
    assert (after_vacuum["deleted"], after_vacuum["dead_pointers"], after_vacuum["unused"]) == (0, 0, 100)
    marked = _frames(outcomes, "bt_page_items")[0].iloc[0]
    assert marked["index_entries_marked_dead"] == 50
