"""SQL views over the tape for the common questions: runs, rounds, learner progress, island uptime, spend, rejections.

Views read payload fields by name with try_cast, so a field an event type does not carry (yet) reads
NULL instead of failing: the views work before and after the other areas' events exist.
"""
from __future__ import annotations

# Billing as schemas/fleet.py states it: from IslandUp / IslandReplaced to the island's next event.
ISLAND_UP = ("IslandUp", "IslandReplaced")
ISLAND_EVENTS = ISLAND_UP + ("IslandRequested", "IslandExited", "IslandPreempted", "IslandDropped", "IslandStopped")
RUN_END_EVENTS = ("RunFinalized", "RunFailed", "RunStopped")


def _in(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


VIEWS: dict[str, str] = {
    "runs": f"""
SELECT run_id, min(ts) AS started, max(ts) AS last_event, count(*) AS num_events,
       arg_max(type, seq) AS last_type,
       CASE WHEN bool_or(type = 'RunFinalized') THEN 'finalized'
            WHEN bool_or(type = 'RunFailed') THEN 'failed'
            WHEN bool_or(type = 'RunStopped') THEN 'stopped'
            WHEN bool_or(type IN ('FinalCutRequested', 'FinalCutDone', 'CheckpointMarkedFinal', 'ArtifactWritten')) THEN 'finalizing'
            WHEN bool_or(type IN ('IslandUp', 'IslandReplaced', 'RoundMerged', 'LearnerProgress')) THEN 'running'
            ELSE 'launching' END AS phase,
       count(*) FILTER (WHERE type = 'RoundMerged') AS num_rounds,
       min(ts) FILTER (WHERE type IN {_in(RUN_END_EVENTS)}) AS finished
FROM events WHERE run_id <> '_' GROUP BY run_id""",
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
FROM events WHERE type = 'RoundMerged'""",
    "learner_progress": """
SELECT seq, ts, run_id,
       payload->>'learner' AS learner, try_cast(payload->>'generation' AS INTEGER) AS generation,
       try_cast(payload->>'step' AS BIGINT) AS step,
       try_cast(payload->>'loss' AS DOUBLE) AS loss,
       try_cast(payload->>'tokens' AS BIGINT) AS tokens,
       try_cast(payload->>'tokens_per_s' AS DOUBLE) AS tokens_per_s,
       try_cast(payload->>'step_time_s' AS DOUBLE) AS step_time_s, try_cast(payload->>'lr' AS DOUBLE) AS lr
FROM events WHERE type = 'LearnerProgress'""",
    # One row per IslandUp / IslandReplaced: billed until the island's next event (exited, preempted,
    # dropped, stopped, up again), else the run's end, else now (the run is live), at the price it carried.
    "island_uptime": f"""
WITH isl AS (
    SELECT seq, ts, run_id, type, payload->>'island' AS island,
           try_cast(payload->>'price_per_hour' AS DOUBLE) AS price_per_hour,
           lead(ts) OVER (PARTITION BY run_id, payload->>'island' ORDER BY seq) AS next_ts
    FROM events WHERE type IN {_in(ISLAND_EVENTS)}),
ends AS (SELECT run_id, min(ts) AS ended FROM events WHERE type IN {_in(RUN_END_EVENTS)} GROUP BY run_id),
iv AS (SELECT isl.seq, isl.run_id, isl.island, isl.ts AS up_at,
              greatest(isl.ts, coalesce(least(isl.next_ts, ends.ended), isl.next_ts, ends.ended, now())) AS down_at,
              coalesce(isl.price_per_hour, 0) AS price_per_hour, isl.next_ts IS NULL AND ends.ended IS NULL AS open
       FROM isl LEFT JOIN ends USING (run_id) WHERE isl.type IN {_in(ISLAND_UP)})
SELECT *, epoch(down_at - up_at) / 3600.0 AS hours, price_per_hour * epoch(down_at - up_at) / 3600.0 AS usd
FROM iv""",
    "spend": """
SELECT run_id, sum(usd) AS usd, sum(hours) AS island_hours, count(DISTINCT island) AS num_islands,
       count(*) FILTER (WHERE open) AS num_open
FROM island_uptime GROUP BY run_id""",
    "rejections": """
SELECT seq, ts, run_id, type, payload->>'subject' AS subject, payload->>'reason' AS reason,
       payload->>'consumer' AS consumer, payload->>'excerpt' AS excerpt
FROM events WHERE type LIKE '%Rejected' OR type = 'unparsable'""",
}
