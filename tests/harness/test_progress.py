"""The progress indicator: a bar on a terminal, lines elsewhere, nothing when off."""

import io

import harness.progress as prog
from harness.progress import Progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_on_a_terminal_shows_the_time_left():
    s = _Tty()
    with Progress(4, "burst", stream=s) as bar:
        for _ in range(4):
            bar.advance()
    assert "100.0%" in s.getvalue() and "left" in s.getvalue()


def test_lines_when_not_a_terminal(monkeypatch):
    monkeypatch.setattr(prog, "LINE_EVERY_S", 0.0)
    s = io.StringIO()
    with Progress(4, "sweep", stream=s) as bar:
        for _ in range(4):
            bar.advance()
    lines = s.getvalue().splitlines()
    assert lines[0].startswith("sweep: 25% done after") and "s left" in lines[0]
    assert lines[-1].startswith("sweep: done in")
    assert "\r" not in s.getvalue()


def test_short_runs_and_off_write_nothing():
    s = io.StringIO()
    with Progress(4, "x", stream=s) as bar:  # lines mode, but faster than LINE_EVERY_S
        bar.advance(4)
    with Progress(4, "x", stream=s, enabled=False) as bar:
        bar.advance(4)
    assert s.getvalue() == ""


def test_a_run_ended_by_an_error_or_a_signal_is_not_reported_done(monkeypatch):
    """SIGTERM in the middle of identify printed "identify: done in 19 s" before the
    "terminated" line."""
    import pytest

    from harness.args import Terminated

    monkeypatch.setattr(prog, "LINE_EVERY_S", 0.0)
    s = io.StringIO()
    with pytest.raises(Terminated), Progress(4, "identify", stream=s) as bar:
        bar.advance()
        raise Terminated(15)
    last = s.getvalue().splitlines()[-1]
    assert last.startswith("identify: stopped after") and last.endswith("(1 of 4 steps)")
    assert "done in" not in s.getvalue()
