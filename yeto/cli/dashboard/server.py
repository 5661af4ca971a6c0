"""The dashboard's HTTP side: one HTML page and two JSON endpoints, fed by the tape the way `yeto sql` reads it."""
from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

from yeto.cli.dashboard.model import Board, absorb, snapshot
from yeto.cli.tape import PAGE, as_event, run_filter
from yeto.cli.tape_query import tape_query

RUNS_SQL = """
SELECT r.run_id, r.phase, strftime(r.started, '%Y-%m-%d %H:%M:%S') AS started, r.num_rounds AS rounds,
       round(coalesce(s.usd, 0), 4) AS spend_usd, r.num_events AS events
FROM runs r LEFT JOIN spend s USING (run_id) ORDER BY r.started DESC"""
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


class Feed:
    """Every run's board, brought up to date on each read with the events after the last one folded."""

    def __init__(self, args: Any):
        self.args, self.boards, self.lock = args, {}, threading.Lock()

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run's board: its events as the subject vouches for them (`vouched`: no payload's claim of another
        run, type or learner), folded after the last one seen."""
        where = run_filter(run_id)      # a bad id: ValueError
        with self.lock:
            board = self.boards.setdefault(run_id, Board())
        while True:     # the read holds no lock: a slow or stuck one never blocks the next poll
            rows = tape_query(self.args, f"SELECT seq, payload FROM vouched WHERE {where} AND seq > {board.last_seq} "
                                         f"ORDER BY seq LIMIT {PAGE}", run=run_id)["rows"]
            with self.lock:             # boards are folded in stream order, each event once
                for seq, payload in rows:
                    if seq <= board.last_seq:
                        continue        # another poll folded it meanwhile
                    data = json.loads(payload) if isinstance(payload, str) else payload
                    board = absorb(board, seq, as_event(data)) if isinstance(data, dict) else board
                    board.last_seq = seq
            if len(rows) < PAGE:
                break
        with self.lock:
            return snapshot(board, datetime.now(timezone.utc)) if board.view else None

    def runs(self) -> list[dict[str, Any]]:
        result = tape_query(self.args, RUNS_SQL)
        return [dict(zip(result["columns"], row)) for row in result["rows"]]


def page() -> bytes:
    return resources.files("yeto.cli.dashboard").joinpath("dashboard.html").read_bytes()


class Handler(BaseHTTPRequestHandler):
    feed: Feed
    hosts: set[str] | None      # the Host headers answered (None: any); a loopback bind refuses DNS-rebound names

    def do_GET(self) -> None:   # the http.server hook's name
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        if self.hosts is not None and host not in self.hosts:
            return self._send(403, {"error": f"host {host!r} not served"})
        path = unquote(urlsplit(self.path).path)
        try:
            if path == "/" or path.startswith("/run/"):
                return self._send(200, page(), "text/html; charset=utf-8")
            if path == "/api/runs":
                return self._send(200, {"runs": self.feed.runs()})
            if path.startswith("/api/run/"):
                data = self.feed.run(path.removeprefix("/api/run/"))
                return self._send(200, data) if data else self._send(404, {"error": "no events of this run yet"})
        except (ValueError, ConnectionError, TimeoutError) as e:    # no tape yet, a bad id, the bus away: say so
            return self._send(503, {"error": str(e).splitlines()[0] if str(e) else type(e).__name__})
        self._send(404, {"error": f"no such page: {path}"})

    def _send(self, code: int, body: Any, kind: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; "
                                                    "style-src 'unsafe-inline'; img-src 'self' data:")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:   # quiet: one poll a second is not news
        return


def serve(args: Any, host: str, port: int) -> ThreadingHTTPServer:
    """A server bound to host:port (0: any free port), not yet serving; `.server_address` says where."""
    handler = type("DashboardHandler", (Handler,), {"feed": Feed(args),
                                                    "hosts": LOOPBACK | {host} if host in LOOPBACK else None})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
