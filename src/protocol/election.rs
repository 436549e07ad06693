//! The scripts of an election (a plain lock whose holder is the leader, with a leader
//! record, a change log and a channel of its own; see [`ElectionKeys`]), with their
//! arguments and the meaning of their replies. A candidate takes the lock with the lock's own
//! acquisition script ([`ElectionLock`], its kind of lock); once its guard exists, it announces
//! itself ([`ElectionLock::announce`]); its last release is its resignation.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{FromRedisValue, Value};

use super::lock::{plain, LockScripts, ReleaseArgs, TryArgs, UndoArgs};
use super::names::{ElectionKeys, LockKeys, RELEASE_MESSAGE};
use super::script::{lua_script, ScriptCall};
use super::Request;
use crate::layout;

lua_script!(ANNOUNCE = "announce.lua");
lua_script!(RESIGN = "release_levels.lua" + "lock_give.lua" + "resign.lua");
lua_script!(READ_LEADER = "leader_read.lua");

/// About how many changes an election's log keeps.
const LOG_LENGTH: u32 = 1000;

/// An election's lock, for a candidate: a plain lock (its scripts take and give back levels)
/// whose last release is its holder's resignation, with the election's keys and the value the
/// candidate campaigns with.
#[derive(Debug)]
pub(crate) struct ElectionLock {
    keys: LockKeys,
    pub(crate) election: ElectionKeys,
}

impl ElectionLock {
    /// The lock of the election `name`, for a candidate with `value`.
    pub(crate) fn new(name: &str, value: &str) -> Self {
        ElectionLock {
            keys: LockKeys::new(name, layout::lock_channel(name)),
            election: ElectionKeys::new(name, value),
        }
    }

    /// Announces the candidate `holder` as the leader of its election, with the term `term`,
    /// once it holds the lock: answers 1 when it leads, 0 when it does not hold the lock
    /// (nothing is announced then).
    pub(crate) fn announce(&self, holder: &str, term: u64) -> ScriptCall {
        let election = &self.election;
        let keys = [
            &*self.keys.name,
            &election.record,
            &election.log,
            &election.channel,
        ];
        ScriptCall::new(&ANNOUNCE, &keys)
            .arg(holder)
            .arg(&election.value)
            .arg(term)
            .arg(LOG_LENGTH)
    }
}

impl LockScripts for ElectionLock {
    fn keys(&self) -> &LockKeys {
        &self.keys
    }

    fn acquire_call(&self, this_try: &TryArgs<'_>) -> ScriptCall {
        plain::acquire(&self.keys, this_try)
    }

    /// Releases one level of the leader, as the lock's release does; its last level is its
    /// resignation.
    fn release_call(&self, release: &ReleaseArgs<'_>) -> ScriptCall {
        let election = &self.election;
        let keys = [
            &*self.keys.name,
            &self.keys.channel,
            release.receipt,
            &election.record,
            &election.log,
            &election.channel,
        ];
        ScriptCall::new(&RESIGN, &keys)
            .arg(release.holder)
            .arg(release.lease_ms)
            .arg(release.receipt_until())
            .arg(RELEASE_MESSAGE)
            .arg(release.levels_left)
            .arg(LOG_LENGTH)
    }

    fn undo_call(&self, undo: &UndoArgs<'_>) -> ScriptCall {
        plain::undo(&self.keys, undo)
    }

    fn force_release_call(&self, request: &Request) -> ScriptCall {
        plain::force_release(&self.keys, request)
    }
}

/// Reads the leader of the election `name` and where its log ends.
pub(crate) fn read_leader(name: &str, election: &ElectionKeys) -> ScriptCall {
    ScriptCall::new(&READ_LEADER, &[name, &election.record, &election.log])
}

/// An election's leader, as its record or a log entry says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LeaderRecord {
    pub(crate) holder: String,
    pub(crate) value: String,
    pub(crate) term: u64,
    pub(crate) since: SystemTime,
}

impl LeaderRecord {
    fn from_fields(holder: String, value: String, term: &str, since: &str) -> Option<Self> {
        let since = UNIX_EPOCH + Duration::from_millis(since.parse().ok()?);
        Some(LeaderRecord {
            holder,
            value,
            term: term.parse().ok()?,
            since,
        })
    }
}

/// What [`read_leader`] answered: the leader, if any, and the id of the log's last entry
/// (empty when the log is empty).
#[derive(Debug)]
pub(crate) struct LeaderNow {
    pub(crate) leader: Option<LeaderRecord>,
    pub(crate) last_change: String,
}

