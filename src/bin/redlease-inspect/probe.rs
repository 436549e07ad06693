//! `inspect`: what the primitive on one name is and what state it is in, read from its keys
//! and channels, as a [`Report`].
//!
//! The kind is told from the key's type and contents: a hash with a `mode` field is a
//! read-write lock; any other hash of counts is a lock, a fair one when its queue or places
//! exist; a string count is a permit-expirable semaphore when its permit zset exists, else
//! a semaphore or a count-down latch, told apart by who listens on which channel (nobody
//! listening: it cannot be told). Every read is a bounded call on the tool's connection.

use std::collections::HashMap;

use redlease::redis::{self, Connection};
use serde::Serialize;

use crate::connection::Failure;
use redlease::layout::{self, HolderId};

/// At most this many waiters of a fair lock's queue are read (the rest are only counted).
const MAX_QUEUE_SHOWN: isize = 1000;
/// At most this many read levels of one reader are read.
const MAX_LEVELS_SHOWN: i64 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Lock,
    FairLock,
    ReadWriteLock,
    Semaphore,
    PermitSemaphore,
    CountDownLatch,
    /// A string count nobody waits on: the layout of both.
    SemaphoreOrLatch,
}

impl Kind {
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair lock",
            Kind::ReadWriteLock => "read-write lock",
            Kind::Semaphore => "semaphore",
            Kind::PermitSemaphore => "permit-expirable semaphore",
            Kind::CountDownLatch => "count-down latch",
            Kind::SemaphoreOrLatch => "semaphore or count-down latch",
        }
    }

    pub fn is_lock(self) -> bool {
        matches!(self, Kind::Lock | Kind::FairLock | Kind::ReadWriteLock)
    }
}

/// Everything the tool could read about one name.
#[derive(Debug, Serialize)]
pub struct Report {
    pub name: String,
    pub kind: Kind,
    /// What the layout leaves open, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Whether a lock is held (a semaphore or latch: whether its key exists).
    pub held: bool,
    /// A read-write lock's mode: `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The remaining lease of the key in ms; `null` when it has no expiry or is gone.
    pub lease_ms: Option<i64>,
    /// The last fencing token handed out on the name (locks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// The channel waiters listen on, and how many connections listen on it now (a client
    /// has one listening connection for all its waiting threads). A fair lock's waiters
    /// listen each on `<channel>:<holder id>`: the count is over those channels.
    pub channel: String,
    pub subscribers: u64,
    /// A fair lock's waiters, first in line first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<Queue>,
    /// A semaphore's available permits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<i64>,
    /// A permit-expirable semaphore's permits out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits_out: Option<Vec<Permit>>,
    /// A count-down latch's count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// The leader, when the lock is an election's and its record names a holder of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<Leader>,
}

/// An election's leader, as its record (`redlease_leader:{name}`) says.
#[derive(Debug, Serialize)]
pub struct Leader {
    pub holder_id: String,
    pub value: String,
    pub term: u64,
    /// Since when it leads, in ms since the epoch by the server's clock.
    pub since_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Holder,
    Reader,
    /// The upgradable reader of a read-write lock (its `upgrader` field names it).
    Upgradable,
    Writer,
}

/// One holder of a lock: who, and how many times.
#[derive(Debug, Serialize)]
pub struct Holder {
    /// The holder id as Redis keeps it, `<client id>:<number>`.
    pub id: String,
    pub client_id: String,
    /// The number after the client id: the acquisition chain's in redlease (one per chain
    /// of reentrant holds), the thread's in Redisson.
    pub chain_or_thread: Option<u64>,
    pub role: Role,
    /// The reentrancy count.
    pub count: i64,
    /// A reader's remaining lease of each read level, level 1 first (`null`: gone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_level_leases_ms: Vec<Option<i64>>,
}

