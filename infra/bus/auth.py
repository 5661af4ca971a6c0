"""The stack's bus credentials on disk: 0600 identity files under <state>/auth, the users file nats-server
includes, and a learner's credential issued per island generation and revoked when its run ends (each time the
server reloads the users file: it drops a connection whose credential is no longer there). Permissions: bus/perms.py.

An identity file is JSON {"user", "password"[, "inbox_prefix", "generation", "revoked"]}; a process finds its own
through $YETO_NATS_CREDS (infra/bus/nats_bus.py reads it), never through its command line.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

from yeto.infra import procs
from yeto.infra.bus.perms import learner_inbox, learner_user, users_conf

CREDS_ENV = "YETO_NATS_CREDS"


def write_secret(path: Path, text: str) -> Path:
    """Write a file only its owner can read, 0600 from its first byte (never written, then chmod'ed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)       # an older file of another mode keeps its mode through O_TRUNC
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return path


def _identity(path: Path, user: str, **extra: str) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    ident = {"user": user, "password": secrets.token_urlsafe(32), **extra}
    write_secret(path, json.dumps(ident))
    return ident


def auth_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "auth"


def users_file(state_dir: Path) -> Path:
    return auth_dir(state_dir) / "users.conf"


def operator_file(state_dir: Path) -> Path:
    return auth_dir(state_dir) / "operator.json"


def service_file(state_dir: Path) -> Path:
    return auth_dir(state_dir) / "service.json"


def learner_file(state_dir: Path, run_id: str, learner: str) -> Path:
    return auth_dir(state_dir) / "learners" / run_id / f"{learner}.json"


def prepare(state_dir: Path, learners: tuple[tuple[str, str], ...] = ()) -> Path:
    """The operator and service identities (made once), credentials for `learners` ((run id, learner) pairs),
    and the users file rendered from them all; returns the users file."""
    _identity(operator_file(state_dir), "operator")
    _identity(service_file(state_dir), "service")
    for run, learner in learners:
        for folder in (auth_dir(state_dir) / "learners", learner_file(state_dir, run, learner).parent):
            folder.mkdir(exist_ok=True, mode=0o700)
        _identity(learner_file(state_dir, run, learner), learner_user(run, learner), inbox_prefix=learner_inbox(run, learner))
    return _render(state_dir)


def _render(state_dir: Path) -> Path:
    learners = {key: ident for key, (_, ident) in _learners(state_dir, "*").items() if not ident.get("revoked")}
    return write_secret(users_file(state_dir), users_conf(operator=json.loads(operator_file(state_dir).read_text()),
                                                            service=json.loads(service_file(state_dir).read_text()),
                                                            learners=learners))


def _learners(state_dir: Path, run_id: str) -> dict[tuple[str, str], tuple[Path, dict]]:
    """(run, learner) -> (file, identity) of the learner credentials of `run_id` ("*": of every run)."""
    return {(p.parent.name, p.stem): (p, json.loads(p.read_text()))
            for p in (auth_dir(state_dir) / "learners").glob(f"{run_id}/*.json")}


def issue_learner(state_dir: Path, run_id: str, learner: str, generation: int = 0) -> Path | None:
    """The credential file of `learner`'s island generation `generation`; None when the stack under state_dir runs
    without authentication (nothing to issue). Issued on first use; a newer generation gets a new password in the same
    file, so the generation it replaces is refused from the server's reload on (its processes hold the old password;
    a redelivered start of the same generation keeps it). A revoked credential (its run ended) stays revoked."""
    path = learner_file(state_dir, run_id, learner)
    if not users_file(state_dir).exists():
        return None
    with _locked(state_dir):
        ident = json.loads(path.read_text()) if path.exists() else None
        if ident is None:
            prepare(state_dir, ((run_id, learner),))
            ident = json.loads(path.read_text())
        elif ident.get("revoked") or ident.get("generation", 0) >= generation:
            return path
        write_secret(path, json.dumps({**ident, "password": _password(state_dir, run_id, learner, generation),
                                       "generation": generation}))
        _render(state_dir)
        reload_server(state_dir)
    return path


def learner_key_file(state_dir: Path) -> Path:
    """A head over several VMs: the key every node derives the same learner password from (infra/head/credentials.py)."""
    return auth_dir(state_dir) / "learners.key"


def _password(state_dir: Path, run_id: str, learner: str, generation: int) -> str:
    """A fresh random password; with a learner key, the one every node of the head derives for this generation."""
    key = learner_key_file(state_dir)
    if not key.exists():
        return secrets.token_urlsafe(32)
    digest = hmac.new(key.read_bytes(), f"{run_id}/{learner}/{generation}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def revoke_run(state_dir: Path, run_id: str) -> int:
    """Revoke every learner credential of `run_id` (its run ended): marked revoked in its file, left out of the users
    file, and the server reloaded, which drops their connections at once. Returns how many were revoked (0: none left
    to revoke, or a stack without authentication)."""
    if not users_file(state_dir).exists():
        return 0
    with _locked(state_dir):
        live = [(path, ident) for path, ident in _learners(state_dir, run_id).values() if not ident.get("revoked")]
        for path, ident in live:
            write_secret(path, json.dumps({**ident, "revoked": True}))
        if live:
            _render(state_dir)
            reload_server(state_dir)
    return len(live)


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """One writer of the credentials at a time (launcher threads issue concurrently)."""
    with open(auth_dir(state_dir) / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def reload_server(state_dir: Path) -> bool:
    """SIGHUP the stack's nats-server, or every node of its cluster (each verified by its recorded start time): it
    re-reads the users file."""
    try:
        rec = json.loads((Path(state_dir) / "stack.json").read_text())
    except (OSError, ValueError):
        return False
    nodes = [n for n in rec["pids"] if n == "nats-server" or n.startswith("nats-server-")]
    return any([procs.signal_if_ours(rec["pids"][n], rec.get("started_at", {}).get(n), signal.SIGHUP) for n in nodes])


def load_identity(path: str | Path) -> dict:
    """An identity file's contents, with an error that says what to fix (and never what is inside)."""
    try:
        ident = json.loads(Path(path).read_text())
        if not isinstance(ident, dict) or not {"user", "password"} <= set(ident):
            raise ValueError("needs user and password")
        return ident
    except (OSError, ValueError) as e:
        raise ValueError(f"${CREDS_ENV}={path}: not a readable credential file ({type(e).__name__}); "
                         f"point it at the stack's auth/<who>.json") from None
