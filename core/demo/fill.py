"""`kinetic-tui --demo`: a separate workspace filled by really running work through the Console.

Nothing is faked: every pool, job, training, study, version, endpoint decision and pipeline run below is
made by the same Console calls a user's keys, command bar or script would make, so the demo doubles as an
end-to-end smoke test of the core. Quick steps come first so the UI has something to show within a second.

Re-starting the demo starts it over: `demo_home()` wipes the demo workspace (and only a directory marked as
one) before the Console opens it, because reusing a half-filled workspace would collide with the names the
scenario creates. `fill` refuses any workspace without the marker, so it can never touch a real home.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetic_tui.core.console import Console
from kinetic_tui.core.console.endpoint_processes import stop_all
from kinetic_tui.core.errors import KineticError, ValidationError, one_line
from kinetic_tui.core.events import Event
from kinetic_tui.core.supervisor import process as supervisor

MARKER = ".kinetic-demo"
WORKLOAD = "kinetic_tui.core.demo.workload"
GROUP = "fraud-detector"
ENDPOINT = "fraud-endpoint"
PIPELINE_REF = "kinetic_tui.core.demo.canonical:canonical_pipeline"
PIPELINE = "canonical"
BASELINE, PREEMPTIBLE, RESUMED, STUDY = "fraud-baseline", "fraud-preemptible", "fraud-resumed", "fraud-sweep"
LONG_JOB, FAILING_JOB, MULTI_HOST_JOB = "metrics-stream", "score-corrupt-batch", "allreduce-v4"
LONG_JOB_SECONDS = 120.0
STEP_PAUSE = 0.5  # seconds between steps at pace 1
INTERRUPT_BEFORE_EPOCH = 3
# (pool, accelerator, nodes, spot): emulated on this machine's CPU; v4-2x2x2 is a two-host slice.
POOLS = (
    ("tpu-v5e", "v5litepod-2x2", 2, False),
    ("gpu-l4", "l4x1", 2, False),
    ("tpu-v4-multi", "v4-2x2x2", 2, False),
    ("gpu-l4-spot", "l4x1", 1, True),
)
# (name, accelerator) of the short jobs whose logs arrive over a couple of seconds.
SHORT_JOBS = (("ingest-shards", "cpu"), ("featurize", "v5litepod-2x2"), ("embed-l4", "l4x1"))
# (concurrency, ticks): rising, a plateau, then falling, so the history shows scale_out, hold and scale_in.
LOAD_PATTERN = ((10, 1), (25, 1), (45, 3), (20, 2), (5, 4))
CHANGED_PARAMS = {"raw_rows": 800, "threshold": 0.99}


@dataclass(frozen=True)
class DemoProgress(Event):
    """Published on the console's event bus (and to the callback) after each step of the scenario."""

    step: int
    total: int
    label: str

    def __str__(self) -> str:
        return f"demo: {self.step}/{self.total} {self.label}"


ProgressCallback = Callable[[DemoProgress], None]


