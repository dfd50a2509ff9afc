//! Split-KV merge: `O = Σ 2^(lse_s - M) O_s / Σ 2^(lse_s - M)` over a
//! sequence's normalized fp32 partials `O_s` and their base-2 log-sum-exps,
//! written as the final 16-bit output. An all-masked partial has
//! lse = -inf and weight 0. The sum runs over slots in a fixed order, so
//! results do not depend on which block merges.
//!
//! Two ways, one merge routine (`merge_rows`), the plan picks:
//! - inside the attention kernel (`merge_if_last`): each block of a split
//!   sequence counts itself in its (sequence, kv head, row chunk) counter
//!   after writing its partial, and the block that arrives last merges
//!   those rows. No second launch, and one sequence's merge overlaps the
//!   others' attention; but one block reads every slot of its rows.
//! - the merge kernel (`merge_kernel`), one block per 1–4 output rows (fewer
//!   for more slots), for plans whose merges would make that one block the
//!   tail (many slots of many rows: grid B's 128 splits of 48 rows, 3 MB per
//!   block). The host launches it as a programmatic dependent of the
//!   attention kernel, whose blocks execute `griddepcontrol.launch_dependents`
//!   before writing their rows: the merge blocks are scheduled as the
//!   attention blocks finish, with no launch gap, and wait for the partials
//!   with `griddepcontrol.wait`.

use decode_attn_abi::{capacity_merge_item, capacity_merge_item_from, range_start, DecodeParams, MergeItem, MergeParams};

use crate::arch::{math::ex2, math::rcp, memory, shared, thread, warp};
use crate::decode::block::{block_kv_head, capacity_len, first_key, token_head};
use crate::format::Half;
use crate::state;
use crate::variant::AttentionVariant;

/// After a split block wrote its partial rows (`rows_here` of them) of
/// sequence `batch`: counts the block, and in the last block of the
/// sequence merges every slot of those rows. `flag`: 4 bytes of free shared
/// memory. Every thread of the block calls it. Variants with a window and
/// sinks (`V`) find a capacity plan's slots from the window's start and add
/// the sinks.
///
/// The sequence comes from the epilogue (`keep_item`'s shared copy): its
/// merge item is then one global load (capacity plans: the device length,
/// one load), where the work item's re-read, its length and then the merge
/// item were three dependent ones before the block could count itself
/// (docs/perf.md, "Split merge in the attention kernel"). The kv head and first row are
/// recomputed rather than kept live across the attention loop.
///
/// # Safety
/// `p.merge` and `p.merge_counters` as `DecodeParams` documents them; the
/// block's partial rows are written.
#[inline(always)]
pub(crate) unsafe fn merge_if_last<H: Half, V: AttentionVariant, const D: usize, const CLUSTER: bool>(p: &DecodeParams, batch: u32, rows_here: u32, flag: u32) {
    merge_chunk_if_last::<H, V, D>(p, batch, block_kv_head::<CLUSTER>(p), thread::block_idx_z(), thread::grid_dim_z(), rows_here, flag)
}

