"""Lab 01: the GIN pending list, from the records the notebook saved."""

import pytest

pytestmark = pytest.mark.integration

RUNS = ["pending-64kB", "pending-4MB", "pending-128MB", "fastupdate-off", "fillfactor-50"]
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


def test_only_fastupdate_has_a_pending_list(lab_runs):
    runs = lab_runs("01-gin-pending-list", RUNS)
    assert runs["fastupdate-off"].extra["pending_pages_max"] == 0
    assert runs["pending-64kB"].extra["pending_pages_max"] > 8  # past its limit: 64 kB is 8 pages


def test_the_sweep_covers_the_profile(lab_runs):
    runs = lab_runs("01-gin-pending-list", ["sweep-pending-64kB", "sweep-pending-128MB"])
    for name in ("sweep-pending-64kB", "sweep-pending-128MB"):
        assert runs[name].extra["method"] == name.removeprefix("sweep-")
        assert "hot_ratio" in runs[name].extra
