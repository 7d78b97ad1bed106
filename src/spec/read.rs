//! Reading a spec file: its YAML documents one by one, each checked for its
//! `apiVersion` and `kind` and then parsed as its kind's type, with every document's
//! problems reported together, located by line.

use serde::Deserialize;

use super::error::{self, SpecError, SpecErrors};
use super::{API_VERSION, InferenceSpec, KINDS, Metadata, ModelLoadSpec, ScaleSpec};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Header {
    api_version: String,
    kind: String,
    #[serde(default, rename = "metadata")]
    _metadata: serde::de::IgnoredAny,
    #[serde(rename = "spec")]
    _spec: serde::de::IgnoredAny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Document<T> {
    // Checked through `Header`; named here so `deny_unknown_fields` accepts them.
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    metadata: Metadata,
    spec: T,
}

/// The 1-based line of the top-level `key` in document `index` (0 when not found).
fn nth_line(text: &str, index: usize, key: &str) -> usize {
    let mut document = 0;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("---") && n > 0 {
            document += 1;
        }
        if document == index && line.starts_with(key) {
            return n + 1;
        }
    }
    0
}

/// A parsed spec file: its documents by kind.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecFile {
    pub path: String,
    pub metadata: Metadata,
    pub inference: InferenceSpec,
    pub scale: Option<ScaleSpec>,
    pub model_load: Option<ModelLoadSpec>,
}

/// Reads and parses a spec file, reporting every document's problems together.
pub fn load(path: &str) -> Result<SpecFile, SpecErrors> {
    let text =
        std::fs::read_to_string(path).map_err(|e| SpecErrors::unreadable(path, "spec file", &e))?;
    parse(path, &text)
}

/// Parses spec text; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<SpecFile, SpecErrors> {
    let mut reading = Reading {
        file,
        text,
        errors: Vec::new(),
        inference: None,
        scale: None,
        model_load: None,
    };
    if let Some(error) = control_character(file, text) {
        return Err(SpecErrors(vec![error]));
    }
    let mut documents = 0;
    if !text.trim().is_empty() {
        // After a scan error (a NUL byte, say) the YAML reader yields the same failed
        // document forever: no file has more documents than `---` lines plus one.
        let most = text.lines().filter(|l| l.starts_with("---")).count() + 1;
        let documents_read = yaml_serde::Deserializer::from_str(text).take(most);
        // yaml_serde 0.10 panics ("unexpected end of mapping") on an alias with no
        // anchor inside a flow mapping of a document that follows `---`.
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for (index, document) in documents_read.enumerate() {
                documents += 1;
                reading.document(index, document);
            }
        }));
        if read.is_err() {
            return Err(SpecErrors(vec![unreadable_yaml(file, text)]));
        }
    }
    if documents == 0 {
        return Err(SpecErrors(vec![reading.error(
            0,
            "the spec file is empty".into(),
            Some("start from examples/quickstart.yaml".into()),
        )]));
    }
    if !reading.errors.is_empty() {
        return Err(SpecErrors(reading.errors));
    }
    match reading.inference {
        Some((metadata, inference)) => Ok(SpecFile {
            path: file.to_owned(),
            metadata,
            inference,
            scale: reading.scale,
            model_load: reading.model_load,
        }),
        None => {
            Err(SpecErrors(vec![
                reading.error(
                    0,
                    "no InferenceSpec document: nothing to run".into(),
                    Some(
                        "add a document with `kind: InferenceSpec` (see examples/quickstart.yaml)"
                            .into(),
                    ),
                ),
            ]))
        }
    }
}

/// What to say when the YAML reader failed outright: the first alias (`*name`) with no
/// anchor (`&name`) before it, which is what makes it fail, or else the file as a whole.
fn unreadable_yaml(file: &str, text: &str) -> SpecError {
    let alias = regex::Regex::new(r"\*([A-Za-z0-9_.-]+)").expect("a valid pattern");
    let lines: Vec<&str> = text.lines().collect();
    for (number, line) in lines.iter().enumerate() {
        let code = line.split(" #").next().unwrap_or(line);
        for found in alias.captures_iter(code) {
            let (start, name) = (found.get(0).expect("the match").start(), &found[1]);
            let anchor = format!("&{name}");
            let anchored = lines[..number].iter().any(|l| l.contains(&anchor))
                || code[..start].contains(&anchor);
            if !anchored {
                return SpecError {
                    file: file.to_owned(),
                    line: number + 1,
                    column: code[..start].chars().count() + 1,
                    path: String::new(),
                    message: format!("alias `*{name}` has no anchor `{anchor}` before it"),
                    fix: Some(format!(
                        "define `{anchor}` first, or write the value itself"
                    )),
                };
            }
        }
    }
    SpecError {
        file: file.to_owned(),
        line: 0,
        column: 1,
        path: String::new(),
        message: "the YAML reader failed on this file".into(),
        fix: Some("check its anchors (&name) and aliases (*name)".into()),
    }
}

