"""End to end on a real local stack: a run's artifact is signed by the stack's key, whose public half is on the tape
(ArtifactWritten), and `yeto verify --key` passes it with the provenance the run recorded (pinned base and data,
both islands, the rounds merged)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
import learner_tiny
from e2e_stack import Stack
from yeto.infra import signing
from yeto.infra.source_pins import pin_model, sha256_file

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(480)
def test_a_finalized_runs_artifact_verifies_against_the_key_on_its_tape(tmp_path):
    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", 200)
    s = Stack(tmp_path / "home", model, data)
    try:
        s.launch("prov-run", "--max-steps", "24")
        s.finish("prov-run", timeout=420)
        (written,) = s.events("prov-run", "ArtifactWritten")
        key = signing.public_hex(signing.stack_key(tmp_path / "home"))
        assert written["signer_public_key"] == key and "manifest.sig" in written["files"]
        artifact = Path(written["local_path"])
        done = s.yeto("verify", str(artifact), "--key", key)
        assert done.returncode == 0, done.stdout + done.stderr
        prov = json.loads((artifact / "manifest.json").read_text())["provenance"]
        assert prov["base"] == pin_model(str(model)) and prov["data"]["files"] == {"chat.jsonl": sha256_file(data)}
        assert [i["island"] for i in prov["fleet"]] == [0, 1] and prov["rounds_merged"] > 0
        assert set(prov["learner_steps"]) == {"island-0", "island-1"}
        card = (artifact / "artifact" / "README.md").read_text()     # the model card: losses from the tape, a local base
        assert "library_name: peft" in card and f"the local model `{model}` (no Hub id" in card
        assert re.search(r"\| island-0 \| \d+ \| \d+\.\d{4} \|", card) and "Rounds merged: 0." not in card
    finally:
        s.down()
