"""A pgbench that crashed is said to have crashed, with its code as the OS writes it."""

import pytest

from labkit.records import Run
from labkit.run_record import Outputs, failure


def failed(code: int) -> str | None:
    return failure(Outputs(stdout="", stderr="", progress=[], wall_s=1.0, exit_code=code), Run("r", "nb", "ci", "now"))


@pytest.mark.parametrize("code, said", [
    (3221225477, "pgbench crashed (exit code 0xC0000005: access violation)"),  # NTSTATUS, as Windows returns it
    (2147483904, "pgbench crashed (exit code 0x80000100)"),
    (3221226505, "pgbench crashed (exit code 0xC0000409: stack buffer overrun)"),
])
def test_a_windows_crash_is_said_in_hex(code, said):
    assert failed(code) == said


def test_a_posix_signal_is_named():
    assert failed(-11) == "pgbench was killed by signal SIGSEGV"


def test_an_ordinary_exit_code_stays_a_number():
    assert failed(2) == "pgbench exited with code 2"
