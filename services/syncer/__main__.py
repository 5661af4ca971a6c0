"""Process entry point of the syncer service: `python -m yeto.services.syncer --nats-url URL`."""
from yeto.infra.service_main import main
from yeto.services.syncer.wiring import build

if __name__ == "__main__":
    main("syncer", build)
