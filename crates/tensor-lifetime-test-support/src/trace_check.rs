//! The rules of the Trace Event format that `tensor_lifetime_report::trace` writes,
//! checked on a parsed file: required fields per phase, numeric counters, instant scopes,
//! known metadata, and complete events (slices) that nest per thread, as trace viewers
//! need them to.

use serde_json::{Map, Value};
use std::collections::HashMap;

/// What [`check_trace`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceStats {
    pub slices: u64,
    pub counters: u64,
    pub instants: u64,
    pub metadata: u64,
}

/// Complete events by (pid, tid): (start, duration) in microseconds.
type Slices = HashMap<(i64, i64), Vec<(f64, f64)>>;

/// Checks a parsed trace file against the format's rules. Returns the first broken rule.
pub fn check_trace(trace: &Value) -> Result<TraceStats, String> {
    let events = trace
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or("no `traceEvents` array at the top level")?;
    if let Some(unit) = trace.get("displayTimeUnit") {
        if unit != "ms" && unit != "ns" {
            return Err(format!(
                "displayTimeUnit must be \"ms\" or \"ns\", is {unit}"
            ));
        }
    }
    let mut stats = TraceStats::default();
    let mut slices = Slices::new();
    for (i, e) in events.iter().enumerate() {
        check_event(e, &mut stats, &mut slices)
            .map_err(|what| format!("traceEvents[{i}]: {what}: {e}"))?;
    }
    check_nesting(slices)?;
    Ok(stats)
}

/// The rules of one event; counts it and keeps its slice.
fn check_event(e: &Value, stats: &mut TraceStats, slices: &mut Slices) -> Result<(), String> {
    let obj = e.as_object().ok_or("not an object")?;
    let ph = obj
        .get("ph")
        .and_then(Value::as_str)
        .ok_or("no `ph` string")?;
    obj.get("name")
        .and_then(Value::as_str)
        .ok_or("no `name` string")?;
    let pid = obj
        .get("pid")
        .and_then(Value::as_i64)
        .ok_or("no integer `pid`")?;
    let tid = obj
        .get("tid")
        .and_then(Value::as_i64)
        .ok_or("no integer `tid`")?;
    let ts = obj.get("ts").and_then(Value::as_f64);
    if ph != "M" {
        let ts = ts.ok_or("no numeric `ts`")?;
        if ts < 0.0 {
            return Err("negative `ts`".into());
        }
    }
    if let Some(args) = obj.get("args") {
        if !args.is_object() {
            return Err("`args` is not an object".into());
        }
    }
    match ph {
        "X" => {
            let dur = obj
                .get("dur")
                .and_then(Value::as_f64)
                .ok_or("complete event without numeric `dur`")?;
            if dur < 0.0 {
                return Err("negative `dur`".into());
            }
            slices
                .entry((pid, tid))
                .or_default()
                .push((ts.unwrap_or(0.0), dur));
            stats.slices += 1;
        }
        "C" => {
            check_counter(obj)?;
            stats.counters += 1;
        }
        "i" | "I" => {
            match obj.get("s").and_then(Value::as_str) {
                None | Some("g" | "p" | "t") => {}
                Some(_) => return Err("instant scope `s` must be g, p or t".into()),
            }
            stats.instants += 1;
        }
        "M" => {
            check_metadata(obj)?;
            stats.metadata += 1;
        }
        other => return Err(format!("phase {other:?} is not one this writer uses")),
    }
    Ok(())
}

fn check_counter(obj: &Map<String, Value>) -> Result<(), String> {
    let args = obj
        .get("args")
        .and_then(Value::as_object)
        .ok_or("counter without `args`")?;
    if args.is_empty() || !args.values().all(Value::is_number) {
        return Err("counter `args` must be numbers".into());
    }
    Ok(())
}

fn check_metadata(obj: &Map<String, Value>) -> Result<(), String> {
    let name = obj["name"].as_str().unwrap_or_default();
    if !matches!(
        name,
        "process_name"
            | "thread_name"
            | "process_sort_index"
            | "thread_sort_index"
            | "process_labels"
    ) {
        return Err("unknown metadata name".into());
    }
    if name.ends_with("_name")
        && !obj
            .get("args")
            .and_then(|a| a.get("name"))
            .is_some_and(Value::is_string)
    {
        return Err("metadata without `args.name`".into());
    }
    Ok(())
}

/// Complete events per (pid, tid) must nest: sorted by start, longest first, each ends
/// within the slice it starts in (a stack of open ends).
fn check_nesting(slices: Slices) -> Result<(), String> {
    // In whole nanoseconds, so that float sums do not break ties.
    let ns = |us: f64| (us * 1000.0).round() as i64;
    for ((pid, tid), v) in slices {
        let mut v: Vec<(i64, i64)> = v.into_iter().map(|(ts, dur)| (ns(ts), ns(dur))).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut stack: Vec<i64> = Vec::new();
        for (ts, dur) in v {
            while stack.last().is_some_and(|end| *end <= ts) {
                stack.pop();
            }
            let end = ts + dur;
            if let Some(outer) = stack.last() {
                if end > *outer {
                    return Err(format!(
                        "pid {pid} tid {tid}: the slice at {ts} ns ends at {end} ns, after the \
                         slice it starts in ({outer} ns): slices on a thread must nest"
                    ));
                }
            }
            stack.push(end);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_checker_catches_broken_rules() {
        let bad = json!({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}]});
        assert!(check_trace(&bad).unwrap_err().contains("dur"));
        let bad = json!({"traceEvents": [
            {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
        ]});
        assert!(check_trace(&bad).unwrap_err().contains("nest"));
        let bad = json!({"traceEvents": [{"ph": "C", "name": "a", "pid": 1, "tid": 1, "ts": 1, "args": {"v": "x"}}]});
        assert!(check_trace(&bad).unwrap_err().contains("numbers"));
        assert!(check_trace(&json!([])).is_err());
    }

    #[test]
    fn an_error_names_the_event() {
        let bad = json!({"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}},
            {"ph": "i", "name": "a", "pid": 1, "tid": 1, "ts": 1, "s": "x"},
        ]});
        let err = check_trace(&bad).unwrap_err();
        assert!(
            err.starts_with("traceEvents[1]: instant scope `s` must be g, p or t: {"),
            "{err}"
        );
    }
}
