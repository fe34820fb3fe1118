"""A local Hugging Face Hub endpoint for dataset repositories: enough of the Hub's HTTP API for
`huggingface_hub.snapshot_download` (repo info, tree listing, file resolve), served from a directory.

`HF_ENDPOINT=<url>` points the job at it; nothing external is reached. Each dataset repo is a directory
`root/<owner>/<name>/` whose files are the repo's files at its one revision; the commit sha is a hash of
the content, so changed content is a new revision. Unknown repos and files answer 404 with the Hub's
`X-Error-Code` header, so the client raises its own not-found errors.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def _files(repo: Path) -> list[Path]:
    return sorted(p for p in repo.rglob("*") if p.is_file())


def _sha(repo: Path) -> str:
    digest = hashlib.sha1()
    for path in _files(repo):
        digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class HubHandler(BaseHTTPRequestHandler):
    root: Path
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:  # the test reads `requests` instead
        pass

    def _repo(self, owner: str, name: str) -> Path | None:
        repo = self.root / owner / name
        return repo if repo.is_dir() else None

    def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _missing(self, code: str, head: bool) -> None:
        body = json.dumps({"error": code}).encode()
        self._send(404, body, {"Content-Type": "application/json", "X-Error-Code": code}, head)

    def _route(self, head: bool) -> None:
        path = urllib.parse.urlparse(self.path).path
        self.requests.append(f"{self.command} {path}")
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "datasets"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            repo = self._repo(parts[2], parts[3])
            if repo is None:
                return self._missing("RepoNotFound", head)
            return self._api(parts[2], parts[3], repo, parts[4], head)
        if parts[:1] == ["datasets"] and len(parts) >= 6 and parts[3] == "resolve":
            repo = self._repo(parts[1], parts[2])
            if repo is None:
                return self._missing("RepoNotFound", head)
            target = repo.joinpath(*parts[5:])
            if not target.is_file():
                return self._missing("EntryNotFound", head)
            body = target.read_bytes()
            headers = {
                "Content-Type": "application/octet-stream",
                "ETag": f'"{hashlib.sha1(body).hexdigest()}"',
                "X-Repo-Commit": _sha(repo),
            }
            return self._send(200, body, headers, head)
        return self._missing("RepoNotFound", head)

    def _api(self, owner: str, name: str, repo: Path, kind: str, head: bool) -> None:
        files = [p.relative_to(repo).as_posix() for p in _files(repo)]
        if kind == "revision":
            info = {
                "id": f"{owner}/{name}",
                "sha": _sha(repo),
                "private": False,
                "siblings": [{"rfilename": rel} for rel in files],
            }
        else:
            info = [
                {
                    "type": "file",
                    "path": rel,
                    "size": (repo / rel).stat().st_size,
                    "oid": hashlib.sha1((repo / rel).read_bytes()).hexdigest(),
                }
                for rel in files
            ]
        self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


class HubServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        handler = type("Handler", (HubHandler,), {"root": root, "requests": self.requests})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_dataset(self, repo_id: str, files: dict[str, str]) -> None:
        for rel, text in files.items():
            path = self.root / repo_id / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


@pytest.fixture
def hf_hub(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """A running local Hub; HF_ENDPOINT points at it and HF_HOME at a fresh directory for this test."""
    hub = HubServer(tmp_path_factory.mktemp("hf-hub"))
    hub.thread.start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf-home")))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield hub
    finally:
        hub.server.shutdown()
        hub.server.server_close()
