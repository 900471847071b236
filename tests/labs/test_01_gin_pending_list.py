"""Lab 01: the GIN pending list, from the records the notebook saved; pruning held back, from its steps."""

import time

import pytest

from labkit import records
from labkit.profiles import Profile
from labkit.verdict import compare

from .steps import steps_spec

pytestmark = pytest.mark.integration

RUNS = ["pending-64kB", "pending-4MB", "pending-128MB", "fillfactor-50", "fastupdate-off"]
COMPARED = ["pending-64kB", "pending-128MB", "fastupdate-off"]  # repeated: the lab's verdicts are on these
FIGURES = {"stall_seconds", "max_latency_ms", "overrun_s", "hot_ratio", "pending_pages_max",
           "oldest_xact_s_max", "table_mb", "gin_mb"}


def test_every_run_completes_and_records_its_figures(lab_runs):
    runs = lab_runs("01-gin-pending-list", RUNS)
    for name in RUNS:
        run = runs[name]
        assert run.mode == "prepared" and run.failures == 0 and not run.errors, name
        assert run.clients == runs["pending-64kB"].clients and run.duration_s == runs["pending-64kB"].duration_s
        assert FIGURES <= set(run.extra), f"{name} lacks {FIGURES - set(run.extra)}"
        assert run.extra["max_latency_ms"] == pytest.approx(run.latency_ms["max"], abs=0.1)
        assert run.probes.get("pending") and run.probes.get("hot"), name
        # The horizon probe reads a row only when some backend holds a snapshot at the instant it
        # samples: with short transactions on a busy machine it can find none, and the record says so.
        horizon = next(cost for cost in run.extra["probe_costs"] if cost["name"] == "horizon")
        assert horizon["samples"] > 0 and "horizon" not in run.extra.get("probe_errors", {}), name
        if run.extra["max_latency_ms"] > 3 * 1000 * horizon["every_s"]:
            # a transaction open for three of its intervals spans some of its samples: the probe saw it
            assert run.probes.get("horizon"), name
        if not run.probes.get("horizon"):
            assert run.extra["probe_notes"]["horizon"].startswith(
                f"probe 'horizon' read no row in all {horizon['samples']} samples, one every 0.5 s"), name


def test_fillfactor_50_keeps_updates_hot_and_latency_below_the_small_pending_list(lab_runs):
    runs = lab_runs("01-gin-pending-list", RUNS)
    assert runs["fillfactor-50"].extra["hot_ratio"] > 0.9
    assert runs["fillfactor-50"].extra["max_latency_ms"] < runs["pending-64kB"].extra["max_latency_ms"]


def test_the_small_list_is_flushed_inside_a_users_update(lab_runs):
    run = lab_runs("01-gin-pending-list", RUNS)["pending-64kB"]
    assert run.extra["pending_pages_max"] > 8  # past its limit: 64 kB is 8 pages
    oldest = max(run.probes["horizon"], key=lambda row: row["oldest_xact_s"])
    # caught in the act: the transaction open longest is one of pgbench's one-row updates
    assert oldest["oldest_xact_s"] > 1 and "update test set crt_time" in oldest["oldest_backend"], oldest
    assert run.extra["oldest_xact_s_max"] == oldest["oldest_xact_s"]


def test_the_large_list_stays_below_its_limit_and_hot(lab_runs):
    run = lab_runs("01-gin-pending-list", RUNS)["pending-128MB"]
    assert run.extra["pending_pages_max"] < 16384  # 128 MB in 8 kB pages: no foreground flush
    assert run.extra["hot_ratio"] > 0.9


def test_the_hot_probe_gives_each_intervals_updates(lab_runs):
    run = lab_runs("01-gin-pending-list", RUNS)["pending-128MB"]
    rows = [row for row in run.probes["hot"] if row["updates_per_s"] is not None]
    assert len(rows) >= 3 and all(0 <= row["hot_updates_per_s"] <= row["updates_per_s"] for row in rows), rows
    counted = sum(row["updates_per_s"] * (b["t"] - a["t"])
                  for a, b, row in zip(run.probes["hot"], run.probes["hot"][1:], run.probes["hot"][1:])
                  if row["updates_per_s"] is not None)
    assert counted <= run.extra["updates"] + 1e-6  # the intervals add up to no more than the table's own count (floats)


def test_the_control_has_no_list_and_no_long_transaction(lab_runs):
    runs = lab_runs("01-gin-pending-list", RUNS)
    control, flushed = runs["fastupdate-off"], runs["pending-64kB"]
    assert control.extra["pending_pages_max"] == 0
    assert control.extra["oldest_xact_s_max"] < 1 < flushed.extra["oldest_xact_s_max"]
    # the same packed table: what the control loses is the packed pages alone, and the flushed run loses more
    assert flushed.extra["hot_ratio"] < control.extra["hot_ratio"]


def test_the_compared_runs_are_repeated_and_each_repeat_is_measured(lab_runs):
    newest = lab_runs("01-gin-pending-list", RUNS)
    groups = records.latest_groups(records.list_runs(notebook="01-gin-pending-list"))
    for name in COMPARED:
        group = groups[name]
        assert len(group) == Profile.named(newest[name].profile).repeats >= 2, name
        assert [run.repeat for run in group] == list(range(1, len(group) + 1)) and group.last.path == newest[name].path
        for run in group:  # measure_then_rebuild noted each repeat's figures, not only the last one's
            assert run.failures == 0 and not run.errors and FIGURES <= set(run.extra), (name, run.repeat)
            assert run.extra["stall_seconds"] == run.stall_seconds and run.extra["overrun_s"] == run.overrun_s
    verdict = compare(groups["fastupdate-off"], groups["pending-64kB"], metric="hot_ratio")
    assert verdict.basis == "per repeat" and verdict.ratio is not None  # a share of counts: read per repeat


