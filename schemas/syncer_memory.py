"""The syncer's host memory, modelled from what it allocates: Θ, momentum and push rows, shadow, transients, wire.

Per fragment of n values (services/syncer): one f32 array of rows (rows.py: Θ, Nesterov momentum, one row per push
of the open round; it is allocated zeroed and grown by doubling, so only rows written are resident: Θ, momentum and
one per live learner, since a round merges at once when every live learner has pushed) and the broadcast shadow
(broadcast.py, n f32). On top, the largest one-fragment step (the data plane is sequential): a publish keeps the
snapshot's copies of Θ, momentum and shadow (3n f32; snapshot.py streams them to disk, never a serialised copy),
an f32 keyframe and its chunks (2n f32) and the delta's; a row array's growth keeps the old array while the new one
fills; a message taken in is joined from its chunks, then decoded. Since 3595ca4 a push's join and the broadcast's
q4 delta reuse buffers of one pool each per process (schemas/buffers.py), kept between rounds: at most two of each,
the largest fragment's, which is what the transient counts for them (2 pushes, 2 deltas), so the peak is unchanged
(`benchmarks/memory.py --sizes 8 --learners 3`: 475 MiB at f4f4797, 479 MiB at 3595ca4, the model 417 MiB).
The wire: every message's chunks stay in memory
until its fragment's round merges (held.py; the fetched batch's chunks are those), so in the first round the f32
init (island 0 sends it; the others adopt version 0) is held with the pushes; then copies of partial messages under
the assembler's cap (intake.py; SyncConfig.max_pending_bytes). The peak is the larger of the first round and steady
state. A push whose codec can be kept encoded until the merge (q4 `keep`: the default codec on a CPU head since
d7084cb, services/syncer/gram.py `kept`) is never decoded into its f32 row: its bytes sit in the fragment's
`FragmentRows.encoded` (0.5 B a value, not 4), the rows array's push rows stay unwritten (zeroed, so not resident),
and `encoded` grows one row per push past the fourth, keeping the old array while the new one fills. Pure: sizes in,
bytes out. `--syncers N` splits the fragments over N processes (p % N == k): each holds its
share, its own transient and baseline, so the head's total grows a little with N while each process's share shrinks.
Checked against a real syncer process's peak RSS by benchmarks/memory.py (docs/BENCHMARK_RESULTS.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas import codecs
from yeto.schemas.recipe import SyncConfig

INITIAL_PUSH_ROWS = 4                  # FragmentRows(slots=4)
PROCESS_BASELINE = 200 * 2**20         # Python, NumPy, numba (LLVM) and the syncer, its kernels loaded: 196 MiB measured
F32 = 4


def kept_encoded(codec_up: str) -> bool:
    """Whether the syncer keeps a push of `codec_up` encoded until the merge instead of decoding it into an f32 row
    (a codec with `keep` and `kept_norm_pieces`: q4; services/syncer/gram.py `kept`, on a CPU head)."""
    codec = codecs.codec(codec_up)
    return hasattr(codec, "keep") and hasattr(codec, "kept_norm_pieces")


def allocated_rows(num_slots: int) -> int:
    """Rows of a fragment's array once push slot `num_slots - 1` was written (rows.py's doubling from 2 + 4)."""
    rows = 2 + INITIAL_PUSH_ROWS
    while rows < 2 + num_slots:
        rows *= 2
    return rows


@dataclass(frozen=True)
class SyncerMemory:
    """Bytes of one syncer process (the largest shard's when sharded), by what holds them."""

    state: int          # resident rows (Θ, momentum, pushes) and shadows of every fragment owned
    transient: int      # the largest one-fragment step on top (a publish with its snapshot, a growth, an init)
    wire: int           # messages held until their round merges, copies of partial messages
    baseline: int       # the process itself
    num_syncers: int = 1

    @property
    def process(self) -> int:
        return self.state + self.transient + self.wire + self.baseline

    @property
    def head(self) -> int:
        """All shards together (each shard is sized as the largest: a bound)."""
        return self.process * self.num_syncers

    def describe(self) -> str:
        gib = 2**30
        shards = f" per shard x {self.num_syncers} shards = {self.head / gib:.1f} GiB" if self.num_syncers > 1 else ""
        return (f"{self.process / gib:.1f} GiB (state {self.state / gib:.1f}, transient {self.transient / gib:.1f}, "
                f"wire {self.wire / gib:.1f}, process {self.baseline / gib:.2f}){shards}")


def syncer_memory(trainable: int, *, num_learners: int, config: SyncConfig, num_syncers: int = 1) -> SyncerMemory:
    """The memory of the syncer process that owns the most fragments, for `trainable` f32 values split evenly into
    config.num_fragments fragments, with `num_learners` learners (islands) pushing."""
    if trainable < 0 or num_learners < 1 or num_syncers < 1:
        raise ValueError("trainable must be >= 0, num_learners and num_syncers >= 1")
    num_owned = min(-(-config.num_fragments // num_syncers), config.num_fragments)
    numel = -(-trainable // config.num_fragments)             # the learners' layout balances fragments by size
    owned, f32 = numel * num_owned, F32 * numel
    push, down = codecs.codec(config.codec_up).encoded_size(numel), codecs.codec(config.codec_down).encoded_size(numel)
    kept = kept_encoded(config.codec_up)
    row = push if kept else F32 * numel                       # what one push holds until the merge, per fragment
    # (resident arrays, held messages) in steady state and in the first round, when the momentum row is not yet
    # written but the f32 init (island 0's: learners/sync_hook.py) is held with the round's pushes
    steady = (3 * F32 * owned + row * num_learners * num_owned, push * num_learners * num_owned)
    first_round = (2 * F32 * owned + row * num_learners * num_owned, (f32 + push * num_learners) * num_owned)
    arrays, held = max(steady, first_round, key=sum)
    if kept:                                                  # `encoded` grown a row at a time past the fourth push
        growth = (num_learners - 1) * push if num_learners > INITIAL_PUSH_ROWS else 0
    else:
        grown = allocated_rows(num_learners)
        growth = (grown // 2 if grown > 2 + INITIAL_PUSH_ROWS else 0) * f32
    publish = 5 * f32 + 2 * down                              # snapshot copies, keyframe and its chunks, the delta
    transient = max(publish, growth, 3 * f32) + 2 * push      # or a growth, or an init taken in; a join
    cap = config.max_pending_bytes or 2 * f32 * max(2, num_learners)
    return SyncerMemory(state=arrays, transient=transient, wire=held + min(cap, push * num_learners),
                        baseline=PROCESS_BASELINE, num_syncers=num_syncers)
