//! Work lists: how a plan's sequences become work items (chunks of keys),
//! merge items and partial slots, and where they sit in the workspace.
//! Pure functions of the lengths and the chunk size.

use decode_attn_abi::{capacity_merge_item_from, capacity_work_item_from, window_start, MergeItem, WorkItem, DIRECT_OUTPUT};

use crate::shape::DecodeShape;

/// Byte offsets inside the workspace buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceLayout {
    pub work: usize,
    pub seq_lens: usize,
    /// Shapes with key ranges: `[batch]` u32 first keys.
    pub seq_starts: usize,
    /// Paged caches' block table (`[batch, pages_per_seq]` i32).
    pub block_table: usize,
    /// One [`MergeItem`] per sequence: its partial slots.
    pub merges: usize,
    /// `[batch, num_kv_heads, row_chunks]` u32 arrival counters of split
    /// sequences' blocks (zero between runs: the last block resets its own).
    pub merge_counters: usize,
    /// Bytes of the metadata region (work, seq_lens, seq_starts, block
    /// table, merges, counters), uploaded per plan (capacity plans: only the counters,
    /// zeroed by the first step of the plan in a workspace).
    pub metadata_bytes: usize,
    pub partial_o: usize,
    pub partial_lse: usize,
    pub total_bytes: usize,
}

/// Alignment of each workspace region.
const ALIGN: usize = 256;

/// Byte offsets of the workspace regions; `None` when they overflow or
/// exceed `isize::MAX`.
pub(crate) fn workspace_layout(work: usize, seqs: usize, table: usize, row_chunks: u32, num_slots: u32, shape: &DecodeShape) -> Option<WorkspaceLayout> {
    let align_up = |x: usize| x.checked_next_multiple_of(ALIGN);
    let work_at = 0usize;
    let seq_lens_at = work.checked_mul(16)?;
    let starts_at = align_up(seq_lens_at.checked_add(seqs.checked_mul(4)?)?)?;
    // (Empty without key ranges: the other regions stay where they were.)
    let starts = if shape.variant.key_ranges { seqs } else { 0 };
    let table_at = align_up(starts_at.checked_add(starts.checked_mul(4)?)?)?;
    let merges_at = align_up(table_at.checked_add(table.checked_mul(4)?)?)?;
    let counters_at = align_up(merges_at.checked_add(seqs.checked_mul(16)?)?)?;
    let counters = seqs.checked_mul(shape.num_kv_heads as usize)?.checked_mul(row_chunks as usize)?;
    u32::try_from(counters).ok()?;
    let metadata_bytes = counters_at.checked_add(counters.checked_mul(4)?)?;
    let rows = (num_slots as usize).checked_mul(shape.q_len as usize)?.checked_mul(shape.num_q_heads as usize)?;
    let partial_o = align_up(metadata_bytes)?;
    let partial_lse = align_up(partial_o.checked_add(rows.checked_mul(shape.head_dims().v as usize)?.checked_mul(4)?)?)?;
    let total_bytes = align_up(partial_lse.checked_add(rows.checked_mul(4)?)?)?;
    (total_bytes <= isize::MAX as usize).then_some(WorkspaceLayout {
        work: work_at,
        seq_lens: seq_lens_at,
        seq_starts: starts_at,
        block_table: table_at,
        merges: merges_at,
        merge_counters: counters_at,
        metadata_bytes,
        partial_o,
        partial_lse,
        total_bytes,
    })
}

/// Chunks of `chunk_keys` keys a sequence of `len` keys is split into (one
/// when `chunk_keys` covers it, `u32::MAX` included; at least one).
pub(crate) fn chunks_of(len: u32, chunk_keys: u32) -> u32 {
    len.div_ceil(chunk_keys.min(len).max(1))
}

