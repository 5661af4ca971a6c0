"""`yeto dashboard`: a live web page per run (phase, islands, rounds, loss curves, tokens/s, spend, ETA) from the tape."""
from __future__ import annotations

HELP = """Examples:
  yeto dashboard                     # http://127.0.0.1:8765/ lists the runs; /run/RUN is one run, live
  yeto dashboard --port 0            # any free port (printed)

The page polls /api/run/RUN every second: the run's events on the tape after the last one it folded,
through the same path as `yeto sql` (the stack's tape writer, else the tape file). Another machine's runs:
an SSH tunnel (ssh -L 8765:127.0.0.1:8765 HOST) rather than --host 0.0.0.0. docs/DASHBOARD.md.
"""


def register(sub) -> None:
    p = sub.add_parser("dashboard", help="serve a live web page per run: islands, rounds, loss curves, spend, ETA",
                       epilog=HELP, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8765, help="TCP port (default: 8765; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default: 127.0.0.1; the page has no login, so keep it local)")
    p.set_defaults(func=run)


def run(args) -> int:
    from yeto.cli.dashboard.server import serve  # lazy: `yeto --help` does not import http.server

    server = serve(args, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"dashboard on http://{'[' + host + ']' if ':' in host else host}:{port}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