def demo_home(fresh: bool = True) -> Path:
    """The demo workspace (`$KINETIC_DEMO_HOME`, default `~/.kinetic-demo`); `fresh` wipes and re-creates it.

    Wiping first stops the previous demo's endpoints and its supervisor (which lingers after its last duty and
    would otherwise go on serving the deleted workspace's files). Refuses (ValidationError) a directory that is, or
    contains, the real KINETIC_HOME, and a non-empty one
    without the demo marker: a mistyped KINETIC_DEMO_HOME must never cost anyone their files.
    """
    root = Path(os.environ.get("KINETIC_DEMO_HOME") or Path.home() / ".kinetic-demo").expanduser().resolve()
    real = Path(os.environ.get("KINETIC_HOME") or Path.home() / ".kinetic").expanduser().resolve()
    holds_real = (root == real or root in real.parents) and not (real / MARKER).is_file()
    if holds_real or root == Path.home().resolve():
        raise ValidationError(
            f"KINETIC_DEMO_HOME={str(root)!r} would hold the real workspace {str(real)!r}; "
            f"point it at a directory of its own, e.g. ~/.kinetic-demo"
        )
    if root.is_dir() and any(root.iterdir()) and not (root / MARKER).is_file():
        raise ValidationError(
            f"KINETIC_DEMO_HOME={str(root)!r} is not empty and not a demo workspace (no {MARKER} "
            f"file); point it at a new directory"
        )
    if fresh and root.exists():
        with contextlib.suppress(KineticError):  # a store that cannot be opened has no endpoint to stop
            stop_all(root)  # the previous demo's endpoints: their routers and instances serve from this home
        supervisor.stop(root)
        shutil.rmtree(root)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    root.chmod(0o700)  # mkdir's mode is filtered by the umask
    (root / MARKER).write_text("kinetic-tui demo workspace: `kinetic-tui --demo` wipes and refills it\n")
    return root


async def fill(console: Console, progress: ProgressCallback | None = None, *, pace: float = 1.0) -> None:
    """Run the whole scenario on `console`'s workspace, announcing each finished step.

    `pace` scales the pauses between steps and between the demo jobs' log lines (tests pass a small one);
    the long-running job always runs for LONG_JOB_SECONDS. `progress` is called on the event loop, so a UI
    may update widgets from it. A step that raises is announced as failed and re-raised.
    """
    home = console.workspace.store.path.parent
    if not (home / MARKER).is_file():
        raise ValidationError(
            f"demo: refusing to fill {str(home)!r}: it is not a demo workspace (no {MARKER} "
            f"file); open one with demo_home()"
        )
    if not pace > 0:  # NaN included
        raise ValidationError(f"pace must be > 0, got {pace!r}")
    scenario = _Scenario(console, pace)
    steps = scenario.steps()
    for number, (label, step) in enumerate(steps, start=1):
        try:
            await step()
        except Exception as exc:
            _announce(console, progress, DemoProgress(number, len(steps), f"failed at {label!r}: {one_line(exc)}"))
            raise
        _announce(console, progress, DemoProgress(number, len(steps), label))
        if number < len(steps):
            await asyncio.sleep(STEP_PAUSE * pace)  # long enough for a poll of the UI to show each stage


def _announce(console: Console, progress: ProgressCallback | None, event: DemoProgress) -> None:
    console.events.publish(event)
    if progress is not None:
        progress(event)