/// Work items of a cluster merge: every sequence gets `cluster` items, chunk
/// c at rank c and chunks past its end empty (their blocks exit at once),
/// longest sequences first.
pub(crate) fn cluster_work(seq_lens: &[u32], chunk_keys: u32, cluster: u32) -> Vec<WorkItem> {
    let mut order: Vec<usize> = (0..seq_lens.len()).collect();
    order.sort_by_key(|&b| std::cmp::Reverse(seq_lens[b]));
    let mut work = Vec::with_capacity(seq_lens.len() * cluster as usize);
    for b in order {
        let len = seq_lens[b];
        let chunks = chunks_of(len, chunk_keys);
        for c in 0..cluster {
            // In u64: near MAX_SEQ_LEN, start + chunk_keys passes u32::MAX.
            let start = (c as u64 * chunk_keys as u64).min(len as u64);
            let end = (start + chunk_keys as u64).min(len as u64);
            let partial_slot = if chunks == 1 { DIRECT_OUTPUT } else { c };
            work.push(WorkItem { batch: b as u32, kv_start: start as u32, kv_end: end as u32, partial_slot });
        }
    }
    work
}

/// Work items, merge items and partial-slot count of a merge through
/// global memory: a chunk per block, a slot per chunk of a split sequence,
/// longest chunks first (so the tail of the grid is short ones). Sequence
/// b's work is keys `starts[b] .. seq_lens[b]` (a window's, else from 0).
pub(crate) fn global_merge_work(seq_lens: &[u32], starts: &[u32], chunk_keys: u32, total_items: usize) -> (Vec<WorkItem>, Vec<MergeItem>, u32) {
    let mut work = Vec::with_capacity(total_items);
    let mut merges = Vec::new();
    let mut num_slots = 0u32;
    for (b, (&len, &first)) in seq_lens.iter().zip(starts).enumerate() {
        let chunks = chunks_of(len - first, chunk_keys);
        if chunks == 1 {
            work.push(WorkItem { batch: b as u32, kv_start: first, kv_end: len, partial_slot: DIRECT_OUTPUT });
            continue;
        }
        merges.push(MergeItem { batch: b as u32, first_slot: num_slots, num_slots: chunks, _pad: 0 });
        for c in 0..chunks {
            // In u64: near MAX_SEQ_LEN, start + chunk_keys passes u32::MAX.
            let start = first as u64 + c as u64 * chunk_keys as u64;
            let end = (start + chunk_keys as u64).min(len as u64);
            work.push(WorkItem { batch: b as u32, kv_start: start as u32, kv_end: end as u32, partial_slot: num_slots + c });
        }
        num_slots += chunks;
    }
    work.sort_by_key(|w| std::cmp::Reverse(w.kv_end - w.kv_start));
    (work, merges, num_slots)
}

