"""`yeto chaos kill RUN ISLAND`: kill a local island's processes for real (SIGKILL), to watch it be replaced."""
from __future__ import annotations

import signal

from yeto.cli.common import run_id_arg, state_dir
from yeto.services.launcher.api import LocalBackend


def register(sub) -> None:
    p = sub.add_parser("chaos", help="failure injection for tests and demos")
    s = p.add_subparsers(dest="chaos_cmd", metavar="ACTION", required=True)
    k = s.add_parser("kill", help="SIGKILL the processes of a local island's current generation")
    k.add_argument("run", type=run_id_arg, help="run id")
    k.add_argument("island", type=int, help="island index (0-based, in --gpu order)")
    k.set_defaults(func=cmd_kill)


def cmd_kill(args) -> int:
    backend = LocalBackend(state_dir(args))
    gen = backend.current_generation(args.run, args.island)
    if gen is None:
        raise ValueError(f"run {args.run} has no local island {args.island} under {state_dir(args)} "
                         f"(islands are numbered from 0 in --gpu order)")
    if not backend.status(args.run, args.island, gen, "").running:
        print(f"island {args.island} generation {gen} of {args.run} is not running")
        return 1
    backend.stop(args.run, args.island, gen, "", sig=signal.SIGKILL)
    print(f"killed island {args.island} generation {gen} of {args.run}; the launcher will replace it")
    return 0
