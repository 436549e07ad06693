//! Helpers for the semaphore tests: a plain connection that follows the documented layout by
//! hand, and the check that a test left nothing behind (`common::semaphores`).

use std::time::Duration;

use redlease::LockManager;

use crate::common::{eventually, RedisServer};

pub use crate::common::connection;

/// The zset of permits taken of the semaphore `name` (a name without braces).
pub fn timeouts_key(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

/// The channel on which the semaphore `name` (a name without braces) announces permits.
pub fn channel(name: &str) -> String {
    format!("redisson_sc:{{{name}}}")
}

/// Asserts that `manager` left nothing behind on the semaphore `name`: no watchdog entry, no
/// subscription of its own and no semaphore channel on the server, no permit taken.
pub fn assert_left_nothing(manager: &LockManager, server: &RedisServer, name: &str) {
    assert_eq!(manager.watched_locks(), 0, "a watchdog entry was left");
    assert!(
        eventually(Duration::from_secs(5), || manager.subscribed_channels()
            == 0),
        "a subscription was left: {}",
        manager.subscribed_channels()
    );
    let semaphore_channels = || {
        server
            .command(&["PUBSUB", "CHANNELS", "redisson_sc*"])
            .expect("PUBSUB CHANNELS")
    };
    assert!(
        eventually(Duration::from_secs(5), || semaphore_channels()
            .starts_with("*0")),
        "a semaphore channel is still subscribed: {}",
        semaphore_channels()
    );
    let taken: usize = redis::cmd("ZCARD")
        .arg(timeouts_key(name))
        .query(&mut connection(server))
        .expect("ZCARD");
    assert_eq!(taken, 0, "a permit is still taken");
}
