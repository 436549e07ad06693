//! Deadlines for blocking I/O: the time left before a monotonic deadline, as a socket timeout.
//! Used by every layer that reads or writes a socket; it uses nothing of the crate.

use std::io;
use std::time::{Duration, Instant};

/// The time until `deadline`, or a timeout error once it has passed (a zero socket timeout
/// would mean "wait forever").
pub(crate) fn time_left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
    }
    Ok(left)
}
