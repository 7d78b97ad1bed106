"""Drives `redline sim`'s KServe v2 gRPC listener with NVIDIA's `tritonclient[grpc]`,
as a Triton LLM deployment is called: health and metadata, a whole `infer`, and a
decoupled stream (`start_stream`, `async_stream_infer`) whose token responses join to
the whole answer and end with a final response carrying the simulator's ground truth;
exits non-zero on any mismatch."""
import json
import queue
import sys
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

base = sys.argv[1]
checks = 0


def check(condition, what):
    global checks
    if not condition:
        sys.exit(f"FAILED: {what}")
    checks += 1


endpoints = json.load(urllib.request.urlopen(base + "/redline/endpoints"))
port, model = endpoints["kserve_grpc_port"], endpoints["model"]
client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{port}")
check(client.is_server_live() and client.is_server_ready(), "live and ready")
check(client.is_model_ready(model), "the model is ready")
check(not client.is_model_ready("no-such-model"), "another model is not")
metadata = client.get_model_metadata(model)
check(metadata.name == model and metadata.inputs[0].name == "text_input", f"metadata: {metadata}")


def inputs(text, max_tokens, stream):
    tensors = []
    for name, value, datatype in [
        ("text_input", np.array([text.encode()], dtype=np.object_), "BYTES"),
        ("max_tokens", np.array([max_tokens], dtype=np.int32), "INT32"),
        ("stream", np.array([stream], dtype=bool), "BOOL"),
        ("exclude_input_in_output", np.array([True], dtype=bool), "BOOL"),
        ("temperature", np.array([0.0], dtype=np.float32), "FP32"),
    ]:
        tensor = grpcclient.InferInput(name, list(value.shape), datatype)
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors


prompt = "Tell me about queues."
whole = client.infer(model, inputs(prompt, 8, False), outputs=[grpcclient.InferRequestedOutput("text_output")])
text = whole.as_numpy("text_output")[0].decode()
check(len(text) > 0, f"a whole answer: {text!r}")

responses = queue.Queue()
client.start_stream(callback=lambda result, error: responses.put((result, error)))
client.async_stream_infer(model, inputs(prompt, 8, True), request_id="r1")
deltas, final = [], None
while final is None:
    result, error = responses.get(timeout=10)
    check(error is None, f"no error in the stream: {error}")
    response = result.get_response()
    if response.parameters.get("triton_final_response") and response.parameters["triton_final_response"].bool_param:
        final = response
    deltas.append(result.as_numpy("text_output")[0].decode())
client.stop_stream()
check(sum(1 for d in deltas if d) == 8, f"eight token responses: {deltas}")
check("".join(deltas) == text, "the stream's tokens join to the whole answer (same prompt, temperature 0)")
check(final.id == "r1", "the request id comes back")
truth = json.loads(final.parameters["redline"].string_param)
check(truth["completion_tokens"] == 8 and truth["first_token_us"] <= truth["finish_us"], f"the truth: {truth}")

try:
    client.infer("no-such-model", inputs(prompt, 4, False))
    check(False, "an unknown model is refused")
except InferenceServerException as error:
    check("StatusCode.NOT_FOUND" in str(error.status()) and "unknown model" in error.message(), f"NOT_FOUND: {error}")

print(f"tritonclient[grpc] against redline sim: {checks} checks passed")
