"""`--script`: every verb against golden JSON, exit codes 0/1/2, stop-on-failure and --keep-going."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest

from kinetic_tui.core.backends.local import pools
from kinetic_tui.core.commands.execute import float_text, render_text
from kinetic_tui.core.commands.verbs import VERBS
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.script import read_script, run_script
from tests.test_console_support import (
    NO_RUNS,
    json_lines,
    normalise,
    seed_registry,
    state_dump,
    user_project,
)

GOLDEN = Path(__file__).parent / "golden" / "script_every_verb.jsonl"

# Every verb at least once; failures on purpose are marked, the rest must succeed.
EVERY_VERB = """\
# pools and jobs (the cpu pool is re-made so its size does not depend on this machine's cores)
pool remove cpu
pool add cpu --accelerator cpu --nodes 4
pools
pool add gpus --accelerator l4x2 --nodes 2 --spot
pool remove gpus
submit console_user:add --args [2,3] --name adder
status {job1}
wait {job1} --timeout 30
result {job1}
logs {job1} --tail 2
submit console_user:boom --name kaboom --wait
result {job2}
submit console_user:sleepy --args [30] --detach
cancel {job3}
jobs --status CANCELLED
submit console_user:add --args [1,1] --save pair
submit pair --args [4,4]
functions
# training, tuning, registry
train base --hp learning_rate=0.2 --epochs 4 --checkpoint-every 2 --interrupt-before-epoch 3
interrupt base
resume base
tune sweep --space learning_rate=0.1,0.3 --strategy grid --max-trials 2 --seed 1
register fraud --from-training base
register fraud --from-training sweep.trial-2
promote fraud 1 Staging
promote fraud 1 Production
promote fraud 2 Staging
promote fraud 2 Production --no-archive-existing
promote fraud 2 Production
models
models fraud
# endpoints
endpoint create scorer --model fraud --min 1 --max 4 --target 10 --max-loaded-models 1 --tick-seconds 0
observe scorer 45
observe scorer 5
observe scorer 5 --tick 9
scale scorer --max 3
invoke scorer fraud '{"amount": 12}'
invoke scorer fraud:v1 '{"amount": 12}'
load scorer --concurrency 0 --ticks 2
endpoint stop scorer
endpoint logs scorer --tail 0
endpoint start scorer
endpoint stop scorer
endpoints
# pipelines
pipeline register console_user:tiny
pipeline run tiny
rerun tiny
rerun tiny --param x=6
pipeline resume tiny --run 2
pipeline cancel tiny
artifacts prune
pipelines
# show and help
show job {job1}
show training base
show study sweep
show model fraud
show model fraud:v2
show endpoint scorer
show pipeline tiny
show pool cpu
help
help promote
"""
# a failed job's result, a Stopped run, an incumbent, cancelling a finished run
EXPECTED_FAILURES = ["result", "interrupt", "promote", "pipeline"]


def _run(text: str, **kwargs: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_script(text, stdout=out, stderr=err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def _placeholders(line: str) -> list[str]:
    return re.findall(r"\{(job[0-9])\}", line)


def _run_in_chunks(script: str) -> list[dict]:
    """Later lines name job ids that exist only once earlier lines ran, so the script runs in chunks that
    end where an unknown id is needed; line numbers stay those of the whole script."""
    records: list[dict] = []
    jobs: dict[str, str] = {}
    lines, start = script.splitlines(), 0
    while start < len(lines):
        end = start
        while end < len(lines) and all(name in jobs for name in _placeholders(lines[end])):
            end += 1
        assert end > start, f"no job id yet for {lines[start]!r}"
        chunk = []
        for line in lines[start:end]:
            for name in _placeholders(line):
                line = line.replace(f"{{{name}}}", jobs[name])
            chunk.append(line)
        _, out, _ = _run("\n".join(chunk), output="json", keep_going=True)
        for record in json_lines(out):
            record["line"] += start
            if record["command"].startswith("submit") and record["ok"]:
                jobs[f"job{len(jobs) + 1}"] = record["result"]["job_id"]
            records.append(record)
        start = end
    return records


@pytest.mark.usefixtures("user_project")
def test_every_verb_matches_the_golden_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pools, "host_cores", lambda: 2)  # as recorded; tests/test_core_counts.py covers others
    records = _run_in_chunks(EVERY_VERB)
    ran = {" ".join(record["command"].split()[:2]) for record in records} | {
        record["command"].split()[0] for record in records
    }
    assert VERBS.keys() <= ran
    failed = [record["command"].split()[0] for record in records if not record["ok"]]
    assert failed == EXPECTED_FAILURES, failed
    normalised = normalise(records, os.environ["KINETIC_HOME"])
    text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in normalised)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_every_verb_declares_its_console_call() -> None:
    assert all(callable(verb.run) for verb in VERBS.values())


def test_exit_zero_and_one_json_object_per_command() -> None:
    code, out, err = _run("pools\n\n# a comment\nhelp pools\n", output="json")
    assert code == 0 and err == ""
    records = json_lines(out)
    assert [(r["line"], r["command"], r["ok"]) for r in records] == [(1, "pools", True), (4, "help pools", True)]
    assert records[0]["result"][0]["name"] == "cpu"


def test_a_parse_error_runs_nothing_and_exits_two() -> None:
    before = state_dump()
    code, out, _ = _run('pool add a --accelerator cpu --nodes 1\nobserve ep "unterminated\n', output="json")
    assert code == 2
    (record,) = json_lines(out)
    assert record["line"] == 2 and record["ok"] is False
    assert record["error"]["type"] == "ParseError"
    assert "line 2, column 12" in record["error"]["message"]
    assert state_dump() == before  # line 1 did not run


def test_a_failing_command_stops_the_script_and_keeps_earlier_effects() -> None:
    code, _, err = _run(
        "pool add a --accelerator cpu --nodes 1\npool remove nope\npool add b --accelerator cpu --nodes 1\n",
        output="text",
    )
    assert code == 1
    assert "line 2: pool remove nope: NotFoundError: unknown pool 'nope'" in err
    assert "Traceback" not in err
    pools = {row[0] for row in state_dump()["pools"]}
    assert pools == {"cpu", "a"}


def test_keep_going_runs_the_rest_and_still_exits_one() -> None:
    code, out, _ = _run("pool remove nope\npool add b --accelerator cpu --nodes 1\n", output="json", keep_going=True)
    assert code == 1
    assert [r["ok"] for r in json_lines(out)] == [False, True]


def test_debug_adds_the_traceback() -> None:
    code, _, err = _run("pool remove nope\n", debug=True)
    assert code == 1 and "Traceback" in err


def test_text_output_renders_tables_and_records() -> None:
    seed_registry()
    code, out, err = _run("pools\nmodels fraud\n")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["name", "accelerator", "nodes", "spot", "in_use", "queued", "emulated"]
    assert "group: fraud" in out and "versions:" in out


def test_bad_output_format_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--output 'yaml' is not one of: text, json"):
        run_script("pools", output="yaml")
    with pytest.raises(ValidationError, match="cannot read it"):
        read_script(str(tmp_path / "missing.txt"))
    script = tmp_path / "ok.txt"
    script.write_text("pools\n")
    assert read_script(str(script)) == "pools\n"
    assert read_script("-", io.StringIO("help\n")) == "help\n"


def test_render_text_formats_records_tables_and_logs() -> None:
    record = {"job_id": "job-1", "created_at": 0.0, "result": {"k": [1, 2]}, "rows": [{"a": 1, "b": None}]}
    lines = render_text("status", record).splitlines()
    assert lines[0] == "job_id: job-1"
    assert re.fullmatch(r"created_at: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", lines[1])
    assert lines[2:] == ["result:", "  k: [1, 2]", "rows:", "  a  b", "  1  -"]
    assert render_text("logs", {"job_id": "job-1", "lines": ["x", "y"]}) == "x\ny"
    assert render_text("jobs", []) == "(none)"
    assert render_text("help", "usage") == "usage"


def test_render_text_prints_floats_without_noise_and_nested_values_whole() -> None:
    assert [float_text(x) for x in (0.1 + 0.2, 0.512 * 1.0000000000000002, 1 / 3, 1e300 * 10, 2.0, -0.0)] == [
        "0.3",
        "0.512",
        "0.333333333333333",
        "1e+301",
        "2.0",
        "-0.0",
    ]
    assert float_text(float("inf")) == "inf" and float_text(float("nan")) == "nan"
    long_name = "x" * 80
    record = {"v": 0.6000000000000001, "result": {"nested": {"a": [1, {"b": 0.1 + 0.2}]}, "name": long_name}}
    assert render_text("status", record).splitlines() == [
        "v: 0.6",
        "result:",
        "  nested:",
        "    a:",
        "      - 1",
        "      - b: 0.3",
        f"  name: {long_name}",
    ]
    rows = [{"name": "a", "metrics": {"loss": 0.1 + 0.2}}, {"name": "b", "metrics": {}}]
    assert render_text("models", rows).splitlines() == ["name  metrics", "a     {loss: 0.3}", "b     {}"]
    deep = [{"name": "p", "runs": [{"n": 1}]}]
    assert render_text("pipelines", deep).splitlines() == ["- name: p", "  runs:", "    n", "    1"]


def test_text_output_puts_a_blank_line_between_commands() -> None:
    code, out, err = _run("pools\nhelp pools\npools\n")
    assert code == 0, err
    blocks = out.rstrip("\n").split("\n\n")
    assert len(blocks) == 3 and blocks[0] == blocks[2] and blocks[0].startswith("name ")
    assert not out.startswith("\n") and out.endswith("False\n")


@pytest.mark.usefixtures("user_project")
def test_a_detached_run_returns_at_once_and_bad_input_fails_before_anything_starts() -> None:
    code, out, _ = _run("pipeline register console_user:tiny\nrerun tiny --detach\n", output="json")
    assert code == 1
    records = json_lines(out)
    assert records[-1] == {
        "line": 2,
        "command": "rerun tiny --detach",
        "ok": False,
        "error": {"type": "ValidationError", "message": NO_RUNS},
    }
    code, out, _ = _run("pipeline run tiny --detach\n", output="json")
    (started,) = json_lines(out)
    assert code == 0 and (started["result"]["status"], started["result"]["run"]) == ("Running", 1)
    code, out, _ = _run("pipeline resume tiny\npipelines\n", output="json")
    followed, listing = json_lines(out)
    assert code == 0 and followed["result"]["status"] == "Succeeded"
    assert [run["status"] for run in listing["result"][0]["runs"]] == ["Succeeded"]
