"""The planner prices a head of 1 or 3 VMs (`--head-nodes`, docs/CLUSTER.md): each VM at the head type's price, off the
budget, and `yeto shape` says what the head buys and what the other two VMs cost; 2 is refused with the reason."""
from __future__ import annotations

import pytest

from yeto.cli.main import main
from yeto.services.planner.api import FIXTURE_DIR
from yeto.services.planner.catalog import load_catalog
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

pytestmark = pytest.mark.timeout(60)
CATALOG = load_catalog(catalog_dir=FIXTURE_DIR)


def test_three_head_vms_cost_three_head_prices_off_the_budget():
    one = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0), CATALOG, Signals())
    three = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0, head_nodes=3), CATALOG, Signals())
    assert one.feasible and three.feasible and one.head is not None and three.head is not None
    each = one.head_price_per_hour
    assert three.head_price_per_hour == pytest.approx(3 * each) and three.head["nodes"] == 3
    assert three.total_price_per_hour <= 40.0 and three.islands_price_per_hour <= one.islands_price_per_hour
    assert three.launch_command.endswith("--head-nodes 3") and "--head-nodes" not in one.launch_command
    assert f"(+${2 * each:.2f}/hr for the other 2)" in three.head["buys"] and "mirror" in one.head["buys"]


def test_shape_says_what_three_head_vms_buy_and_refuses_two(capsys):
    args = ["shape", "--model", "llama31-70b", "--budget-per-hour", "40", "--catalog-dir", str(FIXTURE_DIR)]
    assert main([*args, "--head-nodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "head (on-demand, 3 VMs)" in out and "losing any one loses no acknowledged event" in out
    assert main([*args, "--head-nodes", "2"]) == 2
    assert "Raft majority" in capsys.readouterr().err
