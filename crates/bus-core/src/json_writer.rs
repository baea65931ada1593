//! A message body written as JSON, byte for byte what `serde_json::to_writer` writes, at
//! less cost for a string that needs no escape.
//!
//! serde_json escapes a string one byte at a time, through a table: under `valgrind
//! --tool=callgrind`, a send's ~100-byte body took ~1,200 instructions, more than the
//! rest of its envelope (docs/performance.md). [`write()`] looks for a byte to escape
//! eight at a time and copies a string that has none whole; a string that has one is
//! escaped by serde_json itself, and so is a number.
//!
//! What this writer does not write as serde_json would (a map key that is not a string
//! or an integer, serde_json's own `RawValue`), and any error, starts the body over with
//! serde_json: its output, or its error, is the result. The body's `Serialize` then runs
//! twice, which only a `Serialize` with side effects could tell.

use serde::ser::{self, Serialize};

/// Where the run of bytes that a JSON string holds as themselves ends: the index of the
/// first `"`, `\\` or control character (or the length); and whether the bytes looked at
/// (up to seven past that index) were all ASCII. Eight bytes at a time: a byte below 0x20
/// borrows in `word - 0x20…`, and one equal to `"` or `\\` is zero after the XOR, so
/// borrows in `- 0x01…`; a borrow can mark bytes above a hit, never below one.
pub(crate) fn unescaped_run(bytes: &[u8]) -> (usize, bool) {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let zero = |w: u64| w.wrapping_sub(ONES) & !w;
    let mut chunks = bytes.chunks_exact(8);
    let (mut at, mut seen) = (0, 0);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        seen |= word;
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let quote = zero(word ^ (ONES * u64::from(b'"')));
        let backslash = zero(word ^ (ONES * u64::from(b'\\')));
        let hits = (control | quote | backslash) & HIGH;
        if hits != 0 {
            return (at + hits.trailing_zeros() as usize / 8, seen & HIGH == 0);
        }
        at += 8;
    }
    for &b in chunks.remainder() {
        seen |= u64::from(b);
        if b == b'"' || b == b'\\' || b < 0x20 {
            break;
        }
        at += 1;
    }
    (at, seen & HIGH == 0)
}

/// Writes `text` as serde_json writes a string: its bytes in quotes when none needs an
/// escape, by serde_json itself otherwise.
#[inline]
pub(crate) fn string(out: &mut Vec<u8>, text: &str) {
    if !quoted(out, text.as_bytes()) {
        // (Writing a `str` into a `Vec` cannot fail.)
        let _ = serde_json::to_writer(out, text);
    }
}

/// Writes `text` (UTF-8) in quotes if serde_json would write it as its bytes; `false`,
/// and nothing written, if it needs an escape.
#[inline]
pub(crate) fn quoted(out: &mut Vec<u8>, text: &[u8]) -> bool {
    if unescaped_run(text).0 != text.len() {
        return false;
    }
    out.reserve(text.len() + 2);
    out.push(b'"');
    out.extend_from_slice(text);
    out.push(b'"');
    true
}

/// Writes `value` as JSON after what `out` holds.
pub(crate) fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let start = out.len();
    if value.serialize(&mut Writer { out: &mut *out }).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    serde_json::to_writer(out, value)
}

/// Something serde_json writes otherwise, or an error: left to serde_json.
#[derive(Debug)]
pub(crate) struct Other;

impl std::fmt::Display for Other {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Other {}

impl ser::Error for Other {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Other
    }
}

type Result<T = ()> = std::result::Result<T, Other>;

/// serde_json's `RawValue` (and `Number` with arbitrary precision) pass through a struct
/// of a name of its own, which only its own serializer understands.
fn private(name: &str) -> Result {
    if name.starts_with("$serde_json::") {
        Err(Other)
    } else {
        Ok(())
    }
}

/// Serializer methods that write a number by `Self::number`.
macro_rules! numbers {
    ($($method:ident: $type:ty),* $(,)?) => {$(
        fn $method(self, v: $type) -> Result {
            self.number(v)
        }
    )*};
}

