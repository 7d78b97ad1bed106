//! Spec errors, word for word: file, line, column, field path, and the fix.

use redline::scenario::Scenario;

fn errors(text: &str) -> String {
    match redline::spec::parse("test.yaml", text).and_then(|file| Scenario::from_spec(&file, text))
    {
        Ok(_) => panic!("the spec was accepted"),
        Err(errors) => errors.to_string(),
    }
}

const HEAD: &str =
    "apiVersion: redline.dev/v1alpha1\nkind: InferenceSpec\nmetadata: { name: t }\nspec:\n";

fn spec(body: &str) -> String {
    format!("{HEAD}{body}")
}

const SERVICES: &str = "  services:\n    llm: { url: embedded }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n";

#[test]
fn unknown_key_names_the_nearest_one() {
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ rat: 5, duration: 10s }}\n"
    ));
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\n\
         test.yaml:10:9: spec.load[0]: unknown field `rat`\n  \
         fix: did you mean `rate`? Choose from: sweep, replay, arrival, rate, ramp_to, burstiness, max_concurrency, concurrency, think_time, duration, requests\n"
    );
}

#[test]
fn bad_values_say_how_to_write_them() {
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ rate: 5, duration: 10x }}\n"
    ));
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\n\
         test.yaml:10:28: spec.load[0].duration: invalid duration `10x`: write a number and a unit (us, ms, s, m, h), e.g. `30s` or `250ms`\n"
    );
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ rate: -2, duration: 10s }}\n"
    ));
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\ntest.yaml:10:9: spec.load[0].rate: must be a positive number, got -2\n"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = spec(
        "  services:\n    llm: { url: \"ftp://x\", model: m }\n  payloadTemplate:\n    service: lm\n    prompts: { synthetic: { input_tokens: 0, output_tokens: 5 } }\n  load:\n    - { rate: 5 }\n    - concurrency: 2\n      duration: 5s\n      arrival: poisson\n",
    );
    assert_eq!(
        errors(&text),
        "5 problems in the spec:\n\
         test.yaml:6:12: spec.services.llm.url: `ftp://x` is neither `embedded`, `balanced`, `stdio` nor an http:// or https:// URL\n  \
         fix: write `embedded` or e.g. `https://llm.example.com`\n\
         test.yaml:8:5: spec.payloadTemplate.service: names service `lm`, which is not under spec.services\n  \
         fix: did you mean `llm`? Choose from: llm\n\
         test.yaml:9:29: spec.payloadTemplate.prompts.synthetic.input_tokens: a length must be at least 1 token\n\
         test.yaml:11:5: spec.load[0]: a stage needs a `duration` or a `requests` budget\n  \
         fix: add e.g. `duration: 30s`\n\
         test.yaml:14:7: spec.load[1].arrival: applies only to open-loop (`rate`) stages\n  \
         fix: remove it, or use `rate` instead of `concurrency`\n"
    );
}

#[test]
fn open_and_closed_loop_cannot_mix() {
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ rate: 5, concurrency: 3, duration: 10s }}\n"
    ));
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\n\
         test.yaml:10:5: spec.load[0]: has both `rate` (open loop) and `concurrency` (closed loop)\n  \
         fix: keep one: `rate` for a target request rate, `concurrency` for N sessions back to back\n"
    );
}

/// A NUL byte once made the YAML reader yield the same failed document forever: the
/// first fuzzing run found `redline validate` filling memory on it.
#[test]
fn a_control_character_is_located_and_read_once() {
    let text =
        spec("  seed: 1\n  services: { llm: { url: embed\u{0}ded } }\n---\nkind: ScaleSpec\n");
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\n\
         test.yaml:6:32: a control character (0x00) YAML does not allow\n  \
         fix: remove it: a spec is plain text (is this the right file?)\n"
    );
}

