//! The kernels' parameters, filled from a plan and the buffers' addresses:
//! pure functions, so every field is checked on the CPU (`tests/params.rs`).

use decode_attn_abi::{DecodeParams, MergeParams, QuantParams, ITEM_SMEM_BYTES, QUANT_WARPS};

use crate::heuristics::MergeMode;
use crate::error::{ensure, Error, Result};
use crate::plan::{Plan, PlanMode};
use crate::shape::{DecodeShape, KvStrides};
use crate::variant::VariantBuffers;

/// A cache's row strides and side-data strides in bytes: `[batch, token,
/// head]` of values of the format's bits, and of its side entries.
fn byte_strides(shape: &DecodeShape) -> ([u64; 3], [u64; 3]) {
    // (A validated shape's strides are below 2^59 bytes, `MAX_STRIDE_BYTES`;
    // saturating keeps this total for any shape.)
    let (s, side) = (shape.kv_strides(), shape.scale_strides());
    let bits = shape.kv_format.bits() as u64;
    let entry = shape.kv_format.scale_bytes(shape.head_dim) as u64;
    let bytes = |elems: u64| elems.saturating_mul(bits) / 8;
    ([bytes(s.batch), bytes(s.token), bytes(s.head)], [side.batch.saturating_mul(entry), side.token.saturating_mul(entry), side.head.saturating_mul(entry)])
}

/// Device addresses of one attention launch's buffers (checked by the
/// caller: `check::check_buffers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchAddrs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    /// K's and V's scales (quantized formats; 0 otherwise).
    pub k_scales: u64,
    pub v_scales: u64,
    /// The workspace (`Plan::workspace_bytes` of it).
    pub workspace: u64,
    /// A capacity plan's device lengths and (paged) block table (0: a plan
    /// of host lengths, whose lengths and table are in the workspace).
    pub step_seq_lens: u64,
    pub step_block_table: u64,
    /// The variant's arrays (sinks, ALiBi slopes, a draft tree; absent: 0).
    pub variant: VariantBuffers<u64>,
    /// A capacity plan's device first keys (shapes with key ranges; 0:
    /// none, or a plan of host lengths, whose starts are in the workspace).
    pub step_seq_starts: u64,
}

/// The attention kernel's parameters for `plan` on the buffers at `a`.
/// Where the blocks find their work:
/// - a capacity plan's blocks derive it from the device lengths
///   (`step_seq_lens`, capped at the capacity);
/// - a uniform plan's (equal host lengths, `Plan::uniform_len`) from the
///   length in the params (a null length pointer);
/// - otherwise from the work list uploaded into the workspace.
///
/// Total for any addresses: the workspace's regions are added wrapping
/// (for a workspace `check::check_buffers` passed, nothing wraps).
pub fn decode_params(plan: &Plan, a: &LaunchAddrs) -> DecodeParams {
    let shape = plan.shape();
    let layout = plan.layout();
    let ws = a.workspace;
    let (chunks_per_seq, seq_lens, max_seq_len) = match (plan.mode(), plan.uniform) {
        (PlanMode::Capacity { chunks_per_seq }, _) => (chunks_per_seq, a.step_seq_lens, shape.max_seq_len),
        (PlanMode::Lengths, Some((len, chunks_per_seq))) => (chunks_per_seq, 0, len),
        (PlanMode::Lengths, None) => (0, ws.wrapping_add(layout.seq_lens as u64), shape.max_seq_len),
    };
    let (page_shift, num_pages) = shape.page_geometry().unwrap_or((0, 0));
    let block_table = match (plan.mode(), shape.is_paged()) {
        (_, false) => 0,
        (PlanMode::Capacity { .. }, true) => a.step_block_table,
        (PlanMode::Lengths, true) => ws.wrapping_add(layout.block_table as u64),
    };
    let ([batch, token, head], side) = byte_strides(shape);
    let (score_scale, logit_cap) = shape.logit_factors();
    let seq_starts = match (plan.mode(), shape.variant.key_ranges) {
        (_, false) => 0,
        (PlanMode::Capacity { .. }, true) => a.step_seq_starts,
        (PlanMode::Lengths, true) => ws.wrapping_add(layout.seq_starts as u64),
    };
    DecodeParams {
        q: a.q,
        k: a.k,
        v: a.v,
        o: a.o,
        partial_o: ws.wrapping_add(layout.partial_o as u64),
        partial_lse: ws.wrapping_add(layout.partial_lse as u64),
        work: ws.wrapping_add(layout.work as u64),
        seq_lens,
        k_stride_batch: batch,
        k_stride_token: token,
        k_stride_head: head,
        v_stride_batch: batch,
        v_stride_token: token,
        v_stride_head: head,
        k_scales: a.k_scales,
        v_scales: a.v_scales,
        scale_stride_batch: side[0],
        scale_stride_token: side[1],
        scale_stride_head: side[2],
        num_q_heads: shape.num_q_heads,
        q_len: shape.q_len,
        group: shape.group_size(),
        rows_per_block: plan.rows_per_block(),
        warps_m: plan.warps_m(),
        // (Head pairs: one head's warps.)
        warps_k: plan.warps_k() / plan.heads_per_block(),
        score_scale,
        num_kv_heads: shape.num_kv_heads,
        block_table,
        table_stride: shape.pages_per_seq(),
        page_shift,
        num_pages,
        item_smem: plan.smem_bytes() - ITEM_SMEM_BYTES,
        merge: ws.wrapping_add(layout.merges as u64),
        merge_counters: if plan.merge_mode() == MergeMode::InAttention { ws.wrapping_add(layout.merge_counters as u64) } else { 0 },
        chunks_per_seq,
        chunk_keys: plan.chunk_keys(),
        max_seq_len,
        stages: plan.stages(),
        cluster_log2: plan.cluster().max(1).trailing_zeros(),
        logit_cap,
        window: shape.window_param(),
        window_align: plan.window_align(),
        sinks: a.variant.sinks.unwrap_or(0),
        alibi_slopes: a.variant.alibi_slopes.unwrap_or(0),
        seq_starts,
        tree_masks: a.variant.tree_masks.unwrap_or(0),
        tree_positions: a.variant.tree_positions.unwrap_or(0),
        row_window: if shape.variant.tree { shape.window_param().saturating_add(shape.q_len.saturating_sub(1)) } else { shape.window_param() },
        _pad_tree: 0,
    }
}

