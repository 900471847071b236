"""python -m labkit run: the headless kernel uses unix sockets only and is gone afterwards."""

import time

import nbformat
import psutil
import pytest

from labkit.notebooks import execute

pytestmark = pytest.mark.integration

# ipykernel always binds one loopback port of its own: the authenticated pipe that carries the
# output of forked subprocesses (IOPubThread._pipe_port). Its five channels are what carry code.
PROBE = """import os, sys, psutil
ports = {c.laddr.port for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
print(os.getpid(), len(ports - {getattr(sys.stdout.pub_thread, "_pipe_port", None)}))"""


def test_the_kernel_channels_use_no_tcp_port_and_the_kernel_ends_with_the_run(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    path = tmp_path / "probe.ipynb"
    nbformat.write(notebook, path)
    result = execute(path, output_dir=tmp_path / "out", html=False, timeout=120)
    assert result.error is None
    text = nbformat.read(result.output, as_version=4).cells[0].outputs[0]["text"]
    pid, listening = (int(word) for word in text.split())
    assert listening == 0
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(pid)
    assert not list(tmp_path.glob("kernel-ipc-*"))
