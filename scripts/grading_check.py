"""redline's graders beside the reference implementations, on the same answers.

Tool calls: BFCL's own AST checker (PyPI `bfcl-eval`, its `ast_checker`, Python
rules) and redline's `tool_ast` grader. Questions are taken from the installed
package's data, several per category; each gets a set of answers, correct and wrong
in the ways that are easy to grade wrongly (parallel calls out of order, optional
parameters left out, an int where a float is due, a string for a number, a missing or
unexpected parameter, a wrong function, a call too many or too few, arguments that are
not JSON, a call where none is due). The cases are written as BFCL question files with
their possible answers, a stub server answers each with its tool calls (streamed, the
arguments cut in two), and `redline run` grades them. Every verdict must be BFCL's, and
every bucket the kind of BFCL's error.

Structured output: the `jsonschema` package's verdict and redline's `json_schema`
grader on the same outputs, each line sending its schema as `response_format` (the
server checks it arrived). Valid must be valid, and invalid JSON unparsed.

Usage: grading_check.py REDLINE WORKDIR
"""

import collections
import copy
import json
import pathlib
import subprocess
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# BFCL's checker imports its model table only to ask whether a model's API renames
# `.` in function names to `_`; OpenAI-style APIs do (redline sends them renamed).
# The table imports every model client BFCL ships, so a stub stands in for it.
_config = types.ModuleType("bfcl_eval.constants.model_config")
_config.MODEL_CONFIG_MAPPING = collections.defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=True))
sys.modules["bfcl_eval.constants.model_config"] = _config

import bfcl_eval  # noqa: E402
import jsonschema  # noqa: E402
from bfcl_eval.constants.enums import Language  # noqa: E402
from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: E402

REDLINE, WORK = sys.argv[1], pathlib.Path(sys.argv[2])
DATA = pathlib.Path(bfcl_eval.__file__).parent / "data"
PER_CATEGORY = 14
CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
              "live_multiple", "live_parallel", "irrelevance"]

# The kinds of BFCL's error types, and redline's bucket for each.
BUCKET_OF = {
    "wrong_func_name": "wrong_tool",
    "missing_required": "missing_param",
    "missing_optional": "missing_param",
    "unexpected_param": "unexpected_param",
    "wrong_count": "wrong_count",
}


def bucket_of(error_type):
    kind, _, detail = error_type.partition(":")
    if kind == "type_error":
        return "param_type"
    if kind in ("value_error", "dict_checker", "list_dict_checker"):
        return "param_value"
    return BUCKET_OF.get(detail)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def oai(name):
    return name.replace(".", "_")


def pick(values, k):
    given = [v for v in values if v != ""]
    return copy.deepcopy(given[k % len(given)]) if given else None


def correct_calls(truth, k, leave_optional_out):
    calls = []
    for call in truth:
        (name, params), = call.items()
        args = {}
        for param, values in params.items():
            if "" in values and leave_optional_out:
                continue
            value = pick(values, k)
            if value is not None:
                args[param] = value
        calls.append((oai(name), args))
    return calls


def declared(functions, name, param):
    for f in functions:
        if oai(f["name"]) == name:
            return f["parameters"]["properties"].get(param, {}).get("type")
    return None


def variants(question, truth):
    """Answers to grade: (label, calls as (name, arguments text), or None for no call)."""
    functions = question["function"]
    base = correct_calls(truth, 0, leave_optional_out=False)
    text = lambda calls: [(n, json.dumps(a)) for n, a in calls]  # noqa: E731
    out = [("correct", text(base)), ("optional left out", text(correct_calls(truth, 1, True)))]
    if len(base) > 1:
        out.append(("parallel, reversed", text(base[::-1])))
        out.append(("a call too few", text(base[:-1])))
    out.append(("a call too many", text(base + base[:1])))
    out.append(("no call", []))
    name, args = base[0]
    out.append(("wrong function", text([(name + "_v2", args)] + base[1:])))
    out.append(("not JSON", [(name, json.dumps(args)[:-1])] + text(base[1:])))
    out.append(("unexpected parameter", text([(name, {**args, "zz_extra": 1})] + base[1:])))
    for param, value in args.items():
        kind = declared(functions, name, param)
        changed = dict(args)
        if kind == "float" and isinstance(value, float) and value.is_integer():
            changed[param] = int(value)
            out.append(("int for float", text([(name, changed)] + base[1:])))
        elif kind == "integer" and not isinstance(value, bool):
            changed[param] = str(value)
            out.append(("string for integer", text([(name, changed)] + base[1:])))
            changed = dict(args, **{param: value + 7919 if isinstance(value, int) else value})
            out.append(("wrong number", text([(name, changed)] + base[1:])))
        elif kind == "string" and isinstance(value, str):
            changed[param] = value.upper().replace(" ", "  ") + "."
            out.append(("string in other case and spacing", text([(name, changed)] + base[1:])))
            changed = dict(args, **{param: value + " and more"})
            out.append(("wrong string", text([(name, changed)] + base[1:])))
        elif kind == "boolean":
            changed[param] = not value
            out.append(("flipped boolean", text([(name, changed)] + base[1:])))
        elif kind == "array" and isinstance(value, list):
            changed[param] = value[::-1]
            out.append(("list reversed", text([(name, changed)] + base[1:])))
    required = [p for p in next(f for f in functions if oai(f["name"]) == name)["parameters"].get("required", []) if p in args]
    if required:
        out.append(("required left out", text([(name, {k: v for k, v in args.items() if k != required[0]})] + base[1:])))
    return out


