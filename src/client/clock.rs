//! [`ServerClock`]: the Redis server's clock, as this process estimates it.
//!
//! Every request a script runs once carries a deadline on the server's clock, after which a
//! copy of it that reaches the server is refused (see [`Request`](crate::protocol::Request)).
//! Scripts read the server's clock with `TIME`; the client must name a deadline on that same
//! clock. It reads the server's time once when it comes up (one `TIME`), and from then on
//! counts from that reading with the local monotonic clock; a refusal for lateness carries
//! the server's time, and the estimate is read anew from it.
//!
//! How far the estimate is off only decides how long a request stays acceptable, never
//! whether a copy may run twice: the scripts compare the deadline with the server's own
//! clock, and keep a request's answer until after it by that same clock. Without a reading
//! (the user may not run `TIME`), the local wall clock stands in. No I/O here.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::protocol::request::millis;

/// The server's time in milliseconds since the Unix epoch, as last read, and when.
#[derive(Clone, Copy, Debug)]
struct Reading {
    server_ms: u64,
    at: Instant,
}

/// The server's clock as this process estimates it.
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    reading: Mutex<Option<Reading>>,
}

impl ServerClock {
    /// The server's time now, in milliseconds since the Unix epoch: the last reading moved on
    /// by the local monotonic clock, or, never read, the local wall clock.
    pub(crate) fn now_ms(&self) -> u64 {
        match *self.reading.lock() {
            Some(Reading { server_ms, at }) => server_ms.saturating_add(millis(at.elapsed())),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, millis),
        }
    }

    /// Records that the server's clock read `server_ms` between `sent` and `answered` (by the
    /// local monotonic clock): the reading is taken to be of the midpoint, which is at most
    /// half the round trip off.
    pub(crate) fn read(&self, server_ms: u64, sent: Instant, answered: Instant) {
        let at = sent + answered.saturating_duration_since(sent) / 2;
        *self.reading.lock() = Some(Reading { server_ms, at });
    }

    /// Reads the server's clock with `TIME` on `connection`.
    pub(crate) fn read_from(&self, connection: &mut redis::Connection) -> redis::RedisResult<()> {
        let sent = Instant::now();
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(connection)?;
        let server_ms = seconds.saturating_mul(1000).saturating_add(micros / 1000);
        self.read(server_ms, sent, Instant::now());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_reading_is_moved_on_by_the_monotonic_clock() {
        let clock = ServerClock::default();
        let sent = Instant::now();
        clock.read(1_000_000, sent, sent + Duration::from_millis(10));
        let now = clock.now_ms();
        // Read at the midpoint (5 ms after `sent`), and less than a second has gone by since.
        assert!((999_995..1_001_000).contains(&now), "{now}");
    }

    #[test]
    fn without_a_reading_the_local_wall_clock_stands_in() {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let estimate = ServerClock::default().now_ms();
        assert!(estimate.abs_diff(millis(wall)) < 1_000, "{estimate}");
    }
}
