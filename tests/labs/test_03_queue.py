"""Lab 03: every order accounted for, from the records the notebook saved; its interleavings, from its own cells."""

import pytest

from labkit import records
from labkit.profiles import Profile
from labkit.sessions import Result

from .steps import completions, events, outline, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

METHODS = ["for-update", "skip-locked", "advisory", "advisory-fixed", "advisory-partitioned"]


def _groups():
    """The newest repeats of each method (the fixture has run the lab by then)."""
    return records.latest_groups(records.list_runs(notebook="03-queue"))


def test_every_run_is_checked_and_nothing_is_duplicated(lab_runs):
    runs = lab_runs("03-queue", METHODS)
    orders = runs["for-update"].clients * runs["for-update"].transactions_per_client
    groups = _groups()
    for name in METHODS:
        assert len(groups[name]) == Profile.named(runs[name].profile).repeats >= 2, name
        assert groups[name].last.path == runs[name].path
        for run in groups[name]:  # every repeat, each checked after it ran
            assert run.mode == "extended" and run.failures == 0 and not run.errors, name
            assert run.transactions_per_client == runs["for-update"].transactions_per_client
            assert {"consumed", "left", "duplicates", "goodput"} <= set(run.extra), (name, run.repeat)
            assert run.extra["duplicates"] == 0, name
            assert run.extra["consumed"] == run.extra["distinct_orders"] == run.extra["work"], (name, run.repeat)
            assert run.extra["consumed"] + run.extra["left"] == orders, (name, run.repeat)


def test_for_update_and_the_fixed_script_consume_every_order(lab_runs):
    lab_runs("03-queue", METHODS)
    groups = _groups()
    for name in ("for-update", "advisory-fixed"):
        for run in groups[name]:
            assert run.extra["left"] == 0, (name, run.repeat)
            # every transaction consumed one order: counted over the whole run, exactly (extra["useful"] is now
            # over the steady phase, its work read between once-a-second samples, so it only comes near 1.0)
            assert run.extra["work"] == run.transactions, (name, run.repeat)


def test_the_article_advisory_script_leaves_orders_behind(lab_runs):
    advisory = lab_runs("03-queue", ["advisory"])["advisory"]
    assert advisory.extra["left"] > 0
    assert advisory.extra["goodput"] < advisory.tps


def test_partitions_beat_for_update_and_read_less(lab_runs):
    runs = lab_runs("03-queue", METHODS)
    assert runs["advisory-partitioned"].extra["goodput"] > runs["for-update"].extra["goodput"]
    assert runs["advisory-partitioned"].extra["index_reads_per_order"] < runs["for-update"].extra["index_reads_per_order"]


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
    plan = "\n".join(_frames(outcomes, "explain")[0].iloc[:, 0])
    assert "Index Scan using t_order_q_pkey" in plan


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


def test_the_fixed_loop_retries_with_a_new_snapshot_and_consumes_the_next_order(queue_lab):
    outcome = queue_lab.steps(steps_spec("03-queue", "steps-fixed"))
    assert outline(outcome) == [
        "Parsed test spec with 3 sessions", "",
        "starting permutation: T1_take T2_take_order T1_commit counts",
        "step T1_take: <sql>",
        "step T2_take_order: <sql> <waiting ...>",
        "step T1_commit: <sql>",
        "T2: NOTICE:  order 1: consumed f",
        "T2: NOTICE:  order 2: consumed t",
        "step T2_take_order: <... completed>",
        "step counts: <sql>", "recorded|left_in_queue", "--------+-------------", "       2|          998", "(1 row)", "",
    ]
    (run,) = outcome.permutations
    (t2,) = events(run)["T2_take_order"]
    assert _lock(t2) == ("advisory", "ExclusiveLock", ["T1"]) and t2.lock["what"] == "0,1"
    assert t2.released_by == "T1_commit" and t2.error is None
    assert completions(run) == ["T1_take", "T1_commit", "T2_take_order", "counts"]


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
