"""What `yeto check` asks: each probe answers one `Item` (what, ok / no / MISSING, one line why), never a traceback."""
from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from yeto.infra.bus import connect

T = TypeVar("T")
OK, NO, MISSING = "ok", "no", "MISSING"
"""ok: there. no: absent, and a local run does not need it. MISSING: what you asked for needs it (exit 1)."""
# --output store schemes as the finalizer reads them (r2 and cos speak S3), and the fsspec protocol behind each
STORE_PROTOCOLS = {"s3": "s3", "r2": "s3", "cos": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "abfs",
                   "oci": "oci", "file": "file", "memory": "memory"}


@dataclass(frozen=True)
class Item:
    name: str
    status: str
    detail: str


def version_of(module: str, dist: str) -> str | None:
    """The installed distribution's version when the module is importable (found without importing it)."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "installed"


def within(seconds: float, fn: Callable[[], T]) -> T:
    """fn() on a daemon thread; TimeoutError when it has not answered in time (it is left behind, and does not
    keep the process alive). A credential check may wait on a network an offline machine does not have."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - SystemExit included: handed to the caller as it came
            box["error"] = e
    worker = threading.Thread(target=run, daemon=True, name="yeto-check")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {seconds:.0f}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def answers(url: str, env: dict[str, str], timeout: float = 3.0) -> str | None:
    """None when a client with this environment (credential, CA) connects to `url` in time, else why not."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)

    async def probe() -> None:
        bus = await connect(url, name="yeto-check", connect_timeout=timeout)
        await bus.close()
    try:
        asyncio.run(probe())
        return None
    except Exception as e:  # noqa: BLE001 - any failure is the answer: it does not answer
        return (str(e).splitlines() or [type(e).__name__])[0]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def clouds(api, timeout: float) -> tuple[dict[str, str | None], str | None, str | None]:
    """SkyPilot's check through `api`: (cloud -> None when enabled else why not, why there is no answer, why its API
    server could not serve a launch); a SkyApi without a server (a test double, the rehearsal) has no such problem."""
    def ask() -> tuple[dict[str, str | None], str | None]:
        return api.check(), getattr(api, "api_server_problem", lambda: None)()
    try:
        found, server = within(timeout, ask)
        return found, None, server
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "sky":
            raise
        return {}, "SkyPilot is not installed: pip install -e '.[launcher]'", None
    except TimeoutError as e:
        return {}, f"SkyPilot's check gave {e} (offline, or a cloud's API hangs); `sky check` says which", None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a config error, a cloud SDK that breaks, ...
        text = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return {}, f"SkyPilot's check failed: {text}", None


def output_item(output: str, cloud_run: bool) -> Item:
    """Where --output would put the artifact, and whether this machine has what writing there needs."""
    if not output:
        where = "the run folder on the head VM (`yeto pull RUN` copies it back)" if cloud_run else "the run folder"
        return Item("--output", OK, f"none given: {where}")
    if output.startswith("hf://"):
        if not os.environ.get("HF_TOKEN"):
            return Item("--output", MISSING, f"{output} needs HF_TOKEN with write access: export it")
        return Item("--output", OK, f"{output}: a Hugging Face repo (HF_TOKEN set)")
    if "://" not in output:
        if cloud_run:
            return Item("--output", NO, f"{output} is a path on the head VM for a cloud run: give a store URI "
                                        f"(s3://...), or omit it and `yeto pull RUN` copies the artifact here")
        return Item("--output", OK, f"{output}: a local path (copied there and hash-checked)")
    scheme = output.split("://", 1)[0]
    if scheme not in STORE_PROTOCOLS:
        return Item("--output", MISSING, f"unknown store scheme {scheme!r}: use one of {', '.join(sorted(STORE_PROTOCOLS))}, "
                                         f"hf://org/repo or a local path")
    from fsspec.registry import known_implementations

    impl = known_implementations.get(STORE_PROTOCOLS[scheme], {})
    module = str(impl.get("class", "fsspec")).split(".")[0]
    if importlib.util.find_spec(module) is None:
        return Item("--output", MISSING, f"{output} needs the {module} package: pip install {module}"
                                         + (" (the head VM uploads the artifact: it needs it too)" if cloud_run else ""))
    return Item("--output", OK, f"{output}: {module} is installed; the store's credentials are checked at upload")
