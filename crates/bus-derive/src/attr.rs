//! Parsing of `#[bus(...)]` into a checked [`Container`].
//!
//! Every mistake is recorded in a [`Ctxt`] with the span of the offending token, and
//! parsing carries on, so one compile reports all of them.

use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::{DeriveInput, Expr, ExprLit, Lit, LitStr, Path, Token, Type};

use crate::ctxt::Ctxt;

/// Longest accepted wire name, in bytes. The name ends up in several Redis keys per
/// queue; a bound keeps them short and matches the check bus-core makes at registration.
const MAX_NAME_LEN: usize = 200;

/// Which derive is running: decides the accepted keys and the generated impls.
#[derive(Clone, Copy)]
pub(crate) enum Derive {
    Command,
    Event,
    Subscription,
}

impl Derive {
    fn macro_name(self) -> &'static str {
        match self {
            Derive::Command => "RedisCommand",
            Derive::Event => "RedisEvent",
            Derive::Subscription => "EventSubscription",
        }
    }

    /// The keys this derive accepts, in the order error messages list them.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Derive::Command => &["queue", "urn", "format", "crate"],
            Derive::Event => &["topic", "urn", "format", "crate"],
            Derive::Subscription => &["event", "name", "crate"],
        }
    }

    /// The key that carries the wire name, and what that name is called in messages.
    fn name_key(self) -> (&'static str, &'static str) {
        match self {
            Derive::Command => ("queue", "queue"),
            Derive::Event => ("topic", "topic"),
            Derive::Subscription => ("name", "subscription"),
        }
    }
}

/// Serialization format named by `format = "..."`.
#[derive(Clone, Copy)]
pub(crate) enum Format {
    Json,
    MessagePack,
}

/// What to generate, once every required key is present and valid.
pub(crate) enum Body {
    /// `Message` plus the `Command` or `Event` marker.
    Message {
        derive: Derive,
        name: LitStr,
        /// The message type (`Message::TYPE`) when it is not the wire name: a URN.
        urn: Option<LitStr>,
        /// `None` keeps the trait's default (the bus's format).
        format: Option<Format>,
    },
    Subscription {
        event: Box<Type>,
        name: LitStr,
    },
}

pub(crate) struct Container {
    /// Path to the runtime crate: `::bus_core` unless `crate = "..."` says otherwise.
    pub(crate) krate: Path,
    pub(crate) body: Body,
}

/// Values as written, before the required-key checks.
#[derive(Default)]
struct Raw {
    /// Keys met so far, valid or not: a key with a bad value is not also "missing",
    /// and a second occurrence is a duplicate either way.
    seen: Vec<&'static str>,
    name: Option<LitStr>,
    urn: Option<LitStr>,
    event: Option<Box<Type>>,
    format: Option<Format>,
    krate: Option<Path>,
}

impl Container {
    pub(crate) fn from_ast(input: &DeriveInput, derive: Derive) -> syn::Result<Self> {
        let mut cx = Ctxt::new();
        let mut raw = Raw::default();

        for attr in input
            .attrs
            .iter()
            .filter(|attr| attr.path().is_ident("bus"))
        {
            // A parse error ends this attribute only; its earlier keys stay recorded.
            if let Err(err) =
                attr.parse_nested_meta(|meta| parse_key(&mut cx, &mut raw, derive, meta))
            {
                cx.syn_error(err);
            }
        }

        let (name_key, _) = derive.name_key();
        let mut require = |key: &'static str, example: &str| {
            if !raw.seen.contains(&key) {
                cx.error_spanned_by(
                    &input.ident,
                    format!(
                        "#[derive({})] needs #[bus({key} = {example})]",
                        derive.macro_name()
                    ),
                );
            }
        };
        if let Derive::Subscription = derive {
            require("event", "EventType");
        }
        require(name_key, "\"...\"");
        cx.check()?;

        let krate = raw.krate.unwrap_or_else(|| syn::parse_quote!(::bus_core));
        let body = match (derive, raw.name, raw.event) {
            (Derive::Subscription, Some(name), Some(event)) => Body::Subscription { event, name },
            (Derive::Command | Derive::Event, Some(name), _) => Body::Message {
                derive,
                name,
                urn: raw.urn,
                format: raw.format,
            },
            // Unreachable: a key that was seen but not stored recorded an error above.
            _ => {
                return Err(syn::Error::new_spanned(
                    &input.ident,
                    "bus-derive internal error: incomplete #[bus] attribute",
                ))
            }
        };
        Ok(Container { krate, body })
    }
}

