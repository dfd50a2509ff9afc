//! Results: the table printed last, JSON / CSV / SVG files, and the
//! comparison with an earlier run.

use std::fmt::Write as _;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::timing::L2Mode;

/// One measured row (also one JSON object and one CSV line). Fields added
/// since the first runs default, so older JSON still loads for `--compare`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RowResult {
    pub key: String,
    pub grid: String,
    pub batch: u32,
    pub ctx: u32,
    pub hq: u32,
    pub hkv: u32,
    pub q_len: u32,
    pub head_dim: u32,
    pub format: String,
    pub splits: u32,
    pub block: String,
    /// Input copies rotated through (1 with `--l2 flush`).
    pub buffer_sets: u32,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub bytes: u64,
    pub gbps: f64,
    /// `Plan::flops` over the median time.
    #[serde(default)]
    pub tflops: f64,
    pub pct_roofline: f64,
    /// Median time of the bf16 row of the same shape over this row's (0 if none).
    pub speedup_vs_bf16: f64,
    pub rel_err: f64,
    pub status: String,
    /// Anything that makes the number less trustworthy (warm L2, host latency).
    #[serde(default)]
    pub note: String,
    /// `--paged`: median step time of the same rows in a paged pool of
    /// 16- and 64-token pages in shuffled order (0: not run).
    pub paged16_us: f64,
    pub paged64_us: f64,
    /// `--graph`: median time of the same step as a replayed CUDA graph of
    /// a capacity plan (one attention launch, plus the merge kernel for large merges; 0: not run).
    #[serde(default)]
    pub graph_us: f64,
    /// `--bound`: the least time the row could take here (`bound.rs`), and
    /// its largest term (`bytes`, `mma`, `convert`); 0 and empty: not run.
    #[serde(default)]
    pub bound_us: f64,
    #[serde(default)]
    pub bound_by: String,
}

impl RowResult {
    /// The bound over the row's time, in %, and the bound's largest term
    /// ("—" when not measured).
    pub fn bound_cell(&self) -> String {
        if self.bound_us > 0.0 && self.median_us > 0.0 {
            format!("{:.1}% {}", 100.0 * self.bound_us / self.median_us, self.bound_by)
        } else {
            "—".into()
        }
    }

