"""Who may publish and subscribe what on the bus: the operator, the services and each run's learners (pure).

Plain nats-server users with subject permissions, in a file the server's config includes and re-reads on
a reload (SIGHUP). Chosen over decentralized JWT/NKeys accounts because it needs nothing beyond the
server and the client we ship, the launcher issues an island's learner credential by rewriting one 0600 file
and reloading, and it is all testable here today; JWT accounts would mint credentials without a reload.

- operator (the CLI): everything, stream administration included.
- service (planner, launcher, syncer, finalizer, tape writer): yeto.>, the JetStream API, acks and flow
  control, their inboxes; never `$JS.API.STREAM.DELETE` / `PURGE` (nothing in Yeto deletes a stream).
- learner L of run R (one credential per island, a new password per generation: bus/auth.py): publish its own pushes
  `yeto.frag.R.*.L` (the syncer checks the header's learner against the subject), its own learner kinds of
  events `yeto.evt.R.<Type>.L` (LearnerProgress, LayoutDeclared, LearnerFinalAck; every service's fold checks
  the payload's learner and type against the subject), its own log lines `yeto.log.R.L`, its request for its watches
  `yeto.watches.R.L` (the launcher makes them, bus/nats_watch_maker.py), pulls (`CONSUMER.MSG.NEXT`) and acks of its own
  watch consumer on R's keyframes, deltas and events (`watch_consumer`: the launcher made it with R's filter), DIRECT.GET
  of R's keyframe subjects (the subject form, `$JS.API.DIRECT.GET.YETO_GKEY.yeto.glob.R.*.key.*`; never the bare form,
  whose body names what it reads); subscribe only to its own inbox prefix `_INBOX_R_L`. It creates no consumer at all:
  a create request's body (the deliver subject of a push consumer) is invisible to subject permissions, and the server
  does not check the deliver subject against the creator's permissions (nats-io/nats-server#8274), so a learner that
  may create one could have the server push a stream into any subject. Everything else (commands, other events,
  stream and consumer management, the tape's SQL, other runs' subjects and every other inbox) is a permission violation.
"""
from __future__ import annotations

import json
from collections.abc import Callable

from yeto.schemas.subjects import (
    CMD_PREFIX,
    EVT_PREFIX,
    EVT_STREAM,
    FRAG_PREFIX,
    GDELTA_STREAM,
    GKEY_STREAM,
    GLOB_PREFIX,
    LEARNER_EVENTS,
    SNAP_PREFIX,
    TAPE_SQL,
    learner_event_subject,
    log_subject,
    run_keyframes,
    subject_matches,
)

API = "$JS.API"


def learner_user(run_id: str, learner: str) -> str:
    return f"learner-{run_id}-{learner}"


def learner_inbox(run_id: str, learner: str) -> str:
    """The inbox prefix the learner connects with (and the only thing it may subscribe to)."""
    return f"_INBOX_{run_id}_{learner}"


def operator_permissions() -> dict:
    return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}


def service_permissions() -> dict:
    """`allow_responses`: the launcher answers a learner's watch request into the learner's own inbox (one reply)."""
    yeto = [f"{p}.>" for p in (CMD_PREFIX, EVT_PREFIX, FRAG_PREFIX, GLOB_PREFIX, SNAP_PREFIX)] + [TAPE_SQL]
    return {"publish": {"allow": [*yeto, f"{API}.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>"],
                        "deny": [f"{API}.STREAM.DELETE.>", f"{API}.STREAM.PURGE.>"]},
            "subscribe": {"allow": [*yeto, f"{WATCHES}.>", "_INBOX.>"]}, "allow_responses": True}


WATCHES = "yeto.watches"     # yeto.watches.<run>.<learner>: a learner asks the launcher for its watch consumers
WATCHED_STREAMS = (GKEY_STREAM, GDELTA_STREAM, EVT_STREAM)


def watch_consumer(run_id: str, learner: str) -> str:
    """The name of learner `learner` of `run_id`'s one watch consumer on each of WATCHED_STREAMS (made by the launcher)."""
    return f"w-{run_id}-{learner}"


def learner_permissions(run_id: str, learner: str) -> dict:
    name = watch_consumer(run_id, learner)
    return {"publish": {"allow": [
        f"{FRAG_PREFIX}.{run_id}.*.{learner}", *(learner_event_subject(run_id, t, learner) for t in LEARNER_EVENTS),
        log_subject(run_id, learner), f"{WATCHES}.{run_id}.{learner}",
        *(f"{API}.CONSUMER.MSG.NEXT.{stream}.{name}" for stream in WATCHED_STREAMS),
        *(f"$JS.ACK.{stream}.{name}.>" for stream in WATCHED_STREAMS),
        f"{API}.DIRECT.GET.{GKEY_STREAM}.{run_keyframes(run_id)}"]},   # the subject form only: the bare one's body
        "subscribe": {"allow": [f"{learner_inbox(run_id, learner)}.>"]}}   # (seq, last_by_subj) could name any run's


def granted(run_id: str, learner: str) -> Callable[[str], bool]:
    """Whether learner `learner` of `run_id`'s own credential may publish a subject. Case-blind: nats-py reports a
    permissions violation's subject lower-cased."""
    allowed = [p.lower() for p in learner_permissions(run_id, learner)["publish"]["allow"]]
    return lambda subject: any(subject_matches(p, subject.lower()) for p in allowed)


def users_conf(*, operator: dict, service: dict, learners: dict[tuple[str, str], dict]) -> str:
    """The `users = [...]` block nats-server's `authorization` includes. Identities are {"user", "password"};
    `learners` maps (run id, learner) to that learner's identity."""
    users = [{**_id(operator), "permissions": operator_permissions()},
             {**_id(service), "permissions": service_permissions()}]
    users += [{**_id(ident), "permissions": learner_permissions(*key)} for key, ident in sorted(learners.items())]
    return "users = " + json.dumps(users, indent=1) + "\n"


def _id(ident: dict) -> dict:
    return {"user": ident["user"], "password": ident["password"]}
