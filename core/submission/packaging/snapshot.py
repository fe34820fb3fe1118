"""Code snapshots: a project's code packaged once and kept in the home, so later jobs ship exactly that code.

A training's attempts and a study's trials are submitted over hours by whichever process drives them (the
client, `resume` from any directory, the workspace supervisor), whose cwd and sys.path need not hold the
project, and the project may have changed or moved since. Each of them ships the snapshot taken when the
training or study started: the tree as context.zip packs it (exclusions and `.kineticignore` applied) with
the plan of imports and cwd it was packaged with. A snapshot is named by the digest of that archive, so the
same code packaged twice is kept once; it is never changed once written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.submission.packaging.archive import build_context_zip
from kinetic_tui.core.submission.packaging.plan import PLAN_ARCNAME, Imports, make_plan

DIGEST_RULE = re.compile(r"^[0-9a-f]{64}$")


def snapshots_dir() -> Path:
    path = kinetic_home() / "code"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def take_snapshot(root: Path) -> str:
    """Package `root` as a job submitted from this process would ship it now, keep it, return its digest."""
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        archive, digest = build_context_zip(root, Path(tmp) / "code.zip", plan=make_plan(root, None))
        target = snapshots_dir() / digest
        if not target.is_dir():
            _extract(archive, target)
    return digest


def open_snapshot(digest: str) -> tuple[Path, Imports]:
    """The snapshot's tree and the imports it was packaged with; ValidationError when it is gone."""
    if not isinstance(digest, str) or not DIGEST_RULE.match(digest):
        raise ValidationError(f"code snapshot {digest!r} is not a sha256 digest")
    root = kinetic_home() / "code" / digest
    try:
        plan = json.loads((root / PLAN_ARCNAME).read_text())
    except (OSError, ValueError):
        raise ValidationError(
            f"the code packaged when this work started ({root}) is missing or damaged; start it again"
        ) from None
    cwd = root if plan.get("client_cwd_rel") is None else root / plan["client_cwd_rel"]
    return root, Imports(tuple(str(root / rel) for rel in plan.get("sys_path_rel") or []), str(cwd))


def _extract(archive: Path, target: Path) -> None:
    """Unpack into a private staging directory, then rename it into place: a snapshot is whole or absent,
    and of two processes taking the same one at once, the second keeps the first's."""
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        with zipfile.ZipFile(archive) as members:
            for info in members.infolist():
                dest = staging / info.filename
                dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                mode = 0o700 if (info.external_attr >> 16) & 0o111 else 0o600
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                with members.open(info) as src, open(fd, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
