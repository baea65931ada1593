//! docs/wire-format.md, "Loading a script", says how every script's text is built (its
//! prelude files, whether it starts with `#!lua flags=allow-oom`); a foreign client
//! builds its scripts from that table. This compares the table with the one place the
//! Rust client names them (`src/scripts.rs`, its catalog of `lua!` scripts) and with the
//! `lua/` directory, so neither can change without the other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// How a script's text is built: its prelude files in order, and whether it is flagged
/// `allow-oom`.
type Build = (Vec<String>, bool);

const DOC: &str = include_str!("../../../docs/wire-format.md");
/// How the Rust client builds each script of its catalog (`src/scripts.rs`).
fn loaded_by_the_client() -> BTreeMap<String, Build> {
    bus_redis::raw::catalog()
        .into_iter()
        .map(|script| {
            let preludes = script.preludes().iter().map(|p| (*p).to_owned()).collect();
            (script.name().to_owned(), (preludes, script.allow_oom()))
        })
        .collect()
}

/// The words in backticks, in order.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The table of "Loading a script": script name, its build.
fn documented() -> BTreeMap<String, Build> {
    let section = DOC
        .split("### Loading a script")
        .nth(1)
        .expect("the section")
        .split("\n### ")
        .next()
        .expect("its text");
    let mut table = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 3, "a row of three cells: {row}");
        // The text's files before "the script"; a note in parentheses names no script.
        let names = cells[0].split('(').next().unwrap_or("");
        let preludes: Vec<String> = ticked(cells[1])
            .into_iter()
            .map(|file| {
                file.strip_suffix(".lua")
                    .unwrap_or_else(|| panic!("not a file: {file}"))
                    .to_owned()
            })
            .collect();
        assert!(
            cells[1].ends_with("the script") || cells[1] == "the script alone",
            "the script comes last: {row}"
        );
        let allow_oom = match cells[2] {
            "`#!lua flags=allow-oom`" => true,
            "none" => false,
            other => panic!("an unknown first line: {other}"),
        };
        for name in ticked(names) {
            let previous = table.insert(name.clone(), (preludes.clone(), allow_oom));
            assert!(previous.is_none(), "{name} is in the table twice");
        }
    }
    table
}

#[test]
fn the_docs_build_every_script_as_the_client_loads_it() {
    let code = loaded_by_the_client();
    let docs = documented();
    for (name, build) in &code {
        assert_eq!(
            docs.get(name),
            Some(build),
            "docs/wire-format.md builds {name} otherwise than src/scripts.rs (preludes, allow-oom)"
        );
    }
    // Every script file is in the table; the preludes are the files no script is.
    let preludes: BTreeSet<&String> = code.values().flat_map(|(p, _)| p).collect();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("lua/")
        .map(|entry| entry.expect("an entry").file_name().into_string().unwrap())
        .filter_map(|file| file.strip_suffix(".lua").map(str::to_owned))
        .filter(|name| !preludes.contains(name))
        .collect();
    let listed: BTreeSet<String> = docs.keys().cloned().collect();
    assert_eq!(
        listed, files,
        "docs/wire-format.md's table and the scripts in lua/ differ"
    );
    // A script in the table but not loaded by the client says so in its row.
    for name in listed.iter().filter(|name| !code.contains_key(*name)) {
        assert!(
            DOC.lines()
                .any(|row| row.starts_with(&format!("| `{name}` ("))
                    && row.contains("not loaded by the Rust client")),
            "{name} is documented but not loaded by the Rust client: say so in its row"
        );
    }
}
