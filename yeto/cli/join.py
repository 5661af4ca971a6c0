"""`yeto join` (a learner on this machine takes a run's external slot), `yeto join-token`, launch's --external-* flags.

`yeto join RUN [--token-file F|-] [--backend torch|mlx]`, `yeto join-token RUN --slot K`, and `yeto launch`'s
`--external-learners N` / `--external-price` (slots after the --gpu islands, their tokens printed once).

The token (services/launcher/join_token.py) carries the bus URL, the slot's learner credential, the run, slot,
generation and learner recipe. The credential goes to the learner in a 0600 file named by $YETO_NATS_CREDS, never
on a command line; the token itself comes from $YETO_JOIN_TOKEN, a file or stdin (--token-file), never from the command
line either: `--token T` is refused, since every user of the machine can list a process's arguments.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from yeto.cli.common import run_id_arg, state_dir
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect
from yeto.infra.bus.nats_bus import redact
from yeto.infra.bus.perms import learner_inbox, learner_user
from yeto.schemas.learner_contract import BACKENDS, LearnerArgs
from yeto.services.launcher.api import EXTERNAL, JoinToken, external_entry, read_token

TOKEN_ENV = "YETO_JOIN_TOKEN"
CA_ENV = "YETO_NATS_CA"       # infra/bus/nats_bus.py pins the server's certificate to it over tls://


def register(sub) -> None:
    j = sub.add_parser("join", help="run a learner here in a run's external slot (the token from yeto launch)",
                       description=__doc__.splitlines()[0])
    j.add_argument("run", type=run_id_arg, help="run id")
    j.add_argument("--token-file", default=None, help=f"a file holding the slot's join token, or - to read it from "
                   f"stdin (default: ${TOKEN_ENV})")
    j.add_argument("--token", default=None, help="refused: a token on the command line is in every user's process list")
    joinable = [b for b in BACKENDS.values() if b.joinable]
    j.add_argument("--backend", choices=[b.name for b in joinable], default="torch", help="learner backend: " + "; ".join(
        f"{b.name} ({b.summary})" for b in joinable))
    j.add_argument("--model", default=None, help="this machine's copy of the base (a local directory; the run's pin "
                   "is still checked)")
    j.add_argument("--data", default=None, help="this machine's copy of the data (the run's pin is still checked)")
    j.add_argument("--device", default=None, help="passed to the learner (torch: cuda, npu, cpu; mlx: gpu, cpu)")
    j.set_defaults(func=cmd_join)
    t = sub.add_parser("join-token", help="print the join token of a run's external slot (a secret)")
    t.add_argument("run", type=run_id_arg, help="run id")
    t.add_argument("--slot", type=int, required=True, help="the slot's island index")
    t.set_defaults(func=lambda args: print(read_token(state_dir(args), args.run, args.slot)) or 0)


def add_launch_arguments(p) -> None:
    p.add_argument("--external-learners", type=int, default=0, help="island slots learners on other machines join "
                   "with `YETO_JOIN_TOKEN=T yeto join RUN` (tokens printed once; again with `yeto join-token`)")
    p.add_argument("--external-price", type=float, default=0.0, help="$/hr to bill per joined learner (default 0)")


def slots(args) -> list[dict]:
    """The fleet entries of --external-learners."""
    num, price = getattr(args, "external_learners", 0) or 0, getattr(args, "external_price", 0.0) or 0.0
    if num < 0 or price < 0:
        raise ValueError("--external-learners and --external-price must be >= 0")
    return [external_entry(price) for _ in range(num)]


def on_cloud(fleet: list[dict]) -> bool:
    """Whether any island is a cloud one (external slots are neither local processes nor cloud jobs)."""
    return any(f["cloud"] not in ("local", EXTERNAL) for f in fleet)


def print_tokens(args, run_id: str, fleet: list[dict], wait_s: float = 60.0) -> None:
    """Each external slot's token, once the launcher opened it (a local stack's state dir), or how to get it."""
    for slot in [i for i, f in enumerate(fleet) if f["cloud"] == EXTERNAL]:
        deadline, token = time.monotonic() + wait_s, None
        while token is None and time.monotonic() < deadline:
            try:
                token = read_token(state_dir(args), run_id, slot)
            except ValueError:
                time.sleep(0.2)      # the launcher opens slots right after RunLaunched
        # The token in the environment, not on the learner machine's process list (as --token would be).
        print(f"  external slot {slot}: YETO_JOIN_TOKEN="
              f"{token or f'$(yeto join-token {run_id} --slot {slot})'} yeto join {run_id} --backend torch|mlx"
              + ("" if token else "   (the token where the stack runs)"))


def learner_argv(token: JoinToken, backend: str, recipe_path: Path, device: str | None, url: str) -> list[str]:
    args = LearnerArgs(run_id=token.run_id, learner=token.learner, generation=token.generation, nats_url=url,
                       recipe=str(recipe_path), learner_index=token.slot, num_learners=token.num_islands,
                       start_step=token.start_step, device=device)
    return [sys.executable, "-m", BACKENDS[backend].module, *args.to_argv()]


def given_token(args) -> str:
    """The join token from --token-file (a path, or - for stdin) or $YETO_JOIN_TOKEN; --token is refused."""
    if args.token is not None:
        raise ValueError(f"--token puts the join token, a secret that trains in the slot, on the command line, where "
                         f"every user of this machine can list it; give it as ${TOKEN_ENV}=..., or with --token-file "
                         f"FILE (0600), or pipe it in with --token-file -")
    if args.token_file == "-":
        return sys.stdin.read().strip()
    if args.token_file:
        try:
            return Path(args.token_file).expanduser().read_text().strip()
        except OSError as e:
            raise ValueError(f"--token-file {args.token_file}: cannot read it ({e.strerror})") from None
    return os.environ.get(TOKEN_ENV, "")


PROBE_S = 10.0     # how long the credential's first connection may take before the learner is left to wait for the bus


def check_credential(token: JoinToken, url: str, env: dict[str, str]) -> None:
    """Before a learner starts on it: the token's credential is the one issued to the learner it names (an altered
    token names another, and its learner would loop on permission violations), and the bus takes it (a wrong password
    would be retried for an hour). An unreachable bus is not refused here: the learner waits for it."""
    cred = token.credential
    if not cred:
        return
    again = f"get the slot's current token with `yeto join-token {token.run_id} --slot {token.slot}` where the stack runs"
    if (cred.get("user"), cred.get("inbox_prefix")) != (learner_user(token.run_id, token.learner),
                                                        learner_inbox(token.run_id, token.learner)):
        raise ValueError(f"this join token was altered: its credential is not the one issued to {token.learner} of "
                         f"{token.run_id}; {again}")
    saved = {k: os.environ.get(k) for k in (bus_auth.CREDS_ENV, CA_ENV)}
    os.environ.update({k: env[k] for k in saved if k in env})
    refused = _Refusals()
    bus_log = logging.getLogger("yeto.infra.bus.nats_bus")     # where the connection's errors are told, one a retry
    bus_log.addFilter(refused)
    try:
        asyncio.run(_probe(url))
    except ConnectionError:
        if refused.seen:
            raise ValueError(f"the bus at {redact(url)} refused this join token's credential (authorization "
                             f"violation): the token was altered, or the run has ended; {again}") from None
    finally:
        bus_log.removeFilter(refused)
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


class _Refusals(logging.Filter):
    """Keeps the probe's retries off stderr, and notes whether the server refused the credential in any of them
    (the error left at the deadline may be the reset that follows a refusal)."""

    seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen = self.seen or "authorization violation" in record.getMessage().lower()
        return False


async def _probe(url: str) -> None:
    bus = await connect(url, name="yeto-join-check", connect_timeout=PROBE_S)
    await bus.close()


def cmd_join(args) -> int:
    token = JoinToken.decode(given_token(args))
    if token.run_id != args.run:
        raise ValueError(f"this token is for run {token.run_id}, not {args.run}")
    recipe = {**token.recipe, **{k: v for k, v in (("model", args.model), ("data", args.data)) if v}}
    with tempfile.TemporaryDirectory(prefix="yeto-join-") as tmp:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop(TOKEN_ENV, None)
        env.pop(bus_auth.CREDS_ENV, None)
        if token.credential:
            env[bus_auth.CREDS_ENV] = str(bus_auth.write_secret(Path(tmp) / "creds.json", json.dumps(token.credential)))
        if token.ca:        # a head's TLS certificate, pinned as on a cloud island
            env[CA_ENV] = str(bus_auth.write_secret(Path(tmp) / "ca.pem", token.ca))
        url = getattr(args, "nats_url", None) or token.url
        check_credential(token, url, env)
        recipe_path = Path(tmp) / "recipe.json"
        recipe_path.write_text(json.dumps(recipe, sort_keys=True))
        print(f"joining {token.run_id} as {token.learner} generation {token.generation} ({args.backend})", flush=True)
        # --nats-url (above): the same server by another route (an SSH tunnel to a local stack, which binds 127.0.0.1)
        return subprocess.call(learner_argv(token, args.backend, recipe_path, args.device, url), env=env)
