"""SkyPilot's own credential check (`sky check`), for `RealSky.check`: which clouds work, and why the others do not.

With SkyPilot's default local API server, the server runs on this machine with this user's credentials and
shares SkyPilot's cache of enabled clouds (~/.sky), so the check runs in this process: nothing has to start
(skypilot 0.9.2's server also starts only with the FastAPI it was released with), and it takes seconds.
`check_capabilities` refreshes SkyPilot's cache as `sky check` does (so `sky launch` sees the same clouds);
each cloud SkyPilot did not enable is asked once more for its reason, SkyPilot's own hint. With a remote API
server (`api_server.endpoint` in ~/.sky/config.yaml) only the server's credentials count: it is asked.
"""
from __future__ import annotations

import re


def hint_line(text: str | None, limit: int = 200) -> str:
    """SkyPilot's hint on one line (it spans several, with the commands that fix it), shortened to whole sentences
    and whole command lines within `limit` characters, the first always kept: never cut inside a word."""
    pieces = [p for line in (text or "disabled").splitlines() for p in re.split(r"(?<=[.!?])\s+", " ".join(line.split()))
              if p]
    line, kept = pieces[0], 1
    for before, piece in zip(pieces, pieces[1:]):
        longer = f"{line}{'; ' if before.startswith('$') else ' '}{piece}"   # a command ends without a full stop
        if len(longer) > limit:
            break
        line, kept = longer, kept + 1
    if kept == len(pieces):
        return line
    if kept > 1 and line.endswith(":"):     # it introduces what is left out
        line = line[:-len(pieces[kept - 1])].rstrip("; ")
    return f"{line} (`sky check` has the rest)"


def check_clouds() -> dict[str, str | None]:
    """Cloud name (lower case, as --gpu spells it) -> None when SkyPilot may use it, else why not (its hint)."""
    from sky import check as sky_check
    from sky import sky_logging
    from sky.clouds.cloud import CloudCapability
    from sky.server import common as server_common
    from sky.utils import registry

    if not server_common.is_api_server_local():
        return _ask_server()
    compute = CloudCapability.COMPUTE
    result: dict[str, str | None] = {}
    with sky_logging.silent():    # else its progress lines, meant for an API server's client, land on stdout
        try:
            enabled = set(sky_check.check_capabilities(quiet=True, capabilities=[compute]))
        except SystemExit:        # SkyPilot's way of saying that no cloud is enabled
            enabled = set()
        for cloud in registry.CLOUD_REGISTRY.values():
            if repr(cloud) in enabled:
                result[repr(cloud).lower()] = None
                continue
            try:
                ok, reason = cloud.check_credentials(compute)
            except Exception as e:  # noqa: BLE001 - SkyPilot's check catches everything per cloud too
                ok, reason = False, f"{type(e).__name__}: {e}"
            result[repr(cloud).lower()] = "not in allowed_clouds of ~/.sky/config.yaml" if ok else hint_line(reason)
    return dict(sorted(result.items()))


def _ask_server() -> dict[str, str | None]:
    from sky.client import sdk

    try:
        sdk.get(sdk.check(clouds=None, verbose=False))
    except SystemExit:            # the server's check found no cloud: its cache below says the same
        pass
    return {str(c).lower(): None for c in sdk.get(sdk.enabled_clouds())}


def api_server_problem() -> str | None:
    """None when SkyPilot's API server answers, or (a local one) can start here; else why not, on one line.
    Every launch goes through it; a local server starts on the first call, by importing the module tried here."""
    from sky import exceptions
    from sky.server import common as server_common

    try:
        server_common.check_server_healthy()
        return None
    except exceptions.ApiServerConnectionError:
        if not server_common.is_api_server_local():
            return f"SkyPilot's API server at {server_common.get_server_url()} does not answer"
    except RuntimeError as e:     # a server of another SkyPilot version
        return hint_line(str(e))
    try:
        import sky.server.server  # noqa: F401 - what `sky api start` runs: importing it builds the server's app
    except Exception as e:  # noqa: BLE001 - whatever stops it, the launch would stop on it too
        too_new = "FastAPI.__init__" in str(e)    # skypilot 0.9 passes FastAPI a keyword that 0.145 dropped
        hint = " (this SkyPilot's server needs fastapi<0.145: pip install 'fastapi<0.145')" if too_new else ""
        return hint_line(f"SkyPilot's API server cannot start here: {type(e).__name__}: {e}{hint}")
    return None
