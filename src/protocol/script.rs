//! [`LuaScript`] (a script's source and SHA1) and [`ScriptCall`] (one call of it with its keys
//! and arguments), which the runner in `crate::script` sends. No I/O here.

use std::sync::LazyLock;

use redis::{Arg, Cmd, ToRedisArgs};

/// One of the crate's Lua scripts.
pub(crate) struct LuaScript {
    source: &'static str,
    /// Known to Redis by this hash once loaded.
    hash: LazyLock<String>,
}

impl LuaScript {
    pub(crate) const fn new(source: &'static str, hash: fn() -> String) -> Self {
        LuaScript {
            source,
            hash: LazyLock::new(hash),
        }
    }

    pub(crate) fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of the source, in hex.
    pub(crate) fn hash(&self) -> &str {
        &self.hash
    }
}

/// Declares a `static` [`LuaScript`] from a `.lua` file next to this module, or from several
/// joined in order (`"shared.lua" + "body.lua"`: scripts cannot call each other, so code that
/// several scripts run is a file they all start with).
macro_rules! lua_script {
    ($(#[$doc:meta])* $name:ident = $first:literal $(+ $more:literal)*) => {
        $(#[$doc])*
        pub(crate) static $name: $crate::protocol::script::LuaScript =
            $crate::protocol::script::LuaScript::new(
                concat!(include_str!($first) $(, include_str!($more))*),
                || {
                    redis::Script::new(concat!(include_str!($first) $(, include_str!($more))*))
                        .get_hash()
                        .to_owned()
                },
            );
    };
}
pub(crate) use lua_script;

/// One call of a script: `EVALSHA` with its keys and arguments.
pub(crate) struct ScriptCall {
    script: &'static LuaScript,
    command: Cmd,
}

impl ScriptCall {
    /// A call of `script` on `keys`; add arguments with [`arg`](ScriptCall::arg).
    pub(crate) fn new(script: &'static LuaScript, keys: &[&str]) -> Self {
        let mut command = redis::cmd("EVALSHA");
        command.arg(script.hash()).arg(keys.len()).arg(keys);
        ScriptCall { script, command }
    }

    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.command.arg(arg);
        self
    }

    pub(crate) fn script(&self) -> &'static LuaScript {
        self.script
    }

    /// The `EVALSHA` command.
    pub(crate) fn command(&self) -> &Cmd {
        &self.command
    }

    /// The same call as `EVAL` with the script's source, which works whatever the server's
    /// script cache holds: for a call queued behind another whose answer is never read.
    pub(crate) fn as_eval(&self) -> Cmd {
        let mut eval = redis::cmd("EVAL");
        eval.arg(self.script.source);
        // Skip EVALSHA's hash; the key count, keys and arguments follow as they are.
        for arg in self.command.args_iter().skip(2) {
            if let Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}
