//! Kernel launch parameters: each kernel takes exactly one of these by value.
//! Device pointers are `u64`; KV strides are in bytes (format-independent).

/// One block's share of one sequence: keys `[kv_start, kv_end)` of sequence
/// `batch`, for every kv head and row chunk (`DecodeParams`'s grid).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WorkItem {
    pub batch: u32,
    pub kv_start: u32,
    pub kv_end: u32,
    /// Where the block writes: [`DIRECT_OUTPUT`] for the final output,
    /// otherwise the index of its fp32 partial slot (merged by the sequence's
    /// last block to finish, `DecodeParams::merge_counters`, or by the
    /// merge kernel); with a cluster merge, the chunk's rank in its cluster
    /// (the rows stay in shared memory).
    pub partial_slot: u32,
}

/// `WorkItem::partial_slot` value meaning "this block covers the whole
/// sequence, normalize and write O directly".
pub const DIRECT_OUTPUT: u32 = u32::MAX;

/// A sequence's partial slots `first_slot .. first_slot + num_slots`
/// (`num_slots` ≤ 1: the sequence is not split).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MergeItem {
    pub batch: u32,
    pub first_slot: u32,
    pub num_slots: u32,
    pub _pad: u32,
}

/// Parameters of the attention kernel.
///
/// Grid: x = work item × kv heads + kv head (a work item's kv heads are
/// consecutive blocks, see `decode_grid_x`), z = row chunk.
/// Block: `32 * warps_m * warps_k` threads.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct DecodeParams {
    /// `[batch, q_len, num_q_heads, head_dim]`, dtype.
    pub q: u64,
    /// K cache base; row (b, t, h) starts at byte `b*k_stride_batch + t*k_stride_token + h*k_stride_head`.
    pub k: u64,
    /// V cache base; V has K's strides (the attention kernels address V's
    /// rows from K's: the `v_stride_*` fields must equal the `k_stride_*` ones).
    pub v: u64,
    /// `[batch, q_len, num_q_heads, head_dim]`, dtype.
    pub o: u64,
    /// fp32 `[slot, q_len, num_q_heads, head_dim]`, normalized partial outputs.
    pub partial_o: u64,
    /// fp32 `[slot, q_len, num_q_heads]`, base-2 log-sum-exp of each partial.
    pub partial_lse: u64,
    /// `[num_work_items]` [`WorkItem`].
    pub work: u64,
    /// `[batch]` u32: current length of each sequence, new tokens included.
    /// Null in a uniform plan's run (`chunks_per_seq` set): every sequence
    /// is `max_seq_len` long, and no block loads a length.
    pub seq_lens: u64,
    pub k_stride_batch: u64,
    pub k_stride_token: u64,
    pub k_stride_head: u64,
    pub v_stride_batch: u64,
    pub v_stride_token: u64,
    pub v_stride_head: u64,
    /// Scales (quantized formats; 0 otherwise): K's and V's per-row
    /// scales, entry (b, t, h) at byte `b*scale_stride_batch + t*scale_stride_token + h*scale_stride_head`.
    pub k_scales: u64,
    pub v_scales: u64,
    pub scale_stride_batch: u64,
    pub scale_stride_token: u64,
    pub scale_stride_head: u64,
    pub num_q_heads: u32,
    pub q_len: u32,
    /// Query heads per kv head (`num_q_heads / num_kv_heads`).
    pub group: u32,
    /// Packed rows (token × head of the group) per block; a multiple of 16.
    pub rows_per_block: u32,
    pub warps_m: u32,
    pub warps_k: u32,
    /// The attention variant's query transform (`kernels-gpu`'s
    /// `AttentionVariant::score_scale`), the factor of every raw `q·k`:
    /// softmax scale × log2(e) for the standard variant (logits in base 2);
    /// for soft-cap `c`, 2·log2(e) × softmax scale / c (the exponent of its
    /// `tanh`).
    pub score_scale: f32,
    pub num_kv_heads: u32,
    /// Paged kernels: `[batch, table_stride]` i32 page ids. K row (b, t, h)
    /// then starts at byte `page*k_stride_batch + (t mod page_size)*k_stride_token
    /// + h*k_stride_head` with `page = block_table[b][t >> page_shift]`
    /// (the batch strides are page strides), and likewise V and the scales.
    pub block_table: u64,
    /// Entries per sequence of the block table.
    pub table_stride: u32,
    /// log2 of the page size in tokens.
    pub page_shift: u32,
    /// Pages in the pool: a page id at or past it (or negative) is read as
    /// the last page, so no id makes a block read outside the pool.
    pub num_pages: u32,
    /// Byte offset in the block's dynamic shared memory of its last
    /// `ITEM_SMEM_BYTES`: the block stores its work item's `batch` and
    /// `partial_slot` there at its start and reads them in its epilogue
    /// (held in registers through the key loop they cost the tightest
    /// kernels a spill; re-read from the work list, a dependent global load
    /// under a saturated memory system, they cost int4 grid A 2 %).
    pub item_smem: u32,
    /// `[batch]` [`MergeItem`]: each sequence's partial slots (`num_slots`
    /// ≤ 1: written directly).
    pub merge: u64,
    /// `[batch, num_kv_heads, row_chunks]` u32 arrival counters of split
    /// sequences' blocks, zero before the launch: the block that brings a
    /// counter to its sequence's `num_slots` merges the partials and resets
    /// it to zero. 0: the blocks only write their partials, and the merge
    /// kernel ([`MergeParams`]) runs after the grid.
    pub merge_counters: u64,
    /// Capacity plans (0 otherwise): block x derives its work item from the
    /// device length of sequence `x / chunks_per_seq` (`seq_lens`, capped at
    /// `max_seq_len`) with [`capacity_work_item`], and its merge item with
    /// [`capacity_merge_item`]; `work` and `merge` are not read. No launch
    /// before the attention kernel, so a graph of a step is one kernel.
    /// Plans of host lengths that are all equal and whose items are these
    /// (`host::plan::uniform_work`) run the same way, with a null
    /// `seq_lens` and their length as `max_seq_len`.
    pub chunks_per_seq: u32,
    pub chunk_keys: u32,
    pub max_seq_len: u32,
    /// Pipeline stages in the block's shared memory (1..=`max_stages`,
    /// [`crate::stages_for`]): no work item has more stages' keys than it
    /// holds. The page-id ring and the Q tile follow them.
    pub stages: u32,
    /// Cluster merge: log2 of the blocks per cluster (0: no clusters).
    /// Every sequence then has exactly `1 << cluster_log2` work items
    /// (chunks; those past its end empty), launched as one thread-block
    /// cluster per (sequence, kv head, row chunk), whose blocks merge their
    /// rows through distributed shared memory instead of global partials
    /// ([`decode_block_item`]); `merge` and `merge_counters` are not used.
    /// A power of two so that a block finds its item and kv head with
    /// shifts: the paged kernels recompute the kv head at every stage.
    pub cluster_log2: u32,
    /// Soft-cap kernels: the cap × log2(e), the factor of the logit's
    /// `tanh` (0 for the standard variant, which does not read it).
    pub logit_cap: f32,
    /// Kernels of a variant that takes a window (`Variant::takes_window`):
    /// the left window `W` — the query at position `p` sees keys
    /// `p − W ..= p` — or [`NO_WINDOW`]. Work items of a windowed plan
    /// start at [`window_start`].
    pub window: u32,
    /// The power of two window starts are aligned down to
    /// ([`window_start`]; 1 without a window).
    pub window_align: u32,
    /// `[num_q_heads]` f32 sink logits (natural log), or 0: each enters its
    /// head's softmax denominator as `exp(s_h − m)` once (in the epilogue
    /// of an unsplit row, in the merge of a split one).
    pub sinks: u64,
    /// ALiBi kernels: `[num_q_heads]` f32 slopes; logit `+= slope_h · (t − p)`.
    pub alibi_slopes: u64,
    /// Kernels of a variant that takes a window: `[batch]` u32, each
    /// sequence's first key (keys before it are not seen: a left-padded
    /// batch, an evicted prefix), read as at most `seq_len − q_len`; or 0
    /// (every sequence starts at key 0). Work items start at
    /// [`range_start`]. A capacity plan's are the step's device starts, a
    /// plan of host lengths has them in its workspace.
    pub seq_starts: u64,
    /// Kernels of a variant that takes a draft tree (`Variant::takes_tree`):
    /// `[batch, q_len]` u8, bit `j` of entry `(b, i)` set when new token
    /// `i` of sequence `b` sees new token `j` (bit `i` is read as set, bits
    /// above it as clear); or 0 (no tree: causal among the new tokens).
    pub tree_masks: u64,
    /// With `tree_masks`: `[batch, q_len]` u32, each new token's position
    /// (its prefix length plus its depth in the tree), which its window
    /// and ALiBi measure from; read as at least `seq_len − q_len` and at
    /// most `seq_len − q_len + i`.
    pub tree_positions: u64,
    /// The window a row's first key is measured with in the logits' mask
    /// (`kernels-gpu`'s `row_terms`): `window`, or with a draft tree
    /// `window + q_len − 1`, which gives every row the first key of the
    /// least tree position (each row's own is its tree pass's); saturated.
    pub row_window: u32,
    pub _pad_tree: u32,
}

