"""Ctrl+C held while a run's record is made, then given back as it was found."""

import signal

import pytest

from labkit.processes import HeldInterrupts


@pytest.mark.parametrize("before", [signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler])
def test_an_interrupt_hold_puts_back_the_disposition_it_found(before):
    previous = signal.signal(signal.SIGINT, before)
    try:
        held = HeldInterrupts("the test's record")
        held.hold()
        assert signal.getsignal(signal.SIGINT) == held._note
        assert held.release() is False
        assert signal.getsignal(signal.SIGINT) == before
    finally:
        signal.signal(signal.SIGINT, previous)
