"""A benchmark's own server folder and results folder, removed (server stopped) afterwards."""

import contextlib
import os
import shutil
import tempfile


@contextlib.contextmanager
def private_home(idle_stop_s: int = 120):
    home = tempfile.mkdtemp(prefix="labkit-bench-")
    results = tempfile.mkdtemp(prefix="labkit-bench-results-")
    os.environ.update(LABKIT_HOME=home, LABKIT_RESULTS=results, LABKIT_PROFILE="ci", LABKIT_IDLE_STOP=str(idle_stop_s))
    from labkit.embedded import EmbeddedServer

    try:
        yield home
    finally:
        EmbeddedServer().stop(mode="immediate")
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(results, ignore_errors=True)
