"""triton-probe: write a Triton model repository, run a real tritonserver, check the deployment against the model."""
