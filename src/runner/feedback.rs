//! The feedback controller (`spec.feedback`): every interval it reads a gauge of GPU
//! memory use, smooths it, and sets each mixed service's rate by its formula, no
//! further from the last rate than the step limit allows. The arrivals are one
//! Poisson process at the live total rate, each arrival's service drawn by the live
//! rates — the same as one Poisson process per service. A gauge that fails or prints
//! garbage holds the rates and is counted; it never stops the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1};
use tokio_util::sync::CancellationToken;

use crate::client::{HttpClient, RunClock};
use crate::prometheus::live::LiveMetrics;
use crate::results::{FeedbackReport, RateEvent};
use crate::scenario::feedback::{FeedbackPlan, GaugeSource};
use crate::spec::feedback::GpuReduce;

/// Each mixed service's current rate, requests per second.
pub struct LiveRates {
    bits: Vec<AtomicU64>,
}

impl LiveRates {
    pub fn new(rates: &[f64]) -> LiveRates {
        LiveRates {
            bits: rates.iter().map(|r| AtomicU64::new(r.to_bits())).collect(),
        }
    }

    pub fn all(&self) -> Vec<f64> {
        self.bits
            .iter()
            .map(|b| f64::from_bits(b.load(Ordering::Relaxed)))
            .collect()
    }

    fn set(&self, rates: &[f64]) {
        for (bits, rate) in self.bits.iter().zip(rates) {
            bits.store(rate.to_bits(), Ordering::Relaxed);
        }
    }

    /// Which service a uniform draw in [0, 1) falls to, by the live rates.
    pub fn pick(&self, draw: f64) -> usize {
        let rates = self.all();
        let total: f64 = rates.iter().sum();
        let mut at = draw * total;
        for (i, rate) in rates.iter().enumerate() {
            if at < *rate {
                return i;
            }
            at -= rate;
        }
        rates.len() - 1
    }
}

/// Arrival offsets of a Poisson process at the live total rate, seeded, until `end`.
/// The pacer asks for each offset after releasing the one before, so a rate change
/// applies from the next gap on.
pub struct FeedbackArrivals {
    rng: ChaCha8Rng,
    at: f64,
    end: f64,
    live: Arc<LiveRates>,
}

impl FeedbackArrivals {
    pub fn new(live: Arc<LiveRates>, end: Duration, seed: u64) -> FeedbackArrivals {
        FeedbackArrivals {
            rng: ChaCha8Rng::seed_from_u64(seed),
            at: 0.0,
            end: end.as_secs_f64(),
            live,
        }
    }
}

impl Iterator for FeedbackArrivals {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let total: f64 = self.live.all().iter().sum();
        let gap: f64 = Exp1.sample(&mut self.rng);
        // A total of 0 (every floor 0 on a full GPU) waits a second and looks again.
        self.at += if total > 0.0 { gap / total } else { 1.0 };
        (self.at < self.end).then(|| Duration::from_secs_f64(self.at))
    }
}

/// Where and how the gauge is read, resolved for this run.
pub struct Gauge {
    pub source: GaugeSource,
    pub reduce: GpuReduce,
    pub http: HttpClient,
}

/// What the controller reads: the share of the GPUs in use.
pub trait ReadUsage: Send + Sync + 'static {
    /// u in [0, 1], or why not; never longer than `patience`.
    fn read(&self, patience: Duration) -> impl Future<Output = Result<f64, String>> + Send;
}

/// A controller, ready to run.
pub struct Controller<G = Gauge> {
    pub plan: FeedbackPlan,
    /// The mix's services, in its order.
    pub services: Vec<String>,
    pub gauge: G,
    /// What the arrivals follow.
    pub rates: Arc<LiveRates>,
    /// The run's live metrics, to show each reading on `/metrics` as it happens.
    pub metrics: Option<Arc<LiveMetrics>>,
    pub clock: RunClock,
    /// `feedback.jsonl` beside the records: each event as it happens, so a run that
    /// is killed keeps them.
    pub log: std::io::BufWriter<std::fs::File>,
}

