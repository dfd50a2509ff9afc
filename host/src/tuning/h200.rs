//! The H200 table, written by `cargo xtask tune --from docs/bench/2026-11-29-H200-sweep.json --from docs/bench/2026-11-29-H200-sweep-paged.json`:
//! sweep again rather than edit it. Swept on NVIDIA H200:
//! sweep 1 (2026-11-29, copy roofline 4297 GB/s), the other thresholds held at the H100 SXM table;
//! sweep 2 (2026-11-29, copy roofline 4274 GB/s), the other thresholds held at the H200 table;
//! a later sweep's thresholds replace an earlier one's. Above each swept
//! value: every candidate's geometric-mean time over the rows it decides
//! (`benches/decode/sweep.rs`), against the chosen value's; a candidate
//! replaces the base table's value only when faster by more than 1.0 %
//! (docs/perf.md, "Tuning per GPU").

use super::{DeviceFacts, Tuning};

pub const TABLE: Tuning = Tuning {
    name: "H200",
    facts: DeviceFacts { compute_capability: (9, 0), sm_count: 132, l2_bytes: 62914560, memory_clock_khz: 3201000, memory_bus_bits: 6016 },
    // sweep 1, 24 rows; 8: 1.037, 16: 1.008, 24: 1.003, 32: 1.000, 40: 1.021, 48: 1.121, 64: 1.178 (kept)
    wgmma_min_rows: 32,
    // sweep 1, 15 rows; 0: 1.174, 1: 1.045, 2: 1.023, 4: 1.003, 8: 1.000 (was 2)
    specialized_max_waves: 8,
    // sweep 1, 10 rows; 128: 1.019, 256: 1.000, 512: 1.032, 1024: 1.047, 2048: 1.014 (was 512)
    head_pair_min_mean_keys: 256,
    // sweep 2, 12 rows; 512: 1.000, 1024: 1.031, 2048: 1.055, 4096: 1.061, 4294967295: 1.062 (was 4294967295)
    head_pair_max_mean_keys: 512,
    // sweep 1, 8 rows; 50: 1.296, 75: 1.040, 90: 1.040, 95: 1.041, 100: 1.000 (was 95)
    head_pair_min_busy_sms_percent: 100,
    // sweep 2, 10 rows; 1: 1.064, 2: 1.048, 4: 1.050, 8: 1.000 (was 2)
    head_pair_paged_min_waves: 8,
    // sweep 1, 6 rows; 0: 1.006, 2: 1.000, 4: 1.065, 8: 1.131 (kept)
    cluster_max_16bit: 2,
    // sweep 1, 10 rows; 0: 1.000, 2: 1.010, 4: 1.246 (kept)
    cluster_max_quantized: 0,
    // sweep 1, 12 rows; 16384: 0.995, 65536: 1.000, 262144: 0.999, 1048576: 1.023, 4194304: 1.110 (kept)
    in_attention_merge_max_bytes: 65536,
    // sweep 1, 10 rows; 4: 1.000, 8: 1.000, 16: 1.016, 0: 1.017 (kept)
    saturating_warps_8bit_narrow: 8,
    // sweep 1, 6 rows; 4: 1.000, 8: 1.032, 0: 1.030 (kept)
    saturating_warps_16bit_wide: 4,
    // sweep 1, 4 rows; 8: 1.000, 16: 1.006, 0: 1.004 (kept)
    saturating_warps_16bit_wgmma: 8,
    // sweep 1, 15 rows; 1: 1.000, 2: 1.000, 3: 1.001, 4: 1.001, 6: 0.999 (kept)
    split_overhead_stages: 2,
    // sweep 2, 18 rows; 1: 1.063, 2: 1.003, 3: 1.001, 4: 1.000 (was 1)
    paged_min_blocks_per_sm: 4,
};
