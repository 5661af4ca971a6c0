"""q4: 4 bits a value in blocks of 256, the default for pushes and broadcast deltas, sent with error feedback.

A block is one little-endian f32 scale (the block's absmax), then 4-bit codes (bit 3 = sign, bits 0-2 =
magnitude index on the uniform grid {0, 1/7, ..., 1} x scale), two codes per byte, low nibble first. 132 bytes
per block = 4.125 bits per value. The uniform grid was chosen by measurement (benchmarks/wire.py prints the
error of the uniform and power-of-two grids). Decoding is a table lookup and one f32 multiply, so every machine
decodes the same bytes to the same bits.

On the host both directions run as compiled kernels (numba, parallel over blocks, the GIL released: base.py's pool);
the NumPy code they replaced is kept as the reference (`use_kernels("reference")`), byte for byte the same output:
tests/training/test_training_kernels.py checks it, NaN and infinite blocks included. Two passes are fused for the
syncer: `encode_delta` (the broadcast: encode theta - shadow and advance the shadow, no whole-row temporary) and
`decode_fold` (a push decoded with its Gram-row products, piece by piece in cache).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numba
import numpy as np

from yeto.schemas.buffers import BufferPool
from yeto.schemas.codecs.base import OnChunk, Payload, check_size, compiled, dot64, pool, spread, threads

BLOCK = 256
LEVELS = 7                         # magnitudes 0..7 on the uniform grid
LUT = np.array([i / LEVELS for i in range(8)] + [-i / LEVELS for i in range(8)], dtype=np.float32)
PAIR_BITS = np.stack([LUT[np.arange(256) & 15], LUT[np.arange(256) >> 4]], axis=1).view(np.uint64).reshape(-1)
"""Byte c's two values (LUT[c & 15] low, LUT[c >> 4] high) as one 64-bit word, in the host's byte order: a decode
writes a byte's two f32 values with one store."""
_BLOCK_BYTES = 4 + BLOCK // 2
_ROWS_PER_PASS = 4096              # 1M values at a time, so temporaries stay in cache
_BAND_BLOCKS = 1024                # per thread and decode pass: 1 MiB of f32 output, still in L2 for `on_chunk`
_GROUP_BLOCKS = 64                 # per task of the broadcast's fused pass: 64 KiB of difference, in L1/L2
# values per parallel call of a pass over several rows: one call over a whole 16M-value row ran 6x slower than the same
# pieces in calls of 256K-4M values (2026-12-05, one thread; not understood, measured)
_FOLD_BAND = 1 << 20
_KEEP_PIECE = 1 << 22              # bytes per piece of a kept push's copy (`keep`), the pieces spread over the threads
DELTA_PAYLOADS = BufferPool()
"""Where the broadcast's deltas are encoded, one pool per process (schemas/buffers.py): a delta is dropped once its
chunks are out, so every version reuses one buffer instead of a fresh one whose pages fault in."""


