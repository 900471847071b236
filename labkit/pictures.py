"""Pictures of each lab's key chart, drawn from run records, for the README ("a look without running").

``python -m labkit pictures`` reads the newest records of each lab under one profile (default
``laptop``) from ``LABKIT_RESULTS`` and writes ``notebooks/pictures/<lab>.png``. Charts are
rendered by a headless Chromium (Debian: ``apt-get install chromium``) from a page that carries
its own plotly.js, so nothing is fetched from the network.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from . import charts, records
from .errors import UsageError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "msedge")
# Where macOS and Windows install Chrome and Edge (not on the PATH there).
INSTALLED = (
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    r"C:\Program Files\Google\Chrome\Application\chrome.exe",
    r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe",
)


def browser() -> str:
    """The headless browser that renders the pictures, or a clear error saying how to get one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    for path in INSTALLED:
        if Path(path).exists():
            return path
    raise UsageError("No Chromium, Chrome or Edge found to render the pictures: install one "
                     "(Debian/Ubuntu: apt-get install chromium).")


def render(figure, path: Path, *, width: int = 1200, height: int | None = None) -> Path:
    """Write ``figure`` as a PNG at ``path`` (rendered by headless Chromium)."""
    height = height or int(figure.layout.height or 600)
    figure = figure.update_layout(width=width, height=height)
    with tempfile.TemporaryDirectory(prefix="labkit-picture-") as folder:
        page = Path(folder) / "figure.html"
        figure.write_html(page, include_plotlyjs=True, full_html=True, config={"staticPlot": True})
        command = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--window-size={width},{height}", "--virtual-time-budget=5000",
                   f"--screenshot={path.resolve()}", page.as_uri()]
        result = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=120)
    if result.returncode != 0 or not path.exists():
        raise UsageError(f"Chromium could not render {path.name}: {(result.stderr or '').strip()[:200]}")
    return path


def _newest(notebook: str, profile: str, names: list[str]) -> list[records.Run] | None:
    found = records.latest([r for r in records.list_runs(notebook=notebook) if r.profile == profile])
    if not all(name in found for name in names):
        return None
    return [found[name] for name in names]


def _sweep(notebook: str, profile: str, prefix: str = "sweep-", method: str = ""):
    runs = [r for r in records.list_runs(notebook=notebook)
            if r.profile == profile and r.name.startswith(prefix) and r.extra.get("method", "").startswith(method)]
    return runs or None


def _gin(profile):
    runs = _newest("01-gin-pending-list", profile, ["pending-64kB"])
    return runs and charts.timeline(runs[0], title="Lab 01: a 64kB GIN pending list, 16 clients")


def _flash(profile):
    runs = _sweep("02-flash-sale", profile)
    return runs and charts.sweep(runs, title="Lab 02: one hot row, tps (solid) and units sold per second (dashed)")


def _queue(profile):
    names = ["for-update", "skip-locked", "skip-locked-1", "advisory", "advisory-fixed", "advisory-fixed-commit",
             "advisory-partitioned"]  # the six methods and the control that commits between attempts
    runs = [r for r in records.list_runs(notebook="03-queue") if r.profile == profile]
    newest = records.latest(runs).get(names[-1])
    # the newest experiment's runs of its arms only (an exercise may run an arm's script under another name)
    runs = [r for r in runs if newest is not None and r.experiment == newest.experiment and r.name in names]
    if {r.name for r in runs} != set(names):
        return None
    return charts.compare(sorted(runs, key=lambda r: (names.index(r.name), r.repeat or 0)), metric="goodput",
                          title="Lab 03: a queue, six ways to take an order and a control (orders moved per second)")


def _hot(profile):
    runs = _newest("04-hot-updates", profile, ["expression-index", "generated-column"])
    return runs and charts.compare(runs, title="Lab 04: the same updates, the first name indexed as an expression "
                                               "and as a stored generated column")


def _sequence(profile):
    names = ["bulk-cache100", "bulk-cache1", "bulk-stable-cache100"]  # the interleaved experiment's arms
    runs = [r for r in records.list_runs(notebook="05-sequence-cache") if r.profile == profile]
    newest = records.latest(runs).get(names[-1])
    # that experiment's runs only: an exercise may run arms of the same names in an experiment of its own
    runs = [r for r in runs if newest is not None and r.experiment == newest.experiment and r.name in names]
    if {r.name for r in runs} != set(names):
        return None
    return charts.compare(sorted(runs, key=lambda r: (names.index(r.name), r.repeat or 0)),
                          title="Lab 05: seq_bulk at as many clients as cores: cache 100, cache 1, the STABLE loop")


def _hash(profile):
    runs = _newest("06-hash-index", profile, ["hash", "btree"])
    return runs and charts.compare(runs, title="Lab 06: 32 clients updating an indexed md5 value, hash vs btree")


KEY_CHARTS = {
    "01-gin-pending-list": _gin,
    "02-flash-sale": _flash,
    "03-queue": _queue,
    "04-hot-updates": _hot,
    "05-sequence-cache": _sequence,
    "06-hash-index": _hash,
}


def write_all(output: Path, *, profile: str = "laptop") -> list[str]:
    """Render every lab's key chart that has records; returns one line per lab (written or why not)."""
    output.mkdir(parents=True, exist_ok=True)
    lines = []
    for notebook, make in KEY_CHARTS.items():
        figure = make(profile)
        if not figure:
            lines.append(f"{notebook}: no {profile} records: run python -m labkit execute notebooks/{notebook}.ipynb "
                         f"--profile {profile}")
            continue
        path = render(figure, output / f"{notebook}.png")
        lines.append(f"{notebook}: {path}")
    return lines
