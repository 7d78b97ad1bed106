//! Streaming SLOs: sliding windows over the records as they complete, a drift
//! detector per watched series and group, and the episodes they open and close —
//! judged while a run goes (the recorder feeds a [`Monitor`]) and afterwards by
//! `redline watch` over a run's records, with the same code.
//!
//! Pure but for [`watch`]'s sources (files, Prometheus): the monitor says what
//! changed; the runner prints, aborts and calls webhooks.

pub mod detect;
pub mod episode;
pub mod logs;
pub mod series;
pub mod watch;
pub mod window;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::record::Record;
use crate::slo::ValueUnit;
use crate::spec::Problems;
use crate::spec::streaming::{DetectorKind, StreamingSpec, WebhookSpec};
pub use detect::{Rule, State, ThresholdRule};
pub use episode::{Change, Episode, Severity};
use series::Series;
use window::Windows;

/// A window's end waits this long for records that completed just before it.
const GRACE_US: u64 = 250_000;

/// The validated `streaming:` block.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamingPlan {
    pub window: Duration,
    pub step: Duration,
    pub watch: Vec<Series>,
    pub rule: Rule,
    pub baseline_windows: u32,
    pub min_samples: u64,
    pub critical_after: Duration,
    pub actions: Vec<Action>,
    /// The windowed SLOs of `sloThresholds` (`p99: "<= 800ms over 30s for 3
    /// windows"`), each over windows of its own length.
    pub thresholds: Vec<WindowedThreshold>,
}

/// A windowed SLO: a fixed limit on a series over windows of `window`, closing every
/// `step`.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowedThreshold {
    /// The SLO's name, `ttft.p99`: the series its episodes are of.
    pub slo: String,
    pub series: Series,
    pub rule: ThresholdRule,
    pub window: Duration,
    /// The streaming block's step when it divides the window, else the window itself.
    pub step: Duration,
}

/// What to do when an episode opens (printing happens for every episode).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Abort,
    Webhook(Webhook),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub url: hyper::Uri,
    pub method: hyper::Method,
    /// A minijinja template; none sends the episode as JSON.
    pub body: Option<String>,
    pub retries: u32,
    pub timeout: Duration,
}

impl StreamingPlan {
    /// The plan of a spec's `streaming:` block and of its windowed SLOs; none when it
    /// has neither.
    pub fn build(
        spec: Option<&StreamingSpec>,
        slos: Option<&crate::slo::SloSet>,
        problems: &mut Problems,
    ) -> Option<StreamingPlan> {
        let windowed: Vec<&crate::slo::Slo> = slos
            .map(|set| set.slos.iter().filter(|s| s.window.is_some()).collect())
            .unwrap_or_default();
        let mut plan = match spec {
            Some(spec) => StreamingPlan::from_spec(spec, problems)?,
            None if windowed.is_empty() => return None,
            None => StreamingPlan::thresholds_only(),
        };
        plan.thresholds = windowed
            .into_iter()
            .filter_map(|slo| slo.windowed_threshold(plan.step))
            .collect();
        Some(plan)
    }

    /// The plan of windowed SLOs alone: no detector watches anything.
    fn thresholds_only() -> StreamingPlan {
        let spec = StreamingSpec::default();
        let mut plan =
            StreamingPlan::from_spec(&spec, &mut Problems::new()).expect("the defaults are valid");
        plan.watch.clear();
        plan
    }

    /// What the plan judges with, for headers: `ewma`, `ewma + 2 windowed SLOs`.
    pub fn describe(&self) -> String {
        match (self.watch.is_empty(), self.thresholds.len()) {
            (false, 0) => self.rule.name().to_owned(),
            (true, n) => format!("{n} windowed SLO{}", if n == 1 { "" } else { "s" }),
            (false, n) => format!(
                "{} + {n} windowed SLO{}",
                self.rule.name(),
                if n == 1 { "" } else { "s" }
            ),
        }
    }

