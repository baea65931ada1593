//! The canonical envelope, decoded as BabelQueue's Python codec does.

use bus_babelqueue::{
    frame, poison_record, unframe, DeadLetterBlock, Envelope, Headers, Poison, Reason,
};
use bus_core::transport::MAX_NESTING as MAX_DEPTH;
use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{json, Value};

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

fn value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn a_new_envelope_is_canonical_compact_json() {
    let env = Envelope::new(
        "urn:babel:orders:created",
        &raw(r#"{ "order_id" : 1042 }"#),
        "orders",
    )
    .unwrap();
    let text = String::from_utf8(env.encode()).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 5);
    assert!(text.starts_with(r#"{"job":"urn:babel:orders:created","trace_id":""#));
    assert!(text.contains(r#""data":{"order_id":1042},"meta":{"id":""#));
    assert!(text.ends_with(r#","attempts":0}"#));
    assert_eq!(v["meta"]["queue"], "orders");
    assert_eq!(v["meta"]["lang"], "rust");
    assert_eq!(v["meta"]["schema_version"], 1);
    assert!(v["meta"]["created_at"].as_i64().unwrap() > 1_600_000_000_000);
    assert_eq!(v["trace_id"].as_str().unwrap().len(), 36);
    assert!(!text.contains(' '));
}

#[test]
fn data_must_be_an_object_and_the_urn_not_blank() {
    assert!(Envelope::new("urn:a", &raw("[1]"), "q").is_err());
    assert!(Envelope::new(" \t", &raw("{}"), "q").is_err());
}

#[test]
fn urn_alias_folds_into_job() {
    let env = Envelope::decode(br#"{"urn":"urn:a","data":{},"attempts":0}"#).unwrap();
    assert_eq!(env.urn(), "urn:a");
    assert_eq!(
        value(&env.encode()),
        json!({"data":{},"attempts":0,"job":"urn:a"})
    );
    // A valid job wins, the alias is dropped.
    let env = Envelope::decode(br#"{"job":"urn:j","urn":"urn:a"}"#).unwrap();
    assert_eq!(env.urn(), "urn:j");
    assert_eq!(value(&env.encode()), json!({"job":"urn:j"}));
    // A non-string or blank job falls back to the alias, in place.
    let env = Envelope::decode(br#"{"job":7,"urn":"urn:a","x":1}"#).unwrap();
    assert_eq!(
        String::from_utf8(env.encode()).unwrap(),
        r#"{"job":"urn:a","x":1}"#
    );
    let env = Envelope::decode(br#"{"job":"  ","urn":"urn:a"}"#).unwrap();
    assert_eq!(env.urn(), "urn:a");
}

#[test]
fn forbidden_keys_are_dropped_unknown_ones_kept() {
    let body = br#"{"job":"urn:a","timestamp":1,"ext":{"k":[]},"data":{"n":9007199254740993,"l":[]},"meta":{"id":"m","max_retries":3,"attempts":1,"source":"x","ts":2,"custom":{"a":1}},"attempts":2}"#;
    let mut env = Envelope::decode(body).unwrap();
    assert_eq!(env.meta().id.as_deref(), Some("m"));
    assert_eq!(env.attempts(), 2);
    env.set_attempts(3);
    assert_eq!(
        String::from_utf8(env.encode()).unwrap(),
        r#"{"job":"urn:a","ext":{"k":[]},"data":{"n":9007199254740993,"l":[]},"meta":{"id":"m","custom":{"a":1}},"attempts":3}"#
    );
}

#[test]
fn duplicates_keep_the_last_value_at_the_first_place() {
    let env = Envelope::decode(br#"{"job":"urn:a","attempts":1,"data":{},"attempts":4}"#).unwrap();
    assert_eq!(env.attempts(), 4);
    assert_eq!(
        String::from_utf8(env.encode()).unwrap(),
        r#"{"job":"urn:a","attempts":4,"data":{}}"#
    );
}

#[test]
fn poison_classification() {
    type Case<'a> = (&'a [u8], fn(&Poison) -> bool);
    let cases: [Case<'_>; 14] = [
        (b"\xff{}", |p| *p == Poison::InvalidUtf8),
        (b"{\"job\":\"urn:a\",\"data\":{\"s\":\"\xc3\x28\"}}", |p| {
            *p == Poison::InvalidUtf8
        }),
        (b"hello", |p| matches!(p, Poison::NotJson(_))),
        (b"", |p| matches!(p, Poison::NotJson(_))),
        (br#"{"job":"urn:a"} x"#, |p| matches!(p, Poison::NotJson(_))),
        (b"\xef\xbb\xbf{\"job\":\"urn:a\"}", |p| {
            matches!(p, Poison::NotJson(_))
        }),
        (br#"{"job":"urn:a","data":{"x":NaN}}"#, |p| {
            matches!(p, Poison::NotJson(_))
        }),
        (b"[1,2]", |p| *p == Poison::NotAnObject),
        (b"null", |p| *p == Poison::NotAnObject),
        (br#"{"data":{}}"#, |p| *p == Poison::NoIdentity),
        (br#"{"job":"urn:a","attempts":"1"}"#, |p| {
            matches!(p, Poison::BadMember(_))
        }),
        (br#"{"job":"urn:a","attempts":1.0}"#, |p| {
            matches!(p, Poison::BadMember(_))
        }),
        (br#"{"job":"urn:a","meta":{"created_at":"x"}}"#, |p| {
            matches!(p, Poison::BadMember(_))
        }),
        (br#"{"job":"urn:a","data":{"x":1e400}}"#, |p| {
            matches!(p, Poison::BadMember(_))
        }),
    ];
    for (body, check) in cases {
        match Envelope::decode(body) {
            Err(p) => assert!(check(&p), "{:?} gave {p:?}", String::from_utf8_lossy(body)),
            Ok(_) => panic!("{:?} decoded", String::from_utf8_lossy(body)),
        }
    }
    // A non-string job with no alias is identity-less, not a type error.
    assert_eq!(
        Envelope::decode(br#"{"job":5}"#).unwrap_err(),
        Poison::NoIdentity
    );
    // Nulls are allowed for typed members.
    assert!(Envelope::decode(
        br#"{"job":"urn:a","trace_id":null,"attempts":null,"data":null,"meta":null}"#
    )
    .is_ok());
}

#[test]
fn deep_nesting_is_poison_not_a_stack_overflow() {
    for depth in [MAX_DEPTH + 1, 100_000] {
        let body = format!(
            r#"{{"job":"urn:a","data":{{"x":{}{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert_eq!(
            Envelope::decode(body.as_bytes()).unwrap_err(),
            Poison::TooDeep
        );
        // The poison record of such a body is the raw wrapper, built without recursion.
        let block = DeadLetterBlock::new(Reason::Poison, "q", 0, None, None);
        let record = poison_record(body.as_bytes(), &block);
        assert!(record.starts_with(br#"{"raw":"#));
    }
}

#[test]
fn dead_letter_record_keeps_the_envelope_and_adds_the_block() {
    let env = Envelope::decode(br#"{"job":"urn:a","trace_id":"t","data":{"x":[]},"meta":{"id":"m","queue":"q"},"attempts":2,"zz":true}"#).unwrap();
    let block = DeadLetterBlock::new(
        Reason::Failed,
        "q",
        3,
        Some("boom".into()),
        Some("HandlerError".into()),
    );
    let record = value(&env.dead_lettered(&block));
    assert_eq!(record["attempts"], 3);
    assert_eq!(record["zz"], true);
    assert_eq!(record["data"], json!({"x": []}));
    let dl = &record["dead_letter"];
    assert_eq!(dl["reason"], "failed");
    assert_eq!(dl["error"], "boom");
    assert_eq!(dl["exception"], "HandlerError");
    assert_eq!(dl["original_queue"], "q");
    assert_eq!(dl["attempts"], 3);
    assert_eq!(dl["lang"], "rust");
    assert!(dl["failed_at"].as_i64().unwrap() > 0);
}

#[test]
fn frame_carries_headers_of_an_envelope() {
    let env = Envelope::new("urn:a", &raw(r#"{"s":"\"quoted\" / ü"}"#), "q").unwrap();
    let headers: Headers = [("traceparent".to_owned(), "00-1-2-01".to_owned())].into();
    let stored = frame(&env.encode(), &headers);
    let (body, got) = unframe(&stored);
    assert_eq!(body, env.encode());
    assert_eq!(got, headers);
}

proptest! {
    #[test]
    fn envelopes_round_trip(urn in "urn:[a-z:]{1,20}", text in ".*", n in any::<i64>(), queue in "[a-z.-]{1,12}",
                            attempts in 0i64..1000) {
        let data = serde_json::to_string(&json!({"text": text, "n": n, "l": []})).unwrap();
        let mut env = Envelope::new(&urn, &raw(&data), &queue).unwrap();
        env.set_attempts(attempts);
        let bytes = env.encode();
        let back = Envelope::decode(&bytes).unwrap();
        prop_assert_eq!(back.urn(), urn.as_str());
        prop_assert_eq!(back.attempts(), attempts);
        prop_assert_eq!(back.meta(), env.meta());
        prop_assert_eq!(back.trace_id(), env.trace_id());
        prop_assert_eq!(back.data().get(), data.as_str());
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(env) = Envelope::decode(&bytes) {
            prop_assert!(!env.urn().trim().is_empty());
        }
        let block = DeadLetterBlock::new(Reason::Poison, "q", 0, None, None);
        let record = poison_record(&bytes, &block);
        let parsed: Value = serde_json::from_slice(&record).unwrap();
        prop_assert_eq!(&parsed["dead_letter"]["reason"], "poison");
    }

    #[test]
    fn json_garbage_never_panics(text in r#"[\{\}\[\]":,a-z0-9\\ ]{0,80}"#) {
        let _ = Envelope::decode(text.as_bytes());
        let (body, _) = unframe(text.as_bytes());
        prop_assert!(!body.is_empty() || text.is_empty());
    }
}