    /// A family's time (paged, graph) over the contiguous planned time,
    /// minus one, in % ("—" when not run).
    pub fn paged_overhead(&self, paged_us: f64) -> String {
        if paged_us > 0.0 && self.median_us > 0.0 {
            format!("{:+.1}%", 100.0 * (paged_us / self.median_us - 1.0))
        } else {
            "—".into()
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub device: String,
    pub date: String,
    /// Runs before this field existed flushed L2 with a memset.
    #[serde(default = "flush")]
    pub l2: L2Mode,
    #[serde(default)]
    pub iters: usize,
    pub roofline_gbps: f64,
    /// What the pg16 / pg64 columns time (page order and pool layout);
    /// empty when not run, and in runs before this field existed.
    #[serde(default)]
    pub paged: String,
    /// The planner's tuning table (`Tuning::name`); empty in runs before
    /// the tables were per GPU (the H100's rules).
    #[serde(default)]
    pub tuning: String,
    /// `--bound`: the figures the bound column was computed from.
    #[serde(default)]
    pub machine: Option<crate::bound::Machine>,
    pub rows: Vec<RowResult>,
}

fn flush() -> L2Mode {
    L2Mode::Flush
}

impl Report {
    pub fn table(&self) -> String {
        let mut s = String::new();
        let method = match self.l2 {
            L2Mode::Rotate => "rotated buffers, no writes between launches",
            L2Mode::Flush => "L2 flushed by a memset before each launch",
        };
        let tuning = if self.tuning.is_empty() { String::new() } else { format!("; planned with the {} table", self.tuning) };
        let _ = writeln!(s, "\n{}: copy roofline {:.0} GB/s; median of {} launches, {method}{tuning}", self.device, self.roofline_gbps, self.iters);
        if !self.paged.is_empty() {
            let _ = writeln!(s, "pg16 / pg64: paged over contiguous time, {}", self.paged);
        }
        if let Some(m) = &self.machine {
            let _ = writeln!(
                s,
                "%bound: the row's bound over its time; bound = empty launch {:.2} µs + max(bytes / {:.0} GB/s, FLOPs / {:.0} TFLOPS, narrow conversions / {:.0} G instr/s)",
                m.empty_launch_us, m.copy_gbps, m.tensor_tflops, m.issue_ginstr_per_s
            );
        }
        let _ = writeln!(
            s,
            "{:<4} {:>4} {:>6} {:>3} {:>3} {:>2} {:<5} {:>6} {:<22} {:>4} {:>8} {:>8} {:>8} {:>8} {:>6} {:>7} {:>6} {:>6} {:>8} {:>7} {:>7} {:>7} {:>13}  status",
            "grid", "B", "ctx", "Hq", "Hkv", "q", "kv", "splits", "block", "sets", "MB read", "med µs", "min µs", "max µs", "GB/s", "%roof", "TFLOPS", "vs16", "rel err", "pg16", "pg64", "graph", "%bound"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<4} {:>4} {:>6} {:>3} {:>3} {:>2} {:<5} {:>6} {:<22} {:>4} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>6.0} {:>6.1}% {:>6.0} {:>5.2}x {:>8.1e} {:>7} {:>7} {:>7} {:>13}  {} {}",
                r.grid, r.batch, r.ctx, r.hq, r.hkv, r.q_len, r.format, r.splits, r.block, r.buffer_sets, r.bytes as f64 / 1e6,
                r.median_us, r.min_us, r.max_us, r.gbps, r.pct_roofline, r.tflops, r.speedup_vs_bf16, r.rel_err,
                r.paged_overhead(r.paged16_us), r.paged_overhead(r.paged64_us), r.paged_overhead(r.graph_us), r.bound_cell(), r.status, r.note
            );
        }
        s
    }

    pub fn write_json(&self, path: &str) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{path}: {e}"))
    }

    pub fn read_json(path: &str) -> Result<Report, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))
    }

    pub fn write_csv(&self, path: &str) -> Result<(), String> {
        let mut w = csv::Writer::from_path(path).map_err(|e| format!("{path}: {e}"))?;
        for r in &self.rows {
            w.serialize(r).map_err(|e| format!("{path}: {e}"))?;
        }
        w.flush().map_err(|e| format!("{path}: {e}"))
    }

    /// Horizontal bars: % of the copy roofline per row.
    pub fn write_svg(&self, path: &str) -> Result<(), String> {
        let n = self.rows.len().max(1);
        let height = 90 + 22 * n as u32;
        let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| format!("{path}: {e}");
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let title = format!("decode-attn: % of copy roofline ({:.0} GB/s), {}, {}", self.roofline_gbps, self.device, self.date);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("monospace", 15))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(380)
            .build_cartesian_2d(0f64..115f64, (0..n).into_segmented())
            .map_err(|e| err(&e))?;
        let keys: Vec<String> = self.rows.iter().map(|r| r.key.clone()).collect();
        // Row i is drawn in segment n-1-i, so the first row is on top.
        let seg = |i: usize| n - 1 - i;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < n => keys.get(seg(*i)).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc("% of roofline")
            .label_style(("monospace", 11))
            .draw()
            .map_err(|e| err(&e))?;
        let colour = |format: &str| match format {
            "bf16" => RGBColor(0x44, 0x77, 0xaa),
            "f16" => RGBColor(0x66, 0xcc, 0xee),
            "int8" => RGBColor(0x22, 0x88, 0x33),
            _ => RGBColor(0xcc, 0xbb, 0x44),
        };
        chart
            .draw_series(self.rows.iter().enumerate().map(|(i, r)| {
                let pct = r.pct_roofline.clamp(0.0, 115.0);
                let mut bar = Rectangle::new([(0.0, SegmentValue::Exact(seg(i))), (pct, SegmentValue::Exact(seg(i) + 1))], colour(&r.format).filled());
                bar.set_margin(3, 3, 0, 0);
                bar
            }))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(self.rows.iter().enumerate().map(|(i, r)| {
                Text::new(format!("{:.1}%", r.pct_roofline), (r.pct_roofline.clamp(0.0, 105.0) + 0.5, SegmentValue::CenterOf(seg(i))), ("monospace", 11))
            }))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))
    }

    /// Per-row speedups against an earlier report; rows > 5 % slower are flagged.
    pub fn compare(&self, old: &Report, old_path: &str) -> String {
        let mut s = format!(
            "\ncompared with {old_path} ({:?}, {:.0} GB/s): speedup = old time / new time; < 0.95 flagged\n",
            old.l2, old.roofline_gbps
        );
        for r in &self.rows {
            match old.rows.iter().find(|o| o.key == r.key) {
                Some(o) if r.median_us > 0.0 && o.median_us > 0.0 => {
                    let speedup = o.median_us / r.median_us;
                    let _ = writeln!(
                        s,
                        "{:<48} {:>8.1} µs ({:>5.1}%) -> {:>8.1} µs ({:>5.1}%)  x{speedup:.3}{}",
                        r.key,
                        o.median_us,
                        o.pct_roofline,
                        r.median_us,
                        r.pct_roofline,
                        if speedup < 0.95 { "  REGRESSION" } else { "" }
                    );
                }
                _ => {
                    let _ = writeln!(s, "{:<48} (not in the old run)", r.key);
                }
            }
        }
        s
    }
}
