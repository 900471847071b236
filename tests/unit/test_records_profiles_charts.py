"""Run records round-trip; profiles pick sizes (the charts' tests are in test_charts.py)."""

import json
import os
from pathlib import Path

import psutil
import pytest

from labkit import records
from labkit.errors import UsageError
from labkit.profiles import Profile
from tests.unit.sample_runs import make_run

ROOT = Path(__file__).resolve().parents[2]


def test_record_round_trip(tmp_path):
    run = make_run()
    path = run.save(tmp_path)
    assert path.name == "02-flash-sale--plain--20261121T100000.json"
    # Its owner's only: its mode, or on Windows (no modes) its access list, where no one but the user, SYSTEM and
    # Administrators may read it (a folder in the user's profile, as pytest's, passes on that list).
    if os.name == "nt":
        from labkit import _windows

        user = _windows.security().user_sid()
        reads = 0x1 | 0x10000000 | 0x80000000  # FILE_READ_DATA, GENERIC_ALL, GENERIC_READ (winnt.h)
        readers = {ace.sid for ace in _windows.parse_dacl(_windows.security().read(path), user).aces
                   if ace.kind == "A" and "IO" not in ace.flags and ace.rights & reads}
        assert user in readers and readers <= {user, "S-1-5-18", "S-1-5-32-544"}
    else:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = records.Run.load(path)
    assert loaded.to_dict() == run.to_dict()
    assert loaded.summary()["goodput"] == 42.0
    assert list(loaded.to_frame().columns) == ["t", "tps", "lat_ms", "phase"]


