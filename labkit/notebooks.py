"""Execute a lab notebook headless under a profile and keep the executed copy (and HTML)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .config import SOCKET_PATH_LIMIT


@dataclass(frozen=True)
class NotebookResult:
    path: Path
    output: Path | None
    seconds: float
    error: str | None

    def line(self) -> str:
        state = "ok" if self.error is None else f"FAILED: {self.error}"
        return f"{self.path.name}: {state} in {self.seconds:.0f} s" + (f" -> {self.output}" if self.output else "")


# What jupyter_client adds to the ipc prefix for each of the kernel's five channels: "-" and a number.
_CHANNEL_SUFFIX = "-65535"


def socket_folder_base(temporary: str | None = None) -> str | None:
    """Where the headless kernel's private socket folder is made on POSIX (None: the usual temporary folder).

    macOS runners and some home folders have a temporary folder so deep that a ZeroMQ socket in
    it would pass the 104-byte limit, and the kernel would die at start: /tmp is used then.

    >>> socket_folder_base("/tmp"), socket_folder_base("/private/var/folders/" + "x" * 100 + "/T")
    (None, '/tmp')
    """
    temporary = temporary or tempfile.gettempdir()
    longest = f"{temporary}/labkit-kernel-xxxxxxxx/kernel{_CHANNEL_SUFFIX}"
    return None if len(longest.encode()) < SOCKET_PATH_LIMIT else "/tmp"


def kernel_transport(folder: Path) -> dict:
    """How the headless kernel talks to its client.

    POSIX: unix sockets in a private folder, so no TCP port at all, not even on loopback.
    Windows: ZeroMQ has no ipc transport there; the kernel listens on 127.0.0.1 and every
    message is signed with the kernel's key (Jupyter's default).
    """
    if os.name == "nt":
        return {"KernelManager": {"transport": "tcp", "ip": "127.0.0.1"}}
    return {"KernelManager": {"transport": "ipc", "ip": str(folder / "kernel")}}


def execute(path: Path, *, profile: str | None = None, output_dir: Path = Path("executed"), html: bool = True,
            timeout: int = 1800) -> NotebookResult:
    """Run every cell of ``path`` in a fresh kernel; save the executed copy in ``output_dir``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    if profile:
        os.environ["LABKIT_PROFILE"] = profile
    if html:
        # Each figure's HTML loads plotly.js from its CDN; the exported page gets one inline copy
        # instead (see embed_plotly), so it opens offline. The .ipynb keeps the figures as data.
        os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype+notebook_connected")
    from traitlets.config import Config

    notebook = nbformat.read(path, as_version=4)
    started = time.monotonic()
    error = None
    current: list[int] = []  # the index of the cell running now
    with tempfile.TemporaryDirectory(prefix="labkit-kernel-", dir=None if os.name == "nt" else socket_folder_base()) as sockets:
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                config=Config(kernel_transport(Path(sockets))),
                                resources={"metadata": {"path": str(path.parent)}},
                                on_cell_start=lambda cell, cell_index: current.append(cell_index))
        try:
            client.execute()
        except CellExecutionError as failure:
            name, value = getattr(failure, "ename", ""), getattr(failure, "evalue", "")
            error = where(notebook, current) + (f"{name}: {value}" if name else str(failure).strip().splitlines()[-1])[:300]
        except DeadKernelError as failure:
            error = where(notebook, current) + f"the kernel died ({str(failure).strip()[:200]})"
    _drop_live_widgets(notebook)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / path.name
    nbformat.write(notebook, target)
    if html:
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter().from_notebook_node(notebook)
        body = embed_plotly(body)
        target = target.with_suffix(".html")
        target.write_text(body, encoding="utf-8")
    return NotebookResult(path, target, time.monotonic() - started, error)


def where(notebook, started: list[int]) -> str:
    """"cell N (its first line): " for the cell that ran last (numbered as JupyterLab shows them, from 1)."""
    if not started:
        return "before the first cell: "
    index = started[-1]
    first = next((line.strip() for line in notebook.cells[index].source.splitlines() if line.strip()), "")
    return f"cell {index + 1} ({first[:60]}): "


def _drop_live_widgets(notebook) -> None:
    """Forget the live charts' widgets (and the page's copy of plotly.js, 4.8 MB) in the saved widget state."""
    from .livewidget import TRANSIENT

    states = notebook.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for model_id in [key for key, model in states.items() if model.get("state", {}).get("role") == TRANSIENT]:
        layout = states.pop(model_id)["state"].get("layout", "")
        states.pop(layout.removeprefix("IPY_MODEL_"), None)  # the widget's own Layout model


_PLOTLY_CDN = re.compile(r'<script[^>]*src="https://cdn\.plot\.ly/[^"]*"[^>]*>\s*</script>')


def embed_plotly(page: str) -> str:
    """The exported page with one inline plotly.js instead of a CDN script per figure (opens offline).

    >>> page = embed_plotly('<html><head></head><body><script src="https://cdn.plot.ly/plotly-4.1.1.min.js"></script>x</body></html>')
    >>> _PLOTLY_CDN.search(page) is None, page.count("<script src="), len(page) > 1_000_000
    (True, 0, True)
    """
    if not _PLOTLY_CDN.search(page):
        return page
    from importlib.resources import files

    library = files("plotly").joinpath("package_data", "plotly.min.js").read_text(encoding="utf-8")
    # Hide an AMD loader (require.js) while plotly.js loads, so it defines the global Plotly.
    inline = ("<script>window.__labkitDefine = window.define; window.define = undefined;</script>"
              f"<script>{library}</script><script>window.define = window.__labkitDefine;</script>")
    page = _PLOTLY_CDN.sub("", page)
    return page.replace("</head>", inline + "</head>", 1) if "</head>" in page else inline + page
