//! Value types of the configuration (durations, sizes, counts), shared by `config.rs` and
//! every stage's own config section. They depend on nothing else in the crate, so a stage's
//! config does not import the whole configuration model (and the model the stage) in a loop.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written like `"10m"` where `"0s"` is allowed and means off (a budget, a
/// pause) or none (a wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitDuration(pub Duration);

impl Serialize for LimitDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for LimitDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(LimitDuration)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{s}` is not a duration such as \"30s\" or \"10m\" (\"0s\" = off): {e}"
                ))
            })
    }
}

/// A byte count written as an integer or a string such as `"64MiB"`, `"512 KB"`; never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size as `usize`, saturating.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (digits, unit) = s.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{s}` is not a size such as 1048576, \"512KiB\" or \"64MiB\""))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "kib" | "k" => 1 << 10,
            "mb" => 1_000_000,
            "mib" | "m" => 1 << 20,
            "gb" => 1_000_000_000,
            "gib" | "g" => 1 << 30,
            other => {
                return Err(format!(
                    "unknown size unit `{other}` (use B, KiB, MiB, GiB, KB, MB, GB)"
                ))
            }
        };
        let bytes = n
            .checked_mul(mult)
            .ok_or_else(|| format!("`{s}` is too large"))?;
        if bytes == 0 {
            return Err("a size must be greater than zero".into());
        }
        Ok(ByteSize(bytes))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (name, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{}", self.0 / size, name);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) if n > 0 => Ok(ByteSize(n as u64)),
            Raw::Int(n) => Err(serde::de::Error::custom(format!(
                "a size must be greater than zero, got {n}"
            ))),
            Raw::Str(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A duration written as `"250ms"`, `"5s"`, `"10m"`, `"1h"`; never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let dur = humantime::parse_duration(&s).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration such as \"250ms\", \"5s\" or \"10m\": {e}"
            ))
        })?;
        if dur.is_zero() {
            return Err(serde::de::Error::custom(
                "a duration must be greater than zero",
            ));
        }
        Ok(HumanDuration(dur))
    }
}

/// A count that must be at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PositiveUsize(pub usize);

impl<'de> Deserialize<'de> for PositiveUsize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        if n < 1 {
            return Err(serde::de::Error::custom(format!(
                "must be at least 1, got {n}"
            )));
        }
        Ok(PositiveUsize(usize::try_from(n).unwrap_or(usize::MAX)))
    }
}

/// A zstd level between 1 and 22.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ZstdLevel(pub i32);

impl<'de> Deserialize<'de> for ZstdLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        if !(1..=22).contains(&n) {
            return Err(serde::de::Error::custom(format!(
                "zstd level must be between 1 and 22, got {n}"
            )));
        }
        Ok(ZstdLevel(n as i32))
    }
}
