"""Lab 05: the sequence-cache sweep and the perf profiles, from the records the notebook saved."""

import pytest

from labkit import perf, records
from labkit.sessions import Result

from .steps import replay, tagged_steps

pytestmark = pytest.mark.integration

METHODS = ["nextval-cache1", "nextval-cache100", "bulk-cache1", "bulk-cache100", "bulk-stable-cache100"]
CI_CLIENTS = [1, 2, 4]


def newest_repeats(lab_runs, notebook: str, names: list[str]) -> dict[str, records.Repeats]:
    """The newest repeats of each name (running the lab first if its records are missing)."""
    lab_runs(notebook, names)
    groups = records.latest_groups(records.list_runs(notebook=notebook))
    return {name: groups[name] for name in names}


def test_every_sweep_point_is_recorded(lab_runs):
    names = [f"{method}-c{count}" for count in CI_CLIENTS for method in METHODS]
    groups = newest_repeats(lab_runs, "05-sequence-cache", names)
    for count in CI_CLIENTS:
        for method in METHODS:
            point = groups[f"{method}-c{count}"]
            assert len(point) == point.last.repeats >= 2  # each point is repeated, its repeats kept together
            for run in point:
                assert run.clients == run.jobs == count and run.extra["method"] == method
                assert run.failures == 0 and not run.errors and run.transactions > 0


def test_the_cache_speeds_up_the_bulk_transaction(lab_runs):
    groups = newest_repeats(lab_runs, "05-sequence-cache", ["bulk-cache1-c2", "bulk-cache100-c2"])
    assert groups["bulk-cache100-c2"].tps > groups["bulk-cache1-c2"].tps  # the means of the repeats


def test_the_profiled_runs_say_where_the_time_went_or_why_not(lab_runs):
    names = ["profile-bulk-cache1", "profile-bulk-cache100", "profile-bulk-stable-cache100"]
    runs = lab_runs("05-sequence-cache", names)
    for run in (runs[name] for name in names):
        figures = run.extra["perf"]
        if not perf.availability().available:
            assert figures["available"] is False and figures["message"]
            continue
        assert figures["available"] is True and figures["samples"] > 0
        selfs = [row["self"] for row in figures["symbols"]]
        assert selfs == sorted(selfs, reverse=True) and 0 < sum(selfs) <= 100.01
        if figures["call_graph"] == "dwarf":
            assert any("nextval_internal" in stack for stack in figures["folded"])
        assert "s_lock_pct" in run.extra and "lwlock_pct" in run.extra and "snapshot_pct" in run.extra


def test_the_control_runs_beside_the_loop_at_every_client_count(lab_runs):
    # which one is faster is a timing, left to the run's ratio table (timings are not asserted:
    # shared machines are noisy); what must hold is that the two are measured alike
    names = [f"{method}-c{count}" for count in CI_CLIENTS for method in ("bulk-cache100", "bulk-stable-cache100")]
    groups = newest_repeats(lab_runs, "05-sequence-cache", names)
    for count in CI_CLIENTS:
        loops, statements = groups[f"bulk-cache100-c{count}"], groups[f"bulk-stable-cache100-c{count}"]
        assert len(loops) == len(statements) >= 2  # as many repeats of each, so that their verdict is run to run
        for loop, statement in zip(loops, statements):
            assert (loop.clients, loop.jobs, loop.duration_s) == (statement.clients, statement.jobs,
                                                                  statement.duration_s)
            assert loop.transactions > 0 and statement.transactions > 0


def test_the_loop_takes_a_snapshot_per_call_and_the_stable_copy_does_not(lab_runs):
    runs = lab_runs("05-sequence-cache", ["profile-bulk-cache100", "profile-bulk-stable-cache100"])
    loop, statement = runs["profile-bulk-cache100"], runs["profile-bulk-stable-cache100"]
    if not perf.recorded(loop) or loop.extra["perf"]["call_graph"] != "dwarf":
        pytest.skip("perf recorded no call chains on this machine: " + str(loop.extra["perf"].get("message")))
    under_assignment = sum(count for stack, count in loop.extra["perf"]["folded"].items()
                           if "exec_assign_expr" in stack and "GetSnapshotData" in stack)
    assert under_assignment > 0  # the snapshots are taken by the loop's assignment
    assert loop.extra["snapshot_pct"] > 1
    assert (statement.extra["snapshot_pct"] or 0) < loop.extra["snapshot_pct"] / 5  # None: below perf's cut-off


def test_cache_1_visits_the_shared_buffer_on_every_call(fresh_lab):
    """The notebook's nextval_cost: per 1,000 calls, buffer visits and WAL records, on any OS."""
    lab = fresh_lab("test-05-cost")
    steps = tagged_steps("05-sequence-cache", "schema") + tagged_steps("05-sequence-cache", "cost")
    replay(lab, steps)
    outcomes = replay(lab, steps[-1:])  # again: without the first call's catalog lookups
    table = next(o.frame for o in outcomes if isinstance(o, Result) and o.frame is not None).set_index("sequence")
    one, hundred = table.loc["s1"], table.loc["s100"]
    assert one["buffer_visits"] >= 1000 and one["buffer_visits"] >= 10 * hundred["buffer_visits"]
    assert 1000 // 33 <= one["wal_records"] <= 1000 // 33 + 2  # one record per 33 calls (32 logged ahead)
    assert hundred["wal_records"] <= 1000 // 100 + 1  # one per refill of 100
