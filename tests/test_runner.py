"""The runner end to end: real runner processes (and in-process `main` calls where that is faster)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from kinetic_tui.core.storage import GcsStorage
from kinetic_tui.runner import remote_runner

RUNNER = Path(remote_runner.__file__)
# The runner process cannot import this test module, so ship its functions by value, as packaging does.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --- job functions (run inside the runner) --------------------------------------------------------


class RemoteError(Exception):
    pass


class UnpicklableError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def _touch(path: str) -> str:
    Path(path).write_text("ran")
    return "ran"


class TouchOnUnpickle:
    """Unpickling this object creates a file: proof of whether anything was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (_touch, (self.path,))


def add(a: int, b: int) -> int:
    print("adding on the remote side")
    return a + b


def fail() -> None:
    raise RemoteError("the remote side broke")


def fail_unpicklably() -> None:
    raise UnpicklableError("holds a lock")


def return_lock() -> Any:
    return threading.Lock()


def use_archive_code() -> tuple[str, str, str]:
    import kinetic_test_helper_mod  # lives only inside the job's archive

    with open("input.txt") as handle:  # relative to the client's cwd as recorded in plan.json
        return kinetic_test_helper_mod.VALUE, handle.read(), os.getcwd()


def read_environment() -> dict[str, str]:
    out = Path(os.environ["KINETIC_OUTPUT_DIR"])
    (out / "model.bin").write_bytes(b"weights")
    return {"MY_SETTING": os.environ["MY_SETTING"], "KINETIC_OUTPUT_DIR": str(out)}


def read_data(single: str, nested: dict[str, Any]) -> dict[str, Any]:
    directory = Path(nested["dirs"][0])
    return {
        "types": [type(single).__name__, type(nested["dirs"][0]).__name__],
        "file": Path(single).read_text(),
        "dir": sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()),
        "dir_content": (directory / "sub" / "b.txt").read_text(),
        "volume": Path(nested["volume"]).read_text(),
    }


def loaded_modules() -> list[str]:
    return sorted(m for m in sys.modules if m.split(".")[0] in {"google", "subprocess", "core", "tempfile"})


# --- building jobs --------------------------------------------------------------------------------


def data_ref(uri: str, is_dir: bool, name: str) -> dict[str, Any]:
    return {"__kinetic_data_ref__": 1, "uri": uri, "is_dir": is_dir, "name": name}


def build_zip(
    files: dict[str, bytes], plan: dict[str, Any] | None = None, symlinks: dict[str, str] | None = None
) -> bytes:
    plan = plan or {
        "package_root": "/client/project",
        "entry_rel": "main.py",
        "client_cwd_rel": None,
        "sys_path_rel": [""],
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(".kinetic/plan.json", json.dumps(plan))
        for name, data in files.items():
            archive.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16
            archive.writestr(info, target)
    return buffer.getvalue()


@dataclass
class Job:
    payload: Path
    context: Path
    result: Path
    workdir: Path
    extra: list[str]

    @property
    def argv(self) -> list[str]:
        sha = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (self.payload, self.context)}
        return [
            "--payload",
            str(self.payload),
            "--context",
            str(self.context),
            "--result",
            str(self.result),
            "--payload-sha256",
            sha[self.payload],
            "--context-sha256",
            sha[self.context],
            "--workdir",
            str(self.workdir),
            *self.extra,
        ]

    def outcome(self, path: Path | None = None) -> dict[str, Any]:
        return cloudpickle.loads((path or self.result).read_bytes())


