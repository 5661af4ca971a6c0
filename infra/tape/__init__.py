"""The tape: the writer mirroring YETO_EVT into DuckDB, its store and views, read-only SQL, and copies of a run's events."""
