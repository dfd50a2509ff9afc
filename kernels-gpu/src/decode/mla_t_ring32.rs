//! The ring kernel (`decode::mla_t_ring`) at 32 query rows a block, for
//! fp8 a scale per token (`Form::TransposedRows`: DeepSeek's 16 heads a
//! GPU × q_len 2, multi-token prediction): each stage's e4m3 bytes are
//! converted in the MMAs' A registers once for the 32 rows, where the
//! 16-row chunks (fp8-ds-mla's form) convert every key once a chunk
//! (docs/perf.md, "MLA 16 heads × q_len 2 in one block").
//!
//! - **MMAs** `m64n32k16` (`mla_t32_scores_e4m3`, `mla_t32_pv_e4m3`): the
//!   keys along M as the ring's, the 32 rows along N. A thread holds 2
//!   keys of 8 rows (`2c, 2c + 1` of each 8-row group), the scores 16 f32
//!   and Oᵀ 128.
//! - **Two warpgroups** (the ring's `groups`), warpgroup `w` taking stages
//!   `w, w + 2, …`: Oᵀ's 128 registers leave no room for a third; four
//!   slots (two stages ahead a warpgroup) beside the 36 KB Q tile.
//! - The ring's slots, copies, issued stages, per-token scales and the
//!   softmax base are `mla_t_ring`'s; the stage softmax and the end are
//!   `mla_transposed`'s at 32 rows.
//!
//! The shared memory (`decode_attn_abi::mla_transposed_smem_bytes` of the
//! form): the Q tile, the two P tiles (32 rows × 64 keys), the four slots,
//! the exchange, the work item.

use decode_attn_abi::{mla_form_ring, DecodeParams, Form, MlaRing, MLA_KEYS};

use super::block::{block_work_at, keep_item, mask_from, row_info};
use super::mla::{bf16x2_magnitude, scaled_f16x2, QK_DIM};
use super::mla_t_ring::{issue_stage, key_of, p_column, ring_dim};
use super::mla_transposed::{finish_rows, issue_q_tile, row_chunk_of_block, stage_softmax, TransposedSmem};
use super::query::q_row_scale;
use crate::arch::math::pack_f16x2;
use crate::arch::wgmma::{descriptor, mla_t32_pv_e4m3, mla_t32_scores_e4m3};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// The 32-row ring (fp8 a scale per token's `Form::TransposedRows`).
const RING: MlaRing = match mla_form_ring(decode_attn_abi::KvFormat::Fp8PerHead, Form::TransposedRows) {
    Some(ring) => ring,
    None => panic!("fp8 a scale per token has a row-chunk ring"),
};
/// Query rows of a block (the MMAs' N).
const ROWS: u32 = RING.rows;
/// Rows and score elements a thread holds.
const NR: usize = ROWS as usize / 4;
const NE: usize = 2 * NR;
/// The 32-row tiles' layout (Q's, and the P tiles').
const TILE32: Swizzle128 = Swizzle128 { rows: ROWS };

