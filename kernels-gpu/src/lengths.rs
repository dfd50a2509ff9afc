//! Sequence lengths on the device, for CUDA-graph decode loops: the length
//! advance a step ends with, so lengths never round-trip through the host
//! (capacity-mode attention blocks read the lengths themselves,
//! `decode::block_work`).

use decode_attn_abi::AdvanceParams;

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
