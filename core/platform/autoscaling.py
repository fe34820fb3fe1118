"""Endpoint autoscaling: a deterministic target-tracking scaler driven by caller-supplied ticks.

Ticks come from the caller (the console's clock) rather than wall time so that a scaling history can be
replayed, tested and restored exactly. One `last_scale_tick` serves both directions: a scale-out right
after a scale-in waits for the scale-out cooldown, measured from that scale-in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, NamedTuple

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.validation import (
    MAX_CONCURRENCY,
    MAX_INSTANCES,
    MAX_TICK,
    require_int,
    require_name,
    require_number,
)

ACTIONS = ("none", "scale_out", "scale_in", "hold", "reconfigure")


class ScalingEvent(NamedTuple):
    tick: float | None
    concurrency: float
    desired: int
    instance_count: int
    action: str


@dataclass(frozen=True)
class ScalingConfig:
    """Validated as a whole so `reconfigure` can swap it atomically: a bad value leaves the old one."""

    min_instances: int = 1
    max_instances: int = 5
    target_per_instance: float = 10
    scale_out_cooldown: float = 3
    scale_in_cooldown: float = 5

    def __post_init__(self) -> None:
        require_int("min_instances", self.min_instances, 1, MAX_INSTANCES)
        require_int("max_instances", self.max_instances, 1, MAX_INSTANCES)
        if self.max_instances < self.min_instances:
            raise ValidationError(
                f"max_instances: must be >= min_instances ({self.min_instances}), got {self.max_instances}"
            )
        require_number(
            "target_per_instance", self.target_per_instance, minimum=0, exclusive=True, maximum=MAX_CONCURRENCY
        )
        require_number("scale_out_cooldown", self.scale_out_cooldown, minimum=0, maximum=MAX_TICK)
        require_number("scale_in_cooldown", self.scale_in_cooldown, minimum=0, maximum=MAX_TICK)


class Endpoint:
    """Instance count, cooldown clock and the full history of observations."""

    def __init__(
        self,
        name: str,
        min_instances: int = 1,
        max_instances: int = 5,
        target_per_instance: float = 10,
        scale_out_cooldown: float = 3,
        scale_in_cooldown: float = 5,
    ) -> None:
        self.name = require_name("name", name)
        self._config = ScalingConfig(
            min_instances, max_instances, target_per_instance, scale_out_cooldown, scale_in_cooldown
        )
        self._instance_count = min_instances
        self._last_scale_tick: float | None = None
        self._last_tick: float | None = None
        self._history: list[ScalingEvent] = []

    @property
    def config(self) -> ScalingConfig:
        return self._config

    # The current bounds and cooldowns (see `reconfigure`).
    @property
    def min_instances(self) -> int:
        return self._config.min_instances

    @property
    def max_instances(self) -> int:
        return self._config.max_instances

    @property
    def target_per_instance(self) -> float:
        return self._config.target_per_instance

    @property
    def scale_out_cooldown(self) -> float:
        return self._config.scale_out_cooldown

    @property
    def scale_in_cooldown(self) -> float:
        return self._config.scale_in_cooldown

    @property
    def instance_count(self) -> int:
        return self._instance_count

    @property
    def last_scale_tick(self) -> float | None:
        return self._last_scale_tick

    @property
    def last_tick(self) -> float | None:
        return self._last_tick

    @property
    def history(self) -> list[ScalingEvent]:
        return list(self._history)

    def desired_instances(self, concurrency: float) -> int:
        require_number("concurrency", concurrency, maximum=MAX_CONCURRENCY)
        if concurrency <= 0:
            return self.min_instances
        wanted = math.ceil(concurrency / self.target_per_instance)
        return max(self.min_instances, min(self.max_instances, wanted))

    def observe(self, concurrency: float, now_tick: float) -> int:
        desired = self.desired_instances(concurrency)
        require_number("now_tick", now_tick, maximum=MAX_TICK)
        if self._last_tick is not None and now_tick < self._last_tick:
            raise ValidationError(f"now_tick: {now_tick} is earlier than the last tick {self._last_tick}")
        if desired == self._instance_count:
            action = "none"
        else:
            growing = desired > self._instance_count
            cooldown = self.scale_out_cooldown if growing else self.scale_in_cooldown
            if self._last_scale_tick is not None and now_tick - self._last_scale_tick < cooldown:
                action = "hold"
            else:
                action = "scale_out" if growing else "scale_in"
                self._instance_count = desired
                self._last_scale_tick = now_tick
        self._last_tick = now_tick
        self._history.append(ScalingEvent(now_tick, concurrency, desired, self._instance_count, action))
        return self._instance_count

    def reconfigure(
        self,
        min_instances: int | None = None,
        max_instances: int | None = None,
        target_per_instance: float | None = None,
        scale_out_cooldown: float | None = None,
        scale_in_cooldown: float | None = None,
    ) -> int:
        """Re-clamp at once (an operator's bound is not subject to cooldown) and return the count.

        The clamp does not stamp `last_scale_tick`: it is not an autoscaler decision. The event records
        the last observed concurrency and what the new config would want for it.
        """
        changes: dict[str, Any] = {  # ScalingConfig validates every value
            key: value
            for key, value in (
                ("min_instances", min_instances),
                ("max_instances", max_instances),
                ("target_per_instance", target_per_instance),
                ("scale_out_cooldown", scale_out_cooldown),
                ("scale_in_cooldown", scale_in_cooldown),
            )
            if value is not None
        }
        self._config = replace(self._config, **changes)
        self._instance_count = max(self.min_instances, min(self.max_instances, self._instance_count))
        concurrency = self._history[-1].concurrency if self._history else 0
        self._history.append(
            ScalingEvent(
                self._last_tick, concurrency, self.desired_instances(concurrency), self._instance_count, "reconfigure"
            )
        )
        return self._instance_count

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **asdict(self._config),
            "instance_count": self._instance_count,
            "last_scale_tick": self._last_scale_tick,
            "last_tick": self._last_tick,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], history: Iterable[ScalingEvent]) -> Endpoint:
        """Rebuild after a restart so the cooldown clock and the backwards-tick check carry on."""
        keys = ["name", *(f.name for f in fields(ScalingConfig)), "instance_count", "last_scale_tick", "last_tick"]
        missing = [key for key in keys if key not in record]
        if missing:
            raise ValidationError(f"record: missing {', '.join(missing)}")
        endpoint = cls(record["name"], *(record[f.name] for f in fields(ScalingConfig)))
        count = require_int("instance_count", record["instance_count"], endpoint.min_instances)
        if count > endpoint.max_instances:
            raise ValidationError(f"instance_count: must be <= max_instances ({endpoint.max_instances}), got {count}")
        last_scale, last = (
            None if record[key] is None else require_number(key, record[key])
            for key in ("last_scale_tick", "last_tick")
        )
        if last_scale is not None and (last is None or last_scale > last):
            raise ValidationError(f"last_scale_tick: {last_scale} is after the last tick {last}")
        try:
            events = [ScalingEvent._make(event) for event in history]
        except TypeError as error:
            raise ValidationError(f"history: each event needs {', '.join(ScalingEvent._fields)}") from error
        bad = [event.action for event in events if event.action not in ACTIONS]
        if bad:
            raise ValidationError(f"history: unknown action {bad[0]!r}; choose from {', '.join(ACTIONS)}")
        endpoint._instance_count, endpoint._last_scale_tick, endpoint._last_tick = count, last_scale, last
        endpoint._history = events
        return endpoint
