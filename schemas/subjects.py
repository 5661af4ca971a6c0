"""The NATS subjects and JetStream streams of a Yeto stack, in one place.

    yeto.cmd.<service>.<Type>          commands      YETO_CMD   work queue: one handler per command
    yeto.evt.<run_id>.<Type>           events        YETO_EVT   limits retention, de-duplicated by Nats-Msg-Id
    yeto.evt.<run_id>.<Type>.<learner> a learner's own events (LEARNER_EVENTS): the token is the sender (its
                                       credential may publish only there; every fold checks the payload's learner)
    yeto.frag.<run_id>.<fragment>.<learner>  pushes YETO_FRAG work queue: syncer shards filter by fragment; the
                                       learner token is the sender (its credential may publish only there)
    yeto.glob.<run_id>.<fragment>.key.<chunk>  keyframes  YETO_GKEY  the latest keyframe per fragment and chunk
    yeto.glob.<run_id>.<fragment>.d.<chunk>    deltas     YETO_GDELTA the last 64 q4 deltas of every fragment chunk
    yeto.snap.<service>                snapshots     YETO_SNAP  the latest folded state of each service (resume point)
    yeto.log.<run_id>.<learner>        log lines     YETO_LOG   a learner's log lines, batched; only its credential
                                       may publish there; kept 7 days or 1 GiB, the oldest go first
    yeto.tape.sql                      request/reply  read-only SQL answered by the tape writer
    yeto.artifact.<run_id>             request/reply  a head's artifact files in chunks, for `yeto pull` (operator only)
"""
from __future__ import annotations

from dataclasses import dataclass, field

CMD_PREFIX = "yeto.cmd"
EVT_PREFIX = "yeto.evt"
FRAG_PREFIX = "yeto.frag"
GLOB_PREFIX = "yeto.glob"
SNAP_PREFIX = "yeto.snap"
LOG_PREFIX = "yeto.log"
TAPE_SQL = "yeto.tape.sql"
ARTIFACT_PREFIX = "yeto.artifact"
EVERY_EVENT = f"{EVT_PREFIX}.>"

CMD_STREAM, EVT_STREAM, FRAG_STREAM = "YETO_CMD", "YETO_EVT", "YETO_FRAG"
GKEY_STREAM, GDELTA_STREAM, SNAP_STREAM = "YETO_GKEY", "YETO_GDELTA", "YETO_SNAP"
LOG_STREAM = "YETO_LOG"

SERVICES = ("planner", "launcher", "syncer", "finalizer")

MAX_PAYLOAD = 8 * 1024 * 1024          # nats-server max_payload; fragment chunks stay below it
CHUNK_BYTES = 4 * 1024 * 1024          # payload bytes per fragment chunk (headers ride on top)
MAX_EVENT_BYTES = 4 * 1024 * 1024      # YETO_EVT's max_msg_size: an event is KBs (a big model's LayoutDeclared ~1 MiB)
DUPLICATE_WINDOW_S = 600               # JetStream de-duplication window for Nats-Msg-Id
GiB = 1024 ** 3


def command_subject(service: str, type_: str) -> str:
    return f"{CMD_PREFIX}.{service}.{type_}"


def service_commands(service: str) -> str:
    """Every command a service owns (its work-queue consumer's filter)."""
    return f"{CMD_PREFIX}.{service}.>"


def event_subject(run_id: str, type_: str) -> str:
    return f"{EVT_PREFIX}.{run_id}.{type_}"


LEARNER_EVENTS = ("LearnerProgress", "LayoutDeclared", "LearnerFinalAck", "LearnerStarted", "LearnerBeat")


def learner_event_subject(run_id: str, type_: str, learner: str = "*") -> str:
    """Where `learner` publishes its `type_` event, one of LEARNER_EVENTS (the default "*": every learner's, a filter)."""
    return f"{EVT_PREFIX}.{run_id}.{type_}.{learner}"


def run_events(run_id: str) -> str:
    """Every event of one run."""
    return f"{EVT_PREFIX}.{run_id}.>"


def fragment_subject(run_id: str, fragment: int, learner: str = "*") -> str:
    """Where `learner` publishes its pushes of `fragment` (the default "*": every learner's, a filter)."""
    return f"{FRAG_PREFIX}.{run_id}.{fragment}.{learner}"


def fragment_filters(fragments: list[int] | None = None) -> list[str]:
    """Pushes of `fragments` of every run (of every fragment if None): what one syncer shard consumes."""
    return [f"{FRAG_PREFIX}.>"] if fragments is None else [fragment_subject("*", p) for p in fragments]


def run_of_fragment(subject: str) -> str:
    """The run id in a `fragment_subject`."""
    return subject.split(".")[2]


def learner_of_fragment(subject: str) -> str:
    """The sending learner in a `fragment_subject`; "" if the subject has not exactly its five tokens."""
    tokens = subject.split(".")
    return tokens[4] if len(tokens) == 5 else ""


def keyframe_subject(run_id: str, fragment: int, chunk: int = 0) -> str:
    return f"{GLOB_PREFIX}.{run_id}.{fragment}.key.{chunk}"


def delta_subject(run_id: str, fragment: int, chunk: int = 0) -> str:
    """Per chunk, like keyframes: the stream keeps 64 messages per subject, which must mean 64 versions (a q4
    delta of a 1B-parameter fragment is ~130 chunks of 4 MiB, and one subject per fragment would keep half of one)."""
    return f"{GLOB_PREFIX}.{run_id}.{fragment}.d.{chunk}"


