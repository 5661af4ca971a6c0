"""nats-server itself: one server with JetStream on disk, a cluster of them on this machine, and a head's TLS material."""
