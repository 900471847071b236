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
    assert "Lock: transactionid" not in {trace.name for trace in chart.figure.data}  # at most one redraw a second
    chart.add_progress(Progress(t=5, tps=104.0, lat_ms=1.0, stddev_ms=0.1))  # drawn with the next second
    assert list(chart.figure.data[0].y) == [100.0, 110.0, 2.0, 105.0, 104.0]
    assert len(chart.figure.layout.shapes) == 1
    assert chart.received == 5 and chart.figure.layout.title.text == "demo · 5 s so far"
    assert "Lock: transactionid" in {trace.name for trace in chart.figure.data}


def test_work_figures_put_goodput_on_pgbench_clock():
    from labkit.outcome import work_figures

    run = make_run(tps=1000.0)
    run.transactions = 4000  # pgbench's clock: 4 s
    run.duration_s = 5.0
    assert work_figures(1000, run) == {"work": 1000, "goodput": 250.0, "useful": 0.25}
    run.tps, run.transactions = None, None  # no summary (an interrupted run): the -T duration
    assert work_figures(1000.0, run) == {"work": 1000, "goodput": 200.0}


def test_timeline_draws_goodput_from_the_work_probe():
    run = make_run()
    run.probes["work"] = [{"t": 0.0, "work": 0}, {"t": 1.0, "work": 40}, {"t": 2.0, "work": 100}]
    figure = charts.timeline(run)
    goodput = next(trace for trace in figure.data if trace.name.startswith("goodput"))
    assert list(goodput.x) == [1.0, 2.0] and list(goodput.y) == [40.0, 60.0]
    assert goodput.yaxis == "y"  # drawn over tps, not in a probe row of its own
    assert "probe: work" not in [a.text for a in figure.layout.annotations]


def test_live_chart_draws_goodput():
    live = charts.LiveChart("live", ["waits", "work"])
    live.add_samples({"work": [{"t": 0.0, "work": 10}, {"t": 1.0, "work": 30}]})
    live.add_samples({"work": [{"t": 2.0, "work": 60}]})
    live.add_progress(Progress(t=2, tps=50.0, lat_ms=1.0, stddev_ms=0.1))
    goodput = next(trace for trace in live.figure.data if trace.name.startswith("goodput"))
    assert list(goodput.y) == [20.0, 30.0]


def test_sweep_chart_one_colour_per_method_newest_wins():
    runs = []
    for clients, tps, started in ((8, 100.0, "10:00"), (32, 80.0, "10:01"), (8, 120.0, "10:02")):
        run = make_run(name="sweep-plain", started=f"2026-11-21T{started}:00+00:00", tps=tps)
        run.clients, run.extra = clients, {"method": "plain", "goodput": tps / 2}
        runs.append(run)
    figure = charts.sweep(runs)
    tps, goodput = figure.data
    assert tps.name == "plain: tps" and list(tps.x) == [8, 32] and list(tps.y) == [120.0, 80.0]
    assert goodput.name == "plain: goodput" and list(goodput.y) == [60.0, 40.0]
    assert tps.line.color == goodput.line.color and goodput.line.dash == "dash"
    assert figure.layout.xaxis.type == "log"


def test_waits_frame_averages_backends_per_sample():
    table = records.waits_frame([make_run()])
    assert table.loc["Lock: tuple", "plain"] == 3.5 and table.loc["CPU", "plain"] == 1.5
    assert list(table.index) == ["Lock: tuple", "CPU"]


def test_note_adds_figures_and_saves(tmp_path):
    run = make_run()
    run.save(tmp_path)
    run.note(stock_after=0)
    assert records.Run.load(run.path).extra == {"goodput": 42.0, "stock_after": 0}
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_article_figures_and_ratios():
    from labkit import article

    published = article.figures("02-flash-sale")
    assert "digoal" in published.attrs["source"] and "2023-08-22" in published.attrs["source"]
    assert list(published["run"]) == ["plain", "skip-locked", "advisory"]
    plain, advisory = make_run("plain", tps=1000.0), make_run("advisory", tps=5000.0)
    plain.extra, advisory.extra = {"goodput": 1000.0}, {"goodput": 2000.0}
    table = article.side_by_side(published, [plain, advisory], baseline="plain").set_index("run")
    assert table.loc["advisory", "article ×"] == 507.79
    assert table.loc["advisory", "tps ×"] == 5.0 and table.loc["advisory", "goodput ×"] == 2.0
    with pytest.raises(UsageError, match="Run 'plain' first"):
        article.side_by_side(published, [advisory], baseline="plain")
    with pytest.raises(UsageError, match="No article figures for 'nope'"):
        article.figures("nope")


def test_machine_size_reads_the_container_limits(monkeypatch):
    from labkit import profiles

    files = {"/sys/fs/cgroup/cpu.max": "50000 100000", "/sys/fs/cgroup/memory.max": str(2 * 2**30)}
    monkeypatch.setattr(profiles, "_read_first", lambda paths: next((files[p] for p in paths if p in files), None))
    cpus, memory = profiles.machine_size()
    assert cpus == 0.5 and memory == 2 * 2**30
    assert "0.5 CPUs and 2.0 GiB: the 'ci' profile fits best" in profiles.advise()
    files.update({"/sys/fs/cgroup/cpu.max": "max 100000", "/sys/fs/cgroup/memory.max": "max"})
    cpus, memory = profiles.machine_size()
    assert cpus >= 1 and memory > 2 * 2**30
