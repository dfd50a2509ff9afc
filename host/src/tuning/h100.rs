//! The H100 SXM's table: the thresholds measured by hand on an H100 SXM5
//! before the tables were per GPU; each rule's doc in `crate::heuristics`
//! gives the rows behind its value (docs/perf.md, the headings it cites).

use super::{DeviceFacts, Tuning};

pub const TABLE: Tuning = Tuning {
    name: "H100 SXM",
    facts: DeviceFacts::H100_SXM,
    wgmma_min_rows: 32,
    specialized_max_waves: 2,
    head_pair_min_mean_keys: 512,
    head_pair_max_mean_keys: u32::MAX,
    head_pair_min_busy_sms_percent: 95,
    head_pair_paged_min_waves: 2,
    cluster_max_16bit: 2,
    cluster_max_quantized: 0,
    in_attention_merge_max_bytes: 64 << 10,
    saturating_warps_8bit_narrow: 8,
    saturating_warps_16bit_wide: 4,
    saturating_warps_16bit_wgmma: 8,
    split_overhead_stages: 2,
    paged_min_blocks_per_sm: 1,
};
