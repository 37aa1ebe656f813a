"""Where ``decisions`` writes cannot take it: a full device (``>/dev/full``, a full disk) or a
pipe whose reader is gone (``| head -1`` done reading).

``worker.cli.main`` flushes standard output itself, so that such a failure reaches its
handler (one line, as other command-line tools say it: "decisions: write error: No space
left on device"; nothing for a closed pipe) instead of the interpreter's own flush at exit,
which prints "Exception ignored ..." and exits 120. What could not be written is then
dropped, so that the interpreter does not try it again.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import sys

__all__ = ["discard_unwritten", "flush_stdout", "stdout_reader_gone"]


def flush_stdout() -> None:
    """Write out what standard output holds; an ``OSError`` if it cannot take it."""
    stream = sys.stdout
    if stream is not None:
        stream.flush()


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader closed it: a write to it fails with
    ``BrokenPipeError``, which is then no error of the command's (a socket's would be)."""
    poll = getattr(select, "poll", None)
    stream = sys.__stdout__
    if poll is None or stream is None:
        return False
    try:
        poller = poll()
        poller.register(stream.fileno(), select.POLLOUT)
        # A pipe with no reader left reports an error condition on its writing end.
        return any(event & select.POLLERR for _fd, event in poller.poll(0))
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


def discard_unwritten() -> None:
    """Drop what standard output could not take: it goes to the null device from here on."""
    try:
        flush_stdout()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, sys.stdout.fileno())
            finally:
                os.close(null)
