"""A log's tail is read backward from its end: the exact last N lines of a job's own log, of a multi-host
job's host logs and of a map input's range of its lane's log, while what it reads stays a few blocks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kinetic_tui as kinetic
from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.base import skipped_before
from kinetic_tui.core.backends.local import launcher, log_readers
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.jobs import JobHandle
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project

TIMEOUT = 60.0


class CountingFile(io.BytesIO):
    """An in-memory file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data)
        return data


def _tail(data: bytes, n: int, start: int = 0, end: int | None = None) -> list[str]:
    return log_readers.last_lines(io.BytesIO(data), n, start, len(data) if end is None else end)


LOG = b"".join(f"line {i}\n".encode() for i in range(10))
EVERY = [f"line {i}" for i in range(10)]


@pytest.mark.parametrize("n", [0, 1, 3, 9, 10, 11, 1000])
@pytest.mark.parametrize("block", [1, 7, 64 * 1024])
def test_the_last_n_lines_whether_n_is_smaller_equal_or_larger_than_the_log(
    n: int, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_readers, "BLOCK", block)
    assert _tail(LOG, n) == (EVERY[-n:] if n else [])
    assert _tail(LOG.rstrip(b"\n"), n) == (EVERY[-n:] if n else [])  # no trailing newline: same lines


def test_an_unterminated_last_line_empty_lines_and_an_empty_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_readers, "BLOCK", 3)
    assert _tail(b"a\nb\npartial", 2) == ["b", "partial"]
    assert _tail(b"a\n\n\nb\n", 3) == ["", "", "b"]
    assert _tail(b"\n", 5) == [""]
    assert _tail(b"", 5) == []
    assert _tail("é\nünïcode\n".encode(), 1) == ["ünïcode"]  # a block boundary inside a character


def test_a_line_longer_than_the_block_comes_back_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_readers, "BLOCK", 16)
    huge = "x" * 1000
    assert _tail(f"first\n{huge}\nlast\n".encode(), 2) == [huge, "last"]
    assert _tail(f"first\n{huge}".encode(), 1) == [huge]
    assert _tail(huge.encode(), 3) == [huge]


def test_a_range_of_the_file_yields_only_its_own_lines() -> None:
    data = b"before\nmine 1\nmine 2\nafter\n"
    start, end = data.index(b"mine"), data.index(b"after")
    assert _tail(data, 5, start, end) == ["mine 1", "mine 2"]
    assert _tail(data, 1, start, end) == ["mine 2"]
    assert _tail(data, 5, start, start) == []


def test_the_tail_of_a_large_log_reads_a_few_blocks_not_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_readers, "BLOCK", 4096)
    data = b"".join(f"step {i} loss 0.{i:06d}\n".encode() for i in range(200_000))  # ~5 MB
    fh = CountingFile(data)
    assert log_readers.last_lines(fh, 5, 0, len(data)) == [f"step {i} loss 0.{i:06d}" for i in range(199_995, 200_000)]
    assert fh.read_bytes <= 2 * 4096 + 1  # the last byte, then one block holds the five lines


# -- through the API, the console and the CLI, on real jobs ------------------------------------------------


