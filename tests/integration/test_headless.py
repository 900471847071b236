"""python -m labkit execute: the headless kernel uses unix sockets only (POSIX) and is gone afterwards."""

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
    sockets = tmp_path / "temporary"
    sockets.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(sockets))  # where execute() makes its private socket folder
    result = execute(path, output_dir=tmp_path / "out", html=False, timeout=120)
    assert result.error is None
    text = nbformat.read(result.output, as_version=4).cells[0].outputs[0]["text"]
    pid, listening, transport, socket_base = text.split()
    assert (transport, int(listening)) == ("ipc", 0)
    assert Path(socket_base).parent.parent == sockets  # the kernel's sockets were in the private folder ...
    assert list(sockets.iterdir()) == []  # ... which is gone with the run
    deadline = time.monotonic() + 10
    while psutil.pid_exists(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(int(pid))