/// `DecodeParams::window` of a launch without a window.
pub const NO_WINDOW: u32 = u32::MAX;

/// The first key a windowed plan's work for a sequence of length `seq_len`
/// starts at: the first key its first new token sees, `seq_len − q_len −
/// window` (0 when that is negative or there is no window), aligned down to
/// `align` (a power of two) — 16 keys for strided caches (a 16-byte
/// boundary of every side-data layout), the smaller of a stage's keys and
/// a page for paged ones (a stage then spans the pages the kernels' page-id
/// ring holds, and a stage within one page stays within one). The keys
/// between the start and each row's first visible key are masked.
#[inline(always)]
pub const fn window_start(seq_len: u32, q_len: u32, window: u32, align: u32) -> u32 {
    range_start(seq_len, 0, q_len, window, align)
}

/// A sequence's own first key `first` (`DecodeParams::seq_starts`) as the
/// kernels read it: at most `seq_len − q_len`, so that every new token
/// sees at least the keys from its sequence's last cached one on (a start
/// past that is not an error a device value can report; docs/benchmark.md,
/// "The operation").
#[inline(always)]
pub const fn clamp_first_key(first: u32, seq_len: u32, q_len: u32) -> u32 {
    let last = if seq_len > q_len { seq_len - q_len } else { 0 };
    if first < last {
        first
    } else {
        last
    }
}

