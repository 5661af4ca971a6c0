"""Stack blocks into torch tensors with an attention mask that keeps every document to itself.

attention="4d" (default): a (batch, 1, seq, seq) additive float mask, 0 where a query may attend (same segment,
causal) and the dtype's minimum elsewhere; transformers passes a 4D mask to eager and SDPA attention unchanged, in
every version. attention="packed": no mask; transformers >= 4.54 derives the same block-diagonal causal mask from
`position_ids` restarting at 0 (flash-attention, SDPA, eager), which avoids the seq^2 mask memory.
Padding is segment 0 and attends only to itself, so no row of the mask is empty (no NaN) and it takes no loss.
"""
from __future__ import annotations

from collections.abc import Sequence


def collate(blocks: Sequence, *, attention: str = "4d", dtype=None) -> dict:
    import torch
    if attention not in ("4d", "packed"):
        raise ValueError(f"attention must be '4d' or 'packed', got {attention!r}")
    batch = {
        "input_ids": torch.tensor([b.input_ids for b in blocks], dtype=torch.long),
        "labels": torch.tensor([b.labels for b in blocks], dtype=torch.long),
        "position_ids": torch.tensor([b.position_ids for b in blocks], dtype=torch.long),
    }
    segments = torch.tensor([b.segment_ids for b in blocks], dtype=torch.long)
    if attention == "4d":
        batch["attention_mask"] = document_mask(segments, dtype or torch.float32)
    return batch


def document_mask(segment_ids, dtype):
    """Additive (batch, 1, seq, seq) mask: causal within a segment; padding (segment 0) sees only itself."""
    import torch
    seq = segment_ids.shape[-1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=segment_ids.device).tril()
    allowed = same & causal
    pad = segment_ids == 0
    eye = torch.eye(seq, dtype=torch.bool, device=segment_ids.device)
    allowed = torch.where(pad[:, :, None], eye, allowed)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
