//! The tracker's metrics served to Prometheus during a training loop
//! ([`tensor_lifetime_examples::prometheus`]). Built with the `prometheus` feature of the
//! examples crate (it turns on tensor-lifetime's `metrics` feature):
//!
//! ```text
//! cargo run --release -p tensor-lifetime-examples --features prometheus --example prometheus -- [--leak [--leak-kib 4096]] [--port 9464] [--steps 600] [--step-ms 100] [--hold SECONDS]
//! curl -s localhost:9464/metrics | grep tensor_lifetime_live_bytes
//! ```
//!
//! `--port` (or `METRICS_PORT`) is the port of `/metrics` (on every address), `--leak`
//! runs the leaky loop (`--leak-kib`: KiB kept per step, 4096 by default), `--steps` and `--step-ms` set its length and pace, `--hold` keeps
//! serving that many seconds after the loop.

use metrics_exporter_prometheus::PrometheusBuilder;
use std::io::Write;
use std::time::Duration;
use tensor_lifetime_examples::prometheus::{run, Options};

/// The port of the OpenTelemetry Prometheus exporter's convention.
const DEFAULT_PORT: u16 = 9464;

struct Args {
    port: u16,
    hold: Duration,
    opts: Options,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        port: match std::env::var("METRICS_PORT") {
            Ok(p) => p
                .trim()
                .parse()
                .map_err(|_| format!("METRICS_PORT={p:?} is not a port number"))?,
            Err(_) => DEFAULT_PORT,
        },
        hold: Duration::ZERO,
        opts: Options::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = |what: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{flag} needs {what}"))?;
            v.parse()
                .map_err(|_| format!("{flag} {v:?}: expected {what}"))
        };
        match flag.as_str() {
            "--leak" => args.opts.leak = true,
            "--port" => {
                args.port = u16::try_from(number("a port number")?)
                    .map_err(|_| "--port: expected a port number".to_string())?
            }
            "--leak-kib" => args.opts.leak_bytes = number("KiB")? as usize * 1024,
            "--steps" => args.opts.steps = number("a number of steps")? as usize,
            "--step-ms" => args.opts.step_pause = Duration::from_millis(number("milliseconds")?),
            "--hold" => args.hold = Duration::from_secs(number("seconds")?),
            other => {
                return Err(format!(
                    "unknown option {other:?} (options: --leak, --leak-kib N, --port N, \
                     --steps N, --step-ms N, --hold SECONDS)"
                ))
            }
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("prometheus: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = PrometheusBuilder::new()
        .with_http_listener(([0, 0, 0, 0], args.port))
        .install()
    {
        eprintln!(
            "prometheus: cannot serve /metrics on port {}: {e}",
            args.port
        );
        std::process::exit(1);
    }
    println!(
        "serving http://localhost:{}/metrics ({} loop, {} steps)",
        args.port,
        if args.opts.leak { "leaky" } else { "clean" },
        args.opts.steps
    );
    let _ = std::io::stdout().flush();
    match run(&args.opts, |_| {}) {
        Ok(loss) => println!("prometheus finished: loss {loss:.4}"),
        Err(e) => {
            eprintln!("prometheus: training failed: {e}");
            std::process::exit(1);
        }
    }
    let _ = std::io::stdout().flush();
    std::thread::sleep(args.hold);
}
