//! [`Finding`]: one setting of a deployment that puts locks at risk, as the server check
//! (`crate::client::server_check`) reports it, in [`Error::UnsafeServer`](super::Error) or
//! on demand. Plain values; no I/O.

use std::fmt;

/// One setting of a deployment that puts locks at risk, or that the check could not read:
/// where, what was found, what it risks and how to fix it. Its `Display` says all four.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Finding {
    /// The server may evict keys that have a TTL, and every lock's key has one: a held lock
    /// may vanish when memory runs short.
    Eviction {
        /// The server (address and database).
        server: String,
        /// Its `maxmemory-policy`.
        policy: String,
        /// Its `maxmemory`, in bytes (0: none yet).
        maxmemory: u64,
    },
    /// Fewer replicas are connected to the master than each acquisition waits for.
    TooFewReplicas {
        /// The master.
        server: String,
        /// Replicas connected now.
        connected: u32,
        /// Replicas each write waits for.
        required: u32,
    },
    /// A cluster node reports slots that no master serves, or the cluster failing.
    SlotsUncovered {
        /// The node that says so.
        server: String,
        /// Its `cluster_state`.
        state: String,
        /// How many of the 16384 slots it sees served (`cluster_slots_ok`).
        slots_ok: u32,
    },
    /// A setting the check could not read: it cannot vouch for it.
    Unreadable {
        /// The server.
        server: String,
        /// The command it sent.
        command: String,
        /// What the server answered.
        answer: String,
    },
}

impl Finding {
    /// The server the finding is about.
    pub fn server(&self) -> &str {
        match self {
            Finding::Eviction { server, .. }
            | Finding::TooFewReplicas { server, .. }
            | Finding::SlotsUncovered { server, .. }
            | Finding::Unreadable { server, .. } => server,
        }
    }

    /// What the check found.
    pub fn found(&self) -> String {
        match self {
            Finding::Eviction {
                policy, maxmemory, ..
            } => format!("maxmemory-policy {policy}, maxmemory {maxmemory}"),
            Finding::TooFewReplicas {
                connected,
                required,
                ..
            } => format!("{connected} replicas connected, {required} asked for"),
            Finding::SlotsUncovered {
                state, slots_ok, ..
            } => format!("cluster_state {state}, {slots_ok} of 16384 slots served"),
            Finding::Unreadable {
                command, answer, ..
            } => format!("{command} was refused: {answer}"),
        }
    }

    /// What it puts at risk.
    pub fn risk(&self) -> &'static str {
        match self {
            Finding::Eviction { .. } => {
                "every lock key has a TTL, so a held lock may be evicted when memory runs short \
                 (at once, or once a maxmemory is set), and a second holder take it before the \
                 first learns of the loss at its next renewal"
            }
            Finding::TooFewReplicas { .. } => {
                "every acquisition waits for acknowledgements that cannot all come: each is \
                 given back and fails with NotReplicated until enough replicas are connected"
            }
            Finding::SlotsUncovered { .. } => {
                "locks whose names fall in the unserved slots cannot be taken, renewed or \
                 released there: their holders are put at risk and lose them at their deadline"
            }
            Finding::Unreadable { .. } => {
                "the check cannot tell whether this setting puts locks at risk"
            }
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> &'static str {
        match self {
            Finding::Eviction { .. } => {
                "set maxmemory-policy noeviction (writes then fail when memory is full, and an \
                 acquisition fails instead of a held lock vanishing)"
            }
            Finding::TooFewReplicas { .. } => {
                "connect the replicas, or ask for no more acknowledgements than there are \
                 replicas (replica_acks, aof_acks)"
            }
            Finding::SlotsUncovered { .. } => {
                "give every slot a master (CLUSTER ADDSLOTS, or a failover of the master that \
                 failed)"
            }
            Finding::Unreadable { .. } => {
                "let the user run CONFIG GET, INFO and CLUSTER INFO (+config|get +info \
                 +cluster|info), or check the setting by hand"
            }
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}. Risk: {}. Fix: {}",
            self.server(),
            self.found(),
            self.risk(),
            self.fix()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_says_where_what_why_and_how() {
        let finding = Finding::Eviction {
            server: "127.0.0.1:6379 db 0".into(),
            policy: "allkeys-lru".into(),
            maxmemory: 10_485_760,
        };
        let text = finding.to_string();
        assert!(text.starts_with("127.0.0.1:6379 db 0: maxmemory-policy allkeys-lru"));
        assert!(text.contains("Risk: every lock key has a TTL"));
        assert!(text.contains("Fix: set maxmemory-policy noeviction"));
    }
}
