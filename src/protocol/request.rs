//! Requests that take effect once: the key under which a state-changing script keeps its
//! answer for a repeat of the same request, and the scripts' shared start and end
//! (`request_begin.lua`, `request_end.lua`, `request_undo.lua`).
//!
//! A call that changes state and cannot tell a repeat from a new call by itself (a count-down,
//! a take or release of permits, a forced release) carries a request id. Its script runs its
//! body once per id and keeps the answer under [`Request::key`] for [`Request::keep_ms`], so a
//! request sent again because its first answer was lost with its connection is answered
//! again, with no second effect. An undo (a take whose answer never came) marks the request
//! undone: a run of it that reaches the server later changes nothing. The key is in the slot
//! of the primitive's name. Pure: no I/O.

use crate::layout;

/// One request of a state-changing call: the key that keeps its answer, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    key: String,
    keep_ms: u64,
}

impl Request {
    /// The request `id` (unique to its client) of a call on the primitive `name`, its answer
    /// kept `keep_ms`.
    pub(crate) fn new(name: &str, id: &str, keep_ms: u64) -> Self {
        let key = layout::request_key(name, id);
        Request { key, keep_ms }
    }

    /// `redlease_request:{name}:<id>`, in the slot of the name.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// How long the key keeps the answer, in ms: the last argument of a request's script.
    pub(crate) fn keep_ms(&self) -> u64 {
        self.keep_ms
    }

    /// The key, to delete once the answer has arrived.
    pub(crate) fn into_key(self) -> String {
        self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_shares_the_slot_of_the_name() {
        assert_eq!(
            Request::new("jobs", "c:1", 5).key(),
            "redlease_request:{jobs}:c:1"
        );
        assert_eq!(
            Request::new("{eu}:jobs", "c:2", 5).key(),
            "redlease_request:{eu}:jobs:c:2"
        );
    }
}
