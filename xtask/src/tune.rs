//! `cargo xtask tune --from sweep.json`: a `bench --sweep` run (GPU) made
//! into the planner's tuning table for that GPU (`host/src/tuning/<gpu>.rs`).
//!
//! Per threshold, each candidate's score is the geometric mean of its rows'
//! median times; the base table's value stays unless a candidate beats it
//! by more than `keep_within` (a share; 1 % by default, the run-to-run spread of docs/perf.md, "Method": noise must not move
//! a threshold). A candidate that failed on any row is not chosen.
//! Thresholds the sweep left out keep the base table's value.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;

/// One threshold's outcome: the value chosen, and per candidate its score
/// relative to the chosen value's (`None`: it failed on a row).
#[derive(Debug, PartialEq)]
pub struct Choice {
    pub knob: String,
    pub base: u32,
    pub chosen: u32,
    pub rows: usize,
    pub relative: Vec<(u32, Option<f64>)>,
}

fn geomean(us: &[f64]) -> Option<f64> {
    if us.is_empty() || us.iter().any(|&u| u <= 0.0 || !u.is_finite()) {
        return None;
    }
    Some((us.iter().map(|u| u.ln()).sum::<f64>() / us.len() as f64).exp())
}

fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    v.get(key).ok_or(format!("the sweep has no `{key}`"))
}

fn as_u32(v: &Value, what: &str) -> Result<u32, String> {
    v.as_u64().and_then(|x| u32::try_from(x).ok()).ok_or(format!("`{what}` is not a u32: {v}"))
}

/// The choice for one entry of the sweep's `knobs`.
pub fn choose(knob: &Value, keep_within: f64) -> Result<Choice, String> {
    let name = field(knob, "knob")?.as_str().ok_or("`knob` is not a string")?.to_string();
    let base = as_u32(field(knob, "base")?, "base")?;
    let candidates: Vec<u32> = field(knob, "candidates")?.as_array().ok_or("`candidates` is not a list")?.iter().map(|c| as_u32(c, "candidates")).collect::<Result<_, _>>()?;
    let times = field(knob, "median_us")?.as_array().ok_or("`median_us` is not a list")?;
    if times.len() != candidates.len() {
        return Err(format!("{name}: {} candidates but {} rows of times", candidates.len(), times.len()));
    }
    let mut rows = 0;
    let mut scores = Vec::new();
    for t in times {
        let us: Vec<f64> = t.as_array().ok_or("`median_us` rows are not lists")?.iter().map(|x| x.as_f64().unwrap_or(0.0)).collect();
        rows = us.len();
        scores.push(geomean(&us));
    }
    let base_score = candidates.iter().position(|&c| c == base).and_then(|i| scores[i]);
    let best = scores.iter().enumerate().filter_map(|(i, s)| s.map(|s| (i, s))).min_by(|a, b| a.1.total_cmp(&b.1));
    let chosen = match (best, base_score) {
        (None, _) => base,
        (Some((i, s)), Some(b)) if s * (1.0 + keep_within) < b => candidates[i],
        (Some(_), Some(_)) => base,
        // The base value was not measured (or failed): the best measured.
        (Some((i, _)), None) => candidates[i],
    };
    let chosen_score = candidates.iter().position(|&c| c == chosen).and_then(|i| scores[i]);
    let relative = candidates.iter().zip(&scores).map(|(&c, s)| (c, s.zip(chosen_score).map(|(s, b)| s / b))).collect();
    Ok(Choice { knob: name, base, chosen, rows, relative })
}

/// The table's name from the device's (`NVIDIA H200` → `H200`).
pub fn table_name(device: &str) -> String {
    device.trim().trim_start_matches("NVIDIA ").trim().to_string()
}

