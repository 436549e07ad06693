//! The floors the benches hold the library against: the crate's own scripts, assembled as
//! the crate assembles them (`lua_script!` in `src/protocol/script.rs`: the publish command,
//! `deadline.lua`, the parts) and sent by hand, with the arguments the crate gives them
//! (`src/protocol/lock/plain.rs`, `src/protocol/semaphore.rs`). A change to either shows here as a
//! script error the first time a bench runs.
//!
//! Every call carries a deadline ten minutes ahead on the server's clock; the release
//! receipts and request answers the scripts keep expire soon after.

// Each bench compiles this module and uses a part of it.
#![allow(dead_code)]

use redis::{Cmd, Connection, RedisResult, Script};

/// How far ahead of the server's clock the floors' deadlines are.
const DEADLINE_AHEAD_MS: u64 = 600_000;
/// The lease the floors' locks take, as the library's default watchdog timeout.
const LEASE_MS: u64 = 30_000;

/// A script of the crate, from its parts (`include_str!` of files in `src/protocol/lua`).
pub fn script(parts: &[&str]) -> Script {
    Script::new(&format!(
        "local publish_command = 'publish'\n{}{}",
        include_str!("../../src/protocol/lua/deadline.lua"),
        parts.concat()
    ))
}

/// One call of a floor: a script, its keys and arguments.
pub struct Call<'a> {
    script: &'a Script,
    keys: Vec<String>,
    args: Vec<String>,
}

impl Call<'_> {
    /// Runs the call (loading its script first when the server lacks it).
    pub fn invoke<T: redis::FromRedisValue>(&self, connection: &mut Connection) -> RedisResult<T> {
        let mut invocation = self.script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
        invocation.invoke(connection)
    }

    /// The call as an `EVALSHA` to pack and send by hand; its script must be loaded.
    pub fn evalsha(&self) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(self.keys.len());
        cmd.arg(&self.keys).arg(&self.args);
        cmd
    }
}

/// A deadline `DEADLINE_AHEAD_MS` ahead of the server's clock, in ms since the epoch.
fn deadline_ms(connection: &mut Connection) -> RedisResult<u64> {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(connection)?;
    Ok(seconds * 1_000 + micros / 1_000 + DEADLINE_AHEAD_MS)
}

/// The plain lock's acquire and release scripts.
pub struct PlainLock {
    acquire: Script,
    release: Script,
    deadline_ms: u64,
}

impl PlainLock {
    /// The scripts, with deadlines read from the server `connection` reaches.
    pub fn new(connection: &mut Connection) -> RedisResult<Self> {
        Ok(PlainLock {
            acquire: script(&[
                include_str!("../../src/protocol/lua/try_deadline.lua"),
                include_str!("../../src/protocol/lua/acquire_levels.lua"),
                include_str!("../../src/protocol/lua/lock_take.lua"),
                include_str!("../../src/protocol/lua/acquire.lua"),
            ]),
            release: script(&[
                include_str!("../../src/protocol/lua/release_levels.lua"),
                include_str!("../../src/protocol/lua/lock_give.lua"),
                include_str!("../../src/protocol/lua/release.lua"),
            ]),
            deadline_ms: deadline_ms(connection)?,
        })
    }

    /// Loads both scripts on `connection`, for calls sent as [`Call::evalsha`].
    pub fn load(&self, connection: &mut Connection) -> RedisResult<()> {
        self.acquire.prepare_invoke().load(connection)?;
        self.release.prepare_invoke().load(connection)?;
        Ok(())
    }

    /// `holder` takes the lock `name` (a new chain).
    pub fn acquire(&self, name: &str, holder: &str) -> Call<'_> {
        Call {
            script: &self.acquire,
            keys: vec![name.into(), format!("redisson_lock_token:{{{name}}}")],
            args: vec![
                LEASE_MS.to_string(),
                holder.into(),
                "0".into(),
                self.deadline_ms.to_string(),
            ],
        }
    }

    /// `holder` releases the lock `name` (its last level, to nobody in particular), its
    /// receipt under a key of `round`'s.
    pub fn release(&self, name: &str, holder: &str, round: u64) -> Call<'_> {
        Call {
            script: &self.release,
            keys: vec![
                name.into(),
                format!("redisson_lock__channel:{{{name}}}"),
                format!("redisson_unlock_latch:{{{name}}}:{round}"),
                format!("redisson_lock_token:{{{name}}}"),
            ],
            args: vec![
                holder.into(),
                LEASE_MS.to_string(),
                (self.deadline_ms + 1_000).to_string(),
                "0".into(),
                "0".into(),
                String::new(),
                "0".into(),
                self.deadline_ms.to_string(),
            ],
        }
    }
}

/// The semaphore's take and add scripts, each run once per request.
pub struct Semaphore {
    take: Script,
    add: Script,
    deadline_ms: u64,
}

impl Semaphore {
    /// The scripts, with deadlines read from the server `connection` reaches.
    pub fn new(connection: &mut Connection) -> RedisResult<Self> {
        let once = |body: &str| {
            script(&[
                include_str!("../../src/protocol/lua/semaphore_count.lua"),
                include_str!("../../src/protocol/lua/request_begin.lua"),
                body,
                include_str!("../../src/protocol/lua/request_end.lua"),
            ])
        };
        Ok(Semaphore {
            take: once(include_str!("../../src/protocol/lua/semaphore_take.lua")),
            add: once(include_str!("../../src/protocol/lua/semaphore_add.lua")),
            deadline_ms: deadline_ms(connection)?,
        })
    }

    /// Takes `permits` of the semaphore `name`, as the request `request`.
    pub fn take(&self, name: &str, permits: u32, request: &str) -> Call<'_> {
        Call {
            script: &self.take,
            keys: vec![name.into(), request.into()],
            args: self.request_args(permits.to_string()),
        }
    }

    /// Adds `permits` to the semaphore `name`, as the request `request`.
    pub fn add(&self, name: &str, permits: u32, request: &str) -> Call<'_> {
        Call {
            script: &self.add,
            keys: vec![
                name.into(),
                format!("redisson_sc:{{{name}}}"),
                request.into(),
            ],
            args: self.request_args(permits.to_string()),
        }
    }

    /// `first`, then a request's deadline and until when its answer is kept.
    fn request_args(&self, first: String) -> Vec<String> {
        let keep_until = self.deadline_ms + 1_000;
        vec![first, self.deadline_ms.to_string(), keep_until.to_string()]
    }
}
