//! docs/wire-format.md's "Worked example" runs as written: each command of its `sh` blocks
//! is run in order by bash against a fresh redis-server, from the repository's root, and
//! what it prints must match the `#` lines under it. So a foreign client built from the
//! example is not refused, and the example cannot fall behind the scripts again.
//!
//! In the expected lines `...` matches any text and a 13-digit number any 13-digit number
//! (a time in ms); after a gap of three spaces or more a line explains, and a line that
//! only explains (`#` and a wide gap) is skipped. A command with expected lines prints as
//! redis-cli does at a terminal (`--no-raw`); the others (assignments, `$(...)`) as it does
//! in a pipe.

use std::path::Path;
use std::process::Command;

use bus_test_redis::RedisServer;

/// A command of the example and the lines it must print.
struct Step {
    command: String,
    expected: Vec<String>,
}

fn steps(doc: &str) -> Vec<Step> {
    let section = doc
        .split("\n## Worked example\n")
        .nth(1)
        .expect("docs/wire-format.md has a \"## Worked example\" section");
    let section = section.split("\n## ").next().unwrap();
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if !in_block || line.trim().is_empty() {
            continue;
        }
        match line.strip_prefix("# ") {
            Some(comment) => {
                if comment.starts_with("   ") {
                    continue;
                }
                let shown = comment.split("   ").next().unwrap().trim_end();
                steps
                    .last_mut()
                    .expect("an expected line follows a command")
                    .expected
                    .push(shown.to_owned());
            }
            None => steps.push(Step {
                command: line.to_owned(),
                expected: Vec::new(),
            }),
        }
    }
    steps
}

/// Whether `actual` is what `expected` shows (`...`: any text; 13 digits: any 13 digits).
fn matches(expected: &str, actual: &str) -> bool {
    fn go(e: &[u8], a: &[u8]) -> bool {
        if e.is_empty() {
            return a.is_empty();
        }
        if e.starts_with(b"...") {
            return (0..=a.len()).any(|skip| go(&e[3..], &a[skip..]));
        }
        let digits = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits(e) == 13 && !e.get(13).is_some_and(u8::is_ascii_digit) {
            return digits(a) == 13 && go(&e[13..], &a[13..]);
        }
        !a.is_empty() && e[0] == a[0] && go(&e[1..], &a[1..])
    }
    go(expected.as_bytes(), actual.as_bytes())
}

#[test]
fn the_worked_example_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/wire-format.md")).unwrap();
    let steps = steps(&doc);
    assert!(
        steps.iter().filter(|s| !s.expected.is_empty()).count() >= 5,
        "the example shows its replies"
    );
    let redis = RedisServer::start().unwrap();
    let mut script = format!(
        "redis-cli() {{ command redis-cli -p {} $RAW \"$@\"; }}\ncd '{}'\n",
        redis.port(),
        root.display()
    );
    for (i, step) in steps.iter().enumerate() {
        script.push_str(&format!("echo '@@step {i}'\n"));
        if step.expected.is_empty() {
            script.push_str(&format!("{}\n", step.command));
        } else {
            script.push_str(&format!("RAW=--no-raw {}\n", step.command));
        }
    }
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}\n{stdout}");
    let printed: Vec<&str> = stdout.split("@@step ").skip(1).collect();
    assert_eq!(printed.len(), steps.len(), "{stdout}");
    for (step, printed) in steps.iter().zip(printed) {
        let lines: Vec<&str> = printed.lines().skip(1).collect();
        let same = lines.len() == step.expected.len()
            && step
                .expected
                .iter()
                .zip(&lines)
                .all(|(e, a)| matches(e, a.trim_end()));
        assert!(
            same,
            "`{}` printed\n{}\nwhere the docs show\n{}\n(stderr: {stderr})",
            step.command,
            lines.join("\n"),
            step.expected.join("\n")
        );
    }
}

#[test]
fn the_pattern_rules_can_fail() {
    assert!(matches("(integer) 1", "(integer) 1"));
    assert!(!matches("(integer) 1", "(integer) 0"));
    assert!(matches("\"1712345708901\"", "\"1799999999999\""));
    assert!(!matches("\"1712345708901\"", "\"179999999999\""));
    assert!(matches(
        "1) \"{...,\\\"x\\\":1}\"",
        "1) \"{\\\"a\\\":2,\\\"x\\\":1}\""
    ));
    assert!(!matches("1) \"{...}\"", "1) \"[]\""));
}