class _Scenario:
    """The steps in order; each one awaits its work so the next starts from settled state."""

    def __init__(self, console: Console, pace: float) -> None:
        self.console = console
        self.delay = 0.4 * pace
        self.settling: list[str] = []  # ids of the short jobs, waited for at the end

    def steps(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("emulated accelerator pools added", self.pools),
            ("jobs submitted", self.jobs),
            ("training run completed", self.train),
            (f"training stopped before epoch {INTERRUPT_BEFORE_EPOCH}, waiting for resume", self.interrupt),
            ("training interrupted and resumed", self.resume),
            ("tuning study finished", self.tune),
            ("registry versions in every stage", self.registry),
            ("endpoint serving three versions", self.endpoint),
            ("endpoint driven by a load pattern", self.load),
            ("pipeline run 1: fresh", self.pipeline_fresh),
            ("pipeline run 2: all cached", self.pipeline_cached),
            ("pipeline run 3: changed parameters", self.pipeline_changed),
            ("short jobs settled", self.settle),
            ("a failed job and a live one, newest", self.live),
        ]

    async def pools(self) -> None:
        for name, accelerator, nodes, spot in POOLS:
            await self.console.pools.add(name, accelerator, nodes, spot)

    async def _submit(self, func: str, accelerator: str, display_name: str, **kwargs: Any) -> str:
        job = await self.console.jobs.submit(
            f"{WORKLOAD}:{func}", accelerator, kwargs=kwargs, name=display_name, wait=False
        )
        return job.job_id

    async def jobs(self) -> None:
        for name, accelerator in SHORT_JOBS:
            self.settling.append(await self._submit("crunch", accelerator, name, name=name, delay=self.delay))
        self.settling.append(await self._submit("all_reduce", "v4-2x2x2", MULTI_HOST_JOB, delay=self.delay))

    async def train(self) -> None:
        await self.console.training.start(BASELINE, {"learning_rate": 0.2}, epochs=5, pool="tpu-v5e", wait=True)

    async def _preempted(self, name: str, learning_rate: float) -> None:
        await self.console.training.start(
            name,
            {"learning_rate": learning_rate},
            epochs=5,
            pool="tpu-v5e",
            interrupt_before_epoch=INTERRUPT_BEFORE_EPOCH,
            wait=True,
        )

    async def interrupt(self) -> None:
        """Left Stopped at its checkpoint: the training an operator finds waiting for `resume`."""
        await self._preempted(PREEMPTIBLE, 0.3)

    async def resume(self) -> None:
        await self._preempted(RESUMED, 0.35)
        await self.console.training.resume(RESUMED, wait=True)

    async def tune(self) -> None:
        await self.console.training.tune(
            STUDY, {"learning_rate": [0.1, 0.25, 0.4, 0.5]}, "grid", 4, pool="gpu-l4", wait=True
        )

    async def registry(self) -> None:
        """v1 ends Archived (v2 displaced it from Production), v2 Production, v3 (the best trial) Staging, v4 None."""
        study = await self.console.training.study(STUDY)
        best = next(trial for trial in study.trials if trial.trial_id == study.best)
        worst = max(study.trials, key=lambda trial: trial.metric)
        sources = [BASELINE, RESUMED, best.training, worst.training]
        for source in sources:
            await self.console.registry.register_from_training(GROUP, source, predict=f"{WORKLOAD}:score")
        for version, stage in ((1, "Staging"), (1, "Production"), (2, "Staging"), (2, "Production"), (3, "Staging")):
            await self.console.registry.promote(GROUP, version, stage)

    async def endpoint(self) -> None:
        """Two cache slots and three versions invoked in turn: the third load evicts the first."""
        await self.console.endpoints.create(
            ENDPOINT,
            GROUP,
            min_instances=1,
            max_instances=5,
            target_per_instance=5,
            scale_out_cooldown=2,
            scale_in_cooldown=3,
            max_loaded_models=2,
        )
        for route in (f"{GROUP}:v1", f"{GROUP}:v2", f"{GROUP}:v3", GROUP):
            await self.console.endpoints.invoke(ENDPOINT, route, {"amount": 42.0})

    async def load(self) -> None:
        for concurrency, ticks in LOAD_PATTERN:
            await self.console.endpoints.load(ENDPOINT, concurrency, ticks, wait=True)

    async def pipeline_fresh(self) -> None:
        await self.console.pipelines.register(PIPELINE_REF)
        await self.console.pipelines.run(PIPELINE, wait=True)

    async def pipeline_cached(self) -> None:
        await self.console.pipelines.rerun(PIPELINE, wait=True)

    async def pipeline_changed(self) -> None:
        await self.console.pipelines.rerun(PIPELINE, dict(CHANGED_PARAMS), wait=True)

    async def settle(self) -> None:
        for job_id in self.settling:
            await self.console.jobs.wait(job_id)

    async def live(self) -> None:
        """Last, so they head the jobs list: the newest failure (a remote traceback) and, newest of all, a
        job that keeps running with a growing log."""
        await self.console.jobs.wait(await self._submit("score_corrupt_batch", "cpu", FAILING_JOB, delay=self.delay))
        await self._submit("stream_metrics", "l4x1:spot", LONG_JOB, duration=LONG_JOB_SECONDS)
