//! `list`: the held locks whose names match a glob, found with `SCAN`.
//!
//! Only hashes are scanned (`SCAN ... TYPE hash`, Redis 6 and later), and a hash counts as a
//! lock when every field but a read-write lock's `mode` holds a count and is named like a
//! holder id (`<client id>:<number>`, a writer's with `:write` after it): an application's
//! hash of counters is left out, and so are a fair lock's waiters that take grants
//! (`redlease_lock_grants:{name}`). Each SCAN call and each batch of reads is one bounded call;
//! the listing stops at a limit of locks. On a cluster every master is scanned in turn (each
//! keeps only its own slots' keys), and the locks of all are listed by name.

use redlease::redis::{self, Connection};
use serde::Serialize;

use crate::connection::Failure;
use crate::probe::{self, Holder, Kind};
use redlease::layout;

#[derive(Debug, Serialize)]
pub struct Listing {
    pub pattern: String,
    /// The locks found, by name.
    pub locks: Vec<ListedLock>,
    /// False when the listing stopped at its limit before the scan ended.
    pub complete: bool,
}

#[derive(Debug, Serialize)]
pub struct ListedLock {
    pub name: String,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The remaining lease in ms; `null` when the key has no expiry.
    pub lease_ms: Option<i64>,
    pub holders: Vec<Holder>,
}

/// Scans the `masters` for held locks named like `pattern`, at most `limit` of them, looking
/// at about `scan_count` keys per SCAN call.
pub fn list(
    masters: &mut [Connection],
    pattern: &str,
    limit: u64,
    scan_count: u64,
) -> Result<Listing, Failure> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut locks = Vec::new();
    let mut complete = true;
    for master in masters {
        if locks.len() >= limit {
            complete = false;
            break;
        }
        complete = scan_master(master, pattern, limit, scan_count, &mut locks)?;
    }
    locks.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Listing {
        pattern: pattern.to_owned(),
        locks,
        complete,
    })
}

/// Scans one master, adding its locks to `locks` up to `limit` in all; answers whether its
/// scan ended before the limit cut it short.
fn scan_master(
    redis: &mut Connection,
    pattern: &str,
    limit: usize,
    scan_count: u64,
    locks: &mut Vec<ListedLock>,
) -> Result<bool, Failure> {
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(scan_count)
            .arg("TYPE")
            .arg("hash")
            .query(redis)?;
        // A fair lock's waiters that take grants are a hash of holder ids too: not a lock.
        let grants = layout::fair_grants("");
        let grants_prefix = grants.split('{').next().unwrap_or_default().as_bytes();
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .filter(|key| !key.starts_with(grants_prefix))
            .collect();
        locks.extend(read_locks(redis, &keys)?);
        if locks.len() >= limit {
            let complete = next == 0 && locks.len() == limit;
            locks.truncate(limit);
            return Ok(complete);
        }
        if next == 0 {
            return Ok(true);
        }
        cursor = next;
    }
}

/// A hash's fields and values as HGETALL answers them.
type HashFields = Vec<(Vec<u8>, Vec<u8>)>;

/// Reads the hashes `keys` in one pipeline and keeps those that are held locks.
fn read_locks(redis: &mut Connection, keys: &[Vec<u8>]) -> Result<Vec<ListedLock>, Failure> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        let name = String::from_utf8_lossy(key);
        pipe.cmd("HGETALL")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .cmd("EXISTS")
            .arg(layout::fair_queue(&name))
            .arg(layout::fair_places(&name));
    }
    // A key may have gone between SCAN and HGETALL: it then reads as an empty hash.
    let replies: Vec<(HashFields, i64, u64)> = pipe.query(redis)?;
    let mut locks = Vec::new();
    for (key, (fields, pttl, fair_keys)) in keys.iter().zip(replies) {
        let name = String::from_utf8_lossy(key).into_owned();
        let Ok(fields) = probe::lock_fields(&name, &fields) else {
            continue;
        };
        let named_like_holders = fields
            .holders
            .iter()
            .all(|holder| holder.chain_or_thread.is_some());
        if fields.holders.is_empty() || !named_like_holders {
            continue;
        }
        let kind = if fields.mode.is_some() {
            Kind::ReadWriteLock
        } else if fair_keys > 0 {
            Kind::FairLock
        } else {
            Kind::Lock
        };
        locks.push(ListedLock {
            name,
            kind,
            mode: fields.mode,
            lease_ms: (pttl >= 0).then_some(pttl),
            holders: fields.holders,
        });
    }
    Ok(locks)
}
