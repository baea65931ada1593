//! One way to hand the host a transport or a saga store: by value, or already shared.

use std::sync::Arc;

use crate::{SagaStore, Transport};

/// A value the host or a bus can keep behind an `Arc<T>`: a transport or saga store by
/// value, or an `Arc` of one that something else shares (one method instead of a
/// `_arc` twin for each).
pub trait IntoShared<T: ?Sized> {
    /// The shared value.
    fn into_shared(self) -> Arc<T>;
}

impl<T: Transport> IntoShared<dyn Transport> for T {
    fn into_shared(self) -> Arc<dyn Transport> {
        Arc::new(self)
    }
}

impl IntoShared<dyn Transport> for Arc<dyn Transport> {
    fn into_shared(self) -> Arc<dyn Transport> {
        self
    }
}

impl<T: Transport> IntoShared<dyn Transport> for Arc<T> {
    fn into_shared(self) -> Arc<dyn Transport> {
        self
    }
}

impl<S: SagaStore> IntoShared<dyn SagaStore> for S {
    fn into_shared(self) -> Arc<dyn SagaStore> {
        Arc::new(self)
    }
}

impl IntoShared<dyn SagaStore> for Arc<dyn SagaStore> {
    fn into_shared(self) -> Arc<dyn SagaStore> {
        self
    }
}

impl<S: SagaStore> IntoShared<dyn SagaStore> for Arc<S> {
    fn into_shared(self) -> Arc<dyn SagaStore> {
        self
    }
}
