//! Every script of `lua/`: declared with its shape, its file opening with the shape's
//! generated header, and refusing a call of the wrong shape before any write
//! (`BUS_BLESS=1` rewrites the headers); and docs/wire-format.md's table of their KEYS and
//! ARGV is the shapes'.

use std::path::Path;

use bus_test_redis::scripts::{check_docs_table, check_scripts};
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
    check_docs_table(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire-format.md"),
        "<!-- workflow shapes: generated from the scripts' declarations; BUS_BLESS=1 cargo test -p bus-workflows --test scripts rewrites it -->",
        "<!-- end of workflow shapes -->",
        &bus_workflows::raw::catalog(),
    );
}