    /// Checks a `streaming:` block; problems go to `problems` under `spec.streaming`.
    pub fn from_spec(spec: &StreamingSpec, problems: &mut Problems) -> Option<StreamingPlan> {
        let before = problems.count();
        let base = "spec.streaming";
        let window = spec.window.map_or(Duration::from_secs(30), |d| d.0);
        let step = spec.step.map_or(Duration::from_secs(10), |d| d.0);
        let step_ms = step.as_millis();
        if step_ms < 100 || window.as_millis() % step_ms != 0 || window < step {
            problems.add(
                &format!("{base}.window"),
                format!(
                    "a window of {}s does not divide into steps of {}s",
                    window.as_secs_f64(),
                    step.as_secs_f64()
                ),
                Some("make `window` a whole multiple of `step` (at least 100ms), e.g. `window: 30s, step: 10s`".into()),
            );
        }
        let names: Vec<&str> = if spec.watch.is_empty() {
            series::DEFAULT_WATCH.to_vec()
        } else {
            spec.watch.iter().map(String::as_str).collect()
        };
        let mut watch = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match Series::parse(name) {
                Some(s) => watch.push(s),
                None => problems.add(
                    &format!("{base}.watch[{i}]"),
                    format!("unknown series `{name}`"),
                    Some(format!("choose from: {}", series::CHOICES)),
                ),
            }
        }
        let rule = rule_of(spec, problems);
        let mut actions = Vec::new();
        if let Some(on) = &spec.on_violation {
            if on.abort {
                actions.push(Action::Abort);
            }
            if let Some(hook) = &on.webhook {
                let path = format!("{base}.on_violation.webhook");
                actions.extend(webhook_of(hook, &path, problems).map(Action::Webhook));
            }
        }
        (problems.count() == before).then(|| StreamingPlan {
            window,
            step,
            watch,
            rule: rule.expect("no problems means a rule"),
            baseline_windows: spec.baseline_windows.unwrap_or(5).max(2),
            min_samples: spec.min_samples.unwrap_or(20),
            critical_after: spec.critical_after.map_or(Duration::from_secs(60), |d| d.0),
            actions,
            thresholds: Vec::new(),
        })
    }
}

fn rule_of(spec: &StreamingSpec, problems: &mut Problems) -> Option<Rule> {
    let base = "spec.streaming";
    let positive = |value: Option<f64>, default: f64, path: &str, problems: &mut Problems| {
        let v = value.unwrap_or(default);
        if !(v.is_finite() && v > 0.0) {
            problems.add(
                &format!("{base}.{path}"),
                format!("{v} is not a positive number"),
                None,
            );
        }
        v
    };
    Some(match spec.detector {
        DetectorKind::Ewma => {
            let e = spec.ewma.clone().unwrap_or_default();
            let alpha = positive(e.alpha, 0.2, "ewma.alpha", problems);
            if alpha > 1.0 {
                problems.add(
                    &format!("{base}.ewma.alpha"),
                    format!("{alpha} is over 1"),
                    Some("a weight between 0 and 1, e.g. 0.2".into()),
                );
            }
            let growth = match e.sigma_growth.as_deref().map(crate::spec::slo::parse_share) {
                None => 0.4,
                Some(Ok(g)) if g > 0.0 => g,
                Some(_) => {
                    problems.add(
                        &format!("{base}.ewma.sigma_growth"),
                        "must be a positive share".into(),
                        Some("e.g. `sigma_growth: 40%`".into()),
                    );
                    return None;
                }
            };
            Rule::Ewma(detect::EwmaRule {
                alpha,
                k: positive(e.k, 2.5, "ewma.k", problems),
                sigma_growth: growth,
                confirm: e.confirm.unwrap_or(3).max(1),
            })
        }
        DetectorKind::PageHinkley => {
            let p = spec.page_hinkley.clone().unwrap_or_default();
            Rule::PageHinkley(detect::PageHinkleyRule {
                delta: positive(p.delta, 0.5, "page_hinkley.delta", problems),
                lambda: positive(p.lambda, 8.0, "page_hinkley.lambda", problems),
            })
        }
        DetectorKind::Cusum => {
            let c = spec.cusum.clone().unwrap_or_default();
            Rule::Cusum(detect::CusumRule {
                k: positive(c.k, 0.5, "cusum.k", problems),
                h: positive(c.h, 8.0, "cusum.h", problems),
            })
        }
    })
}

