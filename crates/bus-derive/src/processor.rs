//! `#[processor]`: puts a processor into the link-time registry that
//! `HostBuilder::register_processors` reads.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{GenericArgument, ItemImpl, LitStr, Path, PathArguments, Type};

const USAGE: &str = "#[processor] goes on an `impl CommandProcessor<C> for P` or \
                     `impl EventProcessor<S> for P` block";

/// Which processor trait the impl is of, and its one type argument.
enum Kind {
    Command(Type),
    Event(Type),
}

/// Parsed `#[processor(...)]` arguments.
#[derive(Default)]
struct Args {
    /// `new = path::to::constructor`: a `fn() -> P`; `Default` when absent.
    new: Option<Path>,
    /// `crate = "path::to::bus_core"`.
    krate: Option<Path>,
}

pub(crate) fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args = parse_args(args)?;
    let item: ItemImpl =
        syn::parse2(item.clone()).map_err(|_| syn::Error::new(Span::call_site(), USAGE))?;
    let kind = kind(&item)?;
    if !item.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &item.generics,
            "#[processor] cannot register a generic impl: the registry needs one concrete \
             processor per message; register each instance with HostBuilder::command or \
             HostBuilder::event",
        ));
    }
    let krate = args.krate.unwrap_or_else(|| syn::parse_quote!(::bus_core));
    let self_ty = &item.self_ty;
    // The constructor's errors (no `Default`, a wrong signature) point at what the user
    // wrote: the type, or the `new` path.
    let make = match &args.new {
        Some(new) => quote_spanned!(new.span()=> #new()),
        None => {
            quote_spanned!(self_ty.span()=> <#self_ty as ::core::default::Default>::default())
        }
    };
    let (method, message) = match &kind {
        Kind::Command(c) => (quote!(__registered_command), c),
        Kind::Event(s) => (quote!(__registered_event), s),
    };
    let processor_name = self_ty.to_token_stream().to_string().replace(' ', "");
    let message_name = message.to_token_stream().to_string().replace(' ', "");
    Ok(quote! {
        #item

        #[allow(unused_qualifications, clippy::absolute_paths)]
        const _: () = {
            fn __bus_register(builder: #krate::HostBuilder) -> #krate::HostBuilder {
                builder.#method::<#message, #self_ty>(#make)
            }
            #krate::__private::inventory::submit! {
                #krate::ProcessorEntry::__new(
                    ::core::module_path!(),
                    #processor_name,
                    #message_name,
                    __bus_register,
                )
            }
        };
    })
}

fn kind(item: &ItemImpl) -> syn::Result<Kind> {
    let Some((None, path, _)) = &item.trait_ else {
        return Err(syn::Error::new_spanned(&item.self_ty, USAGE));
    };
    let Some(last) = path.segments.last() else {
        return Err(syn::Error::new_spanned(path, USAGE));
    };
    let command = last.ident == "CommandProcessor";
    if !command && last.ident != "EventProcessor" {
        return Err(syn::Error::new_spanned(path, USAGE));
    }
    let PathArguments::AngleBracketed(generic) = &last.arguments else {
        return Err(syn::Error::new_spanned(path, USAGE));
    };
    let mut types = generic.args.iter().filter_map(|a| match a {
        GenericArgument::Type(t) => Some(t.clone()),
        _ => None,
    });
    match (types.next(), types.next()) {
        (Some(t), None) if generic.args.len() == 1 => Ok(if command {
            Kind::Command(t)
        } else {
            Kind::Event(t)
        }),
        _ => Err(syn::Error::new_spanned(path, USAGE)),
    }
}

fn parse_args(args: TokenStream) -> syn::Result<Args> {
    let mut parsed = Args::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("new") {
            if parsed.new.is_some() {
                return Err(meta.error("duplicate key `new`"));
            }
            parsed.new = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("crate") {
            if parsed.krate.is_some() {
                return Err(meta.error("duplicate key `crate`"));
            }
            let path: LitStr = meta.value()?.parse()?;
            parsed.krate = Some(path.parse()?);
            Ok(())
        } else {
            Err(meta.error(
                "unknown key: #[processor] accepts `new = path::to::constructor` and \
                 `crate = \"path::to::bus_core\"`",
            ))
        }
    });
    syn::parse::Parser::parse2(parser, args)?;
    Ok(parsed)
}
