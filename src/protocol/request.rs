//! Requests that take effect once: the key under which a state-changing script keeps its
//! answer for a repeat of the same request, the deadline after which no copy of it runs, and
//! the scripts' shared start and end (`request_begin.lua`, `request_end.lua`,
//! `request_undo.lua`).
//!
//! A call that changes state and cannot tell a repeat from a new call by itself (a count-down,
//! a take or release of permits, a forced release) carries a request id. Its script runs its
//! body once per id and keeps the answer under [`Request::key`], so a request sent again
//! because its first answer was lost with its connection is answered again, with no second
//! effect. An undo (a take whose answer never came) marks the request undone: a run of it
//! that reaches the server later changes nothing. The key is in the slot of the primitive's
//! name.
//!
//! A copy of a request can reach the server late: held up in the network (a congested link,
//! a retransmission back-off, a proxy) past its response timeout, past a resend that was
//! answered, past anything the client does after. So every request carries a
//! [deadline](Request::deadline_ms) on the server's clock: a copy that reaches the server
//! after it, and finds no answer kept, is refused ([`LATE`]), and the answer of a copy that
//! ran is kept [until after it](Request::keep_until_ms) by that same clock. Whichever copy
//! runs first, every later one finds its answer: none runs twice, however late it comes. The
//! client sends copies only while the deadline has not passed by its estimate
//! ([`Request::send_until`]).
//!
//! An acquisition try (of the lock's kinds) is not a request: it has no key that keeps its
//! answer, but it has a deadline too (`try_deadline.lua`). A copy that comes after it is
//! refused; one that comes before it runs, and an undo of the try answers [`undo_again`]
//! until the deadline has passed, so that it is sent again until no copy can come any more.
//! Pure: no I/O.

use std::time::{Duration, Instant};

use crate::layout;

/// The error code of a copy of a request refused for reaching the server after its deadline;
/// the first word after it is the server's time then, in ms since the epoch.
pub(crate) const LATE: &str = "REDLEASE_LATE";

/// How much later than its sender's last send a request's deadline is: room for the error of
/// the estimate of the server's clock (at most half the round trip it was read with, and the
/// drift since).
pub(crate) const DEADLINE_MARGIN: Duration = Duration::from_secs(1);

/// One request of a state-changing call: the key that keeps its answer, its deadline, and for
/// how long the answer is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    key: String,
    deadline_ms: u64,
    keep_until_ms: u64,
    send_until: Instant,
    undo_until: Instant,
}

/// How long a request is sent and kept, from when it is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    /// The server's time now (ms since the epoch), as the client estimates it.
    pub(crate) server_now_ms: u64,
    /// How long copies of it may be sent.
    pub(crate) send_for: Duration,
    /// How long its answer is kept after its deadline: while an undo of it may still come.
    pub(crate) keep_after: Duration,
}

impl Window {
    /// The deadline of a call made now with this window, on the server's clock: after its
    /// last send, and the margin of the clock's estimate.
    pub(crate) fn deadline_ms(&self) -> u64 {
        self.server_now_ms
            .saturating_add(millis(self.send_for + DEADLINE_MARGIN))
    }

    /// Until when the answer of a call made now is kept, on the server's clock (ms since
    /// the epoch): a while after its deadline.
    pub(crate) fn keep_until_ms(&self) -> u64 {
        self.deadline_ms()
            .saturating_add(millis(self.keep_after).max(1))
    }
}

impl Request {
    /// The request `id` (unique to its client) of a call on the primitive `name`, sent and
    /// kept as `window` says.
    pub(crate) fn new(name: &str, id: &str, window: Window) -> Self {
        let key = layout::request_key(name, id);
        let now = Instant::now();
        let deadline_ms = window.deadline_ms();
        Request {
            key,
            deadline_ms,
            keep_until_ms: window.keep_until_ms(),
            send_until: now + window.send_for,
            undo_until: now + window.send_for + window.keep_after,
        }
    }

    /// `redlease_request:{name}:<id>`, in the slot of the name.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// After this time on the server's clock (ms since the epoch), a copy of the request
    /// that finds no answer kept is refused.
    pub(crate) fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// Until when the server keeps the answer (ms since the epoch, on its clock): after the
    /// deadline.
    pub(crate) fn keep_until_ms(&self) -> u64 {
        self.keep_until_ms
    }

    /// Until when copies may be sent, by the local clock: before the deadline by the
    /// client's estimate of the server's clock.
    pub(crate) fn send_until(&self) -> Instant {
        self.send_until
    }

    /// Until when an undo of the request may be sent, by the local clock: while its answer
    /// is kept, by the client's estimate of the server's clock.
    pub(crate) fn undo_until(&self) -> Instant {
        self.undo_until
    }

    /// The key, to delete once the answer has arrived.
    pub(crate) fn into_key(self) -> String {
        self.key
    }
}

/// When an undo of an acquisition try answered that a copy of the try may still come (its
/// deadline has not passed on the server's clock: `try_undo_end.lua`), how long until that
/// deadline: the undo must be sent again after it.
pub(crate) fn undo_again(answer: &redis::Value) -> Option<Duration> {
    match answer {
        redis::Value::Array(items) => match items.as_slice() {
            [redis::Value::Int(-1), redis::Value::Int(left)] => {
                Some(Duration::from_millis(u64::try_from(*left).unwrap_or(0)))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The server's time (ms since the epoch) in a refusal of a late copy, when `err` is one.
pub(crate) fn refused_late(err: &redis::RedisError) -> Option<u64> {
    if err.code() != Some(LATE) {
        return None;
    }
    err.detail()?.split_whitespace().next()?.parse().ok()
}

/// `duration` in whole milliseconds (saturating).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> Window {
        Window {
            server_now_ms: 1_000_000,
            send_for: Duration::from_secs(5),
            keep_after: Duration::from_secs(2),
        }
    }

    #[test]
    fn the_key_shares_the_slot_of_the_name() {
        assert_eq!(
            Request::new("jobs", "c:1", window()).key(),
            "redlease_request:{jobs}:c:1"
        );
        assert_eq!(
            Request::new("{eu}:jobs", "c:2", window()).key(),
            "redlease_request:{eu}:jobs:c:2"
        );
    }

    #[test]
    fn the_deadline_follows_the_last_send_and_the_answer_outlives_it() {
        let request = Request::new("jobs", "c:1", window());
        assert_eq!(request.deadline_ms(), 1_000_000 + 5_000 + 1_000);
        assert_eq!(request.keep_until_ms(), request.deadline_ms() + 2_000);
        assert!(request.send_until() <= Instant::now() + Duration::from_secs(5));
    }

    #[test]
    fn a_late_refusal_carries_the_server_time() {
        let late = redis::RedisError::from((
            redis::ErrorKind::Extension,
            "late",
            "1700000000123 the request reached the server after its deadline 5".to_owned(),
        ));
        // redis-rs keeps an extension error's code apart from its detail.
        let late = redis::make_extension_error(
            LATE.to_owned(),
            Some(late.detail().unwrap_or_default().to_owned()),
        );
        assert_eq!(refused_late(&late), Some(1_700_000_000_123));
        let other = redis::make_extension_error("ERR".to_owned(), Some("1 2".to_owned()));
        assert_eq!(refused_late(&other), None);
    }
}
