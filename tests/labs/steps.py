"""A lab's multi-session demonstration, replayed step by step from the notebook's own cells.

The cells of a demonstration carry a tag (e.g. ``sellout``). Each is a ``%%sql`` cell, with or
without ``--session NAME``; replaying them through labkit's sessions, the way the ``%%sql`` magic
runs them, checks that the notebook's SQL does what its text says, against a real PostgreSQL.
A ``%%steps`` cell (an isolation spec, sessions and permutation together) is taken whole by
:func:`steps_spec`, for ``lab.steps``.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@dataclass(frozen=True)
class Step:
    session: str
    sql: str


def tagged_steps(notebook: str, tag: str) -> list[Step]:
    """The ``%%sql`` cells tagged ``tag``, in notebook order."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    steps = []
    for cell in nb.cells:
        if tag not in cell.get("metadata", {}).get("tags", []):
            continue
        first, _, body = cell.source.partition("\n")
        words = shlex.split(first)
        assert words[0] == "%%sql", f"{notebook}: a cell tagged {tag} is not a %%sql cell: {first}"
        session = words[words.index("--session") + 1] if "--session" in words else "main"
        steps.append(Step(session, body))
    assert steps, f"{notebook} has no cell tagged {tag}"
    return steps


def replay(lab, steps: list[Step]) -> list:
    """Run each step in its session; a step's outcome, then any background statement it released."""
    outcomes = []
    for step in steps:
        outcomes.append(lab.session(step.session).run(step.sql))
        outcomes.extend(lab.sessions.finished_elsewhere(step.session, settle_s=2.0))
    return outcomes


def python_cell(notebook: str, tag: str) -> str:
    """The one Python code cell tagged ``tag`` (to run with ``exec`` against a test's own lab)."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    (source,) = [cell.source for cell in nb.cells
                 if cell.cell_type == "code" and tag in cell.get("metadata", {}).get("tags", [])]
    assert not source.startswith("%"), f"{notebook}: the cell tagged {tag} is not plain Python"
    return source


def steps_spec(notebook: str, tag: str) -> str:
    """The isolation spec of the one ``%%steps`` cell tagged ``tag``: its body, as ``lab.steps`` takes it."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    (source,) = [cell.source for cell in nb.cells
                 if cell.cell_type == "code" and tag in cell.get("metadata", {}).get("tags", [])]
    first, _, body = source.partition("\n")
    words = shlex.split(first)
    # --out NAME keeps the outcome in a variable: the spec is the body all the same
    assert words[:1] == ["%%steps"] and words[1:] in ([], ["--out", words[-1]]), \
        f"{notebook}: the cell tagged {tag} is not a %%steps cell without a --permutation: {first}"
    return body


def outline(outcome) -> list[str]:
    """The outcome's text as lines, each step's SQL written ``<sql>``: what it printed, whatever the SQL says."""
    text = outcome.text
    for name, step in outcome.spec.steps.items():
        text = text.replace(f"step {name}: {step.sql}", f"step {name}: <sql>")
    return text.splitlines()


def events(run) -> dict[str, list]:
    """A permutation's events by step name (a step that runs twice has two)."""
    found = defaultdict(list)
    for event in run.events:
        found[event.step].append(event)
    return dict(found)


def completions(run) -> list[str]:
    """The steps in the order their completions were reported."""
    done = [event for event in run.events if event.completed_order is not None]
    return [event.step for event in sorted(done, key=lambda event: event.completed_order)]
