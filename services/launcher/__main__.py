"""Process entry point of the launcher service: `python -m yeto.services.launcher --nats-url URL`."""
from yeto.infra.runner.main import main
from yeto.services.launcher.wiring import build

if __name__ == "__main__":
    main("launcher", build)
