"""Lab 00: the two-session interleaving, taken from the notebook's own %%steps cell and run against the server."""

import pytest

from .steps import completions, events, outline, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tour_lab(fresh_lab):
    lab = fresh_lab("test-00-steps")
    replay(lab, tagged_steps("00-start-here", "schema"))  # the stock table and the two views watch reads
    return lab


def test_t2_waits_for_t1s_transaction_and_goes_on_when_t1_commits(tour_lab):
    outcome = tour_lab.steps(steps_spec("00-start-here", "steps-two-sessions"))
    assert outline(outcome) == [
        "Parsed test spec with 3 sessions", "",
        "starting permutation: T1_update T2_update activity locks T1_commit",
        "step T1_update: <sql>",
        "step T2_update: <sql> <waiting ...>",
        "step activity: <sql>",
        "session|state              |waiting_for        |blocked_by",
        "-------+-------------------+-------------------+----------",
        "T1     |idle in transaction|Client: ClientRead |          ",
        "T2     |active             |Lock: transactionid|T1        ",
        "(2 rows)", "",
        "step locks: <sql>",
        "session|locktype     |mode         |granted|on               ",
        "-------+-------------+-------------+-------+-----------------",
        "T1     |transactionid|ExclusiveLock|t      |xid of T1        ",
        "T2     |transactionid|ExclusiveLock|t      |xid of T2        ",
        "T2     |tuple        |ExclusiveLock|t      |row version (0,1)",
        "T2     |transactionid|ShareLock    |f      |xid of T1        ",
        "(4 rows)", "",
        "step T1_commit: <sql>",
        "step T2_update: <... completed>",
        "   qty", "------", "999998", "(1 row)", "",
    ]
    (run,) = outcome.permutations
    (t2,) = events(run)["T2_update"]
    # what the lanes draw: T2 waited for a ShareLock on T1's transaction id, and T1's commit released it
    assert t2.waiting_s is not None and t2.released_by == "T1_commit"
    assert (t2.lock["locktype"], t2.lock["mode"], t2.lock["held_by"]) == ("transactionid", "ShareLock", ["T1"])
    assert t2.rows == [{"qty": "999998"}] and t2.error is None
    assert all(e.waiting_s is None for name, found in events(run).items() if name != "T2_update" for e in found)
    assert completions(run) == ["T1_update", "activity", "locks", "T1_commit", "T2_update"]
    figure = outcome.lanes()
    assert any("waits for ShareLock on transactionid" in (a.text or "") and "held by T1" in a.text
               for a in figure.layout.annotations)


def test_with_t1_committed_first_t2_does_not_wait(tour_lab):
    """The edit the text suggests: T1_commit before T2_update."""
    outcome = tour_lab.steps(steps_spec("00-start-here", "steps-two-sessions"),
                             permutation="T1_update T1_commit T2_update activity locks")
    (run,) = outcome.permutations
    assert all(e.waiting_s is None for e in run.events)
    assert "<waiting ...>" not in outcome.text
    assert events(run)["locks"][0].rows == []  # nobody holds or waits for a row lock any more


def test_with_the_row_held_2_ms_spread_beats_same_row_beyond_the_spread(lab_runs):
    """The lab's key comparison: each transaction holds its row 2 ms, so one row admits about 500 a second."""
    from labkit import records
    from labkit.verdict import compare

    lab_runs("00-start-here", ["same-row", "spread", "same-row-locks"])
    groups = records.latest_groups(records.list_runs(notebook="00-start-here"))
    verdict = compare(groups["same-row"], groups["spread"], metric="tps")
    assert verdict.stands and verdict.ratio > 2, verdict.sentence
    assert all(run.tps < 520 for run in groups["same-row"])  # at most one 2 ms holder at a time
    waits = records.waits_frame(list(groups["same-row"]))["same-row"]
    assert waits.get("Lock: tuple", 0) + waits.get("Lock: transactionid", 0) > 1, waits


def test_the_waiting_locks_probe_sees_the_queue(lab_runs):
    run = lab_runs("00-start-here", ["same-row-locks"])["same-row-locks"]
    samples = [row["waiting"] for row in run.probes["waiting_locks"]]
    assert len(samples) >= 4 and sum(count > 0 for count in samples) > len(samples) / 2, samples
    assert max(samples) <= run.clients - 1
    # the split of the waits for a transaction id, from one read of pg_locks per sample
    for row in run.probes["waiting_locks"]:
        assert row["tuple_waiters"] + row["xid_first_in_line"] + row["xid_by_chain"] <= row["waiting"], row
