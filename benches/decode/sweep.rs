//! `bench --sweep`: each threshold of the planner's [`Tuning`] table tried
//! at its candidate values on the rows it decides, the rest of the table
//! held at the device's (or `--tuning`'s). `cargo xtask tune --from` turns
//! the JSON into a table (docs/perf.md, "Tuning per GPU").

use decode_attn::{DecodeAttention, KvFormat, Knob, Tuning};
use serde::{Deserialize, Serialize};

use crate::grids::{RowSpec, RowVariant};

/// One threshold's sweep: its candidates and the rows whose plans it
/// changes.
pub struct Probe {
    pub knob: Knob,
    pub candidates: Vec<u32>,
    pub rows: Vec<RowSpec>,
    /// The rows are timed in a pool of 16-token pages (shuffled table), not
    /// contiguous: the thresholds that only paged plans read.
    pub paged: bool,
}

impl Probe {
    /// A threshold timed on contiguous caches.
    fn new(knob: Knob, candidates: Vec<u32>, rows: Vec<RowSpec>) -> Probe {
        Probe { knob, candidates, rows, paged: false }
    }

    /// A threshold only paged plans read, timed in pools.
    fn paged(knob: Knob, candidates: Vec<u32>, rows: Vec<RowSpec>) -> Probe {
        Probe { paged: true, ..Probe::new(knob, candidates, rows) }
    }
}

/// What one threshold measured: `median_us[c][r]` is row `r` planned with
/// candidate `c` (0 where the row failed), `blocks[c][r]` its plan's block
/// column (which rows a candidate changes).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct KnobResult {
    pub knob: String,
    /// The base table's value.
    pub base: u32,
    pub candidates: Vec<u32>,
    pub rows: Vec<String>,
    pub median_us: Vec<Vec<f64>>,
    pub blocks: Vec<Vec<String>>,
}

/// The file `cargo xtask tune --from` reads.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct SweepReport {
    pub device: String,
    pub date: String,
    /// `DeviceFacts` of the device: compute capability, SMs, L2 bytes,
    /// memory clock (kHz) and bus width (bits).
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub l2_bytes: u32,
    pub memory_clock_khz: u32,
    pub memory_bus_bits: u32,
    pub roofline_gbps: f64,
    /// The table the other thresholds were held at, and its every value
    /// (`Tuning` field name, value): what a threshold the sweep left out
    /// keeps.
    pub base_table: String,
    pub base_values: Vec<(String, u32)>,
    pub iters: usize,
    pub knobs: Vec<KnobResult>,
}

fn row(grid: char, batch: u32, ctx: u32, hq: u32, hkv: u32, q_len: u32, format: KvFormat) -> RowSpec {
    RowSpec { grid, batch, ctx, hq, hkv, q_len, head_dim: 128, format, variant: RowVariant::default() }
}

/// A grid F row (dense MLA, bf16, q_len 1).
fn mla(batch: u32, ctx: u32, hq: u32) -> RowSpec {
    RowSpec { grid: 'F', batch, ctx, hq, hkv: 1, q_len: 1, head_dim: 576, format: KvFormat::Bf16, variant: RowVariant::default() }
}

fn each(formats: &[KvFormat], shapes: &[(char, u32, u32, u32, u32, u32)]) -> Vec<RowSpec> {
    formats.iter().flat_map(|&f| shapes.iter().map(move |&(g, b, c, hq, hkv, q)| row(g, b, c, hq, hkv, q, f))).collect()
}

