"""Readers of local job logs: a job's own host logs, or a map input's range of its lane's log; read forward
incrementally, or backward from the end for a tail."""

from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import BinaryIO, Protocol

from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.backends.local.job_rows import JobRow
from kinetic_tui.core.store import Store

BLOCK = 8 * 1024  # bytes read per step backward from a log's end: a few screens of lines
UTF8 = codecs.getincrementaldecoder("utf-8")  # a chunk may end inside a character: it waits for the rest
COUNT_BLOCK = 1 << 20  # bytes per step while counting the lines a reader skips
SKIP_FROM = 1 << 20  # unread bytes past which `skip` counts instead of reading: below it, reading is as cheap


def tail_start(fh: BinaryIO, n: int, start: int, end: int) -> int:
    """Where the last `n` lines of the file's bytes [start, end) begin, an unterminated last line counted.

    Reads backward in blocks until `n` line breaks precede the range's last line, so what it reads
    grows with the lines wanted, never with the file."""
    if n <= 0 or end <= start:
        return end
    pos, breaks = end, 0
    fh.seek(end - 1)
    wanted = n + (fh.read(1) == b"\n")  # a terminated last line: its own break does not count
    while pos > start:
        size = min(BLOCK, pos - start)
        pos -= size
        fh.seek(pos)
        block = fh.read(size)
        found = block.count(b"\n")
        if breaks + found >= wanted:
            at = size
            for _ in range(wanted - breaks):
                at = block.rindex(b"\n", 0, at)
            return pos + at + 1
        breaks += found
    return start


def last_lines(fh: BinaryIO, n: int, start: int, end: int) -> list[str]:
    """The last `n` lines of the file's bytes [start, end), an unterminated last line included."""
    if n <= 0 or end <= start:
        return []
    begin = tail_start(fh, n, start, end)
    fh.seek(begin)
    lines = fh.read(end - begin).split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line.decode("utf-8", "replace") for line in lines]


def count_lines(fh: BinaryIO, start: int, end: int) -> int:
    """Line breaks in the file's bytes [start, end), counted a block at a time without decoding."""
    fh.seek(start)
    breaks = 0
    while start < end:
        block = fh.read(min(COUNT_BLOCK, end - start))
        if not block:
            break
        breaks += block.count(b"\n")
        start += len(block)
    return breaks