/// The merge kernel's parameters and grid for a plan whose split
/// sequences it merges (`Plan::merge_grid`), from the attention launch's.
pub fn merge_params(plan: &Plan, p: &DecodeParams) -> Option<(MergeParams, (u32, u32, u32))> {
    let grid = plan.merge_grid()?;
    let shape = plan.shape();
    let params = MergeParams {
        partial_o: p.partial_o,
        partial_lse: p.partial_lse,
        o: p.o,
        merge: p.merge,
        num_q_heads: shape.num_q_heads,
        q_len: shape.q_len,
        seq_lens: p.seq_lens,
        chunks_per_seq: p.chunks_per_seq,
        chunk_keys: plan.chunk_keys(),
        max_seq_len: p.max_seq_len,
        rows_per_block: plan.merge_rows_per_block(),
        sinks: p.sinks,
        window: p.window,
        window_align: p.window_align,
        seq_starts: p.seq_starts,
    };
    Some((params, grid))
}

/// What one cache store / quantize / dequantize launch converts: its
/// buffers' addresses (checked: `check::check_cache_job`) and rows.
#[derive(Clone, Copy, Debug)]
pub struct CacheLaunch {
    pub plain: u64,
    /// The 16-bit rows' strides in elements.
    pub plain_strides: KvStrides,
    pub data: u64,
    pub scales: u64,
    pub seq_lens: u64,
    pub block_table: u64,
    /// Rows per sequence: the new tokens of an append (`append`), else the
    /// capacity.
    pub rows_per_seq: u32,
    pub append: bool,
}

/// The cache kernels' parameters and grid (blocks of `QUANT_WARPS` warps,
/// one warp a row) for `shape`; an `Err` when the rows need a grid past
/// CUDA's limit.
pub fn cache_params(shape: &DecodeShape, c: &CacheLaunch) -> Result<(QuantParams, u32)> {
    let ps = c.plain_strides;
    let (data, side) = byte_strides(shape);
    let rows = shape.batch as u64 * c.rows_per_seq as u64 * shape.num_kv_heads as u64;
    let blocks = rows.div_ceil(QUANT_WARPS as u64);
    ensure(blocks < (1 << 31), if c.append { "batch" } else { "max_seq_len" }, "fewer than 2^34 rows to convert per launch", rows)?;
    let (page_shift, num_pages) = shape.page_geometry().unwrap_or((0, 0));
    let mul = |a: u64, b: u64| a.checked_mul(b).ok_or_else(|| Error::invalid("kv_layout", "strides whose bytes fit in 64 bits", "an overflow"));
    let params = QuantParams {
        plain: c.plain,
        plain_stride_batch: mul(ps.batch, 2)?,
        plain_stride_token: mul(ps.token, 2)?,
        plain_stride_head: mul(ps.head, 2)?,
        data: c.data,
        data_stride_batch: data[0],
        data_stride_token: data[1],
        data_stride_head: data[2],
        scales: c.scales,
        scale_stride_batch: side[0],
        scale_stride_token: side[1],
        scale_stride_head: side[2],
        seq_lens: c.seq_lens,
        batch: shape.batch,
        rows_per_seq: c.rows_per_seq,
        num_kv_heads: shape.num_kv_heads,
        append: c.append as u32,
        capacity: shape.max_seq_len,
        _pad: 0,
        block_table: c.block_table,
        table_stride: shape.pages_per_seq(),
        page_shift,
        num_pages,
        _pad2: 0,
    };
    Ok((params, blocks as u32))
}
