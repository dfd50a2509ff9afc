//! What a block works on: its work item and sequence length (from the
//! uploaded list, a capacity plan's device lengths or a uniform plan's
//! length), its kv head, its query rows and their key limits, and where
//! it keeps its item for the epilogue. Shared by every family's body, the
//! in-attention merge and the cluster merge.

use decode_attn_abi::{capacity_work_item, capacity_work_item_from, clamp_first_key, div_rem, range_start, DecodeParams, WorkItem};

use crate::arch::memory;

use crate::arch::{shared, thread};
use crate::variant::AttentionVariant;

/// One thread's view of its two rows (`g` and `g + 8` of its warp's tile).
#[derive(Clone, Copy)]
pub(crate) struct RowInfo {
    /// Row within the block.
    pub(crate) local: u32,
    /// Whether the row exists (the last chunk's tile may be partly empty).
    pub(crate) valid: bool,
    pub(crate) token: u32,
    pub(crate) head: u32,
    /// Keys `< limit` are visible to this row (causal among new tokens, and
    /// the work item's end).
    pub(crate) limit: u32,
}

/// The (token, query head) of packed row `global` of kv head `kvh`: rows
/// are `token * group + head_in_group`. (`row_info` keeps the plain
/// division: with [`div_rem`] there, spills moved between the 168-register
/// kernels, docs/perf.md, "Register caps".)
#[inline(always)]
pub(crate) fn token_head(p: &DecodeParams, kvh: u32, global: u32) -> (u32, u32) {
    let (token, in_group) = div_rem(global, p.group);
    (token, kvh * p.group + in_group)
}

#[inline(always)]
pub(crate) fn row_info(p: &DecodeParams, item: &WorkItem, seq_len: u32, kvh: u32, row0: u32, local: u32) -> RowInfo {
    let global = row0 + local;
    let valid = local < p.rows_per_block && global < p.group * p.q_len;
    let token = if valid { global / p.group } else { 0 };
    let head = kvh * p.group + if valid { global % p.group } else { 0 };
    // Token i (of q_len new ones) sees keys t < seq_len - q_len + 1 + i.
    let causal = seq_len - p.q_len + 1 + token;
    let limit = if valid && causal < item.kv_end { causal } else { item.kv_end };
    RowInfo { local, valid, token, head, limit }
}

/// A thread's two rows of an `m16` C fragment: `first` (`g` within its
/// warp's tile) and `first + 8`.
#[inline(always)]
pub(crate) fn row_pair(p: &DecodeParams, item: &WorkItem, seq_len: u32, kvh: u32, row0: u32, first: u32) -> [RowInfo; 2] {
    [first, first + 8].map(|r| row_info(p, item, seq_len, kvh, row0, r))
}

/// This block's work item, its sequence's length and the sequence's own
/// first key (variants with a window: `DecodeParams::seq_starts`, clamped;
/// 0 for the others): from the uploaded work list, or (capacity plans) from
/// the sequence's device length. `None` for an empty item (a capacity-mode
/// chunk past its sequence's end): the whole block returns before any
/// barrier. (Variants with a window start a capacity plan's chunks at the
/// window or the sequence's first key, `decode_attn_abi::range_start`.)
#[inline(always)]
pub(crate) unsafe fn block_work<V: AttentionVariant, const CLUSTER: bool>(p: &DecodeParams) -> Option<(WorkItem, u32, u32)> {
    block_work_of::<V, CLUSTER, 1>(p)
}

/// [`block_work`] of a block that reads `HG` adjacent kv heads (grid x =
/// work item × `num_kv_heads / HG` + head pair).
#[inline(always)]
pub(crate) unsafe fn block_work_of<V: AttentionVariant, const CLUSTER: bool, const HG: u32>(p: &DecodeParams) -> Option<(WorkItem, u32, u32)> {
    block_work_at::<V>(p, block_item_of::<CLUSTER, HG>(p, thread::block_idx_x_fresh()))
}

