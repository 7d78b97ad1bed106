//! The audit log, `heal.jsonl`: one line per event of the loop (the prompt, the model's
//! answer, the validation, the plan or action, its rollback, the verify, the end),
//! each with its time, written and flushed as it happens so a crash keeps what came
//! before. Secrets never enter it: the model's key is a header, never a field, and
//! commands' environments are not logged.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde_json::{Map, Value, json};

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

    /// Appends one event: `fields` (an object) after the time, step and event name.
    pub fn log(&mut self, step: u32, event: &str, fields: Value) -> std::io::Result<()> {
        let mut line = Map::new();
        line.insert(
            "t_ms".into(),
            json!((self.started.elapsed().as_secs_f64() * 1e3).round()),
        );
        line.insert("at".into(), json!(now_rfc3339()));
        line.insert("step".into(), json!(step));
        line.insert("event".into(), json!(event));
        if let Value::Object(fields) = fields {
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
