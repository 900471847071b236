"""Lab 05: what its design guarantees, from the records the notebook saved; its interleaving, from its own cells."""

import pytest

from labkit import perf, records
from labkit.experiment import plan
from labkit.profiles import Profile, machine_size
from labkit.sessions import Result
from labkit.verdict import MIN_STEADY_S, compare, steady_seconds

from .steps import replay, steps_spec, tagged_steps

pytestmark = pytest.mark.integration

NOTEBOOK = "05-sequence-cache"
PER_CALL = ["call-cache100", "call-cache1", "call-stable-cache100"]  # each experiment's arms, baseline first
BULK = ["bulk-cache100", "bulk-cache1", "bulk-stable-cache100"]
SINGLE = ["nextval-cache100", "nextval-cache1"]
PROFILED = ["profile-bulk-cache1"]  # profiled under every profile (the other two arms under laptop only)


def _groups(lab_runs, names: list[str]) -> dict[str, records.Repeats]:
    """The newest experiment's runs of each arm (running the lab first if its records are missing)."""
    lab_runs(NOTEBOOK, names)
    groups = records.latest_groups(records.list_runs(notebook=NOTEBOOK))
    return {name: groups[name] for name in names}


def _interleaved(groups: dict[str, records.Repeats], names: list[str]) -> list[records.Run]:
    """The runs of one experiment, checked to have run in its rounds (A B C, C B A, ...)."""
    runs = [run for name in names for run in groups[name]]
    assert len({run.experiment for run in runs}) == 1 and runs[0].experiment is not None
    rounds = len(groups[names[0]])
    assert all(len(groups[name]) == rounds for name in names)
    assert [run.name for run in sorted(runs, key=lambda run: run.order)] == plan(names, rounds)
    return runs


def test_the_per_call_rounds_alternate_in_one_session_on_the_backends_cpu_time(lab_runs):
    groups = _groups(lab_runs, PER_CALL)
    for run in _interleaved(groups, PER_CALL):
        assert run.clients == 1 and run.extra["calls"] == 10_000 and run.extra["executions"] >= 1
        assert run.extra["ns_per_call"] > 0 and run.extra["per_call_basis"] == "the backend's CPU time"
    for name in PER_CALL[1:]:
        found = compare(groups[PER_CALL[0]], groups[name], metric="ns_per_call")
        assert found.kind == "cost" and found.basis == "per repeat" and not found.limits  # a cost names no CPU limit


def test_the_bulk_arms_ran_interleaved_alike_with_as_many_clients_as_cores(lab_runs):
    groups = _groups(lab_runs, BULK)
    runs = _interleaved(groups, BULK)
    assert len(groups[BULK[0]]) == Profile.named(runs[0].profile).repeats
    first = runs[0]
    assert first.clients == first.jobs == max(1, round(machine_size()[0]))
    for run in runs:
        assert (run.clients, run.jobs, run.duration_s, run.mode) == (first.clients, first.jobs, first.duration_s,
                                                                     first.mode), run.name
        assert run.failures == 0 and not run.errors and run.transactions > 0 and "events" in run.extra
    # the arms differ in the sequence, or in the function's volatility, and in nothing else
    text = {name: groups[name][0].scripts[0]["text"] for name in BULK}
    assert text["bulk-cache1"] == text["bulk-cache100"].replace("'s100'", "'s1'") != text["bulk-cache100"]
    assert text["bulk-stable-cache100"] == text["bulk-cache100"].replace("seq_bulk(", "seq_bulk_stable(")


def test_each_verdict_says_too_short_exactly_when_a_run_is(lab_runs):
    for names in (BULK, SINGLE):
        groups = _groups(lab_runs, names)
        _interleaved(groups, names)
        for name in names[1:]:
            found = compare(groups[names[0]], groups[name])
            shortest = min(steady_seconds(run) for run in [*groups[names[0]], *groups[name]])
            assert (found.outcome == "too short") == (shortest < MIN_STEADY_S), found.sentence
            assert found.basis in ("pairs", "too short", "load changed", "unknown"), found.sentence  # never "not interleaved"


def test_a_transaction_takes_an_id_exactly_when_its_call_writes_wal(lab_runs):
    """Cache 1 logs every 33rd call (32 values ahead), cache 100 at every session's refill of 100 (sequence.c)."""
    groups = _groups(lab_runs, SINGLE)
    for name, every in (("nextval-cache1", 33), ("nextval-cache100", 100)):
        for run in groups[name]:
            ids, counted = run.extra["transaction_ids"], run.transactions
            events = run.extra["events"]
            # beyond one per `every` calls: the values logged before the run, the transactions pgbench cut
            # off at -T and each session's last block (one each), a first change after each checkpoint, and
            # anything else that took an id meanwhile (an autoanalyze)
            slack = 1 + 2 * run.clients + events["checkpoints"] + events["autoanalyze"] + events["autovacuum"]
            assert counted // every - 1 <= ids <= counted / every + slack, (name, run.repeat, ids, counted)


