//! What-if from a capture: read an application's structure from its packets ([`profile`]) and predict its run
//! time at another round-trip time, bandwidth and loss ([`predict`]); `roundtrip replay` plays the same
//! structure against a `roundtrip server --allow-replay`.

pub mod predict;
pub mod profile;
