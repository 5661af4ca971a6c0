"""`yeto check`: what this machine has for a launch: the tools, the stacks that answer, clouds with working credentials.

Exit status 0 when everything a local run needs is here (nats-server, torch; a local stack that is recorded as
running answers), and what --gpu / --output name (their clouds enabled, SkyPilot, the store's package); else 1.
"""
from __future__ import annotations

import json
import os

from yeto.cli.check_probes import MISSING, NO, OK, Item, answers, clouds, output_item, version_of
from yeto.cli.common import conf
from yeto.infra.head import records as heads
from yeto.infra.nats.server import server_binary
from yeto.infra.stack import StackPaths, operator_env, read_record, stack_url
from yeto.schemas.gpuspec import parse_gpu
from yeto.services.launcher.api import sky_api


def register(sub) -> None:
    p = sub.add_parser("check", help="which clouds have working credentials, which stacks answer, what a launch needs",
                       description=__doc__.split("\n", 1)[1].strip())
    p.add_argument("--gpu", help="the --gpu you mean to launch with: its clouds must be enabled")
    p.add_argument("--output", default="", help="the --output you mean to launch with")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for SkyPilot's credential check (default 60)")
    p.set_defaults(func=cmd_check)


def tools() -> list[Item]:
    try:
        nats = Item("nats-server", OK, server_binary())
    except RuntimeError as e:
        nats = Item("nats-server", MISSING, str(e))
    torch = version_of("torch", "torch")
    return [nats, Item("torch", OK, torch) if torch else Item("torch", MISSING, "not installed: run `make setup`")]


def stacks(state) -> list[Item]:
    """The local stack (when recorded as running, it must answer) and each recorded head that should be up."""
    rec = read_record(StackPaths(state))
    url = stack_url(state)
    if url is None:
        items = [Item("local stack", OK, "not running (`yeto launch` with local islands starts it)")]
    else:
        why = answers(url, operator_env(state, rec or {}))
        items = [Item("local stack", OK if why is None else MISSING, f"{url}: " + ("answers" if why is None else
                      f"does not answer ({why}); `yeto stack down` then `yeto stack up`"))]
    for head in heads.heads(state):
        name = f"head {head['run_id']}"
        if head["state"] not in ("launching", "up") or not head["url"]:
            items.append(Item(name, OK, f"{head['state']} (nothing of it should be running: `sky status {head['cluster']}`)"))
            continue
        why = answers(head["url"], heads.head_env(head))
        items.append(Item(name, OK if why is None else NO, f"{head['url']}: " + ("answers" if why is None else
                          f"does not answer ({why}); is it up? `sky status {head['cluster']}`")))
    return items


def cloud_items(gpu: str | None, timeout: float) -> tuple[list[Item], dict[str, str | None]]:
    wanted = sorted({i.cloud for i in parse_gpu(gpu)} - {"local"}) if gpu else []
    sky = version_of("sky", "skypilot")
    if sky is None:
        return [Item("skypilot", MISSING if wanted else NO, "not installed: pip install -e '.[launcher]'")], {}
    found, why, server = clouds(sky_api(), timeout)
    enabled = [c for c, reason in found.items() if reason is None]
    if why or not enabled:
        line = why or "no cloud enabled: set up a cloud's credentials (`sky check` shows how for each)"
        items = [Item("clouds", MISSING if wanted else NO, line)]
    else:
        items = [Item("clouds", OK, f"enabled: {', '.join(enabled)} (SkyPilot {sky})")]
    if server:
        items.append(Item("skypilot", MISSING if wanted else NO, server))
    for cloud in wanted:
        if found.get(cloud, "") is not None and not why:
            items.append(Item(cloud, MISSING, found.get(cloud) or "SkyPilot does not know this cloud"))
    return items, found


def secrets_item() -> Item:
    if os.environ.get("HF_TOKEN"):
        return Item("HF_TOKEN", OK, "set (islands get it in a 0600 file, never on a command line or the tape)")
    return Item("HF_TOKEN", OK, "not set (only gated or private models and hf:// outputs need it)")


def cmd_check(args) -> int:
    state = conf(args).state_dir
    cloud_run = bool(args.gpu) and any(i.cloud != "local" for i in parse_gpu(args.gpu))
    found_items, found = cloud_items(args.gpu, args.timeout)
    items = [*tools(), *stacks(state), *found_items, secrets_item(), output_item(args.output, cloud_run)]
    ok = all(i.status != MISSING for i in items)
    if args.json:
        print(json.dumps({"ok": ok, "state_dir": str(state), "items": [i.__dict__ for i in items], "clouds": found},
                         indent=1))
        return 0 if ok else 1
    width = max(len(i.name) for i in items)
    print(f"yeto check (state dir {state})")
    for i in items:
        print(f"  {i.status:<7} {i.name:<{width}}  {i.detail}")
    print("everything a local run needs is here" + (" and what you named" if args.gpu or args.output else "")
          if ok else "something a launch needs is MISSING (above)")
    return 0 if ok else 1
