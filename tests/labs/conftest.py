"""The labs' results, checked from the run records the notebooks wrote.

The notebooks run first (nbval, earlier in ``testpaths``) and save their runs in this test
session's ``LABKIT_RESULTS``. When a lab's records are missing (e.g. ``pytest tests/labs``
alone), the fixture executes the notebook here under the ci profile, the way
``python -m labkit execute`` does, so the checks always look at a real run.
"""

from __future__ import annotations

import pytest

import labkit
from labkit import records
from labkit.notebooks import execute

from .steps import NOTEBOOKS


@pytest.fixture(scope="session")
def fresh_lab():
    """``fresh_lab("test-02-sellout")``: a lab with a new database, for replaying a notebook's steps; closed at the end."""
    labs = []

    def make(name: str):
        labs.append(labkit.start(name, fresh=True))
        return labs[-1]

    yield make
    for lab in labs:
        lab.close()


@pytest.fixture(scope="session")
def lab_runs(tmp_path_factory):
    """``lab_runs("02-flash-sale", ["plain", ...])``: the newest record of each name (running the lab if needed)."""
    executed: dict[str, str | None] = {}

    def newest(notebook: str, names: list[str]) -> dict[str, records.Run]:
        found = records.latest(records.list_runs(notebook=notebook))
        if not all(name in found for name in names) and notebook not in executed:
            result = execute(NOTEBOOKS / f"{notebook}.ipynb", profile="ci", html=False,
                             output_dir=tmp_path_factory.mktemp("executed"))
            executed[notebook] = result.error
            assert result.error is None, f"{notebook} failed: {result.error}"
            found = records.latest(records.list_runs(notebook=notebook))
        missing = [name for name in names if name not in found]
        assert not missing, f"{notebook} saved no run named {', '.join(missing)}"
        return found

    return newest
