"""Process entry point of the finalizer service: `python -m yeto.services.finalizer --nats-url URL`."""
from yeto.infra.runner.main import main
from yeto.services.finalizer.wiring import build

if __name__ == "__main__":
    main("finalizer", build)
