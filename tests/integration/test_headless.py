"""python -m labkit execute: the headless kernel uses unix sockets only (POSIX) and is gone afterwards;
a failing cell or a dead kernel is named."""

import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from labkit.notebooks import execute

pytestmark = pytest.mark.integration

# ipykernel always binds one loopback port of its own: the authenticated pipe that carries the
# output of forked subprocesses (IOPubThread._pipe_port). Its five channels are what carry code.
PROBE = """import os, sys, psutil
from ipykernel import get_connection_info
ports = {c.laddr.port for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
info = get_connection_info(unpack=True)
print(os.getpid(), len(ports - {getattr(sys.stdout.pub_thread, "_pipe_port", None)}), info["transport"], info["ip"])"""


@pytest.mark.posix
def test_the_kernel_channels_use_no_tcp_port_and_the_kernel_ends_with_the_run(tmp_path, monkeypatch):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    path = tmp_path / "my notebooks ü" / "probe.ipynb"  # a folder name with a space and a non-ASCII letter
    path.parent.mkdir()
    nbformat.write(notebook, path)
    # A temporary folder as deep as on GitHub's macOS runners: a ZeroMQ socket path there would pass
    # the 104-byte limit (108 here), and the kernel would die at start.
    deep = tmp_path / ("deep-" + "x" * 60) / "T"
    deep.mkdir(parents=True)
    assert len(str(deep).encode()) > 100
    monkeypatch.setattr(tempfile, "tempdir", str(deep))  # where execute() would make its private socket folder
    result = execute(path, output_dir=tmp_path / "out", html=False, timeout=120)
    assert result.error is None
    text = nbformat.read(result.output, as_version=4).cells[0].outputs[0]["text"]
    pid, listening, transport, socket_base = text.split()
    assert (transport, int(listening)) == ("ipc", 0)
    private = Path(socket_base).parent  # the kernel's sockets were in a private folder, made in /tmp instead ...
    assert private.parent == Path("/tmp") and private.name.startswith("labkit-kernel-")
    assert not private.exists()  # ... which is gone with the run
    deadline = time.monotonic() + 10
    while psutil.pid_exists(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(int(pid))


def test_a_failed_run_names_the_cell_and_a_dead_kernel_says_so(tmp_path):
    cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("# the second cell\n1 / 0")]
    path = tmp_path / "fails.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    result = execute(path, output_dir=tmp_path / "out", html=False, timeout=120)
    assert result.error == "cell 2 (# the second cell): ZeroDivisionError: division by zero"
    cells = [nbformat.v4.new_code_cell("import os\nos._exit(1)")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    result = execute(path, output_dir=tmp_path / "out", html=False, timeout=120)
    assert result.error.startswith("cell 1 (import os): the kernel died")