impl<G: ReadUsage> Controller<G> {
    /// Runs until `stop`: the report of every reading.
    pub async fn run(self, stop: CancellationToken) -> FeedbackReport {
        let Controller {
            plan,
            services,
            gauge,
            rates,
            metrics,
            clock,
            mut log,
        } = self;
        let mut report = FeedbackReport {
            services,
            interval_ms: plan.interval.as_secs_f64() * 1e3,
            ..FeedbackReport::default()
        };
        let mut smoothed: Option<f64> = None;
        let mut ticks = tokio::time::interval(plan.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = stop.cancelled() => return report,
            }
            let reading = gauge.read(plan.interval).await;
            let at_ms = clock.timer_now_us() as f64 / 1e3;
            let event = match reading {
                Ok(u) => {
                    let s = smoothed.map_or(u, |s| s + plan.smoothing * (u - s));
                    smoothed = Some(s);
                    rates.set(&next_rates(&plan, &rates.all(), s));
                    RateEvent {
                        at_ms,
                        reading: Some(u),
                        smoothed: Some(s),
                        rates: rates.all(),
                    }
                }
                Err(why) => {
                    report.gauge_failures += 1;
                    report.last_failure = Some(why);
                    RateEvent {
                        at_ms,
                        reading: None,
                        smoothed,
                        rates: rates.all(),
                    }
                }
            };
            if let Some(metrics) = &metrics {
                metrics.set_feedback(&report.services, &event.rates, event.reading);
            }
            if report.log_error.is_none()
                && let Err(e) = append(&mut log, &event)
            {
                report.log_error = Some(format!("feedback.jsonl: {e}"));
            }
            report.events.push(event);
        }
    }
}

/// One line of `feedback.jsonl`.
fn append(log: &mut std::io::BufWriter<std::fs::File>, event: &RateEvent) -> std::io::Result<()> {
    use std::io::Write;
    serde_json::to_writer(&mut *log, event)?;
    log.write_all(b"\n")?;
    log.flush()
}

/// Each formula at `u`, no further from `current` than the step limit allows (and
/// never below the floor).
pub fn next_rates(plan: &FeedbackPlan, current: &[f64], u: f64) -> Vec<f64> {
    plan.rates
        .iter()
        .zip(current)
        .map(|(formula, now)| {
            let (low, high) = (
                now * (1.0 - plan.max_step),
                now * (1.0 + plan.max_step) + 1.0,
            );
            formula
                .rate(u)
                .clamp(low.min(high), high)
                .max(formula.floor)
        })
        .collect()
}

impl ReadUsage for Gauge {
    async fn read(&self, patience: Duration) -> Result<f64, String> {
        let text = match &self.source {
            GaugeSource::Command(argv) => run_command(argv, patience).await?,
            GaugeSource::Url(url) => self.get(url, patience).await?,
            GaugeSource::Embedded => {
                return Err("the embedded simulator's address was not resolved".into());
            }
            GaugeSource::Prometheus { url, query } => {
                let query = percent_encoding::utf8_percent_encode(
                    query,
                    percent_encoding::NON_ALPHANUMERIC,
                );
                let body = self
                    .get(&format!("{url}/api/v1/query?query={query}"), patience)
                    .await?;
                return prometheus_value(&body, self.reduce);
            }
        };
        parse_usage(&text, self.reduce)
    }
}

impl Gauge {
    async fn get(&self, url: &str, patience: Duration) -> Result<String, String> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("bad gauge URL {url}: {e}"))?;
        let mut request = hyper::Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = uri;
        let (status, body) =
            crate::client::exchange(&self.http, request, Instant::now() + patience).await?;
        if status != 200 {
            return Err(format!("the gauge URL answered HTTP {status}"));
        }
        Ok(body)
    }
}

