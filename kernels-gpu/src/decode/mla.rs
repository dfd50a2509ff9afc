//! The MLA family (`Family::Mla`): multi-head latent attention (DeepSeek V3
//! / R1, Kimi K2) in its absorbed form, MQA over one latent head whose
//! cached rows hold 576 values — Q·K over all of them, V the first 512.
//!
//! A block is 64 query rows (tokens × heads, packed as every family packs
//! them) against one work item's keys, in 64-key stages, on two
//! warpgroups. The O accumulator (64 × 512 f32) fills half an SM's
//! registers, so it is split by columns: warpgroup 0 holds `O_L` (columns
//! 0..256), warpgroup 1 `O_R`. The stages come in pairs, stage `2i` in
//! buffer 0 and `2i + 1` in buffer 1, and the pair is scheduled "seesaw"
//! (FlashMLA's name; docs/perf.md, "MLA kernel"), so that one warpgroup's
//! softmax runs while the other's MMAs do:
//!
//! 1. [0] `S0 = Q·K0ᵀ`;                  2. [1] `S1 = Q·K1ᵀ`;
//! 3. [0] `m0 = max(m, rowmax S0)`, `scale0 = 2^(m − m0)`, published;
//! 4. [0] `P0 = 2^(S0 − m0)`;            5. [0] `O_L = O_L·scale0 + P0·V0_L`;
//! 6. [1] `m1 = max(m0, rowmax S1)`, `scale1 = 2^(m0 − m1)`, published;
//! 7. [1] `P1 = 2^(S1 − m1)`, to shared memory; 8. [1] `O_R = O_R·scale0·scale1 + P1·V1_R`;
//! 9. [0] `P0 ← P0·scale1` to shared memory;
//! 10. [1] `O_R += P0·V0_R`;             11. [0] `O_L = O_L·scale1 + P1·V1_L`.
//!
//! Each warpgroup's own P is an MMA operand from registers, the other's
//! from shared memory; the row sums follow the same factors. Hand-overs
//! are named barriers (a producer's `bar.arrive`, a consumer's `bar.sync`).
//!
//! Loads: 16-byte `cp.async` copies into the 128-byte swizzled layout,
//! each of a stage's 9 column blocks (64 dims) completing an mbarrier of
//! its own (`cp.async.mbarrier.arrive`): the score MMAs of a column block
//! start as soon as it landed. A bf16 stage's blocks are refilled as soon
//! as their last reader is done: buffer 0's left half (V0_L) and RoPE
//! block by warpgroup 0 after step 9, its right half by warpgroup 1 after
//! step 10; buffer 1's right half and RoPE block by warpgroup 1 after step
//! 8, its left half by warpgroup 0 after step 11. Each warpgroup's scores
//! wait first for the blocks refilled first (`ScoreOrder`). An fp8
//! stage's e4m3 bytes are copied at those first points (`issue_raw`) into
//! the part of the buffer freed there, and converted into bf16 rows in
//! place by the buffer's last reader (warpgroup 1 after step 10,
//! warpgroup 0 after step 11: `convert_raw`); fp8 per token's stages are
//! its e4m3 values as f16, its MMAs f16 (`f16_mma`). Q's first 512 dims
//! are a tile in shared memory; its last 64 (RoPE) are each warpgroup's
//! registers, and their column block of the tile holds P1.
//!
//! The shared memory (`decode_attn_abi::mla_smem_bytes`): the Q tile, the
//! two buffers, the P0 tile, the rows' maxima and factors, the rows' sums,
//! the buffers' barriers, (fp8) the keys' scales (and exponents) and the
//! e4m3 bytes' barriers, the work item.
//!
//! A split sequence's chunks write fp32 partials for the merge kernel, or
//! (`CLUSTER`, `Merge::Cluster`) are one thread-block cluster a row chunk
//! and merge their rows through distributed shared memory at the end,
//! over the free buffers (`decode::cluster`; docs/perf.md, "MLA cluster
//! merge").

use decode_attn_abi::{decode_block_item, decode_block_kv_head, div_rem, DecodeParams, WorkItem, DIRECT_OUTPUT, DS_MLA_GROUP, DS_MLA_LATENT, MLA_KEYS, MLA_P_BYTES, MLA_ROWS, MLA_TILE_BYTES};

use super::cluster::{merge_in_cluster_wide, BlockRows};
use super::block::{block_work_at, keep_item, keep_seq_len, kept_seq_len, mask_from, qo_row_addr, row_info, rows_here, token_head};
use super::query::q_row_scale;
use crate::arch::math::{ex2, f16x4_from_e4m3x4, fma, pack_bf16x2, pack_f16x2, unpack_bf16x2};
use crate::arch::wgmma::{descriptor, mla_pv, mla_pv_regs, mla_scores64, ScoreOrder};
use crate::arch::{mbarrier, memory, shared, thread, warp};
use crate::format::{KvFormat, Swizzle128, TileLayout};
use crate::state;
use crate::variant::Standard;

/// Values of a latent row (Q·K's head dim) and of V (O's).
pub(super) const QK_DIM: u32 = 576;
pub(super) const V_DIM: u32 = 512;
/// Column blocks (64 dims, 128 bytes a row) of a latent row; the last is
/// the RoPE part.
pub(super) const BLOCKS: u32 = QK_DIM / 64;
/// Bytes of one column block of a 64-row tile (a stage's: 64 keys).
pub(super) const BLOCK_BYTES: u32 = MLA_ROWS * 128;
/// The 64-row tiles' layout (Q's and the stages').
pub(super) const TILE: Swizzle128 = Swizzle128 { rows: MLA_ROWS };
/// f32 words a row of the cluster merge's rows in shared memory: V's 512
/// and 4 more, so that the 8 rows a warp stores at once start 4 banks
/// apart (16-byte aligned for `merge_in_cluster`'s loads).
const CLUSTER_PITCH: u32 = V_DIM + 4;
/// Where an `Fp8DsMla` row's four scales and its RoPE values start.
const DS_SCALES_AT: u64 = decode_attn_abi::DS_MLA_SCALES_AT as u64;
const DS_ROPE_AT: u64 = decode_attn_abi::DS_MLA_ROPE_AT as u64;

