"""DAG wiring only: which components run in which order. Logic lives in the steps' `core.py`."""
