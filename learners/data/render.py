"""The human-readable text of a CheckReport."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # check.py renders through this module: a runtime import back would be a cycle
    from yeto.learners.data.check import CheckReport

MAX_LISTED = 20      # bad rows shown with their reason


def render_report(r: CheckReport) -> str:
    lines = [f"data: {r.source}" + (f" (revision {r.revision})" if r.revision else ""),
             f"rows: {r.num_rows} ({r.num_good} good, {r.num_bad} bad)"]
    if r.formats:
        lines.append("formats: " + ", ".join(f"{fmt} {n}" for fmt, n in sorted(r.formats.items())))
    for file, counts in r.mixed_files.items():
        lines.append(f"note: {file} mixes formats: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if r.bad_rows:
        lines.append(f"bad rows (first {min(MAX_LISTED, r.num_bad)} of {r.num_bad}):")
        lines += [f"  {b.where}: {b.reason}" for b in r.bad_rows[:MAX_LISTED]]
    t = r.tokens
    if t is not None:
        lines.append(f"tokens ({t.tokenizer}): {t.num_tokens} in {t.num_rows} rows, {t.num_trainable} trained on; "
                     f"per row min {t.min}, mean {t.mean}, p50 {t.p50}, p95 {t.p95}, max {t.max}")
        lines.append(f"masking: {t.masking_text}")
        if t.num_over_seq_len:
            lines.append(f"note: {t.num_over_seq_len} rows exceed --seq-len {t.seq_len}; they are split into "
                         f"pieces of {t.seq_len} tokens, nothing is dropped")
        if t.num_without_trainable:
            lines.append(f"note: {t.num_without_trainable} rows have no trained tokens after masking")
    lines += [f"note: {n}" for n in r.notes]
    if r.num_bad and r.on_bad_rows == "error":
        lines.append(f"error: {r.num_bad} bad rows; fix them, or pass --on-bad-rows skip to train without them")
    elif r.num_bad:
        lines.append(f"skipping {r.num_bad} bad rows (--on-bad-rows skip); the run's tape records which")
    lines.append("ok" if r.ok else "not ok")
    return "\n".join(lines)
