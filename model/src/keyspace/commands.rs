//! The commands of the modelled server, by the type of value they work on: what the crate's
//! scripts call, with Redis's replies and errors.

use std::collections::{BTreeMap, VecDeque};

use super::{
    arity, float, int, range, text, Args, Bytes, Entry, Fields, Keyspace, Reply, Score, Value,
};

/// What a command found under its key.
enum Found<'a, T> {
    Absent,
    Is(&'a mut T),
    WrongType,
}

macro_rules! typed {
    ($fn:ident, $variant:ident, $ty:ty) => {
        fn $fn(&mut self, key: &str) -> Found<'_, $ty> {
            match self.live_mut(key) {
                None => Found::Absent,
                Some(Entry {
                    value: Value::$variant(value),
                    ..
                }) => Found::Is(value),
                Some(_) => Found::WrongType,
            }
        }
    };
}

impl Keyspace {
    typed!(string, Str, Bytes);
    typed!(hash, Hash, Fields);
    typed!(list, List, VecDeque<Bytes>);
    typed!(zset, ZSet, BTreeMap<Bytes, Score>);
    typed!(stream, Stream, Vec<super::StreamEntry>);

    /// The value of `key`, made with `empty` when absent: `None` when it is of another type.
    fn created(&mut self, key: &str, empty: Value) -> Option<&mut Value> {
        let kind = std::mem::discriminant(&empty);
        if self.live_mut(key).is_none() {
            self.entries.insert(
                key.to_owned(),
                Entry {
                    value: empty,
                    expires_at: None,
                },
            );
        }
        let entry = self.entries.get_mut(key)?;
        (std::mem::discriminant(&entry.value) == kind).then_some(&mut entry.value)
    }

    pub(super) fn key_command(&mut self, name: &str, args: Args) -> Reply {
        let Some(key) = args.first().map(|key| text(key)) else {
            return arity(name);
        };
        match name {
            "get" => match self.string(&key) {
                Found::Absent => Reply::Nil,
                Found::Is(value) => Reply::Bulk(value.clone()),
                Found::WrongType => Reply::wrong_type(),
            },
            "set" => self.set(&key, &args[1..]),
            "del" => {
                let gone = args
                    .iter()
                    .filter(|key| {
                        let key = text(key);
                        self.live_mut(&key).is_some() && self.entries.remove(&key).is_some()
                    })
                    .count();
                Reply::Int(gone as i64)
            }
            "exists" => Reply::Int(self.live_mut(&key).is_some() as i64),
            "incr" => self.incr_by(&key, 1),
            "decr" => self.incr_by(&key, -1),
            "incrby" | "decrby" => match args.get(1).and_then(|by| int(by)) {
                None => Reply::not_an_integer(),
                Some(by) if name == "incrby" => self.incr_by(&key, by),
                Some(by) => match by.checked_neg() {
                    Some(by) => self.incr_by(&key, by),
                    None => Reply::Error("ERR decrement would overflow".into()),
                },
            },
            "pexpire" => self.pexpire(&key, args.get(1)),
            "pttl" => {
                let now = self.now_ms;
                match self.live_mut(&key) {
                    None => Reply::Int(-2),
                    Some(Entry {
                        expires_at: None, ..
                    }) => Reply::Int(-1),
                    Some(Entry {
                        expires_at: Some(at),
                        ..
                    }) => Reply::Int((*at - now) as i64),
                }
            }
            "type" => Reply::Status(
                self.live_mut(&key)
                    .map_or("none", |entry| entry.value.type_name())
                    .to_owned(),
            ),
            _ => unreachable!("a key command"),
        }
    }