/// # Safety
/// As `decode_mla_t_ring`, for fp8 a scale per token, with
/// `mla_transposed_threads` threads and `mla_transposed_smem_bytes` of
/// shared memory of `Form::TransposedRows`, any row count (in chunks of
/// 32, consecutive blocks).
#[inline(always)]
pub unsafe fn decode_mla_t_ring32<F: KvFormat, const PAGED: bool>(p: &DecodeParams) {
    // (Instantiated for every fp8 latent format by `decode_mla_t_rows`,
    // launched for fp8 a scale per token only.)
    const { assert!(F::FORMAT.holds_latent() && ROWS == 32) };
    const GROUPS: u32 = RING.groups;
    const SLOTS: u32 = RING.slots;
    let row_bytes = RING.row;
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let (own, warp_m) = (warp / 4, warp % 4);
    let (g, c) = (lane / 4, lane % 4);
    let pt = tid % 128;
    let Some((item, seq_len, _)) = block_work_at::<Standard>(p, row_chunk_of_block::<ROWS>(p).0) else { return };
    keep_item(p, &item, tid);

    let smem = shared::dynamic_smem_base();
    let q_tile = smem;
    let p_tile = |b: u32| q_tile + RING.q_bytes() + RING.p_bytes() * b;
    let slots_at = p_tile(GROUPS);
    let slot_at = |s: u32| slots_at + RING.slot_bytes() * s;
    // A warpgroup's stage maxima: two stages' slots of 4 warps × 32 rows.
    let stage_maxima = |b: u32, slot: u32| slot_at(SLOTS) + 4 * ROWS * (4 * (2 * b + slot));
    let finals = |b: u32| stage_maxima(GROUPS, 0) + 4 * ROWS * 5 * b;
    let lses = finals(GROUPS);
    let slot_bar = |s: u32| lses + 4 * ROWS + 8 * s;
    let q_factors = slot_bar(SLOTS);
    let issued = |s: u32| q_factors + 8 * ROWS + 4 * s;
    let group_bar = 1 + own;

    if tid == 0 {
        for s in 0..SLOTS {
            mbarrier::init_count(slot_bar(s), 2 * MLA_KEYS);
            shared::st_shared_u32(issued(s), s);
        }
        mbarrier::fence_init();
    }
    issue_q_tile::<ROWS>(p, item.batch, row_chunk_of_block::<ROWS>(p).1, q_tile, tid);
    memory::cp_async_commit();
    thread::sync_threads();
    let n_tiles = (item.kv_end - item.kv_start).div_ceil(MLA_KEYS);
    let mut first = own;
    while first < SLOTS && first < n_tiles {
        issue_stage::<PAGED>(p, &item, RING, first, slot_at(first), slot_bar(first), pt);
        first += GROUPS;
    }
    memory::cp_async_wait::<0>();
    thread::sync_threads();
    q_to_f16_permuted32(q_tile, q_factors, stage_maxima(0, 0), tid);
    shared::fence_proxy_async_shared();
    thread::sync_threads();

    // The thread's rows (the scores' N columns `8 j + 2c` and one on, for
    // the four 8-row groups `j`) and keys (as `mla_t_ring`'s).
    let locals: [u32; NR] = core::array::from_fn(|r| 8 * (r / 2) as u32 + 2 * c + (r % 2) as u32);
    let mask_from = mask_from::<Standard>(p, &item, seq_len);
    let q_desc = descriptor(q_tile, 16, 1024);
    let scale = p.score_scale;
    let key_half = |e: usize| ((e / 2) % 2) as u32;
    let row_of = |e: usize| 2 * (e / 4) + e % 2;
    let my_key = |h: u32| 16 * warp_m + key_of(g, h, false);
    let score_at = row_bytes * my_key(0) + 16 * c;
    let pv_at = row_bytes * c + 32 * warp_m + 4 * g;

    let mut o = [[0f32; NE]; 8];
    let mut m = [f32::NEG_INFINITY; NR];
    let mut l = [0f32; NR];
    let mut t = own;
    let mut use_count = 0u32;
    let mut slot = own;
    let mut parity = 0u32;
    while t < n_tiles {
        let at = slot_at(slot);
        // (Stage `t` issued into its slot before its barrier is waited for:
        // `mla_t_ring`'s "issued stages".)
        while shared::ld_acquire_u32(issued(slot)) != t {}
        let key0 = item.kv_start + t * MLA_KEYS;
        let masked = key0 + MLA_KEYS > mask_from;
        let raw = mla_t32_scores_e4m3(at + score_at, q_desc, slot_bar(slot), parity);
        let key_scale: [f32; 2] = core::array::from_fn(|h| shared::ld_shared_f32(at + RING.scales + RING.scale_stride * my_key(h as u32)));
        let key_exponent = key_scale.map(state::scale_exponent);
        // The rows' score factors (Q's row factors' inverses) and, in a
        // masked stage, their last keys, read or found again each stage:
        // kept through the loop beside Oᵀ's 128 registers they spilled.
        let factor: [f32; NR] = locals.map(|local| scale * shared::ld_shared_f32(q_factors + 4 * (ROWS + local)));
        let mut s: [f32; NE] = core::array::from_fn(|e| raw[e] * factor[row_of(e)] * key_scale[key_half(e) as usize]);
        if masked {
            let row0 = row_chunk_of_block::<ROWS>(p).1;
            for r in 0..NR {
                let limit = row_info(p, &item, seq_len, 0, row0, locals[r]).limit;
                for h in 0..2 {
                    let e = 4 * (r / 2) + 2 * h + r % 2;
                    if key0 + my_key(h as u32) >= limit {
                        s[e] = f32::NEG_INFINITY;
                    }
                }
            }
        }
        let warp_max: [f32; NR] = core::array::from_fn(|r| {
            let e = 4 * (r / 2) + r % 2;
            warp::column_max((s[e] + key_exponent[0]).max(s[e + 2] + key_exponent[1]))
        });
        let maxima = stage_maxima(own, use_count & 1);
        if g == 0 {
            for r in 0..NR {
                shared::st_shared_f32(maxima + 4 * (ROWS * warp_m + locals[r]), warp_max[r]);
            }
        }
        thread::sync_named(group_bar, 128);
        let (alpha, pv) = stage_softmax::<NR, NE, ROWS>(&s, &mut m, &mut l, maxima, &locals);
        let tile = p_tile(own);
        for e in 0..NE {
            let col = p_column(my_key(key_half(e)), false);
            let at = tile + TILE32.at(locals[row_of(e)], col / 8, 0) + 2 * (col % 8);
            shared::st_shared_u16(at, pack_f16x2(pv[e] * key_scale[key_half(e) as usize], 0.0));
        }
        shared::fence_proxy_async_shared();
        for acc in o.iter_mut() {
            for (e, x) in acc.iter_mut().enumerate() {
                *x *= alpha[row_of(e)];
            }
        }
        thread::sync_named(group_bar, 128);
        mla_t32_pv_e4m3::<{ RING.row }>(&mut o, descriptor(tile, 16, 1024), at + pv_at);
        thread::sync_named(group_bar, 128);
        if t + SLOTS < n_tiles {
            if pt == 0 {
                shared::st_release_u32(issued(slot), t + SLOTS);
            }
            issue_stage::<PAGED>(p, &item, RING, t + SLOTS, at, slot_bar(slot), pt);
        }
        t += GROUPS;
        use_count += 1;
        slot += GROUPS;
        if slot >= SLOTS {
            slot -= SLOTS;
            parity ^= 1;
        }
    }

    let smem = TransposedSmem { o_tiles: slots_at, finals: finals(0), lses, scratch: stage_maxima(0, 0) };
    let dim = |j: usize, e: usize| ring_dim(j as u32, warp_m, g, key_half(e));
    let inval = || {
        for s in 0..SLOTS {
            mbarrier::inval(slot_bar(s));
        }
    };
    finish_rows::<GROUPS, true, true, NR, NE, ROWS>(p, &item, &o, m, l, smem, dim, inval);
}