fn webhook_of(w: &WebhookSpec, path: &str, problems: &mut Problems) -> Option<Webhook> {
    let url = match w.url.parse::<hyper::Uri>() {
        Ok(url) if matches!(url.scheme_str(), Some("http" | "https")) && url.host().is_some() => {
            Some(url)
        }
        _ => {
            problems.add(
                &format!("{path}.url"),
                format!("`{}` is not an http(s) URL", w.url),
                Some("e.g. `url: http://127.0.0.1:8080/degrade`".into()),
            );
            None
        }
    };
    let method = match w.method.as_deref().unwrap_or("POST") {
        "POST" => Some(hyper::Method::POST),
        "PUT" => Some(hyper::Method::PUT),
        other => {
            problems.add(
                &format!("{path}.method"),
                format!("unsupported method `{other}`"),
                Some("choose from: POST, PUT".into()),
            );
            None
        }
    };
    if let Some(body) = &w.body
        && let Err(e) = minijinja::Environment::new().template_from_str(body)
    {
        problems.add(
            &format!("{path}.body"),
            format!("the template does not parse: {e}"),
            Some(
                "write e.g. `body: '{\"degrade\": true, \"episode\": {{ episode|tojson }}}'`"
                    .into(),
            ),
        );
        return None;
    }
    Some(Webhook {
        url: url?,
        method: method?,
        body: w.body.clone(),
        retries: w.retries.unwrap_or(2).min(10),
        timeout: w.timeout.map_or(Duration::from_secs(2), |d| d.0),
    })
}

/// One closed window of one series and group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Point {
    /// The window's end, seconds from the run's start.
    pub end_s: f64,
    /// Samples in the window (0 for a series from a Prometheus query: not known).
    pub count: u64,
    /// The series' value (none: fewer samples than `min_samples`, not judged).
    pub value: Option<f64>,
    /// The spread (σ) of the window's samples.
    pub sd: Option<f64>,
    pub threshold: Option<f64>,
    pub state: Option<State>,
}

/// One watched series of one group, window by window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Track {
    pub series: String,
    pub group: String,
    /// The detector judging it (`ewma`, `threshold` for a windowed SLO).
    #[serde(default)]
    pub detector: String,
    pub unit: ValueUnit,
    pub points: Vec<Point>,
}

/// What the streaming SLOs saw over a run: `summary.json`'s `drift`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriftSummary {
    pub window_s: f64,
    pub step_s: f64,
    pub detector: String,
    /// Windows judged (not learning, enough samples), over every track.
    pub windows_judged: u64,
    /// Every episode, in the order they opened; `closed_s` none for one open at the end.
    pub episodes: Vec<Episode>,
    pub tracks: Vec<Track>,
    /// Records that completed after their windows had closed (not judged).
    pub late_records: u64,
    /// Webhook calls made for episodes, and how many failed after their retries.
    #[serde(default)]
    pub webhook_calls: u64,
    #[serde(default)]
    pub webhook_failures: u64,
}

/// A series of one group under one detector: its detector, episodes and points.
#[derive(Debug, Clone)]
struct Watcher {
    detector: detect::Detector,
    tracker: episode::Tracker,
    track: Track,
}

/// Windows of one length and step, and the rules judging their series.
#[derive(Debug)]
struct Lane {
    windows: Windows,
    /// Each series judged, under the name its episodes carry, by which rule.
    judges: Vec<(Series, String, Rule)>,
}

