"""The laptop's records of its cloud runs' head VMs: `<state>/heads/<run>/` (0700), every file in it 0600.

`bundle/` becomes the head's state dir (shipped by file mount): the bus identities (bus_auth.prepare), the TLS
certificate the laptop and the islands pin, and `secrets/env.json`, the variables the islands get from this
machine (HF_TOKEN and each `--env-from-host NAME`). `head.json` holds no secret, only where things are: the
head's URL once known, the CA and operator credential files, its price and its state.
"""
from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from yeto.infra.bus import auth as bus_auth
from yeto.infra.nats import tls
from yeto.schemas.base import check_run_id

CERT_HOSTS = ["yeto-head", "127.0.0.1", "localhost"]
HEAD_STATE = "~/.yeto/head"             # the bundle's place on the head VM: its state dir (`~` is the head's home)
STATES = ("launching", "up", "copied", "down")
HOST_SECRETS = ("HF_TOKEN",)            # always forwarded when set on this machine
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def head_dir(state_dir: Path, run_id: str) -> Path:
    return Path(state_dir) / "heads" / check_run_id(run_id)


def bundle_dir(state_dir: Path, run_id: str) -> Path:
    return head_dir(state_dir, run_id) / "bundle"


def host_secrets(env: Mapping[str, str], names: Sequence[str]) -> dict[str, str]:
    """HF_TOKEN when set, and every name the user asked for; a name not set here is refused (before renting)."""
    for name in names:
        if not _ENV_NAME.match(name):
            raise ValueError(f"--env-from-host {name!r}: not an environment variable name")
    missing = [n for n in names if n not in env]
    if missing:
        raise ValueError(f"--env-from-host {', '.join(missing)}: not set in this shell; export "
                         f"{'it' if len(missing) == 1 else 'them'} first (the islands get the value from here)")
    return {n: env[n] for n in (*HOST_SECRETS, *names) if n in env}


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)          # mkdir's mode passes through the umask, and an existing folder keeps its own
    return path


def prepare_bundle(state_dir: Path, run_id: str, secrets: Mapping[str, str], nodes: int = 1) -> Path:
    """The head's future state dir: credentials, TLS certificate, the islands' env file; returns its path. A head of
    `nodes` > 1 VMs also gets what its nodes must share: the route credential and the key they derive each learner's
    password from (every node gets the bundle, so each admits every learner: infra/head/credentials.py)."""
    for folder in (Path(state_dir) / "heads", head_dir(state_dir, run_id), bundle_dir(state_dir, run_id)):
        _private_dir(folder)
    bundle = bundle_dir(state_dir, run_id)
    bus_auth.prepare(bundle)
    cert, _ = tls.self_signed(bundle / "tls", CERT_HOSTS)
    os.chmod(cert, 0o600)          # public, but the bundle is one private folder: nothing in it readable by others
    bus_auth.write_secret(bundle / "secrets" / "env.json", json.dumps(dict(secrets)))
    if nodes > 1:
        from yeto.infra.stack import StackPaths
        from yeto.infra.stack.servers import head_routes

        head_routes(StackPaths(bundle), CERT_HOSTS)
        if not bus_auth.learner_key_file(bundle).exists():
            bus_auth.write_secret(bus_auth.learner_key_file(bundle), base64.b64encode(os.urandom(32)).decode())
    return bundle


def new_record(state_dir: Path, run_id: str, *, price_per_hour: float, launched_at: float) -> dict:
    bundle = bundle_dir(state_dir, run_id)
    return {"run_id": run_id, "cluster": f"yeto-head-{run_id}", "url": "", "ca_file": str(bundle / "tls" / "server.pem"),
            "creds_file": str(bus_auth.operator_file(bundle)), "price_per_hour": price_per_hour,
            "launched_at": launched_at, "state": "launching"}


def write_head(state_dir: Path, rec: dict) -> dict:
    assert rec["state"] in STATES, rec["state"]
    _private_dir(head_dir(state_dir, rec["run_id"]))
    bus_auth.write_secret(head_dir(state_dir, rec["run_id"]) / "head.json", json.dumps(rec, indent=2))
    return rec


def update_head(state_dir: Path, run_id: str, **changes) -> dict:
    rec = head_record(state_dir, run_id)
    assert rec is not None, f"no head record for {run_id}"
    return write_head(state_dir, {**rec, **changes})


def head_record(state_dir: Path, run_id: str) -> dict | None:
    """The run's head record, or None when the run has no head here (a local run, or another machine's)."""
    try:
        return json.loads((head_dir(state_dir, run_id) / "head.json").read_text())
    except (OSError, ValueError):
        return None


def heads(state_dir: Path) -> list[dict]:
    """Every head record under the state dir, oldest launch first."""
    recs = []
    for path in (Path(state_dir) / "heads").glob("*/head.json"):
        try:
            recs.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue               # a record half-written by a crash: the others still count
    return sorted(recs, key=lambda r: r.get("launched_at") or 0)


def head_env(rec: dict) -> dict[str, str]:
    """The environment through which this process talks to the head as its operator (files by path, never contents)."""
    return {bus_auth.CREDS_ENV: rec["creds_file"], "YETO_NATS_CA": rec["ca_file"]}


def copied_tape(state_dir: Path, run_id: str) -> Path:
    """Where the run's tape is copied back once it ended (`yeto pull`); `yeto sql/status/tape` read it then."""
    return head_dir(state_dir, run_id) / "tape.duckdb"
