"""A real browser: JupyterLab headless, 00-start-here run cell by cell as a student would.

Checks from the page itself that every cell ran without an error, that the widget panel rendered
and runs (its live chart, then its final chart, inside the panel), that a live chart drew points
while its pgbench cell was still running, and that a zoom survives its redraws; prints how long after
Shift+Enter each live chart drew its first point, and how far behind the run it fell; saves
screenshots. Needs Chromium (Debian: ``apt-get install chromium``) and the ``browser`` extra
(playwright, used with that Chromium).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)
try:
    import playwright.sync_api  # noqa: F401
    PLAYWRIGHT = True
except ImportError:
    PLAYWRIGHT = False

pytestmark = [
    pytest.mark.integration, pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (Debian: apt-get install chromium)"),
    pytest.mark.skipif(not PLAYWRIGHT, reason="playwright is not installed (pip install -e '.[browser]')"),
]


LIVE_STATE = """cell => {
  const prompt = cell.querySelector('.jp-InputPrompt').textContent.trim();
  const plot = cell.querySelector('.js-plotly-plot');
  if (!plot || !plot._fullLayout) return [prompt, null, 0];
  const tps = (plot.data || []).find(trace => trace.name === 'tps per second');
  return [prompt, plot._fullLayout.title.text, tps && tps.x ? tps.x.length : 0];
}"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_tree(process: subprocess.Popen) -> None:
    if os.name == "nt":
        subprocess.run(["taskkill", "/T", "/F", "/PID", str(process.pid)], capture_output=True)
        process.wait()
        return
    os.killpg(process.pid, signal.SIGTERM)  # posix-only: Windows is handled above
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # posix-only
        process.wait()


# Appended to the tour: a run of light load (pgbench -R) whose live chart the test watches. The
# tour's own runs load every core of a 2-core test machine, where a browser draws seconds late;
# on a laptop the browser has cores of its own, and this run leaves it one here too.
LIVE_CELL = """%%pgbench -c 2 -R 100 -T 20 --name browser-live
SELECT 1;
"""


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 serving a copy of the tour with LIVE_CELL at its end.

    (A copy: autosave must not touch the repository.)
    """
    import nbformat

    root = tmp_path_factory.mktemp("lab-root")
    notebook = nbformat.read(ROOT / "notebooks" / "00-start-here.ipynb", as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(LIVE_CELL))
    nbformat.write(notebook, root / "00-start-here.ipynb")
    token, port = secrets.token_hex(16), _free_port()
    log = open(root / "jupyter.log", "w", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
         *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        **({"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" else {"start_new_session": True}),
        # laptop: 15 s runs with 16 clients, as a student runs them.
        env={**os.environ, "LABKIT_PROFILE": os.environ.get("LABKIT_BROWSER_PROFILE", "laptop")},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"JupyterLab did not start: {(root / 'jupyter.log').read_text()[-800:]}")
                time.sleep(0.5)
        yield base, token, root
    finally:
        _stop_tree(process)
        log.close()


# Charts whose final rendering in JupyterLab is kept as a picture: the cell that draws it, the file.
PICTURES = {"charts.sweep(": "sweep.png", "--name same-row-locks": "timeline-waits.png", "%%steps": "lanes.png"}


def _picture_of_output(cell, root: Path) -> None:
    """A picture of the cell's final chart, once drawn (plotly draws after the cell's prompt changes)."""
    source = cell.query_selector(".jp-InputArea").text_content() or ""
    for marker, name in PICTURES.items():
        if marker not in source:
            continue
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, title, _ = cell.evaluate(LIVE_STATE)
            if title and ", live" not in title:
                # The notebook scrolls inside the page: make the page tall enough for the whole chart.
                page = cell.owner_frame().page
                viewport = page.viewport_size
                plot = cell.query_selector(".jp-OutputArea .js-plotly-plot")
                page.set_viewport_size({"width": viewport["width"], "height": int(plot.bounding_box()["height"]) + 400})
                plot.scroll_into_view_if_needed()
                plot.screenshot(path=str(root / f"00-start-here-{name}"))
                page.set_viewport_size(viewport)
                return
            time.sleep(0.2)


def _x_range(cell) -> list[float]:
    return cell.evaluate("cell => cell.querySelector('.js-plotly-plot')._fullLayout.xaxis.range.slice()")


def _zoom(cell, page) -> list[float]:
    """Drag across the left third of the live chart's top panel, as a student zooms in; the new x range."""
    panel = cell.query_selector(".js-plotly-plot .nsewdrag")
    panel.scroll_into_view_if_needed()
    box = panel.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + 5, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 3, y, steps=5)
    page.mouse.up()
    page.wait_for_timeout(300)
    return _x_range(cell)


