"""`yeto launch --dry-run`, and the plan a cloud launch shows before it asks: the resolved config, the islands, the
head, the time and cost, and for cloud islands the SkyPilot tasks as YAML. Building them starts, rents and writes nothing."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from yeto.cli.common import conf, state_dir
from yeto.schemas.commands import LaunchRun
from yeto.schemas.launch_recipe import LaunchRecipe

PLACEHOLDER_URL = "tls://<the head's address>:4222"


def add_arguments(p) -> None:
    a = p.add_argument
    a("--dry-run", action="store_true", help="check everything and print the plan (config, islands, head, time, cost, "
      "the SkyPilot tasks of a cloud run), then stop: nothing is started, rented or written to a tape")


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=110).rstrip()


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in text.splitlines())


def _settings(name: str, values: dict[str, Any]) -> str:
    """One section of the resolved config as `key=value` words, wrapped (the whole recipe is in `yeto status RUN --json`)."""
    import textwrap

    words = " ".join(f"{k}={v if v not in ('', None) else '-'}" for k, v in values.items() if not isinstance(v, dict))
    return textwrap.fill(words, width=118, initial_indent=f"  {name}: ", subsequent_indent=" " * (len(name) + 4),
                         break_on_hyphens=False)


def _island(i: int, e: dict[str, Any]) -> str:
    where = f"{e['cloud']}:{e.get('nodes', 1)}x{e['count']}x{e['gpu'].lower()}" if e.get("nodes", 1) > 1 else \
        f"{e['cloud']}:{e['count']}x{e['gpu'].lower()}"
    region = f"@{e['region']}" if e.get("region") else ""
    price = "price unknown" if e.get("price_per_hour") is None else f"${e['price_per_hour']:.2f}/hr"
    capacity = "" if e["cloud"] == "local" else (", spot" if e.get("spot") else ", on-demand")
    return f"  island {i}: {where}{region} ({price}{capacity})"


def head_line(args, launch: LaunchRun, cloud: bool) -> str:
    if not cloud:
        return f"Head: the local stack under {state_dir(args)} (nats-server, services, tape; started if none runs)"
    if conf(args).nats_url:
        return f"Head: the stack at {conf(args).nats_url} (--nats-url): no head VM is rented"
    from yeto.cli.launch.cloud import size_head
    from yeto.schemas.head_size import head_nodes_line

    head = size_head(args, launch)
    return ("Head: " + (head.describe() if head else "the smallest VM (16 GB): the model's size is unknown here") +
            ", on-demand, rented first; it owns the run's teardown\n  " +
            head_nodes_line(args.head_nodes, head.price(args.head_price) if head else args.head_price))


def sky_tasks(args, launch: LaunchRun) -> list[tuple[str, dict[str, Any]]]:
    """(what, the task's YAML config) for the head (unless --nats-url names a stack) and each island's managed job."""
    from yeto.infra.head.records import HEAD_STATE, bundle_dir
    from yeto.services.launcher.api import IslandLaunch, head_task, island_task

    tasks = []
    if not conf(args).nats_url:
        try:
            head = head_task(launch.run_id, bundle_dir(state_dir(args), launch.run_id), cloud=args.head_cloud,
                             region=args.head_region, syncers=args.syncers or 1, nodes=args.head_nodes,
                             output=LaunchRecipe.upcast(launch.recipe).output)
        except ValueError as e:    # SkyPilot knows no such cloud (launcher/head.py says it the same way)
            raise ValueError(f"--head-cloud {args.head_cloud}: {e}") from None
        tasks.append(("the head VM (`sky launch`, from this machine)", head.to_yaml_config()))
    url = conf(args).nats_url or PLACEHOLDER_URL
    for i, spec in enumerate(launch.fleet):
        island = IslandLaunch(run_id=launch.run_id, island=i, generation=0, spec=spec, recipe=launch.recipe,
                              num_islands=len(launch.fleet), nats_url=url)
        creds = Path(HEAD_STATE) / "auth" / "learners" / launch.run_id / f"island-{i}.json"
        task = island_task(island, creds, ca=Path(HEAD_STATE) / "tls" / "server.pem")
        tasks.append((f"island {i} (`sky jobs launch`, from the head's launcher)", task.to_yaml_config()))
    return tasks


def render(args, launch: LaunchRun, estimate, *, cloud: bool) -> str:
    recipe = LaunchRecipe.upcast(launch.recipe)
    train = {k: v for k, v in recipe.train.model_dump(mode="json").items() if k != "pins"}
    limits = {k: v for k, v in recipe.limits.model_dump(mode="json").items() if v is not None}
    lines = [f"Run {launch.run_id}: {args.model} on {len(launch.fleet)} island(s)",
             "Config (resolved: flags over --config):", _settings("train", train),
             _settings("sync", train["sync"]), _settings("limits", limits or {"none": "runs until `yeto down`"}),
             f"  output: {recipe.output or 'the run folder'}",
             f"Islands ({len(launch.fleet)}):", *(_island(i, e) for i, e in enumerate(launch.fleet)),
             head_line(args, launch, cloud),
             estimate.render() if estimate else "Estimate: the model's size is unknown here: pass --weights-gb"]
    if cloud:
        lines.append("SkyPilot tasks:")
        for what, config in sky_tasks(args, launch):
            lines += [f"  # {what}", _indent(_yaml(config))]
    return "\n".join(lines)