/// Found by fuzzing: yaml_serde panicked on an alias with no anchor in a flow mapping
/// after `---`, and `redline validate` crashed with exit 101.
#[test]
fn an_alias_without_its_anchor_is_located_not_a_crash() {
    let text =
        "# c\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nmetadata: { name: *gate }\n";
    assert_eq!(
        errors(text),
        "1 problem in the spec:\n\
         test.yaml:5:19: alias `*gate` has no anchor `&gate` before it\n  \
         fix: define `&gate` first, or write the value itself\n"
    );
    // Windows line ends and letters of several bytes before it change nothing.
    let text = "# é\r\n---\r\napiVersion: redline.dev/v1alpha1\r\nkind: ScaleSpec\r\nmetadata: { é: 1, name: *gate }\r\n";
    assert!(
        errors(text).contains("test.yaml:5:25: alias `*gate` has no anchor"),
        "{}",
        errors(text)
    );
}

#[test]
fn kind_version_and_empty_files() {
    let text = "apiVersion: redline.dev/v1\nkind: InferenceSpc\nspec: {}\n";
    assert_eq!(
        errors(text),
        "2 problems in the spec:\n\
         test.yaml:1:1: document 1: unsupported apiVersion `redline.dev/v1`\n  \
         fix: use `apiVersion: redline.dev/v1alpha1`\n\
         test.yaml:2:1: kind: unknown kind `InferenceSpc` in document 1\n  \
         fix: did you mean `InferenceSpec`? Choose from: InferenceSpec, ScaleSpec, ModelLoadSpec\n"
    );
    assert_eq!(
        errors("\n"),
        "1 problem in the spec:\ntest.yaml: the spec file is empty\n  fix: start from examples/quickstart.yaml\n"
    );
}

#[test]
fn a_real_server_needs_a_model_and_a_set_api_key() {
    let text = spec(
        "  services:\n    llm: { url: \"http://127.0.0.1:9\", api_key_env: REDLINE_TEST_SURELY_UNSET }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n  qpsTarget: 5\n  duration: 10s\n",
    );
    assert_eq!(
        errors(&text),
        "2 problems in the spec:\n\
         test.yaml:6:5: spec.services.llm.model: is required for a real server\n  \
         fix: name the served model, as GET /v1/models lists it\n\
         test.yaml:6:39: spec.services.llm.api_key_env: environment variable `REDLINE_TEST_SURELY_UNSET` is not set\n  \
         fix: export REDLINE_TEST_SURELY_UNSET=… before the run\n"
    );
}

#[test]
fn every_example_spec_is_valid() {
    let mut seen = 0;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            let file = redline::spec::parse(&name, &text).unwrap_or_else(|e| panic!("{e}"));
            Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"));
            seen += 1;
        }
    }
    assert!(seen >= 1);
}

