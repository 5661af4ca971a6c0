"""A cloud run's head as the laptop sees it: the records of its VM, the data it is sent, and what comes back."""
