//! `redline explain` held against causes planted where the truth is known: chaos rules
//! on one tier of the embedded RAG-agent chain at a time, and the data generator of
//! DoWhy's microservice example with its slowed caching service.

use crate::common;

use crate::common::{redline, run_to_records};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use redline::explain::{self, Explanation, Options, table};
use redline::record::Record;

const TIERS: [&str; 4] = ["llm", "embed", "vectors", "tools"];

/// Every test here takes this lock. The planted-fault test compares runs with a
/// baseline, so it must share the machine with nothing else of its own: seen in CI, a
/// run slowed by a neighbouring test looked 15 % slower than its rerun in every node
/// at once, which is a confounder the model rightly does not blame on the faulted tier.
static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// examples/rag-agent.yaml with shorter answers, its own seed and load, and a fault.
fn rag_agent(seed: u64, seconds: u32, fault: Option<&str>) -> redline::scenario::Scenario {
    let path = "examples/rag-agent.yaml";
    let mut text = std::fs::read_to_string(path)
        .unwrap()
        .replace("seed: 42 ", &format!("seed: {seed} "))
        .replace("max_tokens: 96", "max_tokens: 24")
        .replace(
            "{ arrival: poisson, rate: 4, duration: 20s }",
            &format!("{{ arrival: poisson, rate: 8, duration: {seconds}s }}"),
        );
    if let Some(fault) = fault {
        text = text.replace("  load:\n", &format!("  faults:\n    - {fault}\n  load:\n"));
    }
    let file = redline::spec::parse(path, &text).unwrap_or_else(|e| panic!("{e}"));
    redline::scenario::Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// A fault on one tier, of a kind and strength drawn from `rng`.
fn planted(rng: &mut ChaCha8Rng) -> (&'static str, String) {
    let tier = TIERS[rng.random_range(0..TIERS.len())];
    let kinds: &[&str] = if tier == "vectors" {
        &["delay", "abort", "empty"]
    } else {
        &["delay", "abort"]
    };
    let rule = match kinds[rng.random_range(0..kinds.len())] {
        "delay" => {
            let (p, min) = (rng.random_range(0.15..0.5), rng.random_range(100..300));
            format!(
                "{{ name: planted, service: {tier}, delay: {{ probability: {p:.2}, min_ms: {min}, max_ms: {} }} }}",
                min + 200
            )
        }
        "abort" => format!(
            "{{ name: planted, service: {tier}, abort: {{ probability: {:.2}, status: 503 }} }}",
            rng.random_range(0.04..0.15)
        ),
        _ => format!(
            "{{ name: planted, service: {tier}, empty_result: {{ probability: {:.2}, json_path: result }} }}",
            rng.random_range(0.04..0.15)
        ),
    };
    (tier, rule)
}

fn explain_against(incident: &[Record], baseline: &[Record]) -> Explanation {
    let table = table::from_records(incident).unwrap();
    let baseline = table::from_records(baseline).unwrap();
    explain::explain(table, Some(baseline), None, &Options::default()).unwrap()
}

/// Where the tier ranks among the services, largest contribution first (from 1). A
/// service behind several steps (tools: `call-tool` and `feedback`) is ranked by their
/// sum, as explain reports it (Shapley values add up over a group): the question is
/// which service caused the change. Ranked by its first step alone, a tool fault whose
/// share was split over two steps lost to the LLM step after them (CI, 1 run in 4).
fn rank_of(explanation: &Explanation, tier: &str) -> usize {
    let mut by_service: std::collections::BTreeMap<&str, f64> = Default::default();
    for node in &explanation.attribution.nodes {
        if let Some(service) = node.service.as_deref() {
            *by_service.entry(service).or_default() += node.contribution.value;
        }
    }
    match by_service.get(tier) {
        Some(&own) => 1 + by_service.values().filter(|&&other| other > own).count(),
        None => 1 + by_service.len(),
    }
}

/// What a run in a batch is for.
#[derive(Clone, Copy)]
enum Role {
    /// Half of the batch's baseline (two clean runs, seeds of their own).
    Baseline,
    /// Plant `k`'s fault.
    Planted(usize),
    /// Plant `k`'s seed without its fault: what `do(tier = baseline)` predicts.
    Rerun(usize),
    /// A clean run that must blame no one.
    Clean,
}

/// The runs in batches of five that run at once: two clean runs as the batch's
/// baseline, and three others, a delayed run beside its rerun. Every comparison is
/// within a batch, so a stretch when the machine is slow (a neighbour on a CI host)
/// is in the baseline too: seen in CI, one batch whose every chain was slow in the
/// LLM step pinned that step first in all five of its faulted runs, against a
/// baseline run a minute before.
fn batches(plants: &[(&str, String)]) -> Vec<Vec<(u64, Role)>> {
    let mut units: Vec<Vec<(u64, Role)>> = Vec::new();
    for (k, (_, rule)) in plants.iter().enumerate() {
        let mut unit = vec![(k as u64, Role::Planted(k))];
        if rule.contains("delay") {
            unit.push((k as u64, Role::Rerun(k)));
        }
        units.push(unit);
    }
    units.extend((0..5).map(|j| vec![(500 + j, Role::Clean)]));
    let mut batches: Vec<Vec<(u64, Role)>> = Vec::new();
    for unit in units {
        match batches.last_mut() {
            Some(batch) if batch.len() + unit.len() <= 5 => batch.extend(unit),
            _ => {
                let b = 1000 + 2 * batches.len() as u64;
                let mut batch = vec![(b, Role::Baseline), (b + 1, Role::Baseline)];
                batch.extend(unit);
                batches.push(batch);
            }
        }
    }
    batches
}

/// 20 runs, each with one tier under a fault of a random kind and strength, against a
/// clean baseline run at the same time: the tier ranks first in at least 18, and in
/// the top three in every run whose change is significant (one that is not blames no
/// one); 5 clean runs name no cause. Each delayed run is run again without its fault
/// (same seed: same arrivals, same prompts): the intervention `do(tier = baseline)`
/// predicts that rerun's mean session latency within 5 %.
///
/// Ignored by `cargo test`, run by `.ci/run` in a release build
/// (`cargo test --release --test integration explain:: -- --ignored --nocapture`,
/// which prints the table of runs): 56 runs of the whole chain in 12 batches,
/// compared with each other, need a client that is not itself the bottleneck. A debug
/// build with two CPU hogs beside it saturated both cores, and the baseline's tail
/// (its p99, the breach threshold) became the scheduler's, not the services'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a release-build test: .ci/run runs it with --release -- --ignored"]
async fn planted_faults_on_the_rag_agent_chain_are_found_and_clean_runs_blame_no_one() {
    let _timing = TIMING.lock().await;
    let mut rng = ChaCha8Rng::seed_from_u64(2026);
    let plants: Vec<(&str, String)> = (0..20).map(|_| planted(&mut rng)).collect();
    let mut baselines: Vec<Vec<Record>> = Vec::new();
    let mut faulted: Vec<Option<(usize, Vec<Record>)>> = vec![None; plants.len()];
    let mut reruns: Vec<(usize, Vec<Record>)> = Vec::new();
    let mut clean: Vec<(usize, Vec<Record>)> = Vec::new();
    for (b, batch) in batches(&plants).into_iter().enumerate() {
        let started = batch.iter().enumerate().map(|(i, &(seed, role))| {
            let fault = match role {
                Role::Planted(k) => Some(plants[k].1.as_str()),
                _ => None,
            };
            let scenario = rag_agent(seed, 12, fault);
            async move {
                run_to_records(scenario, &format!("explain-{b}-{i}"))
                    .await
                    .1
            }
        });
        let runs = futures_util::future::join_all(started).await;
        let mut baseline = Vec::new();
        for ((_, role), mut records) in batch.into_iter().zip(runs) {
            match role {
                Role::Baseline => {
                    // Two runs' sessions in one table: the second's IDs moved aside.
                    let moved = u64::from(!baseline.is_empty()) << 40;
                    for session in records.iter_mut().filter_map(|r| r.session.as_mut()) {
                        session.id += moved;
                    }
                    baseline.extend(records);
                }
                Role::Planted(k) => faulted[k] = Some((b, records)),
                Role::Rerun(k) => reruns.push((k, records)),
                Role::Clean => clean.push((b, records)),
            }
        }
        baselines.push(baseline);
    }
    let faulted: Vec<(usize, Vec<Record>)> = faulted.into_iter().map(Option::unwrap).collect();
    let mut first = 0;
    let mut report = String::new();
    for ((tier, rule), (b, records)) in plants.iter().zip(&faulted) {
        let explanation = explain_against(records, &baselines[*b]);
        let rank = rank_of(&explanation, tier);
        first += usize::from(rank == 1);
        report += &format!(
            "{rank} {tier:<8} change {:+.3} {} causes {:?}  {rule}\n",
            explanation.attribution.change.value,
            explanation.attribution.significant,
            explanation
                .causes
                .iter()
                .map(|c| &c.node)
                .collect::<Vec<_>>()
        );
        // A fault that does not move the root beyond noise (a few aborted searches
        // the chain rides over, on a busy machine) cannot be ranked: nothing may be
        // blamed for it. Any fault that does must rank in the top three.
        if explanation.attribution.significant {
            assert!(rank <= 3, "{tier} ranked {rank}:\n{report}");
        } else {
            assert!(
                explanation.causes.is_empty(),
                "an insignificant change blamed someone:\n{report}"
            );
        }
    }
    for (k, rerun) in &reruns {
        let (b, records) = &faulted[*k];
        let explanation = explain_against(records, &baselines[*b]);
        let tier = plants[*k].0;
        let a = &explanation.attribution;
        // A service behind several steps (tools) is intervened on as a whole.
        let predicted = match a.services.iter().find(|s| s.service == tier) {
            Some(service) => service.counterfactual.mean_ms,
            None => {
                let node = a.nodes.iter().find(|n| n.service.as_deref() == Some(tier));
                node.unwrap().counterfactual.mean_ms
            }
        };
        let actual = explain::table::from_records(rerun).unwrap();
        let actual = actual
            .rows
            .iter()
            .map(|r| r.latency[actual.root])
            .sum::<f64>()
            / actual.rows.len() as f64;
        report += &format!(
            "do({tier} = baseline): mean {predicted:.1} ms predicted, {actual:.1} ms rerun without the fault, {:.1} ms with it\n",
            explanation.attribution.incident.mean_ms
        );
        assert!((predicted - actual).abs() <= 0.05 * actual, "{report}");
    }
    for (b, records) in &clean {
        let explanation = explain_against(records, &baselines[*b]);
        report += &format!(
            "clean change {:+.3} [{:+.3} … {:+.3}] causes {:?}\n",
            explanation.attribution.change.value,
            explanation.attribution.change.low,
            explanation.attribution.change.high,
            explanation
                .causes
                .iter()
                .map(|c| &c.node)
                .collect::<Vec<_>>()
        );
        assert!(
            explanation.causes.is_empty(),
            "a clean run blamed someone:\n{report}"
        );
    }
    eprintln!("{report}AC@1 {first}/20");
    assert!(first >= 18, "AC@1 {first}/20:\n{report}");
}

/// The call graph of DoWhy's microservice example (its causal graph reversed).
const SHOP_GRAPH: &str = "Website -> www
www -> Auth Service
www -> API
Auth Service -> Customer DB
API -> Customer DB
API -> Product Service
API -> Auth Service
API -> Order Service
Product Service -> Shipping Cost Service
Product Service -> Caching Service
Product Service -> Customer DB
Caching Service -> Product DB
Order Service -> Order DB
";

/// The data generator of DoWhy's microservice notebook (its appendix), ported:
/// truncated-exponential and half-normal intrinsic latencies (seconds), a cache that
/// calls through to the product DB half the time, the product service waiting for its
/// three parallel calls, sums elsewhere. `slow_cache` adds the notebook's planted 2 s
/// to the caching service's own latency. Written in milliseconds, as explain reads.
fn shop_latencies(rows: usize, slow_cache: bool, rng: &mut ChaCha8Rng) -> String {
    use rand_distr::{Distribution, StandardNormal};
    let truncexpon = |b: f64, scale: f64, rng: &mut ChaCha8Rng| {
        let u: f64 = rng.random();
        -scale * (1.0 - u * (1.0 - (-b).exp())).ln()
    };
    let halfnorm = |loc: f64, scale: f64, rng: &mut ChaCha8Rng| {
        let z: f64 = StandardNormal.sample(rng);
        loc + scale * z.abs()
    };
    let names = [
        "Website",
        "www",
        "API",
        "Auth Service",
        "Product Service",
        "Order Service",
        "Shipping Cost Service",
        "Caching Service",
        "Order DB",
        "Customer DB",
        "Product DB",
    ];
    let mut csv = names.join(",") + "\n";
    for _ in 0..rows {
        let website_own = truncexpon(3.0, 0.2, rng);
        let www_own = truncexpon(2.0, 0.2, rng);
        let api_own = halfnorm(0.5, 0.2, rng);
        let auth_own = halfnorm(0.1, 0.2, rng);
        let product_own = halfnorm(0.1, 0.2, rng);
        let order_own = halfnorm(0.5, 0.2, rng);
        let shipping = halfnorm(0.1, 0.2, rng);
        let caching_own = halfnorm(0.1, 0.1, rng) + if slow_cache { 2.0 } else { 0.0 };
        let order_db = truncexpon(5.0, 0.2, rng);
        let customer_db = truncexpon(6.0, 0.2, rng);
        let product_db = truncexpon(10.0, 0.2, rng);
        let miss = f64::from(u8::from(rng.random_bool(0.5)));
        let caching = miss * product_db + caching_own;
        let product = shipping.max(caching).max(customer_db) + product_own;
        let auth = customer_db + auth_own;
        let order = order_db + order_own;
        let api = product + customer_db + auth + order + api_own;
        let www = api + auth + www_own;
        let website = www + website_own;
        let row = [
            website,
            www,
            api,
            auth,
            product,
            order,
            shipping,
            caching,
            order_db,
            customer_db,
            product_db,
        ];
        csv += &row.map(|v| format!("{:.3}", v * 1e3)).join(",");
        csv += "\n";
    }
    csv
}

/// DoWhy's planted cause, found: against 10,000 normal orders, 1,000 with the slowed
/// cache put it first by mean latency, carrying most of the Website's rise, and the
/// intervention on it undoes most of it; the other ten nodes carry little.
#[test]
fn the_slowed_cache_of_dowhys_microservice_example_ranks_first() {
    let _timing = TIMING.blocking_lock();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let normal =
        table::from_csv(&shop_latencies(10_000, false, &mut rng), SHOP_GRAPH, None).unwrap();
    let slow = table::from_csv(&shop_latencies(1_000, true, &mut rng), SHOP_GRAPH, None).unwrap();
    let options = Options {
        measure: explain::MeasureChoice::Mean,
        bootstrap: 10,
        ..Options::default()
    };
    let explanation = explain::explain(slow, Some(normal), None, &options).unwrap();
    let a = &explanation.attribution;
    let top = &a.nodes[0];
    eprintln!("{}", explain::render::render(&explanation));
    assert_eq!(explanation.root, "Website");
    assert_eq!(top.node, "Caching Service");
    assert!(top.confident && explanation.causes[0].node == "Caching Service");
    // The rise passes through the product service's max: of the cache's +2 s, the
    // Website sees a little less.
    assert!(
        (1500.0..2100.0).contains(&a.change.value),
        "{}",
        a.change.value
    );
    assert!(top.share > 0.85, "{}", top.share);
    assert!(top.undoes > 0.85, "{}", top.undoes);
    assert!(
        a.nodes[1..].iter().all(|n| n.share.abs() < 0.1),
        "{:?}",
        a.nodes
    );
}

/// The command line on a CSV and its call graph, and on what it cannot explain: each
/// mistake says what is wrong and what to do.
#[test]
fn the_command_explains_a_csv_and_names_what_it_cannot_explain() {
    let _timing = TIMING.blocking_lock();
    let dir = common::temp_dir("explain-cli");
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    std::fs::write(path("normal.csv"), shop_latencies(2000, false, &mut rng)).unwrap();
    std::fs::write(path("slow.csv"), shop_latencies(300, true, &mut rng)).unwrap();
    std::fs::write(path("calls.txt"), SHOP_GRAPH).unwrap();
    let (code, out, err) = redline(&[
        "explain",
        &path("slow.csv"),
        "--baseline",
        &path("normal.csv"),
        "--graph",
        &path("calls.txt"),
        "--bootstrap",
        "5",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("explain `Website`: this run against the baseline run (300 vs 2000 traces)"),
        "{out}"
    );
    assert!(
        out.contains("causes:\n  1. `Caching Service`'s latency p99 went from"),
        "{out}"
    );

    let (code, _, err) = redline(&["explain", &path("slow.csv")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("is not a run folder: a CSV of latencies needs --graph"),
        "{err}"
    );

    std::fs::write(path("other.csv"), "Website,www\n1,1\n").unwrap();
    std::fs::write(path("other.txt"), "Website -> www\n").unwrap();
    let (code, _, err) = redline(&[
        "explain",
        &path("slow.csv"),
        "--baseline",
        &path("other.csv"),
        "--graph",
        &path("calls.txt"),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("other.csv: graph line 2: `Auth Service` is not a column of the CSV"),
        "{err}"
    );

    std::fs::write(path("cycle.txt"), "Website -> www\nwww -> Website\n").unwrap();
    let (code, _, err) = redline(&["explain", &path("other.csv"), "--graph", &path("cycle.txt")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the call graph has a cycle (Website → www → Website)"),
        "{err}"
    );

    let (code, _, err) = redline(&[
        "explain",
        &path("slow.csv"),
        "--graph",
        &path("calls.txt"),
        "--incident",
        "9s..3s",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("`9s..3s`: the window ends before it starts"),
        "{err}"
    );

    // A run without a flow has nothing to blame but itself.
    let record = redline::record::Record::unsent(0, 0, redline::record::Phase::Measure, 5);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::write(
        dir.join("run/records.jsonl"),
        serde_json::to_string(&record).unwrap() + "\n",
    )
    .unwrap();
    let (code, _, err) = redline(&["explain", &path("run")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the records hold no flow sessions: explain needs a flow"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A baseline run of another flow is refused, not silently matched.
#[test]
fn a_baseline_of_another_flow_is_refused() {
    let table = |steps: &str| {
        let graph: String = steps
            .split(',')
            .skip(1)
            .map(|s| format!("session -> {s}\n"))
            .collect();
        let row = vec!["1"; steps.split(',').count()].join(",");
        table::from_csv(&format!("{steps}\n{row}\n"), &graph, None).unwrap()
    };
    let error = explain::explain(
        table("session,embed,answer"),
        Some(table("session,embed,rerank")),
        None,
        &Options::default(),
    )
    .unwrap_err();
    assert_eq!(
        error,
        "the baseline has no answer: is it a run of another spec? A baseline must run the same flow"
    );
}

/// A flow run whose gate fails explains itself: a "why" in the terminal summary,
/// `explain.json`, `explain` in summary.json, and a section of report.html with the
/// blamed node marked.
#[test]
fn a_failed_flow_run_says_why_at_its_end() {
    let _timing = TIMING.blocking_lock();
    let dir = common::temp_dir("explain-run");
    let data = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/rag-queries.jsonl"
    );
    let text = std::fs::read_to_string("examples/rag-agent.yaml")
        .unwrap()
        .replace("max_tokens: 96", "max_tokens: 16")
        .replace("data/rag-queries.jsonl", data)
        .replace(
            "  load:\n    - { arrival: poisson, rate: 4, duration: 20s }",
            "  faults:\n    - { name: empty, service: vectors, empty_result: { probability: 0.3, json_path: result } }\n  load:\n    - { arrival: poisson, rate: 10, duration: 5s }",
        )
        .replace("recall_at_k: \">= 82%\"", "error_rate: \"<= 1%\"");
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, text).unwrap();
    let out = dir.join("run");
    let (code, stdout, stderr) = redline(&[
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stdout.contains("why (redline explain: the "), "{stdout}");
    assert!(
        stdout.contains("1. `retrieve` (vectors) failed in "),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["explain"]["causes"][0]["node"], "retrieve");
    assert_eq!(summary["explain"]["mode"], "tail");
    assert!(out.join("explain.json").is_file());
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains(r#"<section id="explain"><h2>Why it failed</h2>"#));
    assert!(page.contains(r#"<li data-cause="retrieve">"#));
    std::fs::remove_dir_all(dir).unwrap();
}

/// One run, the fault in its second half: `--incident 8s..16s` against the rest of
/// the run finds it without a baseline run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_window_is_explained_against_the_rest_of_its_run() {
    let _timing = TIMING.lock().await;
    let fault = "{ name: late, service: vectors, window: { from: 8s }, delay: { probability: 0.4, min_ms: 200, max_ms: 400 } }";
    let (_, records) = run_to_records(rag_agent(77, 16, Some(fault)), "explain-window").await;
    let table = table::from_records(&records).unwrap();
    let window = explain::Window {
        from_us: 8_000_000,
        to_us: 16_000_000,
    };
    let explanation = explain::explain(table, None, Some(window), &Options::default()).unwrap();
    assert_eq!(explanation.mode, explain::Mode::Window);
    assert_eq!(
        explanation.causes.first().map(|c| c.node.as_str()),
        Some("retrieve"),
        "{}",
        explain::render::render(&explanation)
    );
}

/// examples/mcp-agent.yaml with shorter answers, at 8 sessions a second for
/// `seconds`, with a fault on its MCP server.
fn mcp_agent(seconds: u32, fault: &str) -> redline::scenario::Scenario {
    let path = "examples/mcp-agent.yaml";
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("max_tokens: 64", "max_tokens: 24")
        .replace(
            "{ arrival: poisson, rate: 4, duration: 15s }",
            &format!("{{ arrival: poisson, rate: 8, duration: {seconds}s }}"),
        )
        .replace("  load:\n", &format!("  faults:\n    - {fault}\n  load:\n"));
    let file = redline::spec::parse(path, &text).unwrap_or_else(|e| panic!("{e}"));
    redline::scenario::Scenario::from_spec(&file, &text).unwrap_or_else(|e| panic!("{e}"))
}

/// MCP faults in an incident window, matched to one tool of the agent's MCP server,
/// are found at the step that calls it: a stalled `search_docs` at the `lookup` step,
/// JSON-RPC errors on `get_weather` at the tool step that runs the model's calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_faults_in_a_window_are_found_at_their_step() {
    let _timing = TIMING.lock().await;
    let cases = [
        (
            "{ name: slow-search, service: tools, window: { from: 8s }, match: { mcp: { tool: search_docs } }, delay: { probability: 0.5, min_ms: 400, max_ms: 800 } }",
            "lookup",
        ),
        (
            "{ name: rpc-errors, service: tools, window: { from: 8s }, match: { mcp: { tool: get_weather } }, mcp_error: { probability: 0.3, code: -32000 } }",
            "call-tool",
        ),
    ];
    for (fault, step) in cases {
        let (_, records) = run_to_records(mcp_agent(16, fault), "explain-mcp").await;
        let table = table::from_records(&records).unwrap();
        let window = explain::Window {
            from_us: 8_000_000,
            to_us: 16_000_000,
        };
        let explanation = explain::explain(table, None, Some(window), &Options::default()).unwrap();
        assert_eq!(
            explanation.causes.first().map(|c| c.node.as_str()),
            Some(step),
            "{fault}\n{}",
            explain::render::render(&explanation)
        );
    }
}
