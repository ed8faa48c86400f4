//! The `prometheus` example as Prometheus sees it: the example is started, `/metrics` is
//! scraped and checked by `promtool check metrics`, and a Prometheus server started here
//! (a temporary configuration scraping a clean and a leaky run every second) answers its
//! query API with the live bytes gauge growing under the leaky loop and flat under the
//! clean one.
//!
//! Needs Debian's `prometheus` package (`promtool`, `prometheus`). Without it the tests
//! are skipped and say so on standard error, unless `TENSOR_LIFETIME_REQUIRE_PROMETHEUS=1`
//! (or `CI=true`), as in `.ci/run`, which installs the package.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set to `1` to fail, not skip, when the Prometheus tools are missing.
const REQUIRE: &str = "TENSOR_LIFETIME_REQUIRE_PROMETHEUS";

/// Whether `promtool` and `prometheus` are installed; `false` (the test skips, saying
/// so) on a machine without them, a failure where they are required.
fn tools_available(test: &str) -> bool {
    let found = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if found("promtool") && found("prometheus") {
        return true;
    }
    let set = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    assert!(
        !set(REQUIRE, "1") && !set("CI", "true"),
        "promtool or prometheus is missing: this test needs Debian's `prometheus` package \
         (`apt-get update && apt-get install -y prometheus`; .ci/run installs it)"
    );
    // Past the test harness's capture: a passing run says it skipped.
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped: promtool/prometheus not installed; set {REQUIRE}=1 to require them"
    );
    false
}

/// The example binary, built beside this test (`target/<profile>/examples/prometheus`).
fn example_exe() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = profile_dir.join("examples").join("prometheus");
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build --release -p tensor-lifetime-examples \
         --features prometheus --example prometheus` (a test named alone does not build examples)",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process killed when the test ends, whatever happens.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The example serving on `port`: `leak_kib` KiB kept per step (0: the clean loop).
fn start_example(port: u16, leak_kib: u64) -> Running {
    let mut cmd = Command::new(example_exe());
    cmd.args([
        "--port",
        &port.to_string(),
        "--steps",
        "400",
        "--step-ms",
        "100",
    ])
    .env("TENSOR_LIFETIME_REPORT", "off")
    .stdout(Stdio::null());
    if leak_kib > 0 {
        cmd.args(["--leak", "--leak-kib", &leak_kib.to_string()]);
    }
    Running(cmd.spawn().expect("the example starts"))
}

/// The body of `GET path` on `127.0.0.1:port`, or `None` when nothing answers yet.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some(dechunk(body));
    }
    Some(body.to_string())
}

/// A chunked HTTP body's content.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Polls `what` every 200 ms for up to `limit`; panics with `waiting_for` after that.
fn wait_for<T>(limit: Duration, waiting_for: &str, mut what: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = what() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {waiting_for}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The value of the sample `name` (with its labels as written) in a scrape.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn the_scrape_passes_promtool() {
    if !tools_available("the_scrape_passes_promtool") {
        return;
    }
    let port = free_port();
    let _example = start_example(port, 256);
    // Past the warm-up, the leak found.
    let text = wait_for(Duration::from_secs(120), "a scrape with the leak", || {
        get(port, "/metrics")
            .filter(|t| sample(t, "tensor_lifetime_leaks").is_some_and(|n| n >= 1.0))
    });
    for name in [
        "tensor_lifetime_live_bytes{device=\"cpu\"}",
        "tensor_lifetime_role_live_bytes{role=\"parameter\"}",
        "tensor_lifetime_largest_leak_growth_bytes",
        "tensor_lifetime_forecast_iterations_left",
        "tensor_lifetime_iterations_total",
    ] {
        assert!(sample(&text, name).is_some(), "no {name} in\n{text}");
    }
    let growth = sample(&text, "tensor_lifetime_largest_leak_growth_bytes").unwrap();
    assert_eq!(growth, (256 << 10) as f64, "{text}");
    // An exact run: its figures are no estimates.
    let interval = sample(&text, "tensor_lifetime_sample_interval_bytes");
    assert_eq!(interval, Some(0.0), "{text}");
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}\n{}{}\n--- the scrape\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `s` with everything but letters, digits and `_.-` percent-encoded (a query string's
/// value).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of `query` at Prometheus on `port` (one series), when it has one.
fn query(port: u16, query: &str) -> Option<f64> {
    let body = get(port, &format!("/api/v1/query?query={}", encode(query)))?;
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    assert_eq!(json["status"], "success", "{body}");
    let result = json["data"]["result"].as_array()?;
    let [series] = result.as_slice() else {
        return None;
    };
    series["value"][1].as_str()?.parse().ok()
}

#[test]
fn a_prometheus_server_sees_the_leak_grow_and_the_clean_loop_flat() {
    if !tools_available("a_prometheus_server_sees_the_leak_grow_and_the_clean_loop_flat") {
        return;
    }
    let (clean, leaky, server) = (free_port(), free_port(), free_port());
    let _clean = start_example(clean, 0);
    let _leaky = start_example(leaky, 256);
    let dir =
        std::env::temp_dir().join(format!("tensor-lifetime-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n\
             \x20 - job_name: clean\n    static_configs:\n      - targets: ['127.0.0.1:{clean}']\n\
             \x20 - job_name: leaky\n    static_configs:\n      - targets: ['127.0.0.1:{leaky}']\n"
        ),
    )
    .unwrap();
    let _server = Running(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{server}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    wait_for(Duration::from_secs(60), "prometheus to be ready", || {
        get(server, "/-/ready")
    });
    let live = |job: &str| {
        query(
            server,
            &format!("tensor_lifetime_live_bytes{{job=\"{job}\",device=\"cpu\"}}"),
        )
    };
    // Both loops past their first steps, as Prometheus scraped them.
    let steps = |job: &str| {
        query(
            server,
            &format!("tensor_lifetime_iterations_total{{job=\"{job}\"}}"),
        )
    };
    wait_for(
        Duration::from_secs(120),
        "3 steps of both loops scraped",
        || (steps("clean")? >= 3.0 && steps("leaky")? >= 3.0).then_some(()),
    );
    let before = (live("clean").unwrap(), live("leaky").unwrap());
    std::thread::sleep(Duration::from_secs(5));
    // A scrape at least 3 s later than the first reading.
    let after = (live("clean").unwrap(), live("leaky").unwrap());
    assert_eq!(after.0, before.0, "the clean loop's live bytes moved");
    // 256 KiB per step at about 10 steps a second, for 5 s; scrapes a second apart.
    assert!(
        after.1 >= before.1 + 10.0 * (256 << 10) as f64,
        "the leaky loop's live bytes did not grow: {} -> {}",
        before.1,
        after.1
    );
    let _ = std::fs::remove_dir_all(&dir);
}