/// [`block_work`] of work item `x` (the MLA family's grid interleaves its
/// row chunks with the items, `decode::mla`).
#[inline(always)]
pub(crate) unsafe fn block_work_at<V: AttentionVariant>(p: &DecodeParams, x: u32) -> Option<(WorkItem, u32, u32)> {
    let (item, seq_len, first) = if p.chunks_per_seq != 0 {
        let batch = div_rem(x, p.chunks_per_seq).0;
        let len = capacity_len(p.seq_lens, batch, p.max_seq_len);
        if V::WINDOW {
            let first = first_key(p.seq_starts, batch, len, p.q_len);
            (capacity_work_item_from(x, len, range_start(len, first, p.q_len, p.window, p.window_align), p.q_len, p.chunk_keys, p.chunks_per_seq)?, len, first)
        } else {
            (capacity_work_item(x, len, p.q_len, p.chunk_keys, p.chunks_per_seq)?, len, 0)
        }
    } else {
        let item = *(p.work as *const WorkItem).add(x as usize);
        let len = *(p.seq_lens as *const u32).add(item.batch as usize);
        (item, len, if V::WINDOW { first_key(p.seq_starts, item.batch, len, p.q_len) } else { 0 })
    };
    if item.kv_start >= item.kv_end {
        return None;
    }
    Some((item, seq_len, first))
}

/// Sequence `batch`'s own first key (`DecodeParams::seq_starts`, 0 where
/// there are none), at most `seq_len − q_len`
/// (`decode_attn_abi::clamp_first_key`).
#[inline(always)]
pub(crate) unsafe fn first_key(seq_starts: u64, batch: u32, seq_len: u32, q_len: u32) -> u32 {
    if seq_starts == 0 {
        return 0;
    }
    // SAFETY (caller): the host checked `seq_starts` to hold `batch` u32s.
    clamp_first_key(memory::ld_global_nc_u32(seq_starts + 4 * batch as u64), seq_len, q_len)
}

/// Keeps the work item's sequence and partial slot for the epilogue in the
/// block's last shared-memory bytes (`DecodeParams::item_smem`), which no
/// stage or epilogue buffer reaches; the barriers between here and the
/// epilogue make the store visible to every thread.
#[inline(always)]
pub(crate) unsafe fn keep_item(p: &DecodeParams, item: &WorkItem, tid: u32) {
    if tid == 0 {
        let at = shared::dynamic_smem_base() + p.item_smem;
        shared::st_shared_u32(at, item.batch);
        shared::st_shared_u32(at + 4, item.partial_slot);
    }
}

/// Variants with a window: keeps the sequence's own first key
/// ([`first_key`]) in the block's item bytes, past the work item's (no
/// cluster kernel has a window), for [`kept_first_key`]. The wide and
/// narrow bodies read it there at each step rather than hold it through
/// their key loop, where one more live register spilled the int4 ALiBi
/// kernels at their caps (docs/perf.md, "Key ranges"); every step begins
/// after the pipeline's block barrier, which makes the store visible.
#[inline(always)]
pub(crate) unsafe fn keep_first_key<V: AttentionVariant>(p: &DecodeParams, seq_first: u32, tid: u32) {
    if V::WINDOW && tid == 0 {
        shared::st_shared_u32(shared::dynamic_smem_base() + p.item_smem + 12, seq_first);
    }
}

/// The first key [`keep_first_key`] kept (0 for variants without a
/// window), read afresh at each call.
#[inline(always)]
pub(crate) unsafe fn kept_first_key<V: AttentionVariant>(p: &DecodeParams) -> u32 {
    if V::WINDOW {
        shared::ld_shared_u32(shared::dynamic_smem_base() + p.item_smem + 12)
    } else {
        0
    }
}

/// Cluster plans: keeps the sequence's length (which chunks of the cluster
/// are live) beside the item for the cluster merge. Called after the
/// pipeline's first copies are issued: the length is a load that depends
/// on the work item's, and thread 0 storing it any earlier held its warp's
/// copies back by that load's latency (+0.3-0.6 µs on the smallest rows,
/// docs/perf.md, "Block prologue").
#[inline(always)]
pub(crate) unsafe fn keep_seq_len<const CLUSTER: bool>(p: &DecodeParams, seq_len: u32, tid: u32) {
    if CLUSTER && tid == 0 {
        shared::st_shared_u32(shared::dynamic_smem_base() + p.item_smem + 8, seq_len);
    }
}

/// The sequence length [`keep_seq_len`] kept (after a block barrier).
#[inline(always)]
pub(crate) unsafe fn kept_seq_len(p: &DecodeParams) -> u32 {
    shared::ld_shared_u32(shared::dynamic_smem_base() + p.item_smem + 8)
}