def make_job(
    tmp_path: Path,
    func: Any,
    *args: Any,
    kwargs: dict | None = None,
    env_vars: dict | None = None,
    volumes: dict | None = None,
    context: bytes | None = None,
    extra: Any = None,
) -> Job:
    store = tmp_path / "bucket" / "job-1"
    store.mkdir(parents=True)
    payload = {
        "func": func,
        "args": args,
        "kwargs": kwargs or {},
        "env_vars": env_vars or {},
        "volumes": volumes or {},
        "extra": extra,
        "client_fingerprint": {"python": sys.version, "cloudpickle": cloudpickle.__version__, "kinetic": "test"},
    }
    (store / "payload.pkl").write_bytes(cloudpickle.dumps(payload))
    (store / "context.zip").write_bytes(context if context is not None else build_zip({}))
    return Job(store / "payload.pkl", store / "context.zip", store / "result.pkl", tmp_path / "work", [])


def run_process(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUNNER), *argv], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


# --- tests ----------------------------------------------------------------------------------------


def test_success_round_trip_in_a_real_process(tmp_path: Path) -> None:
    job = make_job(tmp_path, add, 2, kwargs={"b": 40})
    done = run_process(job.argv)
    assert done.returncode == 0, done.stderr
    outcome = job.outcome()
    assert outcome == {
        "success": True,
        "result": 42,
        "exception": None,
        "traceback": "",
        "phase": "upload",
        "host_index": 0,
    }
    assert "adding on the remote side" in done.stdout
    for phase in ("download", "verify", "extract", "unpickle", "environment", "data", "execute"):
        assert f"[kinetic] phase {phase} ok" in done.stderr
    assert "phase install" not in done.stderr  # only with --requirements


def test_remote_exception_comes_back_with_its_type_traceback_and_phase(tmp_path: Path) -> None:
    job = make_job(tmp_path, fail)
    done = run_process(job.argv)
    assert done.returncode == 1
    outcome = job.outcome()
    assert outcome["success"] is False and outcome["phase"] == "execute"
    assert type(outcome["exception"]) is RemoteError
    assert str(outcome["exception"]) == "the remote side broke"
    assert "in fail" in outcome["traceback"] and "RemoteError: the remote side broke" in outcome["traceback"]
    assert "phase execute FAILED" in done.stderr


@pytest.mark.parametrize("artifact", ["payload", "context"])
def test_a_flipped_byte_is_refused_before_anything_is_unpickled(tmp_path: Path, artifact: str) -> None:
    ran, unpickled = tmp_path / "ran", tmp_path / "unpickled"
    job = make_job(tmp_path, _touch, str(ran), extra=TouchOnUnpickle(str(unpickled)))
    argv = job.argv  # hashes of the genuine artifacts
    flip_byte(getattr(job, artifact), 40)
    assert remote_runner.main(argv) == 1
    outcome = job.outcome()
    assert outcome["phase"] == "verify" and isinstance(outcome["exception"], ValueError)
    assert f"{artifact} SHA-256 mismatch" in str(outcome["exception"])
    assert not ran.exists() and not unpickled.exists()
    assert not (job.workdir / "code").exists()  # not even extracted


def test_the_untampered_job_does_unpickle_and_run(tmp_path: Path) -> None:
    """The control for the test above: the same job, untouched, leaves both marks."""
    ran, unpickled = tmp_path / "ran", tmp_path / "unpickled"
    job = make_job(tmp_path, _touch, str(ran), extra=TouchOnUnpickle(str(unpickled)))
    assert remote_runner.main(job.argv) == 0
    assert ran.exists() and unpickled.exists()


