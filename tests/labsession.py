"""The test session's lab servers: a private LABKIT_HOME per worker, the ci profile, stopped at the end.

Loaded as a pytest plugin (``-p tests.labsession``) so that its environment is set before
anything starts, including the notebook kernels nbval launches (they inherit it). The server's
home and the results folder have a space and a non-ASCII letter in their names, as a macOS
user's data folder (``Application Support``) or a Windows user name may: a path that is split
or mis-encoded anywhere fails the whole session.

The suite runs on several workers at once (pytest-xdist): most of its time is pgbench runs of
fixed length and timers, which a second or third worker overlaps. Each worker has a server of its
own (its own LABKIT_HOME and results folder), so that a test that restarts or stops its server
(a setting that needs a restart, a server that is gone) never stops another worker's notebook.
What must run together runs on one worker, in order (:func:`group_of`): a test module, the cells
of a notebook, and with them the checks of ``tests/labs`` that read the records it wrote.

Tests marked ``posix`` or ``linux`` rely on that OS's behaviour and are skipped elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

_CREATED: list[Path] = []
WORKERS_PER_CORE = 2  # runs of fixed length and timers: a worker waits as often as it computes
MOST_WORKERS = 4


def _private_folders(suffix: str = "") -> None:
    """A home and a results folder of this process's own, unless the caller set them."""
    if "LABKIT_HOME" not in os.environ:
        # Not under pytest's tmp folder: as root the server's own user must be able to enter it.
        home = Path(tempfile.mkdtemp(prefix=f"labkit test ü{suffix}-"))
        os.environ["LABKIT_HOME"] = str(home)
        _CREATED.append(home)
    if "LABKIT_RESULTS" not in os.environ:
        results = Path(tempfile.mkdtemp(prefix=f"labkit results é{suffix}-"))
        os.environ["LABKIT_RESULTS"] = str(results)
        _CREATED.append(results)


def _ctrl_c_raises() -> None:
    """Ctrl+C raises KeyboardInterrupt in this process and the processes it starts, however the suite was started.

    A shell starts a background job (``cmd &``) with SIGINT ignored, and Python then keeps it
    ignored: the tests of what an interrupt does, and the kernels and servers the hub test starts,
    would run in a process no student's kernel is.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _kernels_started_again_once_and_heard() -> None:
    """A notebook's kernel that dies before it answers is started once more, and what it said is kept.

    nbval throws a kernel's error output away, so a kernel that dies while it starts says nothing:
    once in a README run all 38 cells of one lab failed so. Four workers start kernels at once, each on
    five TCP ports jupyter_client found free a moment before (``Address already in use`` when another
    process took one meanwhile). No cell has run then: a second start hides nothing of the notebook. A
    kernel that dies twice fails its notebook with its own last words.
    """
    import logging

    from nbval import kernel

    if getattr(kernel.start_new_kernel, "heard", False):
        return
    original = kernel.start_new_kernel

    def start_new_kernel(startup_timeout=60, kernel_name="python", **options):
        thrown_away = options.pop("stderr", None)  # nbval's open os.devnull: replaced, so closed here
        if thrown_away is not None and hasattr(thrown_away, "close"):
            thrown_away.close()
        for attempt in (1, 2):
            said = tempfile.TemporaryFile()  # the kernel keeps writing here; gone with the last descriptor
            try:
                return original(startup_timeout=startup_timeout, kernel_name=kernel_name, **{**options, "stderr": said})
            except RuntimeError as failure:
                said.seek(0)
                words = said.read()[-3000:].decode("utf-8", errors="replace").strip() or "(nothing)"
                if attempt == 2:
                    raise RuntimeError(f"{failure}, twice; the kernel's error output: {words}") from failure
                logging.getLogger("nbval").warning("a kernel died while it started; starting it again. It said: %s",
                                                   words)
            finally:
                said.close()  # ours: the kernel has its own
        raise AssertionError("unreachable")

    start_new_kernel.heard = True  # type: ignore[attr-defined]
    kernel.start_new_kernel = start_new_kernel


def pytest_configure(config):
    _ctrl_c_raises()
    _kernels_started_again_once_and_heard()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # The controller's folders (inherited) are no worker's: each worker makes its own, inside the
        # controller's when the caller named them (a folder labkit did not create is left as it was).
        for name in ("LABKIT_HOME", "LABKIT_RESULTS"):
            inherited = os.environ.pop(name, None)
            if inherited and os.environ.get(f"LABKIT_TEST_GIVEN_{name}"):
                mine = Path(inherited) / f"pytest-{worker}"
                mine.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.environ[name] = str(mine)
                _CREATED.append(mine)
        _private_folders(f" {worker}")
    else:
        for name in ("LABKIT_HOME", "LABKIT_RESULTS"):
            if name in os.environ:
                os.environ[f"LABKIT_TEST_GIVEN_{name}"] = "1"
        if not _distributed(config):
            _private_folders()
    os.environ.setdefault("LABKIT_PROFILE", "ci")
    os.environ.setdefault("LABKIT_IDLE_STOP", "120")


def _distributed(config) -> bool:
    """Whether this process is xdist's controller, whose workers run the tests (it runs none itself)."""
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) and not config.getoption("collectonly", False)


