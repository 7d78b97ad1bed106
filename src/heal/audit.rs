//! The audit log, `heal.jsonl`: one line per event of the loop (the prompt, the model's
//! answer, the validation, the plan or action, its rollback, the verify, the end),
//! each with its time, written and flushed as it happens so a crash keeps what came
//! before. Secrets never enter it: the model's key is a header, never a field, and
//! commands' environments are not logged.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::Ending;
use super::exec::ActionRun;
use super::model::Protocol;

/// One event of the loop, as a line of the log (its fields after `event`, in this
/// order).
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    Start {
        run: &'a Path,
        runbook: &'a Path,
        model_url: &'a str,
        model: &'a str,
        protocol: Protocol,
        execute: bool,
        actions: Vec<&'a str>,
        max_steps: u32,
    },
    /// What the agent was first shown.
    Observation {
        observation: &'a Value,
    },
    /// One exchange with the model.
    Model {
        protocol: Protocol,
        request: &'a Value,
        answer: Option<&'a str>,
        elapsed_ms: f64,
    },
    Decision {
        thought: &'a str,
        action: &'a str,
        arguments: &'a Value,
    },
    /// The decision checked against the runbook: an action it lists, arguments its
    /// schema accepts.
    Validation {
        valid: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<&'a str>,
        action: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        errors: Option<&'a [String]>,
    },
    /// What `--execute` would have run (a dry run).
    Plan {
        action: &'a str,
        arguments: &'a Value,
    },
    Action {
        action: &'a str,
        arguments: &'a Value,
        outcome: &'a ActionRun,
    },
    Rollback {
        action: &'a str,
        outcome: &'a ActionRun,
    },
    Verify {
        spec: &'a Path,
        out: &'a Path,
        passed: bool,
        outcome: &'a ActionRun,
    },
    End {
        ending: &'a Ending,
    },
}

/// An open audit log.
pub struct Audit {
    file: std::io::BufWriter<std::fs::File>,
    started: Instant,
    /// Every line written, for the report.
    pub lines: Vec<Value>,
}

impl Audit {
    pub fn create(path: &Path) -> std::io::Result<Audit> {
        Ok(Audit {
            file: std::io::BufWriter::new(std::fs::File::create(path)?),
            started: Instant::now(),
            lines: Vec::new(),
        })
    }

    /// Appends one event, after the time and the step.
    pub fn log(&mut self, step: u32, event: &Event<'_>) -> std::io::Result<()> {
        let mut line = Map::new();
        line.insert(
            "t_ms".into(),
            json!((self.started.elapsed().as_secs_f64() * 1e3).round()),
        );
        line.insert("at".into(), json!(now_rfc3339()));
        line.insert("step".into(), json!(step));
        if let Value::Object(fields) = serde_json::to_value(event)? {
            line.extend(fields);
        }
        let line = Value::Object(line);
        serde_json::to_writer(&mut self.file, &line)?;
        self.file.write_all(b"\n")?;
        self.file.flush()?;
        self.lines.push(line);
        Ok(())
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
