//! The ring kernel (`decode::mla_t_ring`) at 32 query rows a block, for
//! both fp8 latent caches (`Form::TransposedRows`: DeepSeek's 16 heads a
//! GPU × q_len 2, multi-token prediction): each stage's e4m3 bytes are
//! converted in the MMAs' A registers once for the 32 rows, where 16-row
//! chunks convert every key once a chunk (docs/perf.md, "MLA 16 heads ×
//! q_len 2 in one block").
//!
//! - **MMAs** `m64n32k16` (`mla_t32_scores_e4m3` / `_ds`,
//!   `mla_t32_pv_e4m3`): the keys along M as the ring's, the 32 rows along
//!   N. A thread holds 2 keys of 8 rows (`2c, 2c + 1` of each 8-row
//!   group), the scores 16 f32 and Oᵀ 128.
//! - **Two warpgroups** (the ring's `groups`), warpgroup `w` taking stages
//!   `w, w + 2, …`: Oᵀ's 128 registers leave no room for a third; four
//!   slots for fp8 per token, three for fp8-ds-mla (its four 32-row P
//!   tiles a warpgroup), beside the 36 KB Q tile.
//! - The ring's slots, copies, issued stages, scales, fp8-ds-mla's scale
//!   groups and the softmax base are `mla_t_ring`'s; the stage softmax and
//!   the end are `mla_transposed`'s at 32 rows.
//!
//! The shared memory (`decode_attn_abi::mla_transposed_smem_bytes` of the
//! form): the Q tile, the warpgroups' P tiles (32 rows × 64 keys), the
//! slots, the exchange, the work item; the end's O tiles over the P tiles
//! and the slots.

use decode_attn_abi::{mla_form_ring, DecodeParams, Form, MlaRing, DS_MLA_LATENT, DS_MLA_ROPE_AT, MLA_KEYS};

use super::block::{block_work_at, keep_item, mask_from, row_info};
use super::mla::{bf16x2_magnitude, scaled_f16x2, QK_DIM};
use super::mla_t_ring::{issue_stage, key_of, p_column, ring_dim};
use super::mla_transposed::{finish_rows, issue_q_tile, row_chunk_of_block, stage_softmax, TransposedSmem};
use super::query::q_row_scale;
use crate::arch::math::{pack_bf16x2, pack_f16x2, unpack_bf16x2};
use crate::arch::wgmma::{descriptor, mla_t32_pv_e4m3, mla_t32_scores_ds, mla_t32_scores_e4m3};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// The 32-row ring of `format` (`Form::TransposedRows`; an fp8 latent
/// format: `decode::decode_mla_t_rows` sends no other here, whose body is
/// only compiled, as per token's).
const fn ring32(format: decode_attn_abi::KvFormat) -> MlaRing {
    match mla_form_ring(format, Form::TransposedRows) {
        Some(ring) => ring,
        None => ring32(decode_attn_abi::KvFormat::Fp8PerHead),
    }
}
const PT: MlaRing = ring32(decode_attn_abi::KvFormat::Fp8PerHead);
const DS: MlaRing = ring32(decode_attn_abi::KvFormat::Fp8DsMla);
/// Query rows of a block (the MMAs' N).
const ROWS: u32 = PT.rows;
/// Rows and score elements a thread holds.
const NR: usize = ROWS as usize / 4;
const NE: usize = 2 * NR;
/// The 32-row tiles' layout (Q's, and the P tiles').
const TILE32: Swizzle128 = Swizzle128 { rows: ROWS };