/// Serializer methods that leave a value of one argument to serde_json.
macro_rules! refused {
    ($($method:ident: $type:ty),* $(,)?) => {$(
        fn $method(self, _: $type) -> Result {
            Err(Other)
        }
    )*};
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    fn string(&mut self, text: &str) {
        string(self.out, text);
    }

    /// A number, by serde_json itself: exactly its digits (its float formatting is its
    /// own choice, and has changed), at the cost of a call.
    fn number<N: Serialize>(&mut self, n: N) -> Result {
        // (Writing a number into a `Vec` cannot fail.)
        let _ = serde_json::to_writer(&mut *self.out, &n);
        Ok(())
    }

    /// Opens a container; its elements follow through a [`Compound`].
    fn open<'w>(&'w mut self, bracket: u8) -> Compound<'w, 'a> {
        self.out.push(bracket);
        Compound {
            writer: self,
            first: true,
            close: b"",
        }
    }

    /// `{"variant":`, for a variant that holds a value.
    fn variant(&mut self, variant: &str) {
        self.out.push(b'{');
        self.string(variant);
        self.out.push(b':');
    }

    /// `{"variant":` and a container, closed with the `}` after its own bracket.
    fn open_variant<'w>(&'w mut self, variant: &str, bracket: u8) -> Compound<'w, 'a> {
        self.variant(variant);
        let mut compound = self.open(bracket);
        compound.close = b"}";
        compound
    }
}

/// The elements of an array or an object, then its closing (and, for a variant, the `}`
/// of the object that names it).
struct Compound<'w, 'a> {
    writer: &'w mut Writer<'a>,
    first: bool,
    close: &'static [u8],
}

