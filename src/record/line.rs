//! A record as one JSON line, written field by field. The derived `Serialize` does
//! the same through serde's map machinery, which escapes every key on every record:
//! under callgrind that was 4,100 instructions a record, two thirds of the recorder's
//! cost per request. Here the keys are literals and only string values are escaped.
//! The output is byte for byte what `serde_json::to_string(&record)` gives (the
//! tests hold the two together), so the derive stays the format's definition, for
//! reading records back and for their JSON Schema.

use serde::Serialize;

use super::Record;

impl Record {
    /// Appends this record as JSON (no newline) to `out`. Fails only as the derived
    /// `Serialize` would, on a value serde_json cannot write.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        // Naming every field, with no `..`, makes a new field a compile error here
        // until it is written.
        let Record {
            seq,
            stage,
            phase,
            outcome,
            error,
            session,
            prefix,
            traceparent,
            faults,
            step,
            media,
            mcp,
            session_end,
            grade,
            intended_us,
            sent_us,
            connect_us,
            tls_us,
            headers_us,
            first_byte_us,
            first_token_us,
            first_reasoning_us,
            first_answer_us,
            second_token_us,
            last_byte_us,
            failed_us,
            status,
            content_events,
            itl_mean_us,
            input_tokens,
            output_tokens,
            token_source,
            token_note,
            max_tokens,
            output_tokens_local,
            reasoning_tokens,
            cached_tokens,
            cache_write_tokens,
            finish_reason,
            server,
            server_reported,
            itl_us,
            answer: _,
            exchange: _,
        } = self;
        let mut line = Line(out);
        line.0.extend_from_slice(b"{\"seq\":");
        line.number(*seq);
        line.number_at(b"stage", *stage);
        line.value_at(b"phase", phase)?;
        line.value_at(b"outcome", outcome)?;
        line.some_value_at(b"error", error)?;
        line.some_value_at(b"session", session)?;
        line.some_value_at(b"prefix", prefix)?;
        line.some_value_at(b"traceparent", traceparent)?;
        if !faults.is_empty() {
            line.value_at(b"faults", faults)?;
        }
        line.some_value_at(b"step", step)?;
        line.some_value_at(b"media", media)?;
        line.some_value_at(b"mcp", mcp)?;
        line.some_value_at(b"session_end", session_end)?;
        line.some_value_at(b"grade", grade)?;
        line.number_at(b"intended_us", *intended_us);
        for (key, mark) in [
            (&b"sent_us"[..], sent_us),
            (b"connect_us", connect_us),
            (b"tls_us", tls_us),
            (b"headers_us", headers_us),
            (b"first_byte_us", first_byte_us),
            (b"first_token_us", first_token_us),
            (b"first_reasoning_us", first_reasoning_us),
            (b"first_answer_us", first_answer_us),
            (b"second_token_us", second_token_us),
            (b"last_byte_us", last_byte_us),
            (b"failed_us", failed_us),
        ] {
            line.some_number_at(key, *mark);
        }
        line.some_number_at(b"status", *status);
        line.number_at(b"content_events", *content_events);
        line.some_number_at(b"itl_mean_us", *itl_mean_us);
        line.some_number_at(b"input_tokens", *input_tokens);
        line.some_number_at(b"output_tokens", *output_tokens);
        line.some_value_at(b"token_source", token_source)?;
        line.some_value_at(b"token_note", token_note)?;
        line.some_number_at(b"max_tokens", *max_tokens);
        line.some_number_at(b"output_tokens_local", *output_tokens_local);
        line.some_number_at(b"reasoning_tokens", *reasoning_tokens);
        line.some_number_at(b"cached_tokens", *cached_tokens);
        line.some_number_at(b"cache_write_tokens", *cache_write_tokens);
        line.some_value_at(b"finish_reason", finish_reason)?;
        line.some_value_at(b"server", server)?;
        line.some_value_at(b"server_reported", server_reported)?;
        if !itl_us.is_empty() {
            line.numbers_at(b"itl_us", itl_us);
        }
        line.0.push(b'}');
        Ok(())
    }
}

/// A JSON object being written, past its first field: each field starts with `,`.
struct Line<'a>(&'a mut Vec<u8>);