/// Named barriers of the hand-overs (0 is the block's).
const SCALE0_READY: u32 = 1;
const SCALE1_READY: u32 = 2;
const P0_READY: u32 = 3;
const P1_READY: u32 = 4;
/// A warpgroup's own barrier in `convert_raw` (this and the next).
const CONVERT: u32 = 5;

/// # Safety
/// Launched by the host with the planner's grid (x: work items, z: row
/// chunks of 64), 256 threads and `mla_smem_bytes` of shared memory, on
/// buffers it validated.
#[inline(always)]
pub unsafe fn decode_mla<F: KvFormat, const PAGED: bool, const CLUSTER: bool>(p: &DecodeParams) {
    const { assert!(F::FORMAT.holds_latent()) };
    let tid = thread::thread_idx_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let (wg, warp_m) = (warp / 4, warp % 4);
    let (g, c2) = (lane / 4, (lane % 4) * 2);

    // Grid x: a work item's row chunks are consecutive blocks, which read
    // the same keys at about the same time (one from HBM, the others from
    // L2; with the chunks along z, 128 heads read every key from HBM twice:
    // docs/perf.md, "MLA kernel").
    // With a cluster merge (`CLUSTER`) a cluster's blocks are one row
    // chunk's chunks of a sequence instead, the row chunk the next index
    // (`decode_attn_abi::decode_block_item`, the row chunks as kv heads).
    let chunks = (p.group * p.q_len).div_ceil(MLA_ROWS);
    let (x, chunk) = if CLUSTER {
        let bx = thread::block_idx_x();
        (decode_block_item(bx, chunks, p.cluster_log2), decode_block_kv_head(bx, chunks, p.cluster_log2))
    } else {
        div_rem(thread::block_idx_x(), chunks)
    };
    let Some((item, seq_len, _)) = block_work_at::<Standard>(p, x) else { return };
    keep_item(p, &item, tid);
    // (The cluster merge's count of live chunks reads it after the loop:
    // held there, it spilled fp8 per token's kernel.)
    keep_seq_len::<CLUSTER>(p, seq_len, tid);
    let row0 = chunk * MLA_ROWS;

    let smem = shared::dynamic_smem_base();
    let q_tile = smem;
    // Q's RoPE column block: its values are in registers, its room P1's.
    let p1_tile = q_tile + (BLOCKS - 1) * BLOCK_BYTES;
    let buffer = |b: u32| smem + MLA_TILE_BYTES * (1 + b);
    let p0_tile = smem + 3 * MLA_TILE_BYTES;
    let maxima = p0_tile + MLA_P_BYTES;
    let scales0 = maxima + 4 * MLA_ROWS;
    let scales1 = scales0 + 4 * MLA_ROWS;
    let sums = scales1 + 4 * MLA_ROWS;
    let bars = sums + 2 * 4 * MLA_ROWS;
    let full = |b: u32| bars + 8 * BLOCKS * b;
    // An fp8 stage's keys' scales and their exponents (`key_entry`), a
    // buffer's each.
    let key_table = |b: u32| bars + 8 * BLOCKS * 2 + 8 * MLA_KEYS * b;
    // A buffer's mbarrier of an fp8 stage's e4m3 bytes (`issue_raw`).
    let raw_bar = |b: u32| bars + 8 * BLOCKS * 2 + 8 * MLA_KEYS * 2 + 8 * b;

    if tid == 0 {
        for b in 0..2 {
            for c in 0..BLOCKS {
                mbarrier::init_count(full(b) + 8 * c, 128);
            }
            mbarrier::init_count(raw_bar(b), 128);
        }
        mbarrier::fence_init();
    }
    // Q's first 512 dims (rows past the block's last zero-filled).
    {
        let (sub, lane8) = (tid / 8, tid % 8);
        for pass in 0..2 {
            let local = pass * 32 + sub;
            let src = q_row(p, item.batch, row0 + local);
            for j in 0..BLOCKS - 1 {
                let c = lane8 + 8 * j;
                memory::cp_async_16(q_tile + TILE.at(local, c, 0), src.unwrap_or(p.q) + 16 * c as u64, if src.is_some() { 16 } else { 0 });
            }
        }
        memory::cp_async_commit();
    }
    // `Fp8PerHead`'s MMAs are f16 (`f16_mma`): each Q row scaled by its
    // power of two into f16's range (`q_rows_to_f16`), its RoPE dims' part
    // of the row's magnitude loaded now, beside the tile's copies.
    let f16 = f16_mma::<F>();
    let q_rope = if f16 { q_rope_words(p, item.batch, row0, tid) } else { [[0; 4]; 2] };
    // (f16: the rows' factors and scales for their MMA threads in the P0
    // tile, free until the loop's first P0.)
    let row_factors = p0_tile;
    // (The barriers' initialisation is visible to every thread.)
    thread::sync_threads();
    let n_tiles = (item.kv_end - item.kv_start).div_ceil(MLA_KEYS);
    // The first two stages: warpgroup `wg` loads buffer `1 − wg`'s whole;
    // in the loop, the module docs' "Loads" say who refills what.
    let own = wg;
    let pt = tid % 128;
    // (A macro, not a closure: a closure this large is not inlined, and
    // its call passes the item through local memory.)
    macro_rules! load {
        ($t:expr) => {{
            let t: u32 = $t;
            if t < n_tiles {
                issue_blocks::<0, BLOCKS>(buffer(t % 2), full(t % 2), pt, &stage_sources::<PAGED>(p, &item, t, pt));
            }
        }};
    }
    // An fp8 stage's e4m3 bytes (and scales) into the part of its buffer
    // free first (`issue_raw`), and later their conversion in place
    // (`convert_raw`) by the buffer's last reader.
    // (The buffer `$b` of stage `$t` a const: each buffer's layout is.)
    macro_rules! issue_fp8 {
        ($t:expr, $b:literal) => {{
            let t: u32 = $t;
            if t < n_tiles {
                issue_raw::<F, PAGED, $b>(p, &item, t, buffer($b), raw_bar($b), key_table($b), full($b), pt);
            }
        }};
    }
    macro_rules! convert_fp8 {
        ($t:expr, $b:literal) => {{
            let t: u32 = $t;
            if t < n_tiles {
                convert_raw::<F, PAGED, $b>(p, &item, t, buffer($b), raw_bar($b), key_table($b), full($b), CONVERT + own, pt);
            }
        }};
    }
    // Column blocks `from..to` of a bf16 stage, for each range given (the
    // stage's sources found once).
    macro_rules! load_blocks {
        ($t:expr, $(($from:expr, $to:expr)),+) => {{
            let t: u32 = $t;
            if t < n_tiles {
                let src = stage_sources::<PAGED>(p, &item, t, pt);
                $(issue_blocks::<{ $from }, { $to }>(buffer(t % 2), full(t % 2), pt, &src);)+
            }
        }};
    }
    // bf16 stages are refilled by halves, each as soon as its last reader
    // is done (`load_blocks`); an fp8 stage's bytes at the first of those
    // points, its bf16 rows by its last reader (`issue_fp8`, `convert_fp8`).
    let halves = F::FORMAT.bits() == 16;
    if halves {
        load!(1 - own);
    } else {
        // Warpgroup `wg` loads stage `1 − wg`; f16, the Q tile's
        // conversion runs while its bytes land.
        if own == 0 {
            issue_fp8!(1, 1);
        } else {
            issue_fp8!(0, 0);
        }
        if f16 {
            // (The tile's copies alone are committed: the stage's are
            // the raw barrier's.)
            memory::cp_async_wait::<0>();
            q_rows_to_f16(q_rope, q_tile, row_factors, tid);
            shared::fence_proxy_async_shared();
        }
        if own == 0 {
            convert_fp8!(1, 1);
        } else {
            convert_fp8!(0, 0);
        }
    }
    let locals = [warp_m * 16 + g, warp_m * 16 + g + 8];
    let mut rq = rope_fragments(p, item.batch, row0, locals, c2);
    memory::cp_async_wait::<0>();
    thread::sync_threads();
    // (f16: each row's power of two and its inverse, `q_rows_to_f16`'s.)
    let (row_factor, row_inverse) = if f16 {
        let at = |r: usize, half: u32| shared::ld_shared_f32(row_factors + 4 * (MLA_ROWS * half + locals[r]));
        ([at(0, 0), at(1, 0)], [at(0, 1), at(1, 1)])
    } else {
        ([1.0; 2], [1.0; 2])
    };
    if f16 {
        for frag in rq.iter_mut() {
            for (i, x) in frag.iter_mut().enumerate() {
                *x = scaled_f16x2(*x, row_factor[i % 2]);
            }
        }
    }

    let rows = locals.map(|local| row_info(p, &item, seq_len, 0, row0, local));
    let mask_from = mask_from::<Standard>(p, &item, seq_len);
    let q_desc = descriptor(q_tile, 16, 1024);
    let scale = p.score_scale;
    // (f16: a row's scores are its factor times too large.)
    let row_scale = row_inverse.map(|inv| scale * inv);
    // The scores of stage `t`, keys past a row's limit −inf:
    // - bf16 MMAs (bf16 and fp8-ds-mla caches): the raw scores, the scale
    //   folded into `row_max` and `exp` (one FFMA a score), the mask a
    //   branch that only a stage past `mask_from` takes (as selects beside
    //   every score, mask and scale were ~100 of a warp's ~520
    //   instructions a stage: docs/perf.md, "MLA kernel");
    // - f16 (fp8 per head): scaled, times each key's scale (its rows are
    //   the e4m3 values, exactly), with the thread's part of each row's
    //   softmax base: the maximum of each score plus its key's scale
    //   exponent (`state::scale_exponent`), so that `P · scale` stays
    //   below 2^15 (docs/perf.md, "V's scale in the softmax base").
    let logits = |raw: [f32; 32], t: u32| -> ([[f32; 4]; 8], [f32; 2]) {
        let key0 = item.kv_start + t * MLA_KEYS;
        let masked = key0 + MLA_KEYS > mask_from;
        // The thread's n8 tile `n` with its elements past their rows'
        // limits −inf.
        let mask = |n: usize, x: &mut [f32; 4]| {
            for (e, v) in x.iter_mut().enumerate() {
                if key0 + 8 * n as u32 + c2 + (e as u32 & 1) >= rows[e / 2].limit {
                    *v = f32::NEG_INFINITY;
                }
            }
        };
        if !f16 {
            let mut s: [[f32; 4]; 8] = core::array::from_fn(|n| core::array::from_fn(|e| raw[4 * n + e]));
            if masked {
                for (n, x) in s.iter_mut().enumerate() {
                    mask(n, x);
                }
            }
            return (s, [f32::NEG_INFINITY; 2]);
        }
        // (f16: the unmasked pass, whose bases a masked stage recomputes
        // in its branch, as bf16's mask: no select beside every score.)
        // The rows' bases with tile `x` of keys' entry `k`.
        let with_tile = |b: [f32; 2], x: &[f32; 4], k: [f32; 4]| [0, 1].map(|r| b[r].max(x[2 * r] + k[2]).max(x[2 * r + 1] + k[3]));
        let mut bases = [f32::NEG_INFINITY; 2];
        let mut s: [[f32; 4]; 8] = core::array::from_fn(|n| {
            let k = key_entry(key_table(t % 2), n as u32, c2);
            let x: [f32; 4] = core::array::from_fn(|e| raw[4 * n + e] * (k[e & 1] * row_scale[e / 2]));
            bases = with_tile(bases, &x, k);
            x
        });
        if masked {
            bases = [f32::NEG_INFINITY; 2];
            for (n, x) in s.iter_mut().enumerate() {
                mask(n, x);
                bases = with_tile(bases, x, key_entry(key_table(t % 2), n as u32, c2));
            }
        }
        (s, bases)
    };
    // An fp8 stage's P times each key's scale, for the P·V (after the
    // row sums, which are of P itself).
    let scale_p = |s: &mut [[f32; 4]; 8], b: u32| {
        if f16 {
            for (n, t) in s.iter_mut().enumerate() {
                let f = key_scale_pair(key_table(b), n as u32, c2);
                for e in 0..4 {
                    t[e] *= f[e & 1];
                }
            }
        }
    };
    // A row's softmax base over a stage: its scores' maximum (f16: the
    // thread's parts from `logits`).
    let row_max = |s: &[[f32; 4]; 8], r: usize, bases: [f32; 2]| {
        warp::quad_max(if f16 { bases[r] } else { tree8(s.map(|t| t[2 * r].max(t[2 * r + 1])), f32::max) * scale })
    };
    let row_sum = |s: &[[f32; 4]; 8], r: usize| tree8(s.map(|t| t[2 * r] + t[2 * r + 1]), |a, b| a + b);
    let exp = |s: &mut [[f32; 4]; 8], m: [f32; 2]| {
        let base = m.map(state::safe_max);
        for t in s.iter_mut() {
            for e in 0..4 {
                t[e] = if f16 { ex2(t[e] - base[e / 2]) } else { ex2(fma(t[e], scale, -base[e / 2])) };
            }
        }
    };
    // A row's value of a warpgroup's hand-over arrays.
    let publish = |at: u32, v: [f32; 2]| {
        if c2 == 0 {
            for r in 0..2 {
                shared::st_shared_f32(at + 4 * locals[r], v[r]);
            }
        }
    };
    let read = |at: u32| [0, 1].map(|r| shared::ld_shared_f32(at + 4 * locals[r]));

    let mut o = [[0f32; 4]; 32];
    let mut m = [f32::NEG_INFINITY; 2];
    let mut l = [0f32; 2];
    let v_half = |b: u32| descriptor(buffer(b) + 4 * BLOCK_BYTES * own, BLOCK_BYTES, 1024);
    for i in 0..n_tiles.div_ceil(2) {
        let parity = i & 1;
        let t = 2 * i + own;
        let has = [true, 2 * i + 1 < n_tiles];
        if own == 0 {
            // 1, 3: S0 and the new maximum.
            let raw = if halves {
                mla_scores64::<{ ScoreOrder::LEFT_FIRST }>(q_desc, descriptor(buffer(0), 16, 1024), &rq, full(0), parity, f16)
            } else {
                mla_scores64::<{ ScoreOrder::IN_ORDER }>(q_desc, descriptor(buffer(0), 16, 1024), &rq, full(0), parity, f16)
            };
            let (mut s, bases) = logits(raw, t);
            let m0 = [0, 1].map(|r| m[r].max(row_max(&s, r, bases)));
            let scale0 = [0, 1].map(|r| state::rescale(m[r], m0[r]));
            publish(maxima, m0);
            publish(scales0, scale0);
            thread::arrive_named(SCALE0_READY, 256);
            // 4, 5: P0 and O_L.
            exp(&mut s, m0);
            for r in 0..2 {
                l[r] = l[r] * scale0[r] + row_sum(&s, r);
            }
            scale_p(&mut s, 0);
            state::rescale_rows(&mut o, scale0);
            mla_pv_regs(&mut o, p_fragments(&s, f16), v_half(0), f16);
            // 9: P0 under the pair's last maximum, for warpgroup 1.
            thread::sync_named(SCALE1_READY, 256);
            let scale1 = read(scales1);
            m = read(maxima);
            store_p(p0_tile, &s, scale1, locals, c2, f16);
            shared::fence_proxy_async_shared();
            thread::arrive_named(P0_READY, 256);
            if halves {
                // Buffer 0's left half and RoPE block are read (S0, P0·V0_L).
                load_blocks!(2 * i + 2, (0, 4), (BLOCKS - 1, BLOCKS));
            } else {
                issue_fp8!(2 * i + 2, 0);
            }
            l = [l[0] * scale1[0], l[1] * scale1[1]];
            // 11: O_L += P1·V1_L.
            thread::sync_named(P1_READY, 256);
            state::rescale_rows(&mut o, scale1);
            if has[1] {
                mla_pv(&mut o, descriptor(p1_tile, 16, 1024), v_half(1), f16);
            }
            // Buffer 1 is read (P1·V1_L here; warpgroup 1's reads of it
            // were before P1_READY): refill it (bf16: its left half).
            if halves {
                load_blocks!(2 * i + 3, (0, 4));
            } else {
                convert_fp8!(2 * i + 3, 1);
            }
        } else {
            // 2, 6: S1 and the pair's maximum.
            let (mut s, bases) = if !has[1] {
                ([[f32::NEG_INFINITY; 4]; 8], [f32::NEG_INFINITY; 2])
            } else if halves {
                logits(mla_scores64::<{ ScoreOrder::RIGHT_FIRST }>(q_desc, descriptor(buffer(1), 16, 1024), &rq, full(1), parity, f16), t)
            } else {
                logits(mla_scores64::<{ ScoreOrder::IN_ORDER }>(q_desc, descriptor(buffer(1), 16, 1024), &rq, full(1), parity, f16), t)
            };
            thread::sync_named(SCALE0_READY, 256);
            let (m0, scale0) = (read(maxima), read(scales0));
            let m1 = [0, 1].map(|r| m0[r].max(row_max(&s, r, bases)));
            let scale1 = [0, 1].map(|r| state::rescale(m0[r], m1[r]));
            publish(maxima, m1);
            publish(scales1, scale1);
            thread::arrive_named(SCALE1_READY, 256);
            m = m1;
            // 7, 8: P1 and O_R; P1 for warpgroup 0.
            exp(&mut s, m1);
            let both = [scale0[0] * scale1[0], scale0[1] * scale1[1]];
            for r in 0..2 {
                l[r] = l[r] * both[r] + row_sum(&s, r);
            }
            if has[1] {
                // (A missing stage's scales were never written.)
                scale_p(&mut s, 1);
            }
            state::rescale_rows(&mut o, both);
            // (P1 handed over before this warpgroup's own P·V: warpgroup 0's
            // P1·V1_L runs beside it.)
            store_p(p1_tile, &s, [1.0; 2], locals, c2, f16);
            shared::fence_proxy_async_shared();
            thread::arrive_named(P1_READY, 256);
            if has[1] {
                mla_pv_regs(&mut o, p_fragments(&s, f16), v_half(1), f16);
            }
            if halves {
                // Buffer 1's right half and RoPE block are read (S1, P1·V1_R).
                load_blocks!(2 * i + 3, (4, BLOCKS));
            } else {
                issue_fp8!(2 * i + 3, 1);
            }
            // 10: O_R += P0·V0_R.
            thread::sync_named(P0_READY, 256);
            mla_pv(&mut o, descriptor(p0_tile, 16, 1024), v_half(0), f16);
            // Buffer 0 is read (P0·V0_R here; warpgroup 0's reads of it
            // were before P0_READY): refill it (bf16: its right half).
            if halves {
                load_blocks!(2 * i + 2, (4, BLOCKS - 1));
            } else {
                convert_fp8!(2 * i + 2, 0);
            }
        }
    }

    // The rows' sums over both warpgroups' keys, in the same order.
    publish(sums + 4 * MLA_ROWS * own, l.map(warp::quad_sum));
    thread::sync_threads();
    if tid == 0 {
        for b in 0..2 {
            for c in 0..BLOCKS {
                mbarrier::inval(full(b) + 8 * c);
            }
            mbarrier::inval(raw_bar(b));
        }
    }
    let (batch, slot) = (item.batch, item.partial_slot);
    let here = rows_here(p, row0);
    thread::launch_dependents();
    if CLUSTER {
        // The rows, each divided by its sum, and `(1, lse)` into the
        // buffers (every stage read: the barrier above), then merged over
        // the cluster's chunks (`decode::cluster`).
        let block_rows = BlockRows { acc: smem, pitch: CLUSTER_PITCH, fin: smem + 4 * CLUSTER_PITCH * MLA_ROWS, row0, rows_here: here, kvh: 0, batch };
        for r in 0..2 {
            let local = locals[r];
            let total = shared::ld_shared_f32(sums + 4 * local) + shared::ld_shared_f32(sums + 4 * (MLA_ROWS + local));
            let (inv_l, lse) = state::finish(m[r], total);
            let at = block_rows.acc + 4 * (CLUSTER_PITCH * local + 256 * own + c2);
            for (j, acc) in o.iter().enumerate() {
                shared::st_shared_v2_f32(at + 32 * j as u32, [acc[2 * r] * inv_l, acc[2 * r + 1] * inv_l]);
            }
            if own == 0 && c2 == 0 {
                shared::st_shared_v2_f32(block_rows.fin + 8 * local, [1.0, lse]);
            }
        }
        merge_in_cluster_wide::<crate::format::Bf16, { V_DIM as usize }, 8>(p, &block_rows, kept_seq_len(p));
        return;
    }
    for r in 0..2 {
        let local = locals[r];
        if local >= here {
            continue;
        }
        let total = shared::ld_shared_f32(sums + 4 * local) + shared::ld_shared_f32(sums + 4 * (MLA_ROWS + local));
        let (inv_l, lse) = state::finish(m[r], total);
        let (token, head) = token_head(p, 0, row0 + local);
        let col0 = 256 * own + c2;
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
            if own == 0 && c2 == 0 {
                memory::st_global_f32(p.partial_lse + 4 * row, lse);
            }
        }
    }
    if slot != DIRECT_OUTPUT && p.merge_counters != 0 {
        // (The maxima's first word is free: the merge's first barrier
        // follows every read of them.)
        crate::merge::merge_chunk_if_last::<crate::format::Bf16, Standard, { V_DIM as usize }>(p, batch, 0, chunk, chunks, here, maxima);
    }
}