def bfcl_verdict(question, truth, category, calls):
    """BFCL's verdict and error type on the calls (its FC decoder: JSON arguments)."""
    if truth is None:  # irrelevance: correct without a call
        return (not calls, None if not calls else "irrelevance:called")
    try:
        output = [{name: json.loads(arguments)} for name, arguments in calls]
    except json.JSONDecodeError:
        return (False, "ast_decoder:decoder_failed")
    if not output:
        return (False, "ast_decoder:decoder_failed")
    result = ast_checker(question["function"], output, truth, Language.PYTHON, category, "gpt-4o-2024-11-20-FC")
    return (result["valid"], result.get("error_type"))


ANSWERS = {}
SEEN_FORMATS = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass

    def do_POST(self):
        if self.path != "/v1/chat/completions":  # redline's probe for a tokenizer
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        content = body["messages"][-1]["content"]
        key = content[content.rindex("[case ") :]
        answer = ANSWERS[key]
        SEEN_FORMATS[key] = (body.get("response_format"), len(body.get("tools", [])))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def chunk(delta, finish=None):
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            event = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())

        chunk({"role": "assistant"})
        if isinstance(answer, str) or not answer:
            # No call: the model says so in words.
            said = answer if isinstance(answer, str) else "None of these functions fits."
            half = len(said) // 2
            chunk({"content": said[:half]})
            chunk({"content": said[half:]})
        for i, (name, arguments) in enumerate(answer if isinstance(answer, list) else []):
            half = len(arguments) // 2
            start = {"index": i, "id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments[:half]}}
            chunk({"tool_calls": [start]})
            chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments[half:]}}]})
        chunk({}, "tool_calls" if isinstance(answer, list) and answer else "stop")
        self.wfile.write(b"data: [DONE]\n\n")


