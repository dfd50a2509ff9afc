//! The transposed MLA form (`decode::mla_transposed`, at most 16 query
//! rows) for fp8 latent caches with a scale per token (`Fp8PerHead`): the
//! stages' e4m3 rows are not converted into a 16-bit stage buffer but read
//! from a ring of raw slots straight into `wgmma`'s A registers and
//! converted there (f16, exactly), for the scores and for the P·V alike
//! (docs/perf.md, "MLA fp8 at 16 heads in registers";
//! design/mla-fp8-registers.md).
//!
//! - **The ring**: `MLA_T_RING_SLOTS` slots of 64 keys, a key's 576 e4m3
//!   bytes as the cache holds them (one `cp.async.bulk` a key) and its f32
//!   scale at byte 576 (a 4-byte `cp.async`), rows `MLA_T_RING_ROW` bytes
//!   apart; stage `t` in slot `t % SLOTS`, complete on the slot's
//!   mbarrier (128 arrivals: a key's copy and its scale's). Keys past the
//!   item's end are zero-filled (an e4m3 byte may be a NaN, and 0 · NaN is
//!   one). The warpgroup that finishes a stage's P·V refills its slot with
//!   the stage `SLOTS` on (another warpgroup's).
//! - **Three warpgroups** (`MLA_T_RING_GROUPS`, 384 threads), warpgroup `w`
//!   taking stages `w, w + 3, …`, each with its own softmax state: a
//!   warpgroup's stage is a chain of MMA groups whose latency two chains
//!   an SM did not hide (docs/perf.md, "MLA fp8 at 16 heads in
//!   registers"); at 164 registers a thread, three share the register
//!   file. (The plan refuses a build whose kernel allows fewer threads.)
//! - **Scores** (`mla_t_scores_e4m3`): the keys along M, the thread's keys
//!   `16 w + 2 g` and one on (rows two apart: the 16-byte loads of a
//!   quarter-warp fall in 32 banks); the contraction runs in the order the
//!   raw bytes give each thread (`q_to_f16_permuted` lays Q's tile out in
//!   it), one `F2FP` a pair.
//! - **P·V** (`mla_t_pv_e4m3`): Vᵀ as A from registers, a thread's 4 keys
//!   of a k16 step `c, c + 4, c + 8, c + 12` (Pᵀ's columns written in that
//!   order, `p_column`) and its M rows adjacent bytes (O's dims come out
//!   permuted, `ring_dim`): one 4-byte load a key, a `PRMT` and an `F2FP`
//!   a pair.
//! - Each key's scale multiplies its scores and P and its exponent is in
//!   the rows' softmax base, Q's rows are f16 times a power of two, as the
//!   64-row kernel's `f16_mma`; the softmax's end, the warpgroups' merge and
//!   the epilogue are `decode::mla_transposed`'s.
//!
//! The shared memory (`decode_attn_abi::mla_transposed_smem_bytes`, the
//! ring's layout): the Q tile, the three P tiles, the slots, the exchange
//! (stage maxima, the rows' final maxima, sums and log-sum-exps, the slots'
//! mbarriers, Q's row factors), the work item.

use decode_attn_abi::{DecodeParams, WorkItem, MLA_KEYS, MLA_T_P_BYTES, MLA_T_Q_BYTES, MLA_T_RING_GROUPS, MLA_T_RING_ROW, MLA_T_RING_SLOTS, MLA_T_RING_SLOT_BYTES, MLA_T_ROWS};

use super::block::{block_work_at, keep_item, mask_from, row_info};
use super::mla::{bf16x2_magnitude, row_address, scale_address, scaled_f16x2, QK_DIM};
use super::mla_transposed::{finish_rows, issue_q_tile, stage_softmax, TransposedSmem};
use super::query::q_row_scale;
use crate::arch::math::pack_f16x2;
use crate::arch::wgmma::{descriptor, mla_t_pv_e4m3, mla_t_scores_e4m3};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// The 16-row tiles' layout (Q's, and the P tiles').
const TILE16: Swizzle128 = Swizzle128 { rows: MLA_T_ROWS };
/// Bytes of the ring's slots.
const RING_BYTES: u32 = MLA_T_RING_SLOTS * MLA_T_RING_SLOT_BYTES;
/// The block's warpgroups (`MLA_T_RING_GROUPS`): warpgroup `w` takes
/// stages `w, w + GROUPS, …`.
const GROUPS: u32 = MLA_T_RING_GROUPS;

