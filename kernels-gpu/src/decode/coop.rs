//! The `Coop` variant: many query rows per kv head (grid B: 16 heads × 3
//! tokens = 48), with every K and V byte converted once per block.
//!
//! In the wide variant each 16-row warp converts the whole stage for its own
//! rows, so 48 rows convert every byte three times. Here the 8 warps of a
//! block split the work of a stage twice:
//! 1. **Scores.** Warp `w` takes the stage's 16-key tiles `w, w + 8, …` and
//!    computes `Sᵀ = K·Qᵀ` for all rows (keys along M as in `Narrow`, 8-row
//!    n-tiles, Q read from the shared tile). Warps publish their row maxima;
//!    after a barrier every warp knows the stage's max, turns its scores into
//!    P and stores P as mma B fragments in shared memory.
//! 2. **Output.** After a second barrier warp `w` owns 16-dim tiles of `Oᵀ`
//!    for all rows (for D = 64, two warps share a tile and split the keys)
//!    and runs `Oᵀ += Vᵀ·Pᵀ` over every key of the stage, converting only its
//!    own dims of V.
//!
//! All warps hold the same running max, so the epilogue only sums the row
//! sums and writes each warp's dims. Shared memory carries P (fp16) and the
//! maxima, never dequantized K or V.

use decode_attn_abi::{acc_pitch, coop_epilogue_bytes, q_converted, q_tile_bytes, tile_config, DecodeParams, Variant, WorkItem, COOP_ROWS, COOP_WARPS, KEYS_PER_WARP_STEP};

use super::pipeline::Pipeline;
use super::{convert_q, row_info, stage_q, write_rows};
use crate::arch::{math::ex2, mma, shared, thread, warp};
use crate::format::{Half, KvFormat};
use crate::state;

/// 8-row n-tiles of a block (`COOP_ROWS / 8`).
const NR: usize = 8;

