//! Cluster mode: the slot map of a Redis Cluster, one command pool per node, and the
//! redirections (`MOVED`, `ASK`) that keep the map true.
//!
//! (Interface first; the discovery and the map are filled in next.)

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::ConnectionInfo;

/// A cluster node's address as the cluster names it (`CLUSTER SLOTS`, `MOVED`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeAddress {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

pub(crate) struct Cluster {
    template: ConnectionInfo,
    generation: AtomicU64,
}

impl Cluster {
    /// The master that serves `slot` as far as the map knows, if any does.
    pub(crate) fn owner_of(&self, _slot: u16) -> Option<NodeAddress> {
        todo!()
    }

    /// The masters of the map now.
    pub(crate) fn masters(&self) -> Vec<NodeAddress> {
        todo!()
    }

    /// Grows with every change of the map.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Asks the cluster for its map again soon (rate-limited): a node could not be reached,
    /// or a subscription was moved away by the server.
    pub(crate) fn refresh_soon(&self) {
        todo!()
    }

    /// The manager's connection settings (credentials, TLS) at `address`.
    pub(crate) fn node_info(&self, _address: &NodeAddress) -> ConnectionInfo {
        self.template.clone()
    }

    /// Whether releases publish on shard channels (`SPUBLISH`, Redis 7) and waiters
    /// `SSUBSCRIBE`, rather than `PUBLISH`/`SUBSCRIBE` (Redis 6).
    pub(crate) fn sharded_pubsub(&self) -> bool {
        todo!()
    }
}
