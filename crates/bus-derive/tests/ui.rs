//! Compile-time behaviour of the derives: what must compile, and the exact error (text and
//! span) for every mistake. Refresh expectations with
//! `TRYBUILD=overwrite cargo test -p bus-derive --test ui`, then read the `.stderr` diffs.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
