"""Shared by the infra tests: a Pulumi mock runtime that records what a program declares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pulumi

PROJECT = "acme-ml"
Resources = dict[str, tuple[str, dict[str, Any]]]


class RecordingMocks(pulumi.runtime.Mocks):
    """Inputs become outputs; every resource is recorded by logical name as (type, inputs).

    Besides a fake id, only the computed fields the program reads are added: service-account emails and
    members, and the cluster endpoint.
    """

    def __init__(self) -> None:
        self.resources: Resources = {}
        self.providers: dict[str, str | None] = {}  # logical name -> provider reference

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources[args.name] = (args.typ, args.inputs)
        self.providers[args.name] = args.provider
        outputs = dict(args.inputs)
        if args.typ == "gcp:serviceaccount/account:Account":
            email = f"{args.inputs['accountId']}@{PROJECT}.iam.gserviceaccount.com"
            outputs |= {"email": email, "member": f"serviceAccount:{email}"}
        if args.typ == "gcp:container/cluster:Cluster":
            outputs["endpoint"] = "203.0.113.10"
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


def run_under_mocks(body: Callable[[], Mapping[str, pulumi.Output] | None]) -> tuple[RecordingMocks, dict[str, Any]]:
    """Run a Pulumi program body under fresh mocks; return (the mocks with their records, resolved outputs)."""
    mocks = RecordingMocks()
    # Pulumi's runtime asks asyncio for the current loop; an earlier asyncio.run() may have left none.
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.set_mocks(mocks, project="kinetic", stack="test", preview=False)
    outputs: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> pulumi.Output:
        return pulumi.Output.all(**(body() or {})).apply(outputs.update)

    run()
    return mocks, outputs
