//! The fenced store's script: a write that carries a fencing token and is refused when the
//! store has seen a higher one.

use super::script::{lua_script, ScriptCall};
use super::Request;

lua_script!(FENCED_WRITE = "request_begin.lua" + "fenced_write.lua" + "request_end.lua");

/// Applies `operation` (`set` with `value`, or `del`) to `key` with `token`, unless the fence
/// key `fence` records a higher token. Answers `(1, token)` when written, `(0, highest)`
/// when refused.
pub(crate) fn fenced_write(
    key: &str,
    fence: &str,
    token: u64,
    operation: &str,
    value: &[u8],
    request: &Request,
) -> ScriptCall {
    ScriptCall::new(&FENCED_WRITE, &[key, fence, request.key()])
        .arg(token)
        .arg(operation)
        .arg(value)
        .request_args(request)
}
