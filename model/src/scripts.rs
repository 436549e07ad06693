//! The crate's scripts, as the crate sends them: read from its sources, each put together
//! from the `.lua` files its `lua_script!` declaration names, in order, after the plain
//! dialect's first line and `deadline.lua`, as `redlease::protocol::script` does. Nothing is
//! copied: a change to a script or to a declaration is what the model runs next.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The crate's sources, beside this crate.
fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/protocol")
}

/// Every script of the crate, by `module::NAME` (`plain::ACQUIRE`, `latch::COUNT_DOWN`).
pub fn all() -> &'static BTreeMap<String, String> {
    static ALL: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    ALL.get_or_init(|| read_all(&sources()).expect("the crate's scripts"))
}

/// The source of the script `name` (`module::NAME`).
///
/// # Panics
/// When the crate declares no such script: the model names one the crate no longer has.
pub fn source(name: &str) -> &'static str {
    all()
        .get(name)
        .unwrap_or_else(|| panic!("the crate declares no script {name}"))
}

fn read_all(dir: &Path) -> std::io::Result<BTreeMap<String, String>> {
    let lua = dir.join("lua");
    let prelude = format!(
        "local publish_command = 'publish'\n{}",
        std::fs::read_to_string(lua.join("deadline.lua"))?
    );
    let mut scripts = BTreeMap::new();
    for file in rust_files(dir)? {
        let module = file
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or_default();
        let module = match module {
            "mod" => file
                .parent()
                .and_then(|parent| parent.file_name())
                .and_then(|name| name.to_str())
                .unwrap_or_default(),
            module => module,
        };
        for (name, parts) in declarations(&std::fs::read_to_string(&file)?) {
            let mut source = prelude.clone();
            for part in parts {
                source.push_str(&std::fs::read_to_string(lua.join(part))?);
            }
            scripts.insert(format!("{module}::{name}"), source);
        }
    }
    Ok(scripts)
}

fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The `lua_script!(NAME = "a.lua" + "b.lua")` declarations of a source file: each name with
/// its files in order (doc comments inside a declaration are skipped).
fn declarations(source: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for (start, _) in source.match_indices("lua_script!(") {
        let body = &source[start + "lua_script!(".len()..];
        let Some(end) = body.find(");") else { continue };
        let body: String = body[..end]
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join(" ");
        let Some((name, files)) = body.split_once('=') else {
            continue;
        };
        let files = files
            .split('+')
            .map(|file| file.trim().trim_matches('"').to_owned())
            .collect();
        found.push((name.trim().to_owned(), files));
    }
    found
}

#[cfg(test)]
mod tests {
    /// The files of a guarded script, which the crate puts together at run time around the
    /// caller's own script: not a declared script.
    const MADE_AT_RUN_TIME: [&str; 2] = ["guarded_script_begin.lua", "guarded_script_call.lua"];

    /// Every `.lua` file of the crate is part of a script the model reads: none is sent by
    /// a declaration the reading missed.
    #[test]
    fn every_script_file_is_in_a_script_read() {
        let all = super::all();
        let lua = super::sources().join("lua");
        for file in std::fs::read_dir(&lua).expect("the scripts' directory") {
            let path = file.expect("a file").path();
            if MADE_AT_RUN_TIME.iter().any(|name| path.ends_with(name)) {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a script file");
            assert!(
                all.values().any(|source| source.contains(&text)),
                "{} is in no script the model reads",
                path.display()
            );
        }
        assert!(super::source("plain::ACQUIRE").ends_with("return take_lock()\n"));
    }
}