/// Whether a format's MMAs take f16 operands rather than bf16:
/// `Fp8PerHead`'s, whose stages are the e4m3 values themselves (the keys'
/// scales multiply the scores and P), and an e4m3 value is an f16 in one
/// conversion (`cvt.rn.f16x2.e4m3x2`) but a bf16 in four (docs/perf.md,
/// "MLA fp8 in f16").
#[inline(always)]
pub(super) fn f16_mma<F: KvFormat>() -> bool {
    matches!(F::FORMAT, decode_attn_abi::KvFormat::Fp8PerHead)
}

/// The larger magnitude of a bf16 pair as f32 bits, which compare as
/// their values (a row's largest for `q_row_scale`).
#[inline(always)]
pub(super) fn bf16x2_magnitude(x: u32) -> u32 {
    ((x & 0x7FFF) << 16).max(x & 0x7FFF_0000)
}

/// A bf16 pair times `factor` (a power of two), as an f16 pair.
#[inline(always)]
pub(super) fn scaled_f16x2(x: u32, factor: f32) -> u32 {
    let (lo, hi) = unpack_bf16x2(x);
    pack_f16x2(lo * factor, hi * factor)
}

/// The 8 RoPE values of each of the thread's two Q rows that
/// `q_rows_to_f16` weighs (zero past the block's last row).
#[inline(always)]
unsafe fn q_rope_words(p: &DecodeParams, batch: u32, row0: u32, tid: u32) -> [[u32; 4]; 2] {
    let (sub, lane8) = (tid / 8, tid % 8);
    core::array::from_fn(|pass| {
        let local = pass as u32 * 32 + sub;
        q_row(p, batch, row0 + local).map_or([0; 4], |row| memory::ld_global_nc_v4_f32(row + 2 * (V_DIM + 8 * lane8) as u64).map(f32::to_bits))
    })
}

