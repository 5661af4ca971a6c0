"""Token-length statistics of a dataset with the model's tokenizer, and the rows its chat template rejects."""
from __future__ import annotations

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


def token_stats(examples: list, tokenizer, spec) -> tuple[TokenStats, list]:
    """`examples` are (row, Example) pairs; returns the stats and (row, example, reason) for rejected rows."""
    encoder = ChatEncoder(tokenizer, train_on=spec.train_on)
    lengths, trainable, errors = [], [], []
    for lo in range(0, len(examples), BATCH):
        chunk = examples[lo:lo + BATCH]
        for (row, example), enc in zip(chunk, encoder.encode([e for _, e in chunk])):
            if isinstance(enc, Encoded):
                lengths.append(len(enc.input_ids))
                trainable.append(sum(1 for x in enc.labels[1:] if x != IGNORE))
            else:
                errors.append((row, example, str(enc)))
    n = np.asarray(lengths or [0])
    stats = TokenStats(
        tokenizer=encoder.name, masking=encoder.method, num_rows=len(lengths), num_tokens=int(n.sum()),
        num_trainable=int(sum(trainable)), min=int(n.min()), mean=round(float(n.mean()), 1),
        p50=int(np.percentile(n, 50)), p95=int(np.percentile(n, 95)), max=int(n.max()), seq_len=spec.seq_len,
        num_over_seq_len=int((n > spec.seq_len).sum()), num_without_trainable=sum(1 for t in trainable if t == 0))
    return stats, errors
