//! What a run was asked to do, as its summary and report keep it: redline's version,
//! the command line and the spec — with every secret they held taken out, since run
//! folders travel (CI artifacts, tickets, chat).
//!
//! Header values in a spec are credentials more often than not (`Authorization`,
//! `x-api-key`), so every value of a `headers` map is hidden, whatever its name; so is
//! any value under a key that names a secret, and the password of a URL. The spec is
//! kept as written, comments included: only the secret scalars are replaced.

use regex::Regex;
use serde::{Deserialize, Serialize};

/// What stands where a secret was.
pub const REDACTED: &str = "[redacted]";

/// Keys whose values are secrets wherever they appear (lower case, `-` and `_` alike).
const SECRET_KEYS: &[&str] = &[
    "authorization",
    "api_key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "token",
    "cookie",
    "bearer",
    "private_key",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Invocation {
    /// The redline version that ran.
    pub redline: String,
    /// The command line, shell-quoted, URL passwords hidden.
    pub command: String,
    /// The spec file's path; none when the command line's shorthands made the spec.
    pub spec_path: Option<String>,
    /// The spec as run (for shorthands, the spec they made), secrets hidden.
    pub spec: String,
}

impl Invocation {
    pub fn new(args: &[String], spec_path: Option<&str>, spec_text: &str) -> Invocation {
        Invocation {
            redline: env!("CARGO_PKG_VERSION").to_owned(),
            command: command_line(args),
            spec_path: spec_path.map(str::to_owned),
            spec: redact_spec(spec_text),
        }
    }
}

fn command_line(args: &[String]) -> String {
    args.iter()
        .map(|arg| shell_quote(&redact_urls(arg)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// `scheme://user:password@host` → `scheme://user:[redacted]@host`.
fn redact_urls(text: &str) -> String {
    let userinfo = Regex::new(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*):[^/\s@]+@")
        .expect("a valid pattern");
    userinfo
        .replace_all(text, format!("${{head}}:{REDACTED}@"))
        .into_owned()
}

/// The spec's text with its secrets replaced. The secrets are found by reading the
/// YAML (every document), then replaced where they stand as the value of their key in
/// the text, so comments and layout stay and the same value under another key (a
/// header `x-n: 7`, a `rate: 7`) is left alone; a text that is not YAML keeps only
/// URL redaction.
pub fn redact_spec(text: &str) -> String {
    let mut secrets = Vec::new();
    for document in yaml_serde::Deserializer::from_str(text) {
        // Any YAML is a Value: an error is the reader's, and it would repeat forever.
        let Ok(value) = yaml_serde::Value::deserialize(document) else {
            break;
        };
        secrets_in(&value, false, &mut secrets);
    }
    secrets.sort();
    secrets.dedup();
    let mut redacted = text.to_owned();
    for (key, secret) in secrets {
        // `key: value`, bare or quoted, in block or flow style, up to the end of the
        // line, a comment, or the next item of a flow collection.
        let pattern = format!(
            r#"(?m)(?P<head>(?:^|[\s{{,])["']?{}["']?[ \t]*:[ \t]*)(?P<quote>["']?){}["']?(?P<tail>[ \t]*(?:[,}}\]#]|$))"#,
            regex::escape(&key),
            regex::escape(&secret)
        );
        let scalar = Regex::new(&pattern).expect("escaped text makes a valid pattern");
        redacted = scalar
            .replace_all(
                &redacted,
                format!("${{head}}${{quote}}{REDACTED}${{quote}}${{tail}}"),
            )
            .into_owned();
    }
    redact_urls(&redacted)
}

/// The (key, value) pairs to hide: every scalar under `headers`, and under a key that
/// names a secret.
fn secrets_in(value: &yaml_serde::Value, hide: bool, out: &mut Vec<(String, String)>) {
    use yaml_serde::Value;
    match value {
        Value::Mapping(map) => {
            for (key, value) in map {
                let Some(key) = key.as_str() else { continue };
                let lower = key.to_ascii_lowercase();
                let hide = hide || lower == "headers" || names_a_secret(&lower);
                match scalar_text(value) {
                    Some(text) if hide && lower != "headers" => out.push((key.to_owned(), text)),
                    _ => secrets_in(value, hide, out),
                }
            }
        }
        Value::Sequence(items) => items.iter().for_each(|v| secrets_in(v, hide, out)),
        Value::Tagged(tagged) => secrets_in(&tagged.value, hide, out),
        _ => {}
    }
}

fn names_a_secret(key: &str) -> bool {
    let key = key.replace('-', "_");
    // `max_tokens`, `input_tokens`, `block_tokens` are counts, not credentials, and
    // `api_key_env` names the variable that holds the key.
    let harmless = key.ends_with("tokens") || key.starts_with("tokeniz") || key.ends_with("_env");
    !harmless && SECRET_KEYS.iter().any(|secret| key.contains(secret))
}

fn scalar_text(value: &yaml_serde::Value) -> Option<String> {
    use yaml_serde::Value;
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_and_named_secrets_are_hidden_and_the_rest_kept() {
        let spec = "# the prod gateway\nspec:\n  services:\n    llm:\n      url: https://bob:hunter2@gw.example/v1  # via the gateway\n      headers:\n        Authorization: Bearer sk-live-123\n        x-team: \"ml-platform\"\n      other: { headers: { X-Key: abc, x-n: 7 }, api_key: 'k1' }\n  payloadTemplate: { max_tokens: 64, prompts: { synthetic: { input_tokens: 16 } } }\n  note: ml-platform owns Bearer sk-live-123s\n  rate: 7\n";
        let out = redact_spec(spec);
        for secret in [
            "sk-live-123\n",
            "\"ml-platform\"",
            "abc",
            "x-n: 7",
            "'k1'",
            "hunter2",
        ] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        for kept in [
            "# the prod gateway",
            "# via the gateway",
            "https://bob:[redacted]@gw.example/v1",
            "Authorization: [redacted]\n",
            "x-team: \"[redacted]\"",
            "X-Key: [redacted],",
            "api_key: '[redacted]' }",
            "max_tokens: 64",
            "input_tokens: 16",
            // Only whole values: the same words inside other text stay.
            "note: ml-platform owns Bearer sk-live-123s",
            "rate: 7",
        ] {
            assert!(out.contains(kept), "{kept} missing:\n{out}");
        }
    }

    #[test]
    fn the_command_line_is_quoted_and_its_passwords_hidden() {
        let args = [
            "redline",
            "run",
            "--url",
            "http://u:p4ss@127.0.0.1:8000",
            "--name",
            "it's",
        ]
        .map(String::from);
        assert_eq!(
            command_line(&args),
            r"redline run --url 'http://u:[redacted]@127.0.0.1:8000' --name 'it'\''s'"
        );
    }
}
