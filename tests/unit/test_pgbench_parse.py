"""pgbench's output, parsed from real recordings (pgbench 18 and 15, and the articles' 9.3/9.4/11)."""

from pathlib import Path

import pytest

from labkit import pgbench

DATA = Path(__file__).resolve().parent.parent / "data" / "pgbench"


def read(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize("version", ["18", "15"])
def test_summary_of_two_weighted_scripts(version):
    summary = pgbench.parse_summary(read(f"pgbench{version}_two_scripts.stdout"))
    assert summary.version.startswith(version)
    assert summary.clients == 4 and summary.threads == 2 and summary.duration_s == 3
    assert summary.failed == 0
    assert summary.tps > 10_000
    assert [s["name"] for s in summary.scripts] == ["upd.sql", "sel.sql"]
    assert [s["weight"] for s in summary.scripts] == [3, 1]
    # per-script counts leave out transactions still in flight at the end: at most one per client
    assert 0 <= summary.transactions - sum(s["transactions"] for s in summary.scripts) <= summary.clients
    assert {s.script for s in summary.statements} == {1, 2}
    assert summary.statements[1].command.startswith("update hot")


@pytest.mark.parametrize("version", ["18", "15"])
def test_summary_with_retries_and_failures(version):
    summary = pgbench.parse_summary(read(f"pgbench{version}_retries.stdout"))
    assert summary.failed > 0
    assert summary.serialization_failures == summary.failed
    assert summary.retries > summary.retried > 0
    update = summary.statements[1]
    assert update.failures == summary.failed
    assert update.retries >= summary.retries


@pytest.mark.parametrize("version", ["18", "15"])
def test_summary_of_fixed_transactions(version):
    summary = pgbench.parse_summary(read(f"pgbench{version}_transactions.stdout"))
    assert summary.transactions_per_client == 2000
    assert summary.transactions == summary.transactions_planned == 4000
    assert summary.duration_s is None
    assert summary.mode == "prepared"


def test_old_formats_from_the_articles():
    hash_93 = pgbench.parse_summary(read("pgbench93_article_hash.stdout"))
    assert hash_93.tps == pytest.approx(12861.817834)
    assert hash_93.tps_including_connections == pytest.approx(12852.268715)
    assert hash_93.transactions == 771818
    assert [s.command.split()[0] for s in hash_93.statements] == ["\\setrandom", "update"]
    hot_11 = pgbench.parse_summary(read("pgbench11_article_hot.stdout"))
    assert hot_11.tps == pytest.approx(22859.938191)
    assert hot_11.latency_avg_ms == pytest.approx(0.262)
    assert hot_11.clients == 6


@pytest.mark.parametrize("version", ["18", "15"])
def test_sql_error_in_a_script_is_reported(version):
    problems = pgbench.parse_errors(read(f"pgbench{version}_sql_error.stderr"))
    assert problems.errors[0] == "ERROR:  division by zero"
    assert problems.aborted_clients == 2
    assert problems.run_aborted


def test_a_client_ended_by_a_gset_without_a_row_is_counted_as_aborted():
    """pgbench 18 names the client in its error and says "Run was aborted", with no "client N aborted" line."""
    problems = pgbench.parse_errors(read("pgbench18_gset_abort.stderr"))
    assert problems.errors == ("client 0 script 0 command 1 query 0: expected one row, got 0",)
    assert problems.aborted_clients == 1 and problems.run_aborted


def test_errors_of_two_threads_interleaved():
    problems = pgbench.parse_errors(read("pgbench18_interleaved_errors.stderr"))
    assert len(problems.errors) == 1  # both clients' identical errors, once
    assert problems.errors[0].splitlines()[0] == 'ERROR:  relation "missing_table" does not exist'
    assert problems.aborted_clients == 2
    assert problems.run_aborted


def test_progress_lines_new_and_old():
    points = [pgbench.parse_progress(line) for line in read("pgbench18_stall.stderr").splitlines()]
    assert [p.t for p in points] == [1.0, 2.0, 3.0, 4.0]
    assert points[0].tps == 0 and points[0].lat_ms is None  # 'lat 0.000 ms' in a second without transactions
    assert points[2].stddev_ms == pytest.approx(22.095)
    old = [pgbench.parse_progress(line) for line in read("pgbench94_article_gin_progress.stderr").splitlines()]
    assert all(p is not None for p in old)
    assert old[6].tps == pytest.approx(4511.1)
    assert pgbench.parse_progress("progress: 2.0 s, 0.0 tps, lat -nan ms stddev -nan").lat_ms is None
    retried = pgbench.parse_progress(read("pgbench18_retries.stderr").splitlines()[0])
    assert (retried.failed, retried.retried, retried.retries) == (770, 2998, 7582)
    assert pgbench.parse_progress("pgbench: error: something") is None


def test_stalls_found_in_the_recorded_lock_wait():
    points = [pgbench.parse_progress(line) for line in read("pgbench15_stall.stderr").splitlines()]
    stalls = pgbench.find_stalls([(p.t, p.tps) for p in points])
    assert [(s.start, s.end) for s in stalls] == [(0.0, 2.0)]


@pytest.mark.parametrize("version", ["18", "15"])
def test_transaction_log_bins_and_percentiles(version):
    frame = pgbench.log_frame(DATA / f"pgbench{version}_txlog.txlog")
    assert len(frame) == 300
    start = pgbench.log_start(frame)
    bins = pgbench.bin_log(frame, start, 0.1)
    assert sum(b.tps * 0.1 for b in bins) == pytest.approx(300)
    figures = pgbench.latency_figures(frame)
    assert 0 < figures["p50"] <= figures["p95"] <= figures["p99"] <= figures["max"]


def test_transaction_log_with_failed_transactions():
    frame = pgbench.log_frame(DATA / "pgbench18_txlog_retries.txlog")
    failed = frame[frame["status"] == "failed"]
    assert len(failed) > 0 and failed["latency_ms"].isna().all()
    bins = pgbench.bin_log(frame, pgbench.log_start(frame), 0.1)
    assert sum(b.failed for b in bins) == len(failed)