class Q4Codec:
    name = "q4"
    error_feedback = True          # a block's small values round to zero: without feedback they are never sent

    def encoded_size(self, numel: int) -> int:
        return -(-numel // BLOCK) * _BLOCK_BYTES

    def encode(self, x: np.ndarray) -> bytes:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        if compiled():
            out, scales, scale_bits, codes = self._payload(x.size)
            for lo in range(0, x.size, _FOLD_BAND):            # bands: see _FOLD_BAND
                hi, b0, b1 = min(lo + _FOLD_BAND, x.size), lo // BLOCK, -(-min(lo + _FOLD_BAND, x.size) // BLOCK)
                with pool():
                    _encode_blocks(x[lo:hi], x[lo:hi].view(np.uint32), scales[b0:b1], scale_bits[b0:b1], codes[b0:b1])
            return out.tobytes()
        numel = x.size
        num_blocks = -(-numel // BLOCK)
        scales = np.empty(num_blocks, dtype="<f4")
        codes = np.empty((num_blocks, BLOCK // 2), dtype=np.uint8)
        full = numel // BLOCK
        for start in range(0, num_blocks, _ROWS_PER_PASS):
            stop = min(start + _ROWS_PER_PASS, num_blocks)
            if stop <= full:
                rows = x[start * BLOCK:stop * BLOCK].reshape(-1, BLOCK)
            else:                  # the last, partial block is zero-padded
                rows = np.zeros((stop - start, BLOCK), dtype=np.float32)
                rows.reshape(-1)[:numel - start * BLOCK] = x[start * BLOCK:]
            mag = np.abs(rows)
            scale = mag.max(axis=1)
            scales[start:stop] = scale
            # divide rather than multiply by 7/scale: that overflows for subnormal scales. A NaN keeps its
            # block's scale NaN, so the receiver decodes NaN and refuses the push instead of garbage.
            with np.errstate(invalid="ignore", divide="ignore"):
                np.divide(mag, scale[:, None], out=mag, where=scale[:, None] > 0)
                mag *= np.float32(LEVELS)
                q = np.rint(mag, out=mag).astype(np.uint8)
            q |= ((rows < 0) & (q > 0)).view(np.uint8) << 3       # no negative zero: one code per value
            codes[start:stop] = q[:, 0::2] | (q[:, 1::2] << 4)
        return scales.tobytes() + codes.tobytes()

    def encode_delta(self, theta: np.ndarray, shadow: np.ndarray) -> Payload:
        """`encode(theta - shadow)`, and `shadow += decode(payload)` in place: the broadcast's step (base.py
        `encode_delta`). Compiled, one pass over both rows with no whole-row temporary; the same bytes and bits, in a
        buffer of DELTA_PAYLOADS (a read-only memoryview that holds it until dropped: no copy into fresh bytes)."""
        if not compiled():
            payload = self.encode(theta - shadow)
            shadow += self.decode(payload, shadow.size)
            return payload
        out, scales, scale_bits, codes = self._payload(shadow.size, DELTA_PAYLOADS.take(self.encoded_size(shadow.size)))
        theta = np.ascontiguousarray(theta, dtype=np.float32).reshape(-1)
        for lo in range(0, shadow.size, _FOLD_BAND):           # bands: see _FOLD_BAND
            hi, b0, b1 = min(lo + _FOLD_BAND, shadow.size), lo // BLOCK, -(-min(lo + _FOLD_BAND, shadow.size) // BLOCK)
            with pool():
                _encode_delta_groups(theta[lo:hi], shadow[lo:hi], scales[b0:b1], scale_bits[b0:b1], codes[b0:b1])
        return out.data.toreadonly()

    def _payload(self, numel: int, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """A payload buffer (`out`, else a fresh one) and its views: scales as f32 and as bits, codes by block."""
        out = np.empty(self.encoded_size(numel), dtype=np.uint8) if out is None else out
        head = out[:4 * -(-numel // BLOCK)]
        return out, head.view(np.float32), head.view(np.uint32), out[head.size:].reshape(-1, BLOCK // 2)

    def decode(self, payload: Payload, numel: int, out: np.ndarray | None = None, *,
               on_chunk: OnChunk | None = None) -> np.ndarray:
        check_size(self, payload, numel)
        out = np.empty(numel, dtype=np.float32) if out is None else out
        if compiled() and not _flat_f32(out):        # the kernels write a byte's two values as one word: decoded apart
            out[...] = self.decode(payload, numel)
            if on_chunk is not None:
                on_chunk(0, numel)
            return out
        num_blocks = -(-numel // BLOCK)
        scales = np.frombuffer(payload, dtype="<f4", count=num_blocks)
        codes = np.frombuffer(payload, dtype=np.uint8, offset=4 * num_blocks).reshape(num_blocks, BLOCK // 2)
        full = numel // BLOCK
        if compiled():
            band = num_blocks if on_chunk is None else _BAND_BLOCKS * threads()
            for start in range(0, num_blocks, band):
                stop = min(start + band, num_blocks)
                with pool():
                    _decode_blocks(scales, codes, out, start, stop)
                if on_chunk is not None:
                    on_chunk(start * BLOCK, min(stop * BLOCK, numel))
            return out
        per_pass = _ROWS_PER_PASS if on_chunk is None else _ROWS_PER_PASS // 4    # 1 MiB of output: the caller's reads hit L2
        for start in range(0, num_blocks, per_pass):
            stop = min(start + per_pass, num_blocks)
            packed = codes[start:stop]
            rows = np.empty((stop - start, BLOCK), dtype=np.float32)
            np.take(LUT, packed & 15, out=rows[:, 0::2])
            np.take(LUT, packed >> 4, out=rows[:, 1::2])
            rows *= scales[start:stop, None]
            if stop <= full:
                out[start * BLOCK:stop * BLOCK] = rows.reshape(-1)
            else:
                out[start * BLOCK:] = rows.reshape(-1)[:numel - start * BLOCK]
            if on_chunk is not None:
                on_chunk(start * BLOCK, min(stop * BLOCK, numel))
        return out

    def decode_fold(self, payload: Payload, numel: int, out: np.ndarray, rows: np.ndarray, piece: int) -> np.ndarray:
        """Compiled decode into `out` fused with its products: partials[p, r] = <rows[r], out> over piece p of `piece`
        values (a multiple of BLOCK), each piece decoded and multiplied while in cache, pieces in parallel. `rows`
        may hold `out` itself (its squared norm). The Gram row (services/syncer/gram.py) adds the partials in order.
        ValueError unless `out` is a contiguous f32 row."""
        check_size(self, payload, numel)
        if not _flat_f32(out):
            raise ValueError(f"decode_fold writes a contiguous f32 row, got {out.dtype} with strides {out.strides}")
        num_blocks = -(-numel // BLOCK)
        scales = np.frombuffer(payload, dtype="<f4", count=num_blocks)
        codes = np.frombuffer(payload, dtype=np.uint8, offset=4 * num_blocks).reshape(num_blocks, BLOCK // 2)
        partials = np.empty((-(-numel // piece), rows.shape[0]))
        if threads() == 1:                                    # no parallel call: the same pieces on this thread
            _decode_fold_one(scales, codes, out, rows, piece, partials)
            return partials
        band = max(1, _FOLD_BAND // piece)                    # pieces per parallel call
        for first in range(0, partials.shape[0], band):
            with pool():
                _decode_fold(scales, codes, out, rows, piece, partials, first, min(first + band, partials.shape[0]))
        return partials

    def keep(self, payload: Payload, numel: int, out: np.ndarray) -> None:
        """The payload's bytes into `out` (a uint8 row of `encoded_size(numel)`), to be decoded later piece by piece
        (`decode_piece`: the syncer's merge reads 0.5 B a value instead of a 4 B f32 row). ValueError as `decode`. The
        copy in pieces of _KEEP_PIECE bytes on the kernel threads (base.py `spread`: NumPy copies without the GIL)."""
        check_size(self, payload, numel)
        source = np.frombuffer(payload, dtype=np.uint8)

        def piece(lo: int) -> None:
            out[lo:lo + _KEEP_PIECE] = source[lo:lo + _KEEP_PIECE]

        spread(piece, range(0, source.size, _KEEP_PIECE))

    def kept_norm_pieces(self, kept: np.ndarray, numel: int, piece: int) -> np.ndarray:
        """partials[p, 0] = the squared norm of piece p (`piece` values, a multiple of BLOCK) of the decode of `kept`
        (`keep`), each piece decoded into a scratch row in cache and none of it written out: the bits `decode_fold`
        gives with `rows` its own output."""
        partials = np.empty((-(-numel // piece), 1))
        if threads() == 1:
            _kept_norms(kept, numel, piece, partials, 0, partials.shape[0])
            return partials
        band = max(1, _FOLD_BAND // piece)
        for first in range(0, partials.shape[0], band):
            with pool():
                _kept_norms_parallel(kept, numel, piece, partials, first, min(first + band, partials.shape[0]))
        return partials

    def decode_on(self, xp: ModuleType, raw: Any, numel: int, out: Any) -> None:
        check_size(self, raw, numel)
        blocks = -(-numel // BLOCK)
        scales = raw[:4 * blocks].view(xp.float32)
        packed = raw[4 * blocks:].reshape(blocks, BLOCK // 2)
        lut = xp.asarray(LUT)
        full = numel // BLOCK
        rows = out[:full * BLOCK].reshape(full, BLOCK)
        if full < blocks:                     # a partial last block: decode it whole, keep its head
            rows = xp.empty((blocks, BLOCK), dtype=xp.float32)
        rows[:, 0::2] = lut[packed & 15]
        rows[:, 1::2] = lut[packed >> 4]
        rows *= scales[:, None]
        if full < blocks:
            out[:] = rows.reshape(-1)[:numel]


def _flat_f32(out: np.ndarray) -> bool:
    """Whether the compiled decode may write `out` directly: f32, C-contiguous (a view of it as 64-bit words holds
    each byte's two values)."""
    return out.dtype == np.float32 and out.flags.c_contiguous


# exact IEEE f32 arithmetic in every kernel: no fastmath


@numba.njit(nogil=True, cache=True, parallel=True)
def _encode_blocks(x: Any, bits: Any, scales: Any, scale_bits: Any, codes: Any) -> None:  # pragma: no cover - compiled
    for b in numba.prange(scales.size):
        _encode_block(x, bits, b * BLOCK, scales, scale_bits, codes, b)


@numba.njit(nogil=True, cache=True, parallel=True)
def _encode_delta_groups(theta: Any, shadow: Any, scales: Any, scale_bits: Any, codes: Any) -> None:  # pragma: no cover
    """q4 of theta - shadow into `scales` and `codes`, and shadow += its decode: one pass, groups of blocks in
    parallel, each group's difference in a scratch row that stays in cache (the same bits as `_encode_blocks` of
    the difference, then `_decode_blocks` added to the shadow)."""
    numel = theta.size
    for g in numba.prange(-(-scales.size // _GROUP_BLOCKS)):
        first = g * _GROUP_BLOCKS
        last = min(first + _GROUP_BLOCKS, scales.size)
        lo, hi = first * BLOCK, min(last * BLOCK, numel)
        x = np.empty(hi - lo, dtype=np.float32)
        _subtract(theta[lo:hi], shadow[lo:hi], x)
        bits = x.view(np.uint32)
        for b in range(first, last):
            _encode_block(x, bits, (b - first) * BLOCK, scales, scale_bits, codes, b)
            _add_block(codes[b], scales[b], shadow[lo + (b - first) * BLOCK:min(lo + (b - first + 1) * BLOCK, hi)])


@numba.njit(nogil=True, cache=True, inline="never")
def _subtract(a: Any, b: Any, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(out.size):
        out[i] = a[i] - b[i]


@numba.njit(nogil=True, cache=True, inline="never")
def _add_block(codes: Any, scale: Any, out: Any) -> None:  # pragma: no cover - compiled
    """out += the decode of one block (the last may be partial): the learners' `shadow += decode(payload)`."""
    lut = LUT
    if out.size == BLOCK:
        for j in range(BLOCK // 2):
            c = codes[j]
            out[2 * j] += lut[c & 15] * scale
            out[2 * j + 1] += lut[c >> 4] * scale
    else:
        for i in range(out.size):
            c = np.int64(codes[i // 2])
            out[i] += lut[(c >> (4 * (i & 1))) & 15] * scale


@numba.njit(nogil=True, cache=True, inline="always")
def _encode_block(x: Any, bits: Any, base: int, scales: Any, scale_bits: Any, codes: Any, b: int) -> None:  # pragma: no cover
    """Block b of the payload from x[base:base + BLOCK] (fewer at the end of x, zero-padded)."""
    stop = min(base + BLOCK, x.size)
    top = np.uint32(0)             # |x| as bits: for non-negative floats their order is the integers' (vectorizes)
    for i in range(base, stop):
        top = max(top, bits[i] & np.uint32(0x7FFFFFFF))
    # np.max propagates NaN: the block decodes to NaN and the push is refused
    scale_bits[b] = np.uint32(0x7FC00000) if top > np.uint32(0x7F800000) else top
    scale = scales[b]
    if stop - base == BLOCK and scale > 0 and scale < np.float32(np.inf):
        for j in range(BLOCK // 2):        # the common block: no branches, so it vectorizes
            codes[b, j] = np.uint8(_fast_code(x[base + 2 * j], scale) | (_fast_code(x[base + 2 * j + 1], scale) << 4))
    else:
        for j in range(BLOCK // 2):
            lo = _code(x, base + 2 * j, stop, scale)
            hi = _code(x, base + 2 * j + 1, stop, scale)
            codes[b, j] = np.uint8(lo | ((hi << 4) & 0xFF))


@numba.njit(nogil=True, cache=True, inline="always")
def _fast_code(v: Any, scale: Any) -> Any:  # pragma: no cover - compiled
    """`_code` for 0 < scale < inf, where |v| / scale * 7 is in [0, 7]: adding and taking away 2^23 rounds it half
    to even in f32 (the hardware's rounding), as np.rint does."""
    m = abs(v) / scale * np.float32(LEVELS)
    q = np.int32((m + np.float32(8388608.0)) - np.float32(8388608.0))
    return q | np.int32(8) * np.int32((v < 0) & (q > 0))


@numba.njit(nogil=True, cache=True, inline="always")
def _code(x: Any, i: int, stop: int, scale: Any) -> int:  # pragma: no cover - compiled
    """The reference's code of x[i], bit for bit: |x| / scale (only where scale > 0) * 7, rounded half to even, cast
    to uint8 as the x86 float-to-int conversion casts (NaN and out-of-range give 0, else the low byte), sign bit 3."""
    if i >= stop:                  # zero padding of the last block
        return 0
    v = x[i]
    mag = abs(v)
    if scale > 0:
        mag = mag / scale
    mag = mag * np.float32(LEVELS)
    if not (mag < np.float32(2147483648.0)):   # NaN, inf, too large: cvttss2si's 0x80000000, low byte 0
        q = 0
    else:
        q = int(mag)
        frac = mag - np.float32(q)
        if frac > np.float32(0.5) or (frac == np.float32(0.5) and q & 1):
            q += 1
        q &= 0xFF
    if v < 0 and q > 0:
        q |= 8
    return q


@numba.njit(nogil=True, cache=True, parallel=True)
def _decode_blocks(scales: Any, codes: Any, out: Any, start: int, stop: int) -> None:  # pragma: no cover - compiled
    for b in numba.prange(start, stop):
        _decode_block(scales, codes, out, b)


@numba.njit(nogil=True, cache=True, parallel=True)
def _decode_fold(scales: Any, codes: Any, out: Any, rows: Any, piece: int, partials: Any, first: int,
                 stop: int) -> None:  # pragma: no cover - compiled
    """Pieces first..stop-1 in parallel: decode piece p into `out`, then partials[p, r] = <rows[r], out> over it,
    while in cache."""
    for p in numba.prange(first, stop):
        _fold_piece(scales, codes, out, rows, piece, partials, p)


@numba.njit(nogil=True, cache=True)
def _decode_fold_one(scales: Any, codes: Any, out: Any, rows: Any, piece: int, partials: Any) -> None:  # pragma: no cover
    """`_decode_fold` over every piece on the calling thread: for one kernel thread, where each parallel call's start
    cost ~5% of a 16M-value decode (16 calls) and ~40% of a 256K-value one (2026-12-05, process CPU time)."""
    for p in range(partials.shape[0]):
        _fold_piece(scales, codes, out, rows, piece, partials, p)


@numba.njit(nogil=True, cache=True, inline="always")
def _fold_piece(scales: Any, codes: Any, out: Any, rows: Any, piece: int, partials: Any, p: int) -> None:  # pragma: no cover
    numel = out.size
    lo = p * piece
    hi = min(lo + piece, numel)
    full = lo + (hi - lo) // BLOCK * BLOCK          # the piece's whole blocks: one table pass, then one scaling pass
    _pairs(codes.reshape(-1)[lo // 2:full // 2], out[lo:full].view(np.uint64))
    _scale_blocks(scales[lo // BLOCK:full // BLOCK], out[lo:full])
    if full < hi:                                  # the row's last, partial block
        _decode_block(scales, codes, out, full // BLOCK)
    for r in range(rows.shape[0]):
        partials[p, r] = dot64(rows[r, lo:hi], out[lo:hi])


@numba.njit(nogil=True, cache=True, inline="always")
def decode_piece(kept: Any, numel: int, lo: int, hi: int, dst: Any) -> None:  # pragma: no cover - compiled
    """dst[:hi - lo] = values lo..hi-1 of the decode of `kept` (a payload's bytes, `Q4Codec.keep`), `lo` a multiple of
    BLOCK and `hi` one too unless it is `numel`: the bits `_decode_blocks` and `_fold_piece` write there (a byte's two
    values from PAIR_BITS, then times the block's scale)."""
    num_blocks = -(-numel // BLOCK)
    scales = kept[:4 * num_blocks].view(np.float32)
    codes = kept[4 * num_blocks:]
    full = lo + (hi - lo) // BLOCK * BLOCK
    if full > lo:
        _pairs(codes[lo // 2:full // 2], dst[:full - lo].view(np.uint64))
        _scale_blocks(scales[lo // BLOCK:full // BLOCK], dst[:full - lo])
    if full < hi:                                  # the row's last, partial block
        scale = scales[full // BLOCK]
        for i in range(full, hi):
            c = np.int64(codes[i // 2])
            dst[i - lo] = LUT[(c >> (4 * ((i - full) & 1))) & 15] * scale


KEPT_GROUP = 8                    # pieces per task of a pass over kept payloads: one scratch row allocated per task


@numba.njit(nogil=True, cache=True)
def _kept_norms(kept: Any, numel: int, piece: int, partials: Any, first: int, stop: int) -> None:  # pragma: no cover
    """partials[p, 0] for pieces first..stop-1 on the calling thread: each piece decoded into one scratch row."""
    dst = np.empty(piece, dtype=np.float32)
    for p in range(first, stop):
        lo = p * piece
        hi = min(lo + piece, numel)
        decode_piece(kept, numel, lo, hi, dst)
        partials[p, 0] = dot64(dst[:hi - lo], dst[:hi - lo])


@numba.njit(nogil=True, cache=True, parallel=True)
def _kept_norms_parallel(kept: Any, numel: int, piece: int, partials: Any, first: int,
                         stop: int) -> None:  # pragma: no cover - compiled
    """`_kept_norms` in groups of KEPT_GROUP pieces in parallel."""
    for g in numba.prange(-(-(stop - first) // KEPT_GROUP)):
        _kept_norms(kept, numel, piece, partials, first + g * KEPT_GROUP, min(first + (g + 1) * KEPT_GROUP, stop))


@numba.njit(nogil=True, cache=True, inline="always")
def _decode_block(scales: Any, codes: Any, out: Any, b: int) -> None:  # pragma: no cover - compiled
    numel = out.size
    lut = LUT
    base = b * BLOCK
    scale = scales[b]
    if base + BLOCK <= numel:      # a byte's two values from PAIR_BITS, then scaled: lut[c & 15] * scale, lut[c >> 4] * scale
        _pairs(codes[b], out[base:base + BLOCK].view(np.uint64))
        _scale(scale, out[base:base + BLOCK])
    else:                          # the last, partial block
        for i in range(base, numel):
            c = np.int64(codes[b, (i - base) // 2])
            out[i] = lut[(c >> (4 * ((i - base) & 1))) & 15] * scale


@numba.njit(nogil=True, cache=True, inline="never")
def _pairs(codes: Any, out: Any) -> None:  # pragma: no cover - compiled
    """out[j] = PAIR_BITS[codes[j]]: each byte's two table values at once, a 64-bit gather (vectorizes, where a
    value's own lookup and the stores to every other f32 did not: the loop compiled scalar)."""
    pairs = PAIR_BITS
    for j in range(codes.size):
        out[j] = pairs[codes[j]]


@numba.njit(nogil=True, cache=True, inline="never")
def _scale(scale: Any, out: Any) -> None:  # pragma: no cover - compiled
    for i in range(out.size):
        out[i] = out[i] * scale


@numba.njit(nogil=True, cache=True, inline="never")
def _scale_blocks(scales: Any, out: Any) -> None:  # pragma: no cover - compiled
    """Block b of `out` (whole blocks) times scales[b]: `_scale` over a piece of many blocks in one call."""
    for b in range(scales.size):
        scale = scales[b]
        for i in range(b * BLOCK, (b + 1) * BLOCK):
            out[i] = out[i] * scale
