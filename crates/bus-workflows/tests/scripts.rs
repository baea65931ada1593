//! Every script of `lua/`: declared with its shape, its file opening with the shape's
//! generated header, and refusing a call of the wrong shape before any write
//! (`BUS_BLESS=1` rewrites the headers); and docs/wire-format.md's table of their KEYS and
//! ARGV is the shapes'.

use std::path::Path;

use bus_test_redis::scripts::check_scripts;
use bus_test_redis::TestRedis;

#[test]
fn every_script_has_its_shape_and_refuses_malformed_calls() {
    let redis = TestRedis::start().unwrap();
    check_scripts(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("lua"),
        &bus_workflows::raw::PRELUDES,
        &bus_workflows::raw::catalog(),
        &redis,
    );
}

#[test]
fn the_docs_table_of_keys_and_argv_is_the_shapes() {
    const START: &str = "<!-- workflow shapes: generated from the scripts' declarations; BUS_BLESS=1 cargo test -p bus-workflows --test scripts rewrites it -->";
    const END: &str = "<!-- end of workflow shapes -->";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire-format.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let mut table = String::from("| Script | KEYS (in order) | ARGV |\n|---|---|---|\n");
    for script in bus_workflows::raw::catalog() {
        let shape = script.shape().expect("every script has its shape");
        table.push_str(&shape.row(script.name()));
        table.push('\n');
    }
    let (before, rest) = doc.split_once(START).expect("the table's start marker");
    let (_, after) = rest.split_once(END).expect("the table's end marker");
    let wanted = format!("{before}{START}\n{table}{END}{after}");
    if std::env::var("BUS_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, wanted).unwrap();
    } else {
        assert!(
            doc == wanted,
            "docs/wire-format.md's workflow table differs from the scripts' shapes: run with BUS_BLESS=1"
        );
    }
}
