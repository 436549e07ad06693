//! The subscribed connection's transport: the socket, its address and `AUTH`
//! ([`connection`]), for `rediss://` the TLS session its reading and writing handles share
//! ([`tls_stream`]), and the RESP2 parser ([`frame`]). It knows nothing of channels or waiters.

pub(super) mod connection;
pub(crate) mod frame;
#[cfg(feature = "tls")]
pub(super) mod tls_stream;