/// # Safety
/// As `decode_mla_transposed`, for `Fp8PerHead` latent caches.
#[inline(always)]
pub unsafe fn decode_mla_t_ring<F: KvFormat, const PAGED: bool>(p: &DecodeParams) {
    const { assert!(F::FORMAT.holds_latent()) };
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let (own, warp_m) = (warp / 4, warp % 4);
    let (g, c) = (lane / 4, lane % 4);
    let pt = tid % 128;
    let Some((item, seq_len, _)) = block_work_at::<Standard>(p, thread::block_idx_x()) else { return };
    keep_item(p, &item, tid);

    let smem = shared::dynamic_smem_base();
    let q_tile = smem;
    let p_tile = |b: u32| q_tile + MLA_T_Q_BYTES + MLA_T_P_BYTES * b;
    let ring = p_tile(GROUPS);
    let slot_at = |s: u32| ring + MLA_T_RING_SLOT_BYTES * s;
    // A warpgroup's stage maxima: two stages' slots of 4 warps × 16 rows.
    let stage_maxima = |b: u32, slot: u32| ring + RING_BYTES + 4 * MLA_T_ROWS * (4 * (2 * b + slot));
    // The end: each warpgroup's rows' maxima, then its warps' row sums.
    let finals = |b: u32| stage_maxima(GROUPS, 0) + 4 * MLA_T_ROWS * 5 * b;
    let lses = finals(GROUPS);
    let slot_bar = |s: u32| lses + 4 * MLA_T_ROWS + 8 * s;
    let q_factors = slot_bar(MLA_T_RING_SLOTS);
    // A warpgroup's own named barrier (0 is the block's).
    let group_bar = 1 + own;

    if tid == 0 {
        for s in 0..MLA_T_RING_SLOTS {
            mbarrier::init_count(slot_bar(s), 2 * MLA_KEYS);
        }
        mbarrier::fence_init();
    }
    if tid < 256 {
        issue_q_tile(p, item.batch, q_tile, tid);
    }
    memory::cp_async_commit();
    // (The barriers' initialisation is visible to every thread.)
    thread::sync_threads();
    let n_tiles = (item.kv_end - item.kv_start).div_ceil(MLA_KEYS);
    // The ring's first stages, each by the warpgroup that reads it.
    let mut first = own;
    while first < MLA_T_RING_SLOTS && first < n_tiles {
        issue_stage::<PAGED>(p, &item, first, slot_at(first), slot_bar(first), pt);
        first += GROUPS;
    }
    memory::cp_async_wait::<0>();
    thread::sync_threads();
    if tid < 256 {
        q_to_f16_permuted(q_tile, q_factors, tid);
    }
    shared::fence_proxy_async_shared();
    thread::sync_threads();

    // The thread's rows (the scores' N columns `2c, 2c + 1, 2c + 8, 2c + 9`)
    // and keys of a stage (its M rows `g`, `g + 8`: keys `16 warp_m + 2 g`
    // and one on).
    let locals: [u32; 4] = [2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9];
    let rows = locals.map(|local| row_info(p, &item, seq_len, 0, 0, local));
    let mask_from = mask_from::<Standard>(p, &item, seq_len);
    let q_desc = descriptor(q_tile, 16, 1024);
    let scale = p.score_scale;
    // Each of the thread's rows' scores is its Q factor times too large.
    let row_inverse: [f32; 4] = locals.map(|local| shared::ld_shared_f32(q_factors + 4 * (MLA_T_ROWS + local)));
    // Element `e` of an accumulator: key `my_key(key_half(e))`, row
    // `locals[row_of(e)]`.
    let key_half = |e: usize| ((e / 2) % 2) as u32;
    let row_of = |e: usize| 2 * (e / 4) + e % 2;
    let my_key = |h: u32| 16 * warp_m + 2 * g + h;
    // The thread's places in a slot: its first key's row at its 16 bytes
    // of each 64 (the scores), its step's first key's row at its 4 bytes
    // of each 128 (the P·V).
    let score_at = MLA_T_RING_ROW * my_key(0) + 16 * c;
    let pv_at = MLA_T_RING_ROW * c + 32 * warp_m + 4 * g;

    let mut o = [[0f32; 8]; 8];
    let mut m = [f32::NEG_INFINITY; 4];
    let mut l = [0f32; 4];
    let mut t = own;
    let mut use_count = 0u32;
    // Stage `t`'s slot (`t % SLOTS`) and its barrier's phase (`t / SLOTS`).
    let mut slot = own;
    let mut parity = 0u32;
    while t < n_tiles {
        let at = slot_at(slot);
        let raw = mla_t_scores_e4m3(at + score_at, q_desc, slot_bar(slot), parity);
        let key0 = item.kv_start + t * MLA_KEYS;
        let masked = key0 + MLA_KEYS > mask_from;
        let key_scale: [f32; 2] = core::array::from_fn(|h| shared::ld_shared_f32(at + MLA_T_RING_ROW * my_key(h as u32) + QK_DIM));
        let key_exponent = key_scale.map(state::scale_exponent);
        let s: [f32; 8] = core::array::from_fn(|e| {
            let key = key0 + my_key(key_half(e));
            if masked && key >= rows[row_of(e)].limit {
                f32::NEG_INFINITY
            } else {
                raw[e] * (scale * row_inverse[row_of(e)]) * key_scale[key_half(e) as usize]
            }
        });
        // The stage's maximum of each row of its scores plus their keys'
        // exponents (the softmax base that keeps `P · scale` within f16):
        // the thread's 2 keys, its warp's 16, then the warpgroup's 64 (two
        // slots: a slot is rewritten two stages on, after the next stage's
        // barrier).
        let warp_max: [f32; 4] = core::array::from_fn(|r| {
            let e = 4 * (r / 2) + r % 2;
            warp::column_max((s[e] + key_exponent[0]).max(s[e + 2] + key_exponent[1]))
        });
        let maxima = stage_maxima(own, use_count & 1);
        if g == 0 {
            for r in 0..4 {
                shared::st_shared_f32(maxima + 4 * (MLA_T_ROWS * warp_m + locals[r]), warp_max[r]);
            }
        }
        thread::sync_named(group_bar, 128);
        let (alpha, pv) = stage_softmax(&s, &mut m, &mut l, maxima, &locals);
        // Pᵀ as the P·V's B operand, its keys in the P·V's order (the
        // previous stage's P·V, which read the tile, is done: every thread
        // waited for it before this stage's barrier).
        let tile = p_tile(own);
        for e in 0..8 {
            let col = p_column(my_key(key_half(e)));
            let at = tile + TILE16.at(locals[row_of(e)], col / 8, 0) + 2 * (col % 8);
            shared::st_shared_u16(at, pack_f16x2(pv[e] * key_scale[key_half(e) as usize], 0.0));
        }
        shared::fence_proxy_async_shared();
        for acc in o.iter_mut() {
            for (e, x) in acc.iter_mut().enumerate() {
                *x *= alpha[row_of(e)];
            }
        }
        thread::sync_named(group_bar, 128);
        mla_t_pv_e4m3(&mut o, descriptor(tile, 16, 1024), at + pv_at);
        // The slot is read (every warp's MMAs and scale loads done: the
        // barrier): the stage `SLOTS` on into it.
        thread::sync_named(group_bar, 128);
        if t + MLA_T_RING_SLOTS < n_tiles {
            issue_stage::<PAGED>(p, &item, t + MLA_T_RING_SLOTS, at, slot_bar(slot), pt);
        }
        t += GROUPS;
        use_count += 1;
        slot += GROUPS;
        if slot >= MLA_T_RING_SLOTS {
            slot -= MLA_T_RING_SLOTS;
            parity ^= 1;
        }
    }

    // The epilogue's O tiles in the ring (free: every stage was read
    // before the end's barrier; the stage maxima's first word is the
    // merge's scratch, read before it).
    finish_rows::<GROUPS>(p, &item, &o, m, l, TransposedSmem { o_tiles: ring, finals: finals(0), lses, scratch: stage_maxima(0, 0) }, |j, e| ring_dim(j as u32, warp_m, g, key_half(e)), || {
        for s in 0..MLA_T_RING_SLOTS {
            mbarrier::inval(slot_bar(s));
        }
    });
}

