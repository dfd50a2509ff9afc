//! The end of a block: the row states of its warps combined, the
//! accumulators summed in shared memory, and its rows written to O (or, for
//! a split sequence, to its partial slot, merged by the last block, the
//! merge kernel or the cluster).

use decode_attn_abi::{acc_pitch, div_rem, DecodeParams, DIRECT_OUTPUT, MMA_M, NARROW_ROWS};

use super::block::{block_first_head, qo_row_addr, rows_here, token_head, RowInfo};
use super::cluster;
use crate::arch::{memory, shared, thread};
use crate::format::{Half, KvFormat};
use crate::state;
use crate::variant::AttentionVariant;

/// Output quads per round of the wgmma kernels' output loop (`epilogue`).
pub(crate) const OUT_BATCH: usize = 4;

/// [`OUT_BATCH`] of the warp-specialised wgmma kernels. Their 384 threads
/// take grid B's 48 rows' quads in one round of 4, whose 8.7 KB of code
/// each warp runs once: Nsight Compute counted 8.5 % of int8 (16K, 16)'s
/// warp samples waiting on instruction fetch there. Two rounds of 2 (the
/// second from the instruction cache) measured 0.2-0.6 µs faster on the
/// grid B rows they run, one quad a round 1-1.5 µs slower on int4-g32
/// (docs/perf.md, "Epilogue").
pub(crate) const SPECIALIZED_OUT_BATCH: usize = 2;

