//! The integration tests, in one binary: each module is the tests of one primitive, promise
//! or deployment, against throwaway servers the fixtures (`redlease-testing`) start on free
//! loopback ports. One binary links the crate and the fixtures once, where one per file
//! linked them 36 times; `metrics` keeps a binary of its own (the recorder it
//! installs is global to its process).
//!
//! `cargo test --test suite` runs them all; `cargo test --test suite -- fair_lock::` the
//! tests of one module. Child processes (the `#[ignore]`d `*_child` entries and their kin)
//! are this binary run again on one test (`common::spawn_child`).

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod aof_acks;
mod at_risk;
mod bench_floors;
mod chaos;
mod cluster;
mod cluster_fixture;
mod contention;
mod dns;
mod election;
mod failover;
mod fair_lock;
mod faults;
mod fencing;
mod guarded;
mod handoff;
mod inspect;
mod latch;
mod lifecycle;
mod lost_answers;
mod lost_locks;
mod permit_semaphore;
mod redlock;
mod reentrant;
mod regressions;
mod replica_acks;
mod revocation;
mod rwlock;
mod semaphore;
mod sentinel;
mod stats;
mod tls;
mod upgradable;
mod validity;
mod waits;
mod watchdog;
