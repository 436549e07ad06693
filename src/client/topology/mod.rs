//! Who to talk to, and how: command connections with bounded connects and reads
//! ([`pool`]), names resolved within a deadline ([`resolve`]), the replicas a master has in
//! sync now ([`replicas`]), the master Sentinel names now ([`sentinel`]), the cluster's slot
//! map and one pool per node ([`cluster`]), TLS options and their rustls set-up ([`tls`]),
//! and socket deadlines ([`deadline`]).
//!
//! It may use the protocol (key slots) and the error; nothing above it.

pub(crate) mod cluster;
pub(crate) mod deadline;
pub(crate) mod pool;
pub(crate) mod replicas;
pub(crate) mod resolve;
pub(crate) mod sentinel;
pub(crate) mod tls;
