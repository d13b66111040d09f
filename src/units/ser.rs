//! Serde helpers that write a [`Duration`](std::time::Duration) in the unit its field name carries (`_ns`, `_s`), and read it back.
//! Every document uses these; a field opts in with `#[serde(with = "crate::units::ser::ns")]` (or `opt_ns`,
//! `secs`).

/// A [`Duration`](std::time::Duration) as whole nanoseconds (fields named `..._ns`); saturates at `u64::MAX`.
pub mod ns {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d` as nanoseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Reads nanoseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

/// An optional [`Duration`](std::time::Duration) as whole nanoseconds, `null` when absent.
pub mod opt_ns {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d` as nanoseconds, or `null`.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::ns::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    /// Reads nanoseconds or `null`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|v| v.map(Duration::from_nanos))
    }
}

/// A [`Duration`](std::time::Duration) as fractional seconds (fields named `..._s`).
pub mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d` as seconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// Reads seconds (negative or non-finite values are refused).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}