/// A flow's chat steps take their own `max_tokens`, never the dataset's: the warning
/// about unbounded answers names the steps, and only those without one.
#[test]
fn unbounded_answers_are_named_where_they_are_set() {
    let flow = |max_tokens: &str| {
        let text = spec(&format!(
            "  services:\n    llm: {{ url: embedded }}\n    embed: {{ url: embedded, api: embeddings }}\n  payloadTemplate:\n    prompts: {{ file: examples/data/rag-queries.jsonl }}\n    flow:\n      - embed: {{ service: embed }}\n      - chat: {{ name: agent, service: llm{max_tokens} }}\n  load:\n    - {{ concurrency: 1, requests: 1 }}\n"
        ));
        let file = redline::spec::parse("test.yaml", &text).unwrap();
        Scenario::from_spec(&file, &text).unwrap().warnings()
    };
    assert_eq!(flow(", max_tokens: 48"), Vec::<String>::new());
    assert_eq!(
        flow(""),
        [
            "flow step `agent` sets no max_tokens: the server decides how long its answers are (set `max_tokens` on the step)"
        ]
    );
    let text = spec(
        "  services:\n    llm: { url: embedded }\n  payloadTemplate:\n    prompts: { file: examples/data/rag-queries.jsonl }\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    let file = redline::spec::parse("test.yaml", &text).unwrap();
    let warnings = Scenario::from_spec(&file, &text).unwrap().warnings();
    assert!(
        warnings[0].starts_with(
            "200 of the 200 prompts of examples/data/rag-queries.jsonl carry no max_tokens"
        ),
        "{warnings:?}"
    );
}

#[test]
fn the_payload_must_fit_the_service_api() {
    let text = spec(
        "  services:\n    web: { url: \"http://127.0.0.1:9\", api: http }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n  qpsTarget: 5\n  duration: 10s\n",
    );
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\n\
         test.yaml:8:5: spec.payloadTemplate.prompts: applies to chat and completions services, not `api: http`\n  \
         fix: describe the request under `request:` instead\n"
    );
    let text = spec(
        "  services:\n    llm: { url: embedded }\n  payloadTemplate:\n    request: { method: \"GE T\", path: health }\n  qpsTarget: 5\n  duration: 10s\n",
    );
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\n\
         test.yaml:8:5: spec.payloadTemplate.request: applies only to `api: http` services\n  \
         fix: set `api: http` on the service, or describe prompts instead\n"
    );
    let text = spec(
        "  services:\n    web: { url: embedded, api: http }\n  payloadTemplate:\n    request: { method: \"GE T\", path: health }\n  qpsTarget: 5\n  duration: 10s\n",
    );
    assert_eq!(
        errors(&text),
        "2 problems in the spec:\n\
         test.yaml:8:16: spec.payloadTemplate.request.method: `GE T` is not an HTTP method\n  \
         fix: write e.g. GET or POST\n\
         test.yaml:8:32: spec.payloadTemplate.request.path: `health` is not a path\n  \
         fix: start it with `/`, e.g. `/health`\n"
    );
}

#[test]
fn an_unknown_tokenizer_lists_the_choices() {
    let text = spec(
        "  services:\n    llm: { url: embedded, tokenizer: gpt2 }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n  qpsTarget: 5\n  duration: 10s\n",
    );
    assert_eq!(
        errors(&text),
        "1 problem in the spec:\ntest.yaml:6:27: spec.services.llm.tokenizer: unknown tokenizer `gpt2`: choose from cl100k_base, o200k_base, sim, or give the path of a Hugging Face tokenizer.json\n"
    );
}

#[test]
fn a_sweep_finds_its_own_rates_and_goodput_needs_a_bound() {
    let text = spec(&format!(
        "{SERVICES}  goodput: {{}}\n  load:\n    - {{ sweep: {{ rates: 4 }}, rate: 5, duration: 10s }}\n"
    ));
    assert_eq!(
        errors(&text),
        "2 problems in the spec:\n\
         test.yaml:9:3: spec.goodput: sets no bound\n  \
         fix: give at least one of `ttft`, `tpot`, `e2e`, `correct`, e.g. `goodput: { ttft: 500ms }`\n\
         test.yaml:11:30: spec.load[0].rate: does not apply to a `sweep`, which finds its own rates\n  \
         fix: remove it, or make it a stage of its own\n"
    );
}

#[test]
fn slo_mistakes_name_the_field_and_the_choices() {
    let text = format!(
        "{}  load:\n    - {{ rate: 5, duration: 10s }}\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nspec:\n  sloThresholds:\n    ttf: {{ p99: \"<= 350ms\" }}\n    tpot: {{ p100: \"< 50ms\" }}\n    e2e: {{ p99: \"<= 3 parsecs\" }}\n    pass_rate: \"<= 99%\"\n    preset: strict\n",
        spec(SERVICES)
    );
    assert_eq!(
        errors(&text),
        "5 problems in the spec:\n\
         test.yaml:16:5: spec.sloThresholds.ttf: unknown metric `ttf`\n  \
         fix: did you mean `ttft`? Choose from: ttft, ttft_from_intended, time_to_second_token, time_to_first_answer, time_to_first_reasoning, reasoning_time, reasoning_tokens, reasoning_share, itl, tpot, e2e, e2e_from_intended, pass_rate, availability, error_rate, goodput, output_throughput, kv_cache_hit_rate, tool_success, recall_at_k, accuracy, unparsed\n\
         test.yaml:17:13: spec.sloThresholds.tpot.p100: `p100` is not a percentile between p0 and p100 (exclusive) with an expression\n  \
         fix: write e.g. `p99: \"<= 350ms\"` or `p99.9: \"< 1s\"`\n\
         test.yaml:18:12: spec.sloThresholds.e2e.p99: `<= 3 parsecs` needs a unit: us, ms or s\n  \
         fix: write e.g. `p99: \"<= 350ms\"` (units us, ms, s)\n\
         test.yaml:19:5: spec.sloThresholds.pass_rate: `<= 99%` points the wrong way for `pass_rate`\n  \
         fix: write e.g. `\">= 99.9%\"`\n\
         test.yaml:20:5: spec.sloThresholds.preset: unknown preset `strict`\n  \
         fix: choose from: redlines\n"
    );
}