/// [`window_start`] of a sequence whose keys before `first` are not seen
/// (`DecodeParams::seq_starts`, clamped by [`clamp_first_key`]): the later
/// of the two first keys, aligned down to `align`.
#[inline(always)]
pub const fn range_start(seq_len: u32, first: u32, q_len: u32, window: u32, align: u32) -> u32 {
    let p0 = if seq_len > q_len { seq_len - q_len } else { 0 };
    let in_window = if p0 > window { p0 - window } else { 0 };
    let own = clamp_first_key(first, seq_len, q_len);
    let start = if own > in_window { own } else { in_window };
    start & !(align.wrapping_sub(1))
}

/// Work item `x` of a capacity-mode plan for a sequence of current length
/// `seq_len` (already capped at the capacity): chunk `x % chunks_per_seq`
/// of sequence `x / chunks_per_seq`, keys `[c·chunk_keys, min((c+1)·chunk_keys,
/// seq_len))`, written directly when the sequence has one chunk, else to
/// partial slot `x`. `None` for a chunk past the sequence's end and for
/// sequences shorter than `q_len` (their output rows are left as they
/// were). Each attention block of a capacity plan computes its own item.
#[inline(always)]
pub const fn capacity_work_item(x: u32, seq_len: u32, q_len: u32, chunk_keys: u32, chunks_per_seq: u32) -> Option<WorkItem> {
    capacity_work_item_from(x, seq_len, 0, q_len, chunk_keys, chunks_per_seq)
}

/// [`capacity_work_item`] of a sequence whose work starts at key `start`
/// (a windowed plan's [`window_start`]): chunk c holds keys
/// `[start + c·chunk_keys, …)`.
#[inline(always)]
pub const fn capacity_work_item_from(x: u32, seq_len: u32, start: u32, q_len: u32, chunk_keys: u32, chunks_per_seq: u32) -> Option<WorkItem> {
    let (batch, c) = div_rem(x, chunks_per_seq);
    let first = start as u64 + c as u64 * chunk_keys as u64;
    if seq_len < q_len || first >= seq_len as u64 {
        return None;
    }
    let (next, len) = (first + chunk_keys as u64, seq_len as u64);
    let end = if next < len { next } else { len };
    let partial_slot = if seq_len - start <= chunk_keys { DIRECT_OUTPUT } else { x };
    Some(WorkItem { batch, kv_start: first as u32, kv_end: end as u32, partial_slot })
}