/// # Safety
/// As `decode_mla_t_ring`, for the fp8 latent caches, with
/// `mla_transposed_threads` threads and `mla_transposed_smem_bytes` of
/// shared memory of `Form::TransposedRows`, any row count (in chunks of
/// 32, consecutive blocks).
#[inline(always)]
pub unsafe fn decode_mla_t_ring32<F: KvFormat, const PAGED: bool>(p: &DecodeParams) {
    const { assert!(F::FORMAT.holds_latent() && PT.rows == 32 && DS.rows == 32 && PT.groups == DS.groups) };
    let ds = const { matches!(F::FORMAT, decode_attn_abi::KvFormat::Fp8DsMla) };
    let ring = const { ring32(F::FORMAT) };
    const GROUPS: u32 = PT.groups;
    let slots = const { ring32(F::FORMAT).slots };
    let row_bytes = ring.row;
    let spread = const { ring32(F::FORMAT).spread };
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
    let p_tile = |b: u32| q_tile + ring.q_bytes() + ring.p_bytes() * ring.p_tiles * b;
    let slots_at = p_tile(GROUPS);
    let slot_at = |s: u32| slots_at + ring.slot_bytes() * s;
    // A warpgroup's stage maxima: two stages' slots of 4 warps × 32 rows.
    let stage_maxima = |b: u32, slot: u32| slot_at(slots) + 4 * ROWS * (4 * (2 * b + slot));
    let finals = |b: u32| stage_maxima(GROUPS, 0) + 4 * ROWS * 5 * b;
    let lses = finals(GROUPS);
    let slot_bar = |s: u32| lses + 4 * ROWS + 8 * s;
    let q_factors = slot_bar(slots);
    let issued = |s: u32| q_factors + 8 * ROWS + 4 * s;
    let group_bar = 1 + own;

    if tid == 0 {
        for s in 0..slots {
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
    while first < slots && first < n_tiles {
        issue_stage::<PAGED>(p, &item, ring, first, slot_at(first), slot_bar(first), pt);
        first += GROUPS;
    }
    memory::cp_async_wait::<0>();
    thread::sync_threads();
    q_to_f16_permuted32(q_tile, q_factors, stage_maxima(0, 0), tid, ds);
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
    let my_key = |h: u32| 16 * warp_m + key_of(g, h, spread);
    let score_at = row_bytes * my_key(0) + 16 * c;
    let pv_at = row_bytes * if spread { 2 * c } else { c } + 32 * warp_m + 4 * g;
    // fp8-ds-mla: the first key's scales and its RoPE bytes.
    let scales_at = ring.scales + ring.scale_stride * my_key(0);
    let rope_at = row_bytes * my_key(0) + DS_MLA_ROPE_AT + 32 * c;

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
        // The thread's keys' scales: per token one, fp8-ds-mla four (the
        // scores are summed over the groups times theirs already).
        let (raw, group_scale, key_scale) = if ds {
            let raw = mla_t32_scores_ds(at + score_at, at + scales_at, at + rope_at, q_desc, slot_bar(slot), parity);
            let scales: [[f32; 4]; 2] = core::array::from_fn(|h| shared::ld_shared_v4_f32(at + ring.scales + ring.scale_stride * my_key(h as u32)));
            (raw, scales, scales.map(|x| x[0].max(x[1]).max(x[2].max(x[3]))))
        } else {
            let raw = mla_t32_scores_e4m3(at + score_at, q_desc, slot_bar(slot), parity);
            let key_scale: [f32; 2] = core::array::from_fn(|h| shared::ld_shared_f32(at + ring.scales + ring.scale_stride * my_key(h as u32)));
            (raw, key_scale.map(|x| [x; 4]), key_scale)
        };
        let key_exponent = key_scale.map(state::scale_exponent);
        // The rows' score factors (Q's row factors' inverses) and, in a
        // masked stage, their last keys, read or found again each stage:
        // kept through the loop beside Oᵀ's 128 registers they spilled.
        let factor: [f32; NR] = locals.map(|local| scale * shared::ld_shared_f32(q_factors + 4 * (ROWS + local)));
        let mut s: [f32; NE] = core::array::from_fn(|e| if ds { raw[e] * factor[row_of(e)] } else { raw[e] * factor[row_of(e)] * key_scale[key_half(e) as usize] });
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
            let col = p_column(my_key(key_half(e)), spread);
            let at = tile + TILE32.at(locals[row_of(e)], col / 8, 0) + 2 * (col % 8);
            for i in 0..ring.p_tiles {
                shared::st_shared_u16(at + ring.p_bytes() * i, pack_f16x2(pv[e] * group_scale[key_half(e) as usize][i as usize], 0.0));
            }
        }
        shared::fence_proxy_async_shared();
        for acc in o.iter_mut() {
            for (e, x) in acc.iter_mut().enumerate() {
                *x *= alpha[row_of(e)];
            }
        }
        thread::sync_named(group_bar, 128);
        if ds {
            mla_t32_pv_e4m3::<{ DS.row }, true, { DS.spread }>(&mut o, descriptor(tile, 16, 1024), at + pv_at);
        } else {
            mla_t32_pv_e4m3::<{ PT.row }, false, { PT.spread }>(&mut o, descriptor(tile, 16, 1024), at + pv_at);
        }
        thread::sync_named(group_bar, 128);
        if t + slots < n_tiles {
            if pt == 0 {
                shared::st_release_u32(issued(slot), t + slots);
            }
            issue_stage::<PAGED>(p, &item, ring, t + slots, at, slot_bar(slot), pt);
        }
        t += GROUPS;
        use_count += 1;
        slot += GROUPS;
        if slot >= slots {
            slot -= slots;
            parity ^= 1;
        }
    }

    // (The O tiles, 132 KB, over the P tiles and the slots: fp8-ds-mla's
    // three slots are 126 KB.)
    let smem = TransposedSmem { o_tiles: p_tile(0), finals: finals(0), lses, scratch: stage_maxima(0, 0) };
    let dim = |j: usize, e: usize| ring_dim(j as u32, warp_m, g, key_half(e));
    let inval = || {
        for s in 0..slots {
            mbarrier::inval(slot_bar(s));
        }
    };
    finish_rows::<GROUPS, true, true, NR, NE, ROWS>(p, &item, &o, m, l, smem, dim, inval);
}

/// `mla_t_ring::q_to_f16_permuted` for the 32-row Q tile: warp `w`'s lanes
/// the 32 rows of column blocks `w` and (warp 0) 8, each 16-byte access of
/// a quarter-warp in 32 banks; the rows' maxima meet in `scratch` (8 warps
/// × 32 rows of f32). Every thread of the block calls it (a block
/// barrier). fp8-ds-mla (`ds`): the RoPE block stays bf16, times the same
/// power of two.
#[inline(always)]
unsafe fn q_to_f16_permuted32(q_tile: u32, factors: u32, scratch: u32, tid: u32, ds: bool) {
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
            let x = word(8 * quarter + 2 * s + half);
            if ds && block == DS_MLA_LATENT / 64 {
                let (lo, hi) = unpack_bf16x2(x);
                pack_bf16x2(lo * factor, hi * factor)
            } else {
                scaled_f16x2(x, factor)
            }
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
