//! Guarded writes: a holder's writes to its application's own keys that Redis applies only
//! while the hold is current, in one script with the ownership check. [`Writes`] lists fixed
//! writes (set, delete, hash set, increment); [`GuardedScript`] wraps a caller's own Lua body.
//! A [`LockGuard`](crate::LockGuard) runs them
//! ([`guarded_write`](crate::LockGuard::guarded_write),
//! [`run_guarded`](crate::LockGuard::run_guarded)) through [`run`], which checks the keys,
//! sends the call once per request (safe to send again through an outage) and reads the
//! answer. Uses the client and the protocol; knows nothing of the lock beyond where its hold
//! is recorded.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::client::Client;
use crate::error::{Error, LostReason, Result};
use crate::protocol::guarded::{self, GuardedAnswer, HoldAt, Write};
use crate::protocol::names;
use crate::protocol::script::LuaScript;
use crate::protocol::slot::{hash_tag, key_slot};
use crate::protocol::{Request, ScriptCall};

/// Writes to a caller's own keys that a [`LockGuard`](crate::LockGuard) applies only while it
/// holds the lock: see [`guarded_write`](crate::LockGuard::guarded_write). They run in order,
/// in one script, after the check that the hold is current.
///
/// ```
/// use std::time::Duration;
///
/// let mut writes = redlease::Writes::new();
/// writes
///     .hash_set("export:{nightly}:status", "state", "done")
///     .increment_by("export:{nightly}:runs", 1)
///     .set_with_ttl("export:{nightly}:last", "2026-11-26", Duration::from_secs(86_400))
///     .delete("export:{nightly}:scratch");
/// assert_eq!(writes.len(), 4);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Writes {
    writes: Vec<(String, Write)>,
    /// The first write that cannot be sent, reported by the call.
    invalid: Option<String>,
}

impl Writes {
    /// No writes yet.
    pub fn new() -> Self {
        Writes::default()
    }

    /// `SET key value`.
    pub fn set(&mut self, key: &str, value: impl AsRef<[u8]>) -> &mut Self {
        let value = value.as_ref().to_vec();
        self.push(
            key,
            Write::Set {
                value,
                ttl_ms: None,
            },
        )
    }

    /// `SET key value PX ttl`: the value expires after `ttl` (whole milliseconds, at least 1).
    pub fn set_with_ttl(&mut self, key: &str, value: impl AsRef<[u8]>, ttl: Duration) -> &mut Self {
        let millis = match names::lease_millis("guarded write time to live", ttl) {
            Ok(millis) => millis,
            Err(Error::InvalidArgument(why)) => {
                self.invalid.get_or_insert(why);
                0
            }
            Err(other) => {
                self.invalid.get_or_insert(other.to_string());
                0
            }
        };
        let value = value.as_ref().to_vec();
        self.push(
            key,
            Write::Set {
                value,
                ttl_ms: Some(millis),
            },
        )
    }

    /// `DEL key`.
    pub fn delete(&mut self, key: &str) -> &mut Self {
        self.push(key, Write::Delete)
    }

    /// `HSET key field value`.
    pub fn hash_set(
        &mut self,
        key: &str,
        field: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        let (field, value) = (field.as_ref().to_vec(), value.as_ref().to_vec());
        self.push(key, Write::HashSet { field, value })
    }

    /// `INCRBY key amount`.
    pub fn increment_by(&mut self, key: &str, amount: i64) -> &mut Self {
        self.push(key, Write::IncrementBy(amount))
    }

    /// How many writes there are.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    fn push(&mut self, key: &str, write: Write) -> &mut Self {
        if key.is_empty() {
            self.invalid
                .get_or_insert_with(|| "guarded write: a key must not be empty".into());
        }
        self.writes.push((key.to_owned(), write));
        self
    }

    /// The writes, or why they cannot be sent.
    fn checked(&self) -> Result<&[(String, Write)]> {
        if let Some(why) = &self.invalid {
            return Err(Error::InvalidArgument(why.clone()));
        }
        if self.writes.is_empty() {
            return Err(Error::InvalidArgument(
                "guarded write: no writes given".into(),
            ));
        }
        Ok(&self.writes)
    }
}

/// A caller's own Lua body that a [`LockGuard`](crate::LockGuard) runs only while it holds
/// the lock: see [`run_guarded`](crate::LockGuard::run_guarded). Build it once and keep it:
/// Redis caches it by its hash.
///
/// The body is a Lua script as `EVAL` takes it (without a `#!` line): it sees its own `KEYS`
/// and `ARGV` and answers with `return`. It runs after the check that the hold is current,
/// in the same script, so nothing else runs on the server in between. Redis does not roll a
/// script back: a body that fails after writing keeps what it wrote.
///
/// ```
/// let capped_push = redlease::GuardedScript::new(
///     "redis.call('rpush', KEYS[1], ARGV[1])
///      redis.call('ltrim', KEYS[1], -tonumber(ARGV[2]), -1)
///      return redis.call('llen', KEYS[1])",
/// );
/// # drop(capped_push);
/// ```
#[derive(Clone)]
pub struct GuardedScript {
    script: Arc<LuaScript>,
}

