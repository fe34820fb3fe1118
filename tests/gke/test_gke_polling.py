"""What a poll costs the Kubernetes API at scale, against kmock paging as the API server does
(tests/gke/listing.py): a big `map`'s poll makes a few list calls, not reads per input, and big lists go a
page at a time, starting again when a continue token expires."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.gke import backend as gke_backend
from kinetic_tui.core.backends.gke.backend import GkeError
from kinetic_tui.core.job_status import JobStatus
from tests.gke.kubelet import Cluster, KineticEmulator, cluster, kube
from tests.gke.seeding import seed_batch

__all__ = ["cluster", "kube"]  # fixtures


def emulator(c: Cluster) -> KineticEmulator:
    assert c.api.emulator is not None
    return c.api.emulator


def jobs(names: list[str], **labels: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": n, "labels": dict(labels)}} for n in names]


def test_a_poll_of_a_2000_input_map_makes_a_few_api_calls(cluster: Cluster) -> None:
    """max_concurrent=20, two of the twenty started inputs just finished: one poll lists the batch's Jobs (4
    pages of 500) and the live inputs' pods (1), and releases two suspended inputs (2 patches)."""
    seeded = seed_batch(cluster.api, cluster.storage(), cluster.namespace, count=2000, limit=20, finished=2)
    batch = kinetic.attach_batch(seeded.group_id)
    before = len(cluster.api.requests())

    statuses = batch.status_list()

    calls = cluster.api.requests()[before:]
    assert len(calls) <= 25, Counter(f"{r.method} {str(r.url).split('?')[0]}" for r in calls)
    assert Counter(statuses) == {JobStatus.SUCCEEDED: 2, JobStatus.RUNNING: 18, JobStatus.PENDING: 1980}
    patched = [str(r.url).split("?")[0].rsplit("/", 1)[-1] for r in calls if r.method == "PATCH"]
    assert patched == seeded.suspended[:2]  # the next two in input order, each released once


def test_10000_labelled_jobs_are_listed_a_page_at_a_time_each_once(cluster: Cluster) -> None:
    names = [f"job-{n:08x}" for n in range(10_000)]
    cluster.api.put("batch/v1/jobs", cluster.namespace, jobs(names, app="kinetic") + jobs(["not-ours"]))
    before = emulator(cluster).list_pages

    listed = cluster.backend().job_ids()

    assert emulator(cluster).list_pages - before == 20  # 10,000 / LIST_PAGE (500)
    assert Counter(listed) == Counter(names)  # every Job exactly once, and only the labelled ones
    pages = [r for r in cluster.api.requests() if r.method == "GET" and "limit" in r.params][-20:]
    assert {r.params["limit"] for r in pages} == {str(gke_backend.LIST_PAGE)}
    tokens = [r.params.get("continue") for r in pages]
    assert tokens[0] is None and len(set(tokens[1:])) == 19  # each the server's own token, followed as given


def test_an_expired_continue_token_starts_the_list_again(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gke_backend, "LIST_PAGE", 100)
    names = [f"job-{n:08x}" for n in range(1000)]
    cluster.api.put("batch/v1/jobs", cluster.namespace, jobs(names, app="kinetic"))
    pager = emulator(cluster).pager
    before, gone = pager.pages, pager.gone
    pager.expire_after = 3  # a compaction after the third page: its token answers 410 Gone

    listed = cluster.backend().job_ids()

    assert pager.gone - gone == 1
    assert pager.pages - before == 3 + 10  # the pages before the 410, then the whole list again
    assert Counter(listed) == Counter(names)  # nothing of the abandoned pages is kept twice


def test_a_list_that_keeps_expiring_gives_up_with_the_api_error(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gke_backend, "LIST_PAGE", 10)
    cluster.api.put("batch/v1/jobs", cluster.namespace, jobs([f"job-{n:08x}" for n in range(30)], app="kinetic"))
    pager = emulator(cluster).pager
    gone = pager.gone
    original = pager.page

    def always_expiring(*args: Any, **kwargs: Any) -> Any:
        pager.expire_after = 1  # every page's token is compacted away at once
        return original(*args, **kwargs)

    monkeypatch.setattr(pager, "page", always_expiring)
    with pytest.raises(GkeError, match="410 Gone"):
        cluster.backend().job_ids()
    assert pager.gone - gone == gke_backend.LIST_RESTARTS + 1
