"""A pool of worker processes that ends with the run that started it.

``concurrent.futures.ProcessPoolExecutor`` waits, on the way out of its ``with`` block, for
the runs its workers have started (minutes, for a benchmark's plant); and a parent ended by a
signal meanwhile leaves them blocked for ever on a queue nobody feeds. The workers also
inherit the parent's signal handlers: under ``terminate_cleanly`` a worker took a SIGTERM for
a failed task and ignored the next ones. :func:`worker_pool` ends its workers at once when
its block ends by an exception (Ctrl-C, or the ``Terminated`` of a SIGTERM); they take the
default action of SIGTERM and SIGHUP and leave SIGINT, which a terminal sends to the whole
process group, to the parent. (``multiprocessing.Pool.terminate`` is no way out: a worker
killed while it waits for a task holds the queue's lock, and ``terminate`` waits for it.)
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

__all__ = ["worker_pool"]


def _worker_signals() -> None:
    """In each worker: SIGTERM and SIGHUP end it, SIGINT is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


@contextlib.contextmanager
def worker_pool(processes: int) -> Iterator[ProcessPoolExecutor]:
    """``with worker_pool(2) as ex: ex.map(fn, items)``: a process pool of ``processes``
    workers; a block that ends normally waits for them, one that ends by an exception cancels
    the queued runs and ends the workers (SIGTERM) before the exception goes on.

    Parameters
    ----------
    processes : int
        Workers, at least 1.

    Yields
    ------
    concurrent.futures.ProcessPoolExecutor
        The pool.
    """
    ex = ProcessPoolExecutor(max(1, int(processes)), initializer=_worker_signals)
    try:
        yield ex
    except BaseException:
        # the workers, before shutdown forgets them (Python 3.14 has terminate_workers())
        workers = list((ex._processes or {}).values())
        ex.shutdown(wait=False, cancel_futures=True)
        for w in workers:
            w.terminate()
        for w in workers:
            w.join()
        raise
    ex.shutdown(wait=True)
