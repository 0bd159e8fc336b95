"""Triton machinery that more than one step uses: the client (probe, parity), the model repository writer (probe,
the tests, the demo) and the `tritonserver` lifecycle (probe, the demo)."""
