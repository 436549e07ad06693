//! `top`: the held locks with the most waiters first, on every master, and the cycles
//! between processes that fair-lock queues show.
//!
//! Waiters are counted as Redis sees them: the connections listening on a lock's release
//! channel (a process listens on one connection for all its waiting threads), and a fair
//! lock's queue. Only a fair lock's queue names its waiters (their holder ids); a waiter's
//! chain is not the chain by which its thread holds other locks, so a cycle can be told
//! between processes (client ids), not threads: each process of a cycle holds a fair lock
//! that the next one waits for in its queue. It may be threads of those processes waiting on
//! each other, or merely each process busy on two names; the report says which locks.

use std::collections::{BTreeMap, BTreeSet};

use redlease::layout::{self, HolderId};
use redlease::redis::{self, Connection};
use serde::Serialize;

use crate::connection::Failure;
use crate::probe::{subscribers, Kind};
use crate::scan::{self, ListedLock};

/// At most this many waiters of a fair lock's queue are read for the cycles.
const QUEUE_READ: isize = 1000;

#[derive(Debug, Serialize)]
pub struct Top {
    /// The held locks, the most waited for first.
    pub locks: Vec<Contended>,
    /// Processes that wait in a cycle on each other's fair locks.
    pub cycles: Vec<Cycle>,
    /// False when the scan stopped at its limit.
    pub complete: bool,
}

#[derive(Debug, Serialize)]
pub struct Contended {
    pub name: String,
    pub kind: Kind,
    /// The remaining lease in ms; `null` when the key has no expiry.
    pub lease_ms: Option<i64>,
    /// The holder ids.
    pub holders: Vec<String>,
    /// Connections listening on the release channel (processes waiting).
    pub listening: u64,
    /// Waiters in a fair lock's queue.
    pub queued: u64,
}

impl Contended {
    fn waiters(&self) -> u64 {
        self.listening + self.queued
    }
}

#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Cycle {
    /// The client ids of the processes, each waiting for a lock the next one holds.
    pub clients: Vec<String>,
    /// The fair locks they wait for.
    pub locks: Vec<String>,
}

/// One wait a fair queue shows: the waiting client, the lock, and its holders' clients.
struct Edge {
    waiter: String,
    lock: String,
    holders: Vec<String>,
}

/// Scans the `masters` for held locks (at most `limit`, `scan_count` keys a SCAN call), and
/// answers the `show` most waited for, and the cycles.
pub fn top(
    masters: &mut [Connection],
    limit: u64,
    scan_count: u64,
    show: usize,
) -> Result<Top, Failure> {
    let (mut locks, mut edges, mut complete) = (Vec::new(), Vec::new(), true);
    for master in masters.iter_mut() {
        let listing = scan::list(std::slice::from_mut(master), "*", limit, scan_count)?;
        complete &= listing.complete;
        for lock in listing.locks {
            let (contended, queue) = waiters(master, lock)?;
            edges.extend(queue);
            locks.push(contended);
        }
    }
    locks.sort_by(|a, b| b.waiters().cmp(&a.waiters()).then(a.name.cmp(&b.name)));
    locks.truncate(show);
    Ok(Top {
        locks,
        cycles: cycles(&edges),
        complete,
    })
}

/// Who waits for `lock` on `redis`: the listeners on its channel, and a fair lock's queue
/// (the waits it shows, for the cycles).
fn waiters(redis: &mut Connection, lock: ListedLock) -> Result<(Contended, Vec<Edge>), Failure> {
    let channel = match lock.kind {
        Kind::ReadWriteLock => layout::rwlock_channel(&lock.name),
        _ => layout::lock_channel(&lock.name),
    };
    let listening = subscribers(redis, &[&channel])?[0];
    let holders: Vec<String> = lock
        .holders
        .iter()
        .map(|holder| holder.id.clone())
        .collect();
    let (queued, queue) = match lock.kind {
        Kind::FairLock => {
            let queue = layout::fair_queue(&lock.name);
            let (length, ids): (u64, Vec<String>) = redis::pipe()
                .cmd("LLEN")
                .arg(&queue)
                .cmd("LRANGE")
                .arg(&queue)
                .arg(0)
                .arg(QUEUE_READ - 1)
                .query(redis)?;
            (length, ids)
        }
        _ => (0, Vec::new()),
    };
    let holder_clients: Vec<String> = holders.iter().map(|id| client_of(id)).collect();
    let edges = queue
        .iter()
        .map(|waiter| Edge {
            waiter: client_of(waiter),
            lock: lock.name.clone(),
            holders: holder_clients.clone(),
        })
        .collect();
    let contended = Contended {
        name: lock.name,
        kind: lock.kind,
        lease_ms: lock.lease_ms,
        holders,
        listening,
        queued,
    };
    Ok((contended, edges))
}

fn client_of(holder_id: &str) -> String {
    HolderId::parse(holder_id).client.to_owned()
}

/// The cycles of the graph "a waiting client → the clients holding what it waits for"
/// (a client waiting for its own hold is left out): each strongly connected set of two or
/// more clients, with the locks of the waits between them.
fn cycles(edges: &[Edge]) -> Vec<Cycle> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for edge in edges {
        for holder in &edge.holders {
            if *holder != edge.waiter {
                next.entry(&edge.waiter).or_default().insert(holder);
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for &client in next.keys() {
        if seen.contains(client) {
            continue;
        }
        let forward = reachable(&next, client);
        let set: BTreeSet<&str> = forward
            .iter()
            .copied()
            .filter(|other| reachable(&next, other).contains(client))
            .collect();
        if set.len() < 2 {
            continue;
        }
        seen.extend(set.iter().copied());
        let locks = edges
            .iter()
            .filter(|edge| {
                set.contains(edge.waiter.as_str())
                    && edge
                        .holders
                        .iter()
                        .any(|holder| *holder != edge.waiter && set.contains(holder.as_str()))
            })
            .map(|edge| edge.lock.clone())
            .collect::<BTreeSet<_>>();
        found.push(Cycle {
            clients: set.iter().map(|client| client.to_string()).collect(),
            locks: locks.into_iter().collect(),
        });
    }
    found
}

/// The clients `from` reaches through `next`, itself included.
fn reachable<'a>(next: &BTreeMap<&'a str, BTreeSet<&'a str>>, from: &'a str) -> BTreeSet<&'a str> {
    let mut reached = BTreeSet::from([from]);
    let mut todo = vec![from];
    while let Some(client) = todo.pop() {
        for &other in next.get(client).into_iter().flatten() {
            if reached.insert(other) {
                todo.push(other);
            }
        }
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(waiter: &str, lock: &str, holder: &str) -> Edge {
        Edge {
            waiter: waiter.into(),
            lock: lock.into(),
            holders: vec![holder.into()],
        }
    }

    #[test]
    fn two_processes_waiting_on_each_others_fair_locks_are_a_cycle() {
        let edges = [
            edge("a", "x", "b"),
            edge("b", "y", "a"),
            edge("c", "y", "a"),
            edge("a", "z", "a"),
        ];
        let found = cycles(&edges);
        assert_eq!(
            found,
            [Cycle {
                clients: vec!["a".into(), "b".into()],
                locks: vec!["x".into(), "y".into()],
            }]
        );
        assert!(cycles(&[edge("a", "x", "b"), edge("c", "y", "a")]).is_empty());
    }
}
