//! Every script of `lua/`: declared with its shape, its file opening with the shape's
//! generated header, and refusing a call of the wrong shape before any write
//! (`BUS_BLESS=1` rewrites the headers).

use std::path::Path;

use bus_test_redis::scripts::check_scripts;
use bus_test_redis::TestRedis;

#[test]
fn every_script_has_its_shape_and_refuses_malformed_calls() {
    let redis = TestRedis::start().unwrap();
    check_scripts(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("lua"),
        &bus_attachments::raw::PRELUDES,
        &bus_attachments::raw::catalog(),
        &redis,
    );
}