/// Merges the `warps_k` states of each row in shared memory (the pipeline's
/// buffers are free now) and writes the block's rows. Each thread holds two
/// rows' states (`m`, `l`: equal on every lane that holds the row, the
/// `publisher` lanes write them); `store(acc, pitch, scale, add, live)` writes
/// (or adds) its accumulators, times each row's `scale`, into the fp32 rows
/// at `acc`, which have `pitch` floats, for the rows that are `live` (rows
/// past the block's last are never read: an MHA block's 16-row tile holds
/// one).
///
/// `HG` > 1: a narrow block of `HG` adjacent kv heads. Head `s`'s rows are
/// the block's rows `8 s ..` (`RowInfo::local`; the 16-row tile of the
/// narrow kernel has room for two heads' 8), `warp_k` and `p.warps_k`
/// count one head's warps, and the block writes its outputs directly (the
/// planner gives head pairs unsplit work only).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn epilogue<F: KvFormat, V: AttentionVariant, const D: usize, const CLUSTER: bool, const WARPS_K: usize, const OUT_BATCH: usize, const HG: u32>(
    p: &DecodeParams,
    row0: u32,
    warp_k: u32,
    publisher: bool,
    rows: [RowInfo; 2],
    m: [f32; 2],
    l: [f32; 2],
    smem: u32,
    store: impl Fn(u32, u32, [f32; 2], bool, [bool; 2]),
) {
    const { assert!(HG == 1 || (!CLUSTER && OUT_BATCH == 1 && HG * NARROW_ROWS <= MMA_M)) };
    let tid = thread::thread_idx_x();
    let nthreads = thread::block_dim_x();
    let block_rows = p.warps_m * MMA_M;
    let pitch = acc_pitch(D as u32);
    let acc = smem;
    let m_smem = acc + 4 * block_rows * pitch;
    let l_smem = m_smem + 4 * p.warps_k * block_rows;
    let fin_smem = l_smem + 4 * p.warps_k * block_rows;

    // Where the block's shared memory has room for one slice per warp past
    // the row states (it is free after the key loop), every warp stores its
    // tile at once and the output loop adds the slices in warp order, the
    // same sums as one warp at a time, with one barrier instead of
    // `warps_k` (the cluster kernels keep the loop: their merge reads one
    // summed tile).
    let slice = if HG == 1 { p.rows_per_block * pitch } else { block_rows * pitch };
    let slices = fin_smem + 8 * block_rows;
    let parallel = !CLUSTER && p.warps_k > 1 && slices + 4 * (p.warps_k - 1) * slice <= smem + p.item_smem;
    let slice_at = |k: u32| if k == 0 { acc } else { slices + 4 * (k - 1) * slice };
    // `fused` (the wide and narrow kernels, up to 8 warps along K, with
    // every slice in room): each warp stores its accumulator unscaled beside
    // its row states, and the output loop combines the states of its row
    // and scales the slices itself (the same factors, products and sums in
    // the same order). The `!fused` pass — every thread combining both its
    // rows' states between two barriers before the stores — took 0.4 µs of
    // a D (64, 128) block's 1.2 µs epilogue (per-block timestamps); fused,
    // the small 16-bit rows ran 0.1-0.3 µs and narrow int4 grid A 1 %
    // faster (docs/perf.md, "Epilogue").
    // The wgmma kernels (two warpgroups, `OUT_BATCH` quads a round) take
    // the fused path too, batched; the unspecialised quantized ones (one
    // quad a round at their 128-register cap) keep the states pass.
    let fused = (WARPS_K > 2 || OUT_BATCH > 1) && parallel;
    // A per-tensor format's V scale joins each row's `1 / l` (1 otherwise):
    // every written row, partial or final, is `acc · (1 / l)`.
    let v_scale = F::tensor_scales(p).1;

    if publisher {
        for (r, row) in rows.iter().enumerate() {
            shared::st_shared_f32(m_smem + 4 * (warp_k * block_rows + row.local), m[r]);
            shared::st_shared_f32(l_smem + 4 * (warp_k * block_rows + row.local), l[r]);
        }
    }
    let mut my_scale = [1f32; 2];
    if !fused {
        thread::sync_threads();

        // Each thread merges its two rows' states over warps_k (no sync). With
        // up to 8 warps along K (the wide and narrow kernels) every warp's
        // (m, l) of both rows is loaded first (an unrolled loop), then
        // combined: loaded where they were combined, each load's latency was
        // waited out in turn, 0.6-0.8 µs of every block's epilogue
        // (docs/perf.md, "Epilogue"); slots past `warps_k` stay
        // (-inf, 0), which add nothing. The wgmma kernels (2 warpgroups) keep
        // the loop: their quantized ones, at 128 registers, spilled with the
        // states loaded first.
        let mut ms = [[f32::NEG_INFINITY; WARPS_K]; 2];
        let mut ls = [[0f32; WARPS_K]; 2];
        if WARPS_K > 2 {
            for k in 0..WARPS_K {
                if (k as u32) < p.warps_k {
                    for (r, row) in rows.iter().enumerate() {
                        let at = 4 * (k as u32 * block_rows + row.local);
                        ms[r][k] = shared::ld_shared_f32(m_smem + at);
                        ls[r][k] = shared::ld_shared_f32(l_smem + at);
                    }
                }
            }
        }
        for (r, row) in rows.iter().enumerate() {
            let (big_m, big_l) = if WARPS_K > 2 {
                let big_m = ms[r].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                (big_m, (0..WARPS_K).fold(0f32, |acc, k| acc + ls[r][k] * state::rescale(ms[r][k], big_m)))
            } else {
                let mut big_m = f32::NEG_INFINITY;
                for k in 0..p.warps_k {
                    big_m = big_m.max(shared::ld_shared_f32(m_smem + 4 * (k * block_rows + row.local)));
                }
                let mut big_l = 0f32;
                for k in 0..p.warps_k {
                    let mk = shared::ld_shared_f32(m_smem + 4 * (k * block_rows + row.local));
                    big_l += shared::ld_shared_f32(l_smem + 4 * (k * block_rows + row.local)) * state::rescale(mk, big_m);
                }
                (big_m, big_l)
            };
            my_scale[r] = state::rescale(m[r], big_m);
            if warp_k == 0 && publisher {
                let (inv_l, lse) = state::finish(big_m, big_l);
                shared::st_shared_v2_f32(fin_smem + 8 * row.local, [inv_l * v_scale, lse]);
            }
        }
    }

    // Sum the warps' rescaled accumulators (deterministically, in warp
    // order), storing only the block's live rows. The cluster kernels store
    // every row and compute nothing for the test (hence `!CLUSTER &&` in the
    // `store` closures too): with it, ptxas allocated the whole narrow
    // int4-g32 cluster kernel's registers differently and grid A B=128 ran
    // 3 % slower, its key loop unchanged; its rows are all live there.
    let live = if CLUSTER {
        [true; 2]
    } else {
        let rows_here = rows_here(p, row0);
        // (A head pair's second head's rows are 8 on: its row within the head.)
        let in_head = |local: u32| if HG == 1 { local } else { local % NARROW_ROWS };
        [in_head(rows[0].local) < rows_here, in_head(rows[1].local) < rows_here]
    };
    // (One call of `store`: a second one left the closure out of line and
    // the accumulators in local memory.)
    let rounds = if parallel { 1 } else { p.warps_k };
    for k in 0..rounds {
        if parallel || warp_k == k {
            let (at, add) = if parallel { (slice_at(warp_k), false) } else { (acc, k > 0) };
            store(at, pitch, my_scale, add, live);
        }
        thread::sync_threads();
    }

    // The work item's sequence and partial slot (`keep_item`).
    let [batch, partial_slot] = shared::ld_shared_v2_u32(smem + p.item_smem);
    let kvh = block_first_head::<CLUSTER, HG>(p);
    let rows_here = rows_here(p, row0);
    // Output row `i` (of `HG · rows_here`): its head's index in the block
    // and its row in that head.
    let head_row = |i: u32| if HG == 1 { (0, i) } else { div_rem(i, rows_here) };
    if CLUSTER && partial_slot != DIRECT_OUTPUT {
        let seq_len = shared::ld_shared_u32(smem + p.item_smem + 8);
        let rows = cluster::BlockRows { acc, pitch, fin: fin_smem, row0, rows_here, kvh, batch };
        cluster::merge_in_cluster::<F::Query, D>(p, &rows, seq_len);
        return;
    }
    // A merge kernel launched after this grid (programmatic dependent
    // launch) may be scheduled once every block got here: its blocks then
    // take the SMs this grid's blocks leave, with no launch gap, and wait
    // for the partials themselves (`griddepcontrol.wait`). (Triggered at
    // block start instead, the merge blocks were packed onto the few SMs
    // free at that moment: grid B (128K, 2) +4 µs, docs/perf.md, "Merge
    // kernel".)
    if !CLUSTER {
        thread::launch_dependents();
    }
    // The output loop takes `OUT_BATCH` of the thread's quads per round and
    // issues all their shared-memory loads (the accumulator, every warp's
    // slice, the row's finish) before using any: one quad at a time, each
    // round waited out its loads' latency in turn (the per-block
    // timestamps: 1.5 µs of grid B's 2.6 µs epilogue; docs/perf.md,
    // "Epilogue"). The wgmma kernels (48-64 rows
    // a block, 6-8 quads a thread) take 4; the wide and narrow ones (1-16
    // live rows, at most 4 quads a thread) keep the loop as it was (1):
    // with 4 their grid D (64, 128) read 1 µs slower. So do the
    // unspecialised quantized wgmma kernels, which any change to the loop
    // spilled at their 128-register cap.
    let quads_per_row = (D / 4) as u32;
    if fused && OUT_BATCH == 1 {
        let mut idx = tid;
        while idx < HG * rows_here * quads_per_row {
            let (slot, row) = head_row(idx / quads_per_row);
            let r = slot * NARROW_ROWS + row;
            let c = (idx % quads_per_row) * 4;
            // The row's states, every load issued before any use (slots
            // past `warps_k` stay (-inf, 0): factor 0, adding nothing).
            let mut ms = [f32::NEG_INFINITY; WARPS_K];
            let mut ls = [0f32; WARPS_K];
            for k in 0..WARPS_K {
                if (k as u32) < p.warps_k {
                    ms[k] = shared::ld_shared_f32(m_smem + 4 * (k as u32 * block_rows + r));
                    ls[k] = shared::ld_shared_f32(l_smem + 4 * (k as u32 * block_rows + r));
                }
            }
            let at = 4 * (r * pitch + c);
            let (v, fin) = combine_slices(p.warps_k, &ms, &ls, |k| shared::ld_shared_v4_f32(slice_at(k as u32) + at));
            let fin = [fin[0] * v_scale, fin[1]];
            emit_quad::<F, V, D>(p, batch, kvh + slot, row0 + row, partial_slot, c, v, fin);
            idx += nthreads;
        }
    }
    if OUT_BATCH == 1 && !fused {
        let mut idx = tid;
        while idx < HG * rows_here * quads_per_row {
            let (slot, row) = head_row(idx / quads_per_row);
            let r = slot * NARROW_ROWS + row;
            let c = (idx % quads_per_row) * 4;
            let mut v = shared::ld_shared_v4_f32(acc + 4 * (r * pitch + c));
            if parallel {
                for k in 1..p.warps_k {
                    let w = shared::ld_shared_v4_f32(slice_at(k) + 4 * (r * pitch + c));
                    v = [v[0] + w[0], v[1] + w[1], v[2] + w[2], v[3] + w[3]];
                }
            }
            let fin = shared::ld_shared_v2_f32(fin_smem + 8 * r);
            emit_quad::<F, V, D>(p, batch, kvh + slot, row0 + row, partial_slot, c, v, fin);
            idx += nthreads;
        }
    }
    if fused && OUT_BATCH > 1 {
        // As the loop above, `OUT_BATCH` quads a round: every state and
        // slice load of the round issued before any use.
        let total = rows_here * quads_per_row;
        let mut first = tid;
        while first < total {
            let idx = core::array::from_fn::<u32, OUT_BATCH, _>(|u| first + u as u32 * nthreads);
            let (row, col) = (idx.map(|i| i / quads_per_row), idx.map(|i| (i % quads_per_row) * 4));
            let at = core::array::from_fn::<u32, OUT_BATCH, _>(|u| 4 * (row[u] * pitch + col[u]));
            let live = |u: usize| u == 0 || idx[u] < total;
            let mut ms = [[f32::NEG_INFINITY; WARPS_K]; OUT_BATCH];
            let mut ls = [[0f32; WARPS_K]; OUT_BATCH];
            let mut sk = [[[0f32; 4]; WARPS_K]; OUT_BATCH];
            for u in 0..OUT_BATCH {
                if live(u) {
                    for k in 0..WARPS_K {
                        if (k as u32) < p.warps_k {
                            ms[u][k] = shared::ld_shared_f32(m_smem + 4 * (k as u32 * block_rows + row[u]));
                            ls[u][k] = shared::ld_shared_f32(l_smem + 4 * (k as u32 * block_rows + row[u]));
                            sk[u][k] = shared::ld_shared_v4_f32(slice_at(k as u32) + at[u]);
                        }
                    }
                }
            }
            for u in 0..OUT_BATCH {
                if !live(u) {
                    break;
                }
                let (v, fin) = combine_slices(p.warps_k, &ms[u], &ls[u], |k| sk[u][k]);
                let fin = [fin[0] * v_scale, fin[1]];
                emit_quad::<F, V, D>(p, batch, kvh, row0 + row[u], partial_slot, col[u], v, fin);
            }
            first += OUT_BATCH as u32 * nthreads;
        }
    }
    if OUT_BATCH > 1 && !fused {
        let total = rows_here * quads_per_row;
        let mut first = tid;
        while first < total {
            let idx = core::array::from_fn::<u32, OUT_BATCH, _>(|u| first + u as u32 * nthreads);
            let at = idx.map(|i| 4 * ((i / quads_per_row) * pitch + (i % quads_per_row) * 4));
            // (In the order one quad at a time took them: the accumulator, the
            // slices, the finish.)
            let live = |u: usize| u == 0 || idx[u] < total;
            let mut v = [[0f32; 4]; OUT_BATCH];
            for u in 0..OUT_BATCH {
                if live(u) {
                    v[u] = shared::ld_shared_v4_f32(acc + at[u]);
                }
            }
            if parallel {
                for k in 1..p.warps_k {
                    for u in 0..OUT_BATCH {
                        if live(u) {
                            let w = shared::ld_shared_v4_f32(slice_at(k) + at[u]);
                            v[u] = [v[u][0] + w[0], v[u][1] + w[1], v[u][2] + w[2], v[u][3] + w[3]];
                        }
                    }
                }
            }
            let mut fin = [[0f32; 2]; OUT_BATCH];
            for u in 0..OUT_BATCH {
                if live(u) {
                    fin[u] = shared::ld_shared_v2_f32(fin_smem + 8 * (idx[u] / quads_per_row));
                }
            }
            for u in 0..OUT_BATCH {
                if !live(u) {
                    break;
                }
                let (r, c) = (idx[u] / quads_per_row, (idx[u] % quads_per_row) * 4);
                emit_quad::<F, V, D>(p, batch, kvh, row0 + r, partial_slot, c, v[u], fin[u]);
            }
            first += OUT_BATCH as u32 * nthreads;
        }
    }
    if HG == 1 && partial_slot != DIRECT_OUTPUT && p.merge_counters != 0 {
        // The accumulator rows were read above; its first word is free.
        crate::merge::merge_if_last::<F::Query, V, D, CLUSTER>(p, batch, rows_here, acc);
    }
}

