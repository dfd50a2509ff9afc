//! Split-KV merge: combines the normalized fp32 partials of a split sequence
//! with log-sum-exp weights, `O = Σ 2^(lse_s - M) O_s / Σ 2^(lse_s - M)`,
//! and writes the final 16-bit output. One warp per (token, head) row; an
//! all-masked partial has lse = -inf and weight 0.

use decode_attn_abi::{MergeItem, MergeParams, MERGE_ROWS_PER_BLOCK};

use crate::arch::{math::{ex2, rcp}, memory, thread, warp};
use crate::format::Half;
use crate::state;

/// # Safety
/// Launched with the grid/block in `MergeParams`' docs, after the attention
/// kernel wrote every slot named by the merge items.
#[inline(always)]
pub unsafe fn merge<H: Half, const D: usize>(p: &MergeParams) {
    let item = *(p.merge as *const MergeItem).add(thread::block_idx_x() as usize);
    // A capacity-mode step lists every sequence; one chunk was written directly.
    if item.num_slots <= 1 {
        return;
    }
    let rows = p.q_len * p.num_q_heads;
    // Grid y is capped at CUDA's 65535; larger row counts stride over it.
    let mut row = thread::block_idx_y() * MERGE_ROWS_PER_BLOCK + thread::warp_id();
    while row < rows {
        merge_row::<H, D>(p, &item, rows, row);
        row += thread::grid_dim_y() * MERGE_ROWS_PER_BLOCK;
    }
}

/// Slots whose loads are in flight together.
const SLOT_BATCH: usize = 8;

/// This lane's `D / 32` consecutive fp32 values at `addr` (16-byte aligned
/// for D ≥ 128, 8-byte for D = 64), in the first entries.
#[inline(always)]
unsafe fn lane_values<const D: usize>(addr: u64) -> [f32; 8] {
    let mut v = [0f32; 8];
    if D / 32 == 2 {
        let [a, b] = memory::ld_global_nc_v2_u32(addr);
        v[0] = f32::from_bits(a);
        v[1] = f32::from_bits(b);
    } else {
        for h in 0..D / 128 {
            let x = memory::ld_global_nc_v4_f32(addr + 16 * h as u64);
            v[4 * h..4 * h + 4].copy_from_slice(&x);
        }
    }
    v
}

/// One warp merges one (token, head) row of one split sequence.
#[inline(always)]
unsafe fn merge_row<H: Half, const D: usize>(p: &MergeParams, item: &MergeItem, rows: u32, row: u32) {
    const { assert!(D % 64 == 0 || D == 64) };
    let per_lane = D / 32;
    let lane = thread::lane_id();
    let slot_row = |s: u32| (item.first_slot + s) as u64 * rows as u64 + row as u64;

    let mut big_m = f32::NEG_INFINITY;
    let mut s = lane;
    while s < item.num_slots {
        big_m = big_m.max(memory::ld_global_nc_f32(p.partial_lse + 4 * slot_row(s)));
        s += 32;
    }
    let base = state::safe_max(warp::warp_max(big_m));

    // Slots in batches of SLOT_BATCH, every load of a batch issued before
    // any is used: one slot per iteration left a full memory latency per
    // slot (grid B's 128 slots: a third of the step).
    let mut acc = [0f32; 8];
    let mut weight_sum = 0f32;
    let mut s0 = 0;
    while s0 < item.num_slots {
        let n = (item.num_slots - s0).min(SLOT_BATCH as u32);
        let mut lse = [f32::NEG_INFINITY; SLOT_BATCH];
        let mut vals = [[0f32; 8]; SLOT_BATCH];
        for k in 0..SLOT_BATCH {
            if (k as u32) < n {
                let r = slot_row(s0 + k as u32);
                lse[k] = memory::ld_global_nc_f32(p.partial_lse + 4 * r);
                vals[k] = lane_values::<D>(p.partial_o + 4 * (r * D as u64 + (lane as usize * per_lane) as u64));
            }
        }
        for k in 0..SLOT_BATCH {
            if (k as u32) < n {
                let w = ex2(lse[k] - base);
                weight_sum += w;
                for j in 0..per_lane {
                    acc[j] += w * vals[k][j];
                }
            }
        }
        s0 += SLOT_BATCH as u32;
    }
    // At least one slot holds key 0, visible to every row: weight_sum > 0.
    let inv = rcp(weight_sum);
    let token = row / p.num_q_heads;
    let head = row % p.num_q_heads;
    let dst = p.o
        + 2 * (((item.batch as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64) * D as u64
            + (lane as usize * per_lane) as u64);
    let mut j = 0;
    while j < per_lane {
        memory::st_global_u32(dst + 2 * j as u64, H::pack(acc[j] * inv, acc[j + 1] * inv));
        j += 2;
    }
}