/// The merge item of sequence `batch` of a capacity-mode plan at current
/// length `seq_len` (capped): its slots are those of its chunks'
/// [`capacity_work_item`]s, one per chunk up to the length (none for a
/// sequence shorter than `q_len`).
#[inline(always)]
pub const fn capacity_merge_item(batch: u32, seq_len: u32, q_len: u32, chunk_keys: u32, chunks_per_seq: u32) -> MergeItem {
    capacity_merge_item_from(batch, seq_len, 0, q_len, chunk_keys, chunks_per_seq)
}

/// [`capacity_merge_item`] of a sequence whose work starts at key `start`
/// ([`capacity_work_item_from`]).
#[inline(always)]
///
/// Total: a `start` past `seq_len` or a `chunk_keys` of 0 (which no plan
/// makes) gives no slots, and the first slot wraps as the kernels' 32-bit
/// arithmetic does.
pub const fn capacity_merge_item_from(batch: u32, seq_len: u32, start: u32, q_len: u32, chunk_keys: u32, chunks_per_seq: u32) -> MergeItem {
    let num_slots = if seq_len < q_len || start > seq_len || chunk_keys == 0 { 0 } else { (seq_len - start).div_ceil(chunk_keys) };
    MergeItem { batch, first_slot: batch.wrapping_mul(chunks_per_seq), num_slots, _pad: 0 }
}

/// Parameters of the split-merge kernel, for plans whose merges are too
/// large for one block of the attention grid (`Plan::merge_mode`).
///
/// Grid: x = sequence (its [`MergeItem`]; `num_slots` ≤ 1: nothing to do),
/// y = min(ceil(q_len * num_q_heads / rows_per_block), 65535) groups of
/// `rows_per_block` output rows, a grid-stride loop over the rest. Block:
/// [`MERGE_THREADS`] threads, or a multiple of it (the host's plan picks;
/// the kernel reads its block size).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MergeParams {
    pub partial_o: u64,
    pub partial_lse: u64,
    pub o: u64,
    /// `[batch]` [`MergeItem`] (plans of host lengths).
    pub merge: u64,
    pub num_q_heads: u32,
    pub q_len: u32,
    /// Capacity plans, as in [`DecodeParams`] (`chunks_per_seq` 0 otherwise):
    /// merge items from the device lengths.
    pub seq_lens: u64,
    pub chunks_per_seq: u32,
    pub chunk_keys: u32,
    pub max_seq_len: u32,
    /// Output rows per block: fewer for more slots, so each lane of a
    /// block loads about one batch of slots (`merge_rows_per_block`).
    pub rows_per_block: u32,
    /// The sinks merge kernels: `[num_q_heads]` f32 sink logits, or 0
    /// (`DecodeParams::sinks`).
    pub sinks: u64,
    /// Capacity plans of a window: as `DecodeParams::window` and
    /// `window_align` (the merge items start at [`range_start`]).
    pub window: u32,
    pub window_align: u32,
    /// Capacity plans of a variant with a window: as `DecodeParams::seq_starts`.
    pub seq_starts: u64,
}

/// Output rows a merge-kernel block covers for sequences of up to
/// `max_slots` slots: 4 up to 8 slots (one lane per output, 8 slots in
/// flight), 2 up to 16, else 1 (lanes of an output split the slots).
pub const fn merge_rows_per_block(max_slots: u32) -> u32 {
    if max_slots <= 8 {
        4
    } else if max_slots <= 16 {
        2
    } else {
        1
    }
}

/// Threads of a merge-kernel block, but for MLA's rows (the host's
/// `heuristics::merge_threads`). (256 and 512 for sequences of 33+
/// slots, one batch of loads per lane instead of 2-4, measured 1-2 µs
/// slower on grid B (64K, 4) and (128K, 2): docs/perf.md, "Merge kernel".)
pub const MERGE_THREADS: u32 = 128;