/// Runs the gauge's program (no shell) and gives what it printed.
async fn run_command(argv: &[String], patience: Duration) -> Result<String, String> {
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(patience, command.output())
        .await
        .map_err(|_| format!("`{}` did not finish within {patience:?}", argv[0]))?
        .map_err(|e| format!("cannot run `{}`: {e}", argv[0]))?;
    if !output.status.success() {
        return Err(format!("`{}` exited {}", argv[0], output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// u from `used, total` lines (one per GPU, MiB) or from one number in [0, 1].
pub fn parse_usage(text: &str, reduce: GpuReduce) -> Result<f64, String> {
    let garbage = || {
        let shown: String = text.trim().chars().take(80).collect();
        format!("the gauge gave `{shown}`: neither `used, total` lines nor a number in [0, 1]")
    };
    let text = text.trim();
    if let Ok(u) = text.parse::<f64>() {
        return (0.0..=1.0).contains(&u).then_some(u).ok_or_else(garbage);
    }
    let mut gpus = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (used, total) = line.split_once(',').ok_or_else(garbage)?;
        let used: f64 = used.trim().parse().map_err(|_| garbage())?;
        let total: f64 = total.trim().parse().map_err(|_| garbage())?;
        if !(total > 0.0 && (0.0..=total).contains(&used)) {
            return Err(garbage());
        }
        gpus.push((used, total));
    }
    if gpus.is_empty() {
        return Err(garbage());
    }
    Ok(match reduce {
        GpuReduce::Sum => {
            gpus.iter().map(|g| g.0).sum::<f64>() / gpus.iter().map(|g| g.1).sum::<f64>()
        }
        GpuReduce::Max => gpus
            .iter()
            .map(|(used, total)| used / total)
            .fold(0.0, f64::max),
    })
}

/// u from a Prometheus instant query's answer: its one series' value (the largest of
/// several with `gpus: max`).
fn prometheus_value(body: &str, reduce: GpuReduce) -> Result<f64, String> {
    let answer: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("Prometheus's answer is not JSON: {e}"))?;
    let series = answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let values: Vec<f64> = series
        .iter()
        .filter_map(|s| s["value"][1].as_str()?.parse().ok())
        .collect();
    let u = match (values.as_slice(), reduce) {
        ([], _) => return Err("the Prometheus query returned no series".into()),
        ([one], _) => *one,
        (many, GpuReduce::Max) => many.iter().copied().fold(f64::MIN, f64::max),
        (many, GpuReduce::Sum) => {
            return Err(format!(
                "the Prometheus query returned {} series: aggregate it (sum(…) / sum(…)) or set `gpus: max`",
                many.len()
            ));
        }
    };
    (0.0..=1.0)
        .contains(&u)
        .then_some(u)
        .ok_or_else(|| format!("the Prometheus query gave {u}, not a share in [0, 1]"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::feedback::RateFormula;

    fn plan(max_step: f64) -> FeedbackPlan {
        FeedbackPlan {
            gauge: GaugeSource::Embedded,
            reduce: GpuReduce::Sum,
            interval: Duration::from_secs(1),
            smoothing: 1.0,
            max_step,
            rates: vec![RateFormula {
                base: 120.0,
                floor: 5.0,
                exponent: 1.0,
            }],
            duration: Duration::from_secs(10),
        }
    }

    #[test]
    fn usage_is_read_from_nvidia_smi_lines_or_a_share() {
        assert_eq!(parse_usage("40960, 81920\n", GpuReduce::Sum), Ok(0.5));
        let two = "10000, 80000\n70000, 80000\n";
        assert_eq!(parse_usage(two, GpuReduce::Sum), Ok(0.5));
        assert_eq!(parse_usage(two, GpuReduce::Max), Ok(0.875));
        assert_eq!(parse_usage("0.25", GpuReduce::Sum), Ok(0.25));
        for garbage in ["NVIDIA-SMI has failed", "", "1.5", "90000, 80000", "a, b"] {
            let error = parse_usage(garbage, GpuReduce::Sum).unwrap_err();
            assert!(
                error.contains("neither `used, total` lines"),
                "{garbage}: {error}"
            );
        }
    }

    #[test]
    fn a_step_is_limited_and_never_below_the_floor() {
        assert_eq!(next_rates(&plan(10.0), &[120.0], 0.9), [12.0]);
        assert_eq!(next_rates(&plan(0.5), &[120.0], 0.9), [60.0]);
        assert_eq!(next_rates(&plan(0.5), &[12.0], 0.0), [19.0]);
        assert_eq!(next_rates(&plan(0.99), &[6.0], 1.0), [5.0]);
    }

    #[test]
    fn prometheus_answers_are_one_share() {
        let one = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.42"]}]}}"#;
        assert_eq!(prometheus_value(one, GpuReduce::Sum), Ok(0.42));
        let two = r#"{"data":{"result":[{"value":[1,"0.2"]},{"value":[1,"0.7"]}]}}"#;
        assert_eq!(prometheus_value(two, GpuReduce::Max), Ok(0.7));
        assert!(
            prometheus_value(two, GpuReduce::Sum)
                .unwrap_err()
                .contains("aggregate it")
        );
        assert!(prometheus_value("<html>", GpuReduce::Sum).is_err());
    }

    /// Readings in turn, each taking `takes`; the last one again after the list ends.
    struct Scripted {
        readings: Vec<Result<f64, String>>,
        next: std::sync::atomic::AtomicUsize,
        takes: Duration,
    }

    impl ReadUsage for Scripted {
        async fn read(&self, _patience: Duration) -> Result<f64, String> {
            tokio::time::sleep(self.takes).await;
            let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.readings[i.min(self.readings.len() - 1)].clone()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn readings_come_on_the_interval_and_a_failed_one_holds_the_rates() {
        let dir = std::env::temp_dir().join(format!("redline-feedback-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("feedback.jsonl")).unwrap();
        let rates = Arc::new(LiveRates::new(&[120.0]));
        let gauge = Scripted {
            readings: vec![Ok(0.5), Ok(0.9), Err("gauge down".into()), Ok(0.2)],
            next: Default::default(),
            takes: Duration::from_millis(30),
        };
        let controller = Controller {
            plan: plan(10.0),
            services: vec!["llm".into()],
            gauge,
            rates: rates.clone(),
            metrics: None,
            clock: RunClock::new(tokio::time::Instant::now().into_std()),
            log: std::io::BufWriter::new(log),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(controller.run(stop.clone()));
        tokio::time::sleep(Duration::from_millis(3500)).await;
        stop.cancel();
        let report = task.await.unwrap();
        // The first reading at once, then one a second; each stamped when it came back.
        let at: Vec<f64> = report.events.iter().map(|e| e.at_ms).collect();
        assert_eq!(at, [30.0, 1030.0, 2030.0, 3030.0]);
        let rate = |u: f64| next_rates(&plan(10.0), &[120.0], u)[0];
        let set: Vec<f64> = report.events.iter().map(|e| e.rates[0]).collect();
        assert_eq!(set, [rate(0.5), rate(0.9), rate(0.9), rate(0.2)]);
        assert_eq!(report.events[2].reading, None);
        assert_eq!(report.gauge_failures, 1);
        assert_eq!(rates.all(), [rate(0.2)]);
        let logged = std::fs::read_to_string(dir.join("feedback.jsonl")).unwrap();
        assert_eq!(logged.lines().count(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn live_rates_split_draws_in_proportion() {
        let live = LiveRates::new(&[6.0, 1.0, 2.0]);
        assert_eq!(
            [
                live.pick(0.0),
                live.pick(0.66),
                live.pick(0.67),
                live.pick(0.999)
            ],
            [0, 0, 1, 2]
        );
    }
}