/// The Rust source of the table (`host/src/tuning/*.rs`) from one or more
/// sweeps of one GPU, in order: a threshold a later sweep measured takes
/// that sweep's choice; the device's facts, and the values of thresholds no
/// sweep measured, are the last sweep's (its `base_values`, the table it
/// ran with).
pub fn table_source(sweeps: &[Value], name: &str, from: &[String], keep_within: f64) -> Result<String, String> {
    let last = sweeps.last().ok_or("no sweep")?;
    let mut choices: Vec<(Choice, usize)> = Vec::new();
    for (i, sweep) in sweeps.iter().enumerate() {
        for k in field(sweep, "knobs")?.as_array().ok_or("`knobs` is not a list")? {
            let c = choose(k, keep_within)?;
            choices.retain(|(old, _)| old.knob != c.knob);
            choices.push((c, i));
        }
    }
    let base_values = field(last, "base_values")?.as_array().ok_or("`base_values` is not a list")?;
    let cc = field(last, "compute_capability")?.as_array().filter(|a| a.len() == 2).ok_or("`compute_capability` is not a pair")?;
    let num = |k: &str| field(last, k).and_then(|v| as_u32(v, k));
    let text = |sweep: &Value, k: &str| field(sweep, k).map(|v| v.as_str().unwrap_or("?").to_string());
    let device = text(last, "device")?;
    let base_table = text(last, "base_table")?;
    let mut s = String::new();
    let froms: Vec<String> = from.iter().map(|f| format!("--from {f}")).collect();
    let _ = writeln!(s, "//! The {name} table, written by `cargo xtask tune {}`:", froms.join(" "));
    let _ = writeln!(s, "//! sweep again rather than edit it. Swept on {device}:");
    for (i, sweep) in sweeps.iter().enumerate() {
        let roofline = field(sweep, "roofline_gbps")?.as_f64().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "//! sweep {} ({}, copy roofline {roofline:.0} GB/s), the other thresholds held at the {} table;",
            i + 1,
            text(sweep, "date")?,
            text(sweep, "base_table")?
        );
    }
    let _ = writeln!(s, "//! a later sweep's thresholds replace an earlier one's. Above each swept");
    let _ = writeln!(s, "//! value: every candidate's geometric-mean time over the rows it decides");
    let _ = writeln!(s, "//! (`benches/decode/sweep.rs`), against the chosen value's; a candidate");
    let _ = writeln!(s, "//! replaces the base table's value only when faster by more than {:.1} %", keep_within * 100.0);
    let _ = writeln!(s, "//! (docs/perf.md, \"Tuning per GPU\").");
    let _ = writeln!(s);
    let _ = writeln!(s, "use super::{{DeviceFacts, Tuning}};");
    let _ = writeln!(s);
    let _ = writeln!(s, "pub const TABLE: Tuning = Tuning {{");
    let _ = writeln!(s, "    name: {name:?},");
    let _ = writeln!(
        s,
        "    facts: DeviceFacts {{ compute_capability: ({}, {}), sm_count: {}, l2_bytes: {}, memory_clock_khz: {}, memory_bus_bits: {} }},",
        as_u32(&cc[0], "compute_capability")?,
        as_u32(&cc[1], "compute_capability")?,
        num("sm_count")?,
        num("l2_bytes")?,
        num("memory_clock_khz")?,
        num("memory_bus_bits")?
    );
    for entry in base_values {
        let pair = entry.as_array().filter(|a| a.len() == 2).ok_or("`base_values` entries are not pairs")?;
        let knob = pair[0].as_str().ok_or("a `base_values` name is not a string")?;
        let base = as_u32(&pair[1], knob)?;
        match choices.iter().find(|(c, _)| c.knob == knob) {
            Some((c, i)) => {
                let cells: Vec<String> = c
                    .relative
                    .iter()
                    .map(|(v, r)| match r {
                        Some(r) => format!("{v}: {r:.3}"),
                        None => format!("{v}: failed"),
                    })
                    .collect();
                let was = if c.chosen == c.base { "kept".to_string() } else { format!("was {}", c.base) };
                let which = if sweeps.len() > 1 { format!("sweep {}, ", i + 1) } else { String::new() };
                let _ = writeln!(s, "    // {which}{} rows; {} ({was})", c.rows, cells.join(", "));
                let _ = writeln!(s, "    {knob}: {},", c.chosen);
            }
            None => {
                let _ = writeln!(s, "    // not swept: the {base_table} value");
                let _ = writeln!(s, "    {knob}: {base},");
            }
        }
    }
    let _ = writeln!(s, "}};");
    Ok(s)
}

