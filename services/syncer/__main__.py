"""Process entry point of the syncer service: `python -m yeto.services.syncer --nats-url URL [--shard K/N]`."""
from yeto.infra.runner.main import main
from yeto.services.syncer.wiring import build, flags

if __name__ == "__main__":
    main("syncer", build, extra_flags=flags)
