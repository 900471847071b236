"""Lab 00: the three-session interleaving, taken from the notebook's own %%steps cell and run against the
server; the experiment's design, checked from the records the notebook wrote."""

import pytest

from labkit import records
from labkit.experiment import plan
from labkit.verdict import MIN_STEADY_S, compare, steady_seconds

from .steps import events, outline, replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

STEPS = "steps-three-sessions"
ARMS = ["same-row", "spread"]
HOLD_S = 0.002  # each transaction's pg_sleep, between its update and its commit


@pytest.fixture(scope="module")
def tour_lab(fresh_lab):
    lab = fresh_lab("test-00-steps")
    replay(lab, tagged_steps("00-start-here", "schema"))  # the stock table and the view row_waits
    return lab


def _row_1(lab) -> int:
    return int(lab.value("select qty from stock where id = 1"))


def _look(run) -> tuple[list[dict], list[dict]]:
    """The rows of the two `look` steps: before T1's commit, and after it."""
    before, after = [event.rows for event in events(run)["look"]]
    return before, after


def test_before_t1_commits_t2_is_first_in_line_and_t3_queues_for_the_tuple_lock(tour_lab):
    qty = _row_1(tour_lab)
    outcome = tour_lab.steps(steps_spec("00-start-here", STEPS))
    lines = outline(outcome)
    assert lines[:lines.index("step T1_commit: <sql>") + 1] == [
        "Parsed test spec with 4 sessions", "",
        "starting permutation: close T1_update T2_update T3_update look T1_commit look open",
        "step close: <sql>",
        "pg_advisory_lock", "----------------", "                ", "(1 row)", "",
        "step T1_update: <sql>",
        "step T2_update: <sql> <waiting ...>",
        "step T3_update: <sql> <waiting ...>",
        "step look: <sql>",
        "session|state              |wait_event         |holds                 |waits_for                   |path         ",
        "-------+-------------------+-------------------+----------------------+----------------------------+-------------",
        "T1     |idle in transaction|Client: ClientRead |xid of T1             |                            |             ",
        "T2     |active             |Lock: transactionid|xid of T2, tuple (0,1)|ShareLock on xid of T1      |first in line",
        "T3     |active             |Lock: tuple        |xid of T3             |ExclusiveLock on tuple (0,1)|tuple queue  ",
        "(3 rows)", "",
        "step T1_commit: <sql>",
    ]
    (run,) = outcome.permutations
    found = events(run)
    (t2,), (t3,) = found["T2_update"], found["T3_update"]
    # what the lanes draw: the lock each was first seen waiting for, and its holder
    assert (t2.lock["locktype"], t2.lock["mode"], t2.lock["held_by"]) == ("transactionid", "ShareLock", ["T1"])
    assert (t3.lock["locktype"], t3.lock["mode"], t3.lock["held_by"]) == ("tuple", "ExclusiveLock", ["T2"])
    assert t2.error is None and t3.error is None
    assert _row_1(tour_lab) == qty - 3  # three updates, none lost


@pytest.mark.parametrize("attempt", range(4))
def test_after_t1_commits_one_updates_and_the_other_waits_for_its_transaction(tour_lab, attempt):
    """Which of T2 and T3 goes first is a race: what holds whoever wins is checked, not the winner.

    The gate (an advisory lock the watch session holds until `open`) keeps the winner's transaction open
    whichever wins, so that the permutation ends the same way after either."""
    outcome = tour_lab.steps(steps_spec("00-start-here", STEPS))
    (run,) = outcome.permutations
    _, after = _look(run)
    # one waits for the other's transaction; the other, having updated the row, waits at the gate
    waiting = [row for row in after if row["waits_for"] and row["waits_for"].startswith("ShareLock on xid of")]
    assert len(waiting) == 1, after
    (loser,) = waiting
    winner = {"T2": "T3", "T3": "T2"}[loser["session"]]
    assert loser["waits_for"] == f"ShareLock on xid of {winner}"
    assert loser["wait_event"] == "Lock: transactionid"
    winner_row = next(row for row in after if row["session"] == winner)
    # the winner updated the row and waits at the gate, its transaction open
    assert (winner_row["state"], winner_row["wait_event"], winner_row["holds"], winner_row["waits_for"]) == (
        "active", "Lock: advisory", f"xid of {winner}", "ShareLock on advisory")
    if "tuple" in loser["holds"]:  # it reached the new version between the winner's lock and its update
        assert loser["path"] == "first in line" and "tuple (0,1)" not in loser["holds"], loser
    else:
        assert loser["path"] == "by the chain" and loser["holds"] == f"xid of {loser['session']}", loser
    # both completed once the gate opened: the winner committed, then the loser updated and committed
    for session in ("T2", "T3"):
        (update,) = events(run)[f"{session}_update"]
        assert update.error is None and update.released_by is not None, update
    assert "canceling" not in outline(outcome)


