//! The settings of a deployment that break a lock silently, read from its masters: an
//! eviction policy that may drop a held lock's key, fewer replicas than the acknowledgements
//! asked for, a cluster with slots nobody serves ([`Finding`]). `build` runs the check as the
//! builder's [`ServerCheck`] says; `LockManager::check_server` runs it on demand (the inspect
//! tool's `doctor`).
//!
//! Each master is asked with `CONFIG GET maxmemory*`, and, as the settings need, `INFO
//! replication` and `CLUSTER INFO`, through its pool. A command the user may not run (an ACL,
//! a renamed command) is a finding of its own, [`Finding::Unreadable`]: the check says what
//! it could not see instead of guessing. It may touch the router's pools and the replication
//! settings; nothing else.

use std::collections::HashMap;

use redis::{Connection, RedisResult};

use crate::client::call::replication::ReplicaAcks;
use crate::client::call::route::Router;
use crate::client::topology::pool::Pool;
use crate::error::{Error, Finding, Result};

/// What `build` does with the server check ([`LockManagerBuilder::server_check`]).
///
/// [`LockManagerBuilder::server_check`]: crate::LockManagerBuilder::server_check
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerCheck {
    /// No check.
    Off,
    /// Each finding is a warning in the log (the default); the build goes on.
    #[default]
    Warn,
    /// Any finding fails the build with [`Error::UnsafeServer`], what the check could not
    /// read included.
    Strict,
}

/// The findings on every master `router` reaches, for a manager whose writes wait for
/// `replica_acks`.
///
/// # Errors
/// A master that cannot be reached, or does not answer in time: the error of its pool.
pub(crate) fn check(router: &Router, replica_acks: Option<&ReplicaAcks>) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for pool in router.master_pools() {
        let server = pool.server();
        findings.extend(eviction(&pool, &server)?);
        if let Some(acks) = replica_acks.filter(|acks| acks.replicas() > 0) {
            findings.extend(replicas(&pool, &server, acks.replicas())?);
        }
        if router.cluster().is_some() {
            findings.extend(slots(&pool, &server)?);
        }
    }
    Ok(findings)
}

/// The eviction policy of the server of `pool`.
fn eviction(pool: &Pool, server: &str) -> Result<Option<Finding>> {
    let command = "CONFIG GET maxmemory*";
    let settings: HashMap<String, String> = match ask(pool, server, command, |connection| {
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory*")
            .query(connection)
    })? {
        Ok(settings) => settings,
        Err(unreadable) => return Ok(Some(unreadable)),
    };
    let policy = settings
        .get("maxmemory-policy")
        .cloned()
        .unwrap_or_else(|| "noeviction".into());
    let maxmemory = settings
        .get("maxmemory")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    Ok((policy != "noeviction").then(|| Finding::Eviction {
        server: server.to_owned(),
        policy,
        maxmemory,
    }))
}

/// The replicas connected to the master of `pool`, against the `required` ones.
fn replicas(pool: &Pool, server: &str, required: u32) -> Result<Option<Finding>> {
    let command = "INFO replication";
    let info: String = match ask(pool, server, command, |connection| {
        redis::cmd("INFO").arg("replication").query(connection)
    })? {
        Ok(info) => info,
        Err(unreadable) => return Ok(Some(unreadable)),
    };
    let connected = info_field(&info, "connected_slaves").unwrap_or(0);
    Ok((connected < required).then(|| Finding::TooFewReplicas {
        server: server.to_owned(),
        connected,
        required,
    }))
}

/// Whether the cluster node of `pool` sees every slot served.
fn slots(pool: &Pool, server: &str) -> Result<Option<Finding>> {
    let command = "CLUSTER INFO";
    let info: String = match ask(pool, server, command, |connection| {
        redis::cmd("CLUSTER").arg("INFO").query(connection)
    })? {
        Ok(info) => info,
        Err(unreadable) => return Ok(Some(unreadable)),
    };
    let state = info_text(&info, "cluster_state").unwrap_or_default();
    let slots_ok = info_field(&info, "cluster_slots_ok").unwrap_or(0);
    Ok(
        (state != "ok" || slots_ok < 16384).then(|| Finding::SlotsUncovered {
            server: server.to_owned(),
            state,
            slots_ok,
        }),
    )
}

/// Sends `query` on `pool`: its answer, or the finding that the server refused it (`Ok(Err)`);
/// a server that cannot be reached or answers late is the error.
fn ask<T>(
    pool: &Pool,
    server: &str,
    command: &str,
    query: impl FnMut(&mut Connection) -> RedisResult<T>,
) -> Result<std::result::Result<T, Finding>> {
    match pool.run(query) {
        Ok(answer) => Ok(Ok(answer)),
        Err(err) if err.is_outage() => Err(err),
        Err(Error::PermissionDenied { message, .. }) => {
            Ok(Err(unreadable(server, command, message)))
        }
        Err(err) => Ok(Err(unreadable(server, command, err.to_string()))),
    }
}

fn unreadable(server: &str, command: &str, answer: String) -> Finding {
    Finding::Unreadable {
        server: server.to_owned(),
        command: command.to_owned(),
        answer,
    }
}

/// The text of `field` in an `INFO` answer (`field:value` lines).
fn info_text(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
}

/// The number of `field` in an `INFO` answer.
fn info_field(info: &str, field: &str) -> Option<u32> {
    info_text(info, field)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_by_their_whole_name() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=x\r\n";
        assert_eq!(info_field(info, "connected_slaves"), Some(2));
        assert_eq!(info_text(info, "role").as_deref(), Some("master"));
        assert_eq!(info_text(info, "rol"), None);
        assert_eq!(info_field(info, "missing"), None);
    }
}
