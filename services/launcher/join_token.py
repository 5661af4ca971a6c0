"""Join tokens of external learners (`yeto launch --external-learners N`, then `yeto join RUN` with $YETO_JOIN_TOKEN).

A token is everything a learner on any machine needs to take one island slot of a run: the bus URL, the slot's
own learner credential (scoped as a cloud island's, infra/bus/perms.py), the run, the slot and its generation, and
the learner recipe. It is opaque to the user (`yeto-join-` + base64url JSON) and a secret: the launcher writes the
current generation's token to one 0600 file per slot, `yeto launch` and `yeto join-token` print it, nothing puts it
on the tape or in a log. A re-opened slot (a new generation) has a new token; the credential stays the slot's.
"""
from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from yeto.infra.run_paths import run_path

PREFIX = "yeto-join-"
EXTERNAL = "external"      # a fleet entry's cloud: a slot a learner joins with a token, started by no backend


@dataclass(frozen=True, kw_only=True)
class JoinToken:
    url: str
    """The bus URL the learner connects to."""
    credential: dict[str, str]
    """The slot's identity file contents (user, password, inbox_prefix); empty when the stack runs without auth."""
    run_id: str
    learner: str
    slot: int
    """The island index (the learner's data shard)."""
    generation: int
    num_islands: int
    start_step: int
    recipe: dict[str, Any]
    """The learner's TrainRecipe as a dict."""
    ca: str = ""
    """The head's TLS certificate (PEM) the learner pins over tls://; empty for a local stack."""

    def encode(self) -> str:
        return PREFIX + base64.urlsafe_b64encode(json.dumps(asdict(self), sort_keys=True).encode()).decode()

    @classmethod
    def decode(cls, text: str) -> JoinToken:
        text = text.strip()
        try:
            if not text.startswith(PREFIX):
                raise ValueError
            return cls(**json.loads(base64.urlsafe_b64decode(text[len(PREFIX):].encode())))
        except (ValueError, TypeError):
            raise ValueError("not a join token: pass what `yeto launch --external-learners` or `yeto join-token RUN "
                             "--slot K` printed (it starts with yeto-join-)") from None


def external_entry(price_per_hour: float) -> dict[str, Any]:
    """The fleet entry of one external slot."""
    return {"cloud": EXTERNAL, "gpu": "any", "count": 1, "nodes": 1, "region": None, "spot": False,
            "price_per_hour": price_per_hour}


def slot_file(state_dir: Path, run_id: str, slot: int) -> Path:
    return run_path(Path(state_dir), run_id) / "external" / f"slot-{slot}.token"


def read_token(state_dir: Path, run_id: str, slot: int) -> str:
    """The slot's current token, as the launcher wrote it; ValueError saying why there is none."""
    try:
        return slot_file(state_dir, run_id, slot).read_text().strip()
    except OSError:
        raise ValueError(f"run {run_id} has no open external slot {slot} under {state_dir} (slots are opened by "
                         f"`yeto launch --external-learners N`, numbered after the --gpu islands; a slot whose run "
                         f"ended, or that was dropped, has none)") from None
