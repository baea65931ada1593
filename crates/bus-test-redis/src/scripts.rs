//! Every script of a crate checked the same way (feature `bus`): [`check_scripts`] walks the
//! crate's `lua/` directory, so a script added there without a declared shape fails the
//! crate's tests, and runs each script with calls of the wrong shape against a real Redis.

use std::collections::BTreeSet;
use std::path::Path;

use bus_redis::shape::{with_header, Shape};
use bus_redis::LuaScript;

use crate::{Resp, TestRedis};

/// Checks that the table of `catalog`'s KEYS and ARGV between the markers `start` and
/// `end` of the document `doc` is the one rendered from the shapes; with `BUS_BLESS=1` in
/// the environment the document is rewritten to hold it instead.
///
/// # Panics
/// When the table differs (or a marker or a shape is missing).
pub fn check_docs_table(doc: &Path, start: &str, end: &str, catalog: &[&LuaScript]) {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let mut table = String::from("| Script | KEYS (in order) | ARGV |\n|---|---|---|\n");
    for script in catalog {
        let shape = script.shape().expect("every script has its shape");
        table.push_str(&shape.row(script.name()));
        table.push('\n');
    }
    let (before, rest) = text.split_once(start).expect("the table's start marker");
    let (_, after) = rest.split_once(end).expect("the table's end marker");
    let wanted = format!("{before}{start}\n{table}{end}{after}");
    if std::env::var("BUS_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(doc, wanted).unwrap();
    } else {
        assert!(
            text == wanted,
            "{}'s table between {start} and {end} differs from the scripts' shapes: run with BUS_BLESS=1",
            doc.display()
        );
    }
}

/// Checks the scripts of the crate whose `lua/` directory is `lua_dir`:
///
/// - every file there is one of `preludes` or the file of a script of `catalog`, and every
///   script of `catalog` has a file and a declared [`Shape`];
/// - each script's file opens with its shape's header
///   ([`Shape::header`](bus_redis::shape::Shape::header)); with `BUS_BLESS=1` in the
///   environment the files are rewritten to do so instead;
/// - against `redis`, each script refuses, with an error reply naming it, a call with one
///   KEY fewer or more, one ARGV fewer or more (where the shape says how many), and a
///   non-integer where it declares an integer, and writes nothing.
///
/// # Panics
/// On the first script that fails, naming it.
pub fn check_scripts(lua_dir: &Path, preludes: &[&str], catalog: &[&LuaScript], redis: &TestRedis) {
    let bless = std::env::var("BUS_BLESS").is_ok_and(|v| v == "1");
    let files: BTreeSet<String> = std::fs::read_dir(lua_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", lua_dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".lua")?.to_owned())
        })
        .collect();
    let scripts: BTreeSet<String> = catalog.iter().map(|s| s.name().to_owned()).collect();
    for file in &files {
        assert!(
            preludes.contains(&file.as_str()) || scripts.contains(file),
            "lua/{file}.lua is neither a prelude nor a script of the catalog: declare it with its shape"
        );
    }
    let mut client = redis.client();
    for script in catalog {
        let name = script.name();
        let shape = script
            .shape()
            .unwrap_or_else(|| panic!("{name}: no shape declared (lua!(..., keys, argv))"));
        let path = lua_dir.join(format!("{name}.lua"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let wanted = with_header(name, &shape, &text);
        if bless {
            if wanted != text {
                std::fs::write(&path, &wanted)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        } else {
            assert!(
                wanted == text,
                "lua/{name}.lua does not open with its shape's header: run the test with BUS_BLESS=1"
            );
        }
        for (what, keys, argv) in malformed(&shape) {
            let mut args = vec![
                "EVAL".to_owned(),
                script.text().to_owned(),
                keys.to_string(),
            ];
            args.extend((0..keys).map(|i| redis.key(&format!("{{shape}}:{i}"))));
            args.extend(argv);
            let reply = client.cmd(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                matches!(&reply, Resp::Error(e) if e.contains(name) && e.contains("expects")),
                "{name} with {what}: not refused: {reply:?}"
            );
            assert!(
                redis.keys().is_empty(),
                "{name} with {what}: wrote {:?}",
                redis.keys()
            );
        }
    }
}

/// Calls of the wrong shape: what is wrong, the number of KEYS, the ARGV.
fn malformed(shape: &Shape) -> Vec<(String, usize, Vec<String>)> {
    let keys = shape.fixed_keys().len();
    // A well-formed ARGV: "1" wherever an integer may be wanted.
    let argv: Vec<String> = shape.fixed_argv().iter().map(|_| "1".to_owned()).collect();
    let mut calls = Vec::new();
    if keys > 0 {
        calls.push(("one KEY fewer".to_owned(), keys - 1, argv.clone()));
    }
    if !shape.open_keys() {
        calls.push(("one KEY more".to_owned(), keys + 1, argv.clone()));
    }
    if !argv.is_empty() {
        calls.push((
            "one ARGV fewer".to_owned(),
            keys,
            argv[..argv.len() - 1].to_vec(),
        ));
    }
    if !shape.open_argv() {
        let mut more = argv.clone();
        more.push("1".to_owned());
        calls.push(("one ARGV more".to_owned(), keys, more));
    }
    for (i, arg) in shape.fixed_argv().iter().enumerate() {
        if arg.ends_with(":int") {
            let mut bad = argv.clone();
            bad[i] = "1.5".to_owned();
            calls.push((format!("a non-integer as ARGV[{}]", i + 1), keys, bad));
        }
    }
    calls
}
