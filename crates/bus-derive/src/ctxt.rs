//! Error collector, after serde_derive's `Ctxt`.
//!
//! A derive keeps going after the first mistake so that one compile shows every problem
//! in an attribute, each at its own span, instead of one per edit-compile cycle.

use std::fmt::Display;
use std::thread;

use quote::ToTokens;

/// Accumulates errors while a derive input is parsed.
///
/// It must be consumed with [`Ctxt::check`]: dropping it unchecked is a bug in the
/// macro (errors would vanish), so `Drop` panics, as serde's does.
pub(crate) struct Ctxt {
    errors: Option<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Self {
        Ctxt {
            errors: Some(Vec::new()),
        }
    }

    /// Records an error whose span covers `tokens`.
    pub(crate) fn error_spanned_by<T: ToTokens, M: Display>(&mut self, tokens: T, message: M) {
        self.syn_error(syn::Error::new_spanned(tokens.into_token_stream(), message));
    }

    /// Records an error produced by syn itself (parse errors keep syn's span).
    pub(crate) fn syn_error(&mut self, err: syn::Error) {
        self.errors
            .as_mut()
            .expect("Ctxt used after check")
            .push(err);
    }

    /// Consumes the context: `Ok` if nothing was recorded, else every error combined
    /// into one, which `into_compile_error` turns into one `compile_error!` per span.
    pub(crate) fn check(mut self) -> syn::Result<()> {
        let mut errors = self.errors.take().expect("Ctxt checked twice").into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for rest in errors {
            combined.combine(rest);
        }
        Err(combined)
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        if !thread::panicking() && self.errors.is_some() {
            panic!("forgot to check for errors");
        }
    }
}
