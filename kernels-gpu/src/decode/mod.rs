//! The decode-attention kernel bodies, generic over the KV format, the
//! attention variant and the head dim: `wide` (query rows along mma M),
//! `narrow` (keys along M) and `wgmma` (Hopper's warpgroup MMA), and what
//! they share: `block` (a block's work and rows), `pipeline` (the K/V
//! stages), `query` (Q into the block), `epilogue` (combining warps and
//! writing rows) and `cluster` (the cluster merge).
//!
//! One block computes, for one work item (a sequence's key range), one kv
//! head (both from grid x: `decode_attn_abi::decode_grid_x`, a work item's
//! heads consecutive) and one chunk of packed rows (grid z), every query row that
//! shares the kv head: rows are `token * group + head_in_group`, so each K/V
//! byte is read once for all `group × q_len` rows (GQA head packing).
//!
//! Warps form a `warps_m × warps_k` grid: warp (wm, wk) owns mma row tile
//! `wm` (16 rows) and the 16-key steps `wk, wk + warps_k, …` of every stage.
//! Stages of `keys_per_stage` K and V rows are copied global → shared with
//! `cp.async` (`PIPELINE_STAGES` deep) and read with `ldmatrix`; S = Q·Kᵀ and
//! O += P·V run on `mma.sync.m16n8k16` with fp32 accumulators and an online
//! softmax in base 2. At the end the `warps_k` partial states of each row are
//! merged in shared memory and the block writes either the final output or,
//! for a split sequence, an fp32 partial plus its log-sum-exp; in the
//! `CLUSTER` kernels a split sequence's blocks are one thread-block cluster
//! and merge through distributed shared memory instead (`cluster`).

pub(crate) mod block;
mod cluster;
mod epilogue;
mod mla;
mod mla_t_ring;
mod mla_t_ring32;
mod mla_transposed;
mod narrow;
mod pipeline;
mod query;
mod wgmma;
mod wide;

pub use mla::decode_mla;
pub use narrow::decode_narrow;
pub use wgmma::decode_wgmma;
pub use wide::decode_wide;

/// The MLA family's transposed form (blocks of at most 16 query rows):
/// the ring of raw e4m3 slots for the fp8 latent formats
/// (`mla_t_ring`), bf16 stages for bf16 (`mla_transposed`).
///
/// # Safety
/// Launched by the host with the planner's grid, `mla_transposed_threads`
/// threads and `mla_transposed_smem_bytes` of shared memory, on buffers it
/// validated, for at most 16 query rows.
#[inline(always)]
pub unsafe fn decode_mla_t<F: crate::format::KvFormat, const PAGED: bool>(p: &decode_attn_abi::DecodeParams) {
    if decode_attn_abi::mla_t_ring(F::FORMAT).is_some() {
        mla_t_ring::decode_mla_t_ring::<F, PAGED>(p)
    } else {
        mla_transposed::decode_mla_transposed::<F, PAGED>(p)
    }
}

/// The transposed form in row chunks (`Form::TransposedRows`): more than
/// 16 query rows of an fp8 latent cache in blocks of 32 (`mla_t_ring32`),
/// a work item's chunks consecutive blocks.
///
/// # Safety
/// As [`decode_mla_t`], for an fp8 latent cache and any row count, with
/// the form's threads and shared memory.
#[inline(always)]
pub unsafe fn decode_mla_t_rows<F: crate::format::KvFormat, const PAGED: bool>(p: &decode_attn_abi::DecodeParams) {
    mla_t_ring32::decode_mla_t_ring32::<F, PAGED>(p)
}
