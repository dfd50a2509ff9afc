//! The transposed MLA form (`decode::mla_transposed`, at most 16 query
//! rows) for the fp8 latent caches (`Fp8PerHead`, a scale per token, and
//! `Fp8DsMla`, DeepSeek V3.2's rows): the stages' e4m3 rows are not
//! converted into a 16-bit stage buffer but read from a ring of raw slots
//! straight into `wgmma`'s A registers and converted there (f16, exactly),
//! for the scores and for the P·V alike (docs/perf.md, "MLA fp8 at 16
//! heads in registers"; design/mla-fp8-registers.md).
//!
//! - **The ring** (`decode_attn_abi::mla_t_ring`): `SLOTS` slots of 64
//!   keys, the rows back to back as the cache holds them (576 e4m3 bytes
//!   per token, its scales in an array after them; fp8-ds-mla's 656-byte
//!   rows, scales inside); stage `t` in slot `t % SLOTS`, complete on the
//!   slot's mbarrier (128 arrivals). Each run of keys back to back in the
//!   cache (a stage's 64 where the cache's rows are and a page holds the
//!   stage) is one bulk copy, and so are its scales: one copy a key was
//!   16-25 % slower (docs/perf.md, "MLA fp8 rows back to back in the
//!   ring"). A stage is waited for only once issued into its slot
//!   (`issued`; docs/perf.md, "The ring's issued stages"). Keys past the
//!   item's end are zero-filled (an e4m3 byte may be a NaN, and 0 · NaN is
//!   one). The warpgroup that finishes a stage's P·V refills its slot with
//!   the stage `SLOTS` on (another warpgroup's).
//! - **Warpgroups** (the ring's `groups`: three), warpgroup `w` taking
//!   stages `w, w + groups, …`, each with its own softmax state: a
//!   warpgroup's stage is a chain of MMA groups whose latency two chains
//!   an SM did not hide for fp8 per token (docs/perf.md, "MLA fp8 at 16
//!   heads in registers"); at a 168-register cap, three share the
//!   register file. (The plan refuses a build whose kernel allows fewer
//!   threads.)
//! - **Scores** (`mla_t_scores_e4m3`): the keys along M, the thread's keys
//!   `16 w + key_of(g, h)` (a quarter-warp's two keys' 16-byte loads fall
//!   in 32 banks at the ring's row pitch); the contraction runs in the
//!   order the raw bytes give each thread (`q_to_f16_permuted` lays Q's tile out in
//!   it), one `F2FP` a pair.
//! - **P·V** (`mla_t_pv_e4m3`): Vᵀ as A from registers, a thread's 4 keys
//!   of a k16 step `c, c + 4, c + 8, c + 12` (a `spread` ring's `2c, 2c +
//!   1, 2c + 8, 2c + 9`; Pᵀ's columns written in that order, `p_column`)
//!   and its M rows adjacent bytes (O's dims come out permuted,
//!   `ring_dim`): one 4-byte load a key, a `PRMT` and an `F2FP` a pair.
//! - Each key's scale multiplies its scores and P and its exponent is in
//!   the rows' softmax base, Q's rows are f16 times a power of two, as the
//!   64-row kernel's `f16_mma`; the softmax's end, the warpgroups' merge and
//!   the epilogue are `decode::mla_transposed`'s.
//! - **fp8-ds-mla**: a key has a scale a group of 128 latent dims. The
//!   scores keep each group in an accumulator of its own and sum them times
//!   their keys' scales, the RoPE dims bf16 MMAs against Q's RoPE block kept
//!   bf16 (`mla_t_scores_ds`); the P·V's M-tile pair `i` is group `i`'s
//!   dims, so it reads P tile `i`, `P · s_i` (`mla_t_pv_e4m3`'s `GROUPED`).
//!   The softmax base takes the exponent of the key's largest scale less
//!   14, so that key's largest `P · s` is in [2^14, 2^15): a group's P
//!   tile entries reach f16's subnormals only 2^28 below (times P), and
//!   keep the bound on the group's own dims to 2^24 below (tested:
//!   `tests/gpu/mla.rs`, `spread_groups`; DeepSeek's groups lie within a
//!   few powers of two). Each latent value is `e4m3 · s` in f32, the format's
//!   `bf16(e4m3 · s)` exactly for power-of-two scales (DeepSeek's).
//!
//! - More rows (`Form::TransposedRows`: 16 heads × q_len 2) run the ring
//!   at 32 rows a block (`decode::mla_t_ring32`).
//!
//! The shared memory (`decode_attn_abi::mla_transposed_smem_bytes`, the
//! ring's layout): the Q tile, the three P tiles, the slots, the exchange
//! (stage maxima, the rows' final maxima, sums and log-sum-exps, the slots'
//! mbarriers, Q's row factors), the work item.

