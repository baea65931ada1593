//! Processors that register themselves: `#[processor]` (bus-derive) submits a
//! [`ProcessorEntry`] for each processor impl, and [`HostBuilder::register_processors`]
//! registers every entry linked into the binary, as KnightBus's `RegisterProcessors()`
//! does for an assembly.
//!
//! The registry is the `inventory` crate rather than `linkme`: `inventory` works on every
//! platform Rust targets (Linux, macOS, Windows, and wasm once initialised) through the
//! platform's own constructor mechanism, while `linkme` needs linker-section support per
//! target and fails to link, rather than degrading, where that is missing. The cost,
//! one constructor per processor run before `main`, is negligible.

use std::fmt;

use super::HostBuilder;

/// One processor registered by `#[processor]`: where it was declared, what it is, and how
/// to register it. Made by the attribute only.
pub struct ProcessorEntry {
    module: &'static str,
    processor: &'static str,
    message: &'static str,
    register: fn(HostBuilder) -> HostBuilder,
}

inventory::collect!(ProcessorEntry);

impl fmt::Debug for ProcessorEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorEntry")
            .field("module", &self.module)
            .field("processor", &self.processor)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl ProcessorEntry {
    /// What `#[processor]` submits; not for hand use.
    #[doc(hidden)]
    pub const fn __new(
        module: &'static str,
        processor: &'static str,
        message: &'static str,
        register: fn(HostBuilder) -> HostBuilder,
    ) -> Self {
        ProcessorEntry {
            module,
            processor,
            message,
            register,
        }
    }

    /// The module path of the impl (`my_crate::orders`).
    pub fn module(&self) -> &'static str {
        self.module
    }

    /// The processor type, as written in the impl.
    pub fn processor(&self) -> &'static str {
        self.processor
    }

    /// The command or subscription it processes, as written in the impl.
    pub fn message(&self) -> &'static str {
        self.message
    }

    /// Every processor linked into this binary, in a stable order (module, then
    /// processor, then message), whatever order the linker chose.
    pub fn all() -> Vec<&'static ProcessorEntry> {
        let mut all: Vec<&'static ProcessorEntry> =
            inventory::iter::<ProcessorEntry>.into_iter().collect();
        all.sort_by_key(|e| (e.module, e.processor, e.message));
        all
    }

    pub(crate) fn register(&self, builder: HostBuilder) -> HostBuilder {
        (self.register)(builder)
    }

    /// Whether the entry was declared in `prefix` or a module under it.
    pub(crate) fn is_in(&self, prefix: &str) -> bool {
        self.module
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_prefix_matches_whole_path_segments() {
        let entry = ProcessorEntry::__new("shop::orders::eu", "Orders", "Order", |b| b);
        for prefix in ["shop", "shop::orders", "shop::orders::eu"] {
            assert!(entry.is_in(prefix), "{prefix}");
        }
        for prefix in [
            "sho",
            "shop::order",
            "shop::orders::e",
            "billing",
            "shop::orders::eu::x",
        ] {
            assert!(!entry.is_in(prefix), "{prefix}");
        }
    }
}
