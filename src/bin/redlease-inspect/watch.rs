//! `watch`: follows one name, looking every interval (each look is the bounded calls of
//! `inspect`), and prints it again whenever what it shows changes: its holders and their
//! counts, its fencing token, its queue and waiters, its permits or count; or that nothing is
//! on the name. The leases counting down are shown with every print, but do not by
//! themselves count as a change. Runs until interrupted (or until the server cannot be
//! asked, which ends it with exit code 2).

use std::io::Write;
use std::time::Duration;

use redlease::redis::Connection;
use serde::Serialize;
use serde_json::Value;

use crate::connection::Failure;
use crate::probe::{self, Report};
use crate::render;

/// What a look found.
#[derive(Serialize)]
#[serde(untagged)]
enum Seen {
    Report(Box<Report>),
    Nothing { name: String, found: bool },
}

/// Prints `name` as it changes, every `interval`, as text or one JSON object per change, to
/// `out`, until the server cannot be asked.
pub fn watch(
    redis: &mut Connection,
    name: &str,
    interval: Duration,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let mut last_shape = None;
    let started = std::time::Instant::now();
    loop {
        let seen = match probe::probe(redis, name) {
            Ok(report) => Seen::Report(Box::new(report)),
            Err(Failure::NotFound(_)) => Seen::Nothing {
                name: name.to_owned(),
                found: false,
            },
            Err(failure) => return Err(failure),
        };
        let value = serde_json::to_value(&seen)
            .map_err(|error| Failure::Usage(format!("cannot write JSON: {error}")))?;
        let shape = without_countdowns(value.clone());
        if last_shape.as_ref() != Some(&shape) {
            let printed = match (json, &seen) {
                (true, _) => format!("{value}\n"),
                (false, Seen::Report(report)) => render::report(report),
                (false, Seen::Nothing { .. }) => format!("nothing on {name:?}\n"),
            };
            let printed = match json {
                true => printed,
                false => format!(
                    "--- {:.1} s ---\n{printed}",
                    started.elapsed().as_secs_f64()
                ),
            };
            let written = out.write_all(printed.as_bytes()).and_then(|()| out.flush());
            if written.is_err() {
                return Ok(()); // the reader is gone (`| head`)
            }
            last_shape = Some(shape);
        }
        std::thread::sleep(interval);
    }
}

/// `value` with every lease and expiry (what counts down between looks) taken out.
fn without_countdowns(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(key, _)| !key.ends_with("_ms"))
                .map(|(key, value)| (key, without_countdowns(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_countdowns).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdowns_are_no_change() {
        let one = serde_json::json!({"name": "a", "lease_ms": 10, "holders": [{"id": "x", "read_level_leases_ms": [1]}]});
        let two = serde_json::json!({"name": "a", "lease_ms": 9, "holders": [{"id": "x", "read_level_leases_ms": [0]}]});
        let three = serde_json::json!({"name": "a", "lease_ms": 9, "holders": [{"id": "y", "read_level_leases_ms": [0]}]});
        assert_eq!(without_countdowns(one.clone()), without_countdowns(two));
        assert_ne!(without_countdowns(one), without_countdowns(three));
    }
}