/// The first character YAML does not allow in a file (a NUL, an escape, any control
/// character but tab and line ends), located: the YAML reader says only "at position
/// N". Usually a binary file, or a paste from a terminal.
fn control_character(file: &str, text: &str) -> Option<SpecError> {
    text.lines().enumerate().find_map(|(number, line)| {
        let (column, c) = line
            .chars()
            .enumerate()
            .find(|&(_, c)| c.is_control() && !matches!(c, '\t' | '\r' | '\u{85}'))?;
        Some(SpecError {
            file: file.to_owned(),
            line: number + 1,
            column: column + 1,
            path: String::new(),
            message: format!(
                "a control character ({:#04x}) YAML does not allow",
                u32::from(c)
            ),
            fix: Some("remove it: a spec is plain text (is this the right file?)".into()),
        })
    })
}

/// A spec file's documents as they are read: at most one of each kind, and every
/// problem found on the way.
struct Reading<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<SpecError>,
    inference: Option<(Metadata, InferenceSpec)>,
    scale: Option<ScaleSpec>,
    model_load: Option<ModelLoadSpec>,
}

impl Reading<'_> {
    fn error(&self, line: usize, message: String, fix: Option<String>) -> SpecError {
        SpecError {
            file: self.file.to_owned(),
            line,
            column: 1,
            path: String::new(),
            message,
            fix,
        }
    }

    /// Reads document `index`: its header, then the document as its kind's own type.
    fn document(&mut self, index: usize, document: yaml_serde::Deserializer) {
        let header = match Header::deserialize(document) {
            Ok(header) => header,
            Err(e) => {
                self.errors.push(SpecError::from_yaml(self.file, &e, 0));
                return;
            }
        };
        if header.api_version != API_VERSION {
            self.errors.push(self.error(
                nth_line(self.text, index, "apiVersion:"),
                format!(
                    "document {}: unsupported apiVersion `{}`",
                    index + 1,
                    header.api_version
                ),
                Some(format!("use `apiVersion: {API_VERSION}`")),
            ));
        }
        match header.kind.as_str() {
            "InferenceSpec" => {
                if let Some(doc) = self.typed::<InferenceSpec>(index) {
                    let kept = self.inference.is_none();
                    self.inference.get_or_insert((doc.metadata, doc.spec));
                    self.one_of_a_kind(kept, index, "InferenceSpec");
                }
            }
            "ScaleSpec" => {
                if let Some(doc) = self.typed::<ScaleSpec>(index) {
                    let kept = self.scale.replace(doc.spec).is_none();
                    self.one_of_a_kind(kept, index, "ScaleSpec");
                }
            }
            "ModelLoadSpec" => {
                if let Some(doc) = self.typed::<ModelLoadSpec>(index) {
                    let kept = self.model_load.replace(doc.spec).is_none();
                    self.one_of_a_kind(kept, index, "ModelLoadSpec");
                }
            }
            other => self.errors.push(SpecError {
                path: "kind".into(),
                ..self.error(
                    nth_line(self.text, index, "kind:"),
                    format!("unknown kind `{other}` in document {}", index + 1),
                    Some(match error::nearest(other, KINDS) {
                        Some(near) => {
                            format!("did you mean `{near}`? Choose from: {}", KINDS.join(", "))
                        }
                        None => format!("choose from: {}", KINDS.join(", ")),
                    }),
                )
            }),
        }
    }

    /// Document `index` parsed again, now with its kind's own type, so that errors
    /// keep their line numbers.
    fn typed<T: serde::de::DeserializeOwned>(&mut self, index: usize) -> Option<Document<T>> {
        let typed = yaml_serde::Deserializer::from_str(self.text)
            .nth(index)
            .map(Document::<T>::deserialize)?;
        typed
            .map_err(|e| self.errors.push(SpecError::from_yaml(self.file, &e, 0)))
            .ok()
    }

    fn one_of_a_kind(&mut self, first: bool, index: usize, kind: &str) {
        if !first {
            self.errors.push(self.error(
                nth_line(self.text, index, "kind:"),
                format!("more than one {kind} document"),
                Some(format!("keep one {kind} per file")),
            ));
        }
    }
}