PANEL_TITLES = """button => [...button.closest('.jp-OutputArea-output').querySelectorAll('.js-plotly-plot')]
    .map(plot => plot._fullLayout ? plot._fullLayout.title.text : '')"""


def _run_panel(button) -> list[str]:
    """Press the panel's Run; the titles of the charts in the panel until its final chart is drawn."""
    button.scroll_into_view_if_needed()
    button.click()
    seen, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        titles = button.evaluate(PANEL_TITLES)
        seen += [title for title in titles if title not in seen]
        if any(title.startswith("explore") and ", live" not in title for title in titles):
            break
        time.sleep(0.3)
    return seen


def test_a_student_runs_the_tour_in_jupyterlab(jupyterlab):
    from playwright.sync_api import sync_playwright

    base, token, root = jupyterlab
    seen_live = []  # (title of the live chart, prompt of its cell, points drawn) while a pgbench cell ran
    delays = []  # (run, seconds from Shift+Enter until the page drew the live chart's first point)
    lags = {}  # run: the most seconds the drawn points fell behind one a second, while its cell ran
    zoomed, after_zoom = None, None  # the x range a drag in the live chart chose; that range a few redraws later
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/lab/tree/00-start-here.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        try:  # JupyterLab may ask which kernel to start: the notebook's own (Python 3)
            page.click(".jp-Dialog button:has-text('Select')", timeout=10_000)
        except Exception:  # noqa: BLE001 - no dialog: the kernel started by itself
            pass
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
        # Run the cells one by one with Shift+Enter, as a student does (the running cell stays in view).
        page.click(".jp-Notebook .jp-Cell >> nth=0")
        page.keyboard.press("Escape")
        count = len(page.query_selector_all(".jp-Notebook .jp-Cell"))
        code_cells = len(page.query_selector_all(".jp-Notebook .jp-CodeCell"))
        deadline = time.monotonic() + 400
        for _ in range(count):
            cell = page.query_selector(".jp-Notebook .jp-Cell.jp-mod-active")
            is_code = "jp-CodeCell" in (cell.get_attribute("class") or "")
            watch = is_code and "%%pgbench" in (cell.query_selector(".jp-InputArea").text_content() or "")
            page.keyboard.press("Shift+Enter")
            pressed, first_point, drawn = time.monotonic(), None, 0
            while is_code and time.monotonic() < deadline:
                # One round trip: the cell's prompt and, if its live chart is drawn, plotly's own state.
                prompt, title, points = cell.evaluate(LIVE_STATE)
                if watch and title and "s so far" in title:
                    seen_live.append((title, prompt, points))
                    run = title.split(":")[0]
                    if points and first_point is None:
                        first_point = time.monotonic() - pressed
                        delays.append((run, round(first_point, 1)))
                        lags[run] = 0.0
                    if points > drawn and prompt == "[*]:":  # a point a second: how far the page is behind
                        behind = time.monotonic() - pressed - first_point - (points - 1)
                        lags[run] = max(lags[run], round(behind, 1))
                    drawn = max(drawn, points)
                    if points >= 3 and prompt == "[*]:" and title.startswith("browser-live") \
                            and not (root / "00-start-here-live.png").exists():
                        page.screenshot(path=str(root / "00-start-here-live.png"))
                        zoomed = _zoom(cell, page), points  # the student zooms into the run's start
                    elif zoomed and not after_zoom and title.startswith("browser-live") and points >= zoomed[1] + 2:
                        after_zoom = zoomed[0], _x_range(cell), points  # ...and the next redraws keep that zoom
                if re.fullmatch(r"\[\d+\]:", prompt):
                    break
                time.sleep(0.2)
            if is_code:
                _picture_of_output(cell, root)
        # (Shift+Enter on the last cell adds an empty one below it: look at the notebook's own cells.)
        prompts = [(e.text_content() or "").strip()
                   for e in page.query_selector_all(".jp-CodeCell .jp-InputPrompt")][:code_cells]
        page.wait_for_timeout(1500)
        errors = [e.text_content() for e in page.query_selector_all("[data-mime-type='application/vnd.jupyter.error']")]
        buttons = [e.text_content() for e in page.query_selector_all(".jupyter-widgets button, button.jupyter-button")]
        panel = page.query_selector("button.jupyter-button:has-text('Run')")
        panel_titles = _run_panel(panel) if panel else []
        screenshot = root / "00-start-here.png"
        page.screenshot(path=str(screenshot))
        browser.close()
    kept = ROOT / "executed" / "browser"  # executed/ is ignored by git: the screenshots stay for a look
    kept.mkdir(parents=True, exist_ok=True)
    for picture in root.glob("*.png"):
        shutil.copy(picture, kept / picture.name)
    print(f"screenshots: {sorted(str(p) for p in kept.glob('*.png'))}")
    assert not errors, errors[0][:500]
    assert prompts and all(re.fullmatch(r"\[\d+\]:", text) for text in prompts), f"not every cell ran: {prompts}"
    print(f"first point on the page, seconds after Shift+Enter: {delays}")
    print(f"most seconds the live chart fell behind the run: {lags}")
    running = [(title, points) for title, prompt, points in seen_live
               if prompt == "[*]:" and title.startswith("browser-live")]
    assert running, f"the live chart never showed progress while its cell ran (seen: {seen_live[-3:]})"
    print(f"live chart while its cell ran: {len(running)} observations, e.g. {running[-1]}")
    assert any(points >= 2 for _, points in running), running[:5]
    assert after_zoom, f"the live chart was not zoomed and redrawn while its cell ran (zoomed: {zoomed})"
    assert after_zoom[0] == after_zoom[1] and after_zoom[0][1] < 15, f"a redraw undid the student's zoom: {after_zoom}"
    assert any("Run" in (text or "") for text in buttons), f"no panel button rendered ({buttons[:5]})"
    # the panel's run: its live chart inside the panel, then its final chart in the same place
    assert any("live" in title and "s so far" in title for title in panel_titles), panel_titles
    assert panel_titles and ", live" not in panel_titles[-1], f"the panel's final chart was not drawn: {panel_titles}"
    assert screenshot.stat().st_size > 20_000
    assert {f"00-start-here-{name}" for name in PICTURES.values()} <= {p.name for p in root.glob("*.png")}, \
        f"a final chart did not render in the page: {sorted(p.name for p in root.glob('*.png'))}"


