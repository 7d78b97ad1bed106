//! `aggregate.json`: a run's [`Aggregator`] in a file, so parts of a run can be merged
//! without their records (`redline merge` of worker folders that kept no
//! `records.jsonl`, or too many to move).
//!
//! Every histogram is written in HdrHistogram's standard V2 format, deflate-compressed
//! and base64-encoded — the encoding of HdrHistogram's interval logs — so any
//! HdrHistogram implementation (Java, Python, Go, Rust) reads it. Counts, sums and
//! windows are plain JSON. The file is versioned; a reader refuses another version,
//! and a histogram whose bounds are not redline's (which would not merge) is an error
//! naming the field, never a panic.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{
    Deserializer as HdrReader, Serializer as _, V2DeflateSerializer,
};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Aggregator, MAX_US};

/// What the file says it is, so another JSON file is not taken for one.
const FORMAT: &str = "redline-aggregate";
/// Bumped when a field changes meaning; readers refuse other versions.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct AggregateFile {
    format: String,
    version: u32,
    /// How the histograms are encoded, for a reader who finds the file alone.
    histograms: String,
    aggregate: Aggregator,
}

/// Writes `aggregator` to `path`.
pub fn write(path: &Path, aggregator: &Aggregator) -> anyhow::Result<()> {
    std::fs::write(path, render(aggregator)?)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// The file's text: one line of JSON.
pub fn render(aggregator: &Aggregator) -> anyhow::Result<String> {
    let file = AggregateFile {
        format: FORMAT.into(),
        version: VERSION,
        histograms: "HdrHistogram V2, deflate, base64; microseconds or tokens".into(),
        aggregate: aggregator.clone(),
    };
    Ok(serde_json::to_string(&file)? + "\n")
}

/// Reads an aggregate written by [`write()`]; what is wrong with the file, as a
/// sentence naming it.
pub fn read(path: &Path) -> Result<Aggregator, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// An aggregate from the file's text.
pub fn parse(text: &str) -> Result<Aggregator, String> {
    #[derive(Deserialize)]
    struct Header {
        format: String,
        version: u32,
    }
    let header: Header =
        serde_json::from_str(text).map_err(|e| format!("not a redline aggregate: {e}"))?;
    if header.format != FORMAT {
        return Err(format!("its format is {:?}, not {FORMAT:?}", header.format));
    }
    if header.version != VERSION {
        return Err(format!(
            "version {} of the aggregate format; this redline reads version {VERSION}",
            header.version
        ));
    }
    let file: AggregateFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(file.aggregate)
}

/// `#[serde(with = "hdr")]`: a histogram as base64 of its V2 deflate encoding.
pub mod hdr {
    use super::*;

    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(h).map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        decode(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// `#[serde(with = "hdr_option")]`: [`hdr`] for a histogram that may be absent.
pub mod hdr_option {
    use super::*;

    pub fn serialize<S: Serializer>(h: &Option<Histogram<u64>>, s: S) -> Result<S::Ok, S::Error> {
        match h {
            Some(h) => s.serialize_some(&encode(h).map_err(serde::ser::Error::custom)?),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Histogram<u64>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| decode(&text).map_err(D::Error::custom))
            .transpose()
    }
}

/// `#[serde(with = "pairs")]`: a map whose keys are not strings (tuples) as a list of
/// `[key, value]` pairs, since JSON object keys must be strings.
pub mod pairs {
    use super::*;

    pub fn serialize<K, V, S>(map: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize,
        V: Serialize,
        S: Serializer,
    {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

fn encode(h: &Histogram<u64>) -> Result<String, String> {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .map_err(|e| format!("cannot encode a histogram: {e:?}"))?;
    Ok(STANDARD.encode(bytes))
}

/// A histogram from its encoding, refused unless it has the bounds of
/// [`super::histogram`]: only those add to a run's other histograms.
fn decode(text: &str) -> Result<Histogram<u64>, String> {
    let bytes = STANDARD
        .decode(text)
        .map_err(|e| format!("a histogram is not base64: {e}"))?;
    let h: Histogram<u64> = HdrReader::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("a histogram is not in HdrHistogram's V2 format: {e:?}"))?;
    let shape = (h.low(), h.high(), h.sigfig());
    if shape != (1, MAX_US, 3) {
        return Err(format!(
            "a histogram has bounds {} to {} at {} significant figures; redline's are 1 to \
             {MAX_US} at 3",
            shape.0, shape.1, shape.2
        ));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_survives_its_encoding_and_foreign_bounds_are_refused() {
        let mut h = super::super::histogram();
        for v in [1, 7, 999, 1_000, 123_456, 3_000_000, MAX_US] {
            h.record_n(v, v % 13 + 1).unwrap();
        }
        let back = decode(&encode(&h).unwrap()).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));

        let other = Histogram::<u64>::new_with_bounds(1, 1_000, 2).unwrap();
        let refused = decode(&encode(&other).unwrap()).unwrap_err();
        assert!(refused.contains("1 to 1000 at 2"), "{refused}");
        assert!(decode("not base64!").unwrap_err().contains("base64"));
        assert!(decode("AAAA").unwrap_err().contains("V2"));
    }

    #[test]
    fn a_file_of_another_format_or_version_is_refused_by_name() {
        assert!(parse("{}").unwrap_err().contains("not a redline aggregate"));
        let other = r#"{"format":"k6","version":1}"#;
        assert!(parse(other).unwrap_err().contains("\"k6\""));
        let newer = format!(r#"{{"format":"{FORMAT}","version":99}}"#);
        assert!(parse(&newer).unwrap_err().contains("version 99"));
    }
}
