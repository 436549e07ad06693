//! What every primitive hands out, written once: the acquisition API ([`handle`]:
//! [`LockHandle`] over a raw trait each primitive implements) and the guard ([`guard`]:
//! [`Guard`] over the hold each primitive defines).
//!
//! It may use the client (how a release is made), the wait layer and the protocol's checks;
//! the primitives build on it.

pub(crate) mod guard;
pub(crate) mod handle;

pub use guard::Guard;
pub use handle::LockHandle;
