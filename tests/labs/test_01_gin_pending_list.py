"""Lab 01: the GIN pending list, from the records the notebook saved."""

import pytest

from labkit import records
from labkit.profiles import Profile
from labkit.verdict import compare

pytestmark = pytest.mark.integration

RUNS = ["pending-64kB", "pending-128MB", "fillfactor-50", "fastupdate-off"]
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
        assert run.probes.get("pending") and run.probes.get("horizon") and run.probes.get("hot"), name


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
    assert verdict.basis == "repeats" and verdict.ratio is not None
