//! Per-layout parametrisation: one BabelQueue scenario, written once as
//! `async fn scenario(layout: &str)`, run as one test per layout.

/// The BabelQueue layouts by the names the SDK's `--layout` and `bus_babelqueue::Layout::name`
/// use.
pub const LAYOUTS: [&str; 2] = ["legacy", "laravel"];

/// One test per BabelQueue layout for a scenario `async fn scenario(layout: &str, ...)`:
///
/// ```no_run
/// async fn mixed_fleet(layout: &str) {
///     assert!(bus_test_redis::LAYOUTS.contains(&layout));
/// }
/// async fn python_to_rust(layout: &str, headers: bool) {
///     assert!(bus_test_redis::LAYOUTS.contains(&layout) && headers);
/// }
///
/// bus_test_redis::per_layout!(mixed_fleet => python_worker_and_rust_consumer_share_a_queue);
/// // With the test attribute, and further arguments of the scenario:
/// bus_test_redis::per_layout!(
///     #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
///     python_to_rust(true) => python_publishes_with_headers_rust_consumes
/// );
/// # fn main() {}
/// ```
///
/// makes a module `name` with the tests `name::legacy` and `name::laravel` (so
/// `cargo test name` runs both); the attribute defaults to `#[tokio::test]`.
#[macro_export]
macro_rules! per_layout {
    ($(#[$attr:meta])+ $scenario:ident $(($($arg:expr),* $(,)?))? => $name:ident) => {
        mod $name {
            // The scenario and its arguments are the test file's items.
            #[allow(unused_imports)]
            use super::*;

            $(#[$attr])+
            async fn legacy() {
                $scenario("legacy" $($(, $arg)*)?).await
            }

            $(#[$attr])+
            async fn laravel() {
                $scenario("laravel" $($(, $arg)*)?).await
            }
        }
    };
    ($scenario:ident $(($($arg:expr),* $(,)?))? => $name:ident) => {
        $crate::per_layout!(#[tokio::test] $scenario $(($($arg),*))? => $name);
    };
}
