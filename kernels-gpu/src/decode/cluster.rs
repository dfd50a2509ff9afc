//! The cluster merge: the blocks of a split sequence run as one
//! thread-block cluster (one block per chunk, `DecodeParams::cluster_log2`) and
//! merge their rows through distributed shared memory, with no fp32
//! partials in global memory, no arrival counter and no second launch.
//!
//! Each block ends its epilogue with its rows in its own shared memory: the
//! accumulator rows (scaled to the block's max) and `(1 / l, lse)` per row.
//! After a cluster barrier every block merges a share of the outputs
//! (interleaved by rank) over all chunks' rows, in chunk order, with the
//! same state algebra as the global merge (`crate::merge`); a second
//! barrier keeps every block's shared memory alive until the others have
//! read it.
//!
//! Chunks past the sequence's end (a shorter sequence of the batch, or a
//! capacity step below the capacity) have no work item: their blocks exit
//! at once and are never read. `barrier.cluster` waits for non-exited
//! threads only, so the live blocks (chunks `0 .. ⌈len / chunk_keys⌉`)
//! synchronize among themselves.

use decode_attn_abi::DecodeParams;

use super::block::qo_row_addr;
use crate::arch::{cluster, math::rcp, memory, thread};
use crate::format::Half;
use crate::merge::Merged;

/// Where a block's finished rows are, and which output rows they are.
pub(crate) struct BlockRows {
    /// Shared address of the fp32 accumulator rows (`pitch` floats apart).
    pub acc: u32,
    pub pitch: u32,
    /// Shared address of `(1 / l, lse)` per row.
    pub fin: u32,
    /// First packed row of the block (grid z) and how many rows it has.
    pub row0: u32,
    pub rows_here: u32,
    pub kvh: u32,
    pub batch: u32,
}

/// Chunks a cluster merges at most ([`decode_attn_abi::MAX_CLUSTER`]).
const MAX_CHUNKS: usize = decode_attn_abi::MAX_CLUSTER as usize;

/// Merges this block's share of a split sequence's rows over the cluster
/// and writes them as the final output. Every thread of every live block of
/// the cluster calls it, after its rows are in shared memory.
///
/// # Safety
/// Launched as clusters of `1 << p.cluster_log2` (≤ [`MAX_CHUNKS`])
/// consecutive blocks, chunk `rank` in block `rank`; `rows` as
/// [`BlockRows`] documents.
#[inline(always)]
pub(crate) unsafe fn merge_in_cluster<H: Half, const D: usize>(p: &DecodeParams, rows: &BlockRows, seq_len: u32) {
    let cluster = 1 << p.cluster_log2;
    let live = seq_len.div_ceil(p.chunk_keys).min(cluster);
    let rank = thread::block_idx_x_fresh() & (cluster - 1);
    // Every live block's rows are in its shared memory.
    cluster::sync();
    let (tid, nthreads) = (thread::thread_idx_x(), thread::block_dim_x());
    let quads = (D / 4) as u32;
    let outputs = rows.rows_here * quads;
    let mut out = tid * live + rank;
    while out < outputs {
        let (r, c) = (out / quads, (out % quads) * 4);
        // All chunks' loads in flight at once; chunks past `live` weigh 0.
        let mut lse = [f32::NEG_INFINITY; MAX_CHUNKS];
        let mut vals = [[0f32; 4]; MAX_CHUNKS];
        #[allow(clippy::needless_range_loop)] // constant indices keep the arrays in registers
        for j in 0..MAX_CHUNKS {
            if (j as u32) < live {
                let fin = cluster::ld_v2_f32(cluster::map_shared(rows.fin + 8 * r, j as u32));
                let v = cluster::ld_v4_f32(cluster::map_shared(rows.acc + 4 * (r * rows.pitch + c), j as u32));
                // As the global merge reads it: the row normalized by its own sum.
                lse[j] = fin[1];
                vals[j] = [v[0] * fin[0], v[1] * fin[0], v[2] * fin[0], v[3] * fin[0]];
            }
        }
        let mut st = Merged::EMPTY;
        st.add(&lse, &vals);
        // Chunk 0 holds key 0, visible to every row: l > 0.
        let inv = rcp(st.l);
        let a = st.acc;
        let global = rows.row0 + r;
        let (token, head) = (global / p.group, rows.kvh * p.group + global % p.group);
        let dst = qo_row_addr::<D>(p.o, p, rows.batch, token, head) + 2 * c as u64;
        memory::st_global_v2_u32(dst, [H::pack(a[0] * inv, a[1] * inv), H::pack(a[2] * inv, a[3] * inv)]);
        out += nthreads * live;
    }
    // No block exits (freeing its shared memory) while another still reads it.
    cluster::sync();
}