/// The Q tile's bf16 rows (landed: the thread's own copies, as `decode_mla`
/// issued them, 8 threads a row, two rows a thread) as f16 rows, each
/// times the power of two that `query::q_row_scale` gives its largest
/// magnitude (RoPE dims too: `q_rope_words`), which lands it in
/// `[2^13, 2^14)`; that factor to `factors + 4 row`, its inverse to
/// `factors + 4 (MLA_ROWS + row)` (1 and 1 for a zero row and rows past
/// the block's last). An f16 holds every bf16 of the row within 2^27 of
/// its largest exactly, so a row's scores lose nothing that matters (they
/// are the factor times too large: `decode_mla` multiplies by the inverse).
#[inline(always)]
unsafe fn q_rows_to_f16(q_rope: [[u32; 4]; 2], q_tile: u32, factors: u32, tid: u32) {
    let (sub, lane8) = (tid / 8, tid % 8);
    for pass in 0..2 {
        let local = pass * 32 + sub;
        let chunks: [u32; 8] = core::array::from_fn(|j| q_tile + TILE.at(local, lane8 + 8 * j as u32, 0));
        let words = chunks.map(|at| shared::ld_shared_v4_u32(at));
        let rope = q_rope[pass as usize];
        let mut largest = 0;
        for j in 0..9 {
            let w = if j < 8 { words[j] } else { rope };
            for i in 0..4 {
                largest = largest.max(bf16x2_magnitude(w[i]));
            }
        }
        let (factor, inverse) = q_row_scale(warp::octet_max(f32::from_bits(largest)));
        for j in 0..8 {
            shared::st_shared_v4_u32(chunks[j], words[j].map(|x| scaled_f16x2(x, factor)));
        }
        if lane8 == 0 {
            shared::st_shared_f32(factors + 4 * local, factor);
            shared::st_shared_f32(factors + 4 * (MLA_ROWS + local), inverse);
        }
    }
}