/// Stage `t`'s 64 keys into the ring slot at `slot`, by one warpgroup's
/// thread `pt` (0..128): threads 0..64 each a key's 576 e4m3 bytes (one
/// bulk copy, its bytes announced on `bar`), threads 64..128 each its
/// scale (a 4-byte `cp.async`, arriving on `bar` once landed). A key past
/// the item's end is zeros, its scale 0.
#[inline(always)]
unsafe fn issue_stage<const PAGED: bool>(p: &DecodeParams, item: &WorkItem, t: u32, slot: u32, bar: u32, pt: u32) {
    let k = pt % MLA_KEYS;
    let key = item.kv_start + t * MLA_KEYS + k;
    let row = slot + MLA_T_RING_ROW * k;
    let live = key < item.kv_end;
    if pt < MLA_KEYS {
        if live {
            mbarrier::arrive_expect_tx(bar, QK_DIM);
            mbarrier::bulk_copy(row, row_address::<PAGED>(p, item.batch, key), QK_DIM, bar);
        } else {
            for i in 0..QK_DIM / 16 {
                shared::st_shared_v4_u32(row + 16 * i, [0; 4]);
            }
            mbarrier::arrive(bar);
        }
    } else {
        let at = scale_address::<PAGED>(p, item.batch, if live { key } else { item.kv_start });
        memory::cp_async_4(row + QK_DIM, at, if live { 4 } else { 0 });
        mbarrier::cp_async_arrive_noinc(bar);
    }
}

