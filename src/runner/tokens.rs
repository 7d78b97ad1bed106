//! Exact output counts for servers that stream no `usage` (llama.cpp). While the run
//! goes, answers without usage get the local tokenizer's count (an estimate, or the
//! named tokenizer's) and their text is kept; at the end, the best count there is
//! replaces it, and `records.jsonl` and the statistics are rebuilt:
//! 1. the content events, when the server sends one token per event — seen over the
//!    run: every answer cut by `max_tokens` had exactly that many events (a local
//!    tokenizer can miscount by 20 %; this cannot);
//! 2. else the server's own tokenizer (`/tokenize`), counting each kept answer, after
//!    the load, so the counting costs the server under test nothing;
//! 3. else the local count stands, marked as what it is.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::client::HttpClient;
use crate::client::server_tokenizer::ServerTokenizer;
use crate::record::{Outcome, Record, TokenSettlement, TokenSource};

/// Most bytes of answers kept for the server's tokenizer; past it, answers keep
/// their local count.
const MAX_KEPT_BYTES: usize = 256 << 20;
/// Longest the server's tokenizer may take over all the kept answers.
const SERVER_COUNT_BUDGET: Duration = Duration::from_secs(60);
/// Tokenize calls in flight at once.
const SERVER_COUNT_CONCURRENCY: usize = 4;

/// What the run's records say about counting their tokens.
#[derive(Debug, Default)]
pub(super) struct TokenEvidence {
    /// Successful answers the server gave no count for.
    uncounted: u64,
    /// Of those cut by `max_tokens`: events equal to it, and not.
    events_agree: u64,
    events_disagree: u64,
    /// The answers' texts, by `seq`, for the server's tokenizer.
    answers: HashMap<u64, String>,
    kept_bytes: usize,
}

impl TokenEvidence {
    /// Notes a record before it is written; takes its kept answer.
    pub(super) fn observe(&mut self, record: &mut Record) {
        let answer = record.answer.take();
        if !counted_locally(record) {
            return;
        }
        self.uncounted += 1;
        if record.finish_reason.as_deref() == Some("length")
            && let Some(max) = record.max_tokens
        {
            if record.content_events == max {
                self.events_agree += 1;
            } else {
                self.events_disagree += 1;
            }
        }
        if let Some(text) = answer
            && self.kept_bytes + text.len() <= MAX_KEPT_BYTES
        {
            self.kept_bytes += text.len();
            self.answers.insert(record.seq, text);
        }
    }

    /// One token per event, as far as the run shows.
    fn one_token_per_event(&self) -> bool {
        self.events_agree > 0 && self.events_disagree == 0
    }
}

/// A successful LLM answer whose server gave no count. Embed, search, tool and http
/// steps have no token source at all: they are not answers to count.
fn counted_locally(record: &Record) -> bool {
    record.outcome == Outcome::Ok && record.token_source.is_some_and(|s| s != TokenSource::Usage)
}

/// Settles the counts of answers without usage, rewriting `records` when a better
/// source was found. `None` when every answer had usage.
pub(super) async fn settle(
    evidence: TokenEvidence,
    records: &Path,
    http: &HttpClient,
    base_url: &str,
    model: &str,
) -> Result<Option<TokenSettlement>> {
    if evidence.uncounted == 0 {
        return Ok(None);
    }
    let mut settlement = TokenSettlement {
        uncounted: evidence.uncounted,
        source: TokenSource::Estimated,
        events_agree: evidence.events_agree,
        events_disagree: evidence.events_disagree,
        server_tokenizer: None,
    };
    if evidence.one_token_per_event() {
        settlement.source = TokenSource::Events;
        rewrite(records, |r| {
            r.output_tokens = Some(r.content_events);
            r.token_source = Some(TokenSource::Events);
        })?;
        return Ok(Some(settlement));
    }
    let Some(tokenizer) = ServerTokenizer::probe(http, base_url, model).await else {
        return Ok(Some(settlement)); // the local counts stand
    };
    let counts = server_counts(&tokenizer, http, evidence.answers).await;
    if !counts.is_empty() {
        settlement.source = TokenSource::ServerTokenizer;
        settlement.server_tokenizer = Some(tokenizer.endpoint());
        rewrite(records, |r| {
            if let Some(n) = counts.get(&r.seq) {
                r.output_tokens = Some(*n);
                r.token_source = Some(TokenSource::ServerTokenizer);
            }
        })?;
    }
    Ok(Some(settlement))
}

/// The server's count of each answer, a few at a time, within the budget.
async fn server_counts(
    tokenizer: &ServerTokenizer,
    http: &HttpClient,
    answers: HashMap<u64, String>,
) -> HashMap<u64, u32> {
    use futures_util::StreamExt;
    let deadline = Instant::now() + SERVER_COUNT_BUDGET;
    futures_util::stream::iter(answers)
        .map(|(seq, text)| async move {
            if Instant::now() >= deadline {
                return None;
            }
            let n = tokenizer.count(http, &text).await?;
            Some((seq, n as u32))
        })
        .buffer_unordered(SERVER_COUNT_CONCURRENCY)
        .filter_map(std::future::ready)
        .collect()
        .await
}

/// Applies `patch` to every successful record without usage, rewriting the file in
/// place (through a temporary file, so a failure leaves the original whole).
fn rewrite(path: &Path, mut patch: impl FnMut(&mut Record)) -> Result<()> {
    use std::io::Write;
    let temporary = path.with_extension("jsonl.settling");
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&temporary)
            .with_context(|| format!("cannot create {}", temporary.display()))?,
    );
    let mut written = Ok(());
    let mut line = Vec::new();
    crate::record::read_records(path, None, |mut record| {
        if counted_locally(&record) {
            patch(&mut record);
        }
        if written.is_ok() {
            line.clear();
            written = record
                .write_json(&mut line)
                .map_err(anyhow::Error::from)
                .and_then(|()| {
                    line.push(b'\n');
                    Ok(out.write_all(&line)?)
                });
        }
    })?;
    written?;
    out.flush()?;
    drop(out);
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}
