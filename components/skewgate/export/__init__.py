"""export: PyTorch ExportedProgram → ONNX (dynamo exporter), checked against ONNX Runtime."""
