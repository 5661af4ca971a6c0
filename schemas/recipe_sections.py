"""The launch recipe's run-level sections (schemas/launch_recipe.py): limits, timeouts, prices and the data check."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from yeto.schemas.train_section import Count, Section

PosFloat = Annotated[float, Field(gt=0)]
TIMEOUTS = ("recover_timeout_s", "heartbeat_timeout_s", "startup_timeout_s", "final_ack_timeout_s",
            "final_cut_timeout_s", "max_crashes")


class Limits(Section):
    """When a run ends (None = no limit): the finalizer cuts on tokens, time and spend; learners stop at max_steps."""

    max_steps: Annotated[int, Field(ge=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_time_s: PosFloat | None = None
    max_spend: PosFloat | None = None


class Timeouts(Section):
    """How long the launcher and finalizer wait (services/launcher/logic.py, services/finalizer/logic.py)."""

    recover_timeout_s: Annotated[float, Field(ge=0)] = 600.0
    """A lost island not back within this is dropped (--recover-timeout)."""
    heartbeat_timeout_s: Annotated[float, Field(ge=0)] = 300.0
    """The cap on an island's silence after its first progress (--heartbeat-timeout): preempted sooner once its pace
    says so (at least 60 s, services/launcher/liveness.py), after this long where it cannot (docs/LAUNCH.md)."""
    startup_timeout_s: Annotated[float, Field(ge=0)] = 1800.0
    """An island with no progress this long after its start is preempted."""
    final_ack_timeout_s: Annotated[float, Field(ge=0)] = 30.0
    """The final cut waits this long for learners' acknowledgements."""
    final_cut_timeout_s: Annotated[float, Field(ge=0)] = 900.0
    """The final cut fails when the syncer has not answered within this."""
    max_crashes: Count = 3
    """An island that crashed this many times before any progress is dropped, not restarted."""


class Prices(Section):
    """What the run costs beyond its islands (whose prices are in the fleet)."""

    head_price_per_hour: Annotated[float, Field(ge=0, le=1e6)] = 0.0
    budget_per_hour: Annotated[float, Field(gt=0, le=1e6)] | None = None
    """`--budget-per-hour` the planner picked the fleet under (islands with the margin, plus the head); a move of a
    refused island keeps the fleet within it (services/planner/move_budget.py). None: the run gave none."""
    price_margin: Annotated[float, Field(ge=0, le=10)] | None = None
    """`--price-margin` (default 0.10); without a budget a move keeps the fleet within the launched fleet's price x
    (1 + margin). None: a recipe from before 2026-12-05, whose moves keep to the refused price + 10 %."""


class DataCheck(Section):
    """The launch's data check (yeto/cli/launch/checks.py): the DataChecked event and the manifest's `data`."""

    source: str = ""
    revision: str | None = None
    fingerprint: str | None = None
    num_rows: Count = 0
    num_bad: Count = 0
    data_format: str = "auto"
    on_bad_rows: Literal["error", "skip"] = "error"
    formats: dict[str, int] = Field(default_factory=dict)
    num_tokens: Count | None = None
    num_over_seq_len: Count | None = None
    masking: str | None = None
    skipped: list[str] = Field(default_factory=list)
