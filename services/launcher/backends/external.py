"""External islands: slots a learner on any machine joins with a token (`yeto join`); nothing is started here.

Starting a generation issues the slot's learner credential (infra/bus/auth.py, the scope of a cloud island's) and
writes the generation's join token (services/launcher/join_token.py) to a 0600 file; stopping it removes that
file; the launcher publishes nothing yet (services/launcher/effects.py). Nothing here sees the remote process, so
the island counts as running and its learner's events decide (services/launcher/external.py): its first progress
is IslandUp (or IslandReplaced), max_steps is its exit; a silent one is preempted and its slot re-opened as a new
generation (services/launcher/logic.py).
"""
from __future__ import annotations

from pathlib import Path

from yeto.infra.bus import auth as bus_auth
from yeto.infra.stack import StackPaths, read_record
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.launcher.backends.base import IslandLaunch, IslandRef, IslandStatus
from yeto.services.launcher.external import handle
from yeto.services.launcher.join_token import JoinToken, slot_file


class ExternalBackend:
    name = "external"

    def __init__(self, state_dir: Path, nats_url: str) -> None:
        self.state_dir, self.nats_url = Path(state_dir), nats_url

    def start(self, launch: IslandLaunch) -> str:
        creds = bus_auth.issue_learner(self.state_dir, launch.run_id, launch.learner, launch.generation)
        token = JoinToken(url=launch.nats_url or self.nats_url,
                          credential=bus_auth.load_identity(creds) if creds is not None else {},
                          run_id=launch.run_id, learner=launch.learner, slot=launch.island,
                          generation=launch.generation, num_islands=launch.num_islands, start_step=launch.start_step,
                          recipe=LaunchRecipe.upcast(launch.recipe).train.learner_recipe(), ca=self._ca())
        bus_auth.write_secret(slot_file(self.state_dir, launch.run_id, launch.island), token.encode())
        return handle(launch.island, launch.generation)

    def _ca(self) -> str:
        """The head's certificate, as a cloud island gets it (the stack record's), for joins over TLS."""
        ca = (read_record(StackPaths(self.state_dir)) or {}).get("ca_file")
        return Path(ca).read_text() if ca else ""

    def status(self, run_id: str, island: int, generation: int, handle: str) -> IslandStatus:
        return IslandStatus(True)

    def statuses(self, islands: list[IslandRef]) -> list[IslandStatus]:
        return [IslandStatus(True) for _ in islands]

    def stop(self, run_id: str, island: int, generation: int, handle: str) -> None:
        """Close the slot: its token file goes (a remote learner still running is refused by the server once the next
        generation's password is issued, and by the syncer once that generation is announced; its run's end revokes
        the credential)."""
        path = slot_file(self.state_dir, run_id, island)
        try:
            if JoinToken.decode(path.read_text()).generation == generation:
                path.unlink()
        except (OSError, ValueError):
            pass
