"""The `handle.json` record of a job, written so that this package and Kinetic each read the other's.

Kinetic's loader keeps the keys it knows and needs `job_id, backend, project, cluster_name, zone, namespace,
bucket_name, k8s_name, image_uri, accelerator, func_name, display_name, created_at`; it ignores the rest.
So a record written here holds Kinetic's keys with Kinetic's meanings (`created_at` an ISO-8601 UTC string,
whole seconds) plus this package's own: `cluster` and `bucket` (what earlier versions and the backends read),
`submitted_at` (the exact submission time as epoch seconds: whole seconds cannot order a fast batch),
`num_nodes`, `pool`, `profile`, `result_uri` and `output_dir`.

`normalize` turns any of the three shapes (this version's, an earlier version's with a numeric
`created_at` and no Kinetic keys, Kinetic's) into this version's, deriving what a shape lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.backends.kinds import kind
from kinetic_tui.core.errors import ValidationError

# Kinetic's names for fields this package first named otherwise: (Kinetic's key, this package's key)
ALIASES = (("cluster_name", "cluster"), ("bucket_name", "bucket"))
KINETIC_REQUIRED = (
    "job_id",
    "backend",
    "project",
    "cluster_name",
    "zone",
    "namespace",
    "bucket_name",
    "k8s_name",
    "image_uri",
    "accelerator",
    "func_name",
    "display_name",
    "created_at",
)


def iso_utc(epoch: float) -> str:
    """`2026-12-01T19:55:52Z`: the timestamp shape Kinetic writes."""
    return datetime.fromtimestamp(epoch, UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def epoch_of(value: object, field: str) -> float:
    """Epoch seconds from a number (an earlier version's `created_at`) or an ISO-8601 string (Kinetic's)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    raise ValidationError(f"{field}: expected an ISO-8601 time like 2026-01-31T12:00:00Z, got {value!r}")


def submitted_at(record: Mapping[str, Any]) -> float:
    """When the job was submitted, from whichever shape of record this is."""
    if "submitted_at" in record:
        return epoch_of(record["submitted_at"], "job handle's submitted_at")
    return epoch_of(record.get("created_at"), "job handle's created_at")


def normalize(record: Mapping[str, Any]) -> dict[str, Any]:
    """This version's record from any shape; ValidationError naming the missing keys when it cannot be."""
    out = dict(record)
    for kinetic_key, ours in ALIASES:
        if kinetic_key not in out and ours in out:
            out[kinetic_key] = out[ours]
        if ours not in out and kinetic_key in out:
            out[ours] = out[kinetic_key]
    if "k8s_name" not in out and "job_id" in out:
        out["k8s_name"] = out["job_id"]
    out.setdefault("image_uri", "")
    missing = [key for key in KINETIC_REQUIRED if key not in out]
    if missing:
        raise ValidationError(f"job handle is missing {', '.join(missing)}")
    when = submitted_at(out)
    out["submitted_at"] = when
    out["created_at"] = out["created_at"] if isinstance(out["created_at"], str) else iso_utc(when)
    for key in ("group_id", "group_kind", "group_index", "pool", "profile"):
        out.setdefault(key, None)
    out.setdefault("debug", False)
    bucket, job_id = out["bucket_name"], out["job_id"]
    gcs = not kind(out["backend"], "job handle: ").on_this_machine  # a Kinetic job's files are in its GCS bucket
    out.setdefault("result_uri", f"gs://{bucket}/{job_id}/result.pkl" if gcs else "")
    out.setdefault("output_dir", f"gs://{bucket}/outputs/{job_id}" if gcs else "")
    if "num_nodes" not in out:
        out["num_nodes"] = _nodes_of(out["accelerator"])
    return out


def _nodes_of(accelerator: object) -> int:
    """The hosts a Kinetic record's accelerator spans (1 when this package's grammar does not parse it)."""
    try:
        return parse_accelerator(str(accelerator)).num_nodes
    except ValueError:
        return 1
