"""Triton Python-backend model that serves `model.onnx` (beside this file) with onnxruntime.

Copied into a model repository by skewgate's repository writer; it runs inside tritonserver's own Python
environment (numpy 1.x and onnxruntime), not skewgate's. Requests that Triton's dynamic batcher hands over
together are concatenated into one batch, as the ONNX Runtime backend would run them, then split back.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.onnx")
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0
        # `reshape`: the shape the model sees, where it differs from the API's `dims` (an id per sample: the
        # model's [batch], the API's [batch, 1]); the JSON form drops an empty `shape`
        self.model_shape = {i["name"]: [int(d) for d in i["reshape"].get("shape", [])]
                            for i in config["input"] if "reshape" in i}
        self.api_shape = {o["name"]: [int(d) for d in o["dims"]] for o in config["output"] if "reshape" in o}

    def execute(self, requests):
        feeds_per_request = [
            {name: self._as(pb_utils.get_input_tensor_by_name(request, name).as_numpy(), self.model_shape.get(name))
             for name in self.inputs}
            for request in requests
        ]
        if not self.batched:
            return [self._respond(self.session.run(self.outputs, feeds)) for feeds in feeds_per_request]
        sizes = [len(feeds[self.inputs[0]]) for feeds in feeds_per_request]
        merged = {name: np.concatenate([feeds[name] for feeds in feeds_per_request]) for name in self.inputs}
        results = self.session.run(self.outputs, merged)
        responses, start = [], 0
        for size in sizes:
            responses.append(self._respond([r[start:start + size] for r in results]))
            start += size
        return responses

    def _as(self, array, shape):
        """`array` in `shape` per sample (whole, for an unbatched model); as it is where `shape` is None."""
        if shape is None:
            return array
        return array.reshape((array.shape[0], *shape) if self.batched else tuple(shape))

    def _respond(self, arrays):
        tensors = [pb_utils.Tensor(name, np.ascontiguousarray(self._as(a, self.api_shape.get(name))))
                   for name, a in zip(self.outputs, arrays, strict=True)]
        return pb_utils.InferenceResponse(output_tensors=tensors)
