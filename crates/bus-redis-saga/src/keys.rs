//! Every key name of the saga store, built in one place (see docs/sagas.md).
//!
//! A saga lives at `[<prefix>:]sagas:<partition>:<id>`. Partition keys are checked like
//! queue names (no `:`), so the first `:` after `sagas:` ends the partition and the id
//! may contain anything.

use bus_redis::keys::escape_glob;

/// The segment every saga key starts with (after the prefix).
pub(crate) const SAGAS: &str = "sagas";

/// The key of one saga.
pub(crate) fn saga(prefix: &str, partition: &str, id: &str) -> String {
    format!("{}{SAGAS}:{partition}:{id}", namespace(prefix))
}

/// The SCAN pattern of one partition's sagas, or of all sagas.
pub(crate) fn pattern(prefix: &str, partition: Option<&str>) -> String {
    let base = format!("{}{SAGAS}:", escape_glob(&namespace(prefix)));
    match partition {
        Some(partition) => format!("{base}{}:*", escape_glob(partition)),
        None => format!("{base}*"),
    }
}

/// Splits a saga key into (partition, id); `None` if it is not one under `prefix`.
pub(crate) fn parse<'k>(prefix: &str, key: &'k str) -> Option<(&'k str, &'k str)> {
    let rest = key.strip_prefix(namespace(prefix).as_str())?;
    let rest = rest.strip_prefix(SAGAS)?.strip_prefix(':')?;
    let (partition, id) = rest.split_once(':')?;
    (!partition.is_empty() && !id.is_empty()).then_some((partition, id))
}

fn namespace(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}:")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        assert_eq!(saga("", "order", "42"), "sagas:order:42");
        assert_eq!(saga("shop", "order", "a:b"), "shop:sagas:order:a:b");
        assert_eq!(pattern("", None), "sagas:*");
        assert_eq!(pattern("shop", Some("order")), "shop:sagas:order:*");
        assert_eq!(pattern("a*b", Some("order")), "a\\*b:sagas:order:*");
    }

    #[test]
    fn keys_parse_back() {
        for (prefix, partition, id) in [("", "order", "42"), ("shop", "p.1", "x:y:z")] {
            let key = saga(prefix, partition, id);
            assert_eq!(parse(prefix, &key), Some((partition, id)));
        }
        assert_eq!(parse("", "other:order:1"), None);
        assert_eq!(parse("shop", "sagas:order:1"), None);
        assert_eq!(parse("", "sagas:order"), None);
        assert_eq!(parse("", "sagas:order:"), None);
    }
}