/// The sweep: per threshold, the rows on either side of its H100 value
/// (the grids' rows where they fall there, else shapes of the same kind;
/// grid letter `S` marks a shape of the sweep's own).
pub fn probes() -> Vec<Probe> {
    use KvFormat::*;
    let grid_b = |b: u32, c: u32| ('B', b, c, 16, 1, 3);
    let grid_c = |c: u32| ('C', 1, c, 32, 8, 1);
    let grid_a = |b: u32| ('A', b, 8192, 8, 1, 1);
    let mha = |b: u32, c: u32| ('D', b, c, 32, 32, 1);
    vec![
        // 16 … 64 rows per kv head: a group of 8 with 2 … 8 new tokens
        // over two kv heads, and grid B's 48 rows over one.
        Probe::new(Knob::WgmmaMinRows, vec![8, 16, 24, 32, 40, 48, 64], {
            let mut shapes = [2, 3, 4, 5, 6, 8].map(|q| ('S', 32, 4096, 16, 2, q)).to_vec();
            shapes.extend([grid_b(64, 4096), grid_b(256, 1024)]);
            each(&[Bf16, Int8, Int4G32], &shapes)
        }),
        // Grid B's shape over 1 … 8 waves of one block per SM.
        Probe::new(Knob::SpecializedMaxWaves, vec![0, 1, 2, 4, 8], each(&[Int8, Fp8PerHead, Int4G32], &[grid_b(64, 4096), grid_b(128, 2048), grid_b(256, 1024), ('S', 512, 1024, 16, 1, 3), ('S', 1024, 512, 16, 1, 3)])),
        Probe::new(Knob::HeadPairMinMeanKeys, vec![128, 256, 512, 1024, 2048], each(&[Int8, Fp8PerHead], &[mha(64, 128), mha(32, 256), mha(16, 512), mha(8, 1024), mha(128, 2048)])),
        // Paired grids of 64, 96, 128 and 192 blocks on the SMs.
        Probe::new(Knob::HeadPairMinBusySmsPercent, vec![50, 75, 90, 95, 100], each(&[Int8, Fp8PerHead], &[mha(4, 2048), mha(6, 2048), mha(8, 1024), mha(12, 1024)])),
        Probe::new(Knob::ClusterMax16bit, vec![0, 2, 4, 8], each(&[Bf16], &[grid_a(32), grid_a(64), grid_b(64, 4096), grid_b(32, 8192), grid_b(16, 16384), grid_c(8192)])),
        Probe::new(Knob::ClusterMaxQuantized, vec![0, 2, 4], each(&[Int8, Int4G32], &[grid_a(32), grid_a(64), grid_a(128), grid_b(64, 4096), grid_b(32, 8192)])),
        // Grid F's split rows too: 16 heads' partials are 16 rows of 512
        // f32 (32 × 4K: 4 slots, 128 KB a block; batch 1: 32-64 slots),
        // 128 heads' 64 rows (32 × 4K: 2 slots, 256 KB).
        Probe::new(Knob::InAttentionMergeMaxBytes, vec![16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20], {
            let mut rows = each(&[Bf16, Int8], &[grid_c(8192), grid_c(32768), grid_c(131072), grid_b(64, 4096), grid_b(8, 32768), grid_b(2, 131072)]);
            rows.extend([(32, 4096, 16), (1, 4096, 16), (1, 32768, 16), (32, 4096, 128), (1, 4096, 128), (1, 32768, 128)].map(|(b, c, hq)| mla(b, c, hq)));
            rows
        }),
        Probe::new(Knob::SaturatingWarps8bitNarrow, vec![4, 8, 16, 0], each(&[Int8, Fp8PerHead], &[grid_c(8192), grid_c(32768), grid_c(131072), grid_a(32), mha(1, 1024)])),
        Probe::new(Knob::SaturatingWarps16bitWide, vec![4, 8, 0], each(&[Bf16], &[grid_c(8192), grid_c(32768), grid_c(131072), grid_a(32), grid_a(64), mha(1, 1024)])),
        Probe::new(Knob::SaturatingWarps16bitWgmma, vec![8, 16, 0], each(&[Bf16], &[grid_b(64, 4096), grid_b(16, 16384), grid_b(4, 65536), grid_b(2, 131072)])),
        Probe::new(Knob::SplitOverheadStages, vec![1, 2, 3, 4, 6], each(&[Bf16, Int8, Int4G32], &[grid_a(32), grid_a(64), grid_c(8192), grid_c(32768), mha(1, 1024)])),
        // Sequences of 512 … 4096 keys whose pairs fill the SMs.
        Probe::new(Knob::HeadPairMaxMeanKeys, vec![512, 1024, 2048, 4096, u32::MAX], each(&[Int8, Fp8PerHead], &[mha(16, 512), mha(12, 1024), mha(16, 1024), mha(32, 2048), mha(128, 2048), mha(16, 4096)])),
        Probe::paged(Knob::HeadPairPagedMinWaves, vec![1, 2, 4, 8], each(&[Int8, Fp8PerHead], &[mha(16, 512), mha(32, 256), mha(16, 1024), mha(32, 2048), mha(128, 2048)])),
        // The split rows of grids A and C, where one block a SM is what
        // the saturating-warps rule plans contiguous.
        Probe::paged(Knob::PagedMinBlocksPerSm, vec![1, 2, 3, 4], {
            let mut rows = each(&[Bf16, Int8], &[grid_a(32), grid_a(64), grid_a(128), grid_c(8192), grid_c(32768), grid_c(131072), mha(1, 1024)]);
            rows.extend(each(&[Bf16], &[grid_b(16, 16384), grid_b(2, 131072)]));
            rows.extend(each(&[Int4G32], &[grid_a(64), grid_c(131072)]));
            rows
        }),
    ]
}

/// The probes of the thresholds named in `only` (comma-separated
/// `Tuning` field names), or all of them.
pub fn selected(only: Option<&str>) -> impl Iterator<Item = Probe> + '_ {
    probes().into_iter().filter(move |p| only.is_none_or(|o| o.split(',').any(|k| k == p.knob.name())))
}

/// Runs the probes (those of `only`, when given) with `time(row, paged)` →
/// (median µs, block column), each candidate's table set on `attn` first; the base
/// table is restored after. Candidates alternate within a row, so a drift
/// of the GPU over the sweep does not favour one of them.
pub fn run(attn: &mut DecodeAttention, base: Tuning, only: Option<&str>, mut time: impl FnMut(&DecodeAttention, &RowSpec, bool) -> Result<(f64, String), String>) -> Vec<KnobResult> {
    let mut out = Vec::new();
    for p in selected(only) {
        let n = p.candidates.len();
        let mut median_us = vec![Vec::new(); n];
        let mut blocks = vec![Vec::new(); n];
        for r in &p.rows {
            for (c, &value) in p.candidates.iter().enumerate() {
                attn.set_tuning(base.with(p.knob, value));
                let (us, block) = time(attn, r, p.paged).unwrap_or_else(|e| (0.0, format!("error: {e}")));
                median_us[c].push(us);
                blocks[c].push(block);
            }
        }
        for (c, value) in p.candidates.iter().enumerate() {
            eprintln!("  {} = {value}: {}", p.knob.name(), median_us[c].iter().map(|u| format!("{u:.1}")).collect::<Vec<_>>().join(" "));
        }
        out.push(KnobResult { knob: p.knob.name().into(), base: base.get(p.knob), candidates: p.candidates, rows: p.rows.iter().map(|r| r.key()).collect(), median_us, blocks });
    }
    attn.set_tuning(base);
    out
}

/// Geometric mean of a candidate's row times; `None` when a row failed
/// (0: every candidate must serve every row to be compared).
pub fn geomean(us: &[f64]) -> Option<f64> {
    if us.is_empty() || us.iter().any(|&u| u <= 0.0 || !u.is_finite()) {
        return None;
    }
    Some((us.iter().map(|u| u.ln()).sum::<f64>() / us.len() as f64).exp())
}