impl GuardedScript {
    /// The script around `body`.
    pub fn new(body: &str) -> Self {
        GuardedScript {
            script: guarded::script_around(body),
        }
    }
}

impl std::fmt::Debug for GuardedScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedScript")
            .field("hash", &self.script.hash(false))
            .finish()
    }
}

/// Where a guarded call checks its hold, and what to tell when it is gone.
pub(crate) struct Holder<'a> {
    pub(crate) client: &'a Client,
    /// The lock's name: its hash, and the name requests and errors are of.
    pub(crate) name: &'a str,
    /// The hold's field in the hash.
    pub(crate) field: Cow<'a, str>,
    /// The chain's key in the watchdog, and its holder id, to report it lost.
    pub(crate) watch_key: &'a str,
    pub(crate) holder: &'a str,
}

/// Runs the fixed `writes` while `holder`'s hold is current.
pub(crate) fn write(holder: &Holder<'_>, writes: &Writes) -> Result<Vec<Value>> {
    let writes = writes.checked()?;
    let keys: Vec<&str> = writes.iter().map(|(key, _)| key.as_str()).collect();
    run(holder, &keys, |at, request| {
        guarded::guarded_write(writes, at, request)
    })
}

/// Runs `script` with `keys` and `args` while `holder`'s hold is current: what its body
/// answered.
pub(crate) fn run_script(
    holder: &Holder<'_>,
    script: &GuardedScript,
    keys: &[&str],
    args: &[Vec<u8>],
) -> Result<Value> {
    if keys.iter().any(|key| key.is_empty()) {
        return Err(Error::InvalidArgument(
            "guarded script: a key must not be empty".into(),
        ));
    }
    let answers = run(holder, keys, |at, request| {
        guarded::guarded_script(&script.script, keys, args, at, request)
    })?;
    Ok(answers.into_iter().next().unwrap_or(Value::Nil))
}

/// Checks that `keys` may go with the lock's name, sends the call `call` makes for a new
/// request (again through an outage, with the same request), and reads its answer.
fn run(
    holder: &Holder<'_>,
    keys: &[&str],
    call: impl Fn(HoldAt<'_>, &Request) -> ScriptCall,
) -> Result<Vec<Value>> {
    let client = holder.client;
    check_slots(client, holder.name, keys)?;
    let at = HoldAt {
        hash: holder.name,
        field: &holder.field,
    };
    let acked = client.change_acknowledged::<Value>(holder.name, |request| call(at, request))?;
    match guarded::guarded_answer(acked.answer) {
        GuardedAnswer::Written(answers) => match acked.unreplicated {
            Some(why) => Err(why.into_error(holder.name)),
            None => Ok(answers),
        },
        GuardedAnswer::Failed { applied, message } => Err(Error::GuardedWriteFailed {
            name: holder.name.to_owned(),
            applied,
            message,
        }),
        GuardedAnswer::NotHeld => {
            client
                .watchdog()
                .chain_gone(holder.watch_key, holder.holder);
            Err(Error::LockLost {
                name: holder.name.to_owned(),
                reason: LostReason::NotHeldAnymore,
            })
        }
        GuardedAnswer::Unexpected(answer) => Err(Error::Redis(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a guarded write answered something else than its script does",
            format!("{answer:?}"),
        )))),
    }
}

/// On a cluster, every key of a guarded call must be in the lock's slot (the script runs on
/// one node): a key without the lock's hash tag is refused before anything is sent.
fn check_slots(client: &Client, name: &str, keys: &[&str]) -> Result<()> {
    if client.router().cluster().is_none() {
        return Ok(());
    }
    let slot = key_slot(name.as_bytes());
    match keys.iter().find(|key| key_slot(key.as_bytes()) != slot) {
        None => Ok(()),
        Some(key) => {
            let tag = hash_tag(name.as_bytes()).unwrap_or(name.as_bytes());
            Err(Error::InvalidArgument(format!(
                "guarded write: on a Redis Cluster its keys must be in the slot of the lock \
                 {name:?} ({slot}), and {key:?} is in {}: give them the hash tag {{{}}}",
                key_slot(key.as_bytes()),
                String::from_utf8_lossy(tag)
            )))
        }
    }
}