/// [`merge_if_last`] of the block of kv head `kvh` and row chunk `chunk`
/// (of `chunks`): the MLA family's grid has its row chunks along x.
#[inline(always)]
pub(crate) unsafe fn merge_chunk_if_last<H: Half, V: AttentionVariant, const D: usize>(p: &DecodeParams, batch: u32, kvh: u32, chunk: u32, chunks: u32, rows_here: u32, flag: u32) {
    let row0 = chunk * p.rows_per_block;
    let seq = if V::WINDOW {
        windowed_merge_item(p.merge, p.seq_lens, p.max_seq_len, batch, p.q_len, p.chunk_keys, p.chunks_per_seq, p.window, p.window_align, p.seq_starts)
    } else {
        merge_item(p.merge, p.seq_lens, p.max_seq_len, batch, p.q_len, p.chunk_keys, p.chunks_per_seq)
    };
    let index = (batch as u64 * p.num_kv_heads as u64 + kvh as u64) * chunks as u64 + chunk as u64;
    let counter = p.merge_counters + 4 * index;
    // Every thread's partial rows are written before thread 0 releases them.
    thread::sync_threads();
    if thread::thread_idx_x() == 0 {
        // Releases the block's rows and, for the last block, acquires the
        // other blocks' (the barrier below passes this on to the block): one
        // acquire-release atomic, not fences on both sides of a relaxed one
        // (whose second `MEMBAR` the last block waited out before merging).
        let last = memory::atom_add_acq_rel_gpu_u32(counter, 1) + 1 == seq.num_slots;
        if last {
            // Leave the counter at zero for the next launch.
            memory::st_global_u32(counter, 0);
        }
        shared::st_shared_u32(flag, last as u32);
    }
    thread::sync_threads();
    if shared::ld_shared_u32(flag) != 0 {
        let target = Target { partial_o: p.partial_o, partial_lse: p.partial_lse, o: p.o, q_len: p.q_len, num_q_heads: p.num_q_heads };
        // Packed row r of the block: token-major over the kv head's group.
        let row_of = |r: u32| token_head(p, kvh, row0 + r);
        if V::SINKS {
            merge_rows::<H, D, true>(&target, p.sinks, batch, &seq, rows_here, row_of);
        } else {
            merge_rows::<H, D, false>(&target, 0, batch, &seq, rows_here, row_of);
        }
    }
}

/// The merge kernel: block (x, y) merges output rows `y·rows_per_block ..`
/// (and the groups grid y further on) of sequence x. `SINKS`: the merge of
/// a variant with a window and sinks (`MergeParams::sinks`, `window`).
///
/// # Safety
/// Launched with the grid and block `MergeParams` documents, after the
/// attention kernel wrote every slot of the merge items.
#[inline(always)]
pub unsafe fn merge_kernel<H: Half, const D: usize, const SINKS: bool>(p: &MergeParams) {
    let seq = if SINKS {
        windowed_merge_item(p.merge, p.seq_lens, p.max_seq_len, thread::block_idx_x(), p.q_len, p.chunk_keys, p.chunks_per_seq, p.window, p.window_align, p.seq_starts)
    } else {
        merge_item(p.merge, p.seq_lens, p.max_seq_len, thread::block_idx_x(), p.q_len, p.chunk_keys, p.chunks_per_seq)
    };
    // Launched as a programmatic dependent of the attention kernel, the
    // block may run before that grid ends: the lengths and merge items were
    // written before it began, its partials are waited for here. Every block
    // waits, even one with nothing to merge, so that this grid never ends
    // before the attention grid (later work in the stream is ordered after
    // this grid only).
    thread::wait_for_prerequisites();
    if seq.num_slots <= 1 {
        return;
    }
    let target = Target { partial_o: p.partial_o, partial_lse: p.partial_lse, o: p.o, q_len: p.q_len, num_q_heads: p.num_q_heads };
    let (rows, per_block) = (p.q_len * p.num_q_heads, p.rows_per_block);
    let mut first = thread::block_idx_y() * per_block;
    while first < rows {
        let n = per_block.min(rows - first);
        merge_rows::<H, D, SINKS>(&target, p.sinks, seq.batch, &seq, n, |r| ((first + r) / p.num_q_heads, (first + r) % p.num_q_heads));
        first += thread::grid_dim_y() * per_block;
    }
}

/// Sequence `batch`'s merge item: for capacity plans (`chunks_per_seq` ≠
/// 0) from its device length in `seq_lens` (capped at `max_seq_len`), else
/// from the uploaded `[batch]` items at `merge` (no length is read).
#[inline(always)]
unsafe fn merge_item(merge: u64, seq_lens: u64, max_seq_len: u32, batch: u32, q_len: u32, chunk_keys: u32, chunks_per_seq: u32) -> MergeItem {
    // (The length as a value before the branch, as the callers had it: read
    // inside the branch, LLVM laid out 146 kernels' merge paths anew.)
    let len = if chunks_per_seq != 0 { capacity_len(seq_lens, batch, max_seq_len) } else { 0 };
    if chunks_per_seq != 0 {
        capacity_merge_item(batch, len, q_len, chunk_keys, chunks_per_seq)
    } else {
        *(merge as *const MergeItem).add(batch as usize)
    }
}