/// The global address of Q's row `global` (packed, of the block's
/// sequence), or `None` past the last row.
#[inline(always)]
pub(super) fn q_row(p: &DecodeParams, batch: u32, global: u32) -> Option<u64> {
    (global < p.group * p.q_len).then(|| {
        let (token, head) = token_head(p, 0, global);
        qo_row_addr::<{ QK_DIM as usize }>(p.q, p, batch, token, head)
    })
}

/// The A fragments of Q's RoPE dims (512..576) for the thread's rows
/// (`locals`): fragment `s` holds dims `512 + 16 s ..` (`mma.m16n8k16`'s A
/// layout: rows `g`, `g + 8`, dims `c2, c2 + 1` and `c2 + 8, c2 + 9`); rows
/// past the block's last are zero.
#[inline(always)]
unsafe fn rope_fragments(p: &DecodeParams, batch: u32, row0: u32, locals: [u32; 2], c2: u32) -> [[u32; 4]; 4] {
    let rows = locals.map(|local| q_row(p, batch, row0 + local));
    core::array::from_fn(|s| {
        let dim = 512 + 16 * s as u32 + c2;
        let at = |r: usize, d: u32| rows[r].map_or(0, |row| memory::ld_global_nc_u32(row + 2 * d as u64));
        [at(0, dim), at(1, dim), at(0, dim + 8), at(1, dim + 8)]
    })
}

