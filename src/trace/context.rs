//! W3C trace context (`traceparent`): built for every request redline sends and read
//! back by the chaos proxy and the span exporter, in this one place, so the three agree
//! on its shape. `00-<32 hex trace ID>-<16 hex span ID>-01` (version 00, sampled).

use rand::Rng;

use crate::seed::mix_seed;

/// A W3C trace ID: 16 bytes from `rng`, the high half mixed with the run's
/// `trace_key` (zero when a spec asks for seeded trace IDs), not all zero.
pub fn new_trace_id(rng: &mut impl Rng, trace_key: u64) -> String {
    format!(
        "{:016x}{:016x}",
        (rng.random::<u64>() ^ trace_key) | 1,
        rng.random::<u64>()
    )
}

/// The `traceparent` of a span `span_id` (never zero) in trace `trace_id` (32 hex).
pub fn traceparent(trace_id: &str, span_id: u64) -> String {
    format!("00-{trace_id}-{:016x}-01", span_id | 1)
}

/// The `traceparent` of a request outside a session: a trace of its own. Its span ID
/// comes from the seed and its position alone, so the chaos proxy's seeded fault
/// decisions (keyed by it) replay whatever the trace ID; the trace ID is new to the
/// run unless `trace_key` is zero (`trace_ids: seeded`), so runs never collide in a
/// trace store.
pub fn request_traceparent(trace_key: u64, seed: u64, seq: u64) -> String {
    let high = (mix_seed(&[seed, seq, 0x7472_6163]) ^ trace_key) | 1;
    let low = mix_seed(&[seed, seq, 0x6563_6172]);
    let span = mix_seed(&[seed, seq, 0x7370_616e]) | 1;
    // Written digit by digit into one buffer: this runs for every request, and
    // `format!` twice cost 3 % of the client's CPU at 60k requests a second.
    let mut out = *b"00-00000000000000000000000000000000-0000000000000000-01";
    write_hex(&mut out[3..19], high);
    write_hex(&mut out[19..35], low);
    write_hex(&mut out[36..52], span);
    String::from_utf8(out.to_vec()).expect("hex digits and dashes are ASCII")
}

/// Writes `value` as 16 lowercase hex digits into `out`.
fn write_hex(out: &mut [u8], value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = DIGITS[(value >> ((15 - i) * 4)) as usize & 0xf];
    }
}

/// The IDs of a `traceparent`, as hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext<'a> {
    pub trace_id: &'a str,
    pub span_id: &'a str,
}

/// Reads a `traceparent`: `None` unless it has the version, a 32-hex trace ID, a
/// 16-hex span ID and the flags.
pub fn parse(traceparent: &str) -> Option<TraceContext<'_>> {
    let mut parts = traceparent.split('-');
    let (Some(version), Some(trace_id), Some(span_id), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(version, 2) && hex(trace_id, 32) && hex(span_id, 16) && hex(flags, 2))
        .then_some(TraceContext { trace_id, span_id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_built_parses_back() {
        let tp = request_traceparent(7, 42, 3);
        let context = parse(&tp).expect("well formed");
        assert_eq!(
            tp,
            traceparent(
                context.trace_id,
                u64::from_str_radix(context.span_id, 16).unwrap()
            )
        );
        assert_eq!(
            parse(&request_traceparent(0, 42, 3)).unwrap().span_id,
            context.span_id,
            "the span ID does not depend on the run"
        );
    }

    #[test]
    fn hex_digits_are_those_of_format() {
        for (key, seq) in [(0, 0), (7, 3), (u64::MAX, 1 << 40), (0x0123_4567, u64::MAX)] {
            let high = (mix_seed(&[42, seq, 0x7472_6163]) ^ key) | 1;
            let low = mix_seed(&[42, seq, 0x6563_6172]);
            let span = mix_seed(&[42, seq, 0x7370_616e]);
            let expected = traceparent(&format!("{high:016x}{low:016x}"), span);
            assert_eq!(request_traceparent(key, 42, seq), expected);
        }
    }

    #[test]
    fn malformed_headers_are_not_read() {
        for bad in [
            "",
            "00-abc-def-01",
            "00-0123456789abcdef0123456789abcdef-0123456789abcdef",
            "00-0123456789abcdef0123456789abcdef-0123456789abcdeg-01",
            "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01-extra",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