#[test]
fn a_model_load_spec_is_accepted_and_checked() {
    let load = "---\napiVersion: redline.dev/v1alpha1\nkind: ModelLoadSpec\nspec:\n  modelRef: Qwen/Qwen2.5-7B-Instruct\n  resourceLimits: { gpuMemory: 24Gi }\n  cachePolicy: warm\n";
    let base = format!(
        "{}  load:\n    - {{ rate: 5, duration: 10s }}\n",
        spec(SERVICES)
    );
    let text = format!("{base}{load}");
    let file = redline::spec::parse("test.yaml", &text).unwrap();
    assert_eq!(
        file.model_load.unwrap().model_ref,
        "Qwen/Qwen2.5-7B-Instruct"
    );
    let text = format!(
        "{base}{}",
        load.replace("cachePolicy: warm", "cachePolicy: lukewarm")
    );
    let message = errors(&text);
    assert!(
        message.starts_with(
            "1 problem in the spec:\ntest.yaml:17:16: spec.cachePolicy: unknown variant `lukewarm`"
        ),
        "{message}"
    );
}

#[test]
fn a_missing_template_file_is_named() {
    let text = spec(
        "  services:\n    llm: { url: embedded }\n  payloadTemplate:\n    prompts: { templates: { file: nowhere.yaml, output_tokens: 16 } }\n  load:\n    - { rate: 5, duration: 10s }\n",
    );
    let message = errors(&text);
    assert!(
        message.starts_with(
            "1 problem in the spec:\ntest.yaml:8:29: spec.payloadTemplate.prompts.templates.file: nowhere.yaml: cannot read: "
        ),
        "{message}"
    );
}

#[test]
fn a_replay_takes_its_times_from_the_trace() {
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ replay: {{ file: missing.jsonl }}, rate: 5 }}\n    - {{ replay: {{ file: missing.jsonl, speed: 0 }} }}\n"
    ));
    assert_eq!(
        errors(&text),
        "2 problems in the spec:\n\
         test.yaml:10:42: spec.load[0].rate: does not apply to a `replay`, which takes its times and count from the trace\n  \
         fix: remove it, or make it a stage of its own\n\
         test.yaml:11:40: spec.load[1].replay.speed: must be a positive number, got 0\n"
    );
}

