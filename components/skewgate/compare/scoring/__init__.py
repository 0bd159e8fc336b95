"""compare's scoring: metrics over bootstrap count rows and paired intervals (`metrics.py`)."""
