//! A service as written, checked: where it is, its TLS, headers, API key and local
//! tokenizer.

use super::*;

pub(super) fn service_from_spec(
    name: &str,
    s: &ServiceSpec,
    spec_dir: &Path,
    max_count_bytes: usize,
    problems: &mut Problems,
) -> Option<Service> {
    let path = format!("spec.services.{name}");
    let endpoint = endpoint_from_spec(s, &path, problems);
    let tls = tls_from_spec(s, &path, spec_dir, problems);
    if let Some(profile) = &s.profile {
        if s.url != "embedded" {
            problems.add(
                &format!("{path}.profile"),
                "a profile only applies to `url: embedded`".into(),
                Some("remove `profile`, or set `url: embedded`".into()),
            );
        } else if let Err(e) = crate::sim::Profile::load(profile) {
            problems.add(&format!("{path}.profile"), e.to_string(), None);
        }
    }
    let needs_model = matches!(
        s.api,
        ApiKind::Chat
            | ApiKind::Completions
            | ApiKind::Embeddings
            | ApiKind::Ollama
            | ApiKind::OllamaGenerate
            | ApiKind::Kserve
            | ApiKind::KserveGrpc
            | ApiKind::Responses
            | ApiKind::Anthropic
            | ApiKind::Images
            | ApiKind::Transcriptions
            | ApiKind::Speech
            | ApiKind::Realtime
    );
    if s.model.is_none() && s.url != "embedded" && needs_model {
        problems.add(
            &format!("{path}.model"),
            "is required for a real server".into(),
            Some(
                if matches!(s.api, ApiKind::Ollama | ApiKind::OllamaGenerate) {
                    "name the model, as `ollama list` (GET /api/tags) lists it".into()
                } else {
                    "name the served model, as GET /v1/models lists it".into()
                },
            ),
        );
    }
    let api_key = s
        .api_key_env
        .as_deref()
        .and_then(|var| api_key_from_env(var, &format!("{path}.api_key_env"), problems));
    let headers = headers_from_spec(&s.headers, &path, problems);
    let tokenizer = tokenizer_from_spec(s, &path, spec_dir, problems);
    Some(Service {
        counting: TokenCounting {
            tokenizer: tokenizer?,
            named: s.tokenizer.is_some(),
            always: s.always_count_locally,
            max_bytes: max_count_bytes,
        },
        name: name.to_owned(),
        endpoint: endpoint?,
        model: s.model.clone(),
        api_key,
        headers,
        // gRPC is HTTP/2 only.
        http2: s.http2 || matches!(s.api, ApiKind::QdrantGrpc | ApiKind::KserveGrpc),
        api: s.api,
        tls: tls?,
    })
}

/// Where the service is: the simulator, a PostgreSQL DSN (pgvector), or an http(s)
/// base URL without a trailing `/v1`.
pub(super) fn endpoint_from_spec(
    s: &ServiceSpec,
    path: &str,
    problems: &mut Problems,
) -> Option<Endpoint> {
    let balancing = !s.replicas.is_empty() || s.balance.is_some();
    if balancing && s.url != "balanced" {
        problems.add(
            &format!("{path}.url"),
            "`replicas` and `balance` belong to `url: balanced`".into(),
            Some("write `url: balanced`, or remove `replicas` and `balance`".into()),
        );
        return None;
    }
    if s.url == "stdio" || !s.command.is_empty() {
        stdio_from_spec(s, path, problems)
    } else if s.url == "balanced" {
        balanced_from_spec(s, path, problems)
    } else if s.url == "embedded" {
        if s.api == ApiKind::Pgvector {
            problems.add(
                &format!("{path}.url"),
                "the simulator speaks Qdrant's API, not PostgreSQL's".into(),
                Some(
                    "set `api: qdrant` for the embedded search tier, or give a postgresql:// URL"
                        .into(),
                ),
            );
            return None;
        }
        Some(Endpoint::Embedded {
            profile: s.profile.clone().unwrap_or_else(|| "7b".into()),
        })
    } else if s.api == ApiKind::Pgvector {
        let is_dsn = s.url.starts_with("postgresql://") || s.url.starts_with("postgres://");
        if !is_dsn || s.url.parse::<tokio_postgres::Config>().is_err() {
            problems.add(
                &format!("{path}.url"),
                format!("`{}` is not a PostgreSQL connection URL", s.url),
                Some("write e.g. `postgresql://postgres@127.0.0.1:5432/postgres`".into()),
            );
            None
        } else if s.pgvector.is_none() {
            problems.add(
                &format!("{path}.pgvector"),
                "a pgvector service needs its table".into(),
                Some(
                    "add `pgvector: { table: docs }` (columns default to id, text, embedding)"
                        .into(),
                ),
            );
            None
        } else {
            Some(Endpoint::Url(s.url.clone()))
        }
    } else if let Some(rest) = s
        .url
        .strip_prefix("http://")
        .or(s.url.strip_prefix("https://"))
    {
        if rest.is_empty() || s.url.parse::<hyper::Uri>().is_err() {
            problems.add(
                &format!("{path}.url"),
                format!("`{}` is not a valid URL", s.url),
                Some("write e.g. `http://127.0.0.1:8000`".into()),
            );
            None
        } else {
            let base = s.url.trim_end_matches('/');
            Some(Endpoint::Url(
                base.strip_suffix("/v1").unwrap_or(base).to_owned(),
            ))
        }
    } else {
        problems.add(
            &format!("{path}.url"),
            format!(
                "`{}` is neither `embedded`, `balanced`, `stdio` nor an http:// or https:// URL",
                s.url
            ),
            Some("write `embedded` or e.g. `https://llm.example.com`".into()),
        );
        None
    }
}

