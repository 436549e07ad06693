//! [`LuaScript`] (a script's source and SHA1) and [`ScriptCall`] (one call of it with its keys
//! and arguments), which the runner in `crate::client::call::runner` sends. No I/O here.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use redis::{Arg, Cmd, ToRedisArgs};

/// One of the crate's Lua scripts, in two dialects: the plain one publishes releases with
/// `PUBLISH`, the sharded one with `SPUBLISH` (Redis 7 Cluster, whose waiters `SSUBSCRIBE`
/// on the node of the channel's slot). A script names the command by the local
/// `publish_command`, which the first line of its source sets.
pub(crate) struct LuaScript {
    source: Cow<'static, str>,
    /// Known to Redis by this hash once loaded.
    hash: OnceLock<String>,
    /// The sharded dialect's source and hash.
    sharded: OnceLock<(String, String)>,
}

/// The first line of every script's plain source.
pub(crate) const PLAIN_PRELUDE: &str = "local publish_command = 'publish'\n";
/// ... and of its sharded source.
const SHARDED_PRELUDE: &str = "local publish_command = 'spublish'\n";

impl LuaScript {
    /// One of the crate's own scripts.
    pub(crate) const fn new(source: &'static str) -> Self {
        LuaScript {
            source: Cow::Borrowed(source),
            hash: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    /// A script made at run time (a guarded script around a caller's body).
    pub(crate) fn owned(source: String) -> Self {
        LuaScript {
            source: Cow::Owned(source),
            hash: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    /// The source of the dialect that publishes with `SPUBLISH`, and its hash.
    pub(crate) fn sharded_dialect(plain: &str) -> (String, String) {
        let body = plain.strip_prefix(PLAIN_PRELUDE).unwrap_or(plain);
        let source = format!("{SHARDED_PRELUDE}{body}");
        let hash = redis::Script::new(&source).get_hash().to_owned();
        (source, hash)
    }

    pub(crate) fn source(&self, sharded: bool) -> &str {
        match sharded {
            true => &self.sharded().0,
            false => &self.source,
        }
    }

    /// The SHA1 of the source, in hex.
    pub(crate) fn hash(&self, sharded: bool) -> &str {
        match sharded {
            true => &self.sharded().1,
            false => self
                .hash
                .get_or_init(|| redis::Script::new(&self.source).get_hash().to_owned()),
        }
    }

    fn sharded(&self) -> &(String, String) {
        self.sharded
            .get_or_init(|| LuaScript::sharded_dialect(&self.source))
    }
}

/// Declares a `static` [`LuaScript`] from a `.lua` file of `src/protocol/lua/`, or from several
/// joined in order (`"shared.lua" + "body.lua"`: scripts cannot call each other, so code that
/// several scripts run is a file they all start with). Every script starts with
/// `deadline.lua`: the server's clock and the refusal of a late copy.
macro_rules! lua_script {
    ($(#[$doc:meta])* $name:ident = $first:literal $(+ $more:literal)*) => {
        $(#[$doc])*
        pub(crate) static $name: $crate::protocol::script::LuaScript =
            $crate::protocol::script::LuaScript::new(concat!(
                "local publish_command = 'publish'\n",
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol/lua/deadline.lua")),
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol/lua/", $first))
                $(, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol/lua/", $more)))*
            ));
    };
}
pub(crate) use lua_script;

/// A script a call runs: one of the crate's own, or one made at run time.
#[derive(Clone)]
pub(crate) enum ScriptRef {
    Static(&'static LuaScript),
    Shared(Arc<LuaScript>),
}

impl std::ops::Deref for ScriptRef {
    type Target = LuaScript;

    fn deref(&self) -> &LuaScript {
        match self {
            ScriptRef::Static(script) => script,
            ScriptRef::Shared(script) => script,
        }
    }
}

impl From<&'static LuaScript> for ScriptRef {
    fn from(script: &'static LuaScript) -> Self {
        ScriptRef::Static(script)
    }
}

/// One call of a script: `EVALSHA` with its keys and arguments.
#[derive(Clone)]
pub(crate) struct ScriptCall {
    script: ScriptRef,
    /// The call is of the sharded dialect.
    sharded: bool,
    command: Cmd,
    /// For a request's call: how many times it was sent, by every clone and dialect of it.
    sends: Option<Arc<AtomicU32>>,
}

impl ScriptCall {
    /// A call of `script` on `keys`; add arguments with [`arg`](ScriptCall::arg).
    pub(crate) fn new(script: impl Into<ScriptRef>, keys: &[&str]) -> Self {
        let script = script.into();
        let mut command = redis::cmd("EVALSHA");
        command.arg(script.hash(false)).arg(keys.len()).arg(keys);
        ScriptCall {
            script,
            sharded: false,
            command,
            sends: None,
        }
    }

    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.command.arg(arg);
        self
    }

    /// The last two arguments of a script run once per request (`request_end.lua`,
    /// `request_undo.lua`): the request's deadline and until when its answer is kept.
    /// The call's sends are counted from now on ([`ScriptCall::sent_once`]).
    pub(crate) fn request_args(self, request: &super::Request) -> Self {
        self.arg(request.deadline_ms())
            .arg(request.keep_until_ms())
            .counting_sends()
    }

    /// The call, its sends counted from now on ([`ScriptCall::sent_once`]).
    pub(crate) fn counting_sends(mut self) -> Self {
        self.sends.get_or_insert_with(Arc::default);
        self
    }

    /// The call, its sends counted with those of `other` (another form of the same request).
    pub(crate) fn sharing_sends_of(mut self, other: &ScriptCall) -> Self {
        self.sends = other.sends.clone();
        self
    }

    /// Counts one more send of a request's call: the runner calls it each time the call's
    /// bytes go out.
    pub(crate) fn note_sent(&self) {
        if let Some(sends) = &self.sends {
            sends.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether this request's call was sent exactly once (by whatever means: a pool sends a
    /// call again on a fresh connection when an idle one turns out dead). Only then is no
    /// other copy of it on its way, and its answer's key may go as soon as it is answered.
    pub(crate) fn sent_once(&self) -> bool {
        self.sends
            .as_ref()
            .is_some_and(|sends| sends.load(Ordering::Relaxed) == 1)
    }

    pub(crate) fn script(&self) -> &LuaScript {
        &self.script
    }

    /// Whether the call is of the sharded dialect (see [`LuaScript`]).
    pub(crate) fn is_sharded(&self) -> bool {
        self.sharded
    }

    /// The script's source in the call's dialect.
    pub(crate) fn source(&self) -> &str {
        self.script.source(self.sharded)
    }

    /// The same call of the script's sharded dialect, which publishes with `SPUBLISH`.
    pub(crate) fn sharded(&self) -> ScriptCall {
        let mut command = redis::cmd("EVALSHA");
        command.arg(self.script.hash(true));
        for arg in self.arguments() {
            command.arg(arg);
        }
        ScriptCall {
            script: self.script.clone(),
            sharded: true,
            command,
            sends: self.sends.clone(),
        }
    }

    /// The `EVALSHA` command.
    pub(crate) fn command(&self) -> &Cmd {
        &self.command
    }

    /// The keys of the call.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let mut arguments = self.arguments();
        let count = arguments
            .next()
            .and_then(|count| std::str::from_utf8(count).ok()?.parse().ok())
            .unwrap_or(0);
        arguments.take(count)
    }

    /// The same call as `EVAL` with the script's source, which works whatever the server's
    /// script cache holds: for a call queued behind another whose answer is never read.
    pub(crate) fn as_eval(&self) -> Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(self.source());
        for arg in self.arguments() {
            eval.arg(arg);
        }
        eval
    }

    /// The key count, the keys and the arguments: all of `EVALSHA`'s but its hash.
    fn arguments(&self) -> impl Iterator<Item = &[u8]> {
        self.command
            .args_iter()
            .skip(2)
            .filter_map(|arg| match arg {
                Arg::Simple(bytes) => Some(bytes),
                _ => None,
            })
    }
}
