"""Events of the data area: the validated dataset, the bad rows skipped, and which learner rank reads which shard."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from yeto.schemas.base import Event, registry


@registry.register
class DataChecked(Event):
    """`--data` was read and validated before launch; the fingerprint pins exactly which rows a run trained on."""

    type: Literal["DataChecked"] = "DataChecked"
    version: Literal[1] = 1
    data: str                           # the --data value as given
    revision: str | None = None         # the Hub commit sha a dataset id was pinned to
    fingerprint: str                    # sha256 over every row's canonical JSON, in order
    data_format: str = "auto"
    num_rows: int
    num_bad: int = 0
    formats: dict[str, int] = Field(default_factory=dict)   # rows per detected format
    num_tokens: int | None = None       # with the model's tokenizer, when one was given
    num_over_seq_len: int | None = None
    masking: str | None = None          # generation-markers | prefix-rendering | all-tokens


@registry.register
class BadRowsSkipped(Event):
    """Under --on-bad-rows skip: how many rows were left out and which (the first `len(rows)` of them)."""

    type: Literal["BadRowsSkipped"] = "BadRowsSkipped"
    version: Literal[1] = 1
    num_skipped: int
    rows: list[str] = Field(default_factory=list)      # "file line N: reason" / "file row N: reason"


@registry.register
class ShardAssigned(Event):
    """A learner rank reads one shard of the data (disjoint, reshuffled per epoch by seed)."""

    type: Literal["ShardAssigned"] = "ShardAssigned"
    version: Literal[1] = 1
    learner: str
    rank: int
    shard: int
    num_shards: int
    seed: int = 0
    epoch: int = 0
    start_block: int = 0                # > 0 when a restarted learner resumes its shard


EXAMPLES = [
    DataChecked(id="ex-data-checked", run_id="demo-run", data="examples/data/chat_demo.jsonl", fingerprint="ab" * 32,
                num_rows=480, formats={"openai": 480}, num_tokens=61234, num_over_seq_len=0,
                masking="prefix-rendering", source="launcher"),
    BadRowsSkipped(id="ex-bad-rows-skipped", run_id="demo-run", num_skipped=2,
                   rows=["chat.jsonl line 7: empty conversation", "chat.jsonl line 19: message 2: unknown role 'narrator'"],
                   source="launcher"),
    ShardAssigned(id="ex-shard-assigned", run_id="demo-run", learner="island-0", rank=1, shard=1, num_shards=4,
                  seed=0, epoch=2, start_block=37, source="learner"),
]