def test_with_each_commit_before_the_next_update_nobody_waits(tour_lab):
    """The edit the text suggests."""
    outcome = tour_lab.steps(steps_spec("00-start-here", STEPS),
                             permutation="T1_update T1_commit T2_update T3_update look")
    (run,) = outcome.permutations
    assert all(event.waiting_s is None for event in run.events)
    assert "<waiting ...>" not in outcome.text
    (look,) = [event.rows for event in events(run)["look"]]
    assert all(row["waits_for"] is None and row["holds"] is None for row in look), look


def test_exercise_2_a_lock_timeout_aborts_t2_and_leaves_t1s_update(tour_lab):
    qty = _row_1(tour_lab)
    spec = steps_spec("00-start-here", STEPS)
    t2_setup = "session T2\nsetup          { begin; }"
    assert t2_setup in spec
    spec = spec.replace(t2_setup, "session T2\nsetup          { set lock_timeout = '2s'; begin; }\nstep T2_commit { commit; }")
    outcome = tour_lab.steps(spec, permutation="T1_update T2_update T2_commit T1_commit")
    (run,) = outcome.permutations
    (t2,) = events(run)["T2_update"]
    assert t2.error == "ERROR:  canceling statement due to lock timeout" and t2.released_by is None
    assert 1.5 < t2.completed_s - t2.waiting_s
    assert _row_1(tour_lab) == qty - 1  # T1's update only: T2's transaction was rolled back


def _experiment(lab_runs) -> dict[str, records.Repeats]:
    lab_runs("00-start-here", ARMS)
    groups = records.latest_groups(records.list_runs(notebook="00-start-here"))
    return {name: groups[name] for name in ARMS}


def test_the_arms_ran_interleaved_each_from_a_restocked_table(lab_runs):
    groups = _experiment(lab_runs)
    runs = [run for group in groups.values() for run in group]
    assert len({run.experiment for run in runs}) == 1 and None not in {run.experiment for run in runs}
    in_order = sorted(runs, key=lambda run: run.order)
    assert [run.order for run in in_order] == list(range(1, len(runs) + 1))
    assert [run.name for run in in_order] == plan(ARMS, len(groups["same-row"]))
    for run in runs:
        # the setup before each run reloaded the table: what it held sold after the run is what the run sold
        assert run.extra["sold_after"] == run.extra["work"], run.name
        # every committed transaction sold one unit (one cut off by -T may still commit)
        assert abs(run.extra["work"] - run.transactions) <= run.clients, run.name
        assert run.failures == 0 and not run.errors


def test_the_arms_differ_in_the_rows_they_pick_from_only(lab_runs):
    same_row, spread = (group.last for group in _experiment(lab_runs).values())
    assert [s["text"] for s in same_row.scripts] == [s["text"] for s in spread.scripts]
    assert (same_row.clients, same_row.duration_s, same_row.mode) == (spread.clients, spread.duration_s, spread.mode)
    assert "rows=1" in same_row.argv and "rows=1000" in spread.argv

    def options(run, rows: str) -> list[str]:  # pgbench's words but the variable and the script's file name
        return [word for word in run.argv if word != rows and not word.endswith(".sql@1")]

    assert options(same_row, "rows=1") == options(spread, "rows=1000")


def test_the_verdict_is_the_pairs_or_says_the_runs_are_too_short(lab_runs):
    groups = _experiment(lab_runs)
    verdict = compare(groups["same-row"], groups["spread"], metric="tps")
    shortest = min(steady_seconds(run) for group in groups.values() for run in group)
    if shortest < MIN_STEADY_S:
        assert verdict.outcome == "too short", verdict.sentence
    elif verdict.basis == "load changed":  # a busy machine's load changed within a pair: it says so
        assert "cannot tell" in verdict.sentence, verdict.sentence
    else:
        assert verdict.basis == "pairs" and "interleaved pairs" in verdict.sentence, verdict.sentence


def test_one_row_lets_one_holder_through_at_a_time(lab_runs):
    """The row is held from each update to its commit: at least 2 ms, and through the whole of the pause's
    statement as pgbench times it (its round trip comes after the update and before the commit), so tps
    times either is at most all of every second."""
    for run in _experiment(lab_runs)["same-row"]:
        assert run.tps * HOLD_S <= 1.01, (run.tps, run.path)
        (pause,) = [s["latency_ms"] for s in run.statements if s["command"] == "select pg_sleep(0.002);"]
        assert pause >= HOLD_S * 1000, run.statements
        # tps is the steady phase's, the latency the whole run's: a few percent between them
        assert run.tps * pause / 1000 <= 1.05, (run.tps, pause, run.path)


def test_the_queue_probe_counts_at_most_one_request_a_client_and_never_the_holder(lab_runs):
    run = lab_runs("00-start-here", ["same-row-locks"])["same-row-locks"]
    samples = run.probes["queue"]
    assert len(samples) >= 8, samples
    for row in samples:
        # each backend waits for one heavyweight lock at most, and one client holds the row
        assert 0 <= row["tuple_queue"] + row["first_in_line"] + row["by_the_chain"] <= run.clients - 1, row
    assert "n_tup_upd_per_s" in run.probes["updates"][-1]  # a counter probe stores rates
