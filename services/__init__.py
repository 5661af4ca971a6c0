"""The four services: planner, launcher, syncer, finalizer; each wires pure logic onto the shared runner."""
