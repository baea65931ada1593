//! Code generation from a checked [`Container`].

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use crate::attr::{Body, Container, Derive, Format};

pub(crate) fn derive(input: &DeriveInput, derive: Derive) -> syn::Result<TokenStream> {
    let Container { krate, body } = Container::from_ast(input, derive)?;
    let ident = &input.ident;
    // No bounds are added: the trait's own supertraits (Serialize, Send, 'static, ...)
    // must already hold, so a generic type states its bounds where it is declared.
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();

    let impls = match body {
        Body::Message {
            derive,
            name,
            urn,
            format,
        } => {
            let marker = match derive {
                Derive::Event => quote!(Event),
                _ => quote!(Command),
            };
            // Only an explicit `format` overrides the trait default, so that a change of
            // default in bus-core reaches derived types too.
            let format = format.map(|format| {
                let variant = match format {
                    Format::Json => quote!(Json),
                    Format::MessagePack => quote!(MessagePack),
                };
                quote! {
                    const FORMAT: ::core::option::Option<#krate::Format> =
                        ::core::option::Option::Some(#krate::Format::#variant);
                }
            });
            let urn = urn.map(|urn| quote!(const TYPE: &'static str = #urn;));
            quote! {
                #[automatically_derived]
                impl #impl_generics #krate::Message for #ident #ty_generics #where_clause {
                    const NAME: &'static str = #name;
                    #urn
                    const KIND: #krate::MessageKind = #krate::MessageKind::#marker;
                    #format
                }

                #[automatically_derived]
                impl #impl_generics #krate::#marker for #ident #ty_generics #where_clause {}
            }
        }
        Body::Subscription { event, name } => quote! {
            #[automatically_derived]
            impl #impl_generics #krate::Subscription for #ident #ty_generics #where_clause {
                type Event = #event;
                const NAME: &'static str = #name;
            }
        },
    };

    // The anonymous const keeps anything the impls need out of the user's namespace. The
    // paths inside are fully qualified on purpose (a user's `use` must not change their
    // meaning), so lints against long paths are silenced, as serde does.
    Ok(quote! {
        #[allow(unused_qualifications, clippy::absolute_paths)]
        const _: () = {
            #impls
        };
    })
}
