//! What a caller may choose about a plan: the split policy, the kernel
//! family and its forms, the split merge. Each `Auto` is a rule of
//! [`crate::heuristics`], which documents the measurement behind it.

use decode_attn_abi::Family;

/// How a sequence's keys are divided among blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SplitPolicy {
    /// Split only when one block per (sequence, kv head) would not fill the
    /// GPU; then pick the chunk size that minimizes the estimated time.
    #[default]
    Auto,
    /// One block per (sequence, kv head, row chunk); no merge.
    Never,
    /// Chunks of this many keys (rounded up to a whole pipeline stage).
    ChunkKeys(u32),
}

/// Which kernel family serves the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FamilyChoice {
    /// `Narrow` for a quantized cache whose kv heads have at most 8 query
    /// rows (`group × q_len`); `Wgmma` for any cache at head_dim 128 with
    /// more than `Tuning::wgmma_min_rows` (the device's table); else `Wide`.
    #[default]
    Auto,
    /// This family whatever the shape (`Wide` and `Narrow` serve every
    /// shape; `Wgmma` head_dim 128, else the plan is an `Err`).
    Force(Family),
}

/// Whether a wgmma plan of a strided quantized cache runs the
/// warp-specialised kernel (`decode_attn_abi::wgmma_specializable`: a
/// producer warpgroup copies and converts the stages, one 384-thread block
/// per SM) or the unspecialised one (every warp copies, converts and
/// computes, two 256-thread blocks per SM).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SpecializeChoice {
    /// The warp-specialised kernel when its grid fits two waves (at one
    /// block per SM), else the unspecialised one
    /// (`specialize`).
    #[default]
    Auto,
    /// The unspecialised kernel.
    Never,
    /// The warp-specialised kernel; an `Err` where none exists (not the
    /// wgmma family, a 16-bit or a paged cache).
    Always,
}

/// Whether a narrow plan of a quantized cache (strided or paged) runs blocks of two
/// adjacent kv heads ([`Plan::heads_per_block`](crate::Plan::heads_per_block)): half of each
/// block's warps per head, each stage holding half its keys of both. In a
/// token-major cache a token's rows of the two heads are one piece of
/// twice a row's bytes; HBM serves 128-byte pieces scattered at the token
/// stride more slowly than 256-byte ones (docs/design/nhd-head-groups.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeadPairChoice {
    /// Head pairs where the plan allows them (`head_pair_unsupported`),
    /// the cache is token-major (adjacent heads' rows adjacent), the
    /// sequences average at least `Tuning::head_pair_min_mean_keys` keys, the
    /// paired grid keeps `Tuning::head_pair_min_busy_sms_percent` % of the SMs
    /// the unpaired one keeps busy, and (paged pools) it fills
    /// `Tuning::head_pair_paged_min_waves` waves.
    #[default]
    Auto,
    /// One kv head per block.
    Never,
    /// Head pairs; an `Err` where the plan does not allow them.
    Always,
}

/// Whether an MLA plan runs a transposed kernel or the 64-row one: of at
/// most [`decode_attn_abi::MLA_T_ROWS`] query rows (`group × q_len`: 16
/// heads at q_len 1, 8 at q_len 2) the transposed kernel
/// (`decode_attn_abi::Form::Transposed`: keys along the MMAs' M, a quarter
/// of the 64-row kernel's MMAs), of more rows, for the fp8 latent caches,
/// its row-chunk form (`decode_attn_abi::Form::TransposedRows`: a block a
/// chunk of 32 rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TransposeChoice {
    /// A transposed kernel where the rules take it
    /// ([`crate::heuristics::mla_transposed`],
    /// [`crate::heuristics::mla_transposed_rows`]).
    #[default]
    Auto,
    /// The 64-row kernel.
    Never,
    /// A transposed kernel; an `Err` where none serves the plan (not the
    /// MLA family, or more than 16 rows of a bf16 cache).
    Always,
}

/// How split sequences may be merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MergeChoice {
    /// In a thread-block cluster (`MergeMode::Cluster`) when
    /// the device has clusters and no sequence has more than
    /// `auto_cluster_max` chunks (the device's table; MLA:
    /// `heuristics::mla_cluster_max`, two chunks of an fp8-ds-mla cache on
    /// the 64-row kernel); else through global memory (`merge_mode`).
    #[default]
    Auto,
    /// In a cluster whenever sequences split; an `Err` where they cannot
    /// be (a sequence with more chunks than the device's largest cluster,
    /// `DeviceInfo::max_cluster`, a device without clusters, a variant
    /// without cluster-merge kernels, or an MLA plan on a transposed
    /// kernel).
    Cluster,
    /// Through fp32 partials in global memory, never in a cluster.
    Global,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PlanOptions {
    pub split: SplitPolicy,
    pub family: FamilyChoice,
    /// Warps along the keys per block (1, 2, 4 or 8; at most one per 16 keys
    /// of a pipeline stage); `None` picks the count that keeps the most
    /// warps resident.
    pub warps_k: Option<u32>,
    pub merge: MergeChoice,
    pub specialize: SpecializeChoice,
    pub head_pair: HeadPairChoice,
    pub transpose: TransposeChoice,
}
