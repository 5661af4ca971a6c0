"""SQL views over the tape for the common questions: runs, rounds, progress, steps, uptime, spend, lineage, rejections.

Views read payload fields by name with try_cast, so a field an event type does not carry (yet) reads
NULL instead of failing: the views work before and after the other areas' events exist. They read `vouched`:
the run, type and learner are the subject's, and an event whose payload claims otherwise is left out. `runs`,
`island_uptime` and `spend` compute what the shared run fold (schemas/run_view.py) computes, by the
billing rule of schemas/spend.py; tests/tape/test_tape_views.py checks they agree on one tape.
"""
from __future__ import annotations

from yeto.schemas.run_phase import LAUNCHING, PHASE_OF, RUN_END
from yeto.schemas.spend import METER_START, METER_STOP


def _in(names) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


# The run's first end event (by stream order): every meter, the head's included, stops there.
_ENDS = f"""ends AS (SELECT run_id, arg_min(ts, seq) AS ended, arg_min(type, seq) AS end_type
             FROM vouched WHERE type IN {_in(RUN_END)} GROUP BY run_id)"""
# schemas/run_phase.py's table, as rows: the event types that move a run, each with its rank and phase.
_PHASE_OF = "(VALUES " + ", ".join(f"('{t}', {rank}, '{phase}')" for t, (rank, phase) in PHASE_OF.items()) \
    + ") AS phase_of(type, rank, phase)"

