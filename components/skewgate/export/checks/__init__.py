"""export's checks beside the output comparison: the model lint over the exported graph (`lint.py`) and the
runtime behaviour checks (`behaviour.py`: finite inputs, dynamic batch, determinism, the input hash chain)."""
