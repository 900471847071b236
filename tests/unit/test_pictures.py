"""The README's pictures: drawn from run records by a headless Chromium."""

import shutil

import pytest

from labkit import pictures
from labkit.errors import UsageError
from labkit.records import Run


def test_without_records_each_lab_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "empty"))
    lines = pictures.write_all(tmp_path / "out", profile="laptop")
    assert len(lines) == len(pictures.KEY_CHARTS)
    assert lines[0] == ("01-gin-pending-list: no laptop records: run python -m labkit execute "
                        "notebooks/01-gin-pending-list.ipynb --profile laptop")
    assert not list((tmp_path / "out").iterdir())


def test_no_browser_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(pictures, "INSTALLED", ())  # GitHub's macOS and Windows images install Chrome there
    with pytest.raises(UsageError, match="apt-get install chromium"):
        pictures.browser()


@pytest.mark.skipif(not any(shutil.which(b) for b in pictures.BROWSERS), reason="no Chromium on this machine")
def test_a_run_record_becomes_a_png(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    for name, tps in (("hash", 300.0), ("btree", 250.0)):
        Run(name, "06-hash-index", "laptop", "2026-01-01T00:00:00+00:00", clients=32, tps=tps,
            per_second=[{"t": 1.0, "tps": tps, "lat_ms": 1.0}]).save()
    lines = pictures.write_all(tmp_path / "out", profile="laptop")
    assert lines[-1] == f"06-hash-index: {tmp_path / 'out' / '06-hash-index.png'}"
    png = (tmp_path / "out" / "06-hash-index.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_lab_05_draws_its_experiments_newest_repeats_of_each_arm(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    arms = ["bulk-cache100", "bulk-cache1", "bulk-stable-cache100"]
    assert pictures.KEY_CHARTS["05-sequence-cache"]("laptop") is None
    for series, when in (("old", "2026-01-01T00:00:00+00:00"), ("new", "2026-01-02T00:00:00+00:00")):
        for repeat in (1, 2):
            for name in arms:
                Run(name, "05-sequence-cache", "laptop", when, clients=2, tps=50.0, repeat=repeat, repeats=2,
                    series=f"{name}@{series}", experiment=series,
                    per_second=[{"t": 1.0, "tps": 50.0, "lat_ms": 1.0}]).save()
    for name in arms[:2]:  # an exercise's experiment, later, with two of the same names
        Run(name, "05-sequence-cache", "laptop", "2026-01-03T00:00:00+00:00", clients=32, tps=9.0, repeat=1,
            repeats=1, series=f"{name}@crowd", experiment="crowd", per_second=[{"t": 1.0, "tps": 9.0}]).save()
    figure = pictures.KEY_CHARTS["05-sequence-cache"]("laptop")
    lines = [trace for trace in figure.data if trace.type == "scatter"]
    assert len(lines) == 2 * len(arms)  # each arm's two newest repeats, not the older series
    assert all(y == 50.0 for trace in lines for y in trace.y)  # nor the exercise's
    assert pictures.KEY_CHARTS["05-sequence-cache"]("ci") is None