def _counting_open(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the log readers' `open` count the bytes read; returns the running total (one cell)."""
    total = [0]

    class Counted(io.FileIO):
        def read(self, size: int = -1, /) -> bytes:
            data = super().read(size) or b""
            total[0] += len(data)
            return data

    def counted_open(path: Any, mode: str = "r") -> Any:
        assert mode == "rb"
        return io.BufferedReader(Counted(path), buffer_size=1)

    monkeypatch.setattr(log_readers, "open", counted_open, raising=False)
    return total


def _host_log(handle: JobHandle, host: int = 0) -> Path:
    return launcher.log_path(local_backend().job(handle.job_id).job_dir, host)


def test_tail_of_a_finished_job_matches_its_log_for_every_n(jobs: Any) -> None:
    handle = kinetic.run()(jobs.count_lines).run_async(30)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 30
    every = list(handle.log_lines())
    for n in (1, 5, len(every) - 1, len(every), len(every) + 50):
        assert handle.tail_lines(n) == every[-n:]
    with open(_host_log(handle), "a") as fh:
        fh.write("killed mid-li")  # a job killed mid-line leaves its last line unterminated
    assert handle.tail_lines(2) == [every[-1], "killed mid-li"] == list(handle.log_lines())[-2:]


def test_tail_of_a_huge_finished_log_reads_a_few_blocks(jobs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = kinetic.run()(jobs.count_lines).run_async(3)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 3
    with open(_host_log(handle), "a") as fh:
        fh.writelines(f"step {i}\n" for i in range(300_000))  # ~3.5 MB
    read = _counting_open(monkeypatch)
    assert handle.tail_lines(5) == [f"step {i}" for i in range(299_995, 300_000)]
    assert read[0] <= 2 * log_readers.BLOCK + 1


def test_tail_of_a_multi_host_job_takes_the_last_hosts_lines_first(jobs: Any) -> None:
    local_backend().add_pool("slice", "v4-2x2x2", 2)
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.fail_on_worker).run_async("none")
    assert handle.result(timeout=TIMEOUT, cleanup=False)["worker"] == "0"
    every = list(handle.log_lines())
    host1 = [line for line in every if line.startswith("[host 1] ")]
    assert every[-len(host1) :] == host1 and len(host1) < len(every)  # host 0's lines, then host 1's
    for n in (1, len(host1), len(host1) + 2, len(every), len(every) + 10):
        assert handle.tail_lines(n) == every[-n:]
    assert handle.tail_lines(len(host1) + 1)[0].startswith("[host 0] ")


def test_tail_of_a_lane_input_is_the_end_of_its_own_range(jobs: Any) -> None:
    batch = kinetic.run()(jobs.count_lines).map([4, 6, 5])
    assert batch.results(timeout=TIMEOUT) == [4, 6, 5]
    for handle, count in zip(batch.handles(), (4, 6, 5)):
        assert local_backend().job(handle.job_id).in_lane
        every = list(handle.log_lines())
        assert [line for line in every if line.startswith("line ")] == [f"line {i}" for i in range(count)]
        for n in (1, 3, len(every), len(every) + 20):
            assert handle.tail_lines(n) == every[-n:]


def test_the_cli_and_the_console_tail_read_from_the_end(jobs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = kinetic.run()(jobs.count_lines).run_async(3)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 3
    with open(_host_log(handle), "a") as fh:
        fh.writelines(f"step {i}\n" for i in range(300_000))
    read = _counting_open(monkeypatch)
    out = CliRunner().invoke(main, ["logs", handle.job_id, "--tail", "2", "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["result"]["lines"] == ["step 299998", "step 299999"]
    assert read[0] <= 2 * log_readers.BLOCK + 1


def test_a_big_finished_log_is_read_in_bounded_batches_in_order(jobs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kinetic_tui.core.backends.local.backend.LOG_CHUNK", 4096)
    handle = kinetic.run()(jobs.count_lines).run_async(3_000)
    assert handle.result(timeout=TIMEOUT) == 3_000
    batches = list(local_backend().read_logs(handle.job_id))
    biggest = max(sum(len(line) + 1 for line in batch) for batch in batches)
    assert len(batches) > 5 and biggest <= 4096 + 64  # a chunk, plus the line the previous one cut
    lines = [line for batch in batches for line in batch]
    assert [line for line in lines if line.startswith("line ")] == [f"line {i}" for i in range(3_000)]


# -- skipping ahead: a reader that shows only the newest lines counts the older ones -----------------------


def _log_file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "host-0.log"
    path.write_bytes(data)
    return path


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.text(alphabet="ab\u00e9", max_size=6), max_size=40),
    unterminated=st.text(alphabet="xy", max_size=3),
    keep=st.integers(1, 45),
    already=st.integers(0, 60),
    block=st.sampled_from([1, 5, 64]),
)
def test_skip_leaves_exactly_the_newest_lines_and_counts_the_rest(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    unterminated: str,
    keep: int,
    already: int,
    block: int,
) -> None:
    """Whatever was read before, `skip` then `read` + `rest` gives the last `keep` whole lines (and the line
    being written), and skipped + read is every line."""
    data = "".join(line + "\n" for line in lines).encode() + unterminated.encode()
    reader = log_readers.LogReader([_log_file(tmp_path_factory.mktemp("log"), data)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(log_readers, "SKIP_FROM", 0)
        patch.setattr(log_readers, "BLOCK", block)
        first = reader.read_some(already)  # a partial line may be held from here
        skipped = reader.skip(keep)
        after = reader.read() + reader.rest()
    every = lines + ([unterminated] if unterminated else [])
    assert first + [None] * skipped + after == [*every[: len(first)], *[None] * skipped, *every[len(first) + skipped :]]
    assert len(first) + skipped + len(after) == len(every)
    whole_after = len(after) - bool(unterminated)
    assert whole_after == min(keep, len(lines) - len(first)) or skipped == 0


def test_skip_waits_until_enough_is_unread(tmp_path: Path) -> None:
    """Below SKIP_FROM unread bytes reading is as cheap as counting, so nothing is skipped."""
    reader = log_readers.LogReader([_log_file(tmp_path, b"".join(f"l{i}\n".encode() for i in range(1000)))])
    assert reader.skip(10) == 0
    assert len(reader.read()) == 1000


def test_count_lines_reads_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_readers, "COUNT_BLOCK", 7)
    data = b"a\nbb\n\nccc\nd"
    assert log_readers.count_lines(io.BytesIO(data), 0, len(data)) == 4
    assert log_readers.count_lines(io.BytesIO(data), 2, 6) == 2


def test_read_logs_with_keep_skips_a_huge_finished_log_and_counts_it(
    jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = kinetic.run()(jobs.count_lines).run_async(3)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 3
    every = list(handle.log_lines())
    with open(_host_log(handle), "a") as fh:
        fh.writelines(f"step {i}\n" for i in range(300_000))  # ~3.5 MB, past SKIP_FROM
        fh.write("cut mid-li")
    read = _counting_open(monkeypatch)
    batches = list(local_backend().read_logs(handle.job_id, keep=100))
    lines = [line for batch in batches for line in batch]
    assert lines == [f"step {i}" for i in range(299_900, 300_000)] + ["cut mid-li"]
    assert sum(skipped_before(batch) for batch in batches) == len(every) + 299_900
    # counting reads the skipped bytes once, unlike decoding them into lines; the kept lines are read once more
    assert read[0] <= _host_log(handle).stat().st_size + 2 * log_readers.BLOCK + 4096


def test_read_logs_with_keep_skips_within_a_lane_inputs_own_range(jobs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_readers, "SKIP_FROM", 0)
    batch = kinetic.run()(jobs.count_lines).map([40, 60, 50])
    assert batch.results(timeout=TIMEOUT) == [40, 60, 50]
    for handle in batch.handles():
        every = list(handle.log_lines())
        read = list(local_backend().read_logs(handle.job_id, keep=5))
        assert [line for part in read for line in part] == every[-5:]
        assert sum(skipped_before(part) for part in read) == len(every) - 5


def test_read_logs_with_keep_on_a_multi_host_job_keeps_each_hosts_newest(
    jobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_readers, "SKIP_FROM", 0)
    local_backend().add_pool("slice", "v4-2x2x2", 2)
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.fail_on_worker).run_async("none")
    assert handle.result(timeout=TIMEOUT, cleanup=False)["worker"] == "0"
    every = list(handle.log_lines())
    read = list(local_backend().read_logs(handle.job_id, keep=1))
    kept = [line for part in read for line in part]
    assert kept == [[line for line in every if not line.startswith("[host 1]")][-1], every[-1]]
    assert sum(skipped_before(part) for part in read) + len(kept) == len(every)