def run_keyframes(run_id: str) -> str:
    """Every keyframe chunk of a run (a learner watches their headers)."""
    return f"{GLOB_PREFIX}.{run_id}.*.key.*"


def run_deltas(run_id: str) -> str:
    """Every delta chunk of a run."""
    return f"{GLOB_PREFIX}.{run_id}.*.d.*"


def snapshot_subject(service: str) -> str:
    return f"{SNAP_PREFIX}.{service}"


def log_subject(run_id: str, learner: str = "*") -> str:
    """Where `learner` publishes its log lines (the default "*": every learner's of the run, a filter)."""
    return f"{LOG_PREFIX}.{run_id}.{learner}"


def artifact_subject(run_id: str) -> str:
    """Where a head's supervisor answers requests for the run's artifact files (infra/head/artifact_files.py)."""
    return f"{ARTIFACT_PREFIX}.{run_id}"


@dataclass(frozen=True)
class StreamSpec:
    """What infra turns into a JetStream StreamConfig (kept free of nats-py types)."""

    name: str
    subjects: tuple[str, ...]
    retention: str = "limits"            # limits | workqueue | interest
    max_msgs_per_subject: int = -1
    max_age_s: float = 0                 # 0 = keep forever
    max_bytes: int = 1 * GiB             # every stream is capped: a flood fills a stream, never the disk
    max_msgs: int = 1_000_000
    discard: str = "new"                 # new: a publish over a cap is refused (visible); old: the oldest go first
    max_msg_size: int = MAX_PAYLOAD      # the server refuses a bigger message into this stream
    duplicate_window_s: float = DUPLICATE_WINDOW_S
    description: str = ""
    extra: dict[str, object] = field(default_factory=dict)


# Caps (max_bytes, max_msgs), each with its reason. "new" where losing the oldest would lose state (the log's
# head, a fragment's only keyframe, a pending push, a service's resume point): over the cap a publish fails loudly.
STREAMS: tuple[StreamSpec, ...] = (
    # Commands are a few KB and handled within seconds; 100k waiting means a flood, not a backlog.
    StreamSpec(CMD_STREAM, (f"{CMD_PREFIX}.>",), retention="workqueue", max_bytes=1 * GiB, max_msgs=100_000,
               description="commands; each is handled by one instance of its owning service"),
    # Events are ~0.3-2 KB; a long run writes ~1M (progress per step): 8 GiB holds many runs. Services replay
    # from its head, so it is never trimmed from the front: when full, publishing fails and says so.
    StreamSpec(EVT_STREAM, (EVERY_EVENT,), max_bytes=8 * GiB, max_msgs=20_000_000, max_msg_size=MAX_EVENT_BYTES,
               description="the append-only event log; the tape mirrors it"),
    # Pushes are consumed as they arrive; 16 GiB is thousands of 4 MiB chunks (many rounds of every learner).
    StreamSpec(FRAG_STREAM, (f"{FRAG_PREFIX}.>",), retention="workqueue", max_age_s=24 * 3600, max_bytes=16 * GiB,
               max_msgs=200_000, description="learner fragment pushes (chunked), consumed by the syncer shards"),
    # One keyframe of the whole trained state: 64 GiB is a ~16B-parameter full fine-tune in f32.
    StreamSpec(GKEY_STREAM, (f"{GLOB_PREFIX}.*.*.key.*",), max_msgs_per_subject=1, max_bytes=64 * GiB,
               max_msgs=1_000_000,
               description="latest keyframe chunk per fragment: a (re)joining learner reads the whole model here"),
    # A cache of recent deltas (also capped per subject and by age): the oldest may go, a learner then reads keyframes.
    StreamSpec(GDELTA_STREAM, (f"{GLOB_PREFIX}.*.*.d.*",), max_msgs_per_subject=64, max_age_s=24 * 3600,
               max_bytes=16 * GiB, max_msgs=2_000_000, discard="old",
               description="q4 deltas of global versions since the keyframes"),
    # One snapshot per service instance, each under MAX_PAYLOAD.
    StreamSpec(SNAP_STREAM, (f"{SNAP_PREFIX}.*",), max_msgs_per_subject=1, max_bytes=1 * GiB, max_msgs=10_000,
               description="each service's latest folded state with its YETO_EVT position: where a restart resumes"),
    # Learners' log lines (batches of up to 64): for reading, not state, so the oldest go first. 7 days outlasts a
    # run's questions; 1 GiB is ~10M lines, and one chatty island cannot fill the disk.
    StreamSpec(LOG_STREAM, (f"{LOG_PREFIX}.>",), max_age_s=7 * 24 * 3600, max_bytes=1 * GiB, max_msgs=10_000_000,
               discard="old", description="learners' log lines per run and learner: `yeto logs` reads them"),
)
# JetStream reserves each stream's max_bytes against the server's store, which by default is sized from the free
# disk at start (a stack would not start on a small disk): the server is configured with the sum of the caps
# instead, plus 1 GiB for anything else kept there (a test's or an operator's own capped stream).
STORE_BYTES = sum(spec.max_bytes for spec in STREAMS) + 1 * GiB


def stream_for(subject: str) -> StreamSpec:
    for spec in STREAMS:
        if any(subject_matches(p, subject) for p in spec.subjects):
            return spec
    raise KeyError(subject)


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    pt, st = pattern.split("."), subject.split(".")
    for i, tok in enumerate(pt):
        if tok == ">":
            return len(st) > i
        if i >= len(st) or (tok != "*" and tok != st[i]):
            return False
    return len(pt) == len(st)
