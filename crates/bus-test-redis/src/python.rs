//! The Python side of the interop tests: the interpreter of the BabelQueue SDK's venv (or
//! the system `python3` for scripts that need only the standard library), a script run to
//! its end, and a long-running worker whose JSON lines are read as they come.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// Overrides the interpreter of the BabelQueue SDK's venv.
pub const BQ_PYTHON_ENV: &str = "BQ_PYTHON";
/// What scripts/test.sh installs in `target/bq-venv` (`pip install "..."`).
pub const BQ_SDK: &str = "babelqueue[redis]==1.24.0";
/// Overrides the system interpreter of [`Python::system`].
pub const SYSTEM_PYTHON_ENV: &str = "BUS_TEST_PYTHON";
/// Longest a script run by [`Python::run`] may take.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The interpreter of the venv with the BabelQueue SDK: `BQ_PYTHON`, else the one
/// scripts/test.sh creates at `<workspace>/target/bq-venv`.
///
/// # Panics
/// If neither exists, with how to make it.
pub fn bq_python() -> PathBuf {
    if let Ok(path) = std::env::var(BQ_PYTHON_ENV) {
        return PathBuf::from(path);
    }
    // The venv lives in the workspace's target/ (not CARGO_TARGET_DIR): test.sh makes it there.
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bq-venv/bin/python");
    assert!(
        venv.exists(),
        "no BabelQueue venv at {}: run scripts/test.sh (it creates it with \
         `pip install \"{BQ_SDK}\"`) or set {BQ_PYTHON_ENV}",
        venv.display()
    );
    venv
}

/// A Python script and the interpreter that runs it, with a clean, UTF-8 environment.
#[derive(Debug, Clone)]
pub struct Python {
    interpreter: PathBuf,
    script: PathBuf,
    env: Vec<(String, String)>,
}

impl Python {
    /// `script` on the BabelQueue SDK's interpreter ([`bq_python`]).
    pub fn babelqueue(script: impl Into<PathBuf>) -> Python {
        Self::on(bq_python(), script)
    }

    /// `script` on `BUS_TEST_PYTHON`, else `python3` (standard library only).
    pub fn system(script: impl Into<PathBuf>) -> Python {
        let interpreter = std::env::var(SYSTEM_PYTHON_ENV).unwrap_or_else(|_| "python3".into());
        Self::on(interpreter.into(), script)
    }

    fn on(interpreter: PathBuf, script: impl Into<PathBuf>) -> Python {
        Python {
            interpreter,
            script: script.into(),
            env: Vec::new(),
        }
    }

    /// One more environment variable for every run.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// The command that runs the script with `args`: stdin closed, stdout and stderr
    /// piped, killed when dropped.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.interpreter);
        cmd.arg(&self.script)
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONIOENCODING", "utf-8")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs the script to its end (at most [`SCRIPT_TIMEOUT`]); its stdout lines and its
    /// stderr.
    ///
    /// # Panics
    /// If it cannot start, overruns, or exits unsuccessfully (with its stderr).
    pub async fn run_lines(&self, args: &[&str]) -> (Vec<String>, String) {
        let name = self.script.display();
        let child = self.command(args).spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run `{}` ({e}) for {name}: the test needs that Python 3 \
                     ({SYSTEM_PYTHON_ENV} or {BQ_PYTHON_ENV} names another interpreter)",
                self.interpreter.display()
            )
        });
        let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{name} {args:?} did not finish in {SCRIPT_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("waiting for {name}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            output.status.success(),
            "{name} {args:?} failed: {}\n{stderr}",
            output.status
        );
        (stdout.lines().map(str::to_owned).collect(), stderr)
    }

    /// [`Python::run_lines`] for a script that prints one JSON value a line.
    ///
    /// # Panics
    /// As [`Python::run_lines`], and on a line that is not JSON.
    pub async fn run(&self, args: &[&str]) -> (Vec<Value>, String) {
        let (lines, stderr) = self.run_lines(args).await;
        let values = lines.iter().map(|l| json_line(&self.script, l)).collect();
        (values, stderr)
    }

    /// Starts the script as a long-running [`Worker`] (its stderr is the test's).
    pub fn spawn(&self, args: &[&str]) -> Worker {
        let mut cmd = self.command(args);
        cmd.stderr(Stdio::inherit());
        Worker::start(cmd)
    }
}

fn json_line(script: &Path, line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "{} printed a line that is not JSON ({e}): {line}",
            script.display()
        )
    })
}

/// A long-running process that prints one JSON value a line (a Python SDK worker, a Rust
/// worker binary): the child, and its lines read as they come (a full pipe would stall it).
#[derive(Debug)]
pub struct Worker {
    /// The process, for its id or a signal of the test's choosing.
    pub child: Child,
    lines: UnboundedReceiver<Value>,
}

impl Worker {
    /// A program (e.g. `env!("CARGO_BIN_EXE_...")`) with `args`; its stderr is the test's.
    pub fn binary(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Worker {
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stderr(Stdio::inherit());
        Self::start(cmd)
    }

    /// Starts `cmd` with its stdout piped and read line by line.
    ///
    /// # Panics
    /// If it cannot start.
    pub fn start(mut cmd: Command) -> Worker {
        cmd.stdout(Stdio::piped()).kill_on_drop(true);
        let program = format!("{:?}", cmd.as_std().get_program());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting the worker {program}: {e}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let value = json_line(Path::new(&program), &line);
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Worker { child, lines }
    }

    /// The next JSON line, waiting at most `limit`; `None` at the end or on time-out.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        tokio::time::timeout(limit, self.lines.recv()).await.ok()?
    }

    /// SIGKILL, and wait for it.
    ///
    /// # Panics
    /// If the kill fails.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("killing the worker");
    }

    /// SIGTERM (a graceful stop), then the lines it printed until it ended (each waited
    /// for at most 10 s).
    pub async fn stop(mut self) -> Vec<Value> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let mut rest = Vec::new();
        while let Some(v) = self.next(Duration::from_secs(10)).await {
            rest.push(v);
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        rest
    }
}
