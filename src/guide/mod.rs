//! The manual: how to use each primitive, what each deployment gives a held lock, what a lock
//! can and cannot guarantee, how to watch it at work, what it needs of a Redis user, how it
//! works inside, and what it costs. Pages only (no code); their examples run as doc tests.
//!
//! - [`choosing`]: this crate's locks beside a database's, ZooKeeper's, etcd's and Redlock,
//!   and which of its kinds to choose;
//! - [`primitives`]: the API in short, the errors, and the synchronizers besides the lock
//!   (fair lock, read-write lock, semaphores, count-down latch);
//! - [`deployments`]: a single server, TLS, ACL users, Sentinel, replica and disk
//!   acknowledgements, Redis Cluster, Redlock;
//! - [`guarantees`]: what each signal of a guard means and does not promise, fencing, guarded
//!   writes, bad days, clocks, data, and the limits;
//! - [`monitoring`]: `stats()`, the `metrics` feature, and the `redlease-inspect` tool;
//! - [`permissions`]: the ACL rules each primitive needs;
//! - [`how_it_works`]: holder ids, the scripts, the watchdog, waiting, the data layout;
//! - [`performance`]: the benchmark, and what it measured.

#[doc = include_str!("choosing.md")]
pub mod choosing {}

#[doc = include_str!("primitives.md")]
pub mod primitives {}

#[doc = include_str!("deployments.md")]
pub mod deployments {}

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("monitoring.md")]
pub mod monitoring {}

#[doc = include_str!("permissions.md")]
pub mod permissions {}

#[doc = include_str!("how_it_works.md")]
pub mod how_it_works {}

#[doc = include_str!("performance.md")]
pub mod performance {}
