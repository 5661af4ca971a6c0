"""A region out of capacity, rehearsed to the end: `yeto launch --gpu aws:1xt4@us-east-2,aws:1xt4@us-west-2 --wait`
from the laptop rents the head through the rehearsal's SkyApi; the rehearsal refuses every job in us-east-2 (SkyPilot's
ResourcesUnavailableError), so the head's launcher records OfferRefused, the head's planner (reading SkyPilot's
catalog as a VM downloads it: the rehearsal seeds the head's ~/.sky/catalogs) answers with MoveIsland to the
next-best T4 offer (us-west-2), island 0's generation 1 starts there and trains, and the run finalizes: RunFinalized,
the refusal and the re-plan (island 0's generation 1 requested in us-west-2) on the tape brought home, the artifact
verifies, and `yeto status RUN` names the refusal and the move. And an island no offer can replace: refused in
us-east-2, moved to us-west-2 and refused there too, with eu-west-1 over the run's bound (a fleet named by --gpu: the
launched fleet's price + 10 %): the head's planner puts ReplanFailed on the tape once, the other island trains to
--max-steps, the finalizer cuts the run without island 0 (the cut's detail names it), the run finalizes, and
`yeto status RUN` says the move, its bound and what to change.

test_cloud_rehearsal_refusal.py is the same refusal with the services in this process, stopped at the moved job's
start; this one goes through the head's own stack to the end."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

import rehearsal_world
from rehearsal_jobs import locked
from test_cloud_rehearsal import TRAIN_FLAGS, Laptop, learner_tiny

pytestmark = pytest.mark.slow
HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch"
GPU_INFO = ('"{\'Gpus\': [{\'Name\': \'T4\', \'Manufacturer\': \'NVIDIA\', \'Count\': 1, \'MemoryInfo\': '
            '{\'SizeInMiB\': 16384}}], \'TotalGpuMemoryInMiB\': 16384}"')
# g4dn.xlarge in SkyPilot's catalog layout; spot prices chosen for the test: us-east-2 cheapest, us-west-2 next
# (within the refused price + the planner's 10% margin), eu-west-1 dearer
T4_ROWS = [("us-east-2", "us-east-2a", 0.2000), ("us-west-2", "us-west-2a", 0.2100), ("eu-west-1", "eu-west-1a", 0.2500)]


def t4_catalog(folder: Path) -> Path:
    (folder / "aws").mkdir(parents=True)
    rows = [f"g4dn.xlarge,T4,1.0,4.0,16.0,{GPU_INFO},0.526,{spot:.6f},{region},{zone},x86_64"
            for region, zone, spot in T4_ROWS]
    (folder / "aws" / "vms.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    return folder


def sql(laptop: Laptop, run: str, query: str) -> list[dict]:
    got = laptop.yeto("sql", "--run", run, query, "--format", "json")
    assert got.returncode == 0, got.stdout + got.stderr
    return json.loads(got.stdout)


def events(laptop: Laptop, run: str, *types: str) -> dict[str, list[dict]]:
    """The run's events of `types` on the tape brought home, payloads by type in stream order: one `yeto sql` for all."""
    kinds = ", ".join(f"'{t}'" for t in types)
    found: dict[str, list[dict]] = {t: [] for t in types}
    for row in sql(laptop, run, f"select type, payload from events where run_id = '{run}' and type in ({kinds}) "
                                "order by seq"):
        found[row["type"]].append(json.loads(row["payload"]))
    return found


def laptop_in(rehearsal_dir: Path, tmp_path: Path, refuse: list[str]) -> tuple[Laptop, Path]:
    """The laptop, and the T4 catalog both it and the head's SkyPilot read; the rehearsal refuses `refuse`."""
    from yeto.services.planner.catalog import schema_version

    catalog = t4_catalog(tmp_path / "catalog")
    shutil.copytree(catalog, tmp_path / "sky-catalogs" / schema_version())
    with locked(rehearsal_dir) as state:
        state["world"].update(refuse_regions=refuse, sky_catalogs=str(tmp_path / "sky-catalogs"))
    root = tmp_path / "laptop"
    root.mkdir()
    rehearsal_world.hide(rehearsal_dir, [root])
    laptop = Laptop(root / "home", rehearsal_dir, learner_tiny.write_model_dir(root / "model"),
                    learner_tiny.write_chat_jsonl(root / "chat.jsonl", 300))
    return laptop, catalog


