"""Run records round-trip; profiles pick sizes; charts shade stalls."""

import json

import pytest

from labkit import charts, records
from labkit.errors import UsageError
from labkit.pgbench import Progress
from labkit.profiles import Profile


def make_run(name="plain", started="2026-11-21T10:00:00+00:00", tps=100.0, notebook="02-flash-sale"):
    return records.Run(
        name=name, notebook=notebook, profile="ci", started_at=started, clients=8, tps=tps,
        per_second=[{"t": 1.0, "tps": 100.0, "lat_ms": 1.0}, {"t": 2.0, "tps": 0.0, "lat_ms": None},
                    {"t": 3.0, "tps": 120.0, "lat_ms": 1.1}],
        stalls=[{"start": 1.0, "end": 2.0}], extra={"goodput": 42.0},
        probes={"waits": [{"t": 0.5, "wait": "CPU", "backends": 3}, {"t": 1.5, "wait": "Lock: tuple", "backends": 7}]},
    )


def test_record_round_trip(tmp_path):
    run = make_run()
    path = run.save(tmp_path)
    assert path.name == "02-flash-sale--plain--20261121T100000.json"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    loaded = records.Run.load(path)
    assert loaded.to_dict() == run.to_dict()
    assert loaded.summary()["goodput"] == 42.0
    assert list(loaded.to_frame().columns) == ["t", "tps", "lat_ms"]


def test_listing_filters_and_newest(tmp_path):
    make_run("plain", "2026-11-21T10:00:00+00:00", 1.0).save(tmp_path)
    make_run("plain", "2026-11-21T11:00:00+00:00", 2.0).save(tmp_path)
    make_run("advisory", "2026-11-21T10:30:00+00:00", 3.0).save(tmp_path)
    make_run("other", "2026-11-21T10:30:00+00:00", 4.0, notebook="01-gin").save(tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    found = records.list_runs(tmp_path, notebook="02-flash-sale")
    assert [run.name for run in found] == ["plain", "advisory", "plain"]
    assert records.latest(found)["plain"].tps == 2.0


def test_unreadable_record_says_so(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(UsageError, match="not a readable run record"):
        records.Run.load(path)


def test_probe_frame_of_a_missing_probe():
    with pytest.raises(UsageError, match="no probe named 'pending'"):
        make_run().probe_frame("pending")


def test_profiles():
    assert Profile.named("ci").pick(ci=1, laptop=2, article=3) == 1
    assert Profile.named("article").pick(ci=1, laptop=2) == 2
    with pytest.raises(UsageError, match="Unknown profile 'huge'"):
        Profile.named("huge")


def test_timeline_shades_stalls_and_stacks_waits():
    figure = charts.timeline(make_run())
    assert len(figure.layout.shapes) == 1
    assert figure.layout.shapes[0].x0 == 1.0 and figure.layout.shapes[0].x1 == 2.0
    stacked = [trace for trace in figure.data if trace.stackgroup == "waits"]
    assert {trace.name for trace in stacked} == {"CPU", "Lock: tuple"}


def test_live_chart_grows_and_shades():
    chart = charts.LiveChart("demo", ["waits"])
    for t, tps in [(1, 100.0), (2, 110.0), (3, 2.0), (4, 105.0)]:
        chart.add_progress(Progress(t=t, tps=tps, lat_ms=1.0, stddev_ms=0.1))
    chart.add_samples({"waits": [{"t": 0.25, "wait": "Lock: transactionid", "backends": 5}]})
    assert list(chart.figure.data[0].y) == [100.0, 110.0, 2.0, 105.0]
    assert len(chart.figure.layout.shapes) == 1
    assert chart.received == 4
    assert "Lock: transactionid" in {trace.name for trace in chart.figure.data}