/// `cargo xtask tune`: writes `host/src/tuning/<name>.rs` from the sweeps
/// (in order) and prints each threshold's outcome.
pub fn tune(from: &[PathBuf], name: Option<&str>, keep_within_percent: f64) -> Result<(), String> {
    let mut sweeps = Vec::new();
    for path in from {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        sweeps.push(serde_json::from_str::<Value>(&text).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let last = sweeps.last().ok_or("no sweep: pass --from")?;
    let device = field(last, "device")?.as_str().unwrap_or("").to_string();
    if let Some(other) = sweeps.iter().find(|s| field(s, "device").ok().and_then(Value::as_str) != Some(device.as_str())) {
        return Err(format!("the sweeps are of different GPUs: {device} and {}", field(other, "device")?));
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => table_name(&device),
    };
    if name.is_empty() {
        return Err("the sweep names no device: pass --name".into());
    }
    let file: String = name.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let shown: Vec<String> = from.iter().map(|f| f.strip_prefix(crate::workspace()).unwrap_or(f).display().to_string()).collect();
    let source = table_source(&sweeps, &name, &shown, keep_within_percent / 100.0)?;
    let path: PathBuf = crate::workspace().join("host/src/tuning").join(format!("{file}.rs"));
    let existed = path.exists();
    std::fs::write(&path, &source).map_err(|e| format!("{}: {e}", path.display()))?;
    print!("{source}");
    println!("wrote {}", path.display());
    if !existed {
        println!("a new table: add `mod {file};` and its TABLE to `TABLES` in host/src/tuning.rs");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knob(base: u32, candidates: &[u32], us: &[&[f64]]) -> Value {
        serde_json::json!({ "knob": "wgmma_min_rows", "base": base, "candidates": candidates, "median_us": us })
    }

    #[test]
    fn the_base_value_stays_unless_a_candidate_beats_it_by_more_than_the_margin() {
        // 0.3 % faster: noise, kept.
        assert_eq!(choose(&knob(32, &[16, 32], &[&[99.7, 99.7], &[100.0, 100.0]]), 0.005).unwrap().chosen, 32);
        // 2 % faster: replaced.
        assert_eq!(choose(&knob(32, &[16, 32], &[&[98.0, 98.0], &[100.0, 100.0]]), 0.005).unwrap().chosen, 16);
    }

    #[test]
    fn a_candidate_that_failed_on_a_row_is_never_chosen() {
        let c = choose(&knob(32, &[16, 32], &[&[1.0, 0.0], &[100.0, 100.0]]), 0.005).unwrap();
        assert_eq!(c.chosen, 32);
        assert_eq!(c.relative[0], (16, None));
    }

    #[test]
    fn scores_are_geometric_means_relative_to_the_chosen_value() {
        // 2× faster on one row, 2× slower on the other: a tie.
        let c = choose(&knob(32, &[16, 32], &[&[50.0, 200.0], &[100.0, 100.0]]), 0.005).unwrap();
        assert_eq!(c.chosen, 32);
        assert!((c.relative[0].1.unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn the_table_lists_every_threshold_and_keeps_the_unswept_ones() {
        let sweep = serde_json::json!({
            "device": "NVIDIA H200", "date": "2026-11-29", "compute_capability": [9, 0], "sm_count": 132,
            "l2_bytes": 52428800, "memory_clock_khz": 3201000, "memory_bus_bits": 6144, "roofline_gbps": 4298.0,
            "base_table": "H100 SXM", "base_values": [["wgmma_min_rows", 32], ["specialized_max_waves", 2]],
            "knobs": [knob(32, &[16, 32], &[&[90.0], &[100.0]])],
        });
        let s = table_source(&[sweep], &table_name("NVIDIA H200"), &["sweep.json".into()], 0.005).unwrap();
        assert!(s.contains("name: \"H200\","), "{s}");
        assert!(s.contains("memory_clock_khz: 3201000, memory_bus_bits: 6144"), "{s}");
        assert!(s.contains("    // 1 rows; 16: 1.000, 32: 1.111 (was 32)\n    wgmma_min_rows: 16,"), "{s}");
        assert!(s.contains("    // not swept: the H100 SXM value\n    specialized_max_waves: 2,"), "{s}");
    }

    #[test]
    fn a_later_sweep_replaces_the_thresholds_it_measured_and_keeps_the_others() {
        let sweep = |base_wgmma: u32, knobs: Value| {
            serde_json::json!({
                "device": "NVIDIA H200", "date": "2026-11-29", "compute_capability": [9, 0], "sm_count": 132,
                "l2_bytes": 62914560, "memory_clock_khz": 3201000, "memory_bus_bits": 6016, "roofline_gbps": 4298.0,
                "base_table": "H200", "base_values": [["wgmma_min_rows", base_wgmma], ["specialized_max_waves", 2]],
                "knobs": knobs,
            })
        };
        let first = sweep(32, serde_json::json!([knob(32, &[16, 32], &[&[90.0], &[100.0]])]));
        let mut max_waves = knob(2, &[2, 8], &[&[100.0], &[95.0]]);
        max_waves["knob"] = "specialized_max_waves".into();
        // The second sweep ran with the first's table (wgmma_min_rows 16).
        let second = sweep(16, serde_json::json!([max_waves]));
        let s = table_source(&[first, second], "H200", &["a.json".into(), "b.json".into()], 0.005).unwrap();
        assert!(s.contains("`cargo xtask tune --from a.json --from b.json`"), "{s}");
        assert!(s.contains("    // sweep 1, 1 rows; 16: 1.000, 32: 1.111 (was 32)\n    wgmma_min_rows: 16,"), "{s}");
        assert!(s.contains("    // sweep 2, 1 rows; 2: 1.053, 8: 1.000 (was 2)\n    specialized_max_waves: 8,"), "{s}");
    }
}