#[test]
fn fault_rules_are_checked_with_the_spec() {
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ rate: 5, duration: 10s }}\n  faults:\n    - name: slow\n      service: lm\n      delay: {{ probability: 5, min_ms: 300, max_ms: 800 }}\n    - name: slow\n      service: llm\n      cut_stream: {{ probability: 0.1, after_events: 2 }}\n      drop_done: {{ probability: 0.1 }}\n    - {{ name: remote, service: llm, bandwidth: {{ bytes_per_second: 0 }} }}\n"
    ));
    assert_eq!(
        errors(&text),
        "5 problems in the spec:\n\
         test.yaml:13:7: spec.faults[0].service: names service `lm`, which is not under spec.services\n  fix: choose from: llm\n\
         test.yaml:14:16: spec.faults[0].delay.probability: probability 5 is not between 0 and 1\n  fix: write a chance per request: 0.05 for 5 %\n\
         test.yaml:15:5: spec.faults[1]: the rule names 2 faults (cut_stream, drop_done)\n  fix: give each rule exactly one of: delay, abort, rate_limit, empty_result, stall_first_token, token_drip, cut_stream, corrupt_event, drop_done, bandwidth, slice, mcp_error, mcp_oversize; write several rules for several faults\n\
         test.yaml:15:7: spec.faults[1].name: a rule named `slow` comes earlier\n  fix: give every rule its own name\n\
         test.yaml:19:50: spec.faults[2].bandwidth.bytes_per_second: 0 bytes per second would never finish\n  fix: write a positive rate; use `abort: { timeout: true }` to never answer\n"
    );
    let remote = spec(
        "  services:\n    llm: { url: \"http://10.1.2.3:8000\", model: m }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n  qpsTarget: 1\n  duration: 1s\n  faults:\n    - { name: slow, service: llm, delay: { probability: 0.05, ms: 500 } }\n",
    );
    assert_eq!(
        errors(&remote),
        "1 problem in the spec:\n\
         test.yaml:12:21: spec.faults[0].service: `llm` is at http://10.1.2.3:8000, not on loopback: a run injects faults only into services on this machine\n  fix: run `redline chaos --upstream http://10.1.2.3:8000 --allow-remote-upstream` yourself and point the service's url at it\n"
    );
}

#[test]
fn flow_steps_name_their_problems() {
    let text = spec(
        "  services:\n    llm: { url: embedded }\n    vectors: { url: embedded, api: qdrant }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n    flow:\n      - search: { service: vectors }\n      - chat: { name: answer, service: llm, user: \"{{ steps.retrieve.passages }} {{ steps.anser.text }}\" }\n      - tool: { service: vectors }\n      - { embed: { service: llm }, http: { service: llm, path: /x } }\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    assert_eq!(
        errors(&text),
        "6 problems in the spec:\n\
         test.yaml:11:9: spec.payloadTemplate.flow[0].search: a search needs a vector: no `embed` step comes before it\n  fix: add `- embed: { service: …, input: \"{{ prompt }}\" }` before the search\n\
         test.yaml:12:45: spec.payloadTemplate.flow[1].chat.user: `steps.anser.text` is not defined before step `answer`\n  fix: Defined here: prompt, passages, steps.search\n\
         test.yaml:12:45: spec.payloadTemplate.flow[1].chat.user: `steps.retrieve.passages` is not defined before step `answer`\n  fix: Defined here: prompt, passages, steps.search\n\
         test.yaml:13:9: spec.payloadTemplate.flow[2].tool: a tool step runs the tool calls of a chat step before it, and none offers tools\n  fix: offer `tools:` in an earlier `chat` step\n\
         test.yaml:13:17: spec.payloadTemplate.flow[2].tool.service: a `tool` step needs a service with `api: tools or http or mcp`; `vectors` has `api: qdrant`\n  fix: set `api:` on spec.services.vectors, or call another service\n\
         test.yaml:14:7: spec.payloadTemplate.flow[3]: the step names 2 kinds\n  fix: write each step as one of `- embed: {…}`, `- search: {…}`, `- chat: {…}`, `- tool: {…}`, `- http: {…}`, `- mcp: {…}`\n"
    );
}

#[test]
fn a_header_that_http_cannot_carry_is_named_with_its_fault() {
    let text = spec(
        "  services:\n    llm:\n      url: embedded\n      headers: { \"x api key\": v, x-api-key: \"secret\\n\" }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n  load:\n    - { rate: 5, duration: 1s }\n",
    );
    assert_eq!(
        errors(&text),
        "2 problems in the spec:\n\
         test.yaml:8:7: spec.services.llm.headers.x api key: `x api key` is not an HTTP header name\n  \
         fix: use letters, digits and `-`, e.g. `x-api-key`\n\
         test.yaml:8:34: spec.services.llm.headers.x-api-key: its value holds a control character (a newline?), which no header can carry\n  \
         fix: remove it from the value\n"
    );
}

