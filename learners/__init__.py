"""Learner backends and the one step-boundary module they share (diloco_sync)."""
