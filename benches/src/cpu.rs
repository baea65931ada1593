//! CPU accounting of a benchmark phase: utime + stime of the redis-server and of this
//! process, read from `/proc/<pid>/stat` (10 ms resolution), per message.

use std::time::Instant;

/// utime + stime of a process, in seconds.
pub fn cpu_seconds(pid: u32, tick: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the first, utime
    // the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field(11) + field(12)) / tick
}

/// Clock ticks per second, for `/proc/<pid>/stat` (100 if `getconf` cannot say).
pub fn clock_tick() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Reads the CPU time of a redis-server and of this process.
#[derive(Debug)]
pub struct Meter {
    /// The redis-server's process id.
    pub redis_pid: u32,
    /// Clock ticks per second (`getconf CLK_TCK`).
    pub tick: f64,
}

/// Where a timed phase started.
#[derive(Debug)]
pub struct Started {
    at: Instant,
    redis: f64,
    client: f64,
}

/// What one phase measured, per message.
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    /// Messages per second.
    pub rate: f64,
    /// Redis's own account (`INFO commandstats`) of the time its commands took, per
    /// message: less noisy than CPU times on a busy machine.
    pub command_us: f64,
    /// CPU of the redis-server, µs per message.
    pub redis_us: f64,
    /// CPU of this process, µs per message.
    pub client_us: f64,
}

impl Figure {
    /// A phase that did not run.
    pub const NONE: Figure = Figure {
        rate: f64::NAN,
        command_us: f64::NAN,
        redis_us: f64::NAN,
        client_us: f64::NAN,
    };

    /// Prints the phase's row of a report: rate, CPU per message, command time.
    pub fn print(&self, name: &str) {
        println!(
            "{name:<48} {:>9.0} msg/s | CPU us/msg: redis {:>5.2} client {:>5.2} | redis commands {:>5.2} us/msg",
            self.rate, self.redis_us, self.client_us, self.command_us
        );
    }
}

impl Meter {
    /// Starts timing a phase.
    pub fn start(&self) -> Started {
        Started {
            at: Instant::now(),
            redis: cpu_seconds(self.redis_pid, self.tick),
            client: cpu_seconds(std::process::id(), self.tick),
        }
    }

    /// Ends a phase that moved `messages`.
    pub fn stop(&self, started: Started, messages: u64) -> Figure {
        let secs = started.at.elapsed().as_secs_f64();
        let per = |cpu: f64| cpu * 1e6 / messages as f64;
        Figure {
            rate: messages as f64 / secs,
            command_us: f64::NAN,
            redis_us: per(cpu_seconds(self.redis_pid, self.tick) - started.redis),
            client_us: per(cpu_seconds(std::process::id(), self.tick) - started.client),
        }
    }
}
