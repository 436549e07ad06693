//! Runs the crate's Lua scripts on a modelled [`Keyspace`], in Lua 5.1 (the language of
//! Redis's and Valkey's scripts), with the `redis` and `cmsgpack` libraries the scripts use,
//! and Redis's conversions between Lua values and replies. Each thread of the checker has its
//! own interpreter; a script is compiled once per thread.

use std::cell::RefCell;
use std::collections::HashMap;

use mlua::{Function, Lua, MultiValue, Table, Value as LuaValue};

use crate::keyspace::{Bytes, Keyspace, Reply};

mod msgpack;

struct Host {
    lua: Lua,
    compiled: RefCell<HashMap<String, Function>>,
}

thread_local! {
    static HOST: Host = Host::new().expect("a Lua interpreter");
}

impl Host {
    fn new() -> mlua::Result<Host> {
        let lua = Lua::new();
        let redis = lua.create_table()?;
        redis.set(
            "error_reply",
            lua.create_function(|lua, message: LuaValue| reply_table(lua, "err", message))?,
        )?;
        redis.set(
            "status_reply",
            lua.create_function(|lua, message: LuaValue| reply_table(lua, "ok", message))?,
        )?;
        lua.globals().set("redis", redis)?;
        lua.globals().set("cmsgpack", msgpack::library(&lua)?)?;
        lua.load(ERRORS_AS_REDIS_RAISES_THEM).exec()?;
        Ok(Host {
            lua,
            compiled: RefCell::new(HashMap::new()),
        })
    }

    fn compiled(&self, source: &str) -> mlua::Result<Function> {
        if let Some(function) = self.compiled.borrow().get(source) {
            return Ok(function.clone());
        }
        let function = self
            .lua
            .load(source)
            .set_name("user_script")
            .into_function()?;
        self.compiled
            .borrow_mut()
            .insert(source.to_owned(), function.clone());
        Ok(function)
    }

    fn eval(&self, keyspace: &mut Keyspace, source: &str, keys: &[Bytes], args: &[Bytes]) -> Reply {
        let lua = &self.lua;
        let function = match self.compiled(source) {
            Ok(function) => function,
            Err(error) => return Reply::Error(format!("ERR compiling the script: {error}")),
        };
        let server = RefCell::new(keyspace);
        let outcome = lua.scope(|scope| {
            let redis: Table = lua.globals().get("redis")?;
            let pcall = scope.create_function(|lua, command: MultiValue| {
                to_lua(lua, &server.borrow_mut().call(&command_of(command)?))
            })?;
            redis.set("pcall", pcall)?;
            lua.globals().set("KEYS", strings(lua, keys)?)?;
            lua.globals().set("ARGV", strings(lua, args)?)?;
            let run_script: Function = lua.globals().get("run_script")?;
            run_script.call::<LuaValue>(function)
        });
        match outcome {
            Ok(value) => from_lua(&value),
            Err(error) => Reply::Error(error_message(&error)),
        }
    }
}

/// `redis.call` raises a command's error as the table `{err = ...}`, as Redis's does (over
/// `redis.pcall`, which the host gives each run), and a script's run (`run_script`) turns
/// what it raised into an error reply: such a table as it is, anything else after `ERR`.
const ERRORS_AS_REDIS_RAISES_THEM: &str = r#"
redis.call = function(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    error(reply, 0)
  end
  return reply
end
function run_script(script)
  local ok, result = pcall(script)
  if ok then
    return result
  end
  if type(result) == 'table' and result.err then
    return result
  end
  return {err = 'ERR ' .. tostring(result)}
end
"#;

/// Runs the script `source` with `keys` and `args` on `keyspace`, as `EVAL` does: atomically,
/// and keeping whatever it wrote before an error. Answers the script's reply.
pub fn eval(keyspace: &mut Keyspace, source: &str, keys: &[Bytes], args: &[Bytes]) -> Reply {
    HOST.with(|host| host.eval(keyspace, source, keys, args))
}

fn reply_table(lua: &Lua, field: &str, message: LuaValue) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.set(field, message)?;
    Ok(table)
}

fn strings(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    lua.create_sequence_from(
        items
            .iter()
            .map(|item| lua.create_string(item))
            .collect::<mlua::Result<Vec<_>>>()?,
    )
}

/// A command's words from `redis.call`'s arguments: strings as they are, numbers as Redis
/// writes them (integral ones without a fraction, others with 17 digits).
fn command_of(values: MultiValue) -> mlua::Result<Vec<Bytes>> {
    values
        .into_iter()
        .map(|value| match value {
            LuaValue::String(text) => Ok(text.as_bytes().to_vec()),
            LuaValue::Integer(number) => Ok(number.to_string().into_bytes()),
            LuaValue::Number(number) if number.fract() == 0.0 && number.abs() < 9.0e15 => {
                Ok((number as i64).to_string().into_bytes())
            }
            LuaValue::Number(number) => Ok(format!("{number:.17e}").into_bytes()),
            _ => Err(mlua::Error::RuntimeError(
                "ERR Lua redis lib command arguments must be strings or integers".into(),
            )),
        })
        .collect()
}

/// A reply as a script sees it: nil as `false`, a status as `{ok = ...}`, an error as
/// `{err = ...}`.
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(number) => LuaValue::Integer(*number),
        Reply::Bulk(bytes) => LuaValue::String(lua.create_string(bytes)?),
        Reply::Status(status) => LuaValue::Table(reply_table(
            lua,
            "ok",
            LuaValue::String(lua.create_string(status)?),
        )?),
        Reply::Error(message) => LuaValue::Table(reply_table(
            lua,
            "err",
            LuaValue::String(lua.create_string(message)?),
        )?),
        Reply::Array(items) => {
            let table = lua.create_table()?;
            for (index, item) in items.iter().enumerate() {
                table.raw_set(index + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// A script's return value as Redis replies it: numbers truncated to integers, `false` and
/// nil as nil, `true` as 1, a table with `err` or `ok` as an error or a status, any other
/// table as an array up to its first nil.
fn from_lua(value: &LuaValue) -> Reply {
    match value {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(number) => Reply::Int(*number),
        LuaValue::Number(number) => Reply::Int(number.trunc() as i64),
        LuaValue::String(text) => Reply::Bulk(text.as_bytes().to_vec()),
        LuaValue::Table(table) => {
            if let Ok(LuaValue::String(message)) = table.raw_get::<LuaValue>("err") {
                return Reply::Error(message.to_string_lossy());
            }
            if let Ok(LuaValue::String(status)) = table.raw_get::<LuaValue>("ok") {
                return Reply::Status(status.to_string_lossy());
            }
            let mut items = Vec::new();
            for index in 1.. {
                match table.raw_get::<LuaValue>(index) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(from_lua(&item)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// The message of a script's error: a command's error as the command gave it, a Lua error
/// after `ERR`.
fn error_message(error: &mlua::Error) -> String {
    match error {
        mlua::Error::CallbackError { cause, .. } => error_message(cause),
        mlua::Error::RuntimeError(message) if is_coded(message) => message.clone(),
        mlua::Error::RuntimeError(message) => match message.split_once(": ") {
            Some((_, inner)) if is_coded(inner) => inner.to_owned(),
            _ => format!("ERR {message}"),
        },
        other => format!("ERR {other}"),
    }
}

/// Whether `message` starts with an error code in capitals (`WRONGTYPE ...`, `ERR ...`).
fn is_coded(message: &str) -> bool {
    message.split(' ').next().is_some_and(|code| {
        code.len() > 1 && code.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}
