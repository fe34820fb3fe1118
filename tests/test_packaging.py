"""Packaging: package root discovery, context.zip contents and cache, payload pickling, env capture."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import cloudpickle
import pytest

import kinetic_tui.core.submission.packaging.archive as context_archive
from kinetic_tui.core.data import Data
from kinetic_tui.core.submission.packaging import (
    DEFAULT_EXCLUDED,
    PLAN_ARCNAME,
    ROOT_MARKERS,
    PayloadError,
    SensitiveEnvWarning,
    build_context_zip,
    build_payload,
    capture_env,
    find_package_root,
    make_plan,
)


def touch(root: Path, *rels: str, content: bytes = b"x") -> Path:
    for rel in rels:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def zip_names(root: Path, dest: Path, **kwargs) -> set[str]:
    path, _ = build_context_zip(root, dest, plan=kwargs.pop("plan", {}), **kwargs)
    with zipfile.ZipFile(path) as archive:
        return set(archive.namelist()) - {PLAN_ARCNAME}


# ----------------------------------------------------------------------------------------- package root


def test_walks_out_of_nested_packages_up_to_the_marker(tmp_path: Path) -> None:
    touch(
        tmp_path,
        "home/proj/pyproject.toml",
        "home/proj/src/app/__init__.py",
        "home/proj/src/app/models/__init__.py",
        "home/proj/src/app/models/net.py",
    )
    module = tmp_path / "home/proj/src/app/models/net.py"
    assert find_package_root(module, home=tmp_path / "home") == (tmp_path / "home/proj").resolve()


@pytest.mark.parametrize("marker", ROOT_MARKERS)
def test_each_marker_stops_the_walk(tmp_path: Path, marker: str) -> None:
    touch(tmp_path, f"home/proj/{marker}", "home/proj/a/b/script.py", "home/pyproject.toml")
    assert (
        find_package_root(tmp_path / "home/proj/a/b/script.py", home=tmp_path / "home")
        == (tmp_path / "home/proj").resolve()
    )


def test_without_a_marker_the_directory_after_the_packages_is_the_root(tmp_path: Path) -> None:
    touch(tmp_path, "home/work/lib/pkg/__init__.py", "home/work/lib/pkg/mod.py")
    assert (
        find_package_root(tmp_path / "home/work/lib/pkg/mod.py", home=tmp_path / "home")
        == (tmp_path / "home/work/lib").resolve()
    )


def test_never_walks_above_home(tmp_path: Path) -> None:
    touch(tmp_path, "pyproject.toml", "home/code/script.py")
    assert (
        find_package_root(tmp_path / "home/code/script.py", home=tmp_path / "home")
        == (tmp_path / "home/code").resolve()
    )
    touch(tmp_path, "home/setup.cfg")
    assert find_package_root(tmp_path / "home/code/script.py", home=tmp_path / "home") == (tmp_path / "home").resolve()


def test_package_directly_under_home_stops_at_home(tmp_path: Path) -> None:
    touch(tmp_path, "pyproject.toml", "home/pkg/__init__.py", "home/pkg/mod.py")
    assert find_package_root(tmp_path / "home/pkg/mod.py", home=tmp_path / "home") == (tmp_path / "home").resolve()


def test_env_override_wins_and_is_validated(tmp_path: Path, monkeypatch) -> None:
    touch(tmp_path, "proj/pyproject.toml", "proj/x.py", "elsewhere/y.py")
    monkeypatch.setenv("KINETIC_PACKAGE_ROOT", str(tmp_path / "elsewhere"))
    assert find_package_root(tmp_path / "proj/x.py", home=tmp_path) == (tmp_path / "elsewhere").resolve()
    monkeypatch.setenv("KINETIC_PACKAGE_ROOT", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="KINETIC_PACKAGE_ROOT.*missing"):
        find_package_root(tmp_path / "proj/x.py", home=tmp_path)


# ------------------------------------------------------------------------------------------- plan


def test_plan_paths_are_relative_to_the_root(tmp_path: Path) -> None:
    root = touch(tmp_path / "proj", "src/app/main.py")
    plan = make_plan(
        root,
        root / "src/app/main.py",
        cwd=str(root / "src"),
        sys_path=[str(root / "src"), "/usr/lib/python3.11", str(root), "", str(root / "src")],
    )
    assert plan == {
        "package_root": str(root.resolve()),
        "entry_rel": "src/app/main.py",
        "client_cwd_rel": "src",
        "sys_path_rel": ["src", "."],
    }
    outside = make_plan(root, root / "src/app/main.py", cwd=str(tmp_path), sys_path=[])
    assert outside["client_cwd_rel"] is None and outside["sys_path_rel"] == []


def test_plan_json_is_in_the_archive(tmp_path: Path) -> None:
    root = touch(tmp_path / "proj", "main.py")
    plan = make_plan(root, root / "main.py", cwd=str(root), sys_path=[str(root)])
    path, digest = build_context_zip(root, tmp_path / "out" / "context.zip", plan=plan)
    with zipfile.ZipFile(path) as archive:
        assert json.loads(archive.read(PLAN_ARCNAME)) == plan
        assert archive.read("main.py") == b"x"
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------- exclusions


@pytest.mark.parametrize("name", sorted(DEFAULT_EXCLUDED))
def test_default_exclusions_and_their_opt_out(tmp_path: Path, monkeypatch, name: str) -> None:
    entry = name if name == ".DS_Store" else f"{name}/inner.py"  # .DS_Store is a file, the rest dirs
    root = touch(tmp_path / "proj", "keep.py", entry, f"sub/{entry}", ".git/HEAD", "pkg/__pycache__/m.pyc")
    names = zip_names(root, tmp_path / "a.zip")
    assert "keep.py" in names
    assert not any(name in n.split("/") for n in names)
    monkeypatch.setenv("KINETIC_NO_DEFAULT_EXCLUDES", "1")
    kept = zip_names(root, tmp_path / "b.zip")
    assert any(name in n.split("/") for n in kept)
    assert not any(".git" in n.split("/") or "__pycache__" in n.split("/") for n in kept)


def test_kineticignore_comments_dir_only_and_anchoring(tmp_path: Path) -> None:
    root = touch(
        tmp_path / "proj",
        "keep.py",
        "data.log",
        "sub/deep.log",
        "build/out.o",
        "sub/build",
        "notes/a.md",
        "sub/notes/b.md",
        "top.tmp",
        "sub/top.tmp",
        "#literal",
    )
    (root / ".kineticignore").write_text("# a comment line\n*.log\n\nbuild/\n/top.tmp\nnotes/*.md\n  \n")
    assert zip_names(root, tmp_path / "c.zip") == {
        "keep.py",
        "sub/build",
        "sub/notes/b.md",
        "sub/top.tmp",
        "#literal",
        ".kineticignore",
    }


def test_data_paths_and_a_workspace_inside_the_root_are_excluded(tmp_path: Path, monkeypatch) -> None:
    root = touch(tmp_path / "proj", "main.py", "datasets/big/a.bin", "weights.bin", "khome/state.db")
    monkeypatch.setenv("KINETIC_HOME", str(root / "khome"))
    excluded = [Data(root / "datasets/big").local_path, Data(root / "weights.bin").local_path]
    assert zip_names(root, tmp_path / "d.zip", exclude_paths=excluded) == {"main.py"}


def test_modes_compression_and_streaming(tmp_path: Path, monkeypatch) -> None:
    root = touch(tmp_path / "proj", "small.py")
    (root / "big.txt").write_text("compressible " * 200)
    (root / "image.png").write_bytes(os.urandom(4096))
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "huge.bin").write_bytes(b"\x07" * 5000)
    monkeypatch.setattr(context_archive, "_STREAM_ABOVE", 4096)
    path, _ = build_context_zip(root, tmp_path / "e.zip", plan={})
    with zipfile.ZipFile(path) as archive:
        info = {i.filename: i for i in archive.infolist()}
        assert info["big.txt"].compress_type == zipfile.ZIP_DEFLATED
        assert {info[n].compress_type for n in ("small.py", "image.png", "huge.bin")} == {zipfile.ZIP_STORED}
        assert (info["run.sh"].external_attr >> 16) & 0o777 == 0o755
        assert archive.read("huge.bin") == b"\x07" * 5000
        assert archive.read("big.txt") == (root / "big.txt").read_bytes()
        assert archive.testzip() is None


def test_symlinked_directories_and_broken_links_are_skipped(tmp_path: Path) -> None:
    root = touch(tmp_path / "proj", "real/a.py", "outside/secret.txt")
    (root / "loop").symlink_to(root)
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "alias.py").symlink_to(root / "real/a.py")
    assert zip_names(root, tmp_path / "f.zip") == {"real/a.py", "outside/secret.txt", "alias.py"}


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nothere"):
        build_context_zip(tmp_path / "nothere", tmp_path / "g.zip", plan={})


# ------------------------------------------------------------------------------------------- cache


def test_unchanged_tree_reuses_the_cached_zip_and_a_touch_rebuilds(tmp_path: Path, monkeypatch) -> None:
    root = touch(tmp_path / "proj", "a.py", "b/c.py")
    writes = []
    real_write = context_archive._write_zip
    monkeypatch.setattr(context_archive, "_write_zip", lambda *a: (writes.append(1), real_write(*a))[1])

    _, first = build_context_zip(root, tmp_path / "1.zip", plan={"v": 1})
    _, again = build_context_zip(root, tmp_path / "2.zip", plan={"v": 1})
    assert (len(writes), again) == (1, first)
    assert (tmp_path / "2.zip").read_bytes() == (tmp_path / "1.zip").read_bytes()

    build_context_zip(root, tmp_path / "3.zip", plan={"v": 2})
    assert len(writes) == 2  # the plan is part of the key

    stat = (root / "b/c.py").stat()
    os.utime(root / "b/c.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # a touch, same content
    build_context_zip(root, tmp_path / "1.zip", plan={"v": 1})
    assert len(writes) == 3

    # A fresh file may change again within one tick of a coarse mtime clock: same size, same mtime.
    stat = (root / "b/c.py").stat()
    (root / "b/c.py").write_bytes(b"y")
    os.utime(root / "b/c.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    path, changed = build_context_zip(root, tmp_path / "1.zip", plan={"v": 1})
    assert len(writes) == 4 and changed != first
    with zipfile.ZipFile(path) as archive:
        assert archive.read("b/c.py") == b"y"


def test_files_untouched_for_a_while_are_keyed_by_stat_alone(tmp_path: Path, monkeypatch) -> None:
    root = touch(tmp_path / "proj", "a.py", "b/c.py")
    hour_ago = time.time() - 3600
    for path in (root / "a.py", root / "b/c.py"):
        os.utime(path, (hour_ago, hour_ago))
    reads = []
    real_sha = context_archive._sha256_file
    monkeypatch.setattr(context_archive, "_sha256_file", lambda path: (reads.append(path), real_sha(path))[1])
    _, first = build_context_zip(root, tmp_path / "1.zip", plan={})
    _, second = build_context_zip(root, tmp_path / "2.zip", plan={})
    assert first == second and reads == []


def test_cache_keeps_only_recent_archives_and_any_used_within_the_minute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(context_archive, "_CACHE_KEEP", 2)
    root = touch(tmp_path / "proj", "a.py")
    for version in range(4):
        build_context_zip(root, tmp_path / "out.zip", plan={"v": version})
    cache = Path(os.environ["KINETIC_HOME"]) / "cache" / "context"
    # every entry was just used: a submission may be uploading (sharing) any of them right now
    assert len(list(cache.glob("*.zip"))) == 4
    monkeypatch.setattr(context_archive, "_IN_USE_NS", 0)
    build_context_zip(root, tmp_path / "out.zip", plan={"v": 4})
    assert len(list(cache.glob("*.zip"))) == 2 and len(list(cache.glob("*.sha256"))) == 2


def test_same_tree_gives_identical_bytes_in_a_fresh_workspace(tmp_path: Path, monkeypatch) -> None:
    root = touch(tmp_path / "proj", "a.py", "b/c.py")
    _, first = build_context_zip(root, tmp_path / "1.zip", plan={})
    monkeypatch.setenv("KINETIC_HOME", str(tmp_path / "other-home"))
    _, second = build_context_zip(root, tmp_path / "2.zip", plan={})
    assert first == second


# ------------------------------------------------------------------------------------------- payload


@pytest.fixture
def temp_project(tmp_path: Path, monkeypatch):
    """A project whose modules are importable here but not in a fresh interpreter."""
    root = touch(tmp_path / "proj", "pyproject.toml")
    (root / "kn_helperpkg").mkdir()
    (root / "kn_helperpkg/__init__.py").write_text("")
    (root / "kn_helperpkg/helper.py").write_text("FACTOR = 3\ndef scale(x):\n    return x * FACTOR\n")
    (root / "kn_entry.py").write_text(
        "from kn_helperpkg import helper\n\ndef job(x, offset=0):\n    return helper.scale(x) + offset\n"
    )
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in ("kn_entry", "kn_helperpkg", "kn_helperpkg.helper"):
        sys.modules.pop(name, None)


def test_payload_runs_where_the_project_is_not_importable(temp_project: Path, tmp_path: Path) -> None:
    import kn_entry

    before = cloudpickle.list_registry_pickle_by_value()
    payload = build_payload(kn_entry.job, (2,), {"offset": 1}, {"A": "1"}, {"/mnt/x": {"ref": 1}}, temp_project)
    assert cloudpickle.list_registry_pickle_by_value() == before
    (tmp_path / "payload.pkl").write_bytes(payload)
    script = (
        "import sys, cloudpickle\n"
        "try:\n    import kn_helperpkg\n    sys.exit('project importable: test proves nothing')\n"
        "except ImportError:\n    pass\n"
        "p = cloudpickle.load(open(sys.argv[1], 'rb'))\n"
        "print(p['func'](*p['args'], **p['kwargs']), p['env_vars'], p['volumes'],\n"
        "      sorted(p['client_fingerprint']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "payload.pkl")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "7 {'A': '1'} {'/mnt/x': {'ref': 1}} ['cloudpickle', 'kinetic', 'python']"


def test_a_module_imported_after_an_earlier_submission_still_travels_by_value(temp_project: Path) -> None:
    """The modules under a root are remembered with the sys.modules they were found in: one imported later
    is found at the next submission."""
    build_payload(len, ((1,),), {}, {}, {}, temp_project)
    (temp_project / "kn_late.py").write_text("def late(x):\n    return x + 1\n")
    import kn_late

    try:
        assert b"kn_late.py" not in cloudpickle.dumps(kn_late.late)  # by name: no code, no file name
        # by value: its code travels, named by its file relative to the root
        assert b"kn_late.py" in build_payload(kn_late.late, (1,), {}, {}, {}, temp_project)
    finally:
        sys.modules.pop("kn_late", None)


def test_unpicklable_arguments_are_named(temp_project: Path) -> None:
    import kn_entry

    before = cloudpickle.list_registry_pickle_by_value()
    named = r"argument 'offset' \(kwargs\['offset'\]\) cannot be pickled: TypeError"
    with pytest.raises(PayloadError, match=named):
        build_payload(kn_entry.job, (1,), {"offset": threading.Lock()}, {}, {}, temp_project)
    with pytest.raises(PayloadError, match=r"argument 'x' \(args\[0\]\) cannot be pickled"):
        build_payload(kn_entry.job, (threading.Lock(),), {}, {}, {}, temp_project)
    with pytest.raises(PayloadError, match=r"argument args\[2\] cannot be pickled"):
        build_payload(lambda *a: a, (1, 2, threading.Lock()), {}, {}, {}, temp_project)
    assert cloudpickle.list_registry_pickle_by_value() == before


# ------------------------------------------------------------------------------------------- env


@pytest.fixture
def env(monkeypatch):
    for name in list(os.environ):
        monkeypatch.delenv(name)
    values = {
        "PATH": "/bin",
        "HOME": "/root",
        "PYTHONPATH": "/p",
        "LD_LIBRARY_PATH": "/l",
        "TMPDIR": "/t",
        "USER": "me",
        "VIRTUAL_ENV": "/v",
        "CONDA_PREFIX": "/c",
        "SHELL": "/bin/sh",
        "SSH_AUTH_SOCK": "/s",
        "WANDB_MODE": "offline",
        "WANDB_PROJECT": "p1",
        "HF_HOME": "/hf",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def test_exact_names_and_prefix_patterns(env) -> None:
    captured, messages = capture_env(["HF_HOME", "WANDB_*", "MISSING_ONE"])
    assert captured == {"HF_HOME": "/hf", "WANDB_MODE": "offline", "WANDB_PROJECT": "p1"}
    assert messages == ["capture_env_vars: 'MISSING_ONE' is not set and is not captured"]


def test_wildcards_never_capture_the_blocklist_but_exact_names_do(env) -> None:
    def wildcard(pattern: str) -> set[str]:
        return set(capture_env([pattern])[0]) - {"PYTEST_CURRENT_TEST"}  # pytest sets it after fixtures

    assert wildcard("*") == {"WANDB_MODE", "WANDB_PROJECT", "HF_HOME"}
    for prefix in ("P*", "LD_*", "T*", "U*", "V*", "C*", "S*", "H*"):
        assert wildcard(prefix) <= {"HF_HOME"}
    assert capture_env(["PATH", "LD_LIBRARY_PATH"])[0] == {"PATH": "/bin", "LD_LIBRARY_PATH": "/l"}


def test_secret_looking_names_warn(env, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "t")
    monkeypatch.setenv("DB_PASSWORD", "p")
    with pytest.warns(SensitiveEnvWarning) as record:
        captured, messages = capture_env(["HF_*", "DB_PASSWORD"])
    assert captured == {"DB_PASSWORD": "p", "HF_HOME": "/hf", "HF_TOKEN": "t"}
    assert len(record) == 2 and len(messages) == 2
    assert "HF_TOKEN" in messages[1] and "DB_PASSWORD" in messages[0]


@pytest.mark.parametrize("bad", [["A*B"], ["*X"], [""], [3], "HF_TOKEN"])
def test_invalid_patterns_raise_before_capturing(env, bad, recwarn) -> None:
    with pytest.raises(ValueError, match="capture_env_vars"):
        capture_env(bad)
    assert not recwarn.list


def test_none_captures_nothing() -> None:
    assert capture_env(None) == ({}, [])


def test_module_root_finds_a_step_module_on_sys_path_without_importing_it(tmp_path: Path, monkeypatch) -> None:
    from kinetic_tui.core.submission.packaging import module_root

    project = touch(tmp_path / "proj", "pyproject.toml", "core/__init__.py", "core/steps.py", "solo.py")
    (project / "core" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(project))
    assert module_root("core.steps") == project.resolve()
    assert module_root("solo") == project.resolve()
    assert "core.steps" not in sys.modules
    assert module_root("no_such_module_anywhere.steps") is None
    assert module_root("json") is None  # the standard library travels with the job's interpreter


# Every name Kinetic's wildcard blocklist holds (kinetic/core/core.py, _WILDCARD_ENV_BLOCKLIST).
KINETIC_WILDCARD_BLOCKLIST = (
    "PATH",
    "HOME",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "SHELL",
    "TMPDIR",
    "TEMP",
    "TMP",
    "HOSTNAME",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "KUBERNETES_SERVICE_HOST",
    "KERAS_BACKEND",
)


def test_a_wildcard_skips_every_name_kinetic_skips_and_an_exact_name_still_captures(monkeypatch) -> None:
    for name in KINETIC_WILDCARD_BLOCKLIST:
        monkeypatch.setenv(name, f"client-{name}")
    monkeypatch.setenv("KERAS_HOME", "/keras")
    captured = capture_env(["*"])[0]
    assert not set(KINETIC_WILDCARD_BLOCKLIST) & set(captured)
    assert capture_env(["KERAS_*"])[0] == {"KERAS_HOME": "/keras"}
    exact = capture_env(list(KINETIC_WILDCARD_BLOCKLIST))[0]
    assert exact == {name: f"client-{name}" for name in KINETIC_WILDCARD_BLOCKLIST}
