"""Ctrl-C (SIGINT) and SIGTERM as one way out of a long command (`attend index`): an exception
in the main thread, so every `with` and `finally` on the way out runs.

Before (issue 32, findings 3 and 5): Ctrl-C mid-embedding printed a full Python traceback of
the model's forward pass, and SIGTERM's default action ended the process where it stood, so
the SQLite writer's lock file (DATABASE.index-lock, command_database.py) stayed behind.
Now both raise `Interrupted` wherever the main thread is (between two bytecodes: a call into
the model or the driver returns first), the open transaction rolls back, the lock file is
removed, a Ray session shuts down, and the command prints one line; the generation being built
stays building, so the same command resumes it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop by `signal_name`. A KeyboardInterrupt, so whatever treats
    Ctrl-C as "stop, do not record a failure" (the pipeline keeps the generation building)
    treats SIGTERM alike."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(self.signal_name)

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process its signal ended."""
        return 128 + self.signum


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise `Interrupted` once; a second while the way out runs is
    ignored, so the clean-up (a rollback, the lock file, Ray's shutdown) is not itself cut
    short. The handlers found are restored on the way out. Main thread only (Python's rule)."""
    raised = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
