"""Installing a learner's log handler (learners/transport/logs.py): on the root logger, with the process's secrets,
and on the way out of an uncaught exception, so a crash's traceback reaches `yeto logs` too."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from types import TracebackType

from yeto.infra.bus.auth import CREDS_ENV, load_identity
from yeto.learners.transport.logs import BusLogHandler


def known_secrets() -> tuple[str, ...]:
    """The values this process must never log: its bus password, $HF_TOKEN, and what its env file holds."""
    found = [os.environ.get("HF_TOKEN", "")]
    try:
        found.append(load_identity(os.path.expanduser(os.environ[CREDS_ENV]))["password"] if os.environ.get(CREDS_ENV) else "")
        env_file = os.environ.get("YETO_ENV_FILE")
        if env_file and Path(env_file).expanduser().exists():
            found += [v for v in json.loads(Path(env_file).expanduser().read_text()).values() if isinstance(v, str)]
    except (OSError, ValueError) as e:   # the learner's own start reports a bad file; masking goes on with the rest
        logging.getLogger(__name__).warning("log masking: %s", e)
    return tuple(s for s in found if s)


def install(nats_url: str, *, run_id: str, learner: str, generation: int,
            head_rendezvous: str | None = None) -> BusLogHandler:
    """Send this process's log lines (yeto's INFO and up, everyone's warnings) and any uncaught exception to
    the run's log stream; warnings still reach stderr, where the local log file and `sky jobs logs` see them."""
    handler = BusLogHandler(nats_url, run_id=run_id, learner=learner, generation=generation, secrets=known_secrets(),
                            head_rendezvous=head_rendezvous)
    root = logging.getLogger()
    if not root.handlers:     # logging's last resort (warnings to stderr) stops once a handler exists: keep it
        root.addHandler(logging.StreamHandler())
        root.handlers[0].setLevel(logging.WARNING)
    root.addHandler(handler)
    root.setLevel(min(root.level, logging.INFO))
    logging.captureWarnings(True)
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        # To the bus only (stderr gets the traceback from the previous hook), then flushed before the process ends.
        handler.handle(logging.LogRecord("yeto.learner", logging.CRITICAL, __file__, 0, "uncaught exception", None,
                                         (kind, value, tb)))
        handler.close()
        previous(kind, value, tb)
    sys.excepthook = excepthook
    return handler
