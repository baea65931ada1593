//! The samples' message contracts.