def run(spec_name, dataset, n, extra=""):
    spec = WORK / f"{spec_name}.yaml"
    spec.write_text(f"""apiVersion: redline.dev/v1alpha1
kind: InferenceSpec
metadata: {{ name: {spec_name} }}
spec:
  services:
    llm: {{ url: "http://127.0.0.1:{PORT}", model: m }}
  payloadTemplate:
    prompts: {{ dataset: {{ file: "{dataset}", output_tokens: 64{extra} }} }}
  load:
    - {{ concurrency: 1, requests: {n} }}
""")
    out = WORK / f"{spec_name}-out"
    done = subprocess.run([REDLINE, "run", str(spec), "--out", str(out), "--quiet"], capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    records = sorted(read_jsonl(out / "records.jsonl"), key=lambda r: r["seq"])
    assert len(records) == n and all(r["outcome"] == "ok" for r in records), records[:3]
    return records, json.loads((out / "summary.json").read_text())


def check_tool_calls():
    total, by_label = 0, collections.Counter()
    for category in CATEGORIES:
        questions = read_jsonl(DATA / f"BFCL_v4_{category}.json")[:PER_CATEGORY]
        answers_file = DATA / "possible_answer" / f"BFCL_v4_{category}.json"
        truths = {a["id"]: a["ground_truth"] for a in read_jsonl(answers_file)} if answers_file.exists() else {}
        cases = []
        for q in questions:
            truth = truths.get(q["id"])
            answers = variants(q, truth) if truth else [
                ("no call", []),
                ("called anyway", [(oai(q["function"][0]["name"]), "{}")]),
            ]
            for label, calls in answers:
                cases.append((q, truth, label, calls))
        folder = WORK / category
        (folder / "possible_answer").mkdir(parents=True, exist_ok=True)
        lines, possible, expected = [], [], []
        for k, (q, truth, label, calls) in enumerate(cases):
            key = f"[case {category} {k}]"
            copy_q = copy.deepcopy(q)
            copy_q["id"] = f"{q['id']}-{k}"
            copy_q["question"][0][-1]["content"] += f" {key}"
            lines.append(json.dumps(copy_q))
            if truth is not None:
                possible.append(json.dumps({"id": copy_q["id"], "ground_truth": truth}))
            ANSWERS[key] = calls
            expected.append((label, bfcl_verdict(q, truth, category, calls)))
        name = f"BFCL_v4_{category}.json"
        (folder / name).write_text("\n".join(lines) + "\n")
        if possible:
            (folder / "possible_answer" / name).write_text("\n".join(possible) + "\n")
        records, summary = run(f"bfcl-{category}", folder / name, len(cases))
        for record, (label, (valid, error_type)) in zip(records, expected):
            grade = record["grade"]
            ours = grade["verdict"] == "correct"
            assert ours == valid, (category, label, grade, error_type)
            want = bucket_of(error_type) if error_type else None
            if error_type == "ast_decoder:decoder_failed":
                assert grade["verdict"] == "unparsed", (category, label, grade)
            elif error_type == "irrelevance:called":
                assert grade.get("bucket") == "should_not_have_called", (category, label, grade)
            elif want is not None:
                assert grade.get("bucket") == want, (category, label, grade, error_type)
            by_label[(label, valid)] += 1
        quality = summary["quality"]
        assert quality["graded"] == len(cases), quality
        assert quality["correct"] == sum(v for _, (v, _) in expected), quality
        total += len(cases)
    print(f"tool calls: {total} answers over {len(CATEGORIES)} BFCL categories, every verdict BFCL's:")
    for (label, valid), n in sorted(by_label.items()):
        print(f"  {n:4} {label}: {'valid' if valid else 'invalid'}")


SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
     "required": ["city", "days"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "uniqueItems": True}},
     "required": ["tags"]},
    {"type": "object", "properties": {"who": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]+$"}},
     "required": ["name"]}, "score": {"type": "number", "exclusiveMaximum": 1}}, "required": ["who"]},
    {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
    {"type": "object", "properties": {"kind": {"const": "x"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
]
OUTPUTS = [
    '{"city": "Oslo", "days": 3}', '{"city": "Oslo", "days": 0}', '{"city": "Oslo"}',
    '{"city": "Oslo", "days": 3, "extra": true}', '{"city": 5, "days": 3}', '{"city": "Oslo", "days": 2.0}',
    '{"tags": ["a"]}', '{"tags": []}', '{"tags": ["a", "a"]}', '{"tags": ["c"]}',
    '{"who": {"name": "Ada"}, "score": 0.5}', '{"who": {"name": "ada"}}', '{"who": {}}', '{"who": {"name": "Ada"}, "score": 1}',
    '"abc"', '"abcd"', 'null', '{"kind": "x", "a": 1}', '{"kind": "x", "a": 1, "b": 2}', '{"kind": "y", "b": 1}',
    '```json\n{"city": "Bergen", "days": 1}\n```', '{"city": "Oslo", "days": 3', 'Sure! {"city": "Oslo"}',
]


def check_structured_output():
    lines, expected = [], []
    for k, text in enumerate(OUTPUTS):
        for s, schema in enumerate(SCHEMAS):
            key = f"[case schema {k} {s}]"
            fmt = {"type": "json_schema", "json_schema": {"name": f"s{s}", "strict": True, "schema": schema}}
            lines.append(json.dumps({"prompt": f"answer {key}", "schema": schema, "response_format": fmt}))
            ANSWERS[key] = text
            body = text.strip()
            if body.startswith("```"):
                body = body.removeprefix("```json").removeprefix("```").removesuffix("```")
            try:
                value = json.loads(body)
            except json.JSONDecodeError:
                expected.append((key, "unparsed", fmt))
                continue
            valid = jsonschema.validators.validator_for(schema)(schema).is_valid(value)
            expected.append((key, "correct" if valid else "wrong", fmt))
    dataset = WORK / "structured.jsonl"
    dataset.write_text("\n".join(lines) + "\n")
    records, summary = run("structured", dataset, len(lines), ", grader: { type: json_schema }")
    verdicts = collections.Counter()
    for record, (key, want, fmt) in zip(records, expected):
        assert record["grade"]["verdict"] == want, (key, ANSWERS[key], record["grade"], want)
        assert SEEN_FORMATS[key] == (fmt, 0), (key, SEEN_FORMATS[key])
        verdicts[want] += 1
    assert summary["quality"]["unparsed"] == verdicts["unparsed"], summary["quality"]
    print(f"structured output: {len(lines)} outputs x schemas, every verdict jsonschema's "
          f"({dict(verdicts)}), each schema sent as response_format")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
PORT = server.server_address[1]
threading.Thread(target=server.serve_forever, daemon=True).start()
check_tool_calls()
check_structured_output()
server.shutdown()
