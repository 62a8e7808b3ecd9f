"""Every exit status a ``sparkwarden`` command returns, with what it means: the one table the
code returns from and docs/operating.md shows (a test holds the two equal)."""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class Exit(IntEnum):
    OK = 0
    #: something needs a person, or the command's own work failed
    FAILED = 1
    #: the command line, the config or a secret is wrong: nothing was touched
    USAGE = 2
    #: ``status``: the daemon is not running, and its last snapshot was sound
    NO_DAEMON = 3
    #: Ctrl-C on a foreground ``restart`` that the daemon runs: only the view ended
    INTERRUPTED = 130
    #: the reader of the output quit (``| head -1``): a shell's 128 + SIGPIPE
    READER_GONE = 141


#: What each means to an operator, as docs/operating.md's table says it.
MEANINGS: Final[dict[Exit, str]] = {
    Exit.OK: "all is well: the command did its work; status: nothing needs you",
    Exit.FAILED: (
        "something needs you: a run failed; status: gave up, reboot required, the LLM down, "
        "the users' gateway failing, a cluster node's problem, or no snapshot at all; doctor: "
        "an error found; notify --test: a target failed, or none is configured; cluster status: "
        "not serving; cluster preflight: a problem found"
    ),
    Exit.USAGE: "the command line, the config or a secret is wrong: nothing was touched",
    Exit.NO_DAEMON: "status: the daemon is down, and its last snapshot (shown) was sound",
    Exit.INTERRUPTED: "Ctrl-C on a restart the daemon runs: your view ended, its run goes on",
    Exit.READER_GONE: "the output's reader quit (a pipe to head -1): the command ended quietly",
}
