//! The script the multi-server locks add to the lock's: raising a member's token counter.

use super::names::LockKeys;
use super::script::{lua_script, ScriptCall};

lua_script!(RAISE_TOKEN = "raise_token.lua");

/// Raises the token counter of `keys` to `token` while the chain `holder` holds the lock
/// there. Answers 1 when the counter now stands at least at `token`, 0 when the holder is
/// gone.
pub(crate) fn raise_token(keys: &LockKeys, holder: &str, token: u64) -> ScriptCall {
    ScriptCall::new(&RAISE_TOKEN, &[&keys.name, &keys.token])
        .arg(holder)
        .arg(token.to_string())
}
