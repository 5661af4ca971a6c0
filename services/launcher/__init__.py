"""The launcher service: fleet controller, backends, island health and replacement."""
