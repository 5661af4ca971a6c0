"""The finalizer service: budget cutoff, final cut, checkpoint marking, artifact."""