const _: () = assert!(core::mem::size_of::<WorkItem>() == 16);
const _: () = assert!(core::mem::size_of::<MergeItem>() == 16);
const _: () = assert!(core::mem::size_of::<MergeParams>() == 88);
const _: () = assert!(core::mem::size_of::<DecodeParams>() == 304);
const _: () = assert!(core::mem::offset_of!(DecodeParams, num_q_heads) == 152);
const _: () = assert!(core::mem::offset_of!(DecodeParams, logit_cap) == 244);
const _: () = assert!(core::mem::offset_of!(DecodeParams, sinks) == 256);
const _: () = assert!(core::mem::offset_of!(DecodeParams, seq_starts) == 272);
const _: () = assert!(core::mem::size_of::<QuantParams>() == 152);

/// Parameters of the random-fill kernels (test and benchmark inputs):
/// element `i` gets `(hash(seed, i) % 255 - 127) / 64`, exact in bf16 and f16.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FillParams {
    /// 4-byte aligned device address of `len` 16-bit elements.
    pub ptr: u64,
    /// Element count; must be even.
    pub len: u64,
    pub seed: u64,
}

/// The value the fill kernels write at `index` (also computed on the host).
pub const fn fill_value(seed: u64, index: u64) -> f32 {
    let mut z = seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z % 255) as i32 - 127) as f32 / 64.0
}

pub const FILL_KERNEL_BF16: &str = "fill_random_bf16";
pub const FILL_KERNEL_F16: &str = "fill_random_f16";

/// Parameters of the busy-wait kernel (benchmarks keep the GPU busy with it
/// while they enqueue timed launches).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SleepParams {
    pub ns: u64,
}

pub const SLEEP_KERNEL: &str = "gpu_sleep";

/// Parameters of the tensor-core rate kernel (the bench's GEMM rate for its
/// achievable bound): each warpgroup runs `rounds` rounds of four
/// `m64n128k16` bf16 `wgmma` steps, A from registers and B from one shared
/// tile, as the decode kernels' P·V steps run, and stores one f32 (its
/// accumulator's first element) to `out[warpgroup]` so no round is dropped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MmaRateParams {
    pub out: u64,
    pub rounds: u32,
    pub _pad: u32,
}

pub const MMA_RATE_KERNEL: &str = "gpu_mma_rate";
/// The shared B tile (64 keys × 128 dims, bf16), 1024-byte aligned inside
/// the launch's dynamic shared memory ([`MMA_RATE_SMEM_BYTES`]).
pub const MMA_RATE_TILE_BYTES: u32 = 64 * 128 * 2;
pub const MMA_RATE_SMEM_BYTES: u32 = MMA_RATE_TILE_BYTES + 1024;
/// Floating-point operations of one warpgroup's round: 4 × 2·64·128·16.
pub const MMA_RATE_FLOPS_PER_ROUND: u64 = 4 * 2 * 64 * 128 * 16;

/// Parameters of the length-advance kernel, the step a CUDA-graph decode
/// loop ends with: `seq_lens[b] += by` for `b < batch`, capped at
/// `capacity`; lengths of 0 (empty batch slots) stay 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AdvanceParams {
    pub seq_lens: u64,
    pub batch: u32,
    pub by: u32,
    pub capacity: u32,
    pub _pad: u32,
}

pub const ADVANCE_KERNEL: &str = "advance_seq_lens";

