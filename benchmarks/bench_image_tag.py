"""Computing a bundled image tag vs hashing the same inputs raw.

The tag is computed on every GKE submission, in parallel with the upload, so it must stay negligible next to packaging
and upload. Candidate: `image_inputs` + `image_tag` for a 300-requirement pip-compile style file (each line
with two `--hash` options, comments and blank lines), reading the shipped runner and Dockerfile template from
disk, filtering/normalising the requirements and hashing. Baseline: one SHA-256 over the raw bytes of the
same inputs (read from disk too), i.e. the irreducible cost of hashing without any filtering. Rounds
interleave both and report medians. Goal: a tag in <= 5 ms.
Run: /tmp/venv/bin/python benchmarks/bench_image_tag.py
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import Callable

from kinetic_tui.infra.container_builder import RUNNER_PATH, TEMPLATE_PATH, image_inputs, image_tag

REQUIREMENTS, ROUNDS, GOAL_MS = 300, 41, 5.0
TEXT = "\n".join(
    f"# via package-{i % 17}\n\npackage_{i}[Extra]  >= 1.{i}, < 2 ; python_version >= '3.9' "
    f"--hash=sha256:{i:064x} --hash=sha256:{i + 1:064x}"
    for i in range(REQUIREMENTS)
)


def candidate() -> None:
    image_tag("acme-ml", "us-central1", "train", image_inputs("gpu", TEXT, package_version="0.1.0"))


def baseline() -> None:
    digest = hashlib.sha256()
    for part in (
        b"python:3.11-slim",
        b"gpu",
        b"0.1.0",
        TEXT.encode(),
        RUNNER_PATH.read_bytes(),
        TEMPLATE_PATH.read_bytes(),
    ):
        digest.update(part)
    digest.hexdigest()


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    candidate()  # warm imports and the page cache for both sides
    samples: dict[str, list[float]] = {"image_tag": [], "raw sha256": []}
    for _ in range(ROUNDS):
        samples["image_tag"].append(timed(candidate))
        samples["raw sha256"].append(timed(baseline))
    medians = {name: statistics.median(times) for name, times in samples.items()}
    for name, median in medians.items():
        print(f"{name:>10}: {median:7.3f} ms per tag ({REQUIREMENTS} requirements)")
    print(f"image_tag / raw sha256: {medians['image_tag'] / medians['raw sha256']:.1f}x")
    verdict = "met" if medians["image_tag"] <= GOAL_MS else "MISSED"
    print(f"goal: a tag in <= {GOAL_MS} ms: {verdict} ({medians['image_tag']:.3f} ms)")


if __name__ == "__main__":
    main()