impl FromRedisValue for LeaderNow {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        let mut fields: Vec<String> = FromRedisValue::from_redis_value(value)?;
        let last_change = std::mem::take(fields.first_mut().ok_or("empty answer")?);
        let leader = match &mut fields[1..] {
            [holder, value, term, since] => Some(
                LeaderRecord::from_fields(
                    std::mem::take(holder),
                    std::mem::take(value),
                    term,
                    since,
                )
                .ok_or("a malformed leader record")?,
            ),
            _ => None,
        };
        Ok(LeaderNow {
            leader,
            last_change,
        })
    }
}

/// One entry of an election's change log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoggedChange {
    pub(crate) id: String,
    /// Elected (`true`) or resigned.
    pub(crate) elected: bool,
    pub(crate) leader: LeaderRecord,
}

/// The arguments of `XRANGE` that read the entries of `log` after the entry `after` (from the
/// start when empty), `count` at most.
pub(crate) fn changes_after(log: &str, after: &str, count: usize) -> redis::Cmd {
    let start = next_id(after);
    let mut command = redis::cmd("XRANGE");
    command.arg(log).arg(start).arg("+").arg("COUNT").arg(count);
    command
}

/// The smallest stream id after `id` (`-` for the start when `id` is empty): exclusive ranges
/// need Redis 6.2, this works everywhere streams do.
fn next_id(id: &str) -> String {
    match id.split_once('-') {
        Some((millis, sequence)) => match sequence.parse::<u64>() {
            Ok(sequence) => format!("{millis}-{}", sequence + 1),
            Err(_) => id.to_owned(),
        },
        None => "-".to_owned(),
    }
}

/// Reads what [`changes_after`] answered: each entry's id, and the change it records
/// (`None` for an entry that is not one, which a reader passes over).
pub(crate) fn logged_changes(
    value: Value,
) -> Result<Vec<(String, Option<LoggedChange>)>, redis::ParsingError> {
    // Fields as bytes: an entry someone else wrote need not be text, and is passed over.
    let entries: Vec<(String, Vec<Vec<u8>>)> = FromRedisValue::from_redis_value(value)?;
    Ok(entries
        .into_iter()
        .map(|(id, fields)| {
            let text = fields
                .chunks_exact(2)
                .filter_map(|pair| {
                    let field = String::from_utf8(pair[0].clone()).ok()?;
                    Some((field, String::from_utf8(pair[1].clone()).ok()?))
                })
                .collect();
            let change = logged_change(&id, text);
            (id, change)
        })
        .collect())
}

fn logged_change(id: &str, mut fields: HashMap<String, String>) -> Option<LoggedChange> {
    let elected = match fields.get("change")?.as_str() {
        "elected" => true,
        "resigned" => false,
        _ => return None,
    };
    let leader = LeaderRecord::from_fields(
        fields.remove("holder")?,
        fields.remove("value")?,
        fields.get("term")?,
        fields.get("since")?,
    )?;
    Some(LoggedChange {
        id: id.to_owned(),
        elected,
        leader,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_stream_id_follows_the_last() {
        assert_eq!(next_id(""), "-");
        assert_eq!(next_id("1700000000000-0"), "1700000000000-1");
        assert_eq!(next_id("1700000000000-41"), "1700000000000-42");
    }

    #[test]
    fn a_log_entry_reads_as_a_change() {
        let entry = |change: &str| {
            Value::Array(vec![Value::Array(vec![
                Value::BulkString(b"5-0".to_vec()),
                Value::Array(
                    [
                        "change", change, "holder", "c:1", "value", "host-a", "term", "7", "since",
                        "1500",
                    ]
                    .iter()
                    .map(|field| Value::BulkString(field.as_bytes().to_vec()))
                    .collect(),
                ),
            ])])
        };
        let changes = logged_changes(entry("elected")).unwrap();
        assert_eq!(changes.len(), 1);
        let change = changes[0].1.as_ref().unwrap();
        assert!(change.elected);
        assert_eq!(change.leader.term, 7);
        assert_eq!(
            change.leader.since,
            UNIX_EPOCH + Duration::from_millis(1500)
        );
        let other = logged_changes(entry("other")).unwrap();
        assert_eq!(other, [("5-0".to_owned(), None)]);
    }
}