    fn set(&mut self, key: &str, args: Args) -> Reply {
        let (value, options) = match args.split_first() {
            Some(split) => split,
            None => return arity("set"),
        };
        let expires_at = match options {
            [] => None,
            [px, ms] if text(px).eq_ignore_ascii_case("px") => match int(ms) {
                Some(ms) if ms > 0 => Some(self.now_ms + ms as u64),
                _ => return Reply::Error("ERR invalid expire time in 'set' command".into()),
            },
            _ => return Reply::Error("ERR syntax error".into()),
        };
        self.entries.insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value.clone()),
                expires_at,
            },
        );
        Reply::Status("OK".into())
    }

    fn incr_by(&mut self, key: &str, by: i64) -> Reply {
        let current = match self.string(key) {
            Found::Absent => 0,
            Found::Is(value) => match int(value) {
                Some(current) => current,
                None => return Reply::not_an_integer(),
            },
            Found::WrongType => return Reply::wrong_type(),
        };
        let Some(next) = current.checked_add(by) else {
            return Reply::Error("ERR increment or decrement would overflow".into());
        };
        let value = next.to_string().into_bytes();
        match self.live_mut(key) {
            Some(entry) => entry.value = Value::Str(value),
            None => {
                self.entries.insert(
                    key.to_owned(),
                    Entry {
                        value: Value::Str(value),
                        expires_at: None,
                    },
                );
            }
        }
        Reply::Int(next)
    }

    fn pexpire(&mut self, key: &str, ms: Option<&Bytes>) -> Reply {
        let Some(ms) = ms.and_then(|ms| int(ms)) else {
            return Reply::not_an_integer();
        };
        let now = self.now_ms;
        let Some(entry) = self.live_mut(key) else {
            return Reply::Int(0);
        };
        if ms <= 0 {
            self.entries.remove(key);
        } else {
            entry.expires_at = Some(now + ms as u64);
        }
        Reply::Int(1)
    }

    pub(super) fn hash_command(&mut self, name: &str, args: Args) -> Reply {
        let Some(key) = args.first().map(|key| text(key)) else {
            return arity(name);
        };
        let fields = &args[1..];
        if name == "hset" || name == "hincrby" {
            return self.hash_write(name, &key, fields);
        }
        let hash = match self.hash(&key) {
            Found::WrongType => return Reply::wrong_type(),
            Found::Absent => None,
            Found::Is(hash) => Some(hash),
        };
        if name == "hdel" {
            let removed = hash.map_or(0, |hash| {
                fields
                    .iter()
                    .filter(|field| hash.remove(field).is_some())
                    .count()
            });
            return Reply::Int(removed as i64);
        }
        let empty = Fields::default();
        let hash_ref: &Fields = hash.map_or(&empty, |hash| &*hash);
        match name {
            "hget" => fields
                .first()
                .and_then(|field| hash_ref.get(field))
                .map_or(Reply::Nil, |value| Reply::Bulk(value.clone())),
            "hexists" => {
                Reply::Int(fields.first().is_some_and(|f| hash_ref.contains_key(f)) as i64)
            }
            "hgetall" => Reply::Array(
                hash_ref
                    .iter()
                    .flat_map(|(field, value)| {
                        [Reply::Bulk(field.clone()), Reply::Bulk(value.clone())]
                    })
                    .collect(),
            ),
            "hkeys" => Reply::Array(
                hash_ref
                    .keys()
                    .map(|field| Reply::Bulk(field.clone()))
                    .collect(),
            ),
            "hlen" => Reply::Int(hash_ref.len() as i64),
            "hmget" => Reply::Array(
                fields
                    .iter()
                    .map(|field| {
                        hash_ref
                            .get(field)
                            .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                    })
                    .collect(),
            ),
            _ => unreachable!("a hash command"),
        }
    }

    fn hash_write(&mut self, name: &str, key: &str, fields: Args) -> Reply {
        if name == "hset" && (fields.is_empty() || !fields.len().is_multiple_of(2)) {
            return arity(name);
        }
        let Some(Value::Hash(hash)) = self.created(key, Value::Hash(Fields::default())) else {
            return Reply::wrong_type();
        };
        if name == "hset" {
            let added = fields
                .chunks(2)
                .filter(|pair| hash.insert(pair[0].clone(), pair[1].clone()).is_none())
                .count();
            return Reply::Int(added as i64);
        }
        let (Some(field), Some(by)) = (fields.first(), fields.get(1).and_then(|by| int(by))) else {
            return Reply::not_an_integer();
        };
        let current = match hash.get(field).map(|value| int(value)) {
            None => 0,
            Some(Some(current)) => current,
            Some(None) => return Reply::Error("ERR hash value is not an integer".into()),
        };
        let Some(next) = current.checked_add(by) else {
            return Reply::Error("ERR increment or decrement would overflow".into());
        };
        hash.insert(field.clone(), next.to_string().into_bytes());
        Reply::Int(next)
    }

    pub(super) fn list_command(&mut self, name: &str, args: Args) -> Reply {
        let Some(key) = args.first().map(|key| text(key)) else {
            return arity(name);
        };
        if name == "rpush" {
            let Some(Value::List(list)) = self.created(&key, Value::List(VecDeque::new())) else {
                return Reply::wrong_type();
            };
            list.extend(args[1..].iter().cloned());
            return Reply::Int(list.len() as i64);
        }
        let list = match self.list(&key) {
            Found::WrongType => return Reply::wrong_type(),
            Found::Absent => return list_of_nothing(name),
            Found::Is(list) => list,
        };
        let number = |index: usize| args.get(index).and_then(|arg| int(arg));
        match name {
            "lindex" => {
                let Some(index) = number(1) else {
                    return Reply::not_an_integer();
                };
                let index = if index < 0 {
                    list.len() as i64 + index
                } else {
                    index
                };
                usize::try_from(index)
                    .ok()
                    .and_then(|index| list.get(index))
                    .map_or(Reply::Nil, |item| Reply::Bulk(item.clone()))
            }
            "lpop" => list.pop_front().map_or(Reply::Nil, Reply::Bulk),
            "lrange" => {
                let (Some(start), Some(stop)) = (number(1), number(2)) else {
                    return Reply::not_an_integer();
                };
                Reply::Array(
                    list.range(range(list.len(), start, stop))
                        .map(|item| Reply::Bulk(item.clone()))
                        .collect(),
                )
            }
            "lrem" => {
                let Some(item) = args.get(2) else {
                    return arity(name);
                };
                let before = list.len();
                list.retain(|each| each != item);
                Reply::Int((before - list.len()) as i64)
            }
            _ => unreachable!("a list command"),
        }
    }

    pub(super) fn zset_command(&mut self, name: &str, args: Args) -> Reply {
        let Some(key) = args.first().map(|key| text(key)) else {
            return arity(name);
        };
        match name {
            "zadd" => return self.zadd(&key, &args[1..]),
            "zincrby" => return self.zincrby(&key, &args[1..]),
            _ => {}
        }
        let zset = match self.zset(&key) {
            Found::WrongType => return Reply::wrong_type(),
            Found::Absent => None,
            Found::Is(zset) => Some(zset),
        };
        if name == "zrem" {
            let removed = zset.map_or(0, |zset| {
                args[1..]
                    .iter()
                    .filter(|member| zset.remove(*member).is_some())
                    .count()
            });
            return Reply::Int(removed as i64);
        }
        let empty = BTreeMap::new();
        let members: &BTreeMap<Bytes, Score> = zset.map_or(&empty, |zset| &*zset);
        match name {
            "zscore" => args
                .get(1)
                .and_then(|member| members.get(member))
                .map_or(Reply::Nil, |score| Reply::bulk(score.text())),
            "zrange" => zrange(members, &args[1..]),
            "zrangebyscore" => zrangebyscore(members, &args[1..]),
            _ => unreachable!("a sorted set command"),
        }
    }

    fn zadd(&mut self, key: &str, args: Args) -> Reply {
        let (only_existing, pairs) = match args.first().map(|arg| text(arg).to_ascii_lowercase()) {
            Some(flag) if flag == "xx" => (true, &args[1..]),
            _ => (false, args),
        };
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Reply::Error("ERR syntax error".into());
        }
        let Some(scores) = pairs
            .chunks(2)
            .map(|pair| float(&pair[0]))
            .collect::<Option<Vec<_>>>()
        else {
            return Reply::Error("ERR value is not a valid float".into());
        };
        if only_existing && self.live_mut(key).is_none() {
            return Reply::Int(0);
        }
        let Some(Value::ZSet(zset)) = self.created(key, Value::ZSet(BTreeMap::new())) else {
            return Reply::wrong_type();
        };
        let mut added = 0;
        for (pair, score) in pairs.chunks(2).zip(scores) {
            let exists = zset.contains_key(&pair[1]);
            if only_existing && !exists {
                continue;
            }
            added += !exists as i64;
            zset.insert(pair[1].clone(), Score(score));
        }
        Reply::Int(added)
    }

    fn zincrby(&mut self, key: &str, args: Args) -> Reply {
        let [by, member] = args else {
            return arity("zincrby");
        };
        let Some(by) = float(by) else {
            return Reply::Error("ERR value is not a valid float".into());
        };
        let Some(Value::ZSet(zset)) = self.created(key, Value::ZSet(BTreeMap::new())) else {
            return Reply::wrong_type();
        };
        let score = zset.get(member).map_or(0.0, |score| score.0) + by;
        zset.insert(member.clone(), Score(score));
        Reply::bulk(Score(score).text())
    }

    pub(super) fn stream_command(&mut self, name: &str, args: Args) -> Reply {
        let Some(key) = args.first().map(|key| text(key)) else {
            return arity(name);
        };
        if name == "xrevrange" {
            return match self.stream(&key) {
                Found::WrongType => Reply::wrong_type(),
                Found::Absent => Reply::Array(Vec::new()),
                Found::Is(stream) => Reply::Array(
                    stream
                        .iter()
                        .rev()
                        .take(xrevrange_count(&args[1..]))
                        .map(stream_entry)
                        .collect(),
                ),
            };
        }
        self.xadd(&key, &args[1..])
    }

    /// `XADD key MAXLEN ~ n * field value ...` (the only form the scripts send). The trim is
    /// to `n` exactly, where Redis may keep more: the scripts never read past the last entry.
    fn xadd(&mut self, key: &str, args: Args) -> Reply {
        let (keep, rest) = match args {
            [maxlen, approx, n, rest @ ..]
                if text(maxlen).eq_ignore_ascii_case("maxlen") && text(approx) == "~" =>
            {
                (int(n).map(|n| n.max(0) as usize), rest)
            }
            _ => (None, args),
        };
        let Some((star, fields)) = rest.split_first() else {
            return arity("xadd");
        };
        if text(star) != "*" || fields.is_empty() || !fields.len().is_multiple_of(2) {
            return arity("xadd");
        }
        let now = self.now_ms;
        let Some(Value::Stream(stream)) = self.created(key, Value::Stream(Vec::new())) else {
            return Reply::wrong_type();
        };
        let id = match stream.last() {
            Some(((ms, seq), _)) if *ms >= now => (*ms, seq + 1),
            _ => (now, 0),
        };
        let pairs = fields
            .chunks(2)
            .map(|pair| (pair[0].clone(), pair[1].clone()));
        stream.push((id, pairs.collect()));
        if let Some(keep) = keep {
            let over = stream.len().saturating_sub(keep);
            stream.drain(..over);
        }
        Reply::bulk(format!("{}-{}", id.0, id.1))
    }
}