fn parse_key(
    cx: &mut Ctxt,
    raw: &mut Raw,
    derive: Derive,
    meta: ParseNestedMeta<'_>,
) -> syn::Result<()> {
    let Some(key) = derive
        .keys()
        .iter()
        .copied()
        .find(|key| meta.path.is_ident(key))
    else {
        unknown_key(cx, derive, &meta);
        return skip_value(meta.input);
    };
    if raw.seen.contains(&key) {
        cx.error_spanned_by(&meta.path, format!("duplicate bus attribute `{key}`"));
        return skip_value(meta.input);
    }
    raw.seen.push(key);

    match key {
        "queue" | "topic" | "name" => {
            if let Some(lit) = string_value(cx, &meta, key)? {
                check_name(cx, derive.name_key().1, &lit);
                raw.name = Some(lit);
            }
        }
        "urn" => {
            if let Some(lit) = string_value(cx, &meta, key)? {
                check_urn(cx, &lit);
                raw.urn = Some(lit);
            }
        }
        "format" => {
            if let Some(lit) = string_value(cx, &meta, key)? {
                match lit.value().to_ascii_lowercase().as_str() {
                    "json" => raw.format = Some(Format::Json),
                    "msgpack" | "messagepack" => raw.format = Some(Format::MessagePack),
                    _ => cx.error_spanned_by(
                        &lit,
                        format!(
                            "unknown format {:?}; expected \"json\" or \"msgpack\"",
                            lit.value()
                        ),
                    ),
                }
            }
        }
        "crate" => {
            if let Some(lit) = string_value(cx, &meta, key)? {
                raw.krate = crate_path(cx, &lit);
            }
        }
        "event" => {
            let value = meta.value()?;
            if value.peek(LitStr) {
                let lit: LitStr = value.parse()?;
                cx.error_spanned_by(
                    &lit,
                    "`event` takes a type, not a string: write #[bus(event = EventType)]",
                );
            } else {
                raw.event = Some(value.parse()?);
            }
        }
        _ => unreachable!("every key in Derive::keys is handled"),
    }
    Ok(())
}

/// Reports a key this derive does not take, with a hint when another derive takes it.
fn unknown_key(cx: &mut Ctxt, derive: Derive, meta: &ParseNestedMeta<'_>) {
    let written = quote::ToTokens::to_token_stream(&meta.path)
        .to_string()
        .replace(' ', "");
    let hint = match written.as_str() {
        "queue" => " (`queue` is for #[derive(RedisCommand)])",
        "topic" => " (`topic` is for #[derive(RedisEvent)])",
        "event" | "name" => " (subscriptions are declared with #[derive(EventSubscription)])",
        "format" => " (a format is set on the event type itself)",
        _ => "",
    };
    cx.error_spanned_by(
        &meta.path,
        format!(
            "unknown bus attribute `{written}`; expected one of: {}{hint}",
            derive.keys().join(", ")
        ),
    );
}

/// A URN is 1 to `MAX_NAME_LEN` bytes without whitespace.
fn check_urn(cx: &mut Ctxt, lit: &LitStr) {
    let urn = lit.value();
    if urn.is_empty() || urn.len() > MAX_NAME_LEN || urn.chars().any(char::is_whitespace) {
        cx.error_spanned_by(
            lit,
            format!("invalid urn {urn:?}: 1-{MAX_NAME_LEN} bytes without spaces, such as \"urn:babel:orders:created\""),
        );
    }
}

/// The `crate` attribute's path. `parse` gives the path's tokens the literal's span, so
/// a path that does not resolve is reported at the attribute, not at the derive.
fn crate_path(cx: &mut Ctxt, lit: &LitStr) -> Option<Path> {
    match lit.parse::<Path>() {
        Ok(path) => Some(path),
        Err(_) => {
            cx.error_spanned_by(
                lit,
                format!(
                    "invalid crate path {:?}; expected a path such as \"my_bus::core\"",
                    lit.value()
                ),
            );
            None
        }
    }
}

/// Reads `= "..."`. A value of another kind is recorded as an error at the value and
/// consumed, so the keys after it are still checked.
fn string_value(
    cx: &mut Ctxt,
    meta: &ParseNestedMeta<'_>,
    key: &str,
) -> syn::Result<Option<LitStr>> {
    match meta.value()?.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(Some(lit)),
        other => {
            cx.error_spanned_by(
                other,
                format!("expected a string literal: #[bus({key} = \"...\")]"),
            );
            Ok(None)
        }
    }
}

/// Consumes the value of a key that is reported and otherwise ignored: `= tokens` up to
/// the next comma outside angle brackets (a type like `Foo<A, B>` has commas of its
/// own), or a parenthesized list.
fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        let mut depth = 0usize;
        loop {
            if input.is_empty() || (depth == 0 && input.peek(Token![,])) {
                break;
            }
            match input.parse::<proc_macro2::TokenTree>()? {
                proc_macro2::TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
                proc_macro2::TokenTree::Punct(p) if p.as_char() == '>' => {
                    depth = depth.saturating_sub(1)
                }
                _ => {}
            }
        }
    } else if input.peek(syn::token::Paren) {
        input.parse::<proc_macro2::TokenTree>()?;
    }
    Ok(())
}

/// Wire names become parts of Redis keys (`{queue}` hash tags, `:` separators), so
/// only characters that cannot break that layout are allowed.
fn check_name(cx: &mut Ctxt, what: &str, lit: &LitStr) {
    let name = lit.value();
    if name.is_empty() {
        cx.error_spanned_by(lit, format!("{what} name must not be empty"));
    } else if name.len() > MAX_NAME_LEN {
        cx.error_spanned_by(
            lit,
            format!(
                "{what} name is {} bytes long; names may be at most {MAX_NAME_LEN} bytes",
                name.len()
            ),
        );
    } else if let Some(bad) = name.chars().find(|&c| !is_name_char(c)) {
        cx.error_spanned_by(
            lit,
            format!(
                "invalid {what} name {name:?}: names may contain only ASCII letters, digits, '.', '_' and '-' (found {bad:?})"
            ),
        );
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}
