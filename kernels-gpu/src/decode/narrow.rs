//! The `Narrow` family: keys along mma M, up to 8 query rows along N.
//!
//! With few rows per kv head (GQA decode: 4–8, MHA: 1) a 16-row tile of
//! query rows is mostly empty. Here each warp computes `Sᵀ = K·Qᵀ` for 16
//! keys × 8 rows (one m16n8k16 per 16 head dims) and `Oᵀ += Vᵀ·Pᵀ` (one per
//! 16 output dims), so per 16 keys it issues half the mma of the wide
//! family, K and V fragments are still converted once per warp, the O
//! accumulator is `D / 4` registers instead of `D / 2`, and Q stays in
//! registers as B fragments.
//!
//! The fragments of the wide family serve as they are: each chunk of a
//! format's `k_fragment_pair` (B fragments of two 8-key tiles) and
//! `v_fragment_pair` (B of two 8-dim tiles), reordered as `[b0, b2, b1, b3]`,
//! is exactly the A fragment
//! of the transposed products. `Pᵀ` comes out of the C layout of `Sᵀ` as a
//! B fragment with one `movmatrix.trans` per 8 keys. Each thread holds rows
//! `2c` and `2c + 1` (c = lane % 4) for keys `g` and `g + 8`, so row maxima
//! and sums reduce over the 8 lanes of a column, not a quad.
//!
//! `HG` = 2 (the `HeadPair` entries, strided caches and pools): a block reads two
//! adjacent kv heads, warps `0 .. warps_k` the first and the next
//! `warps_k` the second, each half as the whole block does for one head,
//! over half a stage's keys of its head (`Pipeline::head_tiles`). A
//! token-major cache then hands out each token's two rows as one piece of
//! twice the row's bytes (docs/design/nhd-head-groups.md).

use decode_attn_abi::{div_rem, q_converted, DecodeParams, KEYS_PER_WARP_STEP, MAX_WARPS, MMA_M, NARROW_ROWS};

use super::pipeline::Pipeline;
use super::block::{block_first_head, block_work_of, keep_first_key, keep_item, keep_seq_len, kept_batch, kept_first_key, mask_from, qo_row_addr, row_info, RowInfo};
use super::epilogue::epilogue;
use super::query::convert_q;
use crate::arch::{math::ex2, memory, mma, shared, thread, warp};
use crate::format::{swizzled, Half, KvFormat};
use crate::state;
use crate::variant::{self, AttentionVariant, Rows};