/// This block's kv head (`decode_attn_abi::decode_block_kv_head`), computed
/// afresh at each call: callers after the key loop call it again rather
/// than keep the value live through the loop (held, it cost the tightest
/// kernels a register, 8-byte spills at their caps).
#[inline(always)]
pub(crate) fn block_kv_head<const CLUSTER: bool>(p: &DecodeParams) -> u32 {
    let x = thread::block_idx_x_fresh();
    if CLUSTER {
        decode_attn_abi::decode_block_kv_head(x, p.num_kv_heads, p.cluster_log2)
    } else {
        div_rem(x, p.num_kv_heads).1
    }
}

/// The first of the `HG` adjacent kv heads of this block
/// ([`block_kv_head`] when `HG` = 1; never a cluster kernel otherwise).
#[inline(always)]
pub(crate) fn block_first_head<const CLUSTER: bool, const HG: u32>(p: &DecodeParams) -> u32 {
    if HG == 1 {
        block_kv_head::<CLUSTER>(p)
    } else {
        div_rem(thread::block_idx_x_fresh(), p.num_kv_heads / HG).1 * HG
    }
}

/// The work item of grid-x index `x` in a grid of `HG`-head blocks
/// ([`block_item`] when `HG` = 1).
#[inline(always)]
pub(crate) fn block_item_of<const CLUSTER: bool, const HG: u32>(p: &DecodeParams, x: u32) -> u32 {
    if HG == 1 {
        block_item::<CLUSTER>(p, x)
    } else {
        div_rem(x, p.num_kv_heads / HG).0
    }
}

/// The work item of grid-x index `x` (`decode_attn_abi::decode_block_item`;
/// without clusters by [`div_rem`]: the cluster kernels, which recompute
/// it at every stage, keep the plain division, whose code is smaller).
#[inline(always)]
pub(crate) fn block_item<const CLUSTER: bool>(p: &DecodeParams, x: u32) -> u32 {
    if CLUSTER {
        decode_attn_abi::decode_block_item(x, p.num_kv_heads, p.cluster_log2)
    } else {
        div_rem(x, p.num_kv_heads).0
    }
}

/// Capacity plans: sequence `batch`'s device length, capped at the capacity
/// (a larger value is read as the capacity).
#[inline(always)]
pub(crate) unsafe fn capacity_len(seq_lens: u64, batch: u32, max_seq_len: u32) -> u32 {
    if seq_lens == 0 {
        // A uniform plan (`DecodeParams::seq_lens`): every sequence is this long.
        return max_seq_len;
    }
    (*(seq_lens as *const u32).add(batch as usize)).min(max_seq_len)
}

/// Keys at or past this may be masked for some row of the block (causal
/// among the new tokens, a draft tree's from the first new key, or past
/// the work item's end).
#[inline(always)]
pub(crate) fn mask_from<V: AttentionVariant>(p: &DecodeParams, item: &WorkItem, seq_len: u32) -> u32 {
    let causal0 = if V::TREE && p.tree_masks != 0 { seq_len - p.q_len } else { seq_len - p.q_len + 1 };
    if causal0 < item.kv_end {
        causal0
    } else {
        item.kv_end
    }
}

/// The work item's sequence, which [`keep_item`] kept, read afresh (a draft
/// tree's pass reads it: held through the key loop, it would cost the
/// capped kernels a register). Every step begins after a block barrier
/// that follows the store.
#[inline(always)]
pub(crate) unsafe fn kept_batch(p: &DecodeParams) -> u32 {
    shared::ld_shared_u32(shared::dynamic_smem_base() + p.item_smem)
}

/// Byte address of element 0 of row (batch, token, head) of a
/// `[batch, q_len, num_q_heads, D]` tensor of 2-byte values.
#[inline(always)]
pub(crate) fn qo_row_addr<const D: usize>(base: u64, p: &DecodeParams, batch: u32, token: u32, head: u32) -> u64 {
    base + (((batch as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64) * D as u64) * 2
}

/// Query rows of the block whose first row is `row0` (the last row chunk
/// may hold fewer than `rows_per_block`).
#[inline(always)]
pub(crate) fn rows_here(p: &DecodeParams, row0: u32) -> u32 {
    let rows_total = p.group * p.q_len;
    if rows_total - row0 < p.rows_per_block {
        rows_total - row0
    } else {
        p.rows_per_block
    }
}
