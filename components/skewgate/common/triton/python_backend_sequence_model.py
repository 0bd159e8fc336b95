"""Triton Python-backend model that serves a stateful STEP model (`model.onnx` beside this file) under Triton's
sequence batcher, keeping each sequence's state here, keyed by correlation id.

Why here and not in Triton: Triton's implicit state (`sequence_batching { state [...] }`) needs the backend to
hand the next state back through the backend state API (TRITONBACKEND_StateNew/StateUpdate), which the ONNX
Runtime, TensorRT and PyTorch backends call and the Python backend does not. So the state lives in this
model, with the same semantics implicit state has:

- the sequence batcher's controls arrive as input tensors: START (1 on a sequence's first request), END (1 on its
  last), READY (1 when the slot holds a request) and CORRID (the correlation id, UINT64);
- at START a sequence's state is set to the initial state (`initial_state.npz` beside this file, one array per
  state input, batch dimension 1), whatever that correlation id held before;
- each request runs STEP on its inputs and its sequence's state; the state outputs become the next state; the
  client never sends or receives state;
- at END the sequence's state is dropped (a sequence that never ends keeps its state until the model unloads:
  Triton does not tell the backend when it gives up an idle sequence).

The states (`IN=OUT` pairs) come from the config's `parameters { key: "skewgate.states" }` as JSON. Requests the
batcher hands over together (different sequences) are concatenated along the batch dimension, run once, and split
back, as the ONNX Runtime backend would run them. Runs inside tritonserver's own Python (numpy 1.x, onnxruntime).
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

CONTROLS = ("START", "END", "READY", "CORRID")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        here = os.path.dirname(os.path.abspath(__file__))
        self.session = ort.InferenceSession(os.path.join(here, "model.onnx"), providers=["CPUExecutionProvider"])
        self.states = json.loads(config["parameters"]["skewgate.states"]["string_value"])  # IN → OUT
        with np.load(os.path.join(here, "initial_state.npz"), allow_pickle=False) as archive:
            self.initial = {name: archive[name] for name in self.states}
        self.inputs = [i["name"] for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.sequences = {}  # correlation id → {state input: array}

    def _control(self, request, name):
        return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])

    def _state_of(self, request):
        """The state this request runs from: the initial state at START, else its sequence's last one."""
        corrid = self._control(request, "CORRID")
        if self._control(request, "START"):
            self.sequences[corrid] = {name: array.copy() for name, array in self.initial.items()}
        if corrid not in self.sequences:
            raise pb_utils.TritonModelException(f"correlation id {corrid}: no sequence started (START not seen)")
        return corrid, self.sequences[corrid]

    def _keep(self, request, corrid, state):
        """Store the next state, or drop the sequence at END."""
        if self._control(request, "END"):
            self.sequences.pop(corrid, None)
        else:
            self.sequences[corrid] = state

    def execute(self, requests):
        responses = [None] * len(requests)
        live = []  # (index, corrid, feeds) of the requests that run
        for index, request in enumerate(requests):
            if not self._control(request, "READY"):
                responses[index] = pb_utils.InferenceResponse(output_tensors=[])
                continue
            try:
                corrid, state = self._state_of(request)
            except pb_utils.TritonModelException as err:
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err)))
                continue
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            live.append((index, corrid, {**feeds, **state}))
        if not live:
            return responses
        names = [*self.outputs, *self.states.values()]
        if self.batched:
            merged = {name: np.concatenate([feeds[name] for _, _, feeds in live]) for name in live[0][2]}
            results = self.session.run(names, merged)
            start, per_request = 0, []
            for _, _, feeds in live:
                size = len(feeds[self.inputs[0]] if self.inputs else next(iter(feeds.values())))
                per_request.append([r[start:start + size] for r in results])
                start += size
        else:
            per_request = [self.session.run(names, feeds) for _, _, feeds in live]
        for (index, corrid, _), values in zip(live, per_request, strict=True):
            produced = dict(zip(names, values, strict=True))
            self._keep(requests[index], corrid, {name: np.ascontiguousarray(produced[out])
                                                  for name, out in self.states.items()})
            tensors = [pb_utils.Tensor(name, np.ascontiguousarray(produced[name])) for name in self.outputs]
            responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)
        return responses
