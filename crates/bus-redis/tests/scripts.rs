//! Every script of `lua/`: declared with its shape, its file opening with the shape's
//! generated header, and refusing a call of the wrong shape before any write
//! (`BUS_BLESS=1` rewrites the headers).

use std::path::Path;

use bus_test_redis::scripts::{check_docs_table, check_scripts};
use bus_test_redis::TestRedis;

#[test]
fn every_script_has_its_shape_and_refuses_malformed_calls() {
    let redis = TestRedis::start().unwrap();
    check_scripts(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("lua"),
        &bus_redis::raw::PRELUDES,
        &bus_redis::raw::catalog(),
        &redis,
    );
}

/// docs/wire-format.md's table of every script's KEYS and ARGV is the catalog's, rendered
/// from the shapes (`BUS_BLESS=1` rewrites it).
#[test]
fn the_docs_table_of_keys_and_argv_is_the_shapes() {
    check_docs_table(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire-format.md"),
        "<!-- shapes: generated from the scripts' declarations; BUS_BLESS=1 cargo test -p bus-redis --test scripts rewrites it -->",
        "<!-- end of shapes -->",
        &bus_redis::raw::catalog(),
    );
}
