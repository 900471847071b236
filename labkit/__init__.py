"""labkit: run PostgreSQL concurrency experiments live in a notebook.

    import labkit
    lab = labkit.start("00-start-here")      # embedded PostgreSQL, the notebook's own database
    lab.sql("select version()")
    run = lab.pgbench("select 1;", clients=4, duration=5)
"""

from . import article, charts
from .errors import LabkitError, UsageError
from .lab import Lab, start
from .probes import WAIT_EVENTS, Probe, probe
from .profiles import Profile, current as profile
from .records import Run, list_runs

__all__ = [
    "WAIT_EVENTS", "Lab", "article", "charts", "LabkitError", "Probe", "Profile", "Run", "UsageError",
    "list_runs", "probe", "profile", "start",
]


def load_ipython_extension(shell):
    from .magics import load_ipython_extension as load

    load(shell)
