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
    #[non_exhaustive]
    Eviction {
        /// The server (address and database).
        server: String,
        /// Its `maxmemory_policy`.
        policy: String,
        /// Its `maxmemory`, in bytes (0: none yet).
        maxmemory: u64,
    },
    /// Fewer replicas are connected to the master, and in sync, than each write waits for.
    #[non_exhaustive]
    TooFewReplicas {
        /// The master.
        server: String,
        /// Replicas connected and in sync (`state=online`) now.
        online: u32,
        /// Replicas each write waits for.
        required: u32,
    },
    /// A cluster node sees slots that no master serves, or a master of some failed, or the
    /// cluster failing.
    #[non_exhaustive]
    SlotsUncovered {
        /// The node that says so.
        server: String,
        /// Its `cluster_state`.
        state: String,
        /// How many of the 16384 slots have a master (`cluster_slots_assigned`).
        assigned: u32,
        /// How many are served by a master the cluster agrees has failed
        /// (`cluster_slots_fail`).
        failed: u32,
    },
    /// A setting the check could not read (the command was refused, unknown, or not
    /// answered, or its answer lacked the setting): it cannot vouch for it.
    #[non_exhaustive]
    Unreadable {
        /// The server.
        server: String,
        /// The command it sent.
        command: String,
        /// What went wrong.
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

    /// What the check found, in words.
    pub fn description(&self) -> String {
        match self {
            Finding::Eviction {
                policy, maxmemory, ..
            } => format!("maxmemory_policy {policy}, maxmemory {maxmemory}"),
            Finding::TooFewReplicas {
                online, required, ..
            } => format!("{online} replicas in sync, {required} asked for"),
            Finding::SlotsUncovered {
                state,
                assigned,
                failed,
                ..
            } => format!(
                "cluster_state {state}, {assigned} of 16384 slots with a master, {failed} on \
                 a failed one"
            ),
            Finding::Unreadable {
                command, answer, ..
            } => format!("{command} could not be read: {answer}"),
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
                 given back and fails (NotReplicated, or NotPersisted with aof_acks) until \
                 enough replicas are in sync"
            }
            Finding::SlotsUncovered { .. } => {
                "locks whose names fall in those slots cannot be taken, renewed or released \
                 there: their holders are put at risk and lose them at their deadline"
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
                "connect the replicas and let them sync, or ask for no more acknowledgements \
                 than there are replicas (replica_acks, aof_acks)"
            }
            Finding::SlotsUncovered { .. } => {
                "give every slot a live master (CLUSTER ADDSLOTS, or a failover of the master \
                 that failed)"
            }
            Finding::Unreadable { .. } => {
                "let the user run INFO (and CLUSTER INFO on a cluster: +info +cluster|info), or \
                 check the setting by hand where the service does not report it"
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
            self.description(),
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
        assert!(text.starts_with("127.0.0.1:6379 db 0: maxmemory_policy allkeys-lru"));
        assert!(text.contains("Risk: every lock key has a TTL"));
        assert!(text.contains("Fix: set maxmemory-policy noeviction"));
    }
}
