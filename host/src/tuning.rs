//! The figures the planner's `Auto` rules read, one table per GPU, and how a
//! device picks its table.
//!
//! A rule (`crate::heuristics`) is a pure function; the thresholds it
//! compares against are a [`Tuning`], measured on one GPU. The driver's
//! figures ([`DeviceFacts`]) pick the table: the one measured on the same
//! part, else the nearest of the same compute capability
//! ([`Tuning::for_device`]). Tables are data: `cargo xtask tune --from
//! sweep.json` writes them (`host/src/tuning/*.rs`) from a `bench --sweep`
//! run on the GPU (docs/perf.md, "Tuning per GPU").

mod h100;
mod h200;

/// What the driver reports of a GPU that sets how work should be planned
/// for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub l2_bytes: u32,
    /// Peak memory clock (kHz) and bus width (bits), as the driver reports
    /// them (`CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE`, `_GLOBAL_MEMORY_BUS_WIDTH`);
    /// 0 where it reports none.
    pub memory_clock_khz: u32,
    pub memory_bus_bits: u32,
}

impl DeviceFacts {
    /// Peak DRAM bandwidth in GB/s (double data rate: two transfers a
    /// clock), 0 when the driver reports no memory clock or bus width.
    pub fn peak_gbps(&self) -> u64 {
        2 * self.memory_clock_khz as u64 * self.memory_bus_bits as u64 / 8 / 1_000_000
    }

    /// An H100 SXM5 (80 GB HBM3) as its driver reports it.
    pub const H100_SXM: DeviceFacts = DeviceFacts { compute_capability: (9, 0), sm_count: 132, l2_bytes: 50 << 20, memory_clock_khz: 2_619_000, memory_bus_bits: 5120 };
    /// An H200 (141 GB HBM3e) as its driver reports it (read by the sweep
    /// that wrote its table: L2 60 MiB, a 6016-bit bus).
    pub const H200: DeviceFacts = h200::TABLE.facts;
}

/// The thresholds of the `Auto` rules on one GPU. Each field names the rule
/// that reads it; the docs of that rule give the measurement behind the
/// H100 value, and a generated table's comments the sweep behind its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// The GPU the table was measured on (for `Debug` and the bench).
    pub name: &'static str,
    /// The device it was measured on.
    pub facts: DeviceFacts,
    /// Rows per kv head past which `Auto` picks the wgmma family where it
    /// serves the cache ([`crate::heuristics::family`]).
    pub wgmma_min_rows: u32,
    /// The most waves (one block per SM) for which `Auto` runs the
    /// warp-specialised wgmma kernel ([`crate::heuristics::specialize`]).
    pub specialized_max_waves: u32,
    /// Keys a plan's sequences must average for `Auto` to pair heads
    /// ([`crate::heuristics::pair_heads`]).
    pub head_pair_min_mean_keys: u32,
    /// Keys a plan's sequences may average at most for `Auto` to pair heads
    /// (`u32::MAX`: no bound; [`crate::heuristics::pair_heads`]).
    pub head_pair_max_mean_keys: u32,
    /// The share (%) of the unpaired grid's busy SMs the paired grid must
    /// keep busy ([`crate::heuristics::pair_heads`]).
    pub head_pair_min_busy_sms_percent: u32,
    /// Waves a paired grid of a paged cache must fill
    /// ([`crate::heuristics::pair_heads`]).
    pub head_pair_paged_min_waves: u32,
    /// Most chunks per sequence the `Auto` merge puts in a cluster, 16-bit
    /// caches; 0: never ([`crate::heuristics::cluster_size`]).
    pub cluster_max_16bit: u32,
    /// The same for quantized caches.
    pub cluster_max_quantized: u32,
    /// Partial bytes one block may merge inside the attention kernel
    /// ([`crate::heuristics::merge_mode`]).
    pub in_attention_merge_max_bytes: u32,
    /// Resident warps per SM past which more blocks stop adding throughput
    /// (0: every block that fits helps; [`crate::heuristics::saturating_warps_per_sm`]):
    /// narrow blocks of an 8-bit cache (int8 and both fp8),
    pub saturating_warps_8bit_narrow: u32,
    /// wide blocks of one row tile of a 16-bit cache,
    pub saturating_warps_16bit_wide: u32,
    /// wgmma blocks of a 16-bit cache.
    pub saturating_warps_16bit_wgmma: u32,
    /// A block's fixed cost (pipeline fill, epilogue) in pipeline stages of
    /// keys, in the split-size estimate ([`crate::heuristics::auto_chunk_keys`]).
    pub split_overhead_stages: u32,
    /// Blocks per SM the split planner fills at least for a paged cache,
    /// where they fit, whatever the saturating-warps rule says
    /// ([`crate::heuristics::useful_blocks_per_sm`]).
    pub paged_min_blocks_per_sm: u32,
}