use decode_attn_abi::{mla_t_ring, DecodeParams, MlaRing, WorkItem, DS_MLA_LATENT, DS_MLA_ROPE_AT, MLA_KEYS, MLA_T_P_BYTES, MLA_T_Q_BYTES, MLA_T_ROWS};

use super::block::{block_work_at, keep_item, mask_from, row_info};
use super::mla::{bf16x2_magnitude, row_address, scale_address, scaled_f16x2, QK_DIM};
use super::mla_transposed::{finish_rows, issue_q_tile, stage_softmax, TransposedSmem};
use super::query::q_row_scale;
use crate::arch::math::{pack_bf16x2, pack_f16x2, unpack_bf16x2};
use crate::arch::wgmma::{descriptor, mla_t_pv_e4m3, mla_t_scores_ds, mla_t_scores_e4m3};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// The 16-row tiles' layout (Q's, and the P tiles').
const TILE16: Swizzle128 = Swizzle128 { rows: MLA_T_ROWS };

/// The ring of `format` (an fp8 latent format; `decode::decode_mla_t`
/// sends no other here, whose body is only compiled, as per token's).
const fn ring_of(format: decode_attn_abi::KvFormat) -> MlaRing {
    match mla_t_ring(format) {
        Some(ring) => ring,
        None => ring_of(decode_attn_abi::KvFormat::Fp8PerHead),
    }
}