/// P's A fragments for the P·V MMA: n8 tiles `2h, 2h + 1` of the scores
/// are the fragment of keys `16 h ..`.
#[inline(always)]
fn p_fragments(s: &[[f32; 4]; 8], f16: bool) -> [[u32; 4]; 4] {
    core::array::from_fn(|h| {
        let (lo, hi) = (&s[2 * h], &s[2 * h + 1]);
        [pack(lo[0], lo[1], f16), pack(lo[2], lo[3], f16), pack(hi[0], hi[1], f16), pack(hi[2], hi[3], f16)]
    })
}

/// Two P values as the MMAs' 16-bit pair: f16 (`f16_mma`) or bf16.
#[inline(always)]
fn pack(lo: f32, hi: f32, f16: bool) -> u32 {
    if f16 {
        pack_f16x2(lo, hi)
    } else {
        pack_bf16x2(lo, hi)
    }
}

/// Stores the thread's P values times its rows' `factor` into the 64 × 64
/// tile at `tile` (rows × keys, keys contiguous: the P·V's A operand,
/// K-major, one swizzled column block).
#[inline(always)]
unsafe fn store_p(tile: u32, s: &[[f32; 4]; 8], factor: [f32; 2], locals: [u32; 2], c2: u32, f16: bool) {
    for (n, t) in s.iter().enumerate() {
        for r in 0..2 {
            let at = tile + TILE.at(locals[r], n as u32, 0) + 2 * c2;
            shared::st_shared_u32(at, pack(t[2 * r] * factor[r], t[2 * r + 1] * factor[r], f16));
        }
    }
}

/// The sources of stage `t`'s copies by one warpgroup's 128 threads
/// (`pt`: the thread's index in it): 8 threads a key and 16 keys a pass,
/// the thread's 4 keys' rows and the bytes to copy of each 16-byte chunk
/// (`issue_blocks`). Keys past the item's end are zero-filled (their P is
/// 0, and a zero V row keeps the P·V finite), their source address the
/// item's first key's.
#[inline(always)]
pub(super) unsafe fn stage_sources<const PAGED: bool>(p: &DecodeParams, item: &WorkItem, t: u32, pt: u32) -> [(u64, u32); 4] {
    let key0 = item.kv_start + t * MLA_KEYS;
    core::array::from_fn(|pass| {
        let key = key0 + pt / 8 + 16 * pass as u32;
        let live = key < item.kv_end;
        (row_address::<PAGED>(p, item.batch, if live { key } else { item.kv_start }), if live { 16 } else { 0 })
    })
}

/// Issues the copies of column blocks `FROM..TO` of a stage into the
/// buffer at `dst` from `src` (`stage_sources`): a 16-byte chunk of each
/// of the thread's 4 keys per column block; after each column block, the
/// thread's arrival on the block's barrier (`bars + 8 c`, 128 arrivals a
/// phase) once its copies landed.
#[inline(always)]
pub(super) unsafe fn issue_blocks<const FROM: u32, const TO: u32>(dst: u32, bars: u32, pt: u32, src: &[(u64, u32); 4]) {
    let (sub, c) = (pt / 8, pt % 8);
    for block in FROM..TO {
        for (pass, &(row, bytes)) in src.iter().enumerate() {
            memory::cp_async_16(dst + block * BLOCK_BYTES + TILE.at(sub + 16 * pass as u32, c, 0), row + 128 * block as u64 + 16 * c as u64, bytes);
        }
        mbarrier::cp_async_arrive_noinc(bars + 8 * block);
    }
}