/// # Safety
/// As [`super::decode`]: launched with the planner's grid (`rows_per_block`
/// = 64, 8 warps), block and shared memory, on validated buffers.
/// `DW` = 16-dim output tiles per warp, `JW` = 16-key score tiles per warp
/// and stage (both at least 1).
#[inline(always)]
pub unsafe fn decode_coop<F: KvFormat, const D: usize, const KC: usize, const DW: usize, const JW: usize>(p: &DecodeParams) {
    const { assert!(KC * 16 == D && KC % 2 == 0 && COOP_ROWS as usize == 8 * NR && COOP_WARPS == 8) };
    // The epilogue's rows reuse the pipeline's (and Q's) buffers and must
    // leave the running maxima (after P and the warp maxima) intact.
    const {
        let cfg = tile_config(F::FORMAT, D as u32);
        let m_offset = cfg.pipeline_bytes() + q_tile_bytes(F::FORMAT, D as u32, 1, Variant::Coop) + (cfg.keys_per_stage / 16) * 8 * 32 * 8 + 4 * COOP_WARPS * COOP_ROWS;
        assert!(coop_epilogue_bytes(D as u32) <= m_offset)
    };
    type H<F> = <F as KvFormat>::Compute;
    let cfg = Pipeline::<F, D>::CFG;
    let kt = cfg.keys_per_stage;
    let tiles = kt / KEYS_PER_WARP_STEP;
    // Output dim tiles: one group of `npw` warps covers them all; `ks`
    // groups split the keys (ks > 1 only when D / 16 < 8).
    let np_total = (D / 16) as u32;
    let npw = if np_total >= 8 { 8 } else { np_total };
    let ks = 8 / npw;

    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let lane = tid % 32;
    let w = tid / 32;
    let (g, c) = (lane / 4, lane % 4);

    let item = *(p.work as *const WorkItem).add(thread::block_idx_x() as usize);
    let kvh = thread::block_idx_y();
    let row0 = thread::block_idx_z() * p.rows_per_block;
    let batch = item.batch;
    let seq_len = *(p.seq_lens as *const u32).add(batch as usize);

    let smem = shared::dynamic_smem_base();
    let q_conv = const { q_converted(F::FORMAT) };
    let q_tile = smem + cfg.pipeline_bytes();
    let q_scales = q_tile + COOP_ROWS * (D as u32) * 2;
    let p_buf = q_tile + const { q_tile_bytes(F::FORMAT, D as u32, 1, Variant::Coop) };
    let max_buf = p_buf + tiles * NR as u32 * 32 * 8;
    let m_smem = max_buf + 4 * COOP_WARPS * COOP_ROWS;
    let alpha_smem = m_smem + 4 * COOP_ROWS;
    let lim_smem = alpha_smem + 4 * COOP_ROWS;
    let pipe = Pipeline::<F, D>::new(p, item, kvh, smem);
    if !q_conv {
        // In the first cp.async group, which the first `advance` waits for.
        stage_q::<D>(p, batch, kvh, row0, COOP_ROWS, q_tile, tid, nthreads);
    }
    pipe.prefetch();
    if q_conv {
        // Visible to all warps after the first `advance`'s barrier.
        convert_q::<F, D>(p, batch, kvh, row0, COOP_ROWS, q_tile, q_scales, w, COOP_WARPS, lane);
    }
    if tid < COOP_ROWS {
        // Each row's causal limit (read only by masked tiles) and empty state.
        shared::st_shared_u32(lim_smem + 4 * tid, row_info(p, &item, seq_len, kvh, row0, tid).limit);
        shared::st_shared_f32(m_smem + 4 * tid, f32::NEG_INFINITY);
    }

    let causal0 = seq_len - p.q_len + 1;
    let mask_from = if causal0 < item.kv_end { causal0 } else { item.kv_end };
    // Qᵀ B fragments of 8-row tile r and k-chunks 2k', 2k'+1: ldmatrix x4 over
    // rows 8r + (lane % 8) (swizzle term lane % 8), chunks 4k' + lane / 8.
    let l8 = lane % 8;
    let q_lane = q_tile + l8 * (D as u32) * 2;

    // o[i][r]: Oᵀ tile of dims v_dim(2np, g) | v_dim(2np + 1, g), np = w % npw + npw·i,
    // × rows 8r + 2c, 8r + 2c + 1. l: those rows' sums over this thread's keys.
    // Every warp computes all 8 row tiles (rows past the last are zeros):
    // no lane-dependent branches around the warp-collective instructions.
    let mut o = [[[0f32; 4]; NR]; DW];
    let mut l = [[0f32; 2]; NR];

    for t in 0..pipe.n_tiles {
        let stage = pipe.advance(t);
        let tile_first = item.kv_start + t * kt;
        let valid_tiles = (item.kv_end - tile_first).div_ceil(KEYS_PER_WARP_STEP).min(tiles);

        // 1. Scores of this warp's key tiles, and its row maxima.
        let mut s = [[[0f32; 4]; NR]; JW];
        let mut wmax = [[f32::NEG_INFINITY; 2]; NR];
        for (jw, sj) in s.iter_mut().enumerate() {
            let j = w + 8 * jw as u32;
            if j >= valid_tiles {
                continue;
            }
            let sub = KEYS_PER_WARP_STEP * j;
            for kp in 0..(KC / 2) as u32 {
                let a0 = F::k_fragment::<D>(pipe.k_tile(stage), sub, 2 * kp, lane);
                let a1 = F::k_fragment::<D>(pipe.k_tile(stage), sub, 2 * kp + 1, lane);
                let chunk = ((4 * kp + lane / 8) ^ l8) << 4;
                for (r, acc) in sj.iter_mut().enumerate() {
                    let q = mma::ldmatrix_x4(q_lane + r as u32 * 16 * D as u32 + chunk);
                    *acc = F::Compute::mma([a0[0], a0[2], a0[1], a0[3]], [q[0], q[1]], *acc);
                    *acc = F::Compute::mma([a1[0], a1[2], a1[1], a1[3]], [q[2], q[3]], *acc);
                }
            }
            let kscale = if F::SCALED {
                let at = |k: u32| shared::ld_shared_f32(pipe.k_side(stage) + 4 * (sub + k));
                [at(g), at(g + 8)]
            } else {
                [1.0; 2]
            };
            let key0 = tile_first + sub;
            let masked = key0 + KEYS_PER_WARP_STEP > mask_from;
            for (r, acc) in sj.iter_mut().enumerate() {
                let row = 8 * r as u32 + 2 * c;
                let qs = if q_conv { shared::ld_shared_v2_f32(q_scales + 4 * row) } else { [1.0; 2] };
                let sc = [p.scale_log2 * qs[0], p.scale_log2 * qs[1]];
                *acc = [acc[0] * sc[0] * kscale[0], acc[1] * sc[1] * kscale[0], acc[2] * sc[0] * kscale[1], acc[3] * sc[1] * kscale[1]];
                if masked {
                    #[allow(clippy::needless_range_loop)] // constant indices keep `acc` in registers
                    for e in 0..4 {
                        let key = key0 + g + 8 * (e as u32 / 2);
                        if key >= shared::ld_shared_u32(lim_smem + 4 * (row + e as u32 % 2)) {
                            acc[e] = f32::NEG_INFINITY;
                        }
                    }
                }
                wmax[r] = [wmax[r][0].max(acc[0].max(acc[2])), wmax[r][1].max(acc[1].max(acc[3]))];
            }
        }
        for (r, mx) in wmax.iter_mut().enumerate() {
            *mx = [warp::column_max(mx[0]), warp::column_max(mx[1])];
            if g == 0 {
                shared::st_shared_v2_f32(max_buf + 4 * (w * COOP_ROWS + 8 * r as u32 + 2 * c), *mx);
            }
        }
        thread::sync_threads();
        // The stage's max per row, one thread per row.
        if tid < COOP_ROWS {
            let old = shared::ld_shared_f32(m_smem + 4 * tid);
            let mut mx = old;
            for k in 0..COOP_WARPS {
                mx = mx.max(shared::ld_shared_f32(max_buf + 4 * (k * COOP_ROWS + tid)));
            }
            shared::st_shared_f32(m_smem + 4 * tid, mx);
            shared::st_shared_f32(alpha_smem + 4 * tid, state::rescale(old, mx));
        }
        thread::sync_threads();

        // P of this warp's key tiles, as B fragments in shared memory.
        let mut alpha = [[1f32; 2]; NR];
        let mut base = [[0f32; 2]; NR];
        for r in 0..NR {
            let row = 8 * r as u32 + 2 * c;
            alpha[r] = shared::ld_shared_v2_f32(alpha_smem + 4 * row);
            let m = shared::ld_shared_v2_f32(m_smem + 4 * row);
            base[r] = [state::safe_max(m[0]), state::safe_max(m[1])];
            l[r] = [l[r][0] * alpha[r][0], l[r][1] * alpha[r][1]];
        }
        for (jw, sj) in s.iter().enumerate() {
            let j = w + 8 * jw as u32;
            if j >= valid_tiles {
                continue;
            }
            let sub = KEYS_PER_WARP_STEP * j;
            let vscale = if F::SCALED {
                let at = |k: u32| shared::ld_shared_f32(pipe.v_side(stage) + 4 * (sub + k));
                [at(g), at(g + 8)]
            } else {
                [1.0; 2]
            };
            for (r, acc) in sj.iter().enumerate() {
                let pv = [ex2(acc[0] - base[r][0]), ex2(acc[1] - base[r][1]), ex2(acc[2] - base[r][0]), ex2(acc[3] - base[r][1])];
                l[r] = [l[r][0] + pv[0] + pv[2], l[r][1] + pv[1] + pv[3]];
                // (key g | rows 2c, 2c+1) pairs, transposed: (row g | keys 2c, 2c+1).
                let lo = mma::movmatrix_trans(H::<F>::pack(pv[0] * vscale[0], pv[1] * vscale[0]));
                let hi = mma::movmatrix_trans(H::<F>::pack(pv[2] * vscale[1], pv[3] * vscale[1]));
                shared::st_shared_v2_u32(p_buf + 8 * ((j * NR as u32 + r as u32) * 32 + lane), [lo, hi]);
            }
        }
        thread::sync_threads();

        // 2. This warp's output dims over every key of the stage.
        for oi in o.iter_mut() {
            for (r, acc) in oi.iter_mut().enumerate() {
                *acc = [acc[0] * alpha[r][0], acc[1] * alpha[r][1], acc[2] * alpha[r][0], acc[3] * alpha[r][1]];
            }
        }
        let mut j = w / npw;
        while j < valid_tiles {
            let mut pb = [[0u32; 2]; NR];
            for (r, b) in pb.iter_mut().enumerate() {
                *b = shared::ld_shared_v2_u32(p_buf + 8 * ((j * NR as u32 + r as u32) * 32 + lane));
            }
            for (i, oi) in o.iter_mut().enumerate() {
                let np = w % npw + npw * i as u32;
                let b = F::v_fragment::<D>(pipe.v_tile(stage), KEYS_PER_WARP_STEP * j, np, lane);
                let a = [b[0], b[2], b[1], b[3]];
                for (r, acc) in oi.iter_mut().enumerate() {
                    *acc = F::Compute::mma(a, pb[r], *acc);
                }
            }
            j += ks;
        }
    }
    pipe.drain();

    // Row sums of each warp, then each warp's dims (key-split groups add in
    // turn), then 1/l and the lse per row.
    let rows_total = p.group * p.q_len;
    let rows_here = if rows_total - row0 < p.rows_per_block { rows_total - row0 } else { p.rows_per_block };
    let pitch = acc_pitch(D as u32);
    let acc_rows = smem;
    let l_smem = acc_rows + 4 * COOP_ROWS * pitch;
    let fin_smem = l_smem + 4 * COOP_WARPS * COOP_ROWS;
    for (r, lr) in l.iter().enumerate() {
        let sums = [warp::column_sum(lr[0]), warp::column_sum(lr[1])];
        if g == 0 {
            shared::st_shared_v2_f32(l_smem + 4 * (w * COOP_ROWS + 8 * r as u32 + 2 * c), sums);
        }
    }
    for k in 0..ks {
        if w / npw == k {
            for (i, oi) in o.iter().enumerate() {
                let np = w % npw + npw * i as u32;
                for half in 0..2 {
                    let dim = F::v_dim(2 * np + half as u32, g);
                    for (r, acc) in oi.iter().enumerate() {
                        for e in 0..2 {
                            let row = 8 * r as u32 + 2 * c + e as u32;
                            if row < rows_here {
                                let addr = acc_rows + 4 * (row * pitch + dim);
                                let mut v = acc[2 * half + e];
                                if k > 0 {
                                    v += shared::ld_shared_f32(addr);
                                }
                                shared::st_shared_f32(addr, v);
                            }
                        }
                    }
                }
            }
        }
        thread::sync_threads();
    }
    // m_smem is past the pipeline and the epilogue's rows: still intact.
    if tid < rows_here {
        let mut total = 0f32;
        for k in 0..COOP_WARPS {
            total += shared::ld_shared_f32(l_smem + 4 * (k * COOP_ROWS + tid));
        }
        let (inv_l, lse) = state::finish(shared::ld_shared_f32(m_smem + 4 * tid), total);
        shared::st_shared_v2_f32(fin_smem + 8 * tid, [inv_l, lse]);
    }
    thread::sync_threads();
    write_rows::<F, D>(p, &item, kvh, row0, acc_rows, pitch, fin_smem);
}