impl Line<'_> {
    fn key(&mut self, key: &[u8]) {
        self.0.extend_from_slice(b",\"");
        self.0.extend_from_slice(key);
        self.0.extend_from_slice(b"\":");
    }

    fn number(&mut self, n: impl itoa::Integer) {
        self.0
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }

    fn number_at(&mut self, key: &[u8], n: impl itoa::Integer) {
        self.key(key);
        self.number(n);
    }

    fn some_number_at(&mut self, key: &[u8], n: Option<impl itoa::Integer>) {
        if let Some(n) = n {
            self.number_at(key, n);
        }
    }

    fn numbers_at(&mut self, key: &[u8], numbers: &[u32]) {
        self.key(key);
        self.0.push(b'[');
        for (i, n) in numbers.iter().enumerate() {
            if i > 0 {
                self.0.push(b',');
            }
            self.number(*n);
        }
        self.0.push(b']');
    }

    /// A value through serde: strings (escaped), enums and the nested marks.
    fn value_at(&mut self, key: &[u8], value: &impl Serialize) -> serde_json::Result<()> {
        self.key(key);
        serde_json::to_writer(&mut *self.0, value)
    }

    fn some_value_at(
        &mut self,
        key: &[u8],
        value: &Option<impl Serialize>,
    ) -> serde_json::Result<()> {
        match value {
            Some(value) => self.value_at(key, value),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    /// A record with every field set, strings that need escaping among them.
    fn full() -> Record {
        let mut record = Record::unsent(u64::MAX, 7, Phase::Cooldown, 1_234_567);
        record.outcome = Outcome::Timeout;
        record.error = Some(Failure {
            stage: FailStage::FirstToken,
            kind: "timeout".into(),
            message: "no token in 60 s: \"quoted\", a\ttab, a\nnewline, \u{1} and é".into(),
            origin: Some("proxy".into()),
        });
        record.session = Some(SessionMark {
            id: 3,
            turn: 2,
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            snapshot: "turn-2".into(),
        });
        record.prefix = Some(PrefixMark { id: 1, tokens: 512 });
        record.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        record.faults = vec![InjectedFault {
            rule: "slow\\tools".into(),
            fault: "delay".into(),
            added_ms: Some(12.5),
        }];
        record.step = Some(StepMark {
            name: "search".into(),
            kind: "search".into(),
            service: Some("vectors".into()),
            agent_step_seq: 2,
            tool: Some("lookup".into()),
            tool_call_hash: Some("9f86d081884c7d65".into()),
            results: Some(10),
            recall: Some(0.9),
        });
        record.media = Some(MediaMark {
            audio_s: Some(12.25),
            bytes: 392_044,
            words: Some(31),
            audio_in_s: Some(3.5),
            input_done_us: Some(4_000_000),
            first_transcript_us: Some(4_050_000),
            first_audio_us: Some(4_080_000),
            ..MediaMark::new(MediaKind::Realtime)
        });
        record.mcp = Some(McpMark {
            method: "tools/call".into(),
            name: Some("get\"weather".into()),
            handshake_us: Some(1_250),
            reinitialized: true,
            progress: 3,
            pages: None,
            items: None,
            ended_session: true,
            resumed: 1,
            heard: 2,
        });
        record.session_end = Some(SessionEnd {
            outcome: SessionOutcome::Fallback,
            fallback_reason: Some(FallbackReason {
                rule: "consecutive_tool_timeouts".into(),
                tool: "lookup".into(),
                timeouts: 3,
                skipped: vec!["answer".into()],
            }),
            requests: 4,
            e2e_us: 99,
        });
        record.grade = Some(crate::record::Grade {
            verdict: crate::record::GradeVerdict::Wrong,
            bucket: Some(crate::record::GradeBucket::ParamValue),
            note: Some("the last number 41 is not 42 ± 0".into()),
        });
        for (i, mark) in [
            &mut record.sent_us,
            &mut record.connect_us,
            &mut record.tls_us,
            &mut record.headers_us,
            &mut record.first_byte_us,
            &mut record.first_token_us,
            &mut record.first_reasoning_us,
            &mut record.first_answer_us,
            &mut record.second_token_us,
            &mut record.last_byte_us,
            &mut record.failed_us,
            &mut record.itl_mean_us,
        ]
        .into_iter()
        .enumerate()
        {
            *mark = Some(1_234_600 + i as u64 * 1_000);
        }
        record.status = Some(504);
        record.content_events = 42;
        record.input_tokens = Some(u32::MAX);
        record.output_tokens = Some(0);
        record.token_source = Some(TokenSource::ServerTokenizer);
        record.token_note = Some("counted by /tokenize".into());
        record.max_tokens = Some(256);
        record.output_tokens_local = Some(41);
        record.reasoning_tokens = Some(12);
        record.cached_tokens = Some(100);
        record.cache_write_tokens = Some(28);
        record.finish_reason = Some("length".into());
        record.server = Some(ServerTruth {
            arrival_us: 1,
            scheduled_us: 2,
            first_token_us: 3,
            finish_us: 4,
            preemptions: 1,
            cached_prompt_tokens: 128,
            prompt_tokens: 512,
            completion_tokens: 41,
            request_hash: u64::MAX,
            first_token_sent_us: Some(5),
            first_answer_us: Some(6),
            reasoning_tokens: Some(12),
        });
        record.server_reported = Some(ServerReported {
            total_us: Some(9),
            prompt_tokens: Some(512),
            ..ServerReported::default()
        });
        record.itl_us = vec![0, 1, u32::MAX, 250];
        record.answer = Some("never written".into());
        record.exchange = Some(Box::new(Exchange::new("prompt", "answer")));
        record
    }

    /// Clears the optional fields whose bit in `mask` is set.
    fn thinned(mask: u64) -> Record {
        let mut r = full();
        let clears: [&mut dyn FnMut(&mut Record); 31] = [
            &mut |r| r.error = None,
            &mut |r| r.session = None,
            &mut |r| r.prefix = None,
            &mut |r| r.traceparent = None,
            &mut |r| r.faults.clear(),
            &mut |r| r.step = None,
            &mut |r| r.media = None,
            &mut |r| r.mcp = None,
            &mut |r| r.session_end = None,
            &mut |r| r.sent_us = None,
            &mut |r| r.connect_us = None,
            &mut |r| r.tls_us = None,
            &mut |r| r.headers_us = None,
            &mut |r| r.first_byte_us = None,
            &mut |r| r.first_token_us = None,
            &mut |r| r.first_reasoning_us = None,
            &mut |r| r.first_answer_us = None,
            &mut |r| r.second_token_us = None,
            &mut |r| r.last_byte_us = None,
            &mut |r| r.status = None,
            &mut |r| r.itl_mean_us = None,
            &mut |r| r.input_tokens = None,
            &mut |r| r.output_tokens = None,
            &mut |r| r.token_source = None,
            &mut |r| r.token_note = None,
            &mut |r| r.max_tokens = None,
            &mut |r| r.output_tokens_local = None,
            &mut |r| r.reasoning_tokens = None,
            &mut |r| r.cached_tokens = None,
            &mut |r| r.cache_write_tokens = None,
            &mut |r| {
                r.finish_reason = None;
                r.server = None;
                r.server_reported = None;
                r.itl_us.clear();
            },
        ];
        for (bit, clear) in clears.into_iter().enumerate() {
            if mask >> bit & 1 == 1 {
                clear(&mut r);
            }
        }
        r
    }

    fn written(record: &Record) -> String {
        let mut out = Vec::new();
        record.write_json(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_full_record_is_written_exactly_as_serde_writes_it() {
        let record = full();
        assert_eq!(written(&record), serde_json::to_string(&record).unwrap());
        let back: Record = serde_json::from_str(&written(&record)).unwrap();
        assert_eq!(back.error, record.error, "escaped strings read back");
    }

    #[test]
    fn every_mix_of_absent_fields_is_written_exactly_as_serde_writes_it() {
        // All present, all absent, each absent alone, and 500 seeded mixes.
        let alone = (0..26).map(|bit| 1u64 << bit);
        let mut state = 0x5eed_u64;
        let mixes = std::iter::repeat_with(move || {
            state = crate::seed::mix_seed(&[state]);
            state
        })
        .take(500);
        for mask in [0, u64::MAX].into_iter().chain(alone).chain(mixes) {
            let record = thinned(mask);
            assert_eq!(
                written(&record),
                serde_json::to_string(&record).unwrap(),
                "mask {mask:#x}"
            );
        }
    }

    #[test]
    fn an_unsent_record_is_written_exactly_as_serde_writes_it() {
        let record = Record::unsent(0, 0, Phase::Warmup, 0);
        assert_eq!(written(&record), serde_json::to_string(&record).unwrap());
    }
}
