"""Benchmark: an unchanged rerun of a 10k-step pipeline (every step a cache hit) against planning that DAG.

Goal: the rerun costs <= 3x the planning time, i.e. per step a rerun may spend about as much as a
few planning passes: one key (canonical JSON + SHA-256) and one cache lookup. Planning here is the same
measure as bench_pipeline_planning's: build the Pipeline from its step definitions and call
topological_order(). Both alternate within one run; the medians are compared.
"""

from __future__ import annotations

from bench_pipeline_planning import interleaved_medians, random_dag_steps

from kinetic_tui.core.platform.pipelines import Pipeline, StepStatus

GOAL = 3.0
STEPS = 10_000


def main() -> None:
    steps = random_dag_steps(STEPS)
    pipeline = Pipeline("bench", steps)
    first = pipeline.run()
    assert len(first.executed()) == STEPS, "the first run must execute every step"

    def rerun() -> None:
        run = pipeline.run()
        assert not run.executed() and all(r.status is StepStatus.CACHED for r in run.steps.values())

    medians = interleaved_medians(
        {
            "candidate": rerun,
            "baseline": lambda: Pipeline("bench", steps).topological_order(),
        },
        repeats=21,
    )
    ratio = medians["candidate"] / medians["baseline"]
    verdict = "meets" if ratio <= GOAL else "MISSES"
    print(
        f"{STEPS} steps: unchanged rerun {medians['candidate'] * 1e3:.1f} ms, planning "
        f"{medians['baseline'] * 1e3:.1f} ms, ratio {ratio:.2f}x (goal <= {GOAL:.1f}x: {verdict})"
    )


if __name__ == "__main__":
    main()