# The interleavings the lanes test draws: (notebook, a phrase only that %%steps cell holds, picture).
LANES = [("02-flash-sale", "update tbl set cnt = 1 where id = 1", "02-flash-sale-sell-out-lanes.png"),
         ("03-queue", "pg_try_advisory_xact_lock(id)", "03-queue-race-lanes.png")]

LANES_STATE = """cell => {
  const plot = cell.querySelector('.jp-OutputArea .js-plotly-plot');
  if (!plot || !plot._fullLayout) return [null, 0, []];
  return [plot._fullLayout.title.text, (plot.data || []).filter(t => t.type === 'bar').length,
          (plot._fullLayout.annotations || []).map(a => a.text || '')];
}"""


def _lanes_notebook(name: str, phrase: str):
    """A notebook of the lab's own set-up cells (labkit.start, its %%sql) and the %%steps cell holding ``phrase``."""
    import nbformat

    lab = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    code = [cell for cell in lab.cells if cell.cell_type == "code"]
    first_steps = next(i for i, cell in enumerate(code) if cell.source.startswith("%%steps"))
    kept = [cell for cell in code[:first_steps]
            if cell.source.startswith(("import labkit", "%%sql")) or "labkit.start(" in cell.source
            or cell.source.startswith("lab.sql(")]
    kept.append(next(cell for cell in code if cell.source.startswith("%%steps") and phrase in cell.source))
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell.source) for cell in kept],
                                    metadata=lab.metadata)