def test_listing_filters_and_newest(tmp_path):
    make_run("plain", "2026-11-21T10:00:00+00:00", 1.0).save(tmp_path)
    make_run("plain", "2026-11-21T11:00:00+00:00", 2.0).save(tmp_path)
    make_run("advisory", "2026-11-21T10:30:00+00:00", 3.0).save(tmp_path)
    make_run("other", "2026-11-21T10:30:00+00:00", 4.0, notebook="01-gin").save(tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.warns(UserWarning, match=r"broken.json is not a readable run record: .* \(left out of the runs listed\)"):
        found = records.list_runs(tmp_path, notebook="02-flash-sale")
    assert [run.name for run in found] == ["plain", "advisory", "plain"]
    assert records.latest(found)["plain"].tps == 2.0


def test_a_record_from_a_newer_labkit_says_so(tmp_path):
    data = make_run().to_dict()
    data["format"] = records.FORMAT + 1
    (tmp_path / "newer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UsageError, match="written by a newer labkit"):
        records.Run.load(tmp_path / "newer.json")


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


def _clients_the_labs_pick() -> dict[str, int]:
    """The most clients a lab's cells run under each profile.

    ``clients = P.pick(...)`` (and ``workers``), ``clients = 32``, and a panel's ``clients=(1, 256)``.
    """
    import ast
    import re

    import nbformat

    most = {"ci": 0, "laptop": 0, "article": 0}

    def note(picked: dict) -> None:
        picked.setdefault("article", picked["laptop"])
        for profile, value in picked.items():
            most[profile] = max(most[profile], max(value) if isinstance(value, list) else value)

    for path in sorted(ROOT.glob("notebooks/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for line in cell.source.splitlines():
                target = line.split("=")[0]
                if "P.pick(" in line and any(word in target for word in ("clients", "workers")):
                    call = ast.parse(_call_at(line, line.index("P.pick(")), mode="eval").body
                    note({keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords})
                elif literal := re.fullmatch(r"\s*\w*clients\w*\s*=\s*([\d_]+)\s*", line):
                    note({"ci": int(literal[1]), "laptop": int(literal[1])})
                for low_high in re.findall(r"clients=\((\d+),\s*(\d+)\)", line):  # a panel's range
                    note({"ci": int(low_high[1]), "laptop": int(low_high[1])})
    return most


def _call_at(line: str, start: int) -> str:
    """The call that begins at ``start`` in ``line``, up to its own closing parenthesis (what follows is not it)."""
    depth = 0
    for end in range(line.index("(", start), len(line)):
        depth += {"(": 1, ")": -1}.get(line[end], 0)
        if depth == 0:
            return line[start:end + 1]
    raise AssertionError(f"a P.pick( call that does not close on its line: {line}")


def test_no_lab_restarts_the_server_for_connections():
    from labkit.profiles import NAMES, SPARE_CONNECTIONS

    reserved = 3  # superuser_reserved_connections: clients cannot use them
    most = _clients_the_labs_pick()
    assert most["ci"] >= 128  # the scan found the labs' client counts
    for name in NAMES:
        profile = Profile.named(name)
        assert most[name] <= profile.largest_clients, name
        assert profile.largest_clients + SPARE_CONNECTIONS + reserved <= profile.max_connections, name


def test_work_figures_put_goodput_on_pgbench_clock():
    from labkit.run_record import work_figures

    run = make_run(tps=1000.0)
    run.transactions = 4000  # pgbench's clock: 4 s
    run.duration_s = 5.0
    run.whole = {"tps": 1000.0}
    assert work_figures(0, 1000, run) == {"work": 1000, "goodput": 250.0, "useful": 0.25, "goodput_basis": "whole run"}
    run.tps, run.transactions, run.whole = None, None, {}  # no summary (an interrupted run): the -T duration
    assert work_figures(0, 1000.0, run) == {"work": 1000, "goodput": 200.0, "goodput_basis": "whole run"}


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
    from labkit.experiment import Result

    def arm(name, *goodput):
        runs = records.Repeats(make_run(name, tps=value) for value in goodput)
        for run, value in zip(runs, goodput):
            run.extra = {"goodput": value}
        return runs

    groups = {"plain": arm("plain", 1000.0, 1100.0), "skip-locked": arm("skip-locked", 3000.0, 3300.0),
              "spread": arm("spread", 500.0, 520.0)}
    result = Result(list(groups), "goodput", "rate", groups, [], "as planned", 1.0)
    table = article.beside(published, result)
    assert list(table.index) == ["skip-locked", "spread"]
    assert table.loc["skip-locked", "article: tps ×"] == 103.86  # 23,915 / 230 tps in the article
    assert table.loc["skip-locked", "here: goodput ×"] == 3.0 and table.loc["skip-locked", "verdict"] == "stands"
    assert table["article: tps ×"].isna().tolist() == [False, True]  # "spread": a method the article did not run
    with pytest.raises(UsageError, match="No article figures for 'nope'"):
        article.figures("nope")


def test_machine_size_reads_the_container_limits(monkeypatch, tmp_path):
    """A container with its own cgroup namespace: the mount's root is its cgroup, and holds its limits."""
    from labkit import profiles

    (tmp_path / "cgroup.controllers").write_text("cpu memory", encoding="utf-8")
    (tmp_path / "cpu.max").write_text("50000 100000", encoding="utf-8")
    (tmp_path / "memory.max").write_text(str(2 * 2**30), encoding="utf-8")
    monkeypatch.setattr(profiles, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(profiles, "cgroup_folders", lambda root=tmp_path, membership=None: [tmp_path])
    cpus, memory = profiles.machine_size()
    assert cpus == 0.5 and memory == 2 * 2**30
    assert "0.5 CPUs and 2.0 GiB: the 'ci' profile fits best" in profiles.advise()
    # no CPU limit ("max"): the CPUs this process may run on; a memory limit alone still holds
    (tmp_path / "cpu.max").write_text("max 100000", encoding="utf-8")
    limit = psutil.virtual_memory().total // 2
    (tmp_path / "memory.max").write_text(str(limit), encoding="utf-8")
    host = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert profiles.machine_size() == (host, limit)
    (tmp_path / "memory.max").write_text("max", encoding="utf-8")
    assert profiles.machine_size() == (host, psutil.virtual_memory().total)