/// The H100 SXM's table.
pub const H100_TABLE: Tuning = h100::TABLE;
/// The H200's table.
pub const H200_TABLE: Tuning = h200::TABLE;

/// Every table, the first the fallback of last resort.
pub const TABLES: [&Tuning; 2] = [&H100_TABLE, &H200_TABLE];

/// A rule's threshold a sweep may set, by the field's name: what `bench
/// --sweep` varies and `cargo xtask tune` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    WgmmaMinRows,
    SpecializedMaxWaves,
    HeadPairMinMeanKeys,
    HeadPairMaxMeanKeys,
    HeadPairMinBusySmsPercent,
    HeadPairPagedMinWaves,
    ClusterMax16bit,
    ClusterMaxQuantized,
    InAttentionMergeMaxBytes,
    SaturatingWarps8bitNarrow,
    SaturatingWarps16bitWide,
    SaturatingWarps16bitWgmma,
    SplitOverheadStages,
    PagedMinBlocksPerSm,
}

impl Knob {
    pub const ALL: [Knob; 14] = [
        Knob::WgmmaMinRows,
        Knob::SpecializedMaxWaves,
        Knob::HeadPairMinMeanKeys,
        Knob::HeadPairMaxMeanKeys,
        Knob::HeadPairMinBusySmsPercent,
        Knob::HeadPairPagedMinWaves,
        Knob::ClusterMax16bit,
        Knob::ClusterMaxQuantized,
        Knob::InAttentionMergeMaxBytes,
        Knob::SaturatingWarps8bitNarrow,
        Knob::SaturatingWarps16bitWide,
        Knob::SaturatingWarps16bitWgmma,
        Knob::SplitOverheadStages,
        Knob::PagedMinBlocksPerSm,
    ];

