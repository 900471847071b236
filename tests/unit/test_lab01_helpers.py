"""Helpers Lab 01 relies on: stall-aware wait tables, probe peaks, the article's logs."""

import pytest

from labkit import article, charts
from labkit.errors import UsageError
from labkit.records import Run, waits_frame


def _run():
    waits = [{"t": 0.5, "wait": "CPU", "backends": 4}, {"t": 1.5, "wait": "Lock: extend", "backends": 3},
             {"t": 1.5, "wait": "CPU", "backends": 1}, {"t": 2.5, "wait": "CPU", "backends": 2}]
    return Run("r", "nb", "ci", "now", stalls=[{"start": 1.0, "end": 2.0}],
               probes={"waits": waits, "pending": [{"t": 0.5, "pending_pages": 3}, {"t": 1.0, "pending_pages": None}]})


def test_waits_frame_splits_stalls_from_steady_running():
    run = _run()
    assert waits_frame([run], during="stalls")["r"].to_dict() == {"Lock: extend": 3.0, "CPU": 1.0}
    assert waits_frame([run], during="outside-stalls")["r"].to_dict() == {"CPU": 3.0}
    # a record without phases is steady throughout: the default takes every sample
    assert waits_frame([run])["r"].to_dict() == {"CPU": round(7 / 3, 1), "Lock: extend": 1.0}
    with pytest.raises(UsageError, match="during="):
        waits_frame([run], during="sometimes")


def test_peak_and_stall_seconds():
    run = _run()
    assert run.peak("pending", "pending_pages") == 3
    assert run.peak("nothing", "x") is None
    assert run.stall_seconds == 1.0 and run.summary()["stall_s"] == 1.0


def test_the_article_logs_load_and_draw_beside_a_run():
    logs = article.figures("01-gin-pending-list")
    assert "digoal" in logs.attrs["source"]
    assert set(logs["release"]) == {"PostgreSQL 9.4", "PostgreSQL 10"}
    zeros = logs[(logs.release == "PostgreSQL 9.4") & (logs.pending_list_kb == 4096) & (logs.clients == 64)]
    assert (zeros.tps == 0).sum() == 25 and len(zeros) == 28  # as the article printed them
    assert (logs[logs.release == "PostgreSQL 10"].tps > 0).all()
    run = Run("here", "nb", "ci", "now", clients=16, per_second=[{"t": 1.0, "tps": 5.0}, {"t": 2.0, "tps": 0.0}])
    figure = charts.logs_beside(logs[logs.pending_list_kb == 4096], [run], by=["release", "clients"])
    names = [trace.name for trace in figure.data]
    assert "release PostgreSQL 9.4, clients 64" in names and run.label in names
    assert list(figure.data[-1].y) == [5.0, 0.0]


def test_a_probe_column_whose_first_sample_is_null_is_still_drawn():
    run = Run("r", "nb", "ci", "now", per_second=[{"t": 1.0, "tps": 5.0, "lat_ms": 1.0}],
              probes={"hot": [{"t": 0.0, "hot_ratio": None}, {"t": 1.0, "hot_ratio": 0.5}, {"t": 2.0, "hot_ratio": 0.25}]})
    traces = {trace.name: trace for trace in charts.timeline(run).data}
    assert list(traces["hot: hot_ratio"].y) == [None, 0.5, 0.25]


def test_the_article_logs_alone_take_the_whole_width():
    logs = article.figures("01-gin-pending-list")
    alone = charts.logs_beside(logs[logs.release == "PostgreSQL 9.4"], [], by=["release", "clients"])
    beside = charts.logs_beside(logs[logs.release == "PostgreSQL 9.4"],
                                [Run("here", "nb", "ci", "now", per_second=[{"t": 1.0, "tps": 5.0}])], by=["release"])
    assert alone.layout.xaxis.domain == (0.0, 1.0) and "xaxis2" not in alone.layout.to_plotly_json()
    assert beside.layout.xaxis.domain[1] < 0.5 and "xaxis2" in beside.layout.to_plotly_json()
    assert [a.text for a in alone.layout.annotations] == ["the article (its machine and version)"]


def test_hot_shares_are_drawn_against_the_updates_done_so_far():
    # a run still packed in its first second (10% HOT), pruned later (HOT rising to 90%)
    long = [{"t": 0.0, "updates_per_s": None, "hot_updates_per_s": None},
            {"t": 1.0, "updates_per_s": 1000.0, "hot_updates_per_s": 100.0},
            {"t": 2.0, "updates_per_s": 9000.0, "hot_updates_per_s": 8100.0}]
    run = Run("r", "nb", "ci", "now", probes={"hot": long})
    figure = charts.probe_by_count([run], "hot", "hot_updates", "updates")
    assert list(figure.data[0].x) == [1000.0, 10000.0] and list(figure.data[0].y) == [0.1, 0.9]


def test_a_probe_with_a_row_per_backend_is_drawn_as_points_with_what_each_did_in_the_hover():
    rows = [{"t": 0.5, "open_s": 2.0, "doing": "CPU"}, {"t": 0.5, "open_s": 1.5, "doing": "Lock: transactionid"},
            {"t": 1.0, "open_s": 2.5, "doing": "CPU"}]
    run = Run("r", "nb", "ci", "now", per_second=[{"t": 1.0, "tps": 5.0, "lat_ms": 1.0}],
              probes={"horizon": rows, "pending": [{"t": 0.5, "pages": 3}, {"t": 1.0, "pages": 9}]})
    traces = {trace.name: trace for trace in charts.timeline(run).data}
    horizon = traces["horizon: open_s"]
    assert horizon.mode == "markers" and list(horizon.y) == [2.0, 1.5, 2.5]
    assert list(horizon.hovertext) == ["doing: CPU", "doing: Lock: transactionid", "doing: CPU"]
    assert traces["pending: pages"].mode == "lines+markers" and traces["pending: pages"].hovertext is None


def test_the_article_logs_are_set_beside_the_steady_phase_of_a_run_only():
    logs = article.figures("01-gin-pending-list")
    # pgbench ran 3 s (-T 3), then waited 3 s for its last clients: the tail's zeros are no stall
    run = Run("here", "nb", "ci", "now", duration_s=3.0,
              per_second=[{"t": float(t), "tps": 0.0 if t > 3 else 100.0} for t in range(1, 7)],
              phases={"connected_s": 0.05, "steady_from_s": 1.0, "steady_to_s": 3.0, "end_s": 6.0,
                      "planned_end_s": 3.0, "clients_after": 1, "note": None})
    figure = charts.logs_beside(logs[logs.pending_list_kb == 4096], [run], by=["release"])
    here = next(trace for trace in figure.data if trace.name == run.label)
    assert list(here.x) == [2.0, 3.0] and list(here.y) == [100.0, 100.0]
