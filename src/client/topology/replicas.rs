//! How many replicas a master has in sync now: read from its `INFO replication` by the
//! manager's recount thread, again a second later while writes use it, and within 0.1 s when a
//! `WAIT` answered another count; a write only takes the count last read, and never waits for
//! it. The server check reads the same lines ([`listed`]) for the replicas online. A manager built with
//! [`connected_replica_acks`](crate::LockManagerBuilder::connected_replica_acks) (the default)
//! has each write wait for that many acknowledgements.
//!
//! A replica counts as in sync when its master lists it `state=online` (not one still loading
//! a full copy, such as a demoted master catching up after a failover) with a `lag` of at most
//! [`MOST_LAG_SECS`]: its last acknowledgement is recent, so a replica that stalled or was cut
//! off stops counting within a couple of seconds, long before the master drops its link
//! (`repl-timeout`, 60 s by default).
//!
//! It may use the pool it counts for; nothing else.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::client::topology::pool::{Pool, Reading};

/// How long a count that writes use is used before it is read again; also how long a master
/// whose count could not be read is left alone.
pub(crate) const RECOUNT_EVERY: Duration = Duration::from_secs(1);

/// The most one read of a count takes (a new connection included), so that a master that
/// does not answer holds up the others' counts no longer.
const READ_WITHIN: Duration = Duration::from_millis(500);

/// The most seconds since a replica's last acknowledgement for it to count as in sync. A
/// replica acknowledges every second, and at once when a `WAIT` asks.
pub(crate) const MOST_LAG_SECS: u64 = 1;

/// One replica line of `INFO replication` (`slaveN:ip=...,state=online,offset=...,lag=0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    /// `state=online`: it has the whole data set and follows the master's writes.
    pub(crate) online: bool,
    /// Seconds since its last acknowledgement (`None` when the line has no `lag`).
    pub(crate) lag: Option<u64>,
}

impl Listed {
    /// Whether a write's `WAIT` should count on it.
    pub(crate) fn in_sync(self) -> bool {
        self.online && self.lag.is_some_and(|lag| lag <= MOST_LAG_SECS)
    }
}

/// The replicas an `INFO replication` answer lists.
pub(crate) fn listed(info: &str) -> Vec<Listed> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().split_once(':')?;
            let index = name.strip_prefix("slave")?;
            if index.is_empty() || !index.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            let field = |wanted: &str| {
                fields.split(',').find_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    (key == wanted).then_some(value)
                })
            };
            Some(Listed {
                online: field("state") == Some("online"),
                lag: field("lag").and_then(|lag| lag.parse().ok()),
            })
        })
        .collect()
}

/// A master's count of replicas in sync, as last read, and whether it is due to be read
/// again. Writes take it as it is ([`InSync::count`], which never waits for the server); the
/// recount thread (`crate::client::recount`) reads it again ([`InSync::recount`]).
#[derive(Debug, Default)]
pub(crate) struct InSync {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    counted: Option<Counted>,
    /// A write took the count since it was read: it is worth reading again.
    used: bool,
    /// A `WAIT` answered another count: read it again at once.
    forgotten: bool,
    /// The last read failed (warned of once, until one succeeds).
    unreadable: bool,
}

#[derive(Clone, Copy, Debug)]
struct Counted {
    /// The pool's generation it was read in: a Sentinel failover moves it.
    generation: u64,
    read_at: Instant,
    replicas: u32,
}

impl InSync {
    /// The replicas in sync with the master, as last read (0 before the first read). A
    /// count read from another master (before a Sentinel failover) stands until it is read
    /// again: a `WAIT` for more replicas than the new master has falls short, which has the
    /// count read at once.
    pub(crate) fn count(&self) -> u32 {
        let mut state = self.state.lock();
        state.used = true;
        state.counted.map_or(0, |counted| counted.replicas)
    }

    /// A `WAIT` answered another count than the one it was sent with (or none): the count is
    /// read again at once.
    pub(crate) fn forget(&self) {
        self.state.lock().forgotten = true;
    }

    /// Whether the count should be read again for a pool of `generation`: never read, read
    /// from another master, forgotten, or older than [`RECOUNT_EVERY`] with a write that took
    /// it since; but not within [`RECOUNT_EVERY`] of a read that failed.
    pub(crate) fn due(&self, generation: u64) -> bool {
        let state = self.state.lock();
        match state.counted {
            None => true,
            Some(counted) => {
                let old = counted.read_at.elapsed() >= RECOUNT_EVERY;
                if state.unreadable {
                    return old;
                }
                counted.generation != generation || state.forgotten || (state.used && old)
            }
        }
    }

    /// Reads the count of the master of `pool` now (one `INFO replication`, within the pool's
    /// response timeout or [`READ_WITHIN`], the shorter). A count that could not be read
    /// leaves the last one, read again a second later.
    pub(crate) fn recount(&self, pool: &Pool) {
        let generation = pool.generation();
        {
            // Cleared before the read: a `WAIT` judged during it has the count read again.
            let mut state = self.state.lock();
            state.used = false;
            state.forgotten = false;
        }
        let read = read(pool);
        let mut state = self.state.lock();
        let before = state.counted;
        let replicas = match &read {
            Ok(replicas) => *replicas,
            Err(_) => before.map_or(0, |counted| counted.replicas),
        };
        state.counted = Some(Counted {
            generation,
            read_at: Instant::now(),
            replicas,
        });
        let newly_unreadable = read.is_err() && !state.unreadable;
        state.unreadable = read.is_err();
        drop(state);
        if let Err(err) = read {
            let server = pool.server();
            let told = format!(
                "could not read the replicas of {server} (INFO replication): {err}; writes \
                 wait for {replicas}"
            );
            match newly_unreadable {
                true => log::warn!("{told}"),
                false => log::debug!("{told}"),
            }
            return;
        }
        match before {
            Some(was) if was.replicas != replicas => log::info!(
                "{} has {replicas} replicas in sync (was {}): writes wait for them",
                pool.server(),
                was.replicas
            ),
            _ => log::debug!("{} has {replicas} replicas in sync", pool.server()),
        }
    }
}

/// Reads the count of replicas in sync with the master of `pool`.
fn read(pool: &Pool) -> crate::error::Result<u32> {
    let deadline = Instant::now() + pool.response_timeout().min(READ_WITHIN);
    let info = pool.run_before(deadline, |connection| {
        let info = redis::cmd("INFO")
            .arg("replication")
            .query::<String>(connection)?;
        Ok((info, Reading::Complete))
    })?;
    Ok(listed(&info).into_iter().filter(|r| r.in_sync()).count() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_in_sync_when_online_with_a_recent_acknowledgement() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:4\r\n\
            slave0:ip=127.0.0.1,port=1,state=online,offset=10,lag=0\r\n\
            slave1:ip=127.0.0.1,port=2,state=online,offset=10,lag=1\r\n\
            slave2:ip=127.0.0.1,port=3,state=online,offset=9,lag=5\r\n\
            slave3:ip=127.0.0.1,port=4,state=wait_bgsave,offset=0,lag=0\r\n\
            slave_read_repl_offset:10\r\nslaves_waiting_psync:x\r\n";
        let listed = listed(info);
        assert_eq!(listed.len(), 4);
        assert_eq!(listed.iter().filter(|r| r.online).count(), 3);
        assert_eq!(listed.iter().filter(|r| r.in_sync()).count(), 2);
        assert!(!Listed {
            online: true,
            lag: None
        }
        .in_sync());
    }
}