/// The fused epilogue's output quad of one row: the warps' row states
/// (`ms`, `ls`; slots past `warps_k` are (-inf, 0)) combined into the
/// row's finish [1 / l, lse], and the warps' unscaled slices of the quad
/// (`slice(k)`, called for `k < warps_k` only) scaled by their factors and
/// added in warp order.
#[inline(always)]
fn combine_slices<const WARPS_K: usize>(warps_k: u32, ms: &[f32; WARPS_K], ls: &[f32; WARPS_K], slice: impl Fn(usize) -> [f32; 4]) -> ([f32; 4], [f32; 2]) {
    let big_m = ms.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let big_l = (0..WARPS_K).fold(0f32, |a, k| a + ls[k] * state::rescale(ms[k], big_m));
    let (inv_l, lse) = state::finish(big_m, big_l);
    let mut v = [0f32; 4];
    for k in 0..WARPS_K {
        if (k as u32) < warps_k {
            let w = state::rescale(ms[k], big_m);
            let s = slice(k);
            let s = [s[0] * w, s[1] * w, s[2] * w, s[3] * w];
            v = if k == 0 { s } else { [v[0] + s[0], v[1] + s[1], v[2] + s[2], v[3] + s[3]] };
        }
    }
    (v, [inv_l, lse])
}