/// [`merge_item`] of a variant with a window: a capacity plan's slots count
/// the chunks from the window's or the sequence's first key
/// (`decode_attn_abi::range_start`; `seq_starts` as `DecodeParams` has it).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn windowed_merge_item(merge: u64, seq_lens: u64, max_seq_len: u32, batch: u32, q_len: u32, chunk_keys: u32, chunks_per_seq: u32, window: u32, align: u32, seq_starts: u64) -> MergeItem {
    if chunks_per_seq != 0 {
        let len = capacity_len(seq_lens, batch, max_seq_len);
        let first = first_key(seq_starts, batch, len, q_len);
        capacity_merge_item_from(batch, len, range_start(len, first, q_len, window, align), q_len, chunk_keys, chunks_per_seq)
    } else {
        *(merge as *const MergeItem).add(batch as usize)
    }
}

/// Where partials are read and outputs written.
struct Target {
    partial_o: u64,
    partial_lse: u64,
    o: u64,
    q_len: u32,
    num_q_heads: u32,
}

/// Slots each lane loads before combining them (loads in flight together).
const SLOT_BATCH: usize = 8;

/// One merge state: max `m`, sum of weights `l`, weighted sum of 4 values.
#[derive(Clone, Copy)]
pub(crate) struct Merged {
    pub(crate) m: f32,
    pub(crate) l: f32,
    pub(crate) acc: [f32; 4],
}

impl Merged {
    pub(crate) const EMPTY: Merged = Merged { m: f32::NEG_INFINITY, l: 0.0, acc: [0.0; 4] };

    /// Adds states of weight 2^(lse - m) each, summing `vals` under them.
    /// (Slices of constant bounds once inlined: they stay in registers.)
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    pub(crate) fn add(&mut self, lse: &[f32], vals: &[[f32; 4]]) {
        let mut m = self.m;
        for j in 0..lse.len() {
            m = m.max(lse[j]);
        }
        let alpha = state::rescale(self.m, m);
        self.l *= alpha;
        for i in 0..4 {
            self.acc[i] *= alpha;
        }
        for j in 0..lse.len() {
            let w = state::rescale(lse[j], m);
            self.l += w;
            for i in 0..4 {
                self.acc[i] += w * vals[j][i];
            }
        }
        self.m = m;
    }

    /// Combines the states of the `g` lanes of an aligned group (all 32
    /// lanes of the warp call it).
    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    fn group_reduce(&mut self, g: u32) {
        let mut mask = g / 2;
        while mask > 0 {
            let m_other = warp::shfl_xor_f32(self.m, mask);
            let m = self.m.max(m_other);
            let (a, b) = (state::rescale(self.m, m), state::rescale(m_other, m));
            self.l = self.l * a + warp::shfl_xor_f32(self.l, mask) * b;
            for i in 0..4 {
                self.acc[i] = self.acc[i] * a + warp::shfl_xor_f32(self.acc[i], mask) * b;
            }
            self.m = m;
            mask /= 2;
        }
    }
}

/// The block merges `rows` rows of sequence `batch`, row `r` being
/// (token, head) `row_of(r)`: each output is 4 consecutive dims of one row,
/// summed over the slots by a group of `g` lanes (as many as the block has
/// threads to spare, up to 32), which then combine their states.
///
/// A lane keeps up to `SLOT_BATCH` slot loads in flight for one output;
/// when there are more outputs than lanes and at most 2 slots (a 48-row
/// block of 2 slots has 8 outputs per lane), it loads 2 outputs' slots at
/// once instead, halving the load round trips the block waits out in turn.
/// `SINKS`: the rows' denominators add the sinks at `sinks` (`[num_q_heads]`
/// f32, or 0: none).
#[inline(always)]
unsafe fn merge_rows<H: Half, const D: usize, const SINKS: bool>(p: &Target, sinks: u64, batch: u32, seq: &MergeItem, rows: u32, row_of: impl Fn(u32) -> (u32, u32)) {
    let (tid, nthreads) = (thread::thread_idx_x(), thread::block_dim_x());
    let outputs = rows * (D / 4) as u32;
    let mut g = 1;
    while g < 32 && g < seq.num_slots && 2 * g * outputs <= nthreads {
        g *= 2;
    }
    if g == 1 && seq.num_slots <= 2 && outputs > nthreads {
        // (g = 1 as a constant: no group reduction in this copy.)
        merge_passes::<H, D, 2, 4, SINKS>(p, sinks, batch, seq, outputs, 1, tid, nthreads, row_of)
    } else {
        merge_passes::<H, D, 1, SLOT_BATCH, SINKS>(p, sinks, batch, seq, outputs, g, tid, nthreads, row_of)
    }
}