/// A `url: stdio` service: an MCP server started from its `command`.
fn stdio_from_spec(s: &ServiceSpec, path: &str, problems: &mut Problems) -> Option<Endpoint> {
    if s.url != "stdio" {
        problems.add(
            &format!("{path}.command"),
            "`command` starts an MCP server over stdio: it belongs to `url: stdio`".into(),
            Some("write `url: stdio` and `api: mcp`, or remove `command`".into()),
        );
        return None;
    }
    if s.api != ApiKind::Mcp {
        problems.add(
            &format!("{path}.url"),
            "`url: stdio` starts an MCP server, and this service is not `api: mcp`".into(),
            Some("add `api: mcp`, or give the service's http:// URL".into()),
        );
        return None;
    }
    if s.command.first().is_none_or(|program| program.is_empty()) {
        problems.add(
            &format!("{path}.url"),
            "`url: stdio` needs the `command` that starts the server".into(),
            Some(
                "write e.g. `command: [npx, -y, \"@modelcontextprotocol/server-everything\", stdio]`"
                    .into(),
            ),
        );
        return None;
    }
    Some(Endpoint::Stdio {
        command: s.command.clone(),
    })
}

/// The service's local tokenizer: the one named (a tokenizer.json path is relative to
/// the spec file, like a prompts file), else the simulator's or cl100k.
pub(super) fn tokenizer_from_spec(
    s: &ServiceSpec,
    path: &str,
    spec_dir: &Path,
    problems: &mut Problems,
) -> Option<LocalTokenizer> {
    let default_tokenizer = if s.url == "embedded" {
        "sim"
    } else {
        "cl100k_base"
    };
    match s.tokenizer.as_deref().unwrap_or(default_tokenizer) {
        // A tokenizer.json path is relative to the spec file, like a prompts file.
        name if LocalTokenizer::NAMES.contains(&name) => LocalTokenizer::by_name(name),
        file if file.ends_with(".json") || spec_dir.join(file).is_dir() => {
            LocalTokenizer::by_name(&spec_dir.join(file).to_string_lossy())
        }
        unknown => LocalTokenizer::by_name(unknown),
    }
    .map_err(|e| problems.add(&format!("{path}.tokenizer"), e, None))
    .ok()
}

/// The TLS settings of an https service, loaded once (certificates read, the key
/// checked against its certificate); `Some(None)` for an http service.
pub(super) fn tls_from_spec(
    s: &ServiceSpec,
    path: &str,
    spec_dir: &Path,
    problems: &mut Problems,
) -> Option<Option<TlsSettings>> {
    let https = s.url.starts_with("https://");
    match (&s.tls, https) {
        (None, false) => Some(None),
        (Some(_), false) => {
            problems.add(
                &format!("{path}.tls"),
                format!("applies to https:// URLs; `{}` is not one", s.url),
                Some("remove `tls`, or write the URL with https://".into()),
            );
            None
        }
        (None, true) => Some(Some(TlsSettings::system())),
        (Some(t), true) => {
            let relative = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| spec_dir.join(p));
            let options = TlsOptions {
                ca_cert: relative(&t.ca_cert),
                client_cert: relative(&t.client_cert),
                client_key: relative(&t.client_key),
                insecure_skip_verify: t.insecure_skip_verify,
            };
            if t.insecure_skip_verify && t.ca_cert.is_some() {
                problems.add(
                    &format!("{path}.tls.insecure_skip_verify"),
                    "checks nothing, so the `ca_cert` beside it would not be used".into(),
                    Some(
                        "keep one: `ca_cert` to trust a private CA, or `insecure_skip_verify`"
                            .into(),
                    ),
                );
                return None;
            }
            TlsSettings::load(&options)
                .map_err(|e| problems.add(&format!("{path}.tls.{}", e.field), e.message, None))
                .ok()
                .map(Some)
        }
    }
}

