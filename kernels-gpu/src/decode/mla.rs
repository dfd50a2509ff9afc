//! The MLA family (`Family::Mla`): multi-head latent attention (DeepSeek V3
//! / R1, Kimi K2) in its absorbed form, MQA over one latent head whose
//! cached rows hold 576 values — Q·K over all of them, V the first 512.
//!
//! A block is 64 query rows (tokens × heads, packed as every family packs
//! them) against one work item's keys, in 64-key stages; two warpgroups,
//! no producer:
//! - every thread issues its share of a stage's 16-byte `cp.async` copies
//!   (the rows laid out as `Swizzle128`, 9 column blocks of 64 dims); two
//!   stages after the 72 KiB Q tile fill the block's shared memory;
//! - warpgroup `wg` computes the scores of the stage's keys `32 wg ..+32`
//!   for all 64 rows (`S = Q·Kᵀ`, 36 `m64n32k16` steps, both operands from
//!   shared memory);
//! - the two exchange their rows' maxima through shared memory, so both
//!   hold the same running maximum, write their P (bf16) into one 64 × 64
//!   tile, and each computes `O[:, 256 wg ..+256] += P·V` over all 64 keys
//!   (4 `m64n256k16` steps): the O accumulator (64 × 512 f32) is split by
//!   columns, 128 registers a thread;
//! - the row sums are exchanged once at the end; the rows are written to O
//!   or, for a split sequence, to their partial slot (merged by the last
//!   block, `merge::merge_if_last`, or by the merge kernel).
//!
//! The shared memory (`decode_attn_abi::mla_smem_bytes`): the Q tile, the
//! stages, the P tile, the exchange, the work item.

use decode_attn_abi::{DecodeParams, WorkItem, DIRECT_OUTPUT, MLA_KEYS, MLA_P_BYTES, MLA_ROWS, MLA_STAGES, MLA_TILE_BYTES};

