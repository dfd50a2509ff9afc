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

use decode_attn_abi::{acc_pitch, q_converted, q_tile_bytes, DecodeParams, Variant, WorkItem, COOP_ROWS, COOP_WARPS, KEYS_PER_WARP_STEP};

use super::pipeline::Pipeline;
use super::{convert_q, row_info, stage_q, write_rows};
use crate::arch::{math::ex2, mma, shared, thread, warp};
use crate::format::{swizzled, Half, KvFormat};
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
    const { assert!(KC * 16 == D && COOP_ROWS as usize == 8 * NR && COOP_WARPS == 8) };
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
    let rows_total = p.group * p.q_len;
    let rows_here = if rows_total - row0 < p.rows_per_block { rows_total - row0 } else { p.rows_per_block };
    // n-tiles in use (warp-uniform: the loops below skip the rest).
    let nr = rows_here.div_ceil(8);

    let smem = shared::dynamic_smem_base();
    let q_conv = const { q_converted(F::FORMAT) };
    let q_tile = smem + cfg.pipeline_bytes();
    let q_scales = q_tile + COOP_ROWS * (D as u32) * 2;
    let p_buf = q_tile + const { q_tile_bytes(F::FORMAT, D as u32, 1, Variant::Coop) };
    let max_buf = p_buf + tiles * NR as u32 * 32 * 8;
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

    let causal0 = seq_len - p.q_len + 1;
    let mask_from = if causal0 < item.kv_end { causal0 } else { item.kv_end };

    // o[i][r]: Oᵀ tile of dims v_dim(2np, g) | v_dim(2np + 1, g), np = w % npw + npw·i,
    // × rows 8r + 2c, 8r + 2c + 1. m, l: those rows' state (m equal in every warp;
    // l this thread's keys only).
    let mut o = [[[0f32; 4]; NR]; DW];
    let mut m = [[f32::NEG_INFINITY; 2]; NR];
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
            for kc in 0..KC as u32 {
                let b = F::k_fragment::<D>(pipe.k_tile(stage), sub, kc, lane);
                let a = [b[0], b[2], b[1], b[3]];
                for (r, acc) in sj.iter_mut().enumerate() {
                    if (r as u32) < nr {
                        // Qᵀ B fragment: rows 8r + (lane % 8), dims 16kc + 8·(lane / 8 % 2).
                        let q = mma::ldmatrix_x2(q_tile + swizzled(8 * r as u32 + lane % 8, 2 * kc + (lane / 8) % 2, (D * 2) as u32));
                        *acc = F::Compute::mma(a, q, *acc);
                    }
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
                if (r as u32) >= nr {
                    continue;
                }
                let row = 8 * r as u32 + 2 * c;
                let qs = if q_conv { shared::ld_shared_v2_f32(q_scales + 4 * row) } else { [1.0; 2] };
                #[allow(clippy::needless_range_loop)] // constant indices keep `acc` in registers
                for e in 0..4 {
                    let scale = p.scale_log2 * qs[e % 2] * kscale[e / 2];
                    let key = key0 + g + 8 * (e as u32 / 2);
                    let hidden = masked && key >= row_info(p, &item, seq_len, kvh, row0, row + (e as u32 % 2)).limit;
                    acc[e] = if hidden { f32::NEG_INFINITY } else { acc[e] * scale };
                }
                wmax[r] = [wmax[r][0].max(acc[0].max(acc[2])), wmax[r][1].max(acc[1].max(acc[3]))];
            }
        }
        for (r, mx) in wmax.iter_mut().enumerate() {
            if (r as u32) < nr {
                *mx = [warp::column_max(mx[0]), warp::column_max(mx[1])];
                if g == 0 {
                    shared::st_shared_v2_f32(max_buf + 4 * (w * COOP_ROWS + 8 * r as u32 + 2 * c), *mx);
                }
            }
        }
        thread::sync_threads();

        // The stage's max per row (the same in every warp), then P.
        let mut alpha = [[1f32; 2]; NR];
        let mut base = [[0f32; 2]; NR];
        for r in 0..NR {
            if (r as u32) < nr {
                let mut mx = m[r];
                for k in 0..COOP_WARPS {
                    let v = shared::ld_shared_v2_f32(max_buf + 4 * (k * COOP_ROWS + 8 * r as u32 + 2 * c));
                    mx = [mx[0].max(v[0]), mx[1].max(v[1])];
                }
                alpha[r] = [state::rescale(m[r][0], mx[0]), state::rescale(m[r][1], mx[1])];
                base[r] = [state::safe_max(mx[0]), state::safe_max(mx[1])];
                m[r] = mx;
                l[r] = [l[r][0] * alpha[r][0], l[r][1] * alpha[r][1]];
            }
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
                if (r as u32) < nr {
                    let pv = [ex2(acc[0] - base[r][0]), ex2(acc[1] - base[r][1]), ex2(acc[2] - base[r][0]), ex2(acc[3] - base[r][1])];
                    l[r] = [l[r][0] + pv[0] + pv[2], l[r][1] + pv[1] + pv[3]];
                    // (key g | rows 2c, 2c+1) pairs, transposed: (row g | keys 2c, 2c+1).
                    let lo = mma::movmatrix_trans(H::<F>::pack(pv[0] * vscale[0], pv[1] * vscale[0]));
                    let hi = mma::movmatrix_trans(H::<F>::pack(pv[2] * vscale[1], pv[3] * vscale[1]));
                    shared::st_shared_v2_u32(p_buf + 8 * ((j * NR as u32 + r as u32) * 32 + lane), [lo, hi]);
                }
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
                if (r as u32) < nr {
                    *b = shared::ld_shared_v2_u32(p_buf + 8 * ((j * NR as u32 + r as u32) * 32 + lane));
                }
            }
            for (i, oi) in o.iter_mut().enumerate() {
                let np = w % npw + npw * i as u32;
                let b = F::v_fragment::<D>(pipe.v_tile(stage), KEYS_PER_WARP_STEP * j, np, lane);
                let a = [b[0], b[2], b[1], b[3]];
                for (r, acc) in oi.iter_mut().enumerate() {
                    if (r as u32) < nr {
                        *acc = F::Compute::mma(a, pb[r], *acc);
                    }
                }
            }
            j += ks;
        }
    }
    pipe.drain();

    // Row sums of each warp, then each warp's dims (key-split groups add in
    // turn), then 1/l and the lse per row.
    let pitch = acc_pitch(D as u32);
    let acc_rows = smem;
    let l_smem = acc_rows + 4 * COOP_ROWS * pitch;
    let fin_smem = l_smem + 4 * COOP_WARPS * COOP_ROWS;
    for (r, lr) in l.iter().enumerate() {
        if (r as u32) < nr {
            let sums = [warp::column_sum(lr[0]), warp::column_sum(lr[1])];
            if g == 0 {
                shared::st_shared_v2_f32(l_smem + 4 * (w * COOP_ROWS + 8 * r as u32 + 2 * c), sums);
            }
        }
    }
    for k in 0..ks {
        if w / npw == k {
            for (i, oi) in o.iter().enumerate() {
                let np = w % npw + npw * i as u32;
                for half in 0..2 {
                    let dim = F::v_dim(2 * np + half as u32, g);
                    for (r, acc) in oi.iter().enumerate() {
                        if (r as u32) < nr {
                            for e in 0..2 {
                                let addr = acc_rows + 4 * ((8 * r as u32 + 2 * c + e as u32) * pitch + dim);
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
    if w == 0 && g == 0 {
        for (r, mr) in m.iter().enumerate() {
            if (r as u32) < nr {
                for (e, &me) in mr.iter().enumerate() {
                    let row = 8 * r as u32 + 2 * c + e as u32;
                    let mut total = 0f32;
                    for k in 0..COOP_WARPS {
                        total += shared::ld_shared_f32(l_smem + 4 * (k * COOP_ROWS + row));
                    }
                    let (inv_l, lse) = state::finish(me, total);
                    shared::st_shared_v2_f32(fin_smem + 8 * row, [inv_l, lse]);
                }
            }
        }
    }
    thread::sync_threads();
    write_rows::<F, D>(p, &item, kvh, row0, acc_rows, pitch, fin_smem);
}