impl Compound<'_, '_> {
    fn comma(&mut self) {
        if !self.first {
            self.writer.out.push(b',');
        }
        self.first = false;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.comma();
        value.serialize(&mut *self.writer)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result {
        self.comma();
        self.writer.string(key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }

    fn end(self, bracket: u8) -> Result {
        self.writer.out.push(bracket);
        self.writer.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Other;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, v: bool) -> Result {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    numbers! {
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_u128: u128, serialize_f32: f32, serialize_f64: f64,
    }
    fn serialize_char(self, v: char) -> Result {
        self.string(v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result {
        self.string(v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result {
        use ser::SerializeSeq;
        let mut array = self.open(b'[');
        for byte in v {
            array.serialize_element(byte)?;
        }
        array.end(b']')
    }
    fn serialize_none(self) -> Result {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.string(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result {
        private(name)?;
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        self.variant(variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Ok(self.open(b'['))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Ok(self.open(b'['))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Ok(self.open(b'['))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Ok(self.open_variant(variant, b'['))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Ok(self.open(b'{'))
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        private(name)?;
        Ok(self.open(b'{'))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Ok(self.open_variant(variant, b'{'))
    }
}

/// The compounds whose elements come one call each: `$method(value)` or
/// `$method(key, value)`, closed by `$bracket`.
macro_rules! elements {
    ($($trait:ident :: $method:ident ($($key:ident)?) $bracket:literal;)*) => {$(
        impl ser::$trait for Compound<'_, '_> {
            type Ok = ();
            type Error = Other;
            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $($key: &'static str,)?
                value: &T,
            ) -> Result {
                elements!(@one self $($key)? value)
            }
            fn end(self) -> Result {
                Compound::end(self, $bracket)
            }
        }
    )*};
    (@one $self:ident $value:ident) => { $self.element($value) };
    (@one $self:ident $key:ident $value:ident) => { $self.field($key, $value) };
}

elements! {
    SerializeSeq::serialize_element() b']';
    SerializeTuple::serialize_element() b']';
    SerializeTupleStruct::serialize_field() b']';
    SerializeTupleVariant::serialize_field() b']';
    SerializeStruct::serialize_field(key) b'}';
    SerializeStructVariant::serialize_field(key) b'}';
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Other;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.comma();
        key.serialize(Key(&mut *self.writer))?;
        self.writer.out.push(b':');
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        value.serialize(&mut *self.writer)
    }
    fn end(self) -> Result {
        Compound::end(self, b'}')
    }
}

/// A map's key: a string, or an integer in quotes, as serde_json writes them; any other
/// key is left to serde_json.
struct Key<'w, 'a>(&'w mut Writer<'a>);

impl Key<'_, '_> {
    /// An integer key, in quotes.
    fn number<N: Serialize>(self, n: N) -> Result {
        self.0.out.push(b'"');
        self.0.number(n)?;
        self.0.out.push(b'"');
        Ok(())
    }
}

impl ser::Serializer for Key<'_, '_> {
    type Ok = ();
    type Error = Other;
    type SerializeSeq = ser::Impossible<(), Other>;
    type SerializeTuple = ser::Impossible<(), Other>;
    type SerializeTupleStruct = ser::Impossible<(), Other>;
    type SerializeTupleVariant = ser::Impossible<(), Other>;
    type SerializeMap = ser::Impossible<(), Other>;
    type SerializeStruct = ser::Impossible<(), Other>;
    type SerializeStructVariant = ser::Impossible<(), Other>;

    fn serialize_str(self, v: &str) -> Result {
        self.0.string(v);
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result {
        private(name)?;
        value.serialize(self)
    }
    numbers! {
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_u128: u128,
    }
    fn serialize_bytes(self, _: &[u8]) -> Result {
        Err(Other)
    }
    // (serde_json writes these keys in quotes too; this writer leaves them to it.)
    refused! { serialize_bool: bool, serialize_f32: f32, serialize_f64: f64, serialize_char: char }
    fn serialize_none(self) -> Result {
        Err(Other)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result {
        Err(Other)
    }
    fn serialize_unit(self) -> Result {
        Err(Other)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result {
        Err(Other)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result {
        Err(Other)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(Other)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
        Err(Other)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(Other)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(Other)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
        Err(Other)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(Other)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(Other)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;

    use super::*;

    /// What this writer writes of `value`, and whether it needed serde_json to.
    fn written<T: Serialize + ?Sized>(value: &T) -> (serde_json::Result<Vec<u8>>, bool) {
        let mut out = b"head".to_vec();
        let by_hand = value
            .serialize(&mut Writer {
                out: &mut Vec::new(),
            })
            .is_ok();
        let result = write(&mut out, value).map(|()| out[4..].to_vec());
        (result, !by_hand)
    }

    fn same_as_serde<T: Serialize + ?Sized>(value: &T) -> bool {
        let (ours, _) = written(value);
        match (ours, serde_json::to_vec(value)) {
            (Ok(ours), Ok(theirs)) => ours == theirs,
            (Err(ours), Err(theirs)) => ours.to_string() == theirs.to_string(),
            _ => false,
        }
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            any::<String>().prop_map(serde_json::Value::from),
            "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é]{0,20}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(any::<String>(), inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[derive(Debug, Clone, Serialize)]
    enum Kind {
        Unit,
        Newtype(i32),
        Tuple(u8, String),
        Struct { a: Option<f32>, b: Vec<Kind> },
    }

    #[derive(Debug, Clone, Serialize)]
    struct Unit;

    #[derive(Debug, Clone, Serialize)]
    struct Newtype(String);

    #[derive(Debug, Clone, Serialize)]
    struct Pair(i128, u128);

    #[derive(Debug, Clone, Serialize)]
    struct Body {
        n: u64,
        text: String,
        #[serde(rename = "é\"key")]
        odd_name: char,
        kinds: Vec<Kind>,
        by_number: BTreeMap<i32, bool>,
        by_kind: BTreeMap<Newtype, Unit>,
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        pair: Pair,
        float: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        maybe: Option<()>,
        #[serde(flatten)]
        more: BTreeMap<String, i8>,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        let leaf = prop_oneof![
            Just(Kind::Unit),
            any::<i32>().prop_map(Kind::Newtype),
            (any::<u8>(), any::<String>()).prop_map(|(a, b)| Kind::Tuple(a, b)),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            (any::<Option<f32>>(), proptest::collection::vec(inner, 0..3))
                .prop_map(|(a, b)| Kind::Struct { a, b })
        })
    }

    prop_compose! {
        fn body()(
            n in any::<u64>(),
            text in any::<String>(),
            odd_name in any::<char>(),
            kinds in proptest::collection::vec(kind(), 0..3),
            by_number in proptest::collection::btree_map(any::<i32>(), any::<bool>(), 0..3),
            by_kind in proptest::collection::btree_map(any::<String>(), Just(()), 0..3),
            bytes in proptest::collection::vec(any::<u8>(), 0..8),
            pair in (any::<i128>(), any::<u128>()),
            float in any::<f64>(),
            maybe in any::<Option<()>>(),
            more in proptest::collection::btree_map("[a-z]{1,4}", any::<i8>(), 0..3),
        ) -> Body {
            Body {
                n,
                text,
                odd_name,
                kinds,
                by_number,
                by_kind: by_kind.into_keys().map(|k| (Newtype(k), Unit)).collect(),
                bytes,
                pair: Pair(pair.0, pair.1),
                float,
                maybe,
                more,
            }
        }
    }

    impl PartialEq for Newtype {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }
    impl Eq for Newtype {}
    impl PartialOrd for Newtype {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Newtype {
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            self.0.cmp(&other.0)
        }
    }

    proptest! {
        #[test]
        fn json_values_are_written_as_serde_json_writes_them(value in json()) {
            prop_assert!(same_as_serde(&value));
            // Every JSON value is written by hand.
            prop_assert!(!written(&value).1);
        }

        #[test]
        fn derived_bodies_are_written_as_serde_json_writes_them(body in body()) {
            prop_assert!(same_as_serde(&body));
            prop_assert!(!written(&body).1);
        }
    }

    /// What only serde_json writes: its output, or its error, is the result.
    #[test]
    fn what_serde_json_writes_otherwise_is_left_to_it() {
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: ser::Serializer>(&self, _: S) -> std::result::Result<S::Ok, S::Error> {
                Err(ser::Error::custom("this body cannot be written"))
            }
        }
        let raw = serde_json::value::RawValue::from_string("{ \"raw\" : [1, 2] }".into()).unwrap();
        let by_bool: BTreeMap<bool, u8> = [(true, 1)].into();
        let by_char: BTreeMap<char, u8> = [('c', 1)].into();
        let nested_raw = BTreeMap::from([("inner", &raw)]);
        for (case, needed_serde) in [
            (same_as_serde(&raw), written(&raw).1),
            (same_as_serde(&nested_raw), written(&nested_raw).1),
            (same_as_serde(&by_bool), written(&by_bool).1),
            (same_as_serde(&by_char), written(&by_char).1),
            (same_as_serde(&Fails), written(&Fails).1),
        ] {
            assert!(case && needed_serde);
        }
        let (result, _) = written(&Fails);
        assert_eq!(
            result.unwrap_err().to_string(),
            "this body cannot be written"
        );
        assert_eq!(
            written(&nested_raw).0.unwrap(),
            br#"{"inner":{ "raw" : [1, 2] }}"#
        );
    }

    #[test]
    fn a_string_needs_an_escape_at_any_place_in_its_words() {
        for len in 0..24 {
            for at in 0..len {
                for byte in [b'"', b'\\', 0, 0x1f] {
                    let mut text = vec![b'a'; len];
                    text[at] = byte;
                    let text = String::from_utf8(text).unwrap();
                    assert_eq!(unescaped_run(text.as_bytes()).0, at, "{text:?}");
                    assert!(same_as_serde(&text), "{text:?}");
                }
            }
            let plain = "é".repeat(len);
            assert_eq!(unescaped_run(plain.as_bytes()), (plain.len(), len == 0));
        }
    }
}