class LogReader:
    """Reader of one job's host logs: forward, only whole lines, each file from where it stopped; or its tail."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.starts = [0] * len(paths)  # where each file's range begins
        self.offsets = [0] * len(paths)
        self.partial = [""] * len(paths)
        self.decoders = [UTF8("replace") for _ in paths]
        self.ends: list[int | None] = [None] * len(paths)  # stop reading a file there (None: its end)
        self.behind = False  # the last `read_some` stopped at its limit in some file

    def _prefix(self, host: int) -> str:
        return f"[host {host}] " if len(self.paths) > 1 else ""

    def read(self) -> list[str]:
        return self.read_some(None)

    def read_some(self, limit: int | None) -> list[str]:
        """Like `read`, but at most `limit` bytes of each file (None: no limit); `behind` then says whether
        a file had more. A reader that hands batches on reads a big log in steps, so no batch holds it all."""
        batch: list[str] = []
        self.behind = False
        for i, path in enumerate(self.paths):
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets[i])
                    end = self.ends[i]
                    size = -1 if end is None else max(end - self.offsets[i], 0)
                    if limit is not None and (size < 0 or size > limit):
                        size = limit
                    chunk = fh.read(size)
            except FileNotFoundError:
                continue
            self.behind = self.behind or len(chunk) == limit
            self.offsets[i] += len(chunk)
            lines = (self.partial[i] + self.decoders[i].decode(chunk)).split("\n")
            self.partial[i] = lines.pop()
            prefix = self._prefix(i)
            batch.extend((prefix + line for line in lines) if prefix else lines)
        return batch

    def skip(self, keep: int) -> int:
        """Jump each file ahead to its last `keep` whole lines written so far, when more than that is
        unread; returns how many lines were passed over (counted, not decoded). A reader whose caller shows
        only the newest lines thus reads a long finished log in time that grows with `keep`, not the log."""
        skipped = 0
        for i, path in enumerate(self.paths):
            try:
                with open(path, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    bound = self.ends[i]
                    end = size if bound is None else min(bound, size)
                    if end - self.offsets[i] <= SKIP_FROM:
                        continue
                    fh.seek(end - 1)
                    unterminated = fh.read(1) != b"\n"  # the line being written: kept beside `keep` whole ones
                    begin = tail_start(fh, keep + unterminated, self.offsets[i], end)
                    if begin <= self.offsets[i]:
                        continue
                    skipped += count_lines(fh, self.offsets[i], begin)
            except FileNotFoundError:
                continue
            self.offsets[i], self.partial[i], self.decoders[i] = begin, "", UTF8("replace")
        return skipped

    def rest(self) -> list[str]:
        """The unterminated last line of each file (a job killed mid-line)."""
        ends = [text + decoder.decode(b"", final=True) for text, decoder in zip(self.partial, self.decoders)]
        rest = [self._prefix(i) + text for i, text in enumerate(ends) if text]
        self.partial = [""] * len(self.paths)
        return rest

    def tail(self, n: int) -> list[str]:
        """The last `n` lines of the files' ranges taken in host order, whatever `read` consumed."""
        lines: list[str] = []
        for i in reversed(range(len(self.paths))):
            if len(lines) >= n:
                break
            try:
                with open(self.paths[i], "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    end = self.ends[i]
                    found = last_lines(fh, n - len(lines), self.starts[i], size if end is None else min(end, size))
            except FileNotFoundError:
                continue
            lines[:0] = [self._prefix(i) + line for line in found]
        return lines


class LaneObserver(Protocol):
    """What a lane input's reader needs of the backend: its row, and applying its lane's progress."""

    store: Store

    def job(self, job_id: str) -> JobRow: ...

    def observe_lanes(
        self, open_lanes: list[lanes.Lane], pools: set[str | None] | None = None, patient: bool = True
    ) -> list[str]: ...


class LaneLogReader(LogReader):
    """A map input's range of its lane's log, found once the lane has reached the input.

    While the input runs its end is unknown, so each read stops at the file's size taken *before* the
    lane's progress is applied: the lane writes an input's `end` line before the next input prints
    anything, so bytes written before that size belong to this input unless the `end` applied after it
    says where the input stopped."""

    def __init__(self, backend: LaneObserver, job_id: str) -> None:
        super().__init__([])
        self.backend, self.job_id = backend, job_id
        self.final = False

    def read_some(self, limit: int | None) -> list[str]:
        return super().read_some(limit) if self._bounded() else []

    def tail(self, n: int) -> list[str]:
        return super().tail(n) if self._bounded() else []

    def skip(self, keep: int) -> int:
        return super().skip(keep) if self._bounded() else 0

    def _bounded(self) -> bool:
        """Locate the input's range and bound its end by what the lane has written for it (False: no range yet)."""
        if not self.final:
            if not self.paths and not self._locate():
                return False
            size = self.paths[0].stat().st_size
            row = self._observed()
            self.final = row.log_end is not None or row.status.finished
            self.ends = [row.log_end if self.final else size]
        return True

    def _observed(self) -> JobRow:
        """The input's row after applying its lane's progress."""
        row = self.backend.job(self.job_id)
        lane = lanes.get(self.backend.store, row.lane) if row.lane else None
        if lane is not None and lane.ended_at is None:
            self.backend.observe_lanes([lane], patient=False)
            row = self.backend.job(self.job_id)
        return row

    def _locate(self) -> bool:
        row = self._observed()
        lane = lanes.get(self.backend.store, row.lane) if row.lane else None
        if lane is None or row.log_start is None:
            return False
        self.paths, self.partial, self.decoders = [launcher.log_path(lane.dir, 0)], [""], [UTF8("replace")]
        self.starts, self.offsets = [row.log_start], [row.log_start]
        return True
