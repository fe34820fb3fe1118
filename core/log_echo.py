"""Echo a job's output to this terminal while a client waits for it (`result(stream_logs=True)`, a blocking
`@run` call): the job's own lines always, the runner's progress lines only with KINETIC_VERBOSE=1.

It runs in the waiting thread, between polls, so it adds no thread start or join to the round trip.
"""

from __future__ import annotations

import os
import re
import sys

from kinetic_tui.core.backends.base import LogReader

# the runner's own progress lines, bare or with the `[host N] ` prefix a multi-host slice's log gives them
RUNNER_LINE = re.compile(r"(?:\[host \d+\] )?\[kinetic\] ")


class LogEcho:
    def __init__(self, reader: LogReader) -> None:
        self.reader = reader
        self.verbose = os.environ.get("KINETIC_VERBOSE", "") not in ("", "0")

    def pump(self, final: bool = False) -> None:
        batch = self.reader.read() + (self.reader.rest() if final else [])
        lines = [line for line in batch if self.verbose or not RUNNER_LINE.match(line)]
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()
