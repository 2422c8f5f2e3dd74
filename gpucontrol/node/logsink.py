"""Non-blocking output for the daemon: the control loop never waits on its log.

A daemon's standard output may be a pipe nobody reads (a container runtime that stalled, a
``| less`` left open, a journald that is rate-limiting); a plain ``write`` then blocks the
control loop, and with it the handling of SIGTERM. :class:`LogSink` puts each line on a
bounded queue that one writer thread drains; when the queue is full the line is dropped and
counted (:attr:`LogSink.dropped`), so the loop never blocks. :meth:`LogSink.close` waits a
bounded time for the writer to finish and then gives up on whatever is still queued.

The writer writes to the stream's file descriptor with ``os.write`` (not through the
``TextIO`` buffer), so nothing is left in ``sys.stdout``'s buffer for the interpreter to
flush -- and block on -- at exit.

:func:`open_log` opens the ``--log`` file for appending without following a symbolic link,
created mode 0600 (less if the umask says so), and refuses a file that is not a regular file
owned by us or that others may write.

Examples
--------
>>> import io
>>> buf = io.StringIO()
>>> with LogSink(buf) as sink:
...     sink.write_line('{"event": "started"}\\n')
True
>>> buf.getvalue()
'{"event": "started"}\\n'
"""

from __future__ import annotations

import io
import os
import queue
import stat
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

__all__ = ["LogSink", "open_log"]

_STOP = object()


class LogSink:
    """A line writer whose :meth:`write_line` never blocks.

    Parameters
    ----------
    stream : TextIO or int
        Where lines go: a text stream (its file descriptor is written directly when it has
        one) or a file descriptor.
    max_lines : int
        Lines that may wait for the writer; beyond that new lines are dropped and counted.
    """

    def __init__(self, stream: TextIO | int, max_lines: int = 10_000) -> None:
        if int(max_lines) < 1:
            raise ValueError(f"max_lines must be >= 1, got {max_lines!r}")
        self._fd = -1
        self._stream: TextIO | None = None
        if isinstance(stream, int):
            self._fd = stream
        else:
            try:
                self._fd = stream.fileno()
                stream.flush()  # whatever was written through the buffer goes first
            except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
                self._fd = -1
                self._stream = stream
        self._q: queue.Queue[object] = queue.Queue(int(max_lines))
        self.dropped = 0
        self.failed = 0
        self._closed = False
        self._thread = threading.Thread(target=self._drain, name="gpucontrol-log", daemon=True)
        self._thread.start()

    def write_line(self, line: str) -> bool:
        """Queue one line (with its newline) for the writer; never blocks.

        Parameters
        ----------
        line : str
            The text to write.

        Returns
        -------
        bool
            True when queued; False when the queue was full or the sink closed (the line is
            dropped and counted in :attr:`dropped`).
        """
        if self._closed:
            self.dropped += 1
            return False
        try:
            self._q.put_nowait(line)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    @property
    def pending(self) -> int:
        """Lines queued and not yet written."""
        return self._q.qsize()

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait up to ``timeout`` s until every queued line is written (the sink stays open).

        Parameters
        ----------
        timeout : float
            Seconds to wait at most.

        Returns
        -------
        bool
            True when nothing is left to write.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        while self._q.unfinished_tasks and self._thread.is_alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    def _write(self, data: str) -> None:
        if self._stream is not None:
            self._stream.write(data)
            self._stream.flush()
            return
        view = memoryview(data.encode("utf-8", "replace"))
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def _drain(self) -> None:
        while True:
            item = self._q.get()
            if item is _STOP:
                self._q.task_done()
                return
            parts = [str(item)]
            stop = False
            # batch whatever else is waiting into one write
            while len(parts) < 256:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                parts.append(str(nxt))
            self._write_quietly("".join(parts))
            for _ in range(len(parts) + stop):
                self._q.task_done()
            if stop:
                return

    def _write_quietly(self, data: str) -> None:
        try:
            self._write(data)
        except (OSError, ValueError):
            self.failed += data.count("\n")

    def close(self, timeout: float = 1.0) -> bool:
        """Stop accepting lines and wait up to ``timeout`` s for the queued ones to be written.

        Parameters
        ----------
        timeout : float
            Seconds to wait for the writer (a stalled reader cannot hold the exit longer).

        Returns
        -------
        bool
            True when everything was written; False when the writer was still blocked (the
            rest is abandoned with the writer thread).
        """
        if not self._closed:
            self._closed = True
            try:
                self._q.put(_STOP, timeout=max(timeout, 0.0))
            except queue.Full:
                return False
        self._thread.join(max(timeout, 0.0))
        return not self._thread.is_alive()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_log(path: str | os.PathLike[str]) -> TextIO:
    """Open the ``--log`` file for appending, safely.

    The last path component is never followed if it is a symbolic link (``O_NOFOLLOW``); a
    new file is created mode 0600 (the umask may remove more); an existing one must be a
    regular file owned by us that neither group nor others may write. A FIFO or device there
    is refused without blocking (``O_NONBLOCK`` at open).

    Parameters
    ----------
    path : str or os.PathLike
        The log file.

    Returns
    -------
    TextIO
        A line-buffered text stream appending to it.

    Raises
    ------
    ValueError
        The path is a link, not a regular file, not ours, or writable by others; or it cannot
        be opened (the message says why).
    """
    p = os.fspath(path)
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
             | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        fd = os.open(p, flags, 0o600)
    except OSError as exc:
        if os.path.islink(p):
            raise ValueError(f"--log {p} is a symbolic link; refusing to follow it") from None
        raise ValueError(f"--log {p}: cannot open ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"--log {p} is not a regular file")
        if st.st_uid != os.geteuid():
            raise ValueError(f"--log {p} is owned by uid {st.st_uid}, not by us "
                             f"(uid {os.geteuid()})")
        if st.st_mode & 0o022:
            raise ValueError(f"--log {p} is writable by group or others (mode "
                             f"{stat.S_IMODE(st.st_mode):o})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "a", encoding="utf-8", buffering=1, closefd=True)
