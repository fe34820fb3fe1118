"""`--script FILE`: an unusable file is one line and exit 2 (as the same bytes on stdin), never a traceback;
a UTF-8 byte-order mark is text, not part of the first verb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher

ELF = b"\x7fELF\x02\x01\x01\x00\x00\x00pools\n"  # an executable's header: valid UTF-8, with NULs
BINARY = bytes(range(256)) * 4  # control bytes and invalid UTF-8
LATIN1 = "pools # café\n".encode("latin-1")


@pytest.fixture
def script():
    runner = CliRunner()

    def invoke(path: str, input: bytes | None = None):
        return runner.invoke(main, ["--script", path, "--output", "json"], input=input)

    yield invoke
    launcher.shutdown_server()


def _one_line_usage_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and result.output.count("\n") == 1, result.output
    for needle in needles:
        assert needle in result.output, result.output


@pytest.mark.parametrize(
    ("data", "what"),
    [(ELF, "binary data (a NUL byte at offset 7)"), (BINARY, "not UTF-8 text (byte 0x80"), (LATIN1, "(byte 0xe9")],
    ids=["nul", "binary", "latin-1"],
)
def test_a_binary_or_non_utf8_file_is_one_line_and_exit_2_like_stdin(script, tmp_path: Path, data, what) -> None:
    path = tmp_path / "bad.kin"
    path.write_bytes(data)
    _one_line_usage_error(script(str(path)), str(path), what)
    _one_line_usage_error(script("-", input=data), "standard input", what)


def test_a_missing_file_or_a_directory_exits_2_naming_the_path(script, tmp_path: Path) -> None:
    _one_line_usage_error(script(str(tmp_path / "missing.kin")), str(tmp_path / "missing.kin"), "cannot read it")
    _one_line_usage_error(script(str(tmp_path)), str(tmp_path), "cannot read it")


def test_a_utf8_byte_order_mark_is_dropped(script, tmp_path: Path) -> None:
    path = tmp_path / "bom.kin"
    path.write_bytes("\ufeffpools\r\nhelp pools\r\n".encode())
    for result in (script(str(path)), script("-", input=path.read_bytes())):
        assert result.exit_code == 0, result.output
        assert [json.loads(line)["command"] for line in result.output.splitlines()] == ["pools", "help pools"]