/// One output quad of the epilogue: values `c .. c + 4` of the block's
/// packed row `global` (its accumulator sum `v`, its finish `fin` =
/// [1 / l, lse]), scaled and stored to O, or with the row's lse to the
/// work item's partial slot. Variants with sinks scale a directly written
/// row by the sinks' factor first (`AttentionVariant::sink_factor`, in `1 / l`); a
/// split row's sink enters its merge. (The standard variant's quads are
/// this function as it was before variants: with the factor inside it,
/// LLVM laid out every standard kernel's output branch anew.)
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn emit_quad<F: KvFormat, V: AttentionVariant, const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, global: u32, partial_slot: u32, c: u32, v: [f32; 4], fin: [f32; 2]) {
    if V::SINKS && partial_slot == DIRECT_OUTPUT {
        let head = token_head(p, kvh, global).1;
        let fin = [fin[0] * V::sink_factor(p, head, fin[1]), fin[1]];
        emit_quad_as_is::<F, D>(p, batch, kvh, global, partial_slot, c, v, fin)
    } else {
        emit_quad_as_is::<F, D>(p, batch, kvh, global, partial_slot, c, v, fin)
    }
}

/// [`emit_quad`] without sinks.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn emit_quad_as_is<F: KvFormat, const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, global: u32, partial_slot: u32, c: u32, v: [f32; 4], fin: [f32; 2]) {
    let (token, head) = token_head(p, kvh, global);
    let v = [v[0] * fin[0], v[1] * fin[0], v[2] * fin[0], v[3] * fin[0]];
    if partial_slot == DIRECT_OUTPUT {
        let addr = qo_row_addr::<D>(p.o, p, batch, token, head) + c as u64 * 2;
        type H<F> = <F as KvFormat>::Query;
        memory::st_global_v2_u32(addr, [H::<F>::pack(v[0], v[1]), H::<F>::pack(v[2], v[3])]);
    } else {
        let row = (partial_slot as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64;
        memory::st_global_v4_f32(p.partial_o + 4 * (row * D as u64 + c as u64), v);
        if c == 0 {
            memory::st_global_f32(p.partial_lse + 4 * row, fin[1]);
        }
    }
}