/// Work items, merge items and partial-slot count of a balanced plan
/// (`heuristics::mla_balanced`): the sequences' stages (keys `starts[b] ..
/// seq_lens[b]`, in order) cut into `runs` runs of about equal stages,
/// run `l` ending at stage `⌈(l + 1) · total / runs⌉` of them all (so no
/// run's rounding adds to the next), no piece shorter than `min_stages`
/// where the sequence is longer (a cut that would leave one moves to the
/// sequence's end or the run's next sequence). A sequence cut into pieces
/// is merged as a split one (a slot a piece). The items go longest first:
/// the hardware hands each next block to the first SM free, so the short
/// pieces fill the tail that whole sequences would leave (docs/perf.md,
/// "MLA balanced pieces").
pub(crate) fn balanced_work(seq_lens: &[u32], starts: &[u32], runs: u32, keys_per_stage: u32, min_stages: u32) -> (Vec<WorkItem>, Vec<MergeItem>, u32) {
    let kps = keys_per_stage.max(1) as u64;
    let runs = runs.max(1) as u64;
    let min = min_stages.max(1) as u64;
    let stages: Vec<u64> = seq_lens.iter().zip(starts).map(|(&l, &f)| (l.saturating_sub(f) as u64).div_ceil(kps)).collect();
    let total: u64 = stages.iter().sum();
    // The pieces: (sequence, first stage, end stage), in sequence order.
    let mut pieces: Vec<(usize, u64, u64)> = Vec::with_capacity(seq_lens.len() + runs as usize);
    let (mut b, mut pos, mut done) = (0usize, 0u64, 0u64);
    for l in 0..runs {
        let last = l + 1 == runs;
        let end = ((l + 1) * total).div_ceil(runs);
        while b < stages.len() && (last || done < end) {
            let left = stages[b] - pos;
            let room = if last { left } else { end - done };
            let mut take = left.min(room);
            if take < left && left - take < min {
                take = left;
            } else if take < left && take < min {
                break;
            }
            if take > 0 {
                pieces.push((b, pos, pos + take));
            }
            (pos, done) = (pos + take, done + take);
            if pos == stages[b] {
                (b, pos) = (b + 1, 0);
            }
        }
    }
    let mut count = vec![0u32; seq_lens.len()];
    for &(b, _, _) in &pieces {
        count[b] += 1;
    }
    let mut merges = Vec::new();
    let mut next_slot = vec![DIRECT_OUTPUT; seq_lens.len()];
    let mut num_slots = 0u32;
    for (b, &n) in count.iter().enumerate() {
        if n > 1 {
            merges.push(MergeItem { batch: b as u32, first_slot: num_slots, num_slots: n, _pad: 0 });
            next_slot[b] = num_slots;
            num_slots += n;
        }
    }
    let mut work: Vec<WorkItem> = pieces
        .iter()
        .map(|&(b, s0, s1)| {
            let first = starts[b] as u64;
            let kv_end = (first + s1 * kps).min(seq_lens[b] as u64) as u32;
            let partial_slot = next_slot[b];
            if partial_slot != DIRECT_OUTPUT {
                next_slot[b] += 1;
            }
            WorkItem { batch: b as u32, kv_start: (first + s0 * kps) as u32, kv_end, partial_slot }
        })
        .collect();
    work.sort_by_key(|w| std::cmp::Reverse(w.kv_end - w.kv_start));
    (work, merges, num_slots)
}

/// `(length, chunks per sequence)` when every sequence of `seq_lens` has
/// the same length and `work` / `merges` are item for item what a capacity
/// plan's blocks derive at that length (`decode_attn_abi::capacity_work_item`,
/// `capacity_merge_item`): then a run passes the length in the params and
/// a null length pointer, and every block computes its item instead of
/// loading it — one dependent load fewer before its first copy, and the
/// merging block's merge item too (the work list is evicted from L2 by the
/// time a step that streams the cache reads it). Cluster plans keep their
/// list (their slots are ranks, not a capacity plan's). `window`: the
/// window and its start's alignment (`decode_attn_abi::window_start`;
/// `(NO_WINDOW, 1)` for none), whose start the kernels derive too.
pub fn uniform_work(seq_lens: &[u32], work: &[WorkItem], merges: &[MergeItem], chunk_keys: u32, q_len: u32, window: (u32, u32)) -> Option<(u32, u32)> {
    let &len = seq_lens.first()?;
    if seq_lens.iter().any(|&l| l != len) {
        return None;
    }
    let start = window_start(len, q_len, window.0, window.1);
    let chunks = chunks_of(len - start, chunk_keys);
    let same_work = work.len() as u64 == seq_lens.len() as u64 * chunks as u64
        && work.iter().enumerate().all(|(x, w)| capacity_work_item_from(x as u32, len, start, q_len, chunk_keys, chunks) == Some(*w));
    let same_merges = merges.is_empty() && chunks == 1
        || merges.len() == seq_lens.len() && merges.iter().enumerate().all(|(b, m)| capacity_merge_item_from(b as u32, len, start, q_len, chunk_keys, chunks) == *m);
    (same_work && same_merges).then_some((len, chunks))
}

pub(crate) fn work_words(work: &[WorkItem]) -> Vec<u32> {
    work.iter().flat_map(|w| [w.batch, w.kv_start, w.kv_end, w.partial_slot]).collect()
}

pub(crate) fn merge_words(merges: &[MergeItem]) -> Vec<u32> {
    merges.iter().flat_map(|m| [m.batch, m.first_slot, m.num_slots, 0]).collect()
}