impl Holder {
    fn new(id: &str, role: Role, count: i64) -> Self {
        let parsed = HolderId::parse(id);
        Holder {
            id: id.to_owned(),
            client_id: parsed.client.to_owned(),
            chain_or_thread: parsed.number,
            role,
            count,
            read_level_leases_ms: Vec::new(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Queue {
    /// How many wait, whether or not all are shown.
    pub length: u64,
    pub waiters: Vec<Waiter>,
}

/// One waiter in a fair lock's queue.
#[derive(Debug, Serialize)]
pub struct Waiter {
    pub id: String,
    pub client_id: String,
    pub chain_or_thread: Option<u64>,
    /// How long its place is kept if it does not come back for it, in ms (negative: expired,
    /// to be dropped by the next script that looks); `null` when it has no expiry entry.
    pub place_expires_in_ms: Option<i64>,
    /// Whether a connection listens on its own wake-up channel.
    pub listening: bool,
}

/// One permit out of a permit-expirable semaphore.
#[derive(Debug, Serialize)]
pub struct Permit {
    pub id: String,
    pub expires_in_ms: i64,
}

/// What one pipelined look at the name finds, before its kind is known.
struct FirstLook {
    key_type: String,
    pttl: i64,
    token: Option<u64>,
    fair_queue: bool,
    fair_places: bool,
    permit_zset: bool,
    now_ms: i64,
}

fn first_look(redis: &mut Connection, name: &str) -> Result<FirstLook, Failure> {
    let (key_type, pttl, token, fair_queue, fair_places, permit_zset, (seconds, micros)): (
        String,
        i64,
        Option<u64>,
        bool,
        bool,
        bool,
        (i64, i64),
    ) = redis::pipe()
        .cmd("TYPE")
        .arg(name)
        .cmd("PTTL")
        .arg(name)
        .cmd("GET")
        .arg(layout::token_counter(name))
        .cmd("EXISTS")
        .arg(layout::fair_queue(name))
        .cmd("EXISTS")
        .arg(layout::fair_places(name))
        .cmd("EXISTS")
        .arg(layout::permit_expiries(name))
        .cmd("TIME")
        .query(redis)?;
    Ok(FirstLook {
        key_type,
        pttl,
        token,
        fair_queue,
        fair_places,
        permit_zset,
        now_ms: seconds * 1000 + micros / 1000,
    })
}

/// Reads the primitive on `name`; [`Failure::NotFound`] when there is none (or the key holds
/// something else).
pub fn probe(redis: &mut Connection, name: &str) -> Result<Report, Failure> {
    let look = first_look(redis, name)?;
    let lease_ms = (look.pttl >= 0).then_some(look.pttl);
    match look.key_type.as_str() {
        "hash" => probe_lock(redis, name, &look, lease_ms),
        "string" => probe_count(redis, name, &look, lease_ms),
        "none" if look.fair_queue => {
            // Nobody holds it, yet waiters are in line: between a release and the next
            // waiter's taking it, or the holder's lease ran out.
            let mut report = lock_report(name, Kind::FairLock, &look, None);
            report.held = false;
            fill_fair_queue(redis, name, &look, &mut report)?;
            Ok(report)
        }
        // Permits out and none left: the count's key may be absent, which counts as 0.
        "none" if look.permit_zset => probe_count(redis, name, &look, None),
        "none" => Err(Failure::NotFound(format!("nothing on {name:?}"))),
        other => Err(Failure::NotFound(format!(
            "{name:?} is a {other}, not a lock, semaphore or count-down latch"
        ))),
    }
}

fn lock_report(name: &str, kind: Kind, look: &FirstLook, lease_ms: Option<i64>) -> Report {
    let channel = match kind {
        Kind::ReadWriteLock => layout::rwlock_channel(name),
        _ => layout::lock_channel(name),
    };
    Report {
        name: name.to_owned(),
        kind,
        note: None,
        held: true,
        mode: None,
        lease_ms,
        fencing_token: look.token,
        holders: Vec::new(),
        channel,
        subscribers: 0,
        queue: None,
        permits: None,
        permits_out: None,
        count: None,
        leader: None,
    }
}

fn probe_lock(
    redis: &mut Connection,
    name: &str,
    look: &FirstLook,
    lease_ms: Option<i64>,
) -> Result<Report, Failure> {
    let fields: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(name).query(redis)?;
    let fields = lock_fields(name, &fields)?;
    let kind = if fields.mode.is_some() {
        Kind::ReadWriteLock
    } else if look.fair_queue || look.fair_places {
        Kind::FairLock
    } else {
        Kind::Lock
    };
    let mut report = lock_report(name, kind, look, lease_ms);
    report.mode = fields.mode;
    report.holders = fields.holders;
    match kind {
        Kind::FairLock => fill_fair_queue(redis, name, look, &mut report)?,
        Kind::ReadWriteLock => {
            fill_read_levels(redis, name, &mut report.holders)?;
            report.subscribers = subscribers(redis, &[&report.channel])?[0];
        }
        _ => {
            report.note = Some("a fair lock that nobody waits for looks the same".into());
            report.subscribers = subscribers(redis, &[&report.channel])?[0];
            report.leader = election_leader(redis, name, &report.holders)?;
        }
    }
    if report
        .holders
        .iter()
        .any(|holder| holder.chain_or_thread.is_none())
    {
        report.note = Some(
            "some fields are not named like holder ids (<client id>:<number>): \
             perhaps a hash of counts that is no lock"
                .into(),
        );
    }
    Ok(report)
}

/// The leader of the election `name`, when its record names one of the lock's `holders`.
/// A record the server will not show (an ACL without the election's keys) is no leader: the
/// lock is shown all the same.
fn election_leader(
    redis: &mut Connection,
    name: &str,
    holders: &[Holder],
) -> Result<Option<Leader>, Failure> {
    let record: redis::RedisResult<std::collections::HashMap<String, String>> =
        redis::cmd("HGETALL")
            .arg(layout::leader_record(name))
            .query(redis);
    let record = match record {
        Ok(record) => record,
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
            return Ok(None)
        }
        Err(err) => return Err(err.into()),
    };
    let field = |key: &str| record.get(key).cloned().unwrap_or_default();
    let holder_id = field("holder");
    if !holders.iter().any(|holder| holder.id == holder_id) {
        return Ok(None);
    }
    Ok(Some(Leader {
        value: field("value"),
        term: field("term").parse().unwrap_or(0),
        since_ms: field("since").parse().unwrap_or(0),
        holder_id,
    }))
}

/// A lock hash's fields: holders with their counts, and a read-write lock's mode.
pub struct LockFields {
    pub mode: Option<String>,
    pub holders: Vec<Holder>,
}

/// Reads a hash as a lock's: every field but `mode` (and a read-write lock's `upgrader`)
/// must hold a count.
pub fn lock_fields(name: &str, fields: &[(Vec<u8>, Vec<u8>)]) -> Result<LockFields, Failure> {
    let mut mode = None;
    let mut upgrader = None;
    let mut holders = Vec::new();
    for (field, value) in fields {
        let field = String::from_utf8_lossy(field);
        let value = String::from_utf8_lossy(value);
        if field == layout::MODE_FIELD {
            mode = Some(value.into_owned());
            continue;
        }
        if field == layout::UPGRADER_FIELD {
            upgrader = Some(value.into_owned());
            continue;
        }
        if field == layout::UPGRADE_TRY_FIELD {
            continue;
        }
        let count: i64 = value.parse().map_err(|_| {
            Failure::NotFound(format!(
                "{name:?} is a hash but not a lock: its field {field:?} holds {value:?}, not a count"
            ))
        })?;
        holders.push((field.into_owned(), count));
    }
    let mut holders: Vec<Holder> = holders
        .into_iter()
        .map(
            |(field, count)| match field.strip_suffix(layout::WRITER_SUFFIX) {
                Some(writer) if mode.is_some() => Holder::new(writer, Role::Writer, count),
                _ if upgrader.as_deref() == Some(&field) => {
                    Holder::new(&field, Role::Upgradable, count)
                }
                _ if mode.is_some() => Holder::new(&field, Role::Reader, count),
                _ => Holder::new(&field, Role::Holder, count),
            },
        )
        .collect();
    // The writer first, then by id: a stable order for people and scripts.
    holders.sort_by(|a, b| (a.role != Role::Writer, &a.id).cmp(&(b.role != Role::Writer, &b.id)));
    Ok(LockFields { mode, holders })
}

/// Each reader's read levels and their leases (a writer's read levels are readers' too).
fn fill_read_levels(
    redis: &mut Connection,
    name: &str,
    holders: &mut [Holder],
) -> Result<(), Failure> {
    let mut pipe = redis::pipe();
    let mut asked = Vec::new();
    for (index, holder) in holders.iter().enumerate() {
        if !matches!(holder.role, Role::Reader | Role::Upgradable) {
            continue;
        }
        for level in 1..=holder.count.clamp(0, MAX_LEVELS_SHOWN) {
            pipe.cmd("PTTL")
                .arg(layout::read_level_key(name, &holder.id, level as u64));
            asked.push(index);
        }
    }
    if asked.is_empty() {
        return Ok(());
    }
    let leases: Vec<i64> = pipe.query(redis)?;
    for (index, pttl) in asked.into_iter().zip(leases) {
        holders[index]
            .read_level_leases_ms
            .push((pttl >= 0).then_some(pttl));
    }
    Ok(())
}

fn fill_fair_queue(
    redis: &mut Connection,
    name: &str,
    look: &FirstLook,
    report: &mut Report,
) -> Result<(), Failure> {
    let (length, ids): (u64, Vec<String>) = redis::pipe()
        .cmd("LLEN")
        .arg(layout::fair_queue(name))
        .cmd("LRANGE")
        .arg(layout::fair_queue(name))
        .arg(0)
        .arg(MAX_QUEUE_SHOWN - 1)
        .query(redis)?;
    let mut places = redis::pipe();
    for id in &ids {
        places.cmd("ZSCORE").arg(layout::fair_places(name)).arg(id);
    }
    let places: Vec<Option<f64>> = if ids.is_empty() {
        Vec::new()
    } else {
        places.query(redis)?
    };
    let mut channels = vec![report.channel.clone()];
    channels.extend(ids.iter().map(|id| format!("{}:{id}", report.channel)));
    let channel_refs: Vec<&str> = channels.iter().map(String::as_str).collect();
    let listening = subscribers(redis, &channel_refs)?;
    // A fair lock's waiters listen on their own channels, the base channel's listeners are
    // counted too (a client of another kind on the name).
    report.subscribers = listening.iter().sum();
    let waiters = ids
        .iter()
        .zip(places)
        .zip(&listening[1..])
        .map(|((id, place), &listeners)| {
            let parsed = HolderId::parse(id);
            Waiter {
                id: id.clone(),
                client_id: parsed.client.to_owned(),
                chain_or_thread: parsed.number,
                place_expires_in_ms: place.map(|expiry| expiry as i64 - look.now_ms),
                listening: listeners > 0,
            }
        })
        .collect();
    report.queue = Some(Queue { length, waiters });
    Ok(())
}

fn probe_count(
    redis: &mut Connection,
    name: &str,
    look: &FirstLook,
    lease_ms: Option<i64>,
) -> Result<Report, Failure> {
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(name).query(redis)?;
    let value = String::from_utf8_lossy(value.as_deref().unwrap_or(b"0"));
    let number: i64 = value.parse().map_err(|_| {
        Failure::NotFound(format!(
            "{name:?} holds {value:?}: not the count of a semaphore or count-down latch"
        ))
    })?;
    let semaphore_channel = layout::semaphore_channel(name);
    let latch_channel = layout::latch_channel(name);
    let listening = subscribers(redis, &[&semaphore_channel, &latch_channel])?;
    let (kind, subscribers, note) = count_kind(look.permit_zset, listening[0], listening[1]);
    let channel = match kind {
        Kind::CountDownLatch => latch_channel,
        _ => semaphore_channel,
    };
    let mut report = Report {
        name: name.to_owned(),
        kind,
        note,
        held: look.key_type == "string",
        mode: None,
        lease_ms,
        fencing_token: None,
        holders: Vec::new(),
        channel,
        subscribers,
        queue: None,
        permits: None,
        permits_out: None,
        count: None,
        leader: None,
    };
    match kind {
        Kind::CountDownLatch => report.count = Some(number),
        Kind::Semaphore => report.permits = Some(number),
        Kind::PermitSemaphore => {
            report.permits = Some(number);
            report.permits_out = Some(permits_out(redis, name, look.now_ms)?);
        }
        Kind::SemaphoreOrLatch => {
            report.permits = Some(number);
            report.count = Some(number);
        }
        _ => unreachable!("a string count is no lock"),
    }
    Ok(report)
}

/// What a count is, told by who listens (`semaphore` connections on a semaphore's channel,
/// `latch` on a latch's) unless a permit semaphore's expiries exist (`permit_zset`): its
/// kind, the connections that wait on it, and a note when the kind cannot be told.
fn count_kind(permit_zset: bool, semaphore: u64, latch: u64) -> (Kind, u64, Option<String>) {
    if permit_zset {
        return (Kind::PermitSemaphore, semaphore, None);
    }
    match (semaphore, latch) {
        (0, latch) if latch > 0 => (Kind::CountDownLatch, latch, None),
        (semaphore, 0) if semaphore > 0 => (Kind::Semaphore, semaphore, None),
        (semaphore, latch) => (
            Kind::SemaphoreOrLatch,
            semaphore + latch,
            Some(if semaphore + latch == 0 {
                "nobody waits on it, and a semaphore's permits look like a latch's count".to_owned()
            } else {
                format!(
                    "{semaphore} connections wait on it as on a semaphore and {latch} as \
                     on a latch: the kind cannot be told"
                )
            }),
        ),
    }
}

/// A permit-expirable semaphore's permits out, soonest expiry first (at most 1000).
fn permits_out(redis: &mut Connection, name: &str, now_ms: i64) -> Result<Vec<Permit>, Failure> {
    let permits: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg(layout::permit_expiries(name))
        .arg(0)
        .arg(MAX_QUEUE_SHOWN - 1)
        .arg("WITHSCORES")
        .query(redis)?;
    Ok(permits
        .into_iter()
        .map(|(id, expiry)| Permit {
            id: printable_id(&id),
            expires_in_ms: expiry as i64 - now_ms,
        })
        .collect())
}

/// A permit id as text: itself when it is printable UTF-8, else its bytes in hex.
fn printable_id(id: &[u8]) -> String {
    match std::str::from_utf8(id) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_owned(),
        _ => id.iter().map(|byte| format!("{byte:02x}")).collect(),
    }
}

/// How many connections listen on each of `channels`, in order: subscribers
/// (`PUBSUB NUMSUB`) and, where the server has shard channels (Redis 7, Valkey), shard
/// subscribers (`PUBSUB SHARDNUMSUB`: a cluster's waiters listen that way).
pub fn subscribers(redis: &mut Connection, channels: &[&str]) -> Result<Vec<u64>, Failure> {
    let mut by_channel: HashMap<String, u64> = HashMap::new();
    for kind in ["NUMSUB", "SHARDNUMSUB"] {
        let counts: Vec<(String, u64)> =
            match redis::cmd("PUBSUB").arg(kind).arg(channels).query(redis) {
                Ok(counts) => counts,
                // A server before Redis 7 has no shard channels.
                Err(_) if kind == "SHARDNUMSUB" => Vec::new(),
                Err(error) => return Err(error.into()),
            };
        for (channel, count) in counts {
            *by_channel.entry(channel).or_default() += count;
        }
    }
    Ok(channels
        .iter()
        .map(|channel| by_channel.get(*channel).copied().unwrap_or(0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(field, value)| (field.as_bytes().to_vec(), value.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn a_read_write_lock_hash_has_its_writer_first_and_readers_after() {
        let read = lock_fields(
            "p",
            &fields(&[("mode", "write"), ("b:2", "1"), ("a:1:write", "2")]),
        )
        .unwrap();
        assert_eq!(read.mode.as_deref(), Some("write"));
        let roles: Vec<_> = read
            .holders
            .iter()
            .map(|holder| (holder.id.as_str(), holder.role, holder.count))
            .collect();
        assert_eq!(roles, [("a:1", Role::Writer, 2), ("b:2", Role::Reader, 1)]);
    }

    #[test]
    fn a_hash_of_other_values_is_no_lock() {
        assert!(lock_fields("h", &fields(&[("name", "x")])).is_err());
        let plain = lock_fields("l", &fields(&[("c:3", "1")])).unwrap();
        assert_eq!(plain.holders[0].role, Role::Holder);
        assert_eq!(plain.holders[0].chain_or_thread, Some(3));
    }

    #[test]
    fn binary_permit_ids_print_in_hex() {
        assert_eq!(printable_id(b"p-1"), "p-1");
        assert_eq!(printable_id(&[0, 0xff]), "00ff");
    }
}