/// How a series is judged: its unit, rule and smallest σ.
#[derive(Debug, Clone, Copy)]
struct Kind {
    unit: ValueUnit,
    rule: Rule,
    floor: f64,
}

/// One window's figure handed to a watcher.
#[derive(Debug, Clone, Copy)]
pub struct Observed {
    pub end_s: f64,
    pub count: u64,
    pub value: f64,
    pub sd: Option<f64>,
}

/// The windows and detectors of a run.
#[derive(Debug)]
pub struct Monitor {
    plan: StreamingPlan,
    lanes: Vec<Lane>,
    /// By series name, group and detector.
    watchers: BTreeMap<(String, String, &'static str), Watcher>,
    episodes: Vec<Episode>,
    judged: u64,
}

fn span(window: Duration, step: Duration) -> u64 {
    (window.as_millis() / step.as_millis()) as u64
}

impl Monitor {
    pub fn new(plan: StreamingPlan) -> Monitor {
        let mut lanes = Vec::new();
        if !plan.watch.is_empty() {
            lanes.push(Lane {
                windows: Windows::new(
                    plan.step.as_micros() as u64,
                    span(plan.window, plan.step),
                    &plan.watch,
                ),
                judges: plan
                    .watch
                    .iter()
                    .map(|s| (*s, s.to_string(), plan.rule))
                    .collect(),
            });
        }
        for t in &plan.thresholds {
            lanes.push(Lane {
                windows: Windows::new(
                    t.step.as_micros() as u64,
                    span(t.window, t.step),
                    &[t.series],
                ),
                judges: vec![(t.series, t.slo.clone(), Rule::Threshold(t.rule))],
            });
        }
        Monitor {
            lanes,
            plan,
            watchers: BTreeMap::new(),
            episodes: Vec::new(),
            judged: 0,
        }
    }

    pub fn plan(&self) -> &StreamingPlan {
        &self.plan
    }

    pub fn observe(&mut self, r: &Record) {
        for lane in &mut self.lanes {
            lane.windows.observe(r);
        }
    }

    /// One request from a log line (see [`Windows::observe_sample`]).
    pub fn observe_sample(
        &mut self,
        done_us: u64,
        group: &str,
        failed: bool,
        values: &[(series::Quantity, f64)],
    ) {
        for lane in &mut self.lanes {
            lane.windows.observe_sample(done_us, group, failed, values);
        }
    }

    /// Closes every window that ended at least a moment before `now_us` (µs from the
    /// run's start), and says which episodes opened, escalated or closed.
    pub fn advance(&mut self, now_us: u64) -> Vec<Change> {
        self.close_until(|next_end| next_end + GRACE_US <= now_us)
    }

    /// Closes the windows that ended by `end_us` and takes the episodes still open:
    /// what the run saw. The monitor is left empty.
    pub fn finish(&mut self, end_us: u64) -> (DriftSummary, Vec<Change>) {
        let changes = self.close_until(|next_end| next_end <= end_us);
        let mut tracks = Vec::new();
        let mut episodes = std::mem::take(&mut self.episodes);
        for watcher in std::mem::take(&mut self.watchers).into_values() {
            episodes.extend(watcher.tracker.still_open());
            tracks.push(watcher.track);
        }
        episodes.sort_by(|a, b| a.opened_s.total_cmp(&b.opened_s));
        let late = self.lanes.iter().map(|l| l.windows.late).max().unwrap_or(0);
        let summary = DriftSummary {
            window_s: self.plan.window.as_secs_f64(),
            step_s: self.plan.step.as_secs_f64(),
            detector: self.plan.describe(),
            windows_judged: self.judged,
            episodes,
            tracks,
            late_records: late,
            webhook_calls: 0,
            webhook_failures: 0,
        };
        (summary, changes)
    }

