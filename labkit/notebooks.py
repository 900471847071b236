"""Execute a lab notebook headless under a profile and keep the executed copy (and HTML)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NotebookResult:
    path: Path
    output: Path | None
    seconds: float
    error: str | None

    def line(self) -> str:
        state = "ok" if self.error is None else f"FAILED: {self.error}"
        return f"{self.path.name}: {state} in {self.seconds:.0f} s" + (f" -> {self.output}" if self.output else "")


def execute(path: Path, *, profile: str | None = None, output_dir: Path = Path("executed"), html: bool = True,
            timeout: int = 1800) -> NotebookResult:
    """Run every cell of ``path`` in a fresh kernel; save the executed copy in ``output_dir``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if profile:
        os.environ["LABKIT_PROFILE"] = profile
    if html:
        # Figures load plotly.js from its CDN when the HTML is opened: embedding it would add
        # about 5 MB per figure. The .ipynb copy keeps the figures as data either way.
        os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype+notebook_connected")
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    started = time.monotonic()
    error = None
    try:
        client.execute()
    except CellExecutionError as failure:
        name, value = getattr(failure, "ename", ""), getattr(failure, "evalue", "")
        error = (f"{name}: {value}" if name else str(failure).strip().splitlines()[-1])[:300]
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / path.name
    nbformat.write(notebook, target)
    if html:
        from nbconvert import HTMLExporter

        body, _ = HTMLExporter().from_notebook_node(notebook)
        target = target.with_suffix(".html")
        target.write_text(body)
    return NotebookResult(path, target, time.monotonic() - started, error)