use super::block::{block_work, keep_item, mask_from, qo_row_addr, row_info, rows_here, token_head};
use crate::arch::math::{ex2, pack_bf16x2};
use crate::arch::wgmma::{descriptor, mla_pv_bf16, mla_scores_bf16};
use crate::arch::{memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// Values of a latent row (Q·K's head dim) and of V (O's).
const QK_DIM: u32 = 576;
const V_DIM: u32 = 512;
/// 16-byte chunks of a latent row.
const ROW_CHUNKS: u32 = QK_DIM / 8;
/// The 64-row tiles' layout (column blocks of 64 dims, 8 KiB apart).
const TILE: Swizzle128 = Swizzle128 { rows: MLA_ROWS };

/// # Safety
/// Launched by the host with the planner's grid (x: work items, z: row
/// chunks of 64), 256 threads and `mla_smem_bytes` of shared memory, on
/// buffers it validated.
#[inline(always)]
pub unsafe fn decode_mla<F: KvFormat, const PAGED: bool>(p: &DecodeParams) {
    const { assert!(matches!(F::FORMAT, decode_attn_abi::KvFormat::Bf16)) };
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let (wg, warp_m) = (warp / 4, warp % 4);
    let (g, c2) = (lane / 4, (lane % 4) * 2);

    let Some((item, seq_len, _)) = block_work::<Standard, false>(p) else { return };
    keep_item(p, &item, tid);
    let row0 = thread::block_idx_z() * MLA_ROWS;

    let smem = shared::dynamic_smem_base();
    let q_tile = smem;
    let stage_at = |s: u32| smem + MLA_TILE_BYTES * (1 + s);
    let p_tile = smem + MLA_TILE_BYTES * (1 + MLA_STAGES);
    // Each warpgroup's rows' maxima, then their sums.
    let maxima = p_tile + MLA_P_BYTES;
    let sums = maxima + 2 * 4 * MLA_ROWS;

    // Q (rows past the block's last zero-filled), in the first copy group.
    {
        let (sub, lane8) = (tid / 8, tid % 8);
        let rows_total = p.group * p.q_len;
        for pass in 0..2 {
            let local = pass * 32 + sub;
            let global = row0 + local;
            let valid = global < rows_total;
            let (token, head) = if valid { token_head(p, 0, global) } else { (0, 0) };
            let src = qo_row_addr::<{ QK_DIM as usize }>(p.q, p, item.batch, token, head);
            for j in 0..ROW_CHUNKS / 8 {
                let c = lane8 + 8 * j;
                memory::cp_async_16(q_tile + TILE.at(local, c, 0), src + 16 * c as u64, if valid { 16 } else { 0 });
            }
        }
    }
    let n_tiles = (item.kv_end - item.kv_start).div_ceil(MLA_KEYS);
    issue_stage::<PAGED>(p, &item, 0, stage_at(0), tid);
    memory::cp_async_commit();
    if n_tiles > 1 {
        issue_stage::<PAGED>(p, &item, 1, stage_at(1), tid);
    }
    memory::cp_async_commit();

    let rows = [warp_m * 16 + g, warp_m * 16 + g + 8].map(|local| row_info(p, &item, seq_len, 0, row0, local));
    let mask_from = mask_from::<Standard>(p, &item, seq_len);
    let q_desc = descriptor(q_tile, 16, 1024);
    let p_desc = descriptor(p_tile, 16, 1024);
    let scale = p.score_scale;

    let mut o = [[0f32; 4]; 32];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0f32; 2];
    for t in 0..n_tiles {
        memory::cp_async_wait::<1>();
        thread::sync_threads();
        let stage = stage_at(t % MLA_STAGES);
        let key0 = item.kv_start + t * MLA_KEYS + 32 * wg;
        // This warpgroup's 32 keys (K-major: 8 keys a 1024-byte group).
        let raw = mla_scores_bf16(q_desc, descriptor(stage + 4 * 1024 * wg, 16, 1024));
        let masked = key0 + 32 > mask_from;
        let mut s = [0f32; 16];
        for n in 0..4u32 {
            for e in 0..4u32 {
                let i = (4 * n + e) as usize;
                let key = key0 + 8 * n + c2 + (e & 1);
                s[i] = if masked && key >= rows[(e / 2) as usize].limit { f32::NEG_INFINITY } else { raw[i] * scale };
            }
        }
        let step_max = |r: usize| warp::quad_max(tree4(core::array::from_fn(|n| s[4 * n + 2 * r].max(s[4 * n + 2 * r + 1])), f32::max));
        let mine = [step_max(0), step_max(1)];
        if c2 == 0 {
            for r in 0..2 {
                shared::st_shared_f32(maxima + 4 * (wg * MLA_ROWS + rows[r].local), mine[r]);
            }
        }
        thread::sync_named(1, 256);
        // Both warpgroups combine the maxima in the same order: they hold
        // the same running maximum, bit for bit.
        let mut alpha = [1f32; 2];
        let mut base = [0f32; 2];
        for r in 0..2 {
            let other = shared::ld_shared_f32(maxima + 4 * ((1 - wg) * MLA_ROWS + rows[r].local));
            let (first, second) = if wg == 0 { (mine[r], other) } else { (other, mine[r]) };
            (alpha[r], base[r]) = state::advance(&mut m[r], first.max(second));
        }
        for (i, x) in s.iter_mut().enumerate() {
            *x = ex2(*x - base[(i % 4) / 2]);
        }
        for r in 0..2 {
            l[r] = l[r] * alpha[r] + tree4(core::array::from_fn(|n| s[4 * n + 2 * r] + s[4 * n + 2 * r + 1]), |a, b| a + b);
        }
        state::rescale_rows(&mut o, alpha);
        // P of this warpgroup's keys into the tile (row-major, keys
        // contiguous: the P·V's A operand, K-major).
        for n in 0..4u32 {
            let key = 32 * wg + 8 * n + c2;
            for r in 0..2u32 {
                let at = p_tile + TILE.at(rows[r as usize].local, key / 8, 0) + 2 * (key % 8);
                let i = (4 * n + 2 * r) as usize;
                shared::st_shared_u32(at, pack_bf16x2(s[i], s[i + 1]));
            }
        }
        shared::fence_proxy_async_shared();
        thread::sync_named(2, 256);
        // V: the stage's rows MN-major, this warpgroup's 4 column blocks.
        mla_pv_bf16(&mut o, p_desc, descriptor(stage + 4 * 8192 * wg, 8192, 1024));
        // Every warp is done with the stage (and the P tile) before it is
        // refilled; an empty group keeps the wait's count.
        thread::sync_threads();
        if t + MLA_STAGES < n_tiles {
            issue_stage::<PAGED>(p, &item, t + MLA_STAGES, stage, tid);
        }
        memory::cp_async_commit();
    }
    memory::cp_async_wait::<0>();

    // The rows' sums over both warpgroups' keys, in the same order.
    let mine = l.map(warp::quad_sum);
    if c2 == 0 {
        for r in 0..2 {
            shared::st_shared_f32(sums + 4 * (wg * MLA_ROWS + rows[r].local), mine[r]);
        }
    }
    thread::sync_threads();
    let (batch, slot) = (item.batch, item.partial_slot);
    let here = rows_here(p, row0);
    thread::launch_dependents();
    for r in 0..2 {
        let local = rows[r].local;
        if local >= here {
            continue;
        }
        let total = shared::ld_shared_f32(sums + 4 * local) + shared::ld_shared_f32(sums + 4 * (MLA_ROWS + local));
        let (inv_l, lse) = state::finish(m[r], total);
        let (token, head) = token_head(p, 0, row0 + local);
        let col0 = 256 * wg + c2;
        if slot == DIRECT_OUTPUT {
            let out = qo_row_addr::<{ V_DIM as usize }>(p.o, p, batch, token, head);
            for (j, acc) in o.iter().enumerate() {
                let c = col0 + 8 * j as u32;
                memory::st_global_u32(out + 2 * c as u64, pack_bf16x2(acc[2 * r] * inv_l, acc[2 * r + 1] * inv_l));
            }
        } else {
            let row = (slot as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64;
            let out = p.partial_o + 4 * row * V_DIM as u64;
            for (j, acc) in o.iter().enumerate() {
                let c = col0 + 8 * j as u32;
                memory::st_global_v2_u32(out + 4 * c as u64, [(acc[2 * r] * inv_l).to_bits(), (acc[2 * r + 1] * inv_l).to_bits()]);
            }
            if wg == 0 && c2 == 0 {
                memory::st_global_f32(p.partial_lse + 4 * row, lse);
            }
        }
    }
    if slot != DIRECT_OUTPUT && p.merge_counters != 0 {
        // (The exchange's first word is free: every sum was read above,
        // before the merge's first barrier.)
        crate::merge::merge_if_last::<crate::format::Bf16, Standard, { V_DIM as usize }, false>(p, batch, here, maxima);
    }
}

/// Issues this thread's copies of stage `t` of the work item's keys into
/// `dst`: 8 threads a key, 32 keys a pass, each thread 9 of a row's 72
/// chunks (one in each column block). Keys past the item's end are
/// zero-filled (their P is 0, and a zero V row keeps the P·V finite),
/// their source address the item's first key's.
#[inline(always)]
unsafe fn issue_stage<const PAGED: bool>(p: &DecodeParams, item: &WorkItem, t: u32, dst: u32, tid: u32) {
    let (sub, lane8) = (tid / 8, tid % 8);
    for pass in 0..2 {
        let r = pass * 32 + sub;
        let key = item.kv_start + t * MLA_KEYS + r;
        let live = key < item.kv_end;
        let src = row_address::<PAGED>(p, item.batch, if live { key } else { item.kv_start });
        for j in 0..ROW_CHUNKS / 8 {
            let c = lane8 + 8 * j;
            memory::cp_async_16(dst + TILE.at(r, c, 0), src + 16 * c as u64, if live { 16 } else { 0 });
        }
    }
}

/// The byte address of key `key`'s latent row of sequence `batch`: from
/// the sequence's first row (strided), or through its block table (paged;
/// an id past the pool, or negative, is read as the last page).
#[inline(always)]
unsafe fn row_address<const PAGED: bool>(p: &DecodeParams, batch: u32, key: u32) -> u64 {
    if PAGED {
        let entry = p.block_table + 4 * (batch as u64 * p.table_stride as u64 + (key >> p.page_shift) as u64);
        let id = memory::ld_global_nc_u32(entry);
        let page = if id < p.num_pages { id } else { p.num_pages - 1 };
        p.k + page as u64 * p.k_stride_batch + (key & ((1 << p.page_shift) - 1)) as u64 * p.k_stride_token
    } else {
        p.k + batch as u64 * p.k_stride_batch + key as u64 * p.k_stride_token
    }
}

/// `f` over four values as a tree: `f(f(x0, x1), f(x2, x3))`.
#[inline(always)]
fn tree4(x: [f32; 4], f: impl Fn(f32, f32) -> f32) -> f32 {
    f(f(x[0], x[1]), f(x[2], x[3]))
}
