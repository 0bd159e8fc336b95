"""parity-diff: PyTorch vs ONNX Runtime FP32 vs INT8 vs Triton, layer by layer, first divergent layer named."""