/// `mla_t_ring::q_to_f16_permuted` for the 32-row Q tile (fp8 a scale per
/// token: every column block f16): warp `w`'s lanes the 32 rows of column
/// blocks `w` and (warp 0) 8, each 16-byte access of a quarter-warp in 32
/// banks; the rows' maxima meet in `scratch` (8 warps × 32 rows of f32).
/// Every thread of the block calls it (a block barrier).
#[inline(always)]
unsafe fn q_to_f16_permuted32(q_tile: u32, factors: u32, scratch: u32, tid: u32) {
    const BLOCKS: u32 = QK_DIM / 64;
    let (warp, row) = (tid / 32, tid % 32);
    let at = |block: u32, ch: u32| q_tile + TILE32.at(row, 8 * block + ch, 0);
    let load = |block: u32| -> [[u32; 4]; 8] { core::array::from_fn(|ch| shared::ld_shared_v4_u32(at(block, ch as u32))) };
    let largest = |block: u32| {
        let mut largest = 0;
        for w in load(block).iter() {
            for &x in w.iter() {
                largest = largest.max(bf16x2_magnitude(x));
            }
        }
        largest
    };
    // (Each block read twice, for its maximum and to convert it: its words
    // kept across the barrier went to local memory.)
    let second = warp + 8 < BLOCKS;
    let mut most = largest(warp);
    if second {
        most = most.max(largest(warp + 8));
    }
    shared::st_shared_f32(scratch + 4 * (ROWS * warp + row), f32::from_bits(most));
    thread::sync_threads();
    let mut amax = 0f32;
    for w in 0..8 {
        amax = amax.max(shared::ld_shared_f32(scratch + 4 * (ROWS * w + row)));
    }
    let (factor, inverse) = q_row_scale(amax);
    let convert = |block: u32| {
        let words = load(block);
        let word = |k: usize| words[k / 4][k % 4];
        let out: [u32; 32] = core::array::from_fn(|lw| {
            let (s, quarter, half) = (lw / 8, lw % 4, (lw % 8) / 4);
            scaled_f16x2(word(8 * quarter + 2 * s + half), factor)
        });
        for ch in 0..8 {
            shared::st_shared_v4_u32(at(block, ch as u32), [out[4 * ch], out[4 * ch + 1], out[4 * ch + 2], out[4 * ch + 3]]);
        }
    };
    convert(warp);
    if second {
        convert(warp + 8);
    }
    if warp == 0 {
        shared::st_shared_f32(factors + 4 * row, factor);
        shared::st_shared_f32(factors + 4 * (ROWS + row), inverse);
    }
}
