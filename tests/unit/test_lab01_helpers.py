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