@pytest.hookimpl(tryfirst=True)  # before xdist's own (one worker a core), which would answer first
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: two workers a core, at most four (the suite waits on runs and timers as much as it computes)."""
    from labkit.profiles import machine_size

    cores = machine_size()[0]
    return max(1, min(MOST_WORKERS, round(cores * WORKERS_PER_CORE)))


_LAB_TEST = re.compile(r"test_(\d\d)_")


def group_of(path: Path, notebooks: dict[str, str]) -> str | None:
    """The work unit of a notebook, and of the ``tests/labs`` checks of its records: one, the same (None: others).

    >>> group_of(Path("notebooks/02-flash-sale.ipynb"), {"02": "02-flash-sale"})
    'notebook-02-flash-sale'
    >>> group_of(Path("tests/labs/test_02_flash_sale.py"), {"02": "02-flash-sale"})
    'notebook-02-flash-sale'
    >>> group_of(Path("tests/unit/test_verdict.py"), {"02": "02-flash-sale"}) is None
    True
    """
    if path.suffix == ".ipynb":
        return f"notebook-{path.stem}"
    found = _LAB_TEST.match(path.name)
    if path.parent.name == "labs" and found and found.group(1) in notebooks:
        return f"notebook-{notebooks[found.group(1)]}"
    return None


def pytest_xdist_make_scheduler(config, log):
    """Whole work units: a module, a notebook's cells with the ``tests/labs`` checks of its records."""
    from xdist.scheduler import LoadScopeScheduling

    root = Path(__file__).resolve().parents[1]
    notebooks = {path.stem[:2]: path.stem for path in (root / "notebooks").glob("[0-9][0-9]-*.ipynb")}

    class LabScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(Path(nodeid.split("::", 1)[0]), notebooks) or super()._split_scope(nodeid)

        ordered = False

        def _assign_work_unit(self, node) -> None:
            # The longest units first, so that none starts last and keeps the others waiting: the class hub
            # (two minutes of one test), then the notebooks, then the rest, each by its number of tests. (Starting
            # the browser, the containers and mypy beside it too made every test slower: 3,012 test-seconds and
            # 13 min 20 s against 2,554 and 10 min 40 s.) The queue is reordered, never the collection.
            if not self.ordered:
                for unit in sorted(self.workqueue, key=lambda unit: (
                        0 if unit.startswith("tests/hub") else 1 if unit.startswith("notebook-") else 2,
                        -len(self.workqueue[unit]))):
                    self.workqueue.move_to_end(unit)
                self.ordered = True
            super()._assign_work_unit(node)

    return LabScheduling(config, log)


def pytest_runtest_setup(item):
    if item.get_closest_marker("posix") and os.name != "posix":
        pytest.skip(f"relies on POSIX behaviour; this is {sys.platform}")
    if item.get_closest_marker("linux") and not sys.platform.startswith("linux"):
        pytest.skip(f"relies on Linux behaviour; this is {sys.platform}")


def pytest_unconfigure(config):
    """Stop what this process started; leave nothing running."""
    from labkit.embedded import EmbeddedServer

    for path in _CREATED:
        server = EmbeddedServer(path)
        if server.initialized():
            try:
                server.stop(mode="immediate")
            except Exception:  # noqa: BLE001 - a cleanup failure must not hide the test results
                pass
        _remove(path)


def _remove(path: Path, tries: int = 20) -> None:
    """Remove ``path`` whole, though a watchdog that is still ending may take the server's lock file once more."""
    import time

    for _ in range(tries):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.25)
