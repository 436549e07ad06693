//! How one call reaches Redis and how its outcome is judged: where a key's calls go
//! ([`route`]: the one pool, or the cluster node of its slot, `MOVED` and `ASK` followed), how
//! a protocol call is sent ([`runner`]: scripts by hash, loaded again when missing, one call or
//! a pipeline, within a deadline), and the replica acknowledgements a write waits for
//! ([`replication`]: `WAIT` behind it, and its shortfalls).
//!
//! It may use the topology (pools, the cluster map), the protocol and the error; nothing
//! above it.

pub(crate) mod replication;
pub(crate) mod route;
pub(crate) mod runner;
