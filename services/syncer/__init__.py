"""The syncer service: fragment ingest, merge math, the outer step, broadcast, snapshots."""
