//! What a script's prelude costs per call: each script run as a foreign client loads it
//! (every helper of `common.lua`, and `flow.lua` for reserve, before the script) and as
//! the bus loads it (only the helpers the script reaches, crates/bus-redis/src/prelude.rs),
//! in the same run against the same Redis. Redis runs a script's whole text on every call,
//! and each helper defined is a closure allocated per call.
//!
//! Each phase makes `MESSAGES` calls, 100 in flight, of one script:
//! - `reserve` on an empty queue: a consumer's poll that finds nothing;
//! - `renew` with nothing held: the least a script does;
//! - `send_at`: one delayed send, a message stored per call.
//!
//! `cargo bench -p benches --bench preludes` (`MESSAGES`, `ROUNDS` as for the others);
//! figures in docs/performance.md, "Script preludes".

use benches::cpu::Figure;
use benches::env::{BenchEnv, RunSettings};
use bus_core::transport::Source;
use bus_redis::keys::{QueueKeys, ScriptKeys};
use bus_redis::LuaScript;
use fred::types::{Key, Value};
use futures::StreamExt;

const IN_FLIGHT: usize = 100;
const ALLOW_OOM: &str = "#!lua flags=allow-oom\n";
const COMMON: &str = include_str!("../../crates/bus-redis/lua/common.lua");
const FLOW: &str = include_str!("../../crates/bus-redis/lua/flow.lua");
const KEYED: &str = include_str!("../../crates/bus-redis/lua/keyed.lua");
const RESERVE: &str = include_str!("../../crates/bus-redis/lua/reserve.lua");
const RENEW: &str = include_str!("../../crates/bus-redis/lua/renew.lua");
const SEND_AT: &str = include_str!("../../crates/bus-redis/lua/send_at.lua");

#[derive(Clone, Copy)]
enum Call {
    Reserve,
    Renew,
    SendAt,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Reserve => "reserve, empty queue",
            Call::Renew => "renew, nothing held",
            Call::SendAt => "send_at, one message",
        }
    }

    /// The script as a foreign client loads it (`pruned == false`) or as the bus does.
    fn script(self, pruned: bool) -> LuaScript {
        let (name, shebang, preludes, body): (_, _, &[(&'static str, &'static str)], _) = match self
        {
            Call::Reserve => (
                "reserve",
                ALLOW_OOM,
                &[("common", COMMON), ("keyed", KEYED), ("flow", FLOW)],
                RESERVE,
            ),
            Call::Renew => ("renew", ALLOW_OOM, &[("common", COMMON)], RENEW),
            Call::SendAt => ("send_at", "", &[("common", COMMON)], SEND_AT),
        };
        if pruned {
            LuaScript::assemble(name, shebang, preludes, None, body)
        } else {
            let texts: Vec<&str> = preludes.iter().map(|(_, text)| *text).collect();
            let text = [&[shebang][..], &texts, &[body]].concat().concat();
            LuaScript::new(name, Box::leak(text.into_boxed_str()))
        }
    }

    /// The KEYS as the consumer passes them (`ScriptKeys`), in a queue of its own.
    fn keys(self, prefix: &str) -> Vec<Key> {
        let queue = QueueKeys::new(prefix, &Source::queue("q").unwrap());
        let scripts = ScriptKeys::new(&queue);
        match self {
            Call::Reserve => scripts.reserve,
            Call::Renew => scripts.renew,
            Call::SendAt => [&queue.delayed, &queue.msgs, &queue.ready]
                .map(|k| Key::from(k.as_str()))
                .to_vec(),
        }
    }

    fn args(self, i: u64) -> Vec<Value> {
        match self {
            Call::Reserve => vec![100.into(), 60_000.into(), "bench".into(), 100.into()],
            Call::Renew => vec![60_000.into(), "bench".into(), 4_000.into(), 0.into()],
            // Due in an hour, so that nothing is promoted while the phase runs.
            Call::SendAt => vec![
                (4_102_444_800_000_i64).into(),
                format!("m{i}").into(),
                format!("{{\"id\":\"m{i}\"}}").into(),
            ],
        }
    }
}

async fn calls(env: &BenchEnv, call: Call, pruned: bool, count: u64) -> Figure {
    let client = env.client().await;
    let script = call.script(pruned);
    let keys = call.keys(&env.namespace('p'));
    // The first call loads the script (NOSCRIPT, then EVAL), outside the measure.
    script
        .call(&client, keys.clone(), call.args(0))
        .await
        .unwrap();
    env.reset_stats().await;
    let started = env.meter.start();
    futures::stream::iter(1..=count)
        .map(|i| script.call(&client, keys.clone(), call.args(i)))
        .buffer_unordered(IN_FLIGHT)
        .for_each(|reply| {
            reply.unwrap();
            async {}
        })
        .await;
    let mut figure = env.meter.stop(started, count);
    figure.command_us = env.command_us(call.name(), count, &["evalsha"]).await;
    let _: () = fred::interfaces::ClientLike::quit(&client).await.unwrap();
    figure
}

fn main() {
    let run = RunSettings::from_env(1_000, 100_000);
    let rt = run.runtime();
    rt.block_on(async {
        let env = BenchEnv::start().await;
        for round in 1..=run.rounds {
            println!(
                "\n== round {round}/{}: {} calls per phase, {IN_FLIGHT} in flight ==",
                run.rounds, run.messages
            );
            for call in [Call::Reserve, Call::Renew, Call::SendAt] {
                let full = calls(&env, call, false, run.messages).await;
                full.print(&format!("{}, whole prelude", call.name()));
                let pruned = calls(&env, call, true, run.messages).await;
                pruned.print(&format!("{}, helpers it uses", call.name()));
                println!(
                    "   Redis command time per call: {:.2} -> {:.2} us ({:+.2} us)",
                    full.command_us,
                    pruned.command_us,
                    pruned.command_us - full.command_us
                );
            }
        }
        env.close().await;
    });
}