/// # Safety
/// As [`super::decode`]: launched with the planner's grid (`rows_per_block`
/// = 8, `warps_m` = 1; `HG` = 2: `warps_k` warps per head, grid x over
/// head pairs), block and shared memory, on validated buffers.
#[inline(always)]
pub unsafe fn decode_narrow<F: KvFormat, V: AttentionVariant, const D: usize, const KC: usize, const NP: usize, const PAGED: bool, const CLUSTER: bool, const HG: u32>(p: &DecodeParams) {
    const { assert!(KC * 16 == D && NP * 16 == D && KC % 2 == 0 && (HG == 1 || (HG == 2 && !CLUSTER))) };
    type H<F> = <F as KvFormat>::Compute;
    type Pipe<'a, F, const D: usize, const PAGED: bool, const CLUSTER: bool, const HG: u32> = Pipeline<'a, F, D, PAGED, false, CLUSTER, false, HG>;

    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let lane = tid % 32;
    // The warp's head in the block (`HG` > 1) and its place along the keys.
    let (slot, warp_k) = if HG == 1 { (0, tid / 32) } else { div_rem(tid / 32, p.warps_k) };

    V::prefetch_heads(p);
    let Some((item, seq_len, seq_first)) = block_work_of::<V, CLUSTER, HG>(p) else { return };
    keep_item(p, &item, tid);
    keep_first_key::<V>(p, seq_first, tid);
    let batch = item.batch;
    let kvh0 = block_first_head::<CLUSTER, HG>(p);
    let kvh = kvh0 + slot;
    let row0 = thread::block_idx_z() * p.rows_per_block;

    let (g, c) = (lane / 4, lane % 4);

    let smem = shared::dynamic_smem_base();
    let pipe = Pipe::<F, D, PAGED, CLUSTER, HG>::new(p, item, kvh0, smem);
    pipe.prefetch();
    keep_seq_len::<CLUSTER>(p, seq_len, tid);

    // This thread's score / output columns (rows 2c, 2c+1) and the row whose
    // Q it holds as a B fragment (row g), after the first copies are out
    // (their key limits wait for the sequence's length: as the wide kernel).
    // A head pair's second head's rows are the block's rows 8 on.
    let at_slot = |mut r: RowInfo| {
        r.local += slot * NARROW_ROWS;
        r
    };
    let ra = at_slot(row_info(p, &item, seq_len, kvh, row0, 2 * c));
    let rb = at_slot(row_info(p, &item, seq_len, kvh, row0, 2 * c + 1));
    let rq = row_info(p, &item, seq_len, kvh, row0, g);

    // Qᵀ B fragments: b0 = Q[g][16kc + 2c ..+2], b1 = Q[g][16kc + 2c + 8 ..+2].
    let mut qb = [[0u32; 2]; KC];
    let (mut scale_a, mut scale_b) = (V::score_scale(p), V::score_scale(p));
    if const { q_converted(F::FORMAT) } {
        // Each head's warps convert its rows into its 8 rows of the tile.
        let q_all = smem + Pipe::<F, D, PAGED, CLUSTER, HG>::region_bytes(p);
        let q_scales = q_all + MMA_M * (D as u32) * 2;
        let q_tile = q_all + slot * NARROW_ROWS * (D as u32) * 2;
        let q_warps = if HG == 1 { nthreads / 32 } else { p.warps_k };
        convert_q::<F, D>(p, batch, kvh, row0, p.rows_per_block, q_tile, q_scales + 4 * slot * NARROW_ROWS, warp_k, q_warps, lane);
        thread::sync_threads();
        for (kc, f) in qb.iter_mut().enumerate() {
            let at = #[inline(always)] |half: u32| q_tile + swizzled(g, 2 * kc as u32 + half, (D * 2) as u32) + 4 * c;
            *f = [shared::ld_shared_u32(at(0)), shared::ld_shared_u32(at(1))];
        }
        scale_a *= shared::ld_shared_f32(q_scales + 4 * ra.local);
        scale_b *= shared::ld_shared_f32(q_scales + 4 * rb.local);
    } else {
        let addr = qo_row_addr::<D>(p.q, p, batch, rq.token, rq.head);
        for (kc, f) in qb.iter_mut().enumerate() {
            let d = 16 * kc as u64 + 2 * c as u64;
            if rq.valid {
                *f = [memory::ld_global_nc_u32(addr + 2 * d), memory::ld_global_nc_u32(addr + 2 * (d + 8))];
            }
        }
    }

    let mask_from = mask_from::<V>(p, &item, seq_len);

    // o[np] = Oᵀ tile of dims v_dim(2np, ·) | v_dim(2np + 1, ·) × rows 2c, 2c+1.
    let mut o = [[0f32; 4]; NP];
    let (mut m_a, mut m_b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    // This thread's share of each row's sum (its keys only; reduced at the end).
    let (mut l_a, mut l_b) = (0f32, 0f32);

    let kt = Pipe::<F, D, PAGED, CLUSTER, HG>::TILE_KEYS;
    // (A closure-taking loop helper shared with the other family cost the
    // narrow int4 kernel 34 registers; the loop stays written out.)
    for t in 0..pipe.n_tiles {
        let stage = pipe.advance(t);
        let tiles = pipe.head_tiles(stage, slot);
        let tile_first = item.kv_start + t * kt;
        let mut sub = warp_k * KEYS_PER_WARP_STEP;
        while sub < kt && tile_first + sub < item.kv_end {
            let key0 = tile_first + sub;
            // s = Sᵀ: (key g, row 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1).
            let mut s = [0f32; 4];
            // (One head a block: the fragment loaders that find scales
            // from the tile, as before pairs existed, which keeps those
            // kernels' code as measured; a pair's second head gives its
            // scales's address, `KvFormat::k_fragment_pair_in`.)
            for kp in 0..KC / 2 {
                let pair = if HG == 1 { F::k_fragment_pair::<D>(tiles.k, sub, kp as u32, lane) } else { F::k_fragment_pair_in::<D>(tiles.k, tiles.k_scales, sub, kp as u32, lane) };
                for (h, b) in pair.iter().enumerate() {
                    s = F::Compute::mma([b[0], b[2], b[1], b[3]], qb[2 * kp + h], s);
                }
            }
            // Quantized formats: K's scales multiply score rows (keys), V's P.
            let (kscale, vscale) = if F::SCALED {
                let at = #[inline(always)] |side: u32, k: u32| shared::ld_shared_f32(side + 4 * (sub + k));
                ([at(tiles.k_scales, g), at(tiles.k_scales, g + 8)], [at(tiles.v_scales, g), at(tiles.v_scales, g + 8)])
            } else {
                ([1.0; 2], [1.0; 2])
            };
            // The logits (`variant::logits`): keys `g` and `g + 8`, rows a
            // (elements 0, 2) and b (1, 3); the sequence's first key and
            // item from shared memory (`keep_first_key`, `kept_batch`).
            let rows = Rows { tokens: [ra.token, rb.token], heads: [ra.head, rb.head], limits: [ra.limit, rb.limit], seq_len, mask_from };
            let at = #[inline(always)] |_: usize, e: usize| (key0 + g + 8 * (e as u32 / 2), e % 2);
            let scale = #[inline(always)] |_: usize, e: usize| {
                let row_scale = if e % 2 == 0 { scale_a } else { scale_b };
                if F::SCALED { row_scale * kscale[e / 2] } else { row_scale }
            };
            variant::logits::<V, variant::Fused, 1, 4>(p, core::array::from_mut(&mut s), key0, KEYS_PER_WARP_STEP, &rows, #[inline(always)] || kept_first_key::<V>(p), #[inline(always)] || kept_batch(p), at, scale);

            // (Formats whose P carries V's scales: the base covers them,
            // `state::scale_exponent`.)
            let e = if F::SCALED { state::scale_exponent(vscale[0].max(vscale[1])) } else { 0.0 };
            let (mx_a, mx_b) = (warp::column_max(s[0].max(s[2]) + e), warp::column_max(s[1].max(s[3]) + e));
            let moved = state::warp_must_move([m_a, m_b], [mx_a, mx_b], F::RESCALE_SLACK);
            let (alpha_a, base_a) = state::advance_if(&mut m_a, mx_a, moved);
            let (alpha_b, base_b) = state::advance_if(&mut m_b, mx_b, moved);
            s = [ex2(s[0] - base_a), ex2(s[1] - base_b), ex2(s[2] - base_a), ex2(s[3] - base_b)];
            l_a = l_a * alpha_a + (s[0] + s[2]);
            l_b = l_b * alpha_b + (s[1] + s[3]);
            if moved {
                for acc in o.iter_mut() {
                    acc[0] *= alpha_a;
                    acc[1] *= alpha_b;
                    acc[2] *= alpha_a;
                    acc[3] *= alpha_b;
                }
            }
            if F::SCALED {
                s = [s[0] * vscale[0], s[1] * vscale[0], s[2] * vscale[1], s[3] * vscale[1]];
            }
            // (key g | rows 2c, 2c+1) pairs, transposed: (row g | keys 2c, 2c+1).
            let pt = [mma::movmatrix_trans(H::<F>::pack(s[0], s[1])), mma::movmatrix_trans(H::<F>::pack(s[2], s[3]))];
            for mp in 0..NP / 2 {
                let pair = if HG == 1 { F::v_fragment_pair::<D>(tiles.v, sub, mp as u32, lane) } else { F::v_fragment_pair_in::<D>(tiles.v, tiles.v_scales, sub, mp as u32, lane) };
                for (h, b) in pair.iter().enumerate() {
                    o[2 * mp + h] = F::Compute::mma([b[0], b[2], b[1], b[3]], pt, o[2 * mp + h]);
                }
            }
            sub += p.warps_k * KEYS_PER_WARP_STEP;
        }
    }
    pipe.drain();

    let rows = [ra, rb];
    let store = |acc: u32, pitch: u32, scale: [f32; 2], add: bool, live: [bool; 2]| {
        for (np, frag) in o.iter().enumerate() {
            for half in 0..2 {
                let dim = F::v_dim(2 * np as u32 + half as u32, g);
                for (r, row) in rows.iter().enumerate() {
                    if !CLUSTER && !live[r] {
                        continue;
                    }
                    let addr = acc + 4 * (row.local * pitch + dim);
                    let mut v = frag[2 * half + r] * scale[r];
                    if add {
                        v += shared::ld_shared_f32(addr);
                    }
                    shared::st_shared_f32(addr, v);
                }
            }
        }
    };
    let l = [warp::column_sum(l_a), warp::column_sum(l_b)];
    epilogue::<F, V, D, CLUSTER, { MAX_WARPS as usize }, 1, HG>(p, row0, warp_k, g == 0, rows, [m_a, m_b], l, smem, store);
}