def test_each_profile_says_where_the_time_went_or_why_not(lab_runs):
    runs = lab_runs(NOTEBOOK, PROFILED)
    profiled = [name for name in runs if name.startswith("profile-bulk-")]
    assert set(PROFILED) <= set(profiled)
    for name in profiled:
        run = runs[name]
        assert run.clients == max(1, round(machine_size()[0]))  # as many clients as cores: the article's footing
        figures = run.extra["perf"]
        if not figures["available"]:
            # no perf here, or it could not attach in time (a busy machine): the record says which, in words
            assert figures["message"] and perf.support(run) == f"{name}: no profile ({figures['message']})."
            assert not perf.availability().available or "perf" in figures["message"]
            continue
        total = figures["samples"]
        assert total > 0 and (total < perf.FEW_SAMPLES) == ("too few" in perf.support(run))
        selfs = [row["self"] for row in figures["symbols"]]
        # each share is perf's, to two decimals: their sum may pass 100 by half a hundredth a symbol
        assert selfs == sorted(selfs, reverse=True) and 0 < sum(selfs) <= 100 + 0.005 * len(selfs)
        for row in figures["symbols"]:  # each share is its own samples over all of them
            assert abs(row["self"] - 100 * row["samples"] / total) < 0.01 + 100 / total, row
        if figures["call_graph"] == "dwarf":
            assert any("nextval_internal" in stack for stack in figures["folded"])
            callers = perf.callers(run, "LWLockAcquire")
            inclusive = perf.share(run, "LWLockAcquire", inclusive=True) or 0.0
            assert callers["share %"].sum() <= inclusive + 0.5  # the callers split the symbol's own time


def test_the_stable_loop_never_takes_a_snapshot_in_its_assignment(lab_runs):
    """The VOLATILE loop's assignment takes a snapshot per call (pl_exec.c); the STABLE copy's never does."""
    found = lab_runs(NOTEBOOK, PROFILED)
    loop = found["profile-bulk-cache1"]  # a VOLATILE loop, profiled under every profile
    if not perf.recorded(loop) or not loop.extra["perf"].get("folded"):
        pytest.skip("perf recorded no call chains here: " + perf.support(loop))

    def under_assignment(run) -> int:
        return sum(count for stack, count in run.extra["perf"]["folded"].items()
                   if "exec_assign_expr" in stack and "GetSnapshotData" in stack)

    checked = []
    if loop.extra["perf"]["samples"] >= perf.FEW_SAMPLES:  # a few percent of enough samples: some fall there
        assert under_assignment(loop) > 0
        checked.append(loop.name)
    stable = found.get("profile-bulk-stable-cache100")  # profiled under laptop only
    if stable is not None and perf.recorded(stable) and stable.extra["perf"].get("folded"):
        assert under_assignment(stable) == 0  # none, however many samples: the path is not taken
        checked.append(stable.name)
    if not checked:
        pytest.skip("too few samples to look for the loop's snapshots: " + perf.support(loop))


def test_two_sessions_take_blocks_of_cache_100_and_share_cache_1_call_by_call(fresh_lab):
    """The notebook's %%steps: who gets which number, and when each page's LSN moves (WAL written)."""
    lab = fresh_lab("test-05-steps")
    replay(lab, tagged_steps(NOTEBOOK, "schema"))  # pageinspect
    (run,) = lab.steps(steps_spec(NOTEBOOK, "steps-cache")).permutations
    rows: dict[str, list] = {}
    for event in run.events:
        assert event.error is None, (event.step, event.error)
        rows.setdefault(event.step, []).append(event.rows)
    assert rows["A_take"] == [[{"demo1": "1", "again1": "2", "demo100": "1", "again100": "2"}]]
    assert rows["B_take"] == [[{"demo1": "3", "demo100": "101"}]]  # cache 1 goes on; B's own block starts at 101
    assert rows["A_more"] == [[{"demo1": "4", "demo100": "3"}]]  # A's block, from its own memory
    assert rows["A_locks"] == [[{"mode": "RowExclusiveLock", "granted": "t", "fastpath": "t"}]]
    pages = [{row["seq"]: row for row in page} for page in rows["page"]]
    assert [page["demo1"]["last_value"] for page in pages] == ["1", "2", "3", "4"]
    assert [page["demo1"]["log_cnt"] for page in pages] == ["0", "31", "30", "29"]
    assert [page["demo100"]["last_value"] for page in pages] == ["1", "100", "200", "200"]
    one, hundred = ([page[seq]["lsn"] for page in pages] for seq in ("demo1", "demo100"))
    assert one[0] != one[1] == one[2] == one[3]  # cache 1: WAL at the first call (32 ahead), not since
    assert hundred[0] != hundred[1] != hundred[2] == hundred[3]  # cache 100: at each refill


def test_cache_1_visits_the_shared_buffer_on_every_call(fresh_lab):
    """The notebook's nextval_cost: per 1,000 calls, buffer visits and WAL records, on any OS."""
    lab = fresh_lab("test-05-cost")
    steps = tagged_steps(NOTEBOOK, "schema") + tagged_steps(NOTEBOOK, "cost")
    replay(lab, steps)
    outcomes = replay(lab, steps[-1:])  # again: without the first call's catalog lookups
    table = next(o.frame for o in outcomes if isinstance(o, Result) and o.frame is not None).set_index("sequence")
    one, hundred = table.loc["s1"], table.loc["s100"]
    assert one["buffer_visits"] >= 1000 and one["buffer_visits"] >= 10 * hundred["buffer_visits"]
    assert 1000 // 33 <= one["wal_records"] <= 1000 // 33 + 2  # one record per 33 calls (32 logged ahead)
    assert hundred["wal_records"] <= 1000 // 100 + 1  # one per refill of 100
