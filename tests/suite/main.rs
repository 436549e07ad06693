//! The integration tests, in one binary: each module is the tests of one primitive, promise
//! or deployment, against throwaway servers the fixtures (`redlease-testing`) start on free
//! loopback ports. One binary links the crate and the fixtures once, where one per file
//! linked them 37 times. Two keep a binary of their own, for what is global to a process:
//! `metrics` (the recorder it installs) and `lifecycle` (it counts the process's threads).
//!
//! `cargo test --test suite` runs them all; `cargo test --test suite -- fair_lock::` the
//! tests of one module. Child processes (the `#[ignore]`d entries, `*_process` or `*_child`) are
//! this binary run again on one test (`common::spawn_child`), named with its module.

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod aof_acks;
mod at_risk;
mod bench_floors;
mod chaos;
mod cluster;
mod cluster_fixture;
mod connected_acks;
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
mod lock_delay;
mod lost_answers;
mod lost_locks;
mod non_reentrant;
mod permit_semaphore;
mod redlock;
mod reentrant;
mod regressions;
mod replica_acks;
mod revocation;
mod rwlock;
mod semaphore;
mod sentinel;
mod server_check;
mod spin;
mod stats;
mod tls;
mod upgradable;
mod validity;
mod waits;
mod watchdog;
