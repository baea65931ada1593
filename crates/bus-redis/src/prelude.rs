//! Leaves out of a script's prelude the helpers the script never uses.
//!
//! Redis runs a script's whole text on every call, and each `local function` it passes
//! allocates a closure: about 50 ns of Redis time per helper per call (measured with
//! `redis-benchmark` on EVALSHA, docs/performance.md "Script preludes"). With every
//! helper of `common.lua` and `flow.lua` that is ~1.5 µs per call, paid in full by the
//! scripts called per message or per poll (delayed, keyed and deduplicated sends,
//! renewals, an idle consumer's reserve). So a script gets only the prelude definitions it
//! reaches: the same behaviour as the full concatenation, which foreign clients may still
//! load as it is (docs/wire-format.md, "Loading a script").
//!
//! A prelude is a list of top-level statements, each starting at column 0 (its comment
//! lines above it belong to it). A `local` statement defines names and is kept when the
//! script, or a statement kept after it, uses one of them (Lua sees a local only below its
//! definition, so one pass from the end is enough). Any other statement is kept. "Uses"
//! means the name appears as a word, comments and strings included, so a doubtful case
//! keeps the definition.

use std::collections::HashSet;

/// `prelude` with the definitions `body` never reaches left out, then `body`.
pub(crate) fn assemble(prelude: &str, body: &str) -> String {
    let statements = statements(prelude);
    let mut used = words(body);
    let mut kept = vec![false; statements.len()];
    for (i, statement) in statements.iter().enumerate().rev() {
        let needed = statement.defines.is_empty()
            || statement.defines.iter().any(|name| used.contains(name));
        if needed {
            kept[i] = true;
            used.extend(words(statement.text));
        }
    }
    let mut text = String::with_capacity(prelude.len() + body.len());
    for (statement, kept) in statements.iter().zip(kept) {
        if kept {
            text.push_str(statement.text);
        }
    }
    text.push_str(body);
    text
}

/// One top-level statement of a prelude, with the comment lines above it.
struct Statement<'a> {
    text: &'a str,
    /// The names a `local` statement defines; empty for any other statement.
    defines: Vec<&'a str>,
}

fn statements(prelude: &str) -> Vec<Statement<'_>> {
    let mut found: Vec<Statement<'_>> = Vec::new();
    // Where the statement being read began (its comment, if it has one), and where a run
    // of column-0 comment lines began: it belongs to the statement below it.
    let mut start = 0;
    let mut comment: Option<usize> = None;
    let mut offset = 0;
    for line in prelude.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        if line.starts_with("--") {
            comment.get_or_insert(at);
        } else if starts_statement(line) {
            let begins = comment.take().unwrap_or(at);
            if let Some(last) = found.last_mut() {
                last.text = &prelude[start..begins];
            } else if begins > 0 {
                // Text before the first statement (the file's own comment) is kept as it is.
                found.push(Statement {
                    text: &prelude[..begins],
                    defines: Vec::new(),
                });
            }
            start = begins;
            found.push(Statement {
                text: "",
                defines: defined_names(line),
            });
        } else {
            // An indented line, a blank line or a closing `end`: the statement goes on.
            comment = None;
        }
    }
    match found.last_mut() {
        Some(last) => last.text = &prelude[start..],
        None if !prelude.is_empty() => found.push(Statement {
            text: prelude,
            defines: Vec::new(),
        }),
        None => {}
    }
    found
}

/// A line at column 0 that is not a comment, blank or a statement's closing keyword.
fn starts_statement(line: &str) -> bool {
    let first = line.split(|c: char| !is_word_char(c)).next().unwrap_or("");
    !line.starts_with(char::is_whitespace)
        && !line.starts_with(['}', ')'])
        && !matches!(first, "end" | "else" | "elseif" | "until")
}

/// The names `local function f(...)` or `local a, b = ...` defines; none for any other
/// statement.
fn defined_names(line: &str) -> Vec<&str> {
    let Some(rest) = line.strip_prefix("local ") else {
        return Vec::new();
    };
    if let Some(function) = rest.strip_prefix("function ") {
        return function.split(|c: char| !is_word_char(c)).take(1).collect();
    }
    let names = rest.split('=').next().unwrap_or("");
    names
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect()
}

fn words(text: &str) -> HashSet<&str> {
    text.split(|c: char| !is_word_char(c))
        .filter(|word| !word.is_empty())
        .collect()
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRELUDE: &str = "\
-- The file's comment.
local LIMIT = 10
local A, B = 1, 2

-- Unused.
local function unused(x)
  if x then
    return LIMIT
  end
end
-- Used by helper only.
local function inner(x)
  return x + A
end
redis.setresp(2)
local function helper(x)
  return inner(x)
end
";

    #[test]
    fn keeps_what_the_body_reaches_and_every_other_statement() {
        let text = assemble(PRELUDE, "return helper(1)\n");
        assert_eq!(
            text,
            "\
local A, B = 1, 2

-- Used by helper only.
local function inner(x)
  return x + A
end
redis.setresp(2)
local function helper(x)
  return inner(x)
end
return helper(1)
"
        );
    }

    #[test]
    fn a_name_used_only_in_a_comment_keeps_its_definition() {
        let text = assemble(PRELUDE, "-- see unused()\nreturn 1\n");
        assert!(
            text.contains("local function unused(x)\n  if x then\n    return LIMIT\n  end\nend\n")
        );
        assert!(text.contains("local LIMIT = 10\n"));
        assert!(!text.contains("local function helper"));
    }

    #[test]
    fn a_word_containing_a_name_does_not_keep_it() {
        let text = assemble(PRELUDE, "return helpers_of(inner_x)\n");
        assert!(!text.contains("local function helper("));
        assert!(!text.contains("local function inner("));
    }

    #[test]
    fn statements_split_at_column_zero() {
        let found = statements(PRELUDE);
        let defines: Vec<Vec<&str>> = found.iter().map(|s| s.defines.clone()).collect();
        assert_eq!(
            defines,
            vec![
                vec!["LIMIT"],
                vec!["A", "B"],
                vec!["unused"],
                vec!["inner"],
                vec![],
                vec!["helper"]
            ]
        );
        let whole: String = found.iter().map(|s| s.text).collect();
        assert_eq!(
            whole, PRELUDE,
            "nothing is lost or repeated between statements"
        );
    }
}
