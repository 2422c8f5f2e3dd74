"""Argument checks shared by every entry point: the ``gpucontrol`` subcommands, the hardware
harness's ``python -m`` commands and the benchmark scripts. The standard library only, and
outside :mod:`harness.cli`, so that the hardware harness checks its flags the same way without
importing the command line (which imports every experiment).

Every bad value is refused, never changed: an ``argparse`` type says which range the value
must lie in (argparse prefixes the flag's name), :class:`OneLineParser` prints that as one
line with exit status 2, and :func:`check_out_dir` / :func:`check_out_file` (as argparse
types: :data:`out_dir`, :data:`out_file`) refuse an output folder or file that cannot be
written, or an empty path, before anything runs. :func:`terminate_cleanly` turns SIGTERM and
SIGHUP into :class:`Terminated`, so a command stopped that way unwinds through its
``finally`` blocks (the plants' ``close``) as Ctrl-C does, instead of dying with its
services, cgroups and temporary folders left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["DefaultsHelpFormatter", "OneLineParser", "Terminated", "UsageError",
           "add_study_options", "check_out_dir",
           "check_out_file", "integer", "name_list", "note_replaced", "number", "number_list",
           "out_dir",
           "out_file", "pair", "seed",
           "terminate_cleanly", "warn", "whole_periods"]

#: Largest seed numpy's generators take.
SEED_MAX = 2**32 - 1


class UsageError(ValueError):
    """A bad command-line value found after parsing (a combination of flags, a file): the
    console script prints it as one line and exits with status 2."""


#: A value that starts with a minus and is numbers, not an option: ``-5``, ``-0.5``, ``-1e3``,
#: and lists ``-5,10`` or ``-5 10`` (argparse's own pattern takes single numbers only, so
#: ``--batch -5,10`` was read as a second flag: "expected one argument").
_NEGATIVE_NUMBERS = re.compile(
    r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[, ]+-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)*$")


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``PROG: error: MESSAGE (see PROG
    -h)``) with exit status 2, instead of the usage block followed by the message. A value
    that starts with a minus but is numbers (``--batch -5,10``) is a value, which its flag's
    type then checks, not an unknown option."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._negative_number_matcher = _NEGATIVE_NUMBERS

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one line on stderr and exit with status 2.

        Parameters
        ----------
        message : str
            What argparse found wrong.

        Returns
        -------
        NoReturn
            It exits.
        """
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} -h')\n")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``ArgumentDefaultsHelpFormatter`` that shows no ``(default: None)`` (an option whose
    default depends on other flags says so in its own help) and no ``(default: False)`` of a
    switch."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    left = "(" if lo_open or lo is None else "["
    right = ")" if hi_open or hi is None else "]"
    a = "-inf" if lo is None else (f"{lo:d}" if isinstance(lo, int) else f"{lo:g}")
    b = "inf" if hi is None else (f"{hi:d}" if isinstance(hi, int) else f"{hi:g}")
    return f"{left}{a}, {b}{right}"


def _in(x: float, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> bool:
    if not math.isfinite(x):
        return False
    if lo is not None and (x < lo or (lo_open and x == lo)):
        return False
    return not (hi is not None and (x > hi or (hi_open and x == hi)))


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           hi_open: bool = False, unit: str = "") -> Callable[[str], float]:
    """An argparse ``type`` for a finite float in a range.

    Parameters
    ----------
    lo, hi : float or None
        The bounds (None: unbounded on that side).
    lo_open, hi_open : bool
        Whether the bound itself is excluded.
    unit : str
        Shown after the range in the message (e.g. ``"s"``).

    Returns
    -------
    Callable[[str], float]
        Parses the text or raises ``argparse.ArgumentTypeError`` naming the range.
    """
    rng = _interval(lo, hi, lo_open, hi_open) + (f" {unit}" if unit else "")

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {rng}, got {text!r}") \
                from None
        if not _in(x, lo, hi, lo_open, hi_open):
            raise argparse.ArgumentTypeError(f"must be in {rng}, got {text}")
        return x
    return parse


def number_list(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                hi_open: bool = False, unit: str = "", example: str = "75,80,85"
                ) -> Callable[[str], list[float]]:
    """An argparse ``type`` for a comma (or space) separated list of numbers, each one as
    :func:`number` takes it: at least one, none twice (a value given twice would run, and
    write, the same thing twice).

    Parameters
    ----------
    lo, hi, lo_open, hi_open, unit
        The range of each value, as for :func:`number`.
    example : str
        A valid list, for the message about an empty one.

    Returns
    -------
    Callable[[str], list[float]]
        Parses the text or raises ``argparse.ArgumentTypeError``.
    """
    one = number(lo, hi, lo_open=lo_open, hi_open=hi_open, unit=unit)

    def parse(text: str) -> list[float]:
        parts = [x for x in text.replace(",", " ").split() if x]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected at least one number, e.g. {example}")
        values = [one(x) for x in parts]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise argparse.ArgumentTypeError(
                f"{', '.join(f'{v:g}' for v in twice)} given more than once; give each value "
                f"once, got {text!r}")
        return values
    return parse


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for an integer in ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : int or None
        The inclusive bounds (None: unbounded on that side).

    Returns
    -------
    Callable[[str], int]
        Parses the text or raises ``argparse.ArgumentTypeError`` naming the range.
    """
    rng = _interval(lo, hi, False, False)

    def parse(text: str) -> int:
        try:
            x = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number in {rng}, got {text!r}") \
                from None
        if not _in(float(x), lo, hi, False, False):
            raise argparse.ArgumentTypeError(f"must be in {rng}, got {text}")
        return x
    return parse


def name_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated list of names, each one of ``choices``,
    none twice (as :func:`number_list`: a name given twice would run the same thing twice).

    Returns
    -------
    Callable[[str], list[str]]
        Parses the text (blanks around the commas ignored) or raises
        ``argparse.ArgumentTypeError`` naming the choices.
    """
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if not names or any(n not in choices for n in names):
            raise argparse.ArgumentTypeError(
                f"a comma-separated list of {', '.join(choices)}; got {text!r}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise argparse.ArgumentTypeError(
                f"{', '.join(twice)} given more than once; give each name once, got {text!r}")
        return names
    return parse


#: The argparse type of every ``--seed``.
seed = integer(0, SEED_MAX)


def _name(flag: str | None, path: str | os.PathLike[str]) -> str:
    return f"{flag} {str(path)!r}" if flag else repr(str(path))


def _check_writable(target: Path, start: Path, flag: str | None) -> None:
    """Refuse ``target`` unless the nearest existing folder from ``start`` up is a folder
    in which a file can be created."""
    probe = start
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{_name(flag, target)}: {str(probe)!r} is not a folder")
    try:  # os.access says yes to root everywhere: try a file (removed at once)
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise UsageError(f"{_name(flag, target)}: {str(probe)!r} is not writable "
                         f"({exc.strerror or exc})") from None


def check_out_dir(path: str | os.PathLike[str], flag: str | None = "--out") -> Path:
    """Refuse an output folder that could not be created or written, before anything runs;
    nothing is created here (the writers create the folder when they write). An empty path
    is refused too: it would write into the current folder unasked ('.' says so).

    Parameters
    ----------
    path : str or os.PathLike
        The folder.
    flag : str or None
        The option's name, for the message (None: the message names the path only, as an
        argparse type's message, which argparse prefixes with the option).

    Returns
    -------
    Path
        ``path``.
    """
    if not str(path).strip():
        raise UsageError(f"{flag + ': ' if flag else ''}an empty path; give a folder "
                         f"('.' for the current one)")
    p = Path(path)
    _check_writable(p, p, flag)
    return p


def check_out_file(path: str | os.PathLike[str], flag: str | None = "--out") -> Path:
    """Refuse an output file that could not be written (an empty path, a folder, a place
    where no file can be created), before anything runs; nothing is created here.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    flag : str or None
        The option's name, for the message (see :func:`check_out_dir`).

    Returns
    -------
    Path
        ``path``.
    """
    if not str(path).strip():
        raise UsageError(f"{flag + ': ' if flag else ''}an empty path; give a file")
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{_name(flag, p)} is a folder; give a file")
    _check_writable(p, p.parent, flag)
    return p


def _as_type(check: Callable[..., Path]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            check(text, None)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return parse


#: The argparse type of an output folder (``--out`` of every command): :func:`check_out_dir`
#: when the flag is parsed.
out_dir = _as_type(check_out_dir)
#: The argparse type of an output file: :func:`check_out_file` when the flag is parsed.
out_file = _as_type(check_out_file)


def whole_periods(duration_s: float, period_s: float, min_periods: int = 1,
                  what: str = "") -> None:
    """Refuse a ``--duration`` that is not a whole number of ``--period`` periods (the run
    would silently be lengthened to the next whole period), or that is fewer than
    ``min_periods`` of them; the durations it suggests are ones it takes.

    Parameters
    ----------
    duration_s : float
        The run's length, s.
    period_s : float
        The control period, s.
    min_periods : int
        The fewest periods the run needs (>= 1).
    what : str
        What the duration is of, for the message (e.g. ``" with --plant cpu"``).

    Returns
    -------
    None
        It raises :class:`UsageError` or returns.
    """
    n = duration_s / period_s
    if n < 1 - 1e-9 and min_periods <= 1:
        raise UsageError(f"--duration {duration_s:g} s is shorter than one --period "
                         f"({period_s:g} s); it must be at least {period_s:g} s")
    if n < min_periods - 1e-9:
        raise UsageError(f"--duration {duration_s:g} s{what} is {n:.3g} periods of "
                         f"{period_s:g} s; it needs at least {min_periods} (--duration >= "
                         f"{min_periods * period_s:g} s, a whole number of periods)")
    if abs(n - round(n)) > 1e-6 * max(1.0, n):
        lo, hi = math.floor(n) * period_s, math.ceil(n) * period_s
        raise UsageError(f"--duration {duration_s:g} s is not a whole number of "
                         f"{period_s:g} s periods; use {lo:g} or {hi:g}")


def add_study_options(ap: argparse.ArgumentParser, *, period_s: float, measured: str,
                      measure: int = 3, batch: int = 105) -> None:
    """The ``--period``, ``--measure`` and ``--batch`` options of the hardware studies
    (``harness.hil.mps_study``, ``harness.hil.spatial_study``): the checks and help are
    shared, the defaults and what is measured per step are each study's.

    Parameters
    ----------
    ap : argparse.ArgumentParser
        The study's parser.
    period_s : float
        The default control period, s.
    measured : str
        The help of ``--measure``, before its range (``"periods measured per level"``).
    measure : int
        The default number of periods measured.
    batch : int
        The default inference batch.

    Returns
    -------
    None
        The options are added to ``ap``.
    """
    ap.add_argument("--period", type=number(0, 3600, lo_open=True, unit="s"), default=period_s,
                    help="control period, s in (0, 3600]")
    ap.add_argument("--measure", type=integer(1, 1000), default=measure,
                    help=f"{measured}, in [1, 1000]")
    ap.add_argument("--batch", type=integer(1, 4096), default=batch,
                    help="inference batch, in [1, 4096]")


def note_replaced(prog: str, outputs: dict[str, str | None]) -> None:
    """Say, before a run, which of its output files exist already: the run replaces them
    (atomically, when it completes; an interrupted run leaves them as they were). One
    ``PROG: note:`` line on stderr per such file.

    Parameters
    ----------
    prog : str
        The command's name, for the lines.
    outputs : dict of str to str or None
        Flag -> the file it names (None: not given).

    Returns
    -------
    None
        Nothing.
    """
    for flag, path in outputs.items():
        if path and Path(path).is_file():
            print(f"{prog}: note: {flag} {path!r} exists; this run replaces it when it "
                  f"completes", file=sys.stderr)


def warn(text: str) -> None:
    """One ``gpucontrol: note:`` line on stderr.

    Parameters
    ----------
    text : str
        The note.

    Returns
    -------
    None
        Nothing.
    """
    print(f"gpucontrol: note: {text}", file=sys.stderr)


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived (:func:`terminate_cleanly`). A ``BaseException``, like
    ``KeyboardInterrupt``: no ``except Exception`` swallows it, every ``finally`` runs.

    Parameters
    ----------
    signum : int
        The signal.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def signame(self) -> str:
        """The signal's name, e.g. ``"SIGTERM"``."""
        return signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """The conventional status of a command ended by the signal: 128 + its number."""
        return 128 + self.signum


def _ignore_further(signum: int, frame: Any) -> None:
    """A second SIGTERM while the first one's cleanup runs: let the cleanup finish (a Python
    handler, not ``SIG_IGN``, so processes started meanwhile keep the default action)."""


@contextlib.contextmanager
def terminate_cleanly(signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)
                      ) -> Iterator[None]:
    """Within the block, the first of ``signums`` raises :class:`Terminated` in the main
    thread and later ones are ignored until the block ends, so the cleanup it set off is not
    cut short. A signal ignored when the block starts (``nohup``) stays ignored. The handlers
    in force before are restored at the end. Outside the main thread it does nothing.

    A signal that lands inside a ``__del__`` or a weakref callback raises where Python cannot
    propagate the exception (it is printed as "Exception ignored" and dropped): the block
    then sends the signal again, so the run still stops, with a 128 + signal status, instead
    of finishing as if never signalled.

    Parameters
    ----------
    signums : tuple of int
        The signals to handle.

    Yields
    ------
    None
        Nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        for s in old:
            signal.signal(s, _ignore_further)
        raise Terminated(signum)

    def redeliver(unraisable: Any) -> None:
        # The exception was raised where Python cannot propagate one (a __del__, a weakref
        # callback: it prints "Exception ignored" and goes on), and later signals were
        # already being ignored: the run would finish as if never signalled (exit 0). Arm
        # the handler again and send the signal once more, from a thread a moment later, so
        # that it lands after this hook has returned.
        if not isinstance(unraisable.exc_value, Terminated):
            previous_hook(unraisable)
            return
        for s in old:
            signal.signal(s, handler)
        timer = threading.Timer(0.01, resend, (unraisable.exc_value.signum,))
        timer.daemon = True
        timer.start()

    def resend(signum: int) -> None:
        if active:  # not once the block has ended: the default action would kill the process
            os.kill(os.getpid(), signum)

    for s in signums:
        if signal.getsignal(s) is not signal.SIG_IGN:
            old[s] = signal.signal(s, handler)
    previous_hook, sys.unraisablehook = sys.unraisablehook, redeliver
    active = True
    try:
        yield
    finally:
        active = False
        sys.unraisablehook = previous_hook
        for s, h in old.items():
            signal.signal(s, h)


def run_script(main: Callable[[], object], prog: str) -> NoReturn:
    """Run a benchmark script's ``main`` the way ``gpucontrol`` runs a command: SIGTERM and
    SIGHUP unwind like Ctrl-C (:func:`terminate_cleanly`: every ``finally`` runs, so a
    process pool cancels its queued runs and its workers exit instead of being left behind,
    blocked for ever on a queue nobody feeds), and an interrupted run ends with one line and
    130 or 128 + the signal's number, no traceback. A reader that stops reading the output
    (``| head``) ends the run quietly with 141, as SIGPIPE would.

    Parameters
    ----------
    main : callable
        The script's ``main()``.
    prog : str
        The script's name, for the line.

    Returns
    -------
    NoReturn
        It exits: with the status ``main`` returns (an int; 0 for anything else).
    """
    try:
        with terminate_cleanly():
            rc = main()
            sys.stdout.flush()      # a closed pipe is met here, not at the exit's flush
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        # the reader went away (``| head``): stop quietly, with the status a shell shows for
        # a command SIGPIPE ended; stdout goes to devnull, so that the exit's flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    except Terminated as exc:
        print(f"{prog}: terminated by {exc.signame}; stopped what it had started",
              file=sys.stderr)
        sys.exit(exc.exit_status)
    sys.exit(rc if isinstance(rc, int) and not isinstance(rc, bool) else 0)


def pair(kind: type, lo: float | None = None, hi: float | None = None,
          increasing: bool = False) -> Callable[[str], tuple[Any, Any]]:
    """argparse type of 'A,B': two ``kind`` values in ``[lo, hi]`` (and ``A < B`` when
    ``increasing``)."""
    what = "whole numbers" if kind is int else "numbers"
    rng = f" in [{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}]"
    order = " with A < B" if increasing else ""

    def parse(text: str) -> tuple[Any, Any]:
        parts = [x for x in text.replace(",", " ").split() if x]
        if len(parts) != 2:
            raise argparse.ArgumentTypeError(f"expected two {what} 'A,B'{rng}{order}, "
                                             f"got {text!r}")
        try:
            a, b = kind(parts[0]), kind(parts[1])
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected two {what} 'A,B'{rng}{order}, "
                                             f"got {text!r}") from None
        for v in (a, b):
            if not math.isfinite(v) or (lo is not None and v < lo) or \
                    (hi is not None and v > hi):
                raise argparse.ArgumentTypeError(f"both values must be{rng}, got {text!r}")
        if increasing and not a < b:
            raise argparse.ArgumentTypeError(f"expected A < B, got {text!r}")
        return a, b
    return parse