/// Where e4m3 column block `j` of an fp8 stage (64 keys × 64 bytes, a
/// key's bytes of the block consecutive) waits in buffer `B` (at `buf`)
/// for its conversion: in the part of the buffer its bf16 stage frees
/// first (`decode_mla`'s "Loads"), buffer 0's column blocks 0-3 (e4m3
/// blocks 0-7) and buffer 1's 4-7, and for block 8 (`Fp8PerHead`'s last
/// latent block) the first half of either buffer's RoPE block.
#[inline(always)]
fn raw_at<const B: u32>(buf: u32, j: u32) -> u32 {
    if j == BLOCKS - 1 {
        buf + (BLOCKS - 1) * BLOCK_BYTES
    } else {
        buf + 4 * BLOCK_BYTES * B + (BLOCK_BYTES / 2) * j
    }
}

/// Issues stage `t`'s copies of an fp8 latent cache into buffer `B` (at
/// `buf`) by one warpgroup (`pt`: the thread's index in it; 32 keys a pass,
/// a thread a 16-byte quarter of each of a key's 64-byte blocks), each
/// thread arriving on `raw_bar` once its copies landed (128 arrivals a
/// phase):
/// - `Fp8PerHead` (576 e4m3 bytes a row, one f32 scale a row): the
///   rows' bytes at `raw_at`, the 64 keys' scales into the key table at `table` (`key_entry`);
/// - `Fp8DsMla` (DeepSeek V3.2's 656-byte rows): the latent
///   bytes at `raw_at`, the bf16 RoPE values in their place of the stage
///   (block 8's barrier arrived at as well).
///
/// Keys past the item's end are zero-filled (scale 0), their source the
/// item's first key's. `convert_raw` makes the bf16 stage of them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn issue_raw<F: KvFormat, const PAGED: bool, const B: u32>(p: &DecodeParams, item: &WorkItem, t: u32, buf: u32, raw_bar: u32, table: u32, bars: u32, pt: u32) {
    let ds = matches!(F::FORMAT, decode_attn_abi::KvFormat::Fp8DsMla);
    let (sub, q) = (pt / 4, pt % 4);
    let key0 = item.kv_start + t * MLA_KEYS;
    let latent_blocks = if ds { DS_MLA_LATENT / 64 } else { BLOCKS };
    for pass in 0..2 {
        let k = sub + 32 * pass;
        let live = key0 + k < item.kv_end;
        let key = if live { key0 + k } else { item.kv_start };
        let row = row_address::<PAGED>(p, item.batch, key);
        let bytes = if live { 16 } else { 0 };
        for j in 0..latent_blocks {
            memory::cp_async_16(raw_at::<B>(buf, j) + 64 * k + 16 * q, row + 64 * j as u64 + 16 * q as u64, bytes);
        }
        if ds {
            for h in 0..2 {
                let c = q + 4 * h;
                memory::cp_async_16(buf + (BLOCKS - 1) * BLOCK_BYTES + TILE.at(k, c, 0), row + DS_ROPE_AT + 16 * c as u64, bytes);
            }
        } else if q == 0 {
            memory::cp_async_4(key_scale_at(table, k), scale_address::<PAGED>(p, item.batch, key), if live { 4 } else { 0 });
        }
    }
    if ds {
        mbarrier::cp_async_arrive_noinc(bars + 8 * (BLOCKS - 1));
    }
    mbarrier::cp_async_arrive_noinc(raw_bar);
}

/// Stage `t` of buffer `B` (at `buf`) from its e4m3 bytes (`issue_raw`)
/// into 16-bit rows in `issue_blocks`' places, by one warpgroup (`pt`:
/// the thread's index in it, `convert_bar` its own named barrier) once
/// the copies landed (`raw_bar`):
/// - `Fp8PerHead`: the e4m3 values exactly, as f16 (the scales multiply
///   the scores and P: `decode_mla`), and each key's scale exponent
///   beside its scale in the key table at `table`;
/// - `Fp8DsMla`: each latent value `bf16(e4m3 · its group's scale)` (the
///   format's value, exact for a power-of-two scale), the scales read from
///   the rows (in L2: `issue_raw`'s copies brought their lines).
///
/// First the column blocks whose bf16 rows overlap no e4m3 bytes (buffer
/// 0's 4-7, buffer 1's 0-3), then the others: all their bytes read, the
/// warpgroup's barrier, then written. Each column block's barrier is
/// arrived at (128 arrivals a phase) once its stores are visible to the
/// MMAs' async proxy. docs/perf.md, "MLA kernel".
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn convert_raw<F: KvFormat, const PAGED: bool, const B: u32>(p: &DecodeParams, item: &WorkItem, t: u32, buf: u32, raw_bar: u32, table: u32, bars: u32, convert_bar: u32, pt: u32) {
    let ds = matches!(F::FORMAT, decode_attn_abi::KvFormat::Fp8DsMla);
    let f16 = f16_mma::<F>();
    let (sub, c) = (pt / 8, pt % 8);
    let keys: [u32; 4] = core::array::from_fn(|pass| sub + 16 * pass as u32);
    let key0 = item.kv_start + t * MLA_KEYS;
    // (Factors of 1: products the compiler removes.)
    let factors: [[f32; 4]; 4] = if ds {
        core::array::from_fn(|i| {
            let key = key0 + keys[i];
            if key < item.kv_end {
                memory::ld_global_nc_v4_f32(row_address::<PAGED>(p, item.batch, key) + DS_SCALES_AT)
            } else {
                [0.0; 4]
            }
        })
    } else {
        [[1.0; 4]; 4]
    };
    mbarrier::wait_parity(raw_bar, (t / 2) & 1);
    if f16 && pt < MLA_KEYS {
        // The key's scale exponent beside its scale (`key_entry`; read
        // after the column blocks' barriers below).
        let at = key_scale_at(table, pt);
        shared::st_shared_f32(at + 8, state::scale_exponent(shared::ld_shared_f32(at)));
    }
    let free = 4 * (1 - B);
    for j in free..free + 4 {
        let bytes = read_raw::<B, 1>(buf, [j], &keys, c);
        write_rows(buf, [j], &bytes, &keys, c, &factors, bars, f16);
    }
    let overlapping = 4 * B;
    let bytes = read_raw::<B, 4>(buf, core::array::from_fn(|j| overlapping + j as u32), &keys, c);
    let last = if ds { [[0; 2]; 4] } else { read_raw::<B, 1>(buf, [BLOCKS - 1], &keys, c)[0] };
    thread::sync_named(convert_bar, 128);
    write_rows(buf, core::array::from_fn(|j| overlapping + j as u32), &bytes, &keys, c, &factors, bars, f16);
    if !ds {
        write_rows(buf, [BLOCKS - 1], &[last], &keys, c, &factors, bars, f16);
    }
}

