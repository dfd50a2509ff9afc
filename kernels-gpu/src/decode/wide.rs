//! The `Wide` family: query rows along mma M (the module docs of
//! `decode` describe the block).

use decode_attn_abi::{has_capacity_twin, q_converted, q_in_smem, tile_config, DecodeParams, Family, WorkItem, DIRECT_OUTPUT, KEYS_PER_WARP_STEP, MAX_WARPS, MMA_M};

use super::block::{block_item, block_kv_head, block_work, capacity_len, keep_first_key, keep_item, keep_seq_len, kept_batch, kept_first_key, mask_from, qo_row_addr, row_pair};
use super::epilogue::epilogue;
use super::pipeline::{self, Pipeline};
use super::query::{convert_q, q_fragment, stage_q};
use crate::arch::{math::ex2, memory, shared, thread, warp};
use crate::format::{Half, KvFormat};
use crate::state;
use crate::variant::{self, AttentionVariant, Rows};
use decode_attn_abi::{capacity_work_item, div_rem};

/// # Safety
/// Launched by the host with the grid, block and shared memory the planner
/// computed for these params (see the module docs), on buffers it validated.
#[inline(always)]
pub unsafe fn decode_wide<F: KvFormat, V: AttentionVariant, const D: usize, const KC: usize, const NT: usize, const PAGED: bool, const CLUSTER: bool, const GUESS: bool>(p: &DecodeParams) {
    const { assert!(KC * 16 == D && NT * 8 == D && KC % 2 == 0 && NT % 4 == 0) };
    // The guess (below) is for strided 16-bit caches whose Q is in
    // registers: a Q staged in shared memory would be copied after the
    // guessed stages, outside the first wait's groups.
    const { assert!(!GUESS || (has_capacity_twin(F::FORMAT, D as u32, Family::Wide, PAGED, CLUSTER) && !V::WINDOW && !V::SINKS)) };
    let cfg = const { tile_config(F::FORMAT, D as u32, Family::Wide) };

    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let lane = tid % 32;
    let warp = tid / 32;
    let warp_m = warp % p.warps_m;
    let warp_k = warp / p.warps_m;

    // Capacity kernels (`GUESS`: the table's `Capacity` entries, which the
    // host launches for capacity plans of device lengths): a sequence's
    // first chunk starts at key 0 whatever the sequence's device length,
    // so its block issues its first stages for the chunk at full capacity
    // before that length arrives (rows below the capacity are in bounds),
    // and zeroes the copied rows past the real end as they land
    // (`Pipeline::advance_guessed`). Without it every block of a CUDA-graph
    // step waited for its length's round trip before its first copy,
    // which planned launches of equal lengths no longer do
    // (`plan::uniform_work`). In the planned launches' kernels the same
    // code cost 0.2-0.4 µs on grid D, hence separate entry points
    // (docs/perf.md, "Capacity twins").
    let (guessed_end, work) = if GUESS && p.chunks_per_seq != 0 && p.seq_lens != 0 {
        let x = block_item::<false>(p, thread::block_idx_x_fresh());
        let (seq, chunk) = div_rem(x, p.chunks_per_seq);
        if chunk == 0 {
            // The length's load first, its use after the copies: issued
            // behind them it came back behind their bytes (bf16 D (64,
            // 128)'s graph replay +3 µs, docs/perf.md, "Capacity twins").
            let len = capacity_len(p.seq_lens, seq, p.max_seq_len);
            let end = p.chunk_keys.min(p.max_seq_len);
            let guess = WorkItem { batch: seq, kv_start: 0, kv_end: end, partial_slot: DIRECT_OUTPUT };
            Pipeline::<F, D, PAGED, true, CLUSTER, false>::new(p, guess, block_kv_head::<CLUSTER>(p), shared::dynamic_smem_base()).prefetch();
            (end, capacity_work_item(x, len, p.q_len, p.chunk_keys, p.chunks_per_seq).map(|item| (item, len, 0)))
        } else {
            (0, block_work::<V, CLUSTER>(p))
        }
    } else {
        (0, block_work::<V, CLUSTER>(p))
    };
    V::prefetch_heads(p);
    let Some((item, seq_len, seq_first)) = work else {
        // (A sequence shorter than its new tokens: no work, but the guessed
        // copies must land before the block's shared memory is released.)
        if guessed_end != 0 {
            memory::cp_async_wait::<0>();
        }
        return;
    };
    keep_item(p, &item, tid);
    keep_first_key::<V>(p, seq_first, tid);
    let batch = item.batch;
    let kvh = block_kv_head::<CLUSTER>(p);
    let row0 = thread::block_idx_z() * p.rows_per_block;

    let g = lane / 4;
    let c2 = (lane % 4) * 2;

    let smem = shared::dynamic_smem_base();
    // Q as mma A fragments: in registers, loaded once (missing rows are
    // zeros); for large head dims staged in shared memory instead and read
    // with ldmatrix at each step, leaving the registers to the O accumulator.
    // Formats that compute in another type convert Q into the shared tile
    // first (after the pipeline's first loads are in flight).
    let q_conv = const { q_converted(F::FORMAT) };
    let q_smem = const { q_in_smem(D as u32) };
    let q_tile = smem + pipeline::Pipeline::<F, D, PAGED, true, CLUSTER, false>::region_bytes(p);
    let q_scales = q_tile + p.warps_m * MMA_M * (D as u32) * 2;
    if !q_conv && q_smem {
        stage_q::<D>(p, batch, kvh, row0, q_tile, tid, nthreads);
    }
    // The rows' key limits wait for the sequence's length, a load behind
    // the work item's: computed before the first copies, a branch on them
    // held every warp's copies back by that load's round trip
    // (docs/perf.md, "Block prologue"), so the kernels of 16-bit caches
    // compute them after, and Q's register loads with them (issued before
    // the copies, with the rows' divisions, they measured D (1, 1K) 0.4 µs
    // slower). (Converting kernels keep the rows first: later, the held
    // values took the d256 int4 cluster kernel past 255 registers.)
    let rows = || row_pair(p, &item, seq_len, kvh, row0, warp_m * MMA_M + g);
    let early_rows = q_conv.then(rows);

    let pipe = Pipeline::<F, D, PAGED, true, CLUSTER, false>::new(p, item, kvh, smem);
    if guessed_end == 0 {
        pipe.prefetch();
    }
    keep_seq_len::<CLUSTER>(p, seq_len, tid);

    let [ra, rb] = early_rows.unwrap_or_else(rows);
    let mut qf = [[0u32; 4]; KC];
    if !q_conv && !q_smem {
        // (convert_q fills the tile of converted formats below.)
        let qa_addr = qo_row_addr::<D>(p.q, p, batch, ra.token, ra.head);
        let qb_addr = qo_row_addr::<D>(p.q, p, batch, rb.token, rb.head);
        let load_q = |valid: bool, addr: u64, dim: u32| if valid { memory::ld_global_nc_u32(addr + dim as u64 * 2) } else { 0 };
        for (kc, f) in qf.iter_mut().enumerate() {
            let d = kc as u32 * 16 + c2;
            *f = [load_q(ra.valid, qa_addr, d), load_q(rb.valid, qb_addr, d), load_q(ra.valid, qa_addr, d + 8), load_q(rb.valid, qb_addr, d + 8)];
        }
    }

    // Per-row factors of the scores: the softmax scale (base 2), times the
    // power of two a converted Q row was scaled down by.
    let (mut scale_a, mut scale_b) = (V::score_scale(p), V::score_scale(p));
    if q_conv {
        convert_q::<F, D>(p, batch, kvh, row0, p.warps_m * MMA_M, q_tile, q_scales, warp, nthreads / 32, lane);
        thread::sync_threads();
        scale_a *= shared::ld_shared_f32(q_scales + 4 * (warp_m * MMA_M + g));
        scale_b *= shared::ld_shared_f32(q_scales + 4 * (warp_m * MMA_M + g + 8));

    }

    let mask_from = mask_from::<V>(p, &item, seq_len);

    let mut o = [[0f32; 4]; NT];
    let (mut m_a, mut m_b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    let (mut l_a, mut l_b) = (0f32, 0f32);

    let kt = cfg.keys_per_stage;
    // (A closure-taking loop helper shared with the other family cost the
    // narrow int4 kernel 34 registers; the loop stays written out.)
    for t in 0..pipe.n_tiles {
        let stage = pipe.advance_guessed(t, guessed_end);
        let tile_first = item.kv_start + t * kt;
        let mut sub = warp_k * KEYS_PER_WARP_STEP;
        while sub < kt && tile_first + sub < item.kv_end {
            let key0 = tile_first + sub;
            // S = Q Kᵀ for 16 keys: two n8 tiles.
            let mut s = [[0f32; 4]; 2];
            for kp in 0..KC / 2 {
                let pair = F::k_fragment_pair::<D>(pipe.k_tile(stage), sub, kp as u32, lane);
                for (h, b) in pair.iter().enumerate() {
                    let kc = 2 * kp + h;
                    // Converted Q stays in shared memory too: its registers go
                    // to the dequantization instead.
                    let qk = if q_smem || q_conv { q_fragment::<D>(q_tile, warp_m, kc as u32, lane) } else { qf[kc] };
                    s[0] = F::Compute::mma(qk, [b[0], b[1]], s[0]);
                    s[1] = F::Compute::mma(qk, [b[2], b[3]], s[1]);
                }
            }
            // Per-key scales of this thread's keys sub + c2 + {0, 1, 8, 9}
            // (quantized formats): K's multiply the scores, V's multiply P.
            let (kscale, vscale) = if F::SCALED {
                let at = #[inline(always)] |side: u32, n: u32| shared::ld_shared_v2_f32(side + 4 * (sub + 8 * n + c2));
                ([at(pipe.k_scales(stage), 0), at(pipe.k_scales(stage), 1)], [at(pipe.v_scales(stage), 0), at(pipe.v_scales(stage), 1)])
            } else {
                ([[1.0; 2]; 2], [[1.0; 2]; 2])
            };
            // The logits (`variant::logits`): keys `8n + c2 + {0, 1}` of
            // each tile, rows a (elements 0, 1) and b (2, 3); the
            // sequence's first key and item from shared memory
            // (`keep_first_key`, `kept_batch`).
            let rows = Rows { tokens: [ra.token, rb.token], heads: [ra.head, rb.head], limits: [ra.limit, rb.limit], seq_len, mask_from };
            let at = #[inline(always)] |n: usize, e: usize| (key0 + n as u32 * 8 + c2 + (e as u32 & 1), e / 2);
            let scale = #[inline(always)] |n: usize, e: usize| {
                let row_scale = if e < 2 { scale_a } else { scale_b };
                if F::SCALED { row_scale * kscale[n][e & 1] } else { row_scale }
            };
            variant::logits::<V, variant::Fused, 2, 4>(p, &mut s, key0, KEYS_PER_WARP_STEP, &rows, #[inline(always)] || kept_first_key::<V>(p), #[inline(always)] || kept_batch(p), at, scale);

            // (Formats whose P carries V's scales: the base covers them,
            // `state::scale_exponent`.)
            let e = if F::SCALED { state::scale_exponent(vscale[0][0].max(vscale[0][1]).max(vscale[1][0].max(vscale[1][1]))) } else { 0.0 };
            let mx_a = warp::quad_max(s[0][0].max(s[0][1]).max(s[1][0]).max(s[1][1]) + e);
            let mx_b = warp::quad_max(s[0][2].max(s[0][3]).max(s[1][2]).max(s[1][3]) + e);
            let moved = state::warp_must_move([m_a, m_b], [mx_a, mx_b], F::RESCALE_SLACK);
            let (alpha_a, base_a) = state::advance_if(&mut m_a, mx_a, moved);
            let (alpha_b, base_b) = state::advance_if(&mut m_b, mx_b, moved);
            for tile in s.iter_mut() {
                tile[0] = ex2(tile[0] - base_a);
                tile[1] = ex2(tile[1] - base_a);
                tile[2] = ex2(tile[2] - base_b);
                tile[3] = ex2(tile[3] - base_b);
            }
            l_a = l_a * alpha_a + (s[0][0] + s[0][1] + s[1][0] + s[1][1]);
            l_b = l_b * alpha_b + (s[0][2] + s[0][3] + s[1][2] + s[1][3]);
            if moved {
                state::rescale_rows(&mut o, [alpha_a, alpha_b]);
            }
            if F::SCALED {
                #[allow(clippy::needless_range_loop)]
                for n in 0..2 {
                    for e in 0..4 {
                        s[n][e] *= vscale[n][e & 1];
                    }
                }
            }

            // P (C layout of two n8 tiles) is exactly an A fragment of m16k16.
            type H<F> = <F as KvFormat>::Compute;
            let pa = [
                H::<F>::pack(s[0][0], s[0][1]),
                H::<F>::pack(s[0][2], s[0][3]),
                H::<F>::pack(s[1][0], s[1][1]),
                H::<F>::pack(s[1][2], s[1][3]),
            ];
            for mp in 0..NT / 4 {
                let pair = F::v_fragment_pair::<D>(pipe.v_tile(stage), sub, mp as u32, lane);
                for (h, b) in pair.iter().enumerate() {
                    let np = 2 * mp + h;
                    o[2 * np] = F::Compute::mma(pa, [b[0], b[1]], o[2 * np]);
                    o[2 * np + 1] = F::Compute::mma(pa, [b[2], b[3]], o[2 * np + 1]);
                }
            }
            sub += p.warps_k * KEYS_PER_WARP_STEP;
        }
    }
    pipe.drain();

    let rows = [ra, rb];
    let store = |acc: u32, pitch: u32, scale: [f32; 2], add: bool, live: [bool; 2]| {
        if F::V_DIMS_INTERLEAVED {
            // Tiles 2m / 2m+1 hold the even / odd dims of 16m..16m+16:
            // this thread's four are the consecutive dims 16m + 4c ..+4.
            for m in 0..NT / 2 {
                let (even, odd) = (&o[2 * m], &o[2 * m + 1]);
                for (r, row) in rows.iter().enumerate() {
                    if !CLUSTER && !live[r] {
                        continue;
                    }
                    let addr = acc + 4 * (row.local * pitch + 16 * m as u32 + 4 * (lane % 4));
                    let sc = scale[r];
                    let mut v = [even[2 * r] * sc, odd[2 * r] * sc, even[2 * r + 1] * sc, odd[2 * r + 1] * sc];
                    if add {
                        let old = shared::ld_shared_v4_f32(addr);
                        v = [v[0] + old[0], v[1] + old[1], v[2] + old[2], v[3] + old[3]];
                    }
                    shared::st_shared_v4_f32(addr, v);
                }
            }
        } else {
            for (nt, frag) in o.iter().enumerate() {
                for (r, row) in rows.iter().enumerate() {
                    if !CLUSTER && !live[r] {
                        continue;
                    }
                    let addr = acc + 4 * (row.local * pitch + F::o_pair(nt as u32, lane % 4));
                    let mut v = [frag[2 * r] * scale[r], frag[2 * r + 1] * scale[r]];
                    if add {
                        let old = shared::ld_shared_v2_f32(addr);
                        v[0] += old[0];
                        v[1] += old[1];
                    }
                    shared::st_shared_v2_f32(addr, v);
                }
            }
        }
    };
    let (l_a, l_b) = (warp::quad_sum(l_a), warp::quad_sum(l_b));
    epilogue::<F, V, D, CLUSTER, { MAX_WARPS as usize }, 1, 1>(p, row0, warp_k, lane % 4 == 0, rows, [m_a, m_b], [l_a, l_b], smem, store);
}