def test_the_lanes_of_the_sell_out_and_the_race_draw_in_jupyterlab(jupyterlab):
    """The %%steps cells of 02 (the sell-out) and 03 (the advisory race), run as a student runs them."""
    import nbformat
    from playwright.sync_api import sync_playwright

    base, token, root = jupyterlab
    seen = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for name, phrase, picture in LANES:
            nbformat.write(_lanes_notebook(name, phrase), root / f"lanes-{name}.ipynb")
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # a workspace of its own, reset: only this notebook open
            page.goto(f"{base}/lab/workspaces/lanes-{name}/tree/lanes-{name}.ipynb?token={token}&reset")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            try:
                page.click(".jp-Dialog button:has-text('Select')", timeout=10_000)
            except Exception:  # noqa: BLE001 - no dialog: the kernel started by itself
                pass
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000,
                                   state="attached")
            page.click(".jp-Notebook .jp-Cell >> nth=0")
            page.keyboard.press("Escape")
            cells = page.query_selector_all(".jp-Notebook .jp-CodeCell")
            for _ in cells:
                page.keyboard.press("Shift+Enter")
                page.wait_for_timeout(300)
            steps = page.query_selector_all(".jp-Notebook .jp-CodeCell")[len(cells) - 1]
            deadline = time.monotonic() + 120
            state = (None, 0, [])
            while time.monotonic() < deadline:
                prompt = (steps.query_selector(".jp-InputPrompt").text_content() or "").strip()
                state = steps.evaluate(LANES_STATE)
                if re.fullmatch(r"\[\d+\]:", prompt) and state[0] and state[0].startswith("permutation:"):
                    break
                time.sleep(0.3)
            page.wait_for_timeout(800)
            plot = steps.query_selector(".jp-OutputArea .js-plotly-plot")
            if plot is not None:
                page.set_viewport_size({"width": 1400, "height": int(plot.bounding_box()["height"]) + 400})
                plot.scroll_into_view_if_needed()
                plot.screenshot(path=str(root / picture))
            errors = [e.text_content() for e in page.query_selector_all("[data-mime-type='application/vnd.jupyter.error']")]
            text = steps.query_selector(".jp-OutputArea").text_content() or ""
            seen[name] = (state, errors, text)
            page.close()
        browser.close()
    kept = ROOT / "executed" / "browser"
    kept.mkdir(parents=True, exist_ok=True)
    for _, _, picture in LANES:
        if (root / picture).exists():
            shutil.copy(root / picture, kept / picture)
    for name, (state, errors, text) in seen.items():
        assert not errors, f"{name}: {errors[0][:500]}"
        title, boxes, notes = state
        assert title and title.startswith("permutation:"), f"{name}: no final lanes ({title})"
        assert boxes >= 3, f"{name}: {boxes} step boxes drawn"
        assert "<waiting ...>" in text, f"{name}: no step waited ({text[:300]})"
        assert any(note.startswith("waits for") for note in notes), f"{name}: no wait drawn: {notes}"
    assert all((root / picture).stat().st_size > 10_000 for _, _, picture in LANES)
