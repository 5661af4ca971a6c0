"""`yeto recover RUN`: a cloud run's head is lost; rent a replacement that resumes the run from its mirror.

The replacement is the same head (the same bundle: credentials, certificate, secrets) with `restore.json` added,
so its `stack up --head` restores the mirror before any service starts (infra/head/restore.py). Its address goes to
the run's rendezvous in the store (infra/head/rendezvous.py): the islands keep their credentials and reconnect there
(docs/CLOUD.md, "When the head is lost"). --output defaults to the one the run's head record holds.
"""
from __future__ import annotations

import asyncio
import json
import os
import time

from yeto.cli.common import run_id_arg, state_dir
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect
from yeto.infra.head import mirror, rendezvous
from yeto.infra.head import records as heads
from yeto.infra.head.restore import REQUEST

PROBE_S = 20.0       # how long the lost head gets to answer before it is called lost (--probe-s)


def register(sub) -> None:
    p = sub.add_parser("recover", help="replace a cloud run's lost head VM; the new one resumes the run from its mirror",
                       description="For a cloud run launched with --output: its head mirrors the run beside the output "
                                   "every 10 s and at each snapshot. When the head stops answering, this takes the old "
                                   "head VM down, rents a new one with the run's own credentials and restores the run "
                                   "on it from the mirror; the islands reconnect and the run goes on. What the old head "
                                   "acknowledged after its last mirror is lost (docs/CLOUD.md, section 10).")
    p.add_argument("run", type=run_id_arg, help="the run id")
    p.add_argument("--output", help="the run's --output, as given to `yeto launch` (its mirror is beside it; default: the "
                                   "one this machine's record of the run's head holds)")
    p.add_argument("--force", action="store_true", help="replace the head even though it answers (it is taken down first)")
    p.add_argument("--head-memory-gb", type=int, default=16, help="the replacement's RAM (default 16, as `launch` rents)")
    p.add_argument("--wait-s", type=float, default=900.0, help="how long the new head may take to answer (default 900)")
    p.add_argument("--probe-s", type=float, default=PROBE_S,
                   help=f"how long the old head gets to answer before it is called lost (default {PROBE_S:g}); a head "
                        f"that answers within it is not replaced without --force")
    p.set_defaults(func=cmd_recover)


def cmd_recover(args) -> int:
    from yeto.services.launcher.api import launch_head, take_down

    state, run = state_dir(args), args.run
    if not args.probe_s > 0:     # nan too
        raise ValueError(f"--probe-s {args.probe_s:g}: give the old head a positive number of seconds to answer")
    rec = heads.head_record(state, run)
    if rec is None:
        raise ValueError(f"run {run} has no head record under {state}: only a cloud run launched from here has a head "
                         f"to replace")
    if rec["state"] == "copied":
        raise ValueError(f"run {run} has ended and is copied back: there is nothing to recover (`yeto status {run}`)")
    if rec.get("head_nodes", 1) > 1:
        raise ValueError(f"run {run}'s head runs on {rec['head_nodes']} VMs with its streams on each: it has no mirror to "
                         f"recover from and outlives one VM's loss as it is; replacing a lost node is not built "
                         f"(docs/CLUSTER.md)")
    output = args.output or rec.get("output")
    if not output:
        raise ValueError(f"the --output of run {run} is not known here (its head record holds none): give it, as given "
                         f"to `yeto launch`; a run launched without --output has no mirror to recover from")
    root = mirror.mirror_root(output, run)
    manifest = mirror.read_manifest(root)
    if manifest is None:
        raise ValueError(f"no head mirror of run {run} at {root}: its head mirrors only a run with an --output store, "
                         f"and only once the run arrived; check --output")
    if manifest.get("run_id") != run:
        raise ValueError(f"the head mirror at {root} is run {manifest.get('run_id')}'s, not {run}'s: check --output")
    os.environ.update(heads.head_env(rec))      # this process talks to the head as its operator
    if rec["url"] and not args.force and asyncio.run(_answers(rec["url"], args.probe_s)):
        raise ValueError(f"the head of run {run} answers at {rec['url']}: it is not lost. `yeto status {run}` shows "
                         f"the run; --force replaces it all the same")
    age = time.time() - manifest["mirrored_at"]
    print(f"head of run {run} is lost; the mirror at {root} holds events through seq {manifest['events_through']} and "
          f"{len(manifest['snapshots'])} fragment snapshots, mirrored {age:.0f}s ago")
    from yeto.cli.launch.confirm import start_sky_server
    start_sky_server()             # detached from this terminal before SkyPilot's first call would start it
    take_down(state, run)
    bundle = heads.bundle_dir(state, run)
    bus_auth.write_secret(bundle / REQUEST, json.dumps({"mirror": root}))
    started = time.time()
    heads.update_head(state, run, state="launching", recoveries=[*rec.get("recoveries", []), started])
    try:
        url = launch_head(state, run, memory_gb=args.head_memory_gb, wait_s=args.wait_s, output=output)
    finally:
        (bundle / REQUEST).unlink(missing_ok=True)    # the next launch of this bundle is no restore unless asked again
    try:
        rendezvous.publish(root, run, url, now=time.time())      # the islands follow it there (docs/CLOUD.md, section 10)
    except OSError as e:
        print(f"the head's rendezvous {root}/head.json could not be written ({type(e).__name__}: {e}): islands given "
              f"{rec['url']} cannot follow the replacement; `yeto recover {run} --force` tries again")
    moved = f" (the old head was at {rec['url']}: the islands follow through the rendezvous {root}/head.json)" \
        if rec["url"] and url != rec["url"] else ""
    print(f"replacement head of run {run} answers at {url} after {time.time() - started:.0f}s{moved}; it resumes the "
          f"run from the mirror and owns its teardown again (`yeto status {run}`)")
    return 0


async def _answers(url: str, probe_s: float = PROBE_S) -> bool:
    try:
        bus = await connect(url, name="recover-probe", connect_timeout=probe_s)
    except ConnectionError:
        return False
    await bus.close()
    return True