ESCAPES = {
    "dotdot": ({"../evil.py": b"x"}, {}),
    "nested dotdot": ({"pkg/../../evil.py": b"x"}, {}),
    "absolute": ({"/tmp/evil.py": b"x"}, {}),
    "symlink out": ({}, {"link": "../../outside"}),
    "absolute symlink": ({}, {"link": "/etc"}),
    "symlink chain": ({}, {"here": ".", "here/up": ".."}),
    "file through escaping link": ({"up/evil.py": b"x"}, {"up": ".."}),
    "symlink loop": ({}, {"a": "b", "b": "a"}),
    "dotted symlink out": ({}, {"link": "./../outside"}),
    "symlink out of its own directory": ({}, {"pkg/link": "../../outside"}),
    "drive root": ({"C:": b"x"}, {}),
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_archive_members_that_escape_are_rejected(tmp_path: Path, name: str) -> None:
    files, links = ESCAPES[name]
    ran = tmp_path / "ran"
    job = make_job(tmp_path, _touch, str(ran), context=build_zip(files, symlinks=links))
    assert remote_runner.main(job.argv) == 1
    outcome = job.outcome()
    assert outcome["phase"] == "extract", outcome["traceback"]
    assert not ran.exists()
    assert not (job.workdir / "code").exists()  # checked before anything was written
    assert not list(tmp_path.rglob("evil.py"))


def test_symlinks_inside_the_archive_are_kept(tmp_path: Path) -> None:
    context = build_zip(
        {"pkg/real.txt": b"hello", "kinetic_test_helper_mod.py": b"VALUE = 'v'\n", "input.txt": b"in"},
        symlinks={"alias": "pkg/real.txt", "pkg/self": "../pkg"},
    )
    job = make_job(tmp_path, use_archive_code, context=context)
    assert remote_runner.main(job.argv) == 0
    code = job.workdir / "code"
    assert (code / "alias").is_symlink() and (code / "alias").read_text() == "hello"
    assert (code / "pkg" / "self" / "real.txt").read_text() == "hello"


def test_a_reused_workdir_is_cleared_before_extracting(tmp_path: Path) -> None:
    """A stale symlink left in the work dir must not redirect the new archive's files outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    job = make_job(tmp_path, add, 1, 2, context=build_zip({"pkg/mod.py": b"x = 1\n"}))
    (job.workdir / "code").mkdir(parents=True)
    (job.workdir / "code" / "pkg").symlink_to(outside)
    assert remote_runner.main(job.argv) == 0
    assert list(outside.iterdir()) == []
    assert (job.workdir / "code" / "pkg" / "mod.py").read_text() == "x = 1\n"


def _check(context: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(context)) as archive:
        return ["/".join(parts) for _, parts in remote_runner.check_archive(archive)]


def test_extract_check_lets_a_path_through_an_inside_link_pass() -> None:
    """The control for `file through escaping link`: a link that stays inside may carry a path."""
    assert _check(build_zip({"pkg/a.txt": b"a", "alias/b.txt": b"b"}, symlinks={"alias": "pkg"}))[1:] == [
        "pkg/a.txt",
        "alias/b.txt",
        "alias",
    ]
    # a link two directories down resolves from its own directory: `a/b/up -> ../..` is the root
    assert "a/b/up/d.txt" in _check(build_zip({"a/b/up/d.txt": b"d"}, symlinks={"a/b/up": "../.."}))


def test_extract_check_names_the_first_member_whose_path_escapes() -> None:
    """`up/evil.py` comes before its link `up -> ..` in the archive: the refusal names the file."""
    with pytest.raises(ValueError) as info:
        _check(build_zip({"up/evil.py": b"x"}, symlinks={"up": ".."}))
    assert str(info.value) == "archive member 'up/evil.py' would be written outside the work dir"


def test_extract_check_follows_a_chain_of_40_links_and_refuses_41() -> None:
    """40 hops, the limit Linux itself follows; `l0 -> l1 -> ... -> real.txt`."""

    def chain(hops: int) -> bytes:
        links = {f"l{i}": f"l{i + 1}" for i in range(hops - 1)} | {f"l{hops - 1}": "real.txt"}
        return build_zip({"real.txt": b"r"}, symlinks=links)

    assert len(_check(chain(40))) == 42  # the plan, real.txt and the 40 links
    with pytest.raises(ValueError, match="points outside the work dir"):
        _check(chain(41))
    # a path through the chain to a directory takes as many hops
    through = {f"l{i}": f"l{i + 1}" for i in range(39)} | {"l39": "pkg"}
    assert "l0/a.txt" in _check(build_zip({"pkg/a.txt": b"a", "l0/a.txt": b"b"}, symlinks=through))
    through = {f"l{i}": f"l{i + 1}" for i in range(40)} | {"l40": "pkg"}
    with pytest.raises(ValueError, match="'l0/a.txt' would be written outside the work dir"):
        _check(build_zip({"pkg/a.txt": b"a", "l0/a.txt": b"b"}, symlinks=through))


def _extract_zip(tmp_path: Path, members: dict[str, tuple[int, bytes]]) -> Path:
    """Extract an archive of `name: (mode, data)` members in process into a code dir whose parent does not
    exist yet (extract makes it); returns the code dir."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, (mode, data) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            archive.writestr(info, data)
    (tmp_path / "context.zip").write_bytes(buffer.getvalue())
    remote_runner.extract(tmp_path / "context.zip", tmp_path / "work" / "code")
    return tmp_path / "work" / "code"


def test_extract_keeps_each_members_mode_less_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        members = {"run.sh": (0o755, b"#!/bin/sh\n"), "secret.txt": (0o600, b"s"), "shared.txt": (0o666, b"o")}
        code = _extract_zip(tmp_path, members)
    finally:
        os.umask(old)
    assert {name: (code / name).stat().st_mode & 0o777 for name in members} == {
        "run.sh": 0o755,
        "secret.txt": 0o600,
        "shared.txt": 0o644,
    }


def test_an_inputs_output_dir_is_made_with_its_parent_or_deeper_and_a_file_in_the_way_is_refused(
    tmp_path: Path,
) -> None:
    remote_runner.make_dir_and_parent(f"{tmp_path}/job-1/output/")
    remote_runner.make_dir_and_parent(f"{tmp_path}/job-1/output/")  # again: already there
    remote_runner.make_dir_and_parent(f"{tmp_path}/a/b/c/output")
    assert (tmp_path / "job-1" / "output").is_dir() and (tmp_path / "a" / "b" / "c" / "output").is_dir()
    (tmp_path / "job-2").write_text("a file")
    with pytest.raises(FileExistsError):
        remote_runner.make_dir_and_parent(f"{tmp_path}/job-2/output/")


def test_extract_returns_the_plan_without_writing_it_into_the_jobs_tree(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(".kinetic/plan.json", '{"client_cwd_rel": "."}')
        archive.writestr(".kinetic/notes.txt", "the project's own")
        archive.writestr("main.py", "x = 1")
    (tmp_path / "context.zip").write_bytes(buffer.getvalue())
    code = tmp_path / "code"
    assert json.loads(remote_runner.extract(tmp_path / "context.zip", code) or b"") == {"client_cwd_rel": "."}
    assert sorted(str(p.relative_to(code)) for p in code.rglob("*")) == [".kinetic", ".kinetic/notes.txt", "main.py"]


def test_extract_takes_a_directory_entry_that_follows_its_files(tmp_path: Path) -> None:
    """Some zip tools write `pkg/` after `pkg/a.txt`; the directory already exists by then."""
    code = _extract_zip(tmp_path, {"pkg/a.txt": (0o644, b"a"), "pkg/": (0o755, b"")})
    assert (code / "pkg" / "a.txt").read_text() == "a"


def test_extract_makes_every_missing_parent_directory(tmp_path: Path) -> None:
    """Zip tools may leave out directory entries: a file, a directory entry and a symlink two levels down,
    with no entry for any directory above them, all land."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("deep/er/file.txt", "f")
        archive.writestr(zipfile.ZipInfo("made/by/entry/"), "")
        link = zipfile.ZipInfo("links/to/file")
        link.external_attr = 0o120777 << 16
        archive.writestr(link, "../../deep/er/file.txt")
    (tmp_path / "context.zip").write_bytes(buffer.getvalue())
    code = tmp_path / "code"
    remote_runner.extract(tmp_path / "context.zip", code)
    assert (code / "deep" / "er" / "file.txt").read_text() == "f"
    assert (code / "made" / "by" / "entry").is_dir()
    assert (code / "links" / "to" / "file").is_symlink() and (code / "links" / "to" / "file").read_text() == "f"


def test_extract_takes_one_letter_member_names(tmp_path: Path) -> None:
    """A name too short to hold a drive letter (`C:`) is an ordinary relative path."""
    code = _extract_zip(tmp_path, {"a": (0o644, b"one"), "b/c": (0o644, b"two")})
    assert ((code / "a").read_text(), (code / "b" / "c").read_text()) == ("one", "two")


def test_unpicklable_return_value_reports_its_repr(tmp_path: Path) -> None:
    job = make_job(tmp_path, return_lock)
    assert remote_runner.main(job.argv) == 1
    outcome = job.outcome()
    assert outcome["serialization_failed"] is True and outcome["success"] is False
    assert outcome["result"] is None and "lock object" in outcome["result_repr"]
    assert outcome["phase"] == "upload" and "could not be pickled" in str(outcome["exception"])


def test_unpicklable_exception_becomes_a_runtime_error_naming_it(tmp_path: Path) -> None:
    job = make_job(tmp_path, fail_unpicklably)
    assert remote_runner.main(job.argv) == 1
    outcome = job.outcome()
    assert type(outcome["exception"]) is RuntimeError
    assert "UnpicklableError: holds a lock" in str(outcome["exception"])
    assert outcome["phase"] == "execute" and "UnpicklableError" in outcome["traceback"]


def test_plan_restores_sys_path_and_cwd(tmp_path: Path) -> None:
    plan = {
        "package_root": "/client/proj",
        "entry_rel": "src/main.py",
        "client_cwd_rel": "data",
        "sys_path_rel": ["src"],
    }
    context = build_zip(
        {"src/kinetic_test_helper_mod.py": b"VALUE = 'from the archive'\n", "data/input.txt": b"relative read"},
        plan=plan,
    )
    job = make_job(tmp_path, use_archive_code, context=context)
    done = run_process(job.argv)
    assert done.returncode == 0, done.stderr
    value, text, cwd = job.outcome()["result"]
    assert (value, text) == ("from the archive", "relative read")
    assert Path(cwd) == job.workdir / "code" / "data"


def test_plan_entries_outside_the_root_fail_in_environment(tmp_path: Path) -> None:
    plan = {"package_root": "/p", "entry_rel": "m.py", "client_cwd_rel": "../..", "sys_path_rel": []}
    job = make_job(tmp_path, add, 1, 2, context=build_zip({}, plan=plan))
    assert remote_runner.main(job.argv) == 1
    outcome = job.outcome()
    assert outcome["phase"] == "environment" and "client_cwd_rel" in str(outcome["exception"])


def test_env_vars_and_default_output_dir(tmp_path: Path) -> None:
    job = make_job(tmp_path, read_environment, env_vars={"MY_SETTING": "on"})
    assert remote_runner.main(job.argv) == 0
    result = job.outcome()["result"]
    assert result == {"MY_SETTING": "on", "KINETIC_OUTPUT_DIR": str(job.workdir / "output")}
    assert (job.workdir / "output" / "model.bin").read_bytes() == b"weights"


def test_launcher_output_dir_wins(tmp_path: Path) -> None:
    out = tmp_path / "launcher-output"
    job = make_job(tmp_path, read_environment, env_vars={"MY_SETTING": "x", "KINETIC_OUTPUT_DIR": "/nope"})
    done = run_process(job.argv, KINETIC_OUTPUT_DIR=str(out))
    assert done.returncode == 0, done.stderr
    assert job.outcome()["result"]["KINETIC_OUTPUT_DIR"] == str(out)
    assert (out / "model.bin").read_bytes() == b"weights"


def test_in_process_main_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    plan = {"package_root": "/p", "entry_rel": "m.py", "client_cwd_rel": "data", "sys_path_rel": ["src"]}
    context = build_zip({"data/x": b"", "src/x.py": b""}, plan=plan)
    job = make_job(tmp_path, read_environment, env_vars={"MY_SETTING": "on"}, context=context)
    before = (os.getcwd(), list(sys.path), dict(os.environ))
    assert remote_runner.main(job.argv) == 0
    assert (os.getcwd(), list(sys.path), dict(os.environ)) == before


EXPECTED_DATA = {
    "types": ["str", "str"],
    "file": "file content",
    "dir": ["a.txt", "sub/b.txt"],
    "dir_content": "b",
    "volume": "file content",
}


def test_data_refs_become_local_paths(tmp_path: Path) -> None:
    (tmp_path / "cache" / "dir-hash" / "sub").mkdir(parents=True)
    (tmp_path / "cache" / "dir-hash" / "a.txt").write_text("a")
    (tmp_path / "cache" / "dir-hash" / "sub" / "b.txt").write_text("b")
    (tmp_path / "cache" / "file-hash").mkdir()
    (tmp_path / "cache" / "file-hash" / "notes.txt").write_text("file content")
    dir_ref = data_ref(f"{tmp_path}/cache/dir-hash/", True, "dataset")
    file_ref = data_ref(f"{tmp_path}/cache/file-hash/notes.txt", False, "notes.txt")
    volume = tmp_path / "mnt" / "vol"
    nested = {"dirs": (dir_ref,), "volume": str(volume / "notes.txt")}
    job = make_job(
        tmp_path,
        read_data,
        file_ref,
        kwargs={"nested": nested},
        volumes={str(volume): data_ref(f"{tmp_path}/cache/file-hash/", True, "vol")},
    )
    assert remote_runner.main(job.argv) == 0, job.outcome()["traceback"]
    result = job.outcome()["result"]
    assert result == EXPECTED_DATA


def test_missing_data_fails_in_the_data_phase(tmp_path: Path) -> None:
    job = make_job(tmp_path, add, data_ref(f"{tmp_path}/absent.bin", False, "absent.bin"), 1)
    assert remote_runner.main(job.argv) == 1
    assert job.outcome()["phase"] == "data"


def test_a_payload_that_is_not_a_job_fails_in_the_unpickle_phase(tmp_path: Path) -> None:
    job = make_job(tmp_path, add, 1, 2)
    job.payload.write_bytes(cloudpickle.dumps(["not", "a", "job"]))
    assert remote_runner.main(job.argv) == 1
    outcome = job.outcome()
    assert outcome["phase"] == "unpickle" and "callable 'func'" in str(outcome["exception"])


def test_missing_payload_fails_in_the_download_phase(tmp_path: Path) -> None:
    job = make_job(tmp_path, add, 1, 2)
    argv = job.argv
    job.payload.unlink()
    assert remote_runner.main(argv) == 1
    outcome = job.outcome()
    assert outcome["phase"] == "download" and isinstance(outcome["exception"], FileNotFoundError)


@pytest.mark.parametrize("func, args, writes", [(fail, (), True), (add, (1, 2), False)])
def test_workers_write_a_result_only_when_they_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, func: Any, args: tuple, writes: bool
) -> None:
    monkeypatch.setenv("TPU_WORKER_ID", "2")
    job = make_job(tmp_path, func, *args)
    assert remote_runner.main(job.argv) == (1 if writes else 0)
    assert not job.result.exists()
    worker_file = job.result.with_name("result-worker-2.pkl")
    assert worker_file.exists() is writes
    if writes:
        outcome = job.outcome(worker_file)
        assert outcome["host_index"] == 2 and type(outcome["exception"]) is RemoteError


@pytest.mark.parametrize("func, args, success", [(fail, (), False), (add, (1, 2), True)])
def test_every_worker_writes_its_summary_so_a_lost_exit_status_can_be_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, func: Any, args: tuple, success: bool
) -> None:
    monkeypatch.setenv("TPU_WORKER_ID", "2")
    job = make_job(tmp_path, func, *args)
    remote_runner.main(job.argv)
    summary = json.loads(job.result.with_name("result-worker-2.json").read_text())
    assert (summary["success"], summary["host_index"]) == (success, 2)


def test_bad_worker_id_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_WORKER_ID", "two")
    job = make_job(tmp_path, add, 1, 2)
    assert remote_runner.main(job.argv) == 2
    assert not job.result.exists()


def test_missing_arguments_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert remote_runner.main(["--payload", "x"]) == 2
    assert "--context" in capsys.readouterr().err


def test_requirements_are_installed_before_running(tmp_path: Path) -> None:
    job = make_job(tmp_path, add, 1, 2)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("--no-index\ncloudpickle\n")  # already satisfied: pip changes nothing
    job.extra = ["--requirements", str(requirements)]
    assert remote_runner.main(job.argv) == 0
    assert job.outcome()["result"] == 3


def test_failed_install_stops_the_job_in_the_install_phase(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    job = make_job(tmp_path, _touch, str(ran))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"--no-index\n{tmp_path}/no-such-package-dir\n")
    job.extra = ["--requirements", str(requirements)]
    assert remote_runner.main(job.argv) == 1
    outcome = job.outcome()
    assert outcome["phase"] == "install" and "pip install -r requirements failed" in str(outcome["exception"])
    assert not ran.exists()


def test_a_local_job_imports_neither_gcs_nor_our_packages(tmp_path: Path) -> None:
    job = make_job(tmp_path, loaded_modules)
    done = run_process(job.argv)
    assert done.returncode == 0, done.stderr
    assert job.outcome()["result"] == []


def test_gs_round_trip_on_the_emulator(tmp_path: Path, gcs_bucket: str) -> None:
    bucket = GcsStorage(gcs_bucket)
    bucket.put_bytes("data-cache/h1/sub/b.txt", b"b")
    bucket.put_bytes("data-cache/h1/a.txt", b"a")
    bucket.put_bytes("data-cache/h2/notes.txt", b"file content")
    file_ref = data_ref(bucket.uri("data-cache/h2/notes.txt"), False, "notes.txt")
    dir_ref = data_ref(bucket.uri("data-cache/h1/"), True, "dataset")
    volume = tmp_path / "mnt" / "vol"
    nested = {"dirs": [dir_ref], "volume": str(volume / "notes.txt")}
    job = make_job(
        tmp_path,
        read_data,
        file_ref,
        kwargs={"nested": nested},
        volumes={str(volume): data_ref(bucket.uri("data-cache/h2/"), True, "vol")},
    )
    bucket.put_file("job-1/payload.pkl", job.payload)
    bucket.put_file("job-1/context.zip", job.context)
    argv = job.argv
    for local in (job.payload, job.context, job.result):
        argv[argv.index(str(local))] = bucket.uri(f"job-1/{local.name}")
    done = run_process(argv)
    assert done.returncode == 0, done.stderr
    outcome = cloudpickle.loads(bucket.get_bytes("job-1/result.pkl"))
    assert outcome["result"] == EXPECTED_DATA
    assert not job.result.exists()
    # downloaded: the archive stays in the work dir, the payload's copy (captured secrets) is gone
    assert sorted(p.name for p in (job.workdir / "download").iterdir()) == ["context.zip"]


def test_a_local_job_reads_its_uploads_where_they_lie_and_copies_nothing(tmp_path: Path) -> None:
    job = make_job(tmp_path, add, 1, 2)
    assert remote_runner.main(job.argv) == 0
    assert job.outcome()["result"] == 3
    assert job.payload.exists() and not (job.workdir / "download").exists()
