"""A cloud run's head VM, from the laptop: rent it (sized by schemas/head_size.py) through SkyApi, wait until its
nats-server answers over TLS.

Once the head answers and has the run, it owns the run's teardown (islands cancelled, the head terminated by
SkyPilot's autodown after its stack exits), so the laptop can go away. Until then the laptop owns it: every
failure on the way (the cloud says no, the head never answers, Ctrl-C) takes the head down again.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from yeto.infra.bus import connect
from yeto.infra.head import records as heads
from yeto.services.launcher.backends.sky_api import sky_api
from yeto.services.launcher.backends.sky_tasks import NATS_PORT, head_task

HEAD_PORT = NATS_PORT
IDLE_MINUTES_TO_AUTODOWN = 5
class HeadError(ConnectionError):
    """The head VM could not be rented, or never answered; nothing of it is left running."""


def launch_head(state_dir: Path, run_id: str, *, memory_gb: int, cloud: str | None = None, region: str | None = None,
                linger_s: int = 3600, wait_s: float = 900.0, say: Callable[[str], None] = print, output: str = "",
                syncers: int = 1, nodes: int = 1) -> str:
    """Rent the head (its bundle prepared: infra/head/records.py), wait until it answers; its URL (every node's,
    comma-separated, for a head of `nodes` VMs). This process must hold the head's operator env (heads.head_env) for
    the wait. On any failure the head is taken down again."""
    rec = heads.head_record(state_dir, run_id)
    assert rec is not None, "prepare the head's bundle and record first"
    api, cluster = sky_api(), rec["cluster"]
    try:
        task = head_task(run_id, heads.bundle_dir(state_dir, run_id), cloud=cloud, region=region, memory_gb=memory_gb,
                         linger_s=linger_s, output=output, syncers=syncers, nodes=nodes)
    except ValueError as e:        # SkyPilot knows no such cloud: nothing was rented
        heads.update_head(state_dir, run_id, state="down")
        raise ValueError(f"--head-cloud {cloud}: {e}") from None
    say(f"renting the head {f'of {nodes} VMs' if nodes > 1 else 'VM'} {cluster} (on-demand CPU, {memory_gb}+ GB RAM"
        f"{f', {cloud}' if cloud else ''}); "
        f"this takes a few minutes")
    try:
        api.launch_cluster(task, cluster, idle_minutes_to_autodown=IDLE_MINUTES_TO_AUTODOWN)
        addresses = [a for a in (api.cluster_addresses(cluster) if nodes > 1 else [api.cluster_address(cluster)]) if a]
        if len(addresses) != nodes:
            raise HeadError(f"SkyPilot launched {cluster} but reports no address for it"
                            + (f" on {nodes - len(addresses)} of its {nodes} nodes" if addresses else ""))
        url = ",".join(f"tls://{address}:{HEAD_PORT}" for address in addresses)
        heads.update_head(state_dir, run_id, url=url, output=output)     # `yeto recover` finds the mirror by it
        why = asyncio.run(wait_answering(url, wait_s, say))
        if why is not None:
            raise HeadError(f"the head at {url} did not answer within {wait_s:.0f}s ({why}); it was taken down "
                            f"again. Check that the cloud lets TCP port {HEAD_PORT} in, then launch again "
                            f"(`sky logs {cluster}` during the next attempt shows the head's set-up)")
    except BaseException as e:     # Ctrl-C included: before the head has the run, nobody else would stop it
        take_down(state_dir, run_id, say)
        if isinstance(e, Exception) and not isinstance(e, HeadError):
            raise HeadError(f"the head VM {cluster} could not be started ({type(e).__name__}: {e}); "
                            f"`yeto check` says which clouds work; it was taken down again") from e
        raise
    heads.update_head(state_dir, run_id, state="up")
    return url


async def wait_answering(url: str, wait_s: float, say: Callable[[str], None], every_s: float = 30.0) -> str | None:
    """None once the head's nats-server answers over TLS with the operator credential, else after wait_s why it did
    not; a progress line per failed attempt (each retries the connection for up to every_s)."""
    start = time.monotonic()
    while True:
        left = wait_s - (time.monotonic() - start)
        try:
            bus = await connect(url, name="head-wait", connect_timeout=max(1.0, min(every_s, left)))
        except ConnectionError as e:
            waited = time.monotonic() - start
            say(f"  waiting for the head's nats-server at {url} ({waited:.0f}s of at most {wait_s:.0f}s)")
            if waited >= wait_s:
                return str(e).split(" (", 1)[-1].rsplit("):", 1)[0]    # the client's last error, without our advice
            continue
        await bus.close()
        say(f"the head answers at {url}")
        return None


def take_down(state_dir: Path, run_id: str, say: Callable[[str], None] = print) -> None:
    """Terminate the run's head VM (nothing if it is gone) and record it."""
    rec = heads.head_record(state_dir, run_id)
    assert rec is not None
    say(f"taking the head VM {rec['cluster']} down")
    sky_api().down_cluster(rec["cluster"])
    heads.update_head(state_dir, run_id, state="down")