@pytest.fixture(scope="module")
def prune_lab(fresh_lab):
    """One lab for the steps: each run of the spec drops and rebuilds its table (its counters start at zero)."""
    return fresh_lab("test-01-prune-steps")


def page(rows: list[dict]) -> dict[str, tuple[str, str, str]]:
    """``page0``'s rows by line pointer: its state, t_ctid and HOT flags."""
    return {row["lp"]: (row["line_pointer"], row["t_ctid"], row["hot"]) for row in rows}


def test_the_prune_steps_keep_the_old_versions_while_t1_is_open_then_prune_and_stay_hot(prune_lab):
    lab = prune_lab
    spec = steps_spec("01-gin-pending-list", "prune-steps")
    (run,) = lab.steps(spec).permutations
    assert all(event.waiting_s is None and event.error is None for event in run.events)  # pruning never waits
    updated = {event.step: event.rows for event in run.events if event.step.startswith("t2_update")}
    assert updated == {"t2_update1": [{"id": "1", "ctid": "(0,4)"}],  # HOT, in the room left
                       "t2_update2": [{"id": "2", "ctid": "(1,1)"}],  # no room, no pruning: page 1
                       "t2_update3": [{"id": "3", "ctid": "(0,5)"}]}  # HOT, in the room pruning made
    kept, pruned, last = [event.rows for event in run.events if event.step == "t2_page"]
    assert page(kept) == {"1": ("normal", "(0,4)", "HOT-updated"), "2": ("normal", "(1,1)", ""),
                          "3": ("normal", "(0,3)", ""), "4": ("normal", "(0,4)", "heap-only")}
    assert page(pruned) == {"1": ("redirect to 4", None, ""), "2": ("dead", None, ""),
                            "3": ("normal", "(0,3)", ""), "4": ("normal", "(0,4)", "heap-only")}
    assert page(last)["3"] == ("normal", "(0,5)", "HOT-updated") and page(last)["5"] == ("normal", "(0,5)", "heap-only")
    # the server's own count: two of the three updates were HOT (T2's counts flushed at once, not within a second)
    lab.session("T2").run("select pg_stat_force_next_flush()")
    deadline = time.monotonic() + 5
    while (counts := lab.sql("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relname = 'prune_demo'")
           .iloc[0].tolist()) != [3, 2] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts == [3, 2]


def test_the_prune_steps_sizes_are_those_the_text_gives(prune_lab):
    lab = prune_lab
    spec = steps_spec("01-gin-pending-list", "prune-steps")
    free = "select upper - lower - 4 from page_header(get_raw_page('prune_demo', 0))"  # PageGetHeapFreeSpace
    lab.steps(spec, permutation="t2_page")
    assert lab.value(free) == 2152 and lab.value("select count(*) from heap_page_items(get_raw_page('prune_demo', 0)) "
                                                 "where lp_len = 2000") == 3
    lab.steps(spec, permutation="t2_update1")
    assert lab.value(free) == 148  # below a 2,000-byte row, and below 819 bytes (10% of the page)


def test_the_prune_steps_with_t1_ended_first_keep_the_second_update_hot(prune_lab):
    """The text's prediction: with T1 gone, t2_update2's own scan prunes row 1's old version and stays on page 0."""
    lab = prune_lab
    (run,) = lab.steps(steps_spec("01-gin-pending-list", "prune-steps"),
                       permutation="t1_open t2_update1 t1_commit t2_update2 t2_page").permutations
    assert next(event.rows for event in run.events if event.step == "t2_update2") == [{"id": "2", "ctid": "(0,5)"}]
    assert page(run.events[-1].rows)["1"][0] == "redirect to 4"


def test_exercise_6_a_snapshot_alone_leaves_the_horizon_as_this_backend_last_computed_it(prune_lab):
    """README's answer to exercise 6: T2 recomputes the horizon only when its own snapshot's xmin has moved."""
    lab = prune_lab
    spec = steps_spec("01-gin-pending-list", "prune-steps").replace(
        "begin; select pg_current_xact_id() as t1_xid;", "begin isolation level repeatable read; select 1;")
    assert "repeatable read" in spec
    (run,) = lab.steps(spec).permutations  # the permutation as given: T2 read page 0 while T1 was open
    pages = [page(event.rows) for event in run.events if event.step == "t2_page"]
    assert pages[1]["1"][0] == "normal"  # not pruned after t1_commit
    assert next(event.rows for event in run.events if event.step == "t2_update3")[0]["ctid"] == "(1,2)"
    (run,) = lab.steps(spec, permutation="t1_open t2_update1 t2_update2 t1_commit t2_read t2_page t2_update3 "
                                         "t2_page").permutations
    assert page(run.events[5].rows)["1"][0] == "redirect to 4"  # without that read: pruned


def test_the_hot_shares_are_compared_at_equal_updates(lab_runs):
    """What the lab's verdict cell reads: each run's HOT share over the first updates every run reached."""
    from labkit.probes import counted, share_of_first

    runs = lab_runs("01-gin-pending-list", RUNS)
    groups = records.latest_groups(records.list_runs(notebook="01-gin-pending-list"))
    every = [run for name in RUNS for run in groups[name]]
    equal = min(counted(run.probes["hot"], "updates")[-1]["updates"] for run in every)
    assert equal > 1000
    shares = {run.name: share_of_first(run.probes["hot"], "hot_updates", "updates", equal) for run in every}
    assert all(share is not None and 0 <= share <= 1 for share in shares.values()), shares
    assert shares["fillfactor-50"] > shares["pending-64kB"]  # room on every page against a held-back horizon
    assert runs["pending-4MB"].extra["pending_pages_max"] > 0
