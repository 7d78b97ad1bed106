//! What every section of the report is built from: the section itself, a unit's name
//! as `summary.json` writes it, the key to the fault windows' colours.

use std::fmt::Write;

use super::svg::{self, Marks, escape};

/// A unit enum's name as `summary.json` writes it (`not_proven`, `first_byte`).
pub(super) fn wire_name(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A section of the page, with its anchor and heading.
pub(super) fn section(id: &str, title: &str, body: &str) -> String {
    format!(r#"<section id="{id}"><h2>{title}</h2>{body}</section>"#)
}

/// The key to the fault windows' colours, each window with its seconds and count.
pub(super) fn window_key(marks: &Marks) -> String {
    let mut key = String::new();
    for (_, _, label, colour) in &marks.windows {
        let _ = write!(
            key,
            r#"<li><span style="background:{}"></span>{}</li>"#,
            svg::PALETTE[(colour + 3) % svg::PALETTE.len()],
            escape(label)
        );
    }
    if key.is_empty() {
        key
    } else {
        format!(r#"<ul class="key windows">{key}</ul>"#)
    }
}