/// The column of Pᵀ's tile (its K order, `mla_t_pv_e4m3`'s) that holds key
/// `key` (0..64) of a stage: k16 step `key / 16`, whose K columns `2c,
/// 2c + 1, 2c + 8, 2c + 9` are its keys `c, c + 4, c + 8, c + 12`.
#[inline(always)]
fn p_column(key: u32) -> u32 {
    let (step, r) = (key / 16, key % 16);
    let (c, x) = (r % 4, r / 4);
    16 * step + 2 * c + x + if x >= 2 { 6 } else { 0 }
}

/// The dim of V that row `g + 8 half` of M-tile `j` of warp `warp_m`'s
/// P·V holds (`mla_t_pv_e4m3`: an M-tile pair's rows are a 4-byte word's
/// bytes).
#[inline(always)]
fn ring_dim(j: u32, warp_m: u32, g: u32, half: u32) -> u32 {
    128 * (j / 2) + 32 * warp_m + 4 * g + 2 * (j % 2) + half
}

/// The Q tile's bf16 rows (landed) as f16 rows times a power of two (as
/// `mla_transposed::q_to_f16`), each 64-dim column block's values moved
/// into the scores' contraction order (`mla_t_scores_e4m3`): the pair of
/// dims at word `8 c + 2 s + h` of the block to word `8 s + c + 4 h` (`c`
/// a quarter of the block, `s` its k16 step, `h` the half). A thread a
/// row's column block (9 of 16 threads a row).
#[inline(always)]
unsafe fn q_to_f16_permuted(q_tile: u32, factors: u32, tid: u32) {
    let (row, block) = (tid / 16, tid % 16);
    let live = block < QK_DIM / 64;
    let at = |ch: u32| q_tile + TILE16.at(row, 8 * block + ch, 0);
    let words: [[u32; 4]; 8] = core::array::from_fn(|ch| if live { shared::ld_shared_v4_u32(at(ch as u32)) } else { [0; 4] });
    let mut largest = 0;
    for w in words.iter() {
        for &x in w.iter() {
            largest = largest.max(bf16x2_magnitude(x));
        }
    }
    // (The 16 lanes' maximum: the octet's, then the other octet's.)
    let amax = warp::octet_max(f32::from_bits(largest));
    let amax = amax.max(warp::shfl_xor_f32(amax, 8));
    let (factor, inverse) = q_row_scale(amax);
    if live {
        let word = |i: usize| words[i / 4][i % 4];
        let out: [u32; 32] = core::array::from_fn(|lw| {
            let (s, quarter, half) = (lw / 8, lw % 4, (lw % 8) / 4);
            scaled_f16x2(word(8 * quarter + 2 * s + half), factor)
        });
        for ch in 0..8 {
            shared::st_shared_v4_u32(at(ch as u32), [out[4 * ch], out[4 * ch + 1], out[4 * ch + 2], out[4 * ch + 3]]);
        }
    }
    if block == 0 {
        shared::st_shared_f32(factors + 4 * row, factor);
        shared::st_shared_f32(factors + 4 * (MLA_T_ROWS + row), inverse);
    }
}
