"""Shared edges: nats-server management, the bus, the tape writer, the service runner, settings, the local stack."""
