"""Habits the project keeps: ruff is clean, one module connects, notebooks are committed without outputs."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run([ruff, "check", "labkit", "tests"], cwd=ROOT, capture_output=True, text=True,
                            encoding="utf-8")
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_module_connects():
    """labkit.db sets every connection's options and names its role; no other module calls psycopg.connect."""
    callers = sorted(path.name for path in (ROOT / "labkit").glob("*.py")
                     if "psycopg.connect(" in path.read_text(encoding="utf-8"))
    assert callers == ["db.py"]


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda path: path.name)
def test_notebook_is_committed_without_outputs(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    with_outputs = [index for index, cell in enumerate(notebook["cells"])
                    if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))]
    assert with_outputs == [], f"cells {with_outputs} of {path.name} carry outputs: clear them before committing"
