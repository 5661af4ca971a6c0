"""Process entry point of the planner service: `python -m yeto.services.planner --nats-url URL`."""
from yeto.infra.runner.main import main
from yeto.services.planner.wiring import build

if __name__ == "__main__":
    main("planner", build)