/// Rows 0.. of an item, a block an item.
///
/// # Safety
/// As `decode_mla_transposed`, for the fp8 latent caches, with
/// `mla_transposed_threads` threads and `mla_transposed_smem_bytes` of
/// shared memory; at most 16 query rows.
#[inline(always)]
pub unsafe fn decode_mla_t_ring<F: KvFormat, const PAGED: bool>(p: &DecodeParams) {
    const { assert!(F::FORMAT.holds_latent()) };
    let ring = const { ring_of(F::FORMAT) };
    let ds = const { matches!(F::FORMAT, decode_attn_abi::KvFormat::Fp8DsMla) };
    let (row_bytes, slots) = (ring.row, ring.slots);
    // Warpgroup `w` takes stages `w, w + groups, …`. (A const of its own:
    // read off the local `ring`, one build's per-token kernel took 186
    // registers at ptxas, not 164.)
    let groups = const { ring_of(F::FORMAT).groups };
    let spread = const { ring_of(F::FORMAT).spread };
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
    // Warpgroup `b`'s P tiles (`ring.p_tiles` each, one a scale group).
    let p_tile = |b: u32| q_tile + MLA_T_Q_BYTES + MLA_T_P_BYTES * ring.p_tiles * b;
    let slots_at = p_tile(groups);
    let slot_at = |s: u32| slots_at + ring.slot_bytes() * s;
    // A warpgroup's stage maxima: two stages' slots of 4 warps × 16 rows.
    let stage_maxima = |b: u32, slot: u32| slot_at(slots) + 4 * MLA_T_ROWS * (4 * (2 * b + slot));
    // The end: each warpgroup's rows' maxima, then its warps' row sums.
    let finals = |b: u32| stage_maxima(groups, 0) + 4 * MLA_T_ROWS * 5 * b;
    let lses = finals(groups);
    let slot_bar = |s: u32| lses + 4 * MLA_T_ROWS + 8 * s;
    let q_factors = slot_bar(slots);
    // The number of the stage last issued into each slot.
    let issued = |s: u32| q_factors + 8 * MLA_T_ROWS + 4 * s;
    // A warpgroup's own named barrier (0 is the block's).
    let group_bar = 1 + own;

    if tid == 0 {
        for s in 0..slots {
            mbarrier::init_count(slot_bar(s), 2 * MLA_KEYS);
            shared::st_shared_u32(issued(s), s);
        }
        mbarrier::fence_init();
    }
    if tid < 256 {
        issue_q_tile::<MLA_T_ROWS>(p, item.batch, 0, q_tile, tid);
    }
    memory::cp_async_commit();
    // (The barriers' initialisation is visible to every thread.)
    thread::sync_threads();
    let n_tiles = (item.kv_end - item.kv_start).div_ceil(MLA_KEYS);
    // The ring's first stages, each by the warpgroup that reads it.
    let mut first = own;
    while first < slots && first < n_tiles {
        issue_stage::<PAGED>(p, &item, ring, first, slot_at(first), slot_bar(first), pt);
        first += groups;
    }
    memory::cp_async_wait::<0>();
    thread::sync_threads();
    q_to_f16_permuted(q_tile, q_factors, stage_maxima(0, 0), tid, ds);
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
    let my_key = |h: u32| 16 * warp_m + key_of(g, h, spread);
    // The thread's places in a slot: its first key's row at its 16 bytes
    // of each 64 (the scores), its step's first key's row at its 4 bytes
    // of each 128 (the P·V).
    let score_at = row_bytes * my_key(0) + 16 * c;
    let pv_at = row_bytes * if spread { 2 * c } else { c } + 32 * warp_m + 4 * g;
    // fp8-ds-mla: the first key's scales and its RoPE bytes (the thread's
    // 16 dims, 32 bytes).
    let scales_at = ring.scales + ring.scale_stride * my_key(0);
    let rope_at = row_bytes * my_key(0) + DS_MLA_ROPE_AT + 32 * c;

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
        // Stage `t` issued into its slot, before its barrier is waited for:
        // the barrier tells its phases apart by parity alone, and this
        // warpgroup may reach stage `t` before stage `t - SLOTS` (another
        // warpgroup's) has landed, when waiting on the parity of `t` would
        // pass at once on the phase before (docs/perf.md, "The ring's
        // issued stages").
        while shared::ld_acquire_u32(issued(slot)) != t {}
        let key0 = item.kv_start + t * MLA_KEYS;
        let masked = key0 + MLA_KEYS > mask_from;
        // The thread's keys' scales: per token one, fp8-ds-mla four (the
        // scores are summed over the groups times theirs already).
        let (raw, group_scale, key_scale) = if ds {
            let raw = mla_t_scores_ds(at + score_at, at + scales_at, at + rope_at, q_desc, slot_bar(slot), parity);
            let scales: [[f32; 4]; 2] = core::array::from_fn(|h| shared::ld_shared_v4_f32(at + ring.scales + ring.scale_stride * my_key(h as u32)));
            (raw, scales, scales.map(|x| x[0].max(x[1]).max(x[2].max(x[3]))))
        } else {
            let raw = mla_t_scores_e4m3(at + score_at, q_desc, slot_bar(slot), parity);
            let key_scale: [f32; 2] = core::array::from_fn(|h| shared::ld_shared_f32(at + ring.scales + ring.scale_stride * my_key(h as u32)));
            (raw, key_scale.map(|x| [x; 4]), key_scale)
        };
        let key_exponent = key_scale.map(state::scale_exponent);
        let s: [f32; 8] = core::array::from_fn(|e| {
            let key = key0 + my_key(key_half(e));
            if masked && key >= rows[row_of(e)].limit {
                f32::NEG_INFINITY
            } else if ds {
                raw[e] * (scale * row_inverse[row_of(e)])
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
        let (alpha, pv) = stage_softmax::<4, 8, MLA_T_ROWS>(&s, &mut m, &mut l, maxima, &locals);
        // Pᵀ as the P·V's B operand (times the keys' scales: a tile a
        // group for fp8-ds-mla), its keys in the P·V's order (the previous
        // stage's P·V, which read the tiles, is done: every thread waited
        // for it before this stage's barrier).
        let tile = p_tile(own);
        for e in 0..8 {
            let col = p_column(my_key(key_half(e)), spread);
            let at = tile + TILE16.at(locals[row_of(e)], col / 8, 0) + 2 * (col % 8);
            for i in 0..ring.p_tiles {
                shared::st_shared_u16(at + MLA_T_P_BYTES * i, pack_f16x2(pv[e] * group_scale[key_half(e) as usize][i as usize], 0.0));
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
            mla_t_pv_e4m3::<{ ring_of(decode_attn_abi::KvFormat::Fp8DsMla).row }, true, { ring_of(decode_attn_abi::KvFormat::Fp8DsMla).spread }>(&mut o, descriptor(tile, 16, 1024), at + pv_at);
        } else {
            mla_t_pv_e4m3::<{ ring_of(decode_attn_abi::KvFormat::Fp8PerHead).row }, false, { ring_of(decode_attn_abi::KvFormat::Fp8PerHead).spread }>(&mut o, descriptor(tile, 16, 1024), at + pv_at);
        }
        // The slot is read (every warp's MMAs and scale loads done: the
        // barrier): the stage `SLOTS` on into it.
        thread::sync_named(group_bar, 128);
        if t + slots < n_tiles {
            // (Published before the copies: the slot's phase of stage `t`
            // is complete, so the next phase is the new stage's, and this
            // thread has no load the release must wait for.)
            if pt == 0 {
                shared::st_release_u32(issued(slot), t + slots);
            }
            issue_stage::<PAGED>(p, &item, ring, t + slots, at, slot_bar(slot), pt);
        }
        t += groups;
        use_count += 1;
        slot += groups;
        if slot >= slots {
            slot -= slots;
            parity ^= 1;
        }
    }

    // The epilogue's O tiles in the ring (free: every stage was read
    // before the end's barrier; the stage maxima's first word is the
    // merge's scratch, read before it).
    let smem = TransposedSmem { o_tiles: slots_at, finals: finals(0), lses, scratch: stage_maxima(0, 0) };
    let dim = |j: usize, e: usize| ring_dim(j as u32, warp_m, g, key_half(e));
    let inval = || {
        for s in 0..slots {
            mbarrier::inval(slot_bar(s));
        }
    };
    if groups == 3 {
        finish_rows::<3, true, false, 4, 8, MLA_T_ROWS>(p, &item, &o, m, l, smem, dim, inval);
    } else {
        finish_rows::<2, true, false, 4, 8, MLA_T_ROWS>(p, &item, &o, m, l, smem, dim, inval);
    }
}

/// Stage `t`'s 64 keys into the ring slot at `slot`, by one warpgroup's
/// thread `pt` (0..128), each copy announced on `bar` (a bulk copy's
/// bytes, a `cp.async`'s arrival once landed): threads 0..64 the keys'
/// rows (per token 576 e4m3 bytes, fp8-ds-mla 656), threads
/// 64..128 per token their scales (fp8-ds-mla's are in the rows: an
/// arrival). Keys whose rows (scales) lie back to back in the cache come
/// in one bulk copy a run, by the thread of the run's first key, the
/// others arriving; a run ends at the stage's, the item's or a page's
/// end, and where the cache's rows are not back to back every key is a
/// run. A run of scales not 16-byte aligned in address or length (a
/// bulk copy's rule) is a 4-byte `cp.async` a key. A key past the item's
/// end is zeros (its scales 0).
#[inline(always)]
pub(super) unsafe fn issue_stage<const PAGED: bool>(p: &DecodeParams, item: &WorkItem, ring: MlaRing, t: u32, slot: u32, bar: u32, pt: u32) {
    let k = pt % MLA_KEYS;
    let first = item.kv_start + t * MLA_KEYS;
    let key = first + k;
    let live = key < item.kv_end;
    let half = pt / MLA_KEYS;
    // The run holding `key` where a stride of `bytes` is back to back.
    let run = |stride: u64, bytes: u32| -> (u32, u32) {
        if stride != bytes as u64 {
            return (key, key + 1);
        }
        let (mut start, mut end) = (first, (first + MLA_KEYS).min(item.kv_end));
        if PAGED {
            let page = 1u32 << p.page_shift;
            start = start.max(key - key % page);
            end = end.min(key - key % page + page);
        }
        (start, end)
    };
    // (Scales inside the rows, fp8-ds-mla's: nothing of their own to copy.)
    if ring.scale_stride == ring.row && half == 1 {
        mbarrier::arrive(bar);
    } else if !live {
        if half == 0 {
            for i in 0..ring.row / 16 {
                shared::st_shared_v4_u32(slot + ring.row * k + 16 * i, [0; 4]);
            }
        } else {
            shared::st_shared_u32(slot + ring.scales + 4 * k, 0);
        }
        mbarrier::arrive(bar);
    } else if half == 0 {
        let (start, end) = run(p.k_stride_token, ring.row);
        if key == start {
            let bytes = ring.row * (end - start);
            mbarrier::arrive_expect_tx(bar, bytes);
            mbarrier::bulk_copy(slot + ring.row * k, row_address::<PAGED>(p, item.batch, key), bytes, bar);
        } else {
            mbarrier::arrive(bar);
        }
    } else {
        // (The run's place in the slot, `4 (start - first)`, is 16-byte
        // aligned where its length is a multiple of 4 keys: an MLA item
        // starts at a stage boundary (the shape refuses windows and key
        // ranges at head_dim 576; chunks and balanced pieces are whole
        // stages), and a run starts there or at a page's first key, a
        // multiple of the page's power-of-two size; runs of pages of 1 or
        // 2 keys take the `cp.async`s.)
        let (start, end) = run(p.scale_stride_token, 4);
        let from = scale_address::<PAGED>(p, item.batch, start);
        if from % 16 == 0 && (end - start) % 4 == 0 {
            if key == start {
                let bytes = 4 * (end - start);
                mbarrier::arrive_expect_tx(bar, bytes);
                mbarrier::bulk_copy(slot + ring.scales + 4 * k, from, bytes, bar);
            } else {
                mbarrier::arrive(bar);
            }
        } else {
            memory::cp_async_4(slot + ring.scales + 4 * k, scale_address::<PAGED>(p, item.batch, key), 4);
            mbarrier::cp_async_arrive_noinc(bar);
        }
    }
}

/// The column of Pᵀ's tile (its K order, `mla_t_pv_e4m3`'s) that holds key
/// `key` (0..64) of a stage: k16 step `key / 16`, whose K columns `2c,
/// 2c + 1, 2c + 8, 2c + 9` are its keys `c, c + 4, c + 8, c + 12`, or in
/// a `spread` ring the keys `2c, 2c + 1, 2c + 8, 2c + 9` themselves.
#[inline(always)]
pub(super) fn p_column(key: u32, spread: bool) -> u32 {
    if spread {
        return key;
    }
    let (step, r) = (key / 16, key % 16);
    let (c, x) = (r % 4, r / 4);
    16 * step + 2 * c + x + if x >= 2 { 6 } else { 0 }
}

/// The key (of the warp's 16) that a thread of quad `g` holds in its
/// accumulators' rows `g + 8 h`: `g + 8 h` (576 ≡ 64 mod 128: a
/// quarter-warp's two keys 64 bytes apart in the banks), in a `spread`
/// ring (656 ≡ 16) `g / 2 + 4 (g % 2) + 8 h`, so that quads `2j`, `2j + 1`
/// hold keys four apart, again 64 bytes apart.
#[inline(always)]
pub(super) fn key_of(g: u32, h: u32, spread: bool) -> u32 {
    8 * h + if spread { g / 2 + 4 * (g % 2) } else { g }
}

/// The dim of V that row `g + 8 half` of M-tile `j` of warp `warp_m`'s
/// P·V holds (`mla_t_pv_e4m3`: an M-tile pair's rows are a 4-byte word's
/// bytes).
#[inline(always)]
pub(super) fn ring_dim(j: u32, warp_m: u32, g: u32, half: u32) -> u32 {
    128 * (j / 2) + 32 * warp_m + 4 * g + 2 * (j % 2) + half
}

/// The Q tile's bf16 rows (landed) as f16 rows times a power of two (as
/// `mla_transposed::q_to_f16`), each 64-dim column block's values moved
/// into the scores' contraction order (`mla_t_scores_e4m3`): the pair of
/// dims at word `8 c + 2 s + h` of the block to word `8 s + c + 4 h` (`c`
/// a quarter of the block, `s` its k16 step, `h` the half). A thread a
/// row's column block, a warp's lanes the 16 rows of two blocks (warps 0
/// to 4), so that each 16-byte load and store of a warp falls in 32 banks
/// (a row's blocks in a warp's lanes were 9-way conflicts: the
/// conversion took 1.6 µs a block; docs/perf.md, "MLA blocks' start and
/// end"); the rows' maxima meet in `scratch` (5 warps × 16 rows of f32).
/// Every thread of the block calls it (a block barrier). fp8-ds-mla
/// (`ds`): the RoPE block (block 8) stays bf16, times the same power of
/// two (exactly), for `mla_t_scores_ds`'s bf16 MMAs against the keys'
/// bf16 RoPE values.
#[inline(always)]
unsafe fn q_to_f16_permuted(q_tile: u32, factors: u32, scratch: u32, tid: u32, ds: bool) {
    const BLOCKS: u32 = QK_DIM / 64;
    const WARPS: u32 = BLOCKS.div_ceil(2);
    let (warp, lane) = (tid / 32, tid % 32);
    let (row, block) = (lane % MLA_T_ROWS, 2 * warp + lane / MLA_T_ROWS);
    let live = warp < WARPS && block < BLOCKS;
    let at = |ch: u32| q_tile + TILE16.at(row, 8 * block + ch, 0);
    let words: [[u32; 4]; 8] = core::array::from_fn(|ch| if live { shared::ld_shared_v4_u32(at(ch as u32)) } else { [0; 4] });
    let mut largest = 0;
    for w in words.iter() {
        for &x in w.iter() {
            largest = largest.max(bf16x2_magnitude(x));
        }
    }
    // (The warp's two blocks of a row, then the warps'.)
    let pair = f32::from_bits(largest);
    let pair = pair.max(warp::shfl_xor_f32(pair, MLA_T_ROWS));
    if warp < WARPS && lane < MLA_T_ROWS {
        shared::st_shared_f32(scratch + 4 * (MLA_T_ROWS * warp + row), pair);
    }
    thread::sync_threads();
    if !live {
        return;
    }
    let mut amax = 0f32;
    for w in 0..WARPS {
        amax = amax.max(shared::ld_shared_f32(scratch + 4 * (MLA_T_ROWS * w + row)));
    }
    let (factor, inverse) = q_row_scale(amax);
    let word = |i: usize| words[i / 4][i % 4];
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
        shared::st_shared_v4_u32(at(ch as u32), [out[4 * ch], out[4 * ch + 1], out[4 * ch + 2], out[4 * ch + 3]]);
    }
    if block == 0 {
        shared::st_shared_f32(factors + 4 * row, factor);
        shared::st_shared_f32(factors + 4 * (MLA_T_ROWS + row), inverse);
    }
}