VIEWS: dict[str, str] = {
    # What the server vouches for: events whose payload agrees with the subject they came on (run, type, learner).
    # Every view below reads these; a forged event is only in `events` and `rejections`. Created first.
    "vouched": "SELECT * FROM events WHERE forged IS NULL",
    # The run's phase by schemas/run_phase.py's rule, as the fold has it: the phase of its highest-ranked
    # event, the earliest among equals, else launching.
    "runs": f"""
WITH {_ENDS},
agg AS (SELECT run_id, min(ts) AS started, max(ts) AS last_event, count(*) AS num_events, arg_max(type, seq) AS last_type,
               coalesce(first(phase_of.phase ORDER BY phase_of.rank DESC, seq) FILTER (WHERE phase_of.rank IS NOT NULL),
                        '{LAUNCHING}') AS phase,
               count(*) FILTER (WHERE type = 'RoundMerged') AS num_rounds
        FROM vouched LEFT JOIN {_PHASE_OF} USING (type) WHERE run_id <> '_' GROUP BY run_id)
SELECT run_id, started, last_event, num_events, last_type, phase, num_rounds, ends.ended AS finished
FROM agg LEFT JOIN ends USING (run_id)""",
    "rounds": """
SELECT seq, ts, run_id,
       try_cast(payload->>'fragment' AS INTEGER) AS fragment,
       try_cast(payload->>'global_version' AS BIGINT) AS global_version,
       payload->'responders' AS responders,
       coalesce(json_array_length(payload->'responders'), 0) AS num_responders,
       payload->'weights' AS weights, payload->'staleness' AS staleness,
       try_cast(payload->>'grace_ms' AS DOUBLE) AS grace_ms,
       try_cast(payload->>'quorum_ms' AS DOUBLE) AS quorum_ms,
       try_cast(payload->>'delta_norm' AS DOUBLE) AS delta_norm,
       try_cast(payload->>'tokens' AS BIGINT) AS tokens, payload->>'merge' AS merge
FROM vouched WHERE type = 'RoundMerged'""",
    "learner_progress": """
SELECT seq, ts, run_id,
       coalesce(learner, payload->>'learner') AS learner, try_cast(payload->>'generation' AS INTEGER) AS generation,
       try_cast(payload->>'step' AS BIGINT) AS step,
       try_cast(payload->>'loss' AS DOUBLE) AS loss,
       try_cast(payload->>'tokens' AS BIGINT) AS tokens,
       try_cast(payload->>'tokens_per_s' AS DOUBLE) AS tokens_per_s,
       try_cast(payload->>'step_time_s' AS DOUBLE) AS step_time_s, try_cast(payload->>'lr' AS DOUBLE) AS lr,
       try_cast(payload->>'eval_loss' AS DOUBLE) AS eval_loss
FROM vouched WHERE type = 'LearnerProgress'""",
    # One row per optimizer step: a LearnerProgress v3 carries every step since its learner's previous report (a
    # report without them, v2 and older, counts as its one step).
    "learner_steps": """
SELECT p.seq, p.ts, p.run_id, coalesce(p.learner, p.payload->>'learner') AS learner,
       try_cast(p.payload->>'generation' AS INTEGER) AS generation, try_cast(s.value->>'step' AS BIGINT) AS step,
       try_cast(s.value->>'loss' AS DOUBLE) AS loss, try_cast(s.value->>'lr' AS DOUBLE) AS lr,
       try_cast(s.value->>'tokens' AS BIGINT) AS tokens, try_cast(s.value->>'tokens_per_s' AS DOUBLE) AS tokens_per_s,
       try_cast(s.value->>'step_time_s' AS DOUBLE) AS step_time_s, try_cast(s.value->>'grad_norm' AS DOUBLE) AS grad_norm
FROM vouched p, json_each(CASE WHEN json_array_length(p.payload->'steps') > 0 THEN p.payload->'steps'
                               ELSE json_array(p.payload) END) s
WHERE p.type = 'LearnerProgress'""",
    # One row per IslandUp / IslandReplaced that starts a meter (none older than a generation already up):
    # billed at its price until the island's next meter event of that or a newer generation, else the
    # run's end, else now (the run is live).
    "island_uptime": f"""
WITH isl AS (
    SELECT seq, ts, run_id, type, payload->>'island' AS island,
           coalesce(try_cast(payload->>'generation' AS INTEGER), 0) AS generation,
           coalesce(try_cast(payload->>'price_per_hour' AS DOUBLE), 0) AS price_per_hour
    FROM vouched WHERE type IN {_in(METER_START + METER_STOP)}),
ups AS (
    SELECT *, max(generation) OVER (PARTITION BY run_id, island ORDER BY seq
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS newest_before
    FROM isl WHERE type IN {_in(METER_START)}),
nexts AS (
    SELECT u.seq, arg_min(n.ts, n.seq) AS next_ts
    FROM ups u JOIN isl n ON n.run_id = u.run_id AND n.island = u.island AND n.seq > u.seq AND n.generation >= u.generation
    GROUP BY u.seq),
{_ENDS},
iv AS (SELECT u.seq, u.run_id, u.island, u.generation, u.ts AS up_at,
              greatest(u.ts, coalesce(least(nexts.next_ts, ends.ended), nexts.next_ts, ends.ended, now())) AS down_at,
              u.price_per_hour, nexts.next_ts IS NULL AND ends.ended IS NULL AS open
       FROM ups u LEFT JOIN nexts USING (seq) LEFT JOIN ends USING (run_id)
       WHERE u.newest_before IS NULL OR u.generation >= u.newest_before)
SELECT *, epoch(down_at - up_at) / 3600.0 AS hours, price_per_hour * epoch(down_at - up_at) / 3600.0 AS usd
FROM iv""",
    # Islands plus the head: the head at the recipe's head_price_per_hour (recipe v2: under prices) from RunLaunched
    # to the run's end.
    "spend": f"""
WITH {_ENDS},
launches AS (SELECT run_id, arg_min(ts, seq) AS launched_at,
                    arg_min(coalesce(try_cast(payload->'recipe'->'prices'->>'head_price_per_hour' AS DOUBLE),
                                    try_cast(payload->'recipe'->>'head_price_per_hour' AS DOUBLE), 0), seq) AS head_price
             FROM vouched WHERE type = 'RunLaunched' GROUP BY run_id),
head AS (SELECT run_id, head_price * epoch(greatest(launched_at, coalesce(ends.ended, now())) - launched_at) / 3600.0 AS usd
         FROM launches LEFT JOIN ends USING (run_id)),
islands AS (SELECT run_id, sum(usd) AS usd, sum(hours) AS hours, count(DISTINCT island) AS num_islands,
                   count(*) FILTER (WHERE open) AS num_open
            FROM island_uptime GROUP BY run_id)
SELECT run_id, coalesce(islands.usd, 0) + coalesce(head.usd, 0) AS usd, coalesce(islands.usd, 0) AS island_usd,
       coalesce(head.usd, 0) AS head_usd, coalesce(islands.hours, 0) AS island_hours,
       coalesce(num_islands, 0) AS num_islands, coalesce(num_open, 0) AS num_open
FROM head FULL JOIN islands USING (run_id)""",
    # One row per lineage edge: a run resumed or branched from its parent's artifact (schemas/lineage.py).
    "lineage": """
SELECT seq, ts, run_id, CASE type WHEN 'RunResumed' THEN 'resume' ELSE 'branch' END AS kind,
       payload->>'parent_run' AS parent_run, payload->>'parent_artifact' AS parent_artifact,
       payload->>'parent_artifact_sha256' AS parent_artifact_sha256,
       try_cast(payload->>'start_step' AS BIGINT) AS start_step
FROM vouched WHERE type IN ('RunResumed', 'RunBranched')""",
    # Services' *Rejected events, unparsable payloads, and events the tape found forged (the subject's columns then).
    "rejections": """
SELECT seq, ts, run_id, type,
       CASE WHEN forged IS NULL THEN payload->>'subject' ELSE subject END AS subject,
       coalesce(forged, payload->>'reason') AS reason,
       CASE WHEN forged IS NULL THEN payload->>'consumer' ELSE 'tape' END AS consumer,
       CASE WHEN forged IS NULL THEN payload->>'excerpt' ELSE left(payload::VARCHAR, 200) END AS excerpt
FROM events WHERE forged IS NOT NULL OR type LIKE '%Rejected' OR type = 'unparsable'""",
}