/// The thread's 8 bytes (chunk `c`) of each of its keys in e4m3 column
/// blocks `blocks` of buffer `B` (`raw_at`).
#[inline(always)]
unsafe fn read_raw<const B: u32, const N: usize>(buf: u32, blocks: [u32; N], keys: &[u32; 4], c: u32) -> [[[u32; 2]; 4]; N] {
    blocks.map(|j| keys.map(|k| shared::ld_shared_v2_u32(raw_at::<B>(buf, j) + 64 * k + 8 * c)))
}

/// Column blocks `blocks` of the thread's keys from their e4m3 bytes
/// (`read_raw`): each value `bf16(e4m3 · factor)` (the key's factor of the
/// block's group of two), or `f16(e4m3)` where `f16`, stored in its place,
/// and each block's barrier arrived at once its stores are visible to the
/// async proxy.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn write_rows<const N: usize>(buf: u32, blocks: [u32; N], bytes: &[[[u32; 2]; 4]; N], keys: &[u32; 4], c: u32, factors: &[[f32; 4]; 4], bars: u32, f16: bool) {
    for (n, &j) in blocks.iter().enumerate() {
        for (i, w) in bytes[n].iter().enumerate() {
            let factor = factors[i][(j / (DS_MLA_GROUP / 64)).min(3) as usize];
            let values = if f16 {
                let (a, b) = (f16x4_from_e4m3x4(w[0]), f16x4_from_e4m3x4(w[1]));
                [a[0], a[1], b[0], b[1]]
            } else {
                let pair = |x: u32| crate::quant::ds_mla_pair(x & 0xFFFF, factor);
                [pair(w[0]), pair(w[0] >> 16), pair(w[1]), pair(w[1] >> 16)]
            };
            shared::st_shared_v4_u32(buf + j * BLOCK_BYTES + TILE.at(keys[i], c, 0), values);
        }
        shared::fence_proxy_async_shared();
        mbarrier::arrive(bars + 8 * j);
    }
}

/// Where key `k`'s scale sits in a stage's key table (`key_entry`).
#[inline(always)]
fn key_scale_at(table: u32, k: u32) -> u32 {
    table + 16 * (k / 2) + 4 * (k % 2)
}

/// The scales of keys `8 n + c2` and `8 n + c2 + 1` of a stage (the
/// thread's score columns of n8 tile `n`), from its key table at `table`.
#[inline(always)]
unsafe fn key_scale_pair(table: u32, n: u32, c2: u32) -> [f32; 2] {
    shared::ld_shared_v2_f32(key_scale_at(table, 8 * n + c2))
}

/// The scales of keys `8 n + c2` and `8 n + c2 + 1` of a stage and their
/// exponents (`state::scale_exponent`): a key table (`Fp8PerHead`) holds
/// them 16 bytes a pair of keys, the two scales (`issue_raw`'s copies)
/// then the two exponents (`convert_raw`'s).
#[inline(always)]
unsafe fn key_entry(table: u32, n: u32, c2: u32) -> [f32; 4] {
    shared::ld_shared_v4_f32(key_scale_at(table, 8 * n + c2))
}

/// The byte address of key `key`'s scale (fp8 latent caches), as
/// `row_address` finds its row.
#[inline(always)]
pub(super) unsafe fn scale_address<const PAGED: bool>(p: &DecodeParams, batch: u32, key: u32) -> u64 {
    let (slot, token) = key_slot::<PAGED>(p, batch, key);
    p.k_scales + slot * p.scale_stride_batch + token * p.scale_stride_token
}

/// The byte address of key `key`'s latent row of sequence `batch`.
#[inline(always)]
pub(super) unsafe fn row_address<const PAGED: bool>(p: &DecodeParams, batch: u32, key: u32) -> u64 {
    let (slot, token) = key_slot::<PAGED>(p, batch, key);
    p.k + slot * p.k_stride_batch + token * p.k_stride_token
}

/// Where key `key` of sequence `batch` sits: (the sequence, the key)
/// strided, or (its page, its token in the page) through the block table
/// (an id past the pool, or negative, is read as the last page).
#[inline(always)]
unsafe fn key_slot<const PAGED: bool>(p: &DecodeParams, batch: u32, key: u32) -> (u64, u64) {
    if PAGED {
        let entry = p.block_table + 4 * (batch as u64 * p.table_stride as u64 + (key >> p.page_shift) as u64);
        let id = memory::ld_global_nc_u32(entry);
        let page = if id < p.num_pages { id } else { p.num_pages - 1 };
        (page as u64, (key & ((1 << p.page_shift) - 1)) as u64)
    } else {
        (batch as u64, key as u64)
    }
}

/// `f` over eight values as a tree of adjacent pairs.
#[inline(always)]
fn tree8(x: [f32; 8], f: impl Fn(f32, f32) -> f32) -> f32 {
    f(f(f(x[0], x[1]), f(x[2], x[3])), f(f(x[4], x[5]), f(x[6], x[7])))
}