/// Extra request headers, checked once. Their values are marked sensitive: they often
/// carry credentials (`x-api-key`), and nothing redline prints or records shows them.
pub(super) fn headers_from_spec(
    headers: &BTreeMap<String, String>,
    path: &str,
    problems: &mut Problems,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut valid = Vec::new();
    for (k, v) in headers {
        let at = format!("{path}.headers.{k}");
        let Ok(name) = HeaderName::try_from(k.as_str()) else {
            problems.add(
                &at,
                format!("`{k}` is not an HTTP header name"),
                Some("use letters, digits and `-`, e.g. `x-api-key`".into()),
            );
            continue;
        };
        match HeaderValue::try_from(v.as_str()) {
            Ok(mut value) => {
                value.set_sensitive(true);
                valid.push((name, value));
            }
            Err(_) => problems.add(
                &at,
                "its value holds a control character (a newline?), which no header can carry"
                    .into(),
                Some("remove it from the value".into()),
            ),
        }
    }
    valid
}

/// The `Authorization` value of the key in environment variable `var`, checked once
/// here: a key that cannot go in a header (a trailing newline from `echo`, say) is a
/// spec error naming the variable, not a failure of every request.
pub(super) fn api_key_from_env(
    var: &str,
    at: &str,
    problems: &mut Problems,
) -> Option<HeaderValue> {
    let key = match std::env::var(var) {
        Ok(key) => key,
        Err(std::env::VarError::NotPresent) => {
            problems.add(
                at,
                format!("environment variable `{var}` is not set"),
                Some(format!("export {var}=… before the run")),
            );
            return None;
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            problems.add(
                at,
                format!("environment variable `{var}` is not valid UTF-8"),
                None,
            );
            return None;
        }
    };
    let mut value = match HeaderValue::try_from(format!("Bearer {key}")) {
        Ok(value) => value,
        Err(_) => {
            let what = match key.chars().find(|c| c.is_control()) {
                Some('\n') => "a newline".to_owned(),
                Some(c) => format!("the control character U+{:04X}", c as u32),
                None => "a character an HTTP header cannot carry".to_owned(),
            };
            problems.add(
                at,
                format!("the key in `{var}` holds {what}, so it cannot be sent as a header"),
                Some(format!(
                    "set it without it, e.g. `export {var}=\"$(printf %s \"${var}\" | tr -d '\\r\\n')\"`"
                )),
            );
            return None;
        }
    };
    value.set_sensitive(true);
    Some(value)
}

/// How the embedded simulator's search and tool tiers behave, from the embedded
/// services the run calls: a concern of the simulator the run stands up, not of any
/// one flow.
pub(super) fn embedded_tiers(
    called: &BTreeMap<String, Service>,
    specs: &BTreeMap<String, ServiceSpec>,
) -> TierConfig {
    let mut tiers = TierConfig::default();
    for (name, service) in called {
        let spec = &specs[name];
        if !matches!(service.endpoint, Endpoint::Embedded { .. }) {
            continue;
        }
        match spec.api {
            ApiKind::Qdrant | ApiKind::QdrantGrpc => {
                tiers.warm_corpus = true;
                if let Some(latency) = spec.latency {
                    tiers.search_latency = latency;
                }
                if let Some(size) = spec.corpus_size {
                    tiers.corpus_size = size as usize;
                }
            }
            // The simulator's MCP tools run on its tool tier.
            ApiKind::Tools | ApiKind::Mcp => {
                if let Some(latency) = spec.latency {
                    tiers.tool_latency = latency;
                }
                tiers.tool_failure_rate = spec.failure_rate.unwrap_or(0.0);
            }
            _ => {}
        }
    }
    tiers
}
