//! Value types of the spec that validate while they are parsed, so a bad value is
//! reported by the YAML parser with its line, column and field path.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

pub use redline_base::latency::LatencySpec;

/// A duration written `250ms`, `30s`, `1.5m`, `2h` (a bare number is seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl schemars::JsonSchema for Dur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration: `250ms`, `30s`, `1.5m`, `2h` (a bare number is seconds).",
            "type": ["string", "number"],
            "pattern": "^[0-9.]+ *(us|ms|s|m|h)?$"
        })
    }
}

impl Dur {
    pub fn parse(text: &str) -> Result<Dur, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let value: f64 = number.parse().map_err(|_| invalid_duration(text))?;
        let seconds = match unit.trim() {
            "us" | "µs" => value / 1e6,
            "ms" => value / 1e3,
            "" | "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            _ => return Err(invalid_duration(text)),
        };
        if !seconds.is_finite() || !(0.0..=1e9).contains(&seconds) {
            return Err(invalid_duration(text));
        }
        Ok(Dur(Duration::from_secs_f64(seconds)))
    }
}

fn invalid_duration(text: &str) -> String {
    format!(
        "invalid duration `{text}`: write a number and a unit (us, ms, s, m, h), e.g. `30s` or `250ms`"
    )
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_secs_f64() * 1e3;
        if ms < 1000.0 {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", self.0.as_secs_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Dur, D::Error> {
        struct DurVisitor;
        impl Visitor<'_> for DurVisitor {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as `30s` or `250ms`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                Dur::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|v| Dur(Duration::from_secs(v)))
                    .map_err(|_| E::custom(invalid_duration(&v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                Dur::parse(&v.to_string()).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(DurVisitor)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

/// A size in bytes, written `2MiB`, `512KiB`, `64MB` or as a bare number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A size: `2MiB`, `512KiB`, `64MB`, or a number of bytes.",
            "type": ["string", "integer"],
            "pattern": "^[0-9.]+ *([KMG]i?B|B)?$"
        })
    }
}

impl Size {
    pub fn parse(text: &str) -> Result<Size, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let value: f64 = number.parse().map_err(|_| invalid_size(text))?;
        let scale: f64 = match unit.trim() {
            "" | "B" => 1.0,
            "KB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            _ => return Err(invalid_size(text)),
        };
        let bytes = value * scale;
        if !bytes.is_finite() || !(1.0..=1e15).contains(&bytes) {
            return Err(invalid_size(text));
        }
        Ok(Size(bytes.round() as u64))
    }
}

fn invalid_size(text: &str) -> String {
    format!(
        "invalid size `{text}`: write a number of bytes and a unit (B, KB, MB, GB, KiB, MiB, GiB), e.g. `2MiB`"
    )
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b if b >= 1 << 20 && b % (1 << 20) == 0 => write!(f, "{}MiB", b >> 20),
            b if b >= 1 << 10 && b % (1 << 10) == 0 => write!(f, "{}KiB", b >> 10),
            b => write!(f, "{b}"),
        }
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Size, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as `2MiB` or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                Size::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Size::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                Size::parse(&v.to_string()).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        for (text, bytes) in [
            ("2MiB", 2 << 20),
            ("512KiB", 512 << 10),
            ("64MB", 64_000_000),
            ("1000", 1000),
        ] {
            assert_eq!(Size::parse(text).unwrap().0, bytes, "{text}");
        }
        assert_eq!(Size(2 << 20).to_string(), "2MiB");
        assert_eq!(
            Size::parse("2 MB/s").unwrap_err(),
            "invalid size `2 MB/s`: write a number of bytes and a unit (B, KB, MB, GB, KiB, MiB, GiB), e.g. `2MiB`"
        );
        assert!(Size::parse("0").is_err());
    }

    #[test]
    fn durations_parse_with_units() {
        let cases = [
            ("250ms", 0.25),
            ("30s", 30.0),
            ("1.5m", 90.0),
            ("2h", 7200.0),
            ("10", 10.0),
            ("500us", 0.0005),
        ];
        for (text, seconds) in cases {
            assert_eq!(Dur::parse(text).unwrap().0.as_secs_f64(), seconds, "{text}");
        }
        assert_eq!(
            Dur::parse("30x").unwrap_err(),
            "invalid duration `30x`: write a number and a unit (us, ms, s, m, h), e.g. `30s` or `250ms`"
        );
        assert!(Dur::parse("-1s").is_err());
        let from_yaml: Dur = yaml_serde::from_str("45").unwrap();
        assert_eq!(from_yaml, Dur(Duration::from_secs(45)));
    }
}
