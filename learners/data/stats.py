"""Token-length statistics of a dataset with the model's tokenizer, and the rows its chat template rejects."""
from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from yeto.learners.data.tokenize import IGNORE, METHODS, ChatEncoder, Encoded

BATCH = 512


@dataclass
class TokenStats:
    tokenizer: str
    masking: str              # generation-markers | prefix-rendering | all-tokens
    num_rows: int
    num_tokens: int
    num_trainable: int
    min: int
    mean: float
    p50: int
    p95: int
    max: int
    seq_len: int
    num_over_seq_len: int     # rows split into pieces of seq_len tokens (never dropped)
    num_without_trainable: int  # rows whose mask leaves nothing to learn (e.g. all assistant turns empty)

    @property
    def masking_text(self) -> str:
        return METHODS[self.masking]


class TokenCounter:
    """Token lengths counted batch by batch as rows stream past: nothing of a row is kept but its two counts."""

    def __init__(self, tokenizer, spec) -> None:
        self.encoder, self.spec = ChatEncoder(tokenizer, train_on=spec.train_on), spec
        self.lengths, self.trainable = array("q"), array("q")

    def add(self, pairs: list) -> list:
        """Count (row, Example) pairs (BATCH at a time is fastest); returns (row, example, reason) for rejected rows."""
        errors = []
        for (row, example), enc in zip(pairs, self.encoder.encode([e for _, e in pairs])):
            if isinstance(enc, Encoded):
                self.lengths.append(len(enc.input_ids))
                self.trainable.append(sum(1 for x in enc.labels[1:] if x != IGNORE))
            else:
                errors.append((row, example, str(enc)))
        return errors

    def stats(self) -> TokenStats:
        n, t = np.asarray(self.lengths or [0]), np.asarray(self.trainable, dtype=np.int64)
        return TokenStats(
            tokenizer=self.encoder.name, masking=self.encoder.method, num_rows=len(self.lengths),
            num_tokens=int(n.sum()), num_trainable=int(t.sum()), min=int(n.min()), mean=round(float(n.mean()), 1),
            p50=int(np.percentile(n, 50)), p95=int(np.percentile(n, 95)), max=int(n.max()), seq_len=self.spec.seq_len,
            num_over_seq_len=int((n > self.spec.seq_len).sum()), num_without_trainable=int((t == 0).sum()))

