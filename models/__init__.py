"""foundry models: PyTorch definitions, the annotated ONNX exporter, configs and fixtures."""