/// Parameters of the store / quantize / dequantize kernels (store: a
/// 16-bit cache's append, a plain copy). One warp per row
/// (sequence b, row t of the source, kv head h): grid x covers
/// `batch * rows_per_seq * num_kv_heads` rows, `QUANT_WARPS` warps a block.
///
/// Quantize: reads 16-bit row (b, t, h) of `plain` and writes it into the
/// quantized cache at token `t` (`append == 0`: the whole cache; rows with
/// `t >= seq_lens[b]` are skipped) or at token `seq_lens[b] - rows_per_seq + t`
/// (`append == 1`: a decode step's new tokens, `plain` being
/// `[batch, rows_per_seq, Hkv, D]`). Dequantize: the reverse of the
/// whole-cache case.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QuantParams {
    /// 16-bit rows; row (b, t, h) at byte `b*plain_stride_batch + t*plain_stride_token + h*plain_stride_head`.
    pub plain: u64,
    pub plain_stride_batch: u64,
    pub plain_stride_token: u64,
    pub plain_stride_head: u64,
    /// Quantized rows, addressed like `plain` with these strides.
    pub data: u64,
    pub data_stride_batch: u64,
    pub data_stride_token: u64,
    pub data_stride_head: u64,
    /// Scales, addressed by (b, token, h) with the side strides.
    pub scales: u64,
    pub scale_stride_batch: u64,
    pub scale_stride_token: u64,
    pub scale_stride_head: u64,
    /// `[batch]` u32 sequence lengths (new tokens included).
    pub seq_lens: u64,
    pub batch: u32,
    pub rows_per_seq: u32,
    pub num_kv_heads: u32,
    pub append: u32,
    /// Tokens the quantized cache holds per sequence: rows whose destination
    /// token would be at or past it (a device length beyond the capacity)
    /// are skipped, never written out of bounds.
    pub capacity: u32,
    pub _pad: u32,
    /// Paged caches (0 otherwise): `[batch, table_stride]` i32 page ids.
    /// The cache's token `t` of sequence b is then token `t mod page_size`
    /// of page `block_table[b][t >> page_shift]`, addressed with the batch
    /// stride as the page stride (values and scales alike); so is
    /// `plain` in the whole-cache directions. Ids outside the pool are read
    /// as its last page.
    pub block_table: u64,
    pub table_stride: u32,
    pub page_shift: u32,
    pub num_pages: u32,
    pub _pad2: u32,
}

/// Warps (rows) per block of the quant kernels.
pub const QUANT_WARPS: u32 = 8;

/// The attention grid's x for `work_items` work items: one block per work
/// item and kv head, a work item's kv heads consecutive
/// ([`decode_block_item`], [`decode_block_kv_head`]), so the blocks resident
/// at one time read every kv head of the same tokens. With token-major
/// caches (NHD) a token's rows of all heads share DRAM pages; heads as the
/// slow index had each wave read one or two heads' slices of every page
/// (grid D (128, 2K): int8 90.9 % of the roofline, int4-g32 56 %, against
/// 97.7 and 65.9 % with head-major rows, docs/perf.md, "Grid order").
pub const fn decode_grid_x(work_items: u32, num_kv_heads: u32) -> u32 {
    work_items * num_kv_heads
}

/// The work item of the attention block at grid x index `x`: with
/// `cluster_log2` = 0, item `x / num_kv_heads` (a work item's heads
/// consecutive); with a cluster merge the `1 << cluster_log2` blocks of one
/// (sequence, kv head) are consecutive instead (a cluster spans consecutive
/// x): block x is rank `x mod 2^cluster_log2` of its cluster, whose kv head
/// is the fast index.
pub const fn decode_block_item(x: u32, num_kv_heads: u32, cluster_log2: u32) -> u32 {
    (((x >> cluster_log2) / num_kv_heads) << cluster_log2) | (x & ((1 << cluster_log2) - 1))
}

/// The kv head of the attention block at grid x index `x` (see
/// [`decode_block_item`]).
pub const fn decode_block_kv_head(x: u32, num_kv_heads: u32, cluster_log2: u32) -> u32 {
    (x >> cluster_log2) % num_kv_heads
}

/// `(n / d, n % d)` for a divisor `d` ≥ 1 known only at run time: a shift
/// and a mask when `d` is a power of two (every head count, group size and
/// chunk count of the benchmark grids), else the division. On the GPU a
/// division by a run-time value is a dependent chain of ~15 instructions
/// (a float reciprocal and its corrections), and the kernels take several
/// before their first copy and in their epilogue, where each block's time
/// counts about threefold on the many-block rows (docs/perf.md, "Division
/// by powers of two"). (`d` = 0 gives (n, n) rather than a trap; no
/// caller passes it.)
#[inline(always)]
pub const fn div_rem(n: u32, d: u32) -> (u32, u32) {
    let mask = d.wrapping_sub(1);
    if d & mask == 0 {
        (n >> (d.trailing_zeros() & 31), n & mask)
    } else {
        (n / d, n % d)
    }
}
