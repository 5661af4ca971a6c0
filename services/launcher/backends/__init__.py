"""Island backends of the launcher: local processes and SkyPilot managed jobs, behind one interface (base.py)."""