@pytest.mark.timeout(600)
def test_a_refused_region_is_replaced_by_the_next_best_offer_and_the_run_finalizes(rehearsal_dir, tmp_path):
    laptop, catalog = laptop_in(rehearsal_dir, tmp_path, refuse=["us-east-2"])
    run, started = "cloud-replan", time.monotonic()
    done = laptop.yeto("launch", "--gpu", "aws:1xt4@us-east-2,aws:1xt4@us-west-2", "--catalog-dir", str(catalog),
                       "--model", str(laptop.model), "--data", str(laptop.data), *TRAIN_FLAGS, "--run-id", run, "--yes",
                       "--max-steps", "16", "--wait", timeout=540)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{laptop.story()}"
    print(f"{run}: launch --wait took {time.monotonic() - started:.0f}s")
    world = rehearsal_world.record(rehearsal_dir)
    assert world["refused"] and {r[1] for r in world["refused"]} == {"us-east-2"}
    assert {r[0] for r in world["refused"]} == {f"yeto-{run}-island-0-g0"}
    islands = sorted(j["name"] for j in laptop.islands(run))      # island 0 never ran in us-east-2
    assert islands == [f"yeto-{run}-island-0-g1", f"yeto-{run}-island-1-g0"], islands
    # the tape brought home: the refusal, the re-plan (generation 1 requested on the next-best offer), the end
    tape = events(laptop, run, "OfferRefused", "IslandRequested", "RunFinalized")
    refusals = tape["OfferRefused"]
    assert len(refusals) == 1, refusals
    r = refusals[0]
    assert (r["island"], r["generation"], r["cloud"], r["region"], r["gpu"], r["cause"]) == \
        (0, 0, "aws", "us-east-2", "T4", "capacity")
    assert r["price_per_hour"] == pytest.approx(0.20) and "ResourcesUnavailableError" in r["reason"]
    specs = [m["spec"] for m in tape["IslandRequested"] if int(m["island"]) == 0]
    assert [s["region"] for s in specs] == ["us-east-2", "us-west-2"], specs
    assert specs[1]["price_per_hour"] == pytest.approx(0.21) and specs[1]["gpu"] == "T4"
    assert len(tape["RunFinalized"]) == 1, tape["RunFinalized"]
    verified = laptop.yeto("verify", str(laptop.home / "runs" / run / "artifact"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    status = laptop.yeto("status", run)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "island 0 gen 0: aws us-east-2 1xT4 refused (capacity)" in status.stdout, status.stdout
    assert "moved to aws us-west-2 1xT4 as gen 1" in status.stdout and "finalized" in status.stdout.lower()


@pytest.mark.timeout(600)
def test_an_island_no_offer_can_replace_is_cut_out_when_the_other_trained_to_max_steps_and_the_run_finalizes(
        rehearsal_dir, tmp_path):
    laptop, catalog = laptop_in(rehearsal_dir, tmp_path, refuse=["us-east-2", "us-west-2"])
    run, started = "cloud-unplaced", time.monotonic()
    # island 0: us-east-2 refuses, the planner moves it to us-west-2 (the fleet $0.46/hr within the launched $0.45/hr
    # + 10%), which refuses too; eu-west-1's $0.25/hr would take the fleet to $0.50/hr: ReplanFailed. Island 1 trains
    # in eu-west-1 to --max-steps, and the run is cut without island 0 and finalizes.
    done = laptop.yeto(
        "launch", "--gpu", "aws:1xt4@us-east-2,aws:1xt4@eu-west-1", "--catalog-dir", str(catalog), "--model",
        str(laptop.model), "--data", str(laptop.data), *TRAIN_FLAGS, "--run-id", run, "--yes", "--max-steps", "16",
        "--wait", timeout=540)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{laptop.story()}"
    print(f"{run}: launch --wait took {time.monotonic() - started:.0f}s")
    tape = events(laptop, run, "RunLaunched", "ReplanFailed", "FinalCutRequested", "RunFinalized")
    prices = tape["RunLaunched"][0]["recipe"]["prices"]     # what the planner's bound is made of
    assert (prices["budget_per_hour"], prices["price_margin"]) == (None, 0.1), prices
    assert [(f["island"], f["generation"]) for f in tape["ReplanFailed"]] == [(0, 1)]
    assert [c["detail"] for c in tape["FinalCutRequested"]] == [
        f"every island trained to --max-steps (never placed: island 0, which no offer could take; see `yeto status "
        f"{run}`)"]
    assert len(tape["RunFinalized"]) == 1, tape["RunFinalized"]
    assert [j["name"] for j in laptop.islands(run)] == [f"yeto-{run}-island-1-g0"]     # island 0 never ran
    status = laptop.yeto("status", run).stdout
    assert "island 0 gen 0: aws us-east-2 1xT4 refused (capacity)" in status, status
    assert "      moved to aws us-west-2 1xT4 as gen 1" in status
    assert ("      next-best offer aws:1x1xt4@us-west-2 (g4dn.xlarge) at $0.21/hr, another region; the fleet's "
            "$0.460/hr within the launched fleet's $0.450/hr + 10% ($0.495/hr; the run named its fleet, no budget)") \
        in status
    assert "island 0 gen 1: aws us-west-2 1xT4 refused (capacity)" in status
    assert ("      no offer can take its place: the cheapest other offer that holds island 0, aws:1x1xT4@eu-west-1 at "
            "$0.25/hr, would take the fleet's $0.500/hr over the launched fleet's $0.450/hr + 10% ($0.495/hr; the run "
            "named its fleet, no budget); launch again with --gpu aws:1xt4@eu-west-1 to pay $0.25/hr for it, or "
            "without --gpu with --exclude-regions us-east-2,us-west-2 so the planner picks the fleet within "
            "--budget-per-hour (raise it to allow that).") in status, status
