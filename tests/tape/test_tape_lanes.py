"""A lane of query workers (infra/tape/lanes.py) starts one ahead and the next ones only as queries find every started
one busy, up to its size: a stack asked one query at a time keeps one DuckDB worker per lane, not five in all. Real
sandbox processes (sandbox.py's command) answering real queries."""
from __future__ import annotations

import asyncio
import json

import pytest

from yeto.infra.tape import sandbox
from yeto.infra.tape.lanes import Lane, LaneFull

pytestmark = pytest.mark.timeout(120)


def test_a_lane_grows_as_queries_find_its_workers_busy_and_refuses_only_at_its_size(tmp_path):
    async def scene() -> None:
        lane = Lane(3, refuse_when_full=True, timeout_s=60, memory_bytes=sandbox.MEMORY_BYTES, line_bytes=1 << 20,
                    spill_root=tmp_path)
        try:
            first = await lane.take()
            assert (lane.started, len(lane.procs)) == (1, 1), "one worker started ahead"
            request = (json.dumps({"db": str(tmp_path / "none.duckdb"), "sql": "select 1", "max_rows": 10,
                                   "max_bytes": 1 << 20}) + "\n").encode()
            assert b"no tape at" in await lane.ask(first, request)     # answered (no tape there), and given back
            again = await lane.take()
            assert again is first and lane.started == 1, "a free worker is taken again: the lane does not grow"
            second, third = await lane.take(), await lane.take()   # the started ones busy: one more each time
            assert lane.started == 3 and len({id(again), id(second), id(third)}) == 3 and len(lane.procs) == 3
            with pytest.raises(LaneFull, match="3 queries are running"):
                await lane.take()
            lane.put_back(second)
            assert await lane.take() is second and lane.started == 3
        finally:
            await lane.close()
        assert not lane.procs
    asyncio.run(scene())
