//! `cmsgpack.pack` and `cmsgpack.unpack` as Redis's Lua has them (lua_cmsgpack), byte for
//! byte for the values the scripts pack: nil, booleans, numbers, strings and arrays.

use mlua::{Lua, MultiValue, Table, Value};

/// The `cmsgpack` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let library = lua.create_table()?;
    library.set(
        "pack",
        lua.create_function(|lua, values: MultiValue| {
            let mut out = Vec::new();
            for value in values.iter() {
                pack(value, &mut out)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    library.set(
        "unpack",
        lua.create_function(|lua, bytes: mlua::LuaString| {
            let bytes = bytes.as_bytes().to_vec();
            let mut at = 0;
            let mut values = Vec::new();
            while at < bytes.len() {
                values.push(unpack(lua, &bytes, &mut at)?);
            }
            Ok(MultiValue::from_vec(values))
        })?,
    )?;
    Ok(library)
}

fn pack(value: &Value, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Nil => out.push(0xc0),
        Value::Boolean(true) => out.push(0xc3),
        Value::Boolean(false) => out.push(0xc2),
        Value::Integer(number) => pack_int(*number, out),
        Value::Number(number) if number.fract() == 0.0 && number.abs() < 9.0e18 => {
            pack_int(*number as i64, out)
        }
        Value::Number(number) if (*number as f32) as f64 == *number => {
            out.push(0xca);
            out.extend_from_slice(&(*number as f32).to_be_bytes());
        }
        Value::Number(number) => {
            out.push(0xcb);
            out.extend_from_slice(&number.to_be_bytes());
        }
        Value::String(text) => pack_str(&text.as_bytes(), out),
        Value::Table(table) => pack_table(table, out)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn pack_int(number: i64, out: &mut Vec<u8>) {
    if number >= 0 {
        let n = number as u64;
        match n {
            0..=0x7f => out.push(n as u8),
            0x80..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
    } else if number >= -32 {
        out.push(number as i8 as u8);
    } else if number >= i8::MIN as i64 {
        out.extend_from_slice(&[0xd0, number as i8 as u8]);
    } else if number >= i16::MIN as i64 {
        out.push(0xd1);
        out.extend_from_slice(&(number as i16).to_be_bytes());
    } else if number >= i32::MIN as i64 {
        out.push(0xd2);
        out.extend_from_slice(&(number as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&number.to_be_bytes());
    }
}

fn pack_str(bytes: &[u8], out: &mut Vec<u8>) {
    let len = bytes.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

/// A table whose keys are 1 to n is an array (an empty one too); any other is a map.
fn pack_table(table: &Table, out: &mut Vec<u8>) -> mlua::Result<()> {
    let pairs: Vec<(Value, Value)> = table.pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
    let len = pairs.len();
    let is_array = (1..=len).all(|index| table.raw_get::<Value>(index).is_ok_and(|v| !v.is_nil()));
    let header = |small: u8, big16: u8, big32: u8, out: &mut Vec<u8>| {
        if len < 16 {
            out.push(small | len as u8);
        } else if len <= 0xffff {
            out.push(big16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(big32);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    };
    if is_array {
        header(0x90, 0xdc, 0xdd, out);
        for index in 1..=len {
            pack(&table.raw_get::<Value>(index)?, out)?;
        }
    } else {
        header(0x80, 0xde, 0xdf, out);
        for (key, value) in &pairs {
            pack(key, out)?;
            pack(value, out)?;
        }
    }
    Ok(())
}

fn take<'a>(bytes: &'a [u8], at: &mut usize, count: usize) -> mlua::Result<&'a [u8]> {
    let slice = bytes
        .get(*at..*at + count)
        .ok_or_else(|| mlua::Error::RuntimeError("ERR cmsgpack: truncated".into()))?;
    *at += count;
    Ok(slice)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |acc, byte| acc << 8 | *byte as u64)
}

fn unpack(lua: &Lua, bytes: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let tag = take(bytes, at, 1)?[0];
    let value = match tag {
        0x00..=0x7f => Value::Integer(tag as i64),
        0xe0..=0xff => Value::Integer(tag as i8 as i64),
        0xc0 => Value::Nil,
        0xc2 => Value::Boolean(false),
        0xc3 => Value::Boolean(true),
        0xcc..=0xcf => {
            let width = 1 << (tag - 0xcc);
            Value::Integer(be(take(bytes, at, width)?) as i64)
        }
        0xd0..=0xd3 => {
            let width = 1 << (tag - 0xd0);
            let raw = be(take(bytes, at, width)?);
            let shift = 64 - 8 * width as u32;
            Value::Integer(((raw << shift) as i64) >> shift)
        }
        0xca => Value::Number(f32::from_bits(be(take(bytes, at, 4)?) as u32) as f64),
        0xcb => Value::Number(f64::from_bits(be(take(bytes, at, 8)?))),
        0xa0..=0xbf | 0xd9..=0xdb => {
            let len = match tag {
                0xd9 => be(take(bytes, at, 1)?) as usize,
                0xda => be(take(bytes, at, 2)?) as usize,
                0xdb => be(take(bytes, at, 4)?) as usize,
                _ => (tag & 0x1f) as usize,
            };
            Value::String(lua.create_string(take(bytes, at, len)?)?)
        }
        0x90..=0x9f | 0xdc | 0xdd | 0x80..=0x8f | 0xde | 0xdf => unpack_table(lua, tag, bytes, at)?,
        _ => {
            return Err(mlua::Error::RuntimeError(format!(
                "ERR cmsgpack: tag {tag:#x}"
            )))
        }
    };
    Ok(value)
}

fn unpack_table(lua: &Lua, tag: u8, bytes: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let (len, map) = match tag {
        0x90..=0x9f => ((tag & 0x0f) as usize, false),
        0x80..=0x8f => ((tag & 0x0f) as usize, true),
        0xdc | 0xde => (be(take(bytes, at, 2)?) as usize, tag == 0xde),
        _ => (be(take(bytes, at, 4)?) as usize, tag == 0xdf),
    };
    let table = lua.create_table()?;
    for index in 1..=len {
        if map {
            let key = unpack(lua, bytes, at)?;
            table.raw_set(key, unpack(lua, bytes, at)?)?;
        } else {
            table.raw_set(index, unpack(lua, bytes, at)?)?;
        }
    }
    Ok(Value::Table(table))
}
