//! What a script takes: its KEYS by name and in order, and its ARGV. Declared once, beside
//! the script (`lua!(..., keys = [...], argv = [...])`), and everything else comes from it:
//!
//! - the script's opening lines: each KEY as a Lua local named after it, and the check of
//!   the call's shape (`common.lua`'s `expect`), run before any write ([`Shape::header`]);
//! - the KEYS the Rust side passes (`keys::ScriptKeys` names a queue's keys by these names);
//! - the KEYS and ARGV tables of docs/wire-format.md ([`Shape::row`]), checked by a test.

use std::fmt::Write;

/// A script's KEYS and ARGV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The KEYS by name, in order: a queue's key by its suffix (`ready`, `dead-info`, as
    /// [`QueueKeys::named`](crate::keys::QueueKeys::named) reads it), any other by what it
    /// is (`subs`, `inbox`). A last name ending in `...` stands for more keys that the
    /// script counts itself (their number depends on its ARGV).
    pub keys: &'static [&'static str],
    /// The ARGV by name, in order: `name` (any string), `name:int` (a decimal integer), and
    /// a last `name...` for what repeats, which the script checks itself.
    pub argv: &'static [&'static str],
}

impl Shape {
    /// The KEYS that always come, without a trailing `...`.
    pub fn fixed_keys(&self) -> &'static [&'static str] {
        match self.keys.split_last() {
            Some((last, fixed)) if last.ends_with("...") => fixed,
            _ => self.keys,
        }
    }

    /// Whether more KEYS may follow the fixed ones.
    pub fn open_keys(&self) -> bool {
        self.keys.last().is_some_and(|k| k.ends_with("..."))
    }

    /// The ARGV that always come, without a trailing `...`.
    pub fn fixed_argv(&self) -> &'static [&'static str] {
        match self.argv.split_last() {
            Some((last, fixed)) if last.ends_with("...") => fixed,
            _ => self.argv,
        }
    }

    /// Whether more ARGV may follow the fixed ones.
    pub fn open_argv(&self) -> bool {
        self.argv.last().is_some_and(|a| a.ends_with("..."))
    }

    /// The Lua that opens the file of the script `name`, before anything of its own: the
    /// check of the call's shape (exactly these KEYS and ARGV, or at least the fixed ones
    /// when more may follow; integers where declared), which refuses a call that does not
    /// fit with an error reply before any write, then its fixed KEYS as locals
    /// (`dead-info` is `DEAD_INFO`). Self-contained (it needs no prelude), between
    /// [`HEADER_START`] and [`HEADER_END`], so that [`with_header`] can replace it.
    pub fn header(&self, name: &str) -> String {
        let mut lua = String::from(HEADER_START);
        lua.push('\n');
        let refuse = |what: &str| {
            format!(
                "error({{ err = 'ERR bus: {name} expects {what} (docs/wire-format.md, \"The calls\")' }})"
            )
        };
        let keys = self.fixed_keys();
        let (op, at_least) = if self.open_keys() {
            ("<", "at least ")
        } else {
            ("~=", "")
        };
        if !(self.open_keys() && keys.is_empty()) {
            let what = format!("{at_least}{} KEYS, got ' .. #KEYS .. '", keys.len());
            let _ = writeln!(
                lua,
                "if #KEYS {op} {} then {} end",
                keys.len(),
                refuse(&what)
            );
        }
        let argv = self.fixed_argv();
        let names: Vec<&str> = argv.iter().map(|a| a.trim_end_matches(":int")).collect();
        let (op, at_least) = if self.open_argv() {
            ("<", "at least ")
        } else {
            ("~=", "")
        };
        if !(self.open_argv() && argv.is_empty()) {
            let what = format!(
                "{at_least}{} ARGV ({}), got ' .. #ARGV .. '",
                argv.len(),
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            );
            let _ = writeln!(
                lua,
                "if #ARGV {op} {} then {} end",
                argv.len(),
                refuse(&what)
            );
        }
        let integers: Vec<String> = argv
            .iter()
            .enumerate()
            .filter(|(_, a)| a.ends_with(":int"))
            .map(|(i, _)| (i + 1).to_string())
            .collect();
        if !integers.is_empty() {
            let what = "an integer as ARGV[' .. i .. '], got ' .. string.format('%q', string.sub(ARGV[i], 1, 40)) .. '";
            let _ = writeln!(
                lua,
                "for _, i in ipairs({{ {} }}) do\n  if not string.find(ARGV[i], '^%-?%d+$') then {} end\nend",
                integers.join(", "),
                refuse(what)
            );
        }
        if !keys.is_empty() {
            let locals: Vec<String> = keys.iter().map(|k| lua_name(k)).collect();
            let values: Vec<String> = (1..=keys.len()).map(|i| format!("KEYS[{i}]")).collect();
            let _ = writeln!(lua, "local {} = {}", locals.join(", "), values.join(", "));
        }
        lua.push_str(HEADER_END);
        lua.push('\n');
        lua
    }

    /// The script's row of docs/wire-format.md's table: `| name | KEYS | ARGV |`.
    pub fn row(&self, name: &str) -> String {
        let list = |items: &[&str]| {
            if items.is_empty() {
                "none".to_owned()
            } else {
                items
                    .iter()
                    .map(|i| format!("`{i}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        format!("| `{name}` | {} | {} |", list(self.keys), list(self.argv))
    }
}

/// The first line of a script's generated header.
pub const HEADER_START: &str =
    "-- The call's shape, generated from the script's declaration (lua!(..., keys, argv)):";
/// The last line of a script's generated header.
pub const HEADER_END: &str = "-- (end of the generated shape)";

/// `text` (a script's file) opening with `shape`'s header: the header it has replaced,
/// or put first if it has none. A file equal to this is up to date.
pub fn with_header(name: &str, shape: &Shape, text: &str) -> String {
    let rest = match text.strip_prefix(HEADER_START) {
        Some(after) => match after.find(HEADER_END) {
            Some(end) => after[end + HEADER_END.len()..].trim_start_matches('\n'),
            None => text,
        },
        None => text,
    };
    shape.header(name) + rest
}

/// The Lua local of a key: its name in capitals, `-` as `_` (`dead-info` is `DEAD_INFO`).
pub fn lua_name(key: &str) -> String {
    key.replace('-', "_").to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_shape_checks_exact_counts_and_names_its_keys() {
        let shape = Shape {
            keys: &["ready", "dead-info"],
            argv: &["max:int", "holder", "lock_ms:int"],
        };
        let header = shape.header("reserve");
        assert!(header.starts_with(HEADER_START), "{header}");
        assert!(header.contains("\nif #KEYS ~= 2 then error({ err = 'ERR bus: reserve expects 2 KEYS, got ' .. #KEYS .. ' (docs"), "{header}");
        assert!(header.contains("if #ARGV ~= 3 then error({ err = 'ERR bus: reserve expects 3 ARGV (max, holder, lock_ms), got '"), "{header}");
        assert!(
            header.contains("for _, i in ipairs({ 1, 3 }) do"),
            "{header}"
        );
        assert!(
            header.ends_with(&format!(
                "local READY, DEAD_INFO = KEYS[1], KEYS[2]\n{HEADER_END}\n"
            )),
            "{header}"
        );
        assert_eq!(
            shape.row("reserve"),
            "| `reserve` | `ready`, `dead-info` | `max:int`, `holder`, `lock_ms:int` |"
        );
    }

    #[test]
    fn an_open_shape_checks_at_least_its_fixed_part() {
        let shape = Shape {
            keys: &["subs", "ready..."],
            argv: &["s:int", "names..."],
        };
        let header = shape.header("publish");
        assert!(header.contains("if #KEYS < 1 then"), "{header}");
        assert!(header.contains("expects at least 1 ARGV (s)"), "{header}");
        assert!(
            header.ends_with(&format!("local SUBS = KEYS[1]\n{HEADER_END}\n")),
            "{header}"
        );
        let none = Shape {
            keys: &["keys..."],
            argv: &["all..."],
        };
        assert_eq!(none.header("x"), format!("{HEADER_START}\n{HEADER_END}\n"));
    }

    #[test]
    fn a_header_is_put_first_once_and_replaced_after() {
        let old = Shape {
            keys: &["a"],
            argv: &[],
        };
        let new = Shape {
            keys: &["a", "b"],
            argv: &[],
        };
        let body = "-- what it does\nreturn 1\n";
        let first = with_header("x", &old, body);
        assert_eq!(first, old.header("x") + body);
        assert_eq!(with_header("x", &old, &first), first);
        assert_eq!(with_header("x", &new, &first), new.header("x") + body);
    }
}
