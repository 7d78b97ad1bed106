//! Episodes: a run of windows a detector judged over, with its start, end, peak and
//! severity — WARN when it opens, CRITICAL once it has lasted `critical_after`.

use crate::slo::ValueUnit;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Warn,
    Critical,
}

/// One violation of one watched series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Episode {
    /// `ttft.p95`, `e2e_per_token.p95`, `error_rate`.
    pub series: String,
    /// The flow step the series is of, or `all`.
    pub group: String,
    pub detector: String,
    pub unit: ValueUnit,
    /// Seconds from the run's start: the end of the first window judged over.
    pub opened_s: f64,
    /// The end of the first window judged normal again; none while open (or when the
    /// run ended during it).
    pub closed_s: Option<f64>,
    pub severity: Severity,
    /// When it became CRITICAL (the end of that window).
    pub escalated_s: Option<f64>,
    /// The worst window value, and when its window ended.
    pub peak: f64,
    pub peak_at_s: f64,
    /// The threshold the opening window was held against, where the detector has one.
    pub threshold: Option<f64>,
    /// Windows judged over.
    pub windows: u32,
}

/// What happened to an episode at a window.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Opened(Episode),
    /// It has lasted `critical_after`: now CRITICAL.
    Escalated(Episode),
    Closed(Episode),
}

/// Opens, extends and closes one series' episodes.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    open: Option<Episode>,
}

/// A window judged over: what the tracker needs to know of it.
#[derive(Debug, Clone)]
pub struct Over<'a> {
    pub series: &'a str,
    pub group: &'a str,
    pub detector: &'a str,
    pub unit: ValueUnit,
    pub end_s: f64,
    pub value: f64,
    pub threshold: Option<f64>,
}

impl Tracker {
    /// A window judged over: opens an episode, or extends the open one (escalating it
    /// once it has lasted `critical_after_s`).
    pub fn over(&mut self, w: Over<'_>, critical_after_s: f64) -> Option<Change> {
        match &mut self.open {
            None => {
                let episode = Episode {
                    series: w.series.to_owned(),
                    group: w.group.to_owned(),
                    detector: w.detector.to_owned(),
                    unit: w.unit,
                    opened_s: w.end_s,
                    closed_s: None,
                    severity: if critical_after_s <= 0.0 {
                        Severity::Critical
                    } else {
                        Severity::Warn
                    },
                    escalated_s: (critical_after_s <= 0.0).then_some(w.end_s),
                    peak: w.value,
                    peak_at_s: w.end_s,
                    threshold: w.threshold,
                    windows: 1,
                };
                self.open = Some(episode.clone());
                Some(Change::Opened(episode))
            }
            Some(episode) => {
                episode.windows += 1;
                if w.value > episode.peak {
                    episode.peak = w.value;
                    episode.peak_at_s = w.end_s;
                }
                let lasted = w.end_s - episode.opened_s;
                (episode.severity == Severity::Warn && lasted >= critical_after_s).then(|| {
                    episode.severity = Severity::Critical;
                    episode.escalated_s = Some(w.end_s);
                    Change::Escalated(episode.clone())
                })
            }
        }
    }

    /// A window judged normal (or better): closes the open episode.
    pub fn normal(&mut self, end_s: f64) -> Option<Change> {
        let mut episode = self.open.take()?;
        episode.closed_s = Some(end_s);
        Some(Change::Closed(episode))
    }

    /// The open episode's severity, if one is open.
    pub fn severity(&self) -> Option<Severity> {
        self.open.as_ref().map(|e| e.severity)
    }

    /// The episode still open when the run ended.
    pub fn still_open(self) -> Option<Episode> {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(end_s: f64, value: f64) -> Over<'static> {
        Over {
            series: "ttft.p95",
            group: "all",
            detector: "ewma",
            unit: ValueUnit::Ms,
            end_s,
            value,
            threshold: Some(100.0),
        }
    }

    #[test]
    fn an_episode_opens_escalates_once_and_closes_with_its_peak() {
        let mut t = Tracker::default();
        let Some(Change::Opened(e)) = t.over(over(30.0, 150.0), 60.0) else {
            panic!("not opened")
        };
        assert_eq!((e.severity, e.opened_s), (Severity::Warn, 30.0));
        assert_eq!(t.over(over(40.0, 300.0), 60.0), None);
        let Some(Change::Escalated(e)) = t.over(over(90.0, 200.0), 60.0) else {
            panic!("not escalated")
        };
        assert_eq!(e.severity, Severity::Critical);
        assert_eq!(t.over(over(100.0, 200.0), 60.0), None);
        let Some(Change::Closed(e)) = t.normal(110.0) else {
            panic!("not closed")
        };
        assert_eq!(
            (e.peak, e.peak_at_s, e.windows, e.closed_s),
            (300.0, 40.0, 4, Some(110.0))
        );
        assert_eq!(t.normal(120.0), None);
    }
}