#[test]
fn a_streaming_block_reports_every_problem_with_its_fix() {
    let text = spec(&format!(
        "{SERVICES}  load:\n    - {{ rate: 5, duration: 10s }}\n---\napiVersion: redline.dev/v1alpha1\nkind: ScaleSpec\nspec:\n  streaming:\n    window: 25s\n    step: 10s\n    watch: [ttft.p95, latency.p99]\n    on_violation:\n      webhook: {{ url: \"ftp://x\", method: GET }}\n"
    ));
    let errors = errors(&text);
    for line in [
        "spec.streaming.window: a window of 25s does not divide into steps of 10s\n  fix: make `window` a whole multiple of `step` (at least 100ms), e.g. `window: 30s, step: 10s`",
        "spec.streaming.watch[1]: unknown series `latency.p99`\n  fix: choose from: ttft, itl, tpot, e2e, e2e_per_token, ttft_per_1k_input with .p50, .p95, .p99 or .mean; or error_rate",
        "spec.streaming.on_violation.webhook.url: `ftp://x` is not an http(s) URL",
        "spec.streaming.on_violation.webhook.method: unsupported method `GET`\n  fix: choose from: POST, PUT",
    ] {
        assert!(errors.contains(line), "missing `{line}` in\n{errors}");
    }
    assert!(errors.starts_with("4 problems in the spec:"), "{errors}");
}

#[test]
fn replicas_and_disruptions_name_what_is_wrong() {
    let text = spec(
        "  services:\n    llm:\n      url: balanced\n      model: m\n      replicas:\n        - { url: \"http://10.0.0.5:9301\" }\n        - { url: \"http://127.0.0.1:9302\", ready: health }\n      balance: { eject_after: 0 }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n  disruptions:\n    - restart: { service: llm, every: 0s }\n    - { restart: { service: llm, every: 5s }, hook: { every: 5s, command: [\"true\"] } }\n  load:\n    - { rate: 1, duration: 1s }\n",
    );
    assert_eq!(
        errors(&text),
        "6 problems in the spec:\n\
         test.yaml:10:13: spec.services.llm.replicas[0].url: `http://10.0.0.5:9301` is not on loopback\n  \
         fix: a replica runs on this machine: e.g. `http://127.0.0.1:9101`\n\
         test.yaml:11:43: spec.services.llm.replicas[1].ready: `health` is not a path\n  \
         fix: write e.g. `/health`\n\
         test.yaml:12:18: spec.services.llm.balance.eject_after: must be at least 1\n  \
         fix: write `eject: false` to never eject a replica\n\
         test.yaml:16:18: spec.disruptions[0].restart.service: `llm` is not a `url: balanced` service whose replicas all have a `command`\n  \
         fix: name a balanced service and give each replica the command that starts it\n\
         test.yaml:16:32: spec.disruptions[0].restart.every: must be more than 0\n  \
         fix: e.g. `every: 30s`\n\
         test.yaml:17:5: spec.disruptions[1]: a disruption is one `restart` or one `hook`\n  \
         fix: e.g. `- restart: { service: llm, every: 30s }`\n"
    );
    let text = spec(
        "  services:\n    llm: { url: \"http://127.0.0.1:8000\", model: m, replicas: [{ url: \"http://127.0.0.1:9301\" }] }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n",
    );
    assert!(
        errors(&text)
            .contains("spec.services.llm.url: `replicas` and `balance` belong to `url: balanced`"),
        "{}",
        errors(&text)
    );
}

