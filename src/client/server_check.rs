//! The settings of a deployment that break a lock silently, read from its masters: an
//! eviction policy that may drop a held lock's key, fewer replicas in sync than the
//! acknowledgements asked for, a cluster with slots nobody serves ([`Finding`]). `build` runs
//! the check as the builder's [`ServerCheck`] says; `LockManager::check_server` runs it on
//! demand (the inspect tool's `doctor`).
//!
//! Each master is asked `INFO memory`, and as the settings need `INFO replication` and
//! `CLUSTER INFO`, through its pool, one after another. What the check could not read (a
//! command refused by an ACL or disabled by the service, no answer in time, an answer without
//! the setting) is a finding of its own, [`Finding::Unreadable`], and the check goes on with
//! the rest: it says what it could not see instead of guessing. It may touch the router's
//! pools and the replication settings; nothing else.

use crate::client::call::replication::ReplicaAcks;
use crate::client::call::route::Router;
use crate::client::topology::pool::Pool;
use crate::client::topology::replicas;
use crate::error::Finding;

/// What `build` does with the server check ([`LockManagerBuilder::server_check`]).
///
/// [`LockManagerBuilder::server_check`]: crate::LockManagerBuilder::server_check
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerCheck {
    /// No check.
    Off,
    /// Each finding is a warning in the log (the default); the build goes on.
    #[default]
    Warn,
    /// Any finding fails the build with [`Error::UnsafeServer`](crate::Error::UnsafeServer),
    /// what the check could not read included.
    Strict,
}

/// The findings on every master `router` reaches, for a manager whose writes wait for
/// `replica_acks`. A cluster's slot coverage is told once, by the first node that sees a gap.
pub(crate) fn check(router: &Router, replica_acks: Option<&ReplicaAcks>) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut slots_told = false;
    for pool in router.master_pools() {
        let server = pool.server();
        findings.extend(eviction(&pool, &server));
        if let Some(acks) = replica_acks.filter(|acks| acks.replicas() > 0) {
            findings.extend(replicas(&pool, &server, acks.replicas()));
        }
        if router.cluster().is_some() && !slots_told {
            let gap = slots(&pool, &server);
            slots_told = matches!(gap, Some(Finding::SlotsUncovered { .. }));
            findings.extend(gap);
        }
    }
    findings
}

/// The eviction policy of the server of `pool`, from `INFO memory`.
fn eviction(pool: &Pool, server: &str) -> Option<Finding> {
    let words = ["INFO", "memory"];
    let info = match read(pool, server, &words) {
        Ok(info) => info,
        Err(unreadable) => return Some(unreadable),
    };
    let Some(policy) = info_text(&info, "maxmemory_policy") else {
        let answer = "no maxmemory_policy in the answer".to_owned();
        return Some(unreadable(server, &words, answer));
    };
    let maxmemory = info_field(&info, "maxmemory").unwrap_or(0);
    (policy != "noeviction").then(|| Finding::Eviction {
        server: server.to_owned(),
        policy,
        maxmemory,
    })
}

/// The replicas in sync with the master of `pool` (`slaveN:...,state=online,...` lines of
/// `INFO replication`), against the `required` ones.
fn replicas(pool: &Pool, server: &str, required: u32) -> Option<Finding> {
    let info = match read(pool, server, &["INFO", "replication"]) {
        Ok(info) => info,
        Err(unreadable) => return Some(unreadable),
    };
    let online = replicas::listed(&info)
        .into_iter()
        .filter(|replica| replica.online)
        .count() as u32;
    (online < required).then(|| Finding::TooFewReplicas {
        server: server.to_owned(),
        online,
        required,
    })
}

/// Whether the cluster node of `pool` sees every slot with a live master.
fn slots(pool: &Pool, server: &str) -> Option<Finding> {
    let info = match read(pool, server, &["CLUSTER", "INFO"]) {
        Ok(info) => info,
        Err(unreadable) => return Some(unreadable),
    };
    let state = info_text(&info, "cluster_state").unwrap_or_default();
    let assigned = info_field(&info, "cluster_slots_assigned").unwrap_or(0);
    let failed = info_field(&info, "cluster_slots_fail").unwrap_or(0);
    (state != "ok" || assigned < 16384 || failed > 0).then(|| Finding::SlotsUncovered {
        server: server.to_owned(),
        state,
        assigned,
        failed,
    })
}

/// What the command `words` answers on `pool` (an `INFO` text), or the finding that it could
/// not be read.
fn read(pool: &Pool, server: &str, words: &[&str]) -> Result<String, Finding> {
    let mut command = redis::cmd(words[0]);
    for word in &words[1..] {
        command.arg(*word);
    }
    pool.run(|connection| command.query(connection))
        .map_err(|err| unreadable(server, words, err.to_string()))
}

fn unreadable(server: &str, words: &[&str], answer: String) -> Finding {
    Finding::Unreadable {
        server: server.to_owned(),
        command: words.join(" "),
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
fn info_field<T: std::str::FromStr>(info: &str, field: &str) -> Option<T> {
    info_text(info, field)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_by_their_whole_name() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=x\r\n";
        assert_eq!(info_field::<u32>(info, "connected_slaves"), Some(2));
        assert_eq!(info_text(info, "role").as_deref(), Some("master"));
        assert_eq!(info_text(info, "rol"), None);
        assert_eq!(info_field::<u32>(info, "missing"), None);
    }
}