/// [`merge_in_cluster`] for blocks of many rows (the MLA family's 64 rows
/// of 512 values: 16 outputs a thread of each block of a 2-block cluster):
/// `K` outputs a thread at a time, each chunk's loads of all `K` in flight
/// together and merged online, so that a thread waits `K` times fewer
/// round trips through distributed shared memory (one output at a time,
/// the loop's loads wait in turn behind the stores: docs/perf.md, "MLA
/// cluster merge").
///
/// # Safety
/// As [`merge_in_cluster`].
#[inline(always)]
pub(crate) unsafe fn merge_in_cluster_wide<H: Half, const D: usize, const K: usize>(p: &DecodeParams, rows: &BlockRows, seq_len: u32) {
    let cluster = 1 << p.cluster_log2;
    let live = seq_len.div_ceil(p.chunk_keys).min(cluster);
    let rank = thread::block_idx_x_fresh() & (cluster - 1);
    cluster::sync();
    let (tid, nthreads) = (thread::thread_idx_x(), thread::block_dim_x());
    let quads = (D / 4) as u32;
    let outputs = rows.rows_here * quads;
    let stride = nthreads * live;
    let mut first = tid * live + rank;
    while first < outputs {
        let out: [u32; K] = core::array::from_fn(|k| first + k as u32 * stride);
        let mut st = [Merged::EMPTY; K];
        for j in 0..live {
            let mut lse = [f32::NEG_INFINITY; K];
            let mut vals = [[0f32; 4]; K];
            #[allow(clippy::needless_range_loop)] // constant indices keep the arrays in registers
            for k in 0..K {
                if out[k] < outputs {
                    let (r, c) = (out[k] / quads, (out[k] % quads) * 4);
                    let fin = cluster::ld_v2_f32(cluster::map_shared(rows.fin + 8 * r, j));
                    let v = cluster::ld_v4_f32(cluster::map_shared(rows.acc + 4 * (r * rows.pitch + c), j));
                    lse[k] = fin[1];
                    vals[k] = [v[0] * fin[0], v[1] * fin[0], v[2] * fin[0], v[3] * fin[0]];
                }
            }
            for k in 0..K {
                st[k].add(&lse[k..k + 1], &vals[k..k + 1]);
            }
        }
        for k in 0..K {
            if out[k] < outputs {
                let (r, c) = (out[k] / quads, (out[k] % quads) * 4);
                // Chunk 0 holds key 0, visible to every row: l > 0.
                let inv = rcp(st[k].l);
                let a = st[k].acc;
                let global = rows.row0 + r;
                let (token, head) = (global / p.group, rows.kvh * p.group + global % p.group);
                let dst = qo_row_addr::<D>(p.o, p, rows.batch, token, head) + 2 * c as u64;
                memory::st_global_v2_u32(dst, [H::pack(a[0] * inv, a[1] * inv), H::pack(a[2] * inv, a[3] * inv)]);
            }
        }
        first += K as u32 * stride;
    }
    // No block exits (freeing its shared memory) while another still reads it.
    cluster::sync();
}