#[test]
fn mcp_specs_name_their_problems() {
    let text = spec(
        "  services:\n    tools: { url: embedded, api: mcp }\n    llm: { url: embedded }\n  payloadTemplate:\n    service: tools\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n    mcp:\n      ops:\n        - { tool: echo, list: tools }\n        - { read: \"redline://{{ nope }}\" }\n      churn: 1.5\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    assert_eq!(
        errors(&text),
        "4 problems in the spec:\n\
         test.yaml:10:5: spec.payloadTemplate.prompts: does not apply to an `api: mcp` service, whose calls `mcp` describes\n  fix: remove `prompts`\n\
         test.yaml:13:9: spec.payloadTemplate.mcp.ops[0]: needs exactly one of `tool`, `read`, `list`, `prompt` and `ping`\n  fix: write one operation per entry, e.g. `{ tool: echo, args: {…} }` or `{ list: tools }`\n\
         test.yaml:14:13: spec.payloadTemplate.mcp.ops[1].read: is not a template that renders: undefined value (in spec.payloadTemplate.mcp.ops[1].read:1)\n  fix: templates may use `{{ seq }}` (the call's number) and `{{ n }}` (0 to 999)\n\
         test.yaml:15:7: spec.payloadTemplate.mcp.churn: is 1.5, not a share from 0 to 1\n  fix: e.g. `churn: 0.05` ends one session in twenty calls\n"
    );
    let flow = spec(
        "  services:\n    tools: { url: embedded, api: mcp }\n    llm: { url: embedded }\n  payloadTemplate:\n    prompts: { synthetic: { input_tokens: 10, output_tokens: 5 } }\n    flow:\n      - chat: { service: llm, tools: { from: llm } }\n      - mcp: { service: tools, ping: true, read: x }\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    assert_eq!(
        errors(&flow),
        "2 problems in the spec:\n\
         test.yaml:11:40: spec.payloadTemplate.flow[0].chat.tools.from: `llm` has `api: chat`; tools come from an `api: mcp` service\n  fix: set `api: mcp` on spec.services.llm\n\
         test.yaml:12:9: spec.payloadTemplate.flow[1].mcp: needs exactly one of `tool`, `read`, `prompt`, `list` and `ping`\n  fix: e.g. `- mcp: { service: tools, tool: search_docs, args: { query: \"{{ prompt }}\" } }`\n"
    );
    let stdio = spec(
        "  services:\n    tools: { url: stdio, api: mcp }\n    llm: { url: stdio, model: m }\n    other: { url: embedded, api: mcp, command: [srv] }\n  payloadTemplate:\n    service: tools\n    mcp: { ops: [ { ping: true } ] }\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    assert_eq!(
        errors(&stdio),
        "3 problems in the spec:\n\
         test.yaml:6:14: spec.services.tools.url: `url: stdio` needs the `command` that starts the server\n  fix: write e.g. `command: [npx, -y, \"@modelcontextprotocol/server-everything\", stdio]`\n\
         test.yaml:7:12: spec.services.llm.url: `url: stdio` starts an MCP server, and this service is not `api: mcp`\n  fix: add `api: mcp`, or give the service's http:// URL\n\
         test.yaml:8:39: spec.services.other.command: `command` starts an MCP server over stdio: it belongs to `url: stdio`\n  fix: write `url: stdio` and `api: mcp`, or remove `command`\n"
    );
    let listening = spec(
        "  services:\n    tools: { url: stdio, api: mcp, command: [srv] }\n  payloadTemplate:\n    mcp: { ops: [ { ping: true } ], listen: true }\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    assert_eq!(
        errors(&listening),
        "1 problem in the spec:\n\
         test.yaml:8:37: spec.payloadTemplate.mcp.listen: opens Streamable HTTP's GET stream; a stdio server's messages come on its output, which is always read\n  fix: remove `listen`\n"
    );
    let faulted = spec(
        "  services:\n    tools: { url: stdio, api: mcp, command: [srv] }\n  payloadTemplate:\n    mcp: { ops: [ { ping: true } ] }\n  faults:\n    - { name: err, service: tools, match: { mcp: { method: tools/call } }, mcp_error: { probability: 0.1 } }\n  load:\n    - { concurrency: 1, requests: 1 }\n",
    );
    assert_eq!(
        errors(&faulted),
        "1 problem in the spec:\n\
         test.yaml:10:20: spec.faults[0].service: `tools` is an MCP server over stdio; the chaos proxy speaks HTTP\n  fix: inject MCP faults in front of a Streamable HTTP server (`url: http://…/mcp`)\n"
    );
}
