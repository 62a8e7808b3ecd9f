"""The signal dispositions of a command typed at a terminal, whatever the suite started with.

A suite started as a background job of a script (``pytest ... &``), under ``nohup ... &`` or by
some CI runners has SIGINT and SIGQUIT (or SIGHUP) ignored, and an ignored signal stays ignored
across fork and exec: a test that sends a process a terminal's signal sets the disposition that
process starts with itself, never relying on the one the suite inherited.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

#: The signals a terminal (and an operator's ``kill``) sends.
TERMINAL = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGTSTP)

#: A command's prefix: what it runs starts with the terminal's signals at their defaults, as a
#: shell on a terminal starts a command (coreutils' ``env``, so no ``preexec_fn`` in a process
#: that has threads).
AS_TYPED = ["env", "--default-signal=" + ",".join(s.name.removeprefix("SIG") for s in TERMINAL)]


@contextlib.contextmanager
def as_at_a_terminal() -> Iterator[None]:
    """In this process, for the block: SIGINT raises KeyboardInterrupt and the others have their
    defaults, as in a Python started at a terminal; what was there before is put back."""
    before = {signum: signal.getsignal(signum) for signum in TERMINAL}
    try:
        for signum in TERMINAL:
            handler = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, handler)
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
