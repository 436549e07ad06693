//! The scripts of the count-down latch (Redisson's layout: a string `name` holding the count,
//! absent when the latch is open), with their arguments and the meaning of their replies.
//!
//! Every message goes to the latch's channel: `0` when a count-down reaches zero, `1` when a
//! count is set or the latch is deleted. A script that finds the key holding something other
//! than a count answers an error whose code is `WRONGTYPE`, like Redis does for a key of
//! another type, and changes nothing. Every script that changes the count runs once per
//! request ([`Request`]).

use super::script::{lua_script, ScriptCall};
use super::Request;
use crate::layout;

lua_script!(SET_COUNT = "request_begin.lua" + "latch_set_count.lua" + "request_end.lua");
lua_script!(COUNT_DOWN = "request_begin.lua" + "latch_count_down.lua" + "request_end.lua");
lua_script!(DELETE = "request_begin.lua" + "latch_delete.lua" + "request_end.lua");

/// Published when a count-down reaches zero (Redisson's `ZERO_COUNT_MESSAGE`).
pub(crate) const OPENED_MESSAGE: &str = "0";
/// Published when a count is set, and on a delete (Redisson's `NEW_COUNT_MESSAGE`).
pub(crate) const NEW_COUNT_MESSAGE: &str = "1";

/// The key and channel of one latch, computed once per
/// [`CountDownLatch`](crate::CountDownLatch) handle.
#[derive(Debug)]
pub(crate) struct LatchKeys {
    pub(crate) name: String,
    pub(crate) channel: String,
}

impl LatchKeys {
    pub(crate) fn new(name: &str) -> Self {
        LatchKeys {
            name: name.to_owned(),
            channel: layout::latch_channel(name),
        }
    }
}

/// Sets the count to `count` (at least 1) when the latch has none. Answers 1 when set, 0 when
/// it had a count.
pub(crate) fn set_count(keys: &LatchKeys, count: u64, request: &Request) -> ScriptCall {
    ScriptCall::new(&SET_COUNT, &[&keys.name, &keys.channel, request.key()])
        .arg(count)
        .arg(NEW_COUNT_MESSAGE)
        .request_args(request)
}

/// Counts down by one. Answers the count left.
pub(crate) fn count_down(keys: &LatchKeys, request: &Request) -> ScriptCall {
    ScriptCall::new(&COUNT_DOWN, &[&keys.name, &keys.channel, request.key()])
        .arg(OPENED_MESSAGE)
        .request_args(request)
}

/// Deletes the count. Answers 1 when there was one, 0 when the latch was open.
pub(crate) fn delete(keys: &LatchKeys, request: &Request) -> ScriptCall {
    ScriptCall::new(&DELETE, &[&keys.name, &keys.channel, request.key()])
        .arg(NEW_COUNT_MESSAGE)
        .request_args(request)
}

/// The count a latch's key holds, from its value (`None`: the key is absent); `None` for a
/// value that is no count. A stored count of zero or less is an open latch, as in Redisson,
/// which reads the count with `GET` and counts down while it is above zero.
pub(crate) fn count_from(value: Option<&[u8]>) -> Option<u64> {
    let Some(value) = value else {
        return Some(0);
    };
    let count: i64 = std::str::from_utf8(value).ok()?.parse().ok()?;
    Some(count.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_is_always_braced_and_has_no_colon() {
        assert_eq!(
            LatchKeys::new("jobs").channel,
            "redisson_countdownlatch__channel__{jobs}"
        );
        assert_eq!(
            LatchKeys::new("{eu}:jobs").channel,
            "redisson_countdownlatch__channel__{{eu}:jobs}"
        );
    }

    #[test]
    fn counts_are_read_from_integers_only() {
        assert_eq!(count_from(None), Some(0));
        assert_eq!(count_from(Some(b"3")), Some(3));
        assert_eq!(count_from(Some(b"0")), Some(0));
        assert_eq!(count_from(Some(b"-1")), Some(0));
        for junk in [&b""[..], b"x", b"1.5", b"\xff", b"99999999999999999999"] {
            assert_eq!(count_from(Some(junk)), None, "{junk:?}");
        }
    }
}