    /// Each track's latest window and the severity of its open episode, if any.
    pub fn latest(&self) -> impl Iterator<Item = (&Track, &Point, Option<Severity>)> {
        self.watchers
            .values()
            .filter_map(|w| Some((&w.track, w.track.points.last()?, w.tracker.severity())))
    }

    /// Closes windows in time order across the lanes while `due` says the next one's
    /// end has come.
    fn close_until(&mut self, due: impl Fn(u64) -> bool) -> Vec<Change> {
        let mut changes = Vec::new();
        loop {
            let next = (0..self.lanes.len())
                .map(|i| (self.lanes[i].windows.next_end_us(), i))
                .min();
            match next {
                Some((end, lane)) if due(end) => changes.extend(self.close_window(lane)),
                _ => return changes,
            }
        }
    }

    fn close_window(&mut self, lane: usize) -> Vec<Change> {
        let (end_us, values) = self.lanes[lane].windows.close_next();
        let end_s = end_us as f64 / 1e6;
        let mut changes = Vec::new();
        for (group, series, value) in values {
            let judges: Vec<(String, Rule)> = self.lanes[lane]
                .judges
                .iter()
                .filter(|(s, ..)| *s == series)
                .map(|(_, name, rule)| (name.clone(), *rule))
                .collect();
            for (name, rule) in judges {
                let observed = Observed {
                    end_s,
                    count: value.count,
                    value: value.value,
                    sd: Some(value.sd),
                };
                let enough = value.count >= self.plan.min_samples;
                let floor = series.sigma_floor();
                let kind = Kind {
                    unit: series.unit(),
                    rule,
                    floor,
                };
                changes.extend(self.judge(&name, &group, kind, observed, enough));
            }
        }
        changes
    }

    /// A window of a series that arrives already summarised (a Prometheus query's
    /// point), judged by the spec's detector under `name` and `group`.
    pub fn observe_point(
        &mut self,
        name: &str,
        group: &str,
        unit: ValueUnit,
        point: Observed,
    ) -> Option<Change> {
        let kind = Kind {
            unit,
            rule: self.plan.rule,
            floor: 0.0,
        };
        self.judge(name, group, kind, point, true)
    }

    fn judge(
        &mut self,
        name: &str,
        group: &str,
        Kind { unit, rule, floor }: Kind,
        w: Observed,
        enough: bool,
    ) -> Option<Change> {
        let key = (name.to_owned(), group.to_owned(), rule.name());
        let watcher = self.watchers.entry(key).or_insert_with(|| Watcher {
            detector: detect::Detector::new(rule, self.plan.baseline_windows).with_floor(floor),
            tracker: episode::Tracker::default(),
            track: Track {
                series: name.to_owned(),
                group: group.to_owned(),
                detector: rule.name().to_owned(),
                unit,
                points: Vec::new(),
            },
        });
        if !enough {
            watcher.track.points.push(Point {
                end_s: w.end_s,
                count: w.count,
                value: None,
                sd: None,
                threshold: None,
                state: None,
            });
            return None;
        }
        let judged = watcher.detector.observe(w.value, w.sd);
        self.judged += u64::from(judged.state != State::Learning);
        watcher.track.points.push(Point {
            end_s: w.end_s,
            count: w.count,
            value: Some(w.value),
            sd: w.sd,
            threshold: judged.threshold,
            state: Some(judged.state),
        });
        let change = if judged.state == State::Over {
            let over = episode::Over {
                series: name,
                group,
                detector: rule.name(),
                unit,
                end_s: w.end_s,
                value: w.value,
                threshold: judged.threshold,
            };
            watcher
                .tracker
                .over(over, self.plan.critical_after.as_secs_f64())
        } else {
            watcher.tracker.normal(w.end_s)
        };
        if let Some(Change::Closed(episode)) = &change {
            self.episodes.push(episode.clone());
        }
        change
    }
}
