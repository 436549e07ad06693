//! The modelled server's data: a keyspace whose keys expire by the server's own clock, the
//! commands the crate's scripts call on it, with Redis's replies, and what was published.
//! No Lua here (`crate::lua` runs the scripts on a keyspace), no clients or network.

use std::collections::{BTreeMap, VecDeque};

/// A string as Redis holds it: bytes.
pub type Bytes = Vec<u8>;

/// A reply, as Redis gives it to a script or a client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Bytes),
    Status(String),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    fn bulk(text: impl Into<Bytes>) -> Reply {
        Reply::Bulk(text.into())
    }

    fn wrong_type() -> Reply {
        Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    }

    fn not_an_integer() -> Reply {
        Reply::Error("ERR value is not an integer or out of range".into())
    }

    /// The error's code (its first word), for an error reply.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            Reply::Error(message) => message.split(' ').next(),
            _ => None,
        }
    }
}

/// A sorted set's score: a double, compared and hashed by its bits.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Score(pub f64);

impl Eq for Score {}

impl std::hash::Hash for Score {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl Score {
    /// As Redis writes a score: an integral one without a fraction.
    pub fn text(self) -> String {
        if self.0.fract() == 0.0 && self.0.abs() < 1e17 {
            format!("{}", self.0 as i64)
        } else {
            format!("{}", self.0)
        }
    }
}

/// An entry of a stream: its id (ms, sequence) and its fields.
pub type StreamEntry = ((u64, u64), Vec<(Bytes, Bytes)>);

/// A hash's fields and values in the order Redis and Valkey keep them in a small hash (a
/// listpack, up to 128 fields): a new field goes last, a field set again keeps its place.
/// `HGETALL` and `HKEYS` answer in this order, which a script that publishes per field shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fields(Vec<(Bytes, Bytes)>);

impl Fields {
    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.0
            .iter()
            .find(|(name, _)| name.as_slice() == field)
            .map(|(_, value)| value)
    }

    pub fn contains_key(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Sets `field` to `value`: answers the value it had, if it was there.
    pub fn insert(&mut self, field: Bytes, value: Bytes) -> Option<Bytes> {
        match self.0.iter_mut().find(|(name, _)| *name == field) {
            Some((_, old)) => Some(std::mem::replace(old, value)),
            None => {
                self.0.push((field, value));
                None
            }
        }
    }

    pub fn remove(&mut self, field: &[u8]) -> Option<Bytes> {
        let at = self
            .0
            .iter()
            .position(|(name, _)| name.as_slice() == field)?;
        Some(self.0.remove(at).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> {
        self.0.iter().map(|(field, value)| (field, value))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Bytes> {
        self.0.iter().map(|(field, _)| field)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A key's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Str(Bytes),
    Hash(Fields),
    List(VecDeque<Bytes>),
    ZSet(BTreeMap<Bytes, Score>),
    Stream(Vec<StreamEntry>),
}

impl Value {
    /// The name `TYPE` answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Value::Str(_) | Value::Stream(_) => false,
            Value::Hash(hash) => hash.is_empty(),
            Value::List(list) => list.is_empty(),
            Value::ZSet(zset) => zset.is_empty(),
        }
    }
}

/// A key: its value and when it expires (ms since the epoch, on the server's clock).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub value: Value,
    pub expires_at: Option<u64>,
}

/// The server: its clock, its keys, and the messages it published (channel, message).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Keyspace {
    pub now_ms: u64,
    pub entries: BTreeMap<String, Entry>,
    pub published: Vec<(Bytes, Bytes)>,
}

type Args<'a> = &'a [Bytes];

fn text(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}

/// An integer as Redis reads one (`string2ll`): digits with an optional minus, no plus, no
/// leading zero, no `-0`.
fn int(arg: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(arg).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = text == "0"
        || (!digits.is_empty()
            && !digits.starts_with('0')
            && digits.bytes().all(|byte| byte.is_ascii_digit()));
    canonical.then(|| text.parse().ok()).flatten()
}

fn float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    match text {
        "+inf" | "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok().filter(|value: &f64| !value.is_nan()),
    }
}

/// Resolves a Redis range (`start`, `stop`, negative from the end) over `len` items.
fn range(len: usize, start: i64, stop: i64) -> std::ops::Range<usize> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return 0..0;
    }
    start as usize..stop as usize + 1
}

impl Keyspace {
    /// An empty server whose clock reads `now_ms`.
    pub fn at(now_ms: u64) -> Self {
        Keyspace {
            now_ms,
            ..Keyspace::default()
        }
    }

    /// Moves the clock on to `now_ms`, and lets the keys due by then expire.
    pub fn advance_to(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        self.entries
            .retain(|_, entry| entry.expires_at.is_none_or(|at| at >= now));
    }

    /// The live entry of `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries
            .get(key)
            .filter(|entry| entry.expires_at.is_none_or(|at| at >= self.now_ms))
    }

    fn live_mut(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now_ms;
        if self
            .entries
            .get(key)
            .is_some_and(|entry| entry.expires_at.is_some_and(|at| at < now))
        {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// Runs one command (its name and arguments) and answers its reply.
    pub fn call(&mut self, command: &[Bytes]) -> Reply {
        let Some((name, args)) = command.split_first() else {
            return Reply::Error(
                "ERR Please specify at least one argument for this redis lib call".into(),
            );
        };
        let name = text(name).to_ascii_lowercase();
        let reply = self.dispatch(&name, args);
        if let Some(key) = args.first() {
            // A collection whose last member went is no key any more.
            let key = text(key);
            if self
                .entries
                .get(&key)
                .is_some_and(|entry| entry.value.is_empty())
            {
                self.entries.remove(&key);
            }
        }
        reply
    }

    fn dispatch(&mut self, name: &str, args: Args) -> Reply {
        match name {
            "time" => self.time(),
            "publish" | "spublish" => self.publish(args),
            "get" | "set" | "del" | "exists" | "incr" | "incrby" | "decr" | "decrby"
            | "pexpire" | "pttl" | "type" => self.key_command(name, args),
            "hget" | "hset" | "hdel" | "hexists" | "hincrby" | "hgetall" | "hkeys" | "hlen"
            | "hmget" => self.hash_command(name, args),
            "lindex" | "lpop" | "lrange" | "lrem" | "rpush" => self.list_command(name, args),
            "zadd" | "zincrby" | "zrange" | "zrangebyscore" | "zrem" | "zscore" => {
                self.zset_command(name, args)
            }
            "xadd" | "xrevrange" => self.stream_command(name, args),
            _ => Reply::Error(format!("ERR unknown command '{name}' in the model")),
        }
    }

    fn time(&self) -> Reply {
        let seconds = self.now_ms / 1000;
        let micros = (self.now_ms % 1000) * 1000;
        Reply::Array(vec![
            Reply::bulk(seconds.to_string()),
            Reply::bulk(micros.to_string()),
        ])
    }

    fn publish(&mut self, args: Args) -> Reply {
        let [channel, message] = args else {
            return arity("publish");
        };
        self.published.push((channel.clone(), message.clone()));
        Reply::Int(0)
    }
}

fn arity(name: &str) -> Reply {
    Reply::Error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

mod commands;