    /// The [`Tuning`] field's name.
    pub fn name(self) -> &'static str {
        match self {
            Knob::WgmmaMinRows => "wgmma_min_rows",
            Knob::SpecializedMaxWaves => "specialized_max_waves",
            Knob::HeadPairMinMeanKeys => "head_pair_min_mean_keys",
            Knob::HeadPairMaxMeanKeys => "head_pair_max_mean_keys",
            Knob::HeadPairMinBusySmsPercent => "head_pair_min_busy_sms_percent",
            Knob::HeadPairPagedMinWaves => "head_pair_paged_min_waves",
            Knob::ClusterMax16bit => "cluster_max_16bit",
            Knob::ClusterMaxQuantized => "cluster_max_quantized",
            Knob::InAttentionMergeMaxBytes => "in_attention_merge_max_bytes",
            Knob::SaturatingWarps8bitNarrow => "saturating_warps_8bit_narrow",
            Knob::SaturatingWarps16bitWide => "saturating_warps_16bit_wide",
            Knob::SaturatingWarps16bitWgmma => "saturating_warps_16bit_wgmma",
            Knob::SplitOverheadStages => "split_overhead_stages",
            Knob::PagedMinBlocksPerSm => "paged_min_blocks_per_sm",
        }
    }

    pub fn from_name(name: &str) -> Option<Knob> {
        Knob::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl Tuning {
    /// The table measured on `facts`'s part (same compute capability, SMs,
    /// L2, memory clock and bus), else the nearest: among the tables of the
    /// same compute capability (all tables when none has it), the one with
    /// the least `|ln(bandwidth ratio)| + |ln(SM ratio)|` (bandwidth left
    /// out where the driver reports none), the earlier table on a tie. So an
    /// H800 (132 SMs, 3.35 TB/s) or an H100 PCIe takes the H100's table; an
    /// H20 (78 SMs, 4.0 TB/s) and a GH200 (4.0 or 4.9 TB/s) the H200's, whose
    /// 4.8 TB/s is nearer 4.0 than the H100's 3.35 on a log scale
    /// (tests/plan.rs, "tuning").
    pub fn for_device(facts: &DeviceFacts) -> &'static Tuning {
        if let Some(t) = TABLES.iter().find(|t| t.facts == *facts) {
            return t;
        }
        let same_cc: Vec<&'static Tuning> = TABLES.iter().copied().filter(|t| t.facts.compute_capability == facts.compute_capability).collect();
        let pool = if same_cc.is_empty() { TABLES.to_vec() } else { same_cc };
        let ln_ratio = |a: u64, b: u64| if a == 0 || b == 0 { 0.0 } else { (a as f64 / b as f64).ln().abs() };
        let distance = |t: &Tuning| ln_ratio(facts.peak_gbps(), t.facts.peak_gbps()) + ln_ratio(facts.sm_count as u64, t.facts.sm_count as u64);
        let mut best = pool[0];
        for &t in &pool[1..] {
            if distance(t) < distance(best) {
                best = t;
            }
        }
        best
    }

    /// The value of one threshold.
    pub fn get(&self, knob: Knob) -> u32 {
        let mut t = *self;
        *t.field(knob)
    }

    /// This table with one threshold replaced (a sweep's candidate).
    pub fn with(&self, knob: Knob, value: u32) -> Tuning {
        let mut t = *self;
        *t.field(knob) = value;
        t
    }

    /// The field a knob names: the one place that maps knobs to fields.
    fn field(&mut self, knob: Knob) -> &mut u32 {
        match knob {
            Knob::WgmmaMinRows => &mut self.wgmma_min_rows,
            Knob::SpecializedMaxWaves => &mut self.specialized_max_waves,
            Knob::HeadPairMinMeanKeys => &mut self.head_pair_min_mean_keys,
            Knob::HeadPairMaxMeanKeys => &mut self.head_pair_max_mean_keys,
            Knob::HeadPairMinBusySmsPercent => &mut self.head_pair_min_busy_sms_percent,
            Knob::HeadPairPagedMinWaves => &mut self.head_pair_paged_min_waves,
            Knob::ClusterMax16bit => &mut self.cluster_max_16bit,
            Knob::ClusterMaxQuantized => &mut self.cluster_max_quantized,
            Knob::InAttentionMergeMaxBytes => &mut self.in_attention_merge_max_bytes,
            Knob::SaturatingWarps8bitNarrow => &mut self.saturating_warps_8bit_narrow,
            Knob::SaturatingWarps16bitWide => &mut self.saturating_warps_16bit_wide,
            Knob::SaturatingWarps16bitWgmma => &mut self.saturating_warps_16bit_wgmma,
            Knob::SplitOverheadStages => &mut self.split_overhead_stages,
            Knob::PagedMinBlocksPerSm => &mut self.paged_min_blocks_per_sm,
        }
    }

    /// The table by its name (`H100 SXM`, `H200`), case-insensitive.
    pub fn by_name(name: &str) -> Option<&'static Tuning> {
        TABLES.iter().copied().find(|t| t.name.eq_ignore_ascii_case(name))
    }
}