fn list_of_nothing(name: &str) -> Reply {
    match name {
        "lrange" => Reply::Array(Vec::new()),
        "lrem" => Reply::Int(0),
        _ => Reply::Nil,
    }
}

/// The members in Redis's order: by score, then by member.
fn ordered(members: &BTreeMap<Bytes, Score>) -> Vec<(&Bytes, Score)> {
    let mut ordered: Vec<_> = members
        .iter()
        .map(|(member, score)| (member, *score))
        .collect();
    ordered.sort_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then_with(|| a.0.cmp(b.0)));
    ordered
}

fn with_scores(items: &[(&Bytes, Score)], scores: bool) -> Reply {
    let mut reply = Vec::new();
    for (member, score) in items {
        reply.push(Reply::Bulk((*member).clone()));
        if scores {
            reply.push(Reply::bulk(score.text()));
        }
    }
    Reply::Array(reply)
}

/// `ZRANGE key start stop [WITHSCORES]`.
fn zrange(members: &BTreeMap<Bytes, Score>, args: Args) -> Reply {
    let (Some(start), Some(stop)) = (
        args.first().and_then(|a| int(a)),
        args.get(1).and_then(|a| int(a)),
    ) else {
        return Reply::not_an_integer();
    };
    let scores = args
        .get(2)
        .is_some_and(|arg| text(arg).eq_ignore_ascii_case("withscores"));
    let ordered = ordered(members);
    with_scores(&ordered[range(ordered.len(), start, stop)], scores)
}

