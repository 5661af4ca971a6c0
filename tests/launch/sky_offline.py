"""SkyPilot's own optimizer, offline, on the tasks the launcher builds: `python sky_offline.py < request.json`.

Run it in a subprocess whose HOME is a temporary folder: SkyPilot fixes its paths under ~ when it is imported.
The request holds the catalog rows to seed (SkyPilot's CSV format, under the schema version the installed SkyPilot
reads), the clouds to mark enabled (SkyPilot's own cache of `sky check`, as a check with working credentials
leaves it) and the tasks. Each task goes through SkyPilot's YAML (as the client hands it to the API server), the
managed-job defaults for an island, validation and the optimizer; what it chose is printed as one JSON line.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def build(kind: str, args: dict):
    from yeto.services.launcher.backends.base import IslandLaunch
    from yeto.services.launcher.backends.sky_tasks import head_task, island_task

    if kind == "head":
        return head_task(**args)
    files = {name: Path(path) for name, path in args.pop("files", {}).items()}
    return island_task(IslandLaunch(**args), **files)


def main() -> None:
    request = json.load(sys.stdin)
    import sky
    from sky import global_user_state
    from sky.clouds import cloud as sky_cloud
    from sky.clouds.service_catalog import constants
    from sky.optimizer import Optimizer
    from sky.utils import dag_utils

    root = Path(constants.CATALOG_DIR).expanduser() / constants.CATALOG_SCHEMA_VERSION
    for rel, text in request["catalogs"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)     # no .meta md5 beside it: SkyPilot treats it as the user's, never refetched
    global_user_state.set_enabled_clouds(request["clouds"], sky_cloud.CloudCapability.COMPUTE)
    chosen = {"schema": constants.CATALOG_SCHEMA_VERSION}
    for name, (kind, args) in request["tasks"].items():
        with sky.Dag() as dag:
            build(kind, args)       # a Task made inside a Dag's context joins it
        dag = dag_utils.load_chain_dag_from_yaml_str(dag_utils.dump_chain_dag_to_yaml_str(dag))
        dag.validate()
        if kind == "island":
            dag_utils.fill_default_config_in_dag_for_job_launch(dag)
        Optimizer.optimize(dag, quiet=True)
        (task,) = dag.tasks
        best = task.best_resources
        chosen[name] = {"cloud": str(best.cloud), "instance_type": best.instance_type, "use_spot": best.use_spot,
                        "region": best.region, "accelerators": best.accelerators, "num_nodes": task.num_nodes,
                        "ports": best.ports, "file_mounts": task.file_mounts, "envs": task.envs}
    print("CHOSEN " + json.dumps(chosen))


if __name__ == "__main__":
    main()
