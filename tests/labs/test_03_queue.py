"""Lab 03: every order accounted for, from the records the notebook saved."""

import pytest

from labkit import records
from labkit.profiles import Profile
from labkit.sessions import Result, Waiting

from .steps import replay, tagged_steps

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


def test_the_advisory_race_step_by_step_consumes_nothing(queue_lab):
    """The notebook's two sessions: T2's snapshot predates T1's commit, it gets the lock, deletes 0 rows."""
    outcomes = replay(queue_lab, tagged_steps("03-queue", "race"))
    plan = "\n".join(_frames(outcomes, "explain")[0].iloc[:, 0])
    assert "Index Scan using t_order_q_pkey" in plan  # one lock at a time, in id order
    waits = [o for o in outcomes if isinstance(o, Waiting)]
    assert [(w.session, w.blocked_by) for w in waits] == [("T2", ("T1",))] and "advisory" in waits[0].wait_event
    t2 = [o.statuses[-1] for o in outcomes if isinstance(o, Result) and o.session == "T2"]
    assert t2 == ["INSERT 0 1", "INSERT 0 0"]  # passes T1 at once, then loses the race
    counts = _frames(outcomes, "left_in_queue")[-1].iloc[0]
    assert (counts["recorded"], counts["left_in_queue"]) == (2, 998)


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