/// `ZRANGEBYSCORE key min max [LIMIT offset count]` (inclusive bounds).
fn zrangebyscore(members: &BTreeMap<Bytes, Score>, args: Args) -> Reply {
    let (Some(min), Some(max)) = (
        args.first().and_then(|a| float(a)),
        args.get(1).and_then(|a| float(a)),
    ) else {
        return Reply::Error("ERR min or max is not a float".into());
    };
    let (offset, count) = match &args[2..] {
        [limit, offset, count] if text(limit).eq_ignore_ascii_case("limit") => (
            int(offset).unwrap_or(0).max(0) as usize,
            int(count).unwrap_or(-1),
        ),
        _ => (0, -1),
    };
    let count = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    let inside: Vec<_> = ordered(members)
        .into_iter()
        .filter(|(_, score)| score.0 >= min && score.0 <= max)
        .skip(offset)
        .take(count)
        .collect();
    with_scores(&inside, false)
}

fn xrevrange_count(args: Args) -> usize {
    match args {
        [_, _, count_word, count] if text(count_word).eq_ignore_ascii_case("count") => {
            int(count).map_or(usize::MAX, |count| count.max(0) as usize)
        }
        _ => usize::MAX,
    }
}

fn stream_entry(entry: &super::StreamEntry) -> Reply {
    let ((ms, seq), fields) = entry;
    let fields = fields
        .iter()
        .flat_map(|(field, value)| [Reply::Bulk(field.clone()), Reply::Bulk(value.clone())])
        .collect();
    Reply::Array(vec![
        Reply::bulk(format!("{ms}-{seq}")),
        Reply::Array(fields),
    ])
}