/// [`merge_rows`] with `U` outputs per lane per pass, each summed over
/// `LOADS / U` slots per batch of `LOADS` loads.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn merge_passes<H: Half, const D: usize, const U: usize, const LOADS: usize, const SINKS: bool>(p: &Target, sinks: u64, batch: u32, seq: &MergeItem, outputs: u32, g: u32, tid: u32, nthreads: u32, row_of: impl Fn(u32) -> (u32, u32)) {
    let per_batch = LOADS / U;
    let quads = (D / 4) as u32;
    let part = tid % g;
    let per_pass = nthreads / g;
    // Loop bounds are the same on every lane of a warp (the shuffles need
    // the whole warp): lanes past the last output load and store nothing.
    let mut warp_first = (tid - tid % 32) / g;
    let mut first = tid / g;
    while warp_first < outputs {
        // (token, head, first dim, exists) of this lane's outputs, computed
        // once per pass (`row_of` divides by the group size).
        let mut at = [(0u32, 0u32, 0u32, false); U];
        #[allow(clippy::needless_range_loop)]
        for u in 0..U {
            let out = first + u as u32 * per_pass;
            let valid = out < outputs;
            let (token, head) = row_of(if valid { out / quads } else { 0 });
            at[u] = (token, head, (out % quads) * 4, valid);
        }
        let mut st = [Merged::EMPTY; U];
        let mut s0 = 0;
        while s0 < seq.num_slots {
            let mut lse = [f32::NEG_INFINITY; LOADS];
            let mut vals = [[0f32; 4]; LOADS];
            #[allow(clippy::needless_range_loop)]
            for j in 0..LOADS {
                let (token, head, c, valid) = at[j / per_batch];
                let s = s0 + part + (j % per_batch) as u32 * g;
                if valid && s < seq.num_slots {
                    let row = ((seq.first_slot + s) as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64;
                    lse[j] = memory::ld_global_cg_f32(p.partial_lse + 4 * row);
                    vals[j] = memory::ld_global_cg_v4_f32(p.partial_o + 4 * (row * D as u64 + c as u64));
                }
            }
            #[allow(clippy::needless_range_loop)]
            for u in 0..U {
                st[u].add(&lse[u * per_batch..(u + 1) * per_batch], &vals[u * per_batch..(u + 1) * per_batch]);
            }
            s0 += per_batch as u32 * g;
        }
        #[allow(clippy::needless_range_loop)]
        for u in 0..U {
            st[u].group_reduce(g);
            let (token, head, c, valid) = at[u];
            if valid && part == 0 {
                // At least one slot holds the row's own key, visible to it:
                // l > 0. A sink adds 2^(s·log2 e − m) to the denominator,
                // once per row.
                let inv = if SINKS && sinks != 0 {
                    let s = f32::from_bits(memory::ld_global_nc_u32(sinks + 4 * head as u64));
                    rcp(st[u].l + ex2(s * core::f32::consts::LOG2_E - state::safe_max(st[u].m)))
                } else {
                    rcp(st[u].l)
                };
                let a = st[u].acc;
                let row = (batch as u64 * p.q_len as u64 + token as u64) * p.num_q_heads as u64 + head as u64;
                let dst = p.o + 2 * (row * D as u64 + c as u64);
                memory::st_global_v2_u32(dst, [H::pack(a[0] * inv, a[1] * inv), H::pack(a[2] * inv, a[3] * inv)]);
            }
        }
        warp_first += U as u32 * per_pass;
        first += U as u32 * per_pass;
    }
}
