//! Sequence lengths on the device, for CUDA-graph decode loops: the
//! capacity-mode schedule (a step's work list from the current lengths) and
//! the length advance a step ends with, so lengths never round-trip through
//! the host.

use decode_attn_abi::{capacity_work_item, AdvanceParams, MergeItem, ScheduleParams, WorkItem, DIRECT_OUTPUT};

use crate::arch::thread;

/// `seq_lens[b] += by` (capped at the capacity) for every `b < batch`; a
/// length of 0 is an empty batch slot and stays 0.
///
/// # Safety
/// `p.seq_lens` holds `p.batch` u32 (checked by the host); any grid of
/// 1-D blocks covers them with a grid-stride loop.
#[inline(always)]
pub unsafe fn advance_seq_lens(p: &AdvanceParams) {
    let step = thread::grid_dim_x() * thread::block_dim_x();
    let mut b = thread::block_idx_x() * thread::block_dim_x() + thread::thread_idx_x();
    while b < p.batch {
        let len = (p.seq_lens as *mut u32).add(b as usize);
        if *len != 0 {
            *len = (*len).saturating_add(p.by).min(p.capacity);
        }
        b += step;
    }
}

/// A capacity-mode step's work list, from the device lengths (see
/// `ScheduleParams`): thread x writes work item x; the thread of each
/// sequence's first chunk also writes its capped length and merge item.
/// The grid's threads also zero the merge counters, so a step never depends
/// on what an earlier use of the workspace left in them.
///
/// # Safety
/// The host sized every buffer for `batch * chunks_per_seq` items,
/// `batch` sequences and `num_counters` counters.
#[inline(always)]
pub unsafe fn schedule(p: &ScheduleParams) {
    let x = thread::block_idx_x() * thread::block_dim_x() + thread::thread_idx_x();
    let mut c = x;
    while c < p.num_counters {
        *(p.merge_counters as *mut u32).add(c as usize) = 0;
        c += thread::grid_dim_x() * thread::block_dim_x();
    }
    if x >= p.batch * p.chunks_per_seq {
        return;
    }
    let b = x / p.chunks_per_seq;
    let seq_len = (*(p.seq_lens as *const u32).add(b as usize)).min(p.max_seq_len);
    let empty = WorkItem { batch: b, kv_start: 0, kv_end: 0, partial_slot: DIRECT_OUTPUT };
    *(p.work as *mut WorkItem).add(x as usize) = capacity_work_item(x, seq_len, p.q_len, p.chunk_keys, p.chunks_per_seq).unwrap_or(empty);
    if x % p.chunks_per_seq == 0 {
        *(p.seq_lens_out as *mut u32).add(b as usize) = seq_len;
        let chunks = if seq_len < p.q_len { 0 } else { seq_len.div_ceil(p.chunk_keys) };
        *(p.merge as *mut MergeItem).add(b as usize) = MergeItem { batch: b, first_slot: x, num_slots: chunks, _pad: 0 };
    }
}
