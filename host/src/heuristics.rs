//! Every `Auto` rule of the planner, each a pure function of plain figures
//! and the device's [`Tuning`] table, with the measurement that set the H100
//! table's value (headings of `docs/perf.md`; a generated table's comments
//! give its own sweep). The planner (`plan.rs`) only applies them; what it
//! may not change (limits, shapes) lives there.

use decode_attn_abi::{Arch, Family, Form, KvFormat, Merge, KEYS_PER_WARP_STEP, MERGE_THREADS, MLA_DIMS, MAX_WARPS, MAX_WARPS_M, MMA_M, NARROW_ROWS};

use crate::occupancy::{blocks_per_sm, DeviceInfo, KernelInfo};
use crate::options::{FamilyChoice, MergeChoice};
use crate::shape::DecodeShape;
use crate::tuning::Tuning;

/// The kernel family of a shape under `choice`:
/// - narrow for a quantized cache with at most 8 rows per kv head: 3-13 %
///   faster there, and no faster for bf16 / fp16, whose fragments cost
///   nothing to convert (docs/perf.md, "Narrow family for few rows");
/// - wgmma for more than [`Tuning::wgmma_min_rows`] rows where it serves
///   the cache (head dim 128): grid B's 48 rows 2.5-3.5 % faster than wide
///   in bf16, 8-10 % in int8 and 23-25 % in int4-g32; its 64-row tiles
///   would leave half their rows empty at 32 and fewer, where wide blocks of
///   one or two row tiles serve instead (H100: 32; docs/perf.md, "Wgmma
///   family for many rows"), on the architectures that have it (sm_90a:
///   `arch`'s modules hold it);
/// - else wide.
///
/// These are sm_90's rules, measured on the H100 and H200; below, they are
/// the same less the families the architecture lacks (unmeasured there).
pub fn family(choice: FamilyChoice, shape: &DecodeShape, arch: Arch, t: &Tuning) -> Family {
    let has = |f: Family| arch.module_for(f.needs()).is_some();
    match choice {
        FamilyChoice::Force(f) => f,
        // Latent rows (MLA's 576 / 512) have one family.
        FamilyChoice::Auto if shape.head_dims().same(MLA_DIMS) => Family::Mla,
        FamilyChoice::Auto => match shape.rows_per_kv_head() {
            Some(rows) if rows <= NARROW_ROWS && shape.kv_format.is_quantized() => Family::Narrow,
            Some(rows) if rows > t.wgmma_min_rows && has(Family::Wgmma) && Family::Wgmma.serves(shape.kv_format, shape.head_dim) => Family::Wgmma,
            _ => Family::Wide,
        },
    }
}

/// Whether `Auto` runs the warp-specialised wgmma kernel of a grid of
/// `waves` waves (at one block per SM): up to
/// [`Tuning::specialized_max_waves`] (H100: 2). Measured side by side, it is 20-26 % (int8) and 14-22 %
/// (int4-g32) faster on grid B's seven one-wave rows and 3-5 % on
/// (1K, 256), whose 256 blocks it runs in two waves. Grids of more waves
/// are unmeasured and keep the unspecialised kernel, whose two blocks per
/// SM overlap each other's start and end (docs/perf.md, "Warp-specialised
/// quantized wgmma").
pub fn specialize(waves: u64, t: &Tuning) -> bool {
    waves <= t.specialized_max_waves as u64
}

/// What the head-pair rule looks at, of a plan that can pair heads.
#[derive(Clone, Copy, Debug)]
pub struct HeadPairFacts {
    /// A token's rows of adjacent kv heads are adjacent in memory (what
    /// makes a pair's rows one piece).
    pub adjacent_heads: bool,
    /// Blocks of the unpaired grid.
    pub blocks: u64,
    /// Blocks resident at once, unpaired (SMs × blocks per SM).
    pub resident_blocks: u64,
    pub sm_count: u64,
    pub paged: bool,
    /// Keys summed over the sequences, and the sequences.
    pub total_keys: u64,
    pub sequences: u64,
}

/// Whether `Auto` pairs heads: adjacent rows, sequences of at least
/// [`Tuning::head_pair_min_mean_keys`] and at most
/// [`Tuning::head_pair_max_mean_keys`] keys on average, a paired grid that
/// keeps [`Tuning::head_pair_min_busy_sms_percent`] % of the busy SMs and
/// (pools) fills [`Tuning::head_pair_paged_min_waves`] waves.
///
/// [`Tuning::head_pair_min_mean_keys`] (H100: 512 keys). A pair's stage holds half its keys of each head, so a short sequence
/// takes twice the stages and the pipeline's fill and drain weigh more:
/// int8 grid D (64, 128) (two pair stages a block) ran 10 % slower
/// paired, (8, 1K) 2 % and (128, 2K) 3.7 % faster. 512 keys (eight pair
/// stages) lies between the rows measured; no row between them was
/// (docs/perf.md, "Head pairs").
///
/// [`Tuning::head_pair_max_mean_keys`] (H100: no bound). On the H200 the
/// one-head blocks of long sequences read faster than pairs: int8 grid D
/// (128, 2K) 539.4 µs paired against 503.1 unpaired (95.6 → 102.5 % of the
/// copy), fp8 per head 548.2 against 507.4, where short ones still gain
/// from pairs ((32, 256) 29.2 against 34.9 µs; docs/perf.md, "Head pairs").
///
/// [`Tuning::head_pair_min_busy_sms_percent`] (H100: 95). Pairs read a
/// token-major int8 cache 2-4 % faster; an SM left idle costs its share:
/// grid D (8, 1K)'s 128 pairs on 132 SMs (3 % idle) measured 2 % faster
/// than its 256 one-head blocks, so a grid that leaves 5 % idle is about
/// where pairs stop paying (the break-even is not measured; docs/perf.md,
/// "Head pairs").
///
/// [`Tuning::head_pair_paged_min_waves`] (H100: 2), in waves of the
/// unpaired plan's resident blocks. A paged block waits for each
/// stage's page ids before its copies; a second resident block hides that,
/// and pairing takes it away where the grid is short: int8 grid D (8, 1K)
/// in 16-token pages read +20 % over contiguous paired (128 pairs, one a
/// SM) against +5.5 % unpaired (256 blocks, two a SM), while D (128, 2K)
/// (2048 pairs) read +4.6 % paired against +6.3 % (docs/perf.md, "Head
/// pairs").
pub fn pair_heads(f: &HeadPairFacts, t: &Tuning) -> bool {
    let paired = f.blocks / 2;
    let busy = |blocks: u64| blocks.min(f.sm_count);
    let keeps_sms = 100u64.saturating_mul(busy(paired)) >= (t.head_pair_min_busy_sms_percent as u64).saturating_mul(busy(f.blocks));
    let paged_waves = !f.paged || paired >= (t.head_pair_paged_min_waves as u64).saturating_mul(f.resident_blocks);
    let long_enough = f.total_keys >= (t.head_pair_min_mean_keys as u64).saturating_mul(f.sequences);
    let short_enough = f.total_keys <= (t.head_pair_max_mean_keys as u64).saturating_mul(f.sequences);
    f.adjacent_heads && keeps_sms && long_enough && short_enough && paged_waves
}

/// Most chunks per sequence the `Auto` merge puts in a cluster for this
/// cache format ([`Tuning::cluster_max_16bit`], [`Tuning::cluster_max_quantized`];
/// 0: never). H100: 2 for 16-bit caches, whose clusters of 2 are 1-4.5 %
/// faster than the global merge (grid B (128, 2K), A B=64; grid B (4K, 64)
/// 2-3 %), while clusters of 4 and 8 were up to 1.5× slower on most rows;
/// 0 for quantized ones: since the in-attention merge became one
/// acquire-release atomic, their two-chunk rows run 1.3-3.5 % faster
/// merged through global memory (int8 A B=64, grid B (4K, 64), int4 A
/// B=128; docs/perf.md, "Cluster merge").
pub fn auto_cluster_max(format: KvFormat, t: &Tuning) -> u32 {
    if format.is_quantized() {
        t.cluster_max_quantized
    } else {
        t.cluster_max_16bit
    }
}

/// Blocks per cluster of a cluster merge for sequences of up to `chunks`
/// chunks: the power of two at or above `chunks` (the kernels find their
/// item with shifts; ranks past a sequence's chunks exit at once) when the
/// sequences split, `choice` allows a cluster that large, the device has
/// one and the plan's kernel has a cluster form (an MLA plan's 64-row
/// kernel, whose cluster limit is [`mla_cluster_max`]; the `transposed`
/// MLA kernels merge globally alone, as the variants other than the
/// standard one); else 0 (merge through global memory).
pub fn cluster_size(chunks: u32, shape: &DecodeShape, transposed: bool, max_cluster: u32, choice: MergeChoice, t: &Tuning) -> u32 {
    let most = if shape.is_latent() {
        if transposed {
            return 0;
        }
        mla_cluster_max(choice, shape.kv_format, max_cluster)
    } else if !shape.kernel_variant().builds(Merge::Cluster, Form::Plain) {
        return 0;
    } else {
        match choice {
            MergeChoice::Auto => auto_cluster_max(shape.kv_format, t).min(max_cluster),
            MergeChoice::Global => 0,
            MergeChoice::Cluster => max_cluster,
        }
    };
    let size = chunks.checked_next_power_of_two().unwrap_or(u32::MAX);
    if chunks > 1 && size <= most {
        size
    } else {
        0
    }
}

/// Most chunks per sequence an MLA plan on the 64-row kernel merges in a
/// cluster: `Auto` 2 for `fp8-ds-mla` caches, none for the others; the
/// device's largest cluster where asked. Measured on the H200, 128 heads
/// merged globally and in clusters alternating twice in one call
/// (docs/perf.md, "MLA cluster merge"), q_len 1: fp8-ds-mla 32 × 4K 131.2
/// → 126.1 µs, 32 × 32K 816.1 → 800.5; bf16 76.8 → 77.7 and 466.7 →
/// 478.0; fp8 per token within 1 % (105.4 → 105.5, 705.3 → 698.2).
/// Larger clusters would cost a wave: the blocks run one an SM, and the
/// H200's driver places 66 clusters of 2 such blocks (all 132 SMs) but
/// 30 of 4 and 15 of 8 (`cuOccupancyMaxActiveClusters`; 128 blocks of a
/// 40 µs kernel ran 47.5 µs unclustered and as clusters of 2, 87.8 as
/// clusters of 4).
pub fn mla_cluster_max(choice: MergeChoice, format: KvFormat, max_cluster: u32) -> u32 {
    match choice {
        MergeChoice::Auto if format == KvFormat::Fp8DsMla => 2.min(max_cluster),
        MergeChoice::Auto | MergeChoice::Global => 0,
        MergeChoice::Cluster => max_cluster,
    }
}

/// Where a plan's split sequences are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeMode {
    /// In the attention kernel, through distributed shared memory: the
    /// chunks of a sequence are the blocks of one thread-block cluster,
    /// which merge their rows after a cluster barrier. No fp32 partials, no
    /// counter, no second launch.
    Cluster,
    /// In the attention kernel: the last block of each (sequence, kv head,
    /// row chunk) to finish merges its rows. No second launch.
    InAttention,
    /// By the merge kernel, launched after the attention kernel, one block
    /// per 1–4 output rows: for merges too large for one block to finish
    /// without becoming the tail ([`Tuning::in_attention_merge_max_bytes`]).
    Kernel,
}

/// The merge mode (without clusters) for sequences of up to `max_slots`
/// partials, of blocks of `rows` query rows of `head_dim`: in the attention
/// kernel up to `max_bytes` ([`Tuning::in_attention_merge_max_bytes`]) of
/// partials a block (slots × rows × head_dim × 4), else the merge kernel.
/// H100: 64 KB; rows of 64 KB and less (grid C's 32 slots of 4
/// rows, grid A's 8 of 8) gain 2-3.5 µs; grid B's 48-row blocks lose 1-2 µs
/// from 4 slots (98 KB) and up to 2.1× at 128 slots (3 MB in one block),
/// where the merge kernel's block per row is 12 % faster (docs/perf.md,
/// "Split merge in the attention kernel").
pub fn merge_mode(max_slots: u32, rows: u32, head_dim: u32, max_bytes: u32) -> MergeMode {
    if (max_slots as u64 * rows as u64).saturating_mul(head_dim as u64 * 4) <= max_bytes as u64 {
        MergeMode::InAttention
    } else {
        MergeMode::Kernel
    }
}

/// Threads of a merge-kernel block: [`MERGE_THREADS`] (128), or 512 for
/// rows of 512 values (MLA's V) where the merge grid's `blocks` fit one a
/// SM (`sm_count`). A 512-value row is 128 outputs of 4 dims: 128 threads
/// leave each lane 4 outputs in turn (up to 8 slots) or every slot of one
/// output (up to 64, in serial batches of 8); 512 leave it one output and
/// 8 slots up to 32. At the merge kernels' 72 registers a 512-thread block
/// takes an SM's register file, a 128-thread one a seventh, so a larger
/// grid waits for SMs. Grid F bf16 on the H200, 128 → 512 threads for
/// every grid: 128 heads 1 × 32K 45.2 → 36.0 µs, 16 heads 1 × 32K 31.2 →
/// 28.3, 32 × 4K 53.6 → 51.3; but 128 heads 32 × 4K (1024 merge blocks)
/// 77.9 → 87.8 (docs/perf.md, "Merge kernel").
pub fn merge_threads(blocks: u64, v_dim: u32, sm_count: u32) -> u32 {
    if v_dim >= 512 && blocks <= sm_count as u64 {
        512
    } else {
        MERGE_THREADS
    }
}

/// Block shape (`warps_m`, `warps_k`) of the `Wide` family for `rows`
/// packed rows: warps along M cover up to `MAX_WARPS_M * 16` rows, warps
/// along K (up to 4, one per 16 keys of a stage) take the rest of the warp
/// budget.
pub fn block_shape(rows: u32, keys_per_stage: u32, kernel: &KernelInfo) -> (u32, u32) {
    let rows = rows.max(1);
    let warps_m = rows.div_ceil(MMA_M).clamp(1, MAX_WARPS_M);
    let max_warps = MAX_WARPS.min(kernel.max_threads_per_block / 32).max(warps_m);
    let max_k = (keys_per_stage / KEYS_PER_WARP_STEP).max(1);
    let mut warps_k = 4.min(max_k);
    while warps_k > 1 && warps_m * warps_k > max_warps {
        warps_k /= 2;
    }
    (warps_m, warps_k)
}

/// Warps along K of a `Narrow` block (one row tile): the power of two up to
/// one per 16 keys of a stage (and `MAX_WARPS`) that keeps the most warps
/// resident per SM; on a tie the larger block when `prefer_larger`, else
/// the smaller (more blocks resident).
pub fn narrow_warps_k(keys_per_stage: u32, dev: &DeviceInfo, kernel: &KernelInfo, smem: impl Fn(u32) -> u32, prefer_larger: bool) -> u32 {
    let max_k = (keys_per_stage / KEYS_PER_WARP_STEP).clamp(1, MAX_WARPS).min((kernel.max_threads_per_block / 32).max(1));
    let mut best = (0u32, 1u32);
    let mut w = 1;
    while w <= max_k {
        let resident = blocks_per_sm(dev, kernel, 32 * w, smem(w)) * w;
        if resident > best.0 || (resident == best.0 && prefer_larger) {
            best = (resident, w);
        }
        w *= 2;
    }
    best.1
}

/// Warps along K of a narrow block of a plan that splits (`splits`) or
/// not: with as many warps resident either way, split work runs best in
/// the larger blocks, unsplit work in more, smaller ones (fewer waves,
/// shorter epilogues; docs/perf.md, "Narrow family for few rows"), and
/// unsplit short sequences keep at least two 16-key steps a warp
/// (one-step warps leave the block's time to its epilogue).
pub fn narrow_block_warps(splits: bool, longest: u32, keys_per_stage: u32, dev: &DeviceInfo, kernel: &KernelInfo, smem: impl Fn(u32) -> u32) -> u32 {
    if splits {
        return narrow_warps_k(keys_per_stage, dev, kernel, smem, true);
    }
    let cap = (longest / (2 * KEYS_PER_WARP_STEP)).max(1);
    let mut k = narrow_warps_k(keys_per_stage, dev, kernel, smem, false);
    while k > cap && k > 1 {
        k /= 2;
    }
    k
}

/// Resident warps per SM past which more co-resident blocks stop adding
/// throughput (block of `warps_m` row-tile warps), from the table
/// ([`Tuning::saturating_warps_8bit_narrow`], `_16bit_wide`, `_16bit_wgmma`;
/// 0: none). The H100's, where measured:
/// - a narrow int8 block of 8 warps alone keeps an SM's share of HBM busy,
///   so splitting a sequence further only to fill a second block slot adds
///   merge work and pipeline fills (grid C: 16 splits 26 / 56 / 83 % of
///   the roofline at 8K / 32K / 128K against 23 / 54 / 77 % with 32);
/// - so does one 4-warp wide bf16 / fp16 block of one row tile (grid C
///   8K / 32K / 128K 23.2 / 57.1 / 187.5 → 21.7 / 55.0 / 184.3 µs with 16
///   splits instead of 32, grid A B=64 / 128 −1.5 / −1.9 %, no row slower);
/// - so does one 8-warp bf16 / fp16 wgmma block (two warpgroups; grid B's
///   split rows: 2048-key chunks, one block per SM, 3.0-4.9 µs faster than
///   1024-key chunks filling both block slots, on every row from (2K, 128)
///   to (128K, 2); half the partials to merge).
///
/// int4 (its steps do about twice int8's work per byte, and more resident
/// warps hide more of it) and blocks of several row tiles on `mma.sync`
/// (grid B: one per SM made B ≤ 64 up to 13 % slower) gain from every
/// resident warp, as do the quantized wgmma kernels (docs/perf.md, "Splits
/// for one block per SM"). Both fp8 formats read int8's value bytes and
/// take int8's rule.
pub fn saturating_warps_per_sm(format: KvFormat, family: Family, warps_m: u32, t: &Tuning) -> Option<u32> {
    let warps = match (format, family) {
        (KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8, Family::Narrow) => t.saturating_warps_8bit_narrow,
        (KvFormat::Bf16 | KvFormat::F16, Family::Wide) if warps_m == 1 => t.saturating_warps_16bit_wide,
        (KvFormat::Bf16 | KvFormat::F16, Family::Wgmma) => t.saturating_warps_16bit_wgmma,
        // (Each format named, so that a new one is placed here.)
        (KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8, Family::Wide | Family::Wgmma)
        | (KvFormat::Bf16 | KvFormat::F16, Family::Wide | Family::Narrow)
        | (KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128, _)
        // (Latent rows alone: only the MLA family reads them.)
        | (KvFormat::Fp8DsMla, _)
        | (_, Family::Mla) => 0,
    };
    (warps > 0).then_some(warps)
}

/// The blocks per SM the split planner should fill: all that fit, or as
/// many as reach [`saturating_warps_per_sm`] (at least one); for a paged
/// cache at least [`Tuning::paged_min_blocks_per_sm`] where they fit.
///
/// [`Tuning::paged_min_blocks_per_sm`] (H100: 1, no floor). A paged block
/// forms each row's address from a page id in shared memory, and where it
/// is alone on its SM that latency is not hidden: on the H200, with the
/// page order shuffled or not and the pools packed or not alike, grid A
/// B=128 bf16 read +18.5 % over contiguous at 16-token pages in one block a
/// SM (unsplit) and +4.7 % in two (two splits: 134.5 against 127.3 µs
/// contiguous); C (1, 128K) +20 % at 16 splits, +1.7 % at 32; A B=32 / 64
/// +13 / +32 % at 4 / 2 splits, +2.7 / +2.8 % at 8 / 4 (docs/perf.md,
/// "Paged pools on the H200").
pub fn useful_blocks_per_sm(format: KvFormat, family: Family, warps_m: u32, warps_per_block: u32, fit: u32, paged: bool, t: &Tuning) -> u32 {
    let saturating = match saturating_warps_per_sm(format, family, warps_m, t) {
        Some(w) => fit.min((w / warps_per_block.max(1)).max(1)),
        None => fit,
    };
    if paged {
        saturating.max(fit.min(t.paged_min_blocks_per_sm))
    } else {
        saturating
    }
}

/// Chunk size (keys) for `SplitPolicy::Auto`: the smallest estimated time,
/// where a block costs its keys plus a fixed overhead (pipeline fill and
/// epilogue: `overhead_stages` stages of keys, [`Tuning::split_overhead_stages`],
/// H100 2), and the kernel takes at least its
/// longest block and at least the total work in *whole* waves of
/// chunk-long blocks (a grid one block over a wave takes two waves; a
/// fluid estimate misses that). `u32::MAX`: no split (`unsplit_blocks`
/// fill a wave already). Candidates ascend geometrically (planning stays
/// O(batch · log len)), each evened out over the splits it makes of the
/// longest sequence: 33 stages of a 64-stage sequence become 32, so its
/// two blocks are equal instead of 33 + 31 stages (the longer one set the
/// time: +3 %; docs/perf.md, "Split sizing").
pub fn auto_chunk_keys(seq_lens: &[u32], blocks_per_len: u64, keys_per_stage: u32, wave: u64, overhead_stages: u32) -> u32 {
    let (keys_per_stage, wave, blocks_per_len) = (keys_per_stage.max(1), wave.max(1), blocks_per_len.max(1));
    let max_len = seq_lens.iter().copied().max().unwrap_or(1).max(1);
    let unsplit_blocks = (seq_lens.len() as u64).saturating_mul(blocks_per_len);
    if unsplit_blocks >= wave {
        return u32::MAX;
    }
    let overhead = overhead_stages as u64 * keys_per_stage as u64;
    let cost = |chunk: u64| -> u64 {
        let mut total = 0u64;
        for &len in seq_lens {
            let len = len as u64;
            let n = len.div_ceil(chunk);
            total = total.saturating_add(len.saturating_add(n.saturating_mul(overhead)).saturating_mul(blocks_per_len));
        }
        let longest = chunk.min(max_len as u64) + overhead;
        let waves = total.div_ceil(wave.saturating_mul(longest));
        longest.max(waves.saturating_mul(longest))
    };
    // `<=` lets the larger chunk (fewer partials to merge) win ties.
    let mut best = (u64::MAX, u32::MAX);
    let stages_max = max_len.div_ceil(keys_per_stage);
    let mut stages = 1u32;
    loop {
        let even = stages_max.div_ceil(stages_max.div_ceil(stages));
        let chunk = even.saturating_mul(keys_per_stage).min(max_len);
        let c = cost(chunk as u64);
        if c <= best.0 {
            best = (c, chunk);
        }
        if stages >= stages_max {
            break;
        }
        stages = (stages + 1).max(stages + stages / 8).min(stages_max);
    }
    if best.1 >= max_len {
        u32::MAX
    } else {
        best.1
    }
}

/// The fewest stages of an MLA block's part of a sequence longer than
/// that (a split chunk, [`mla_chunk_keys`], or a balanced piece,
/// `work::balanced_work`): an MLA block's two warpgroups take a stage
/// each, so a one-stage part leaves one idle.
pub const MLA_MIN_PIECE_STAGES: u32 = 2;

/// The MLA family's `Auto` chunk: `auto`'s ([`auto_chunk_keys`]), or
/// longer where it would be fewer stages than the sequence's row chunks
/// (two at least) or make more blocks than 128 (chunks × `row_chunks`),
/// evened out over the chunks it makes (`u32::MAX`: no split).
/// `auto_chunk_keys` fills a wave with the shortest blocks; an MLA
/// block's two warpgroups take a stage each (a one-stage block leaves one
/// idle), and each chunk adds a partial of up to 64 rows × 512 f32 to
/// merge. Chunk sweeps of grid F's batch-1 rows on the H200 (bf16, the
/// merge kernel's 512-thread blocks): 16 heads 1 × 32K 26.9 µs at 128
/// chunks against 28.5 at 64 (q_len 2 28.8 / 29.5), 128 heads 1 × 32K
/// 35.8 at 64 chunks against 47.7 at 128; 128 heads q_len 2 (four row
/// chunks) 1 × 4K 19.4 at 4-stage chunks against 24.5 at 2, 1 × 32K
/// 49.9 at 32 chunks against 66.6 at 64; 128 heads 1 × 4K q_len 1 17.9
/// at 2-stage chunks against 18.8 at 4 (docs/perf.md, "MLA split").
pub fn mla_chunk_keys(auto: u32, longest: u32, keys_per_stage: u32, row_chunks: u32) -> u32 {
    const MOST_BLOCKS: u64 = 128;
    let keys_per_stage = keys_per_stage.max(1);
    let row_chunks = row_chunks.max(1) as u64;
    let stages = longest.div_ceil(keys_per_stage) as u64;
    let most_chunks = (MOST_BLOCKS / row_chunks).max(1);
    let least_stages = stages.div_ceil(most_chunks).max(MLA_MIN_PIECE_STAGES as u64).max(row_chunks);
    let chunks = stages.div_ceil(least_stages);
    let floor = stages.div_ceil(chunks).saturating_mul(keys_per_stage as u64);
    if floor >= longest as u64 {
        return u32::MAX;
    }
    auto.max(floor as u32)
}

/// Blocks per cluster of an MLA plan's launch (0: none): a work item's
/// two row chunks (128 query rows: 128 heads at q_len 1) co-scheduled as
/// one 2-block cluster, so that the two blocks reading the same keys run
/// side by side on one GPC (one from HBM, the other from L2), where the
/// grid's `blocks` are more than a `wave` (the blocks resident at once).
/// On the H200, main's build against this rule's, alternating three
/// times in one call (docs/perf.md, "MLA kernel", pair clusters): 128
/// heads B = 128 × 4K 248.0 against 249.8 µs (medians of the three), 128 ×
/// 32K's minima 1835 against 1846 (its medians in the slow mode both);
/// grids of one wave or less were 0.3-1 % slower as clusters (B = 1 × 4K
/// 17.7 → 17.9, 32 × 4K 76.6 → 77.1), hence the wave. Not for the
/// transposed kernel (one row chunk) or other row counts (not measured).
pub fn mla_row_cluster(family: Family, transposed: bool, row_chunks: u32, max_cluster: u32, blocks: u64, wave: u64) -> u32 {
    if family == Family::Mla && !transposed && row_chunks == 2 && max_cluster >= 2 && blocks > wave {
        2
    } else {
        0
    }
}

/// Runs of a balanced MLA plan (`work::balanced_work`): one a slot of
/// `row_chunks` blocks of a `wave`.
pub fn mla_balanced_runs(row_chunks: u32, wave: u64) -> u32 {
    (wave / row_chunks.max(1) as u64).clamp(1, u32::MAX as u64) as u32
}

/// Whether an MLA plan whose automatic split left every sequence whole
/// (at least a wave of blocks) runs balanced pieces instead
/// (`work::balanced_work`): where the pieces' estimate, plus a merge
/// launch, is 1 % or more below the whole sequences'. `whole`: each
/// item's stages, `pieces`: each piece's stages and whether it is a cut
/// one (a partial to write and merge), both in launch order (longest
/// first); an item is `row_chunks` blocks of its stages plus
/// `overhead_stages` (a cut piece twice that), handed in order to the
/// first of a `wave`'s slots free, as the hardware dispatches. 128 heads
/// B = 128 × 32K is 256 blocks on 132 SMs, 1.94 waves: the second wave's
/// 124 blocks leave 8 SMs idle, 3 % of the time, B = 100 24 %. Measured
/// on the H200, main's build and the pieces alternating twice in one
/// call (docs/perf.md, "MLA balanced pieces"): B = 100 × 32K 1745 →
/// 1505 µs (medians; minima 1723 → 1366), 100 × 4K 239.6 → 210.2, q_len
/// 2 128 × 32K 3851 → 3785, 32 × 32K 862 → 849, 128 × 32K's minima 1752
/// → 1738; but q_len 2 128 × 4K 464 → 471, which the cut pieces' second
/// overhead now leaves whole (estimated 0.4 % slower; with one overhead,
/// 1.1 % faster).
pub fn mla_balanced(whole: &[u32], pieces: &[(u32, bool)], row_chunks: u32, wave: u64, overhead_stages: u32) -> bool {
    let ov = overhead_stages as u64;
    let plain = dispatch_makespan(whole.iter().map(|&s| s as u64 + ov), row_chunks, wave);
    let balanced = dispatch_makespan(pieces.iter().map(|&(s, cut)| s as u64 + if cut { 2 * ov } else { ov }), row_chunks, wave);
    match (plain, balanced) {
        (Some(plain), Some(balanced)) => (balanced + ov) * 100 <= plain * 99,
        _ => false,
    }
}

/// When the last of `items` (each `row_chunks` blocks of its cost) ends,
/// handed in order to the first free of `wave` slots; `None` for no slots
/// (or more than a million).
fn dispatch_makespan(items: impl Iterator<Item = u64>, row_chunks: u32, wave: u64) -> Option<u64> {
    if wave == 0 || wave > 1 << 20 {
        return None;
    }
    // (A min-heap of the slots' finishing times.)
    let mut slots: std::collections::BinaryHeap<std::cmp::Reverse<u64>> = (0..wave).map(|_| std::cmp::Reverse(0)).collect();
    let mut end = 0u64;
    for cost in items {
        for _ in 0..row_chunks.max(1) {
            let std::cmp::Reverse(t) = slots.pop()?;
            end = end.max(t + cost);
            slots.push(std::cmp::Reverse(t + cost));
        }
    }
    Some(end)
}

/// The `Auto` rule of [`crate::TransposeChoice`]: an MLA plan runs the
/// transposed kernel wherever it may (at most 16 query rows: the 64-row
/// kernel's blocks would be three quarters padding rows, their MMAs four
/// times the work). Both kernels in one call on the H200, 16 heads q_len
/// 1 (docs/perf.md, "MLA at 16 heads"): bf16 32 × 4K 51.9 → 49.9 µs, the
/// batch-1 rows 0.3-0.4 µs faster, the others within ±1 %; fp8 per token
/// 1.09-1.16× and ds-mla 1.05-1.52× faster on every row.
pub fn mla_transposed(rows: u32) -> bool {
    rows <= decode_attn_abi::MLA_T_ROWS
}

/// The `Auto` rule of [`crate::TransposeChoice`] past 16 rows: an MLA plan
/// of an fp8 latent cache (the formats with the row-chunk form,
/// `decode_attn_abi::has_transposed_rows_form`) of at most 32 query rows
/// (16 heads × q_len 2: DeepSeek's multi-token prediction) runs the
/// transposed kernel's row-chunk form (one block of 32 rows, each key
/// converted once for both tokens, in registers), where the 64-row kernel
/// converts each stage through shared memory and half its rows are
/// padding. Measured against 16-row chunks (each reading and converting
/// the keys) and the 64-row kernel in docs/perf.md, "MLA 16 heads × q_len
/// 2 in row chunks" and "MLA 16 heads × q_len 2 in one block". Not
/// measured past 32 rows, where the keys' reads grow with the chunks.
pub fn mla_transposed_rows(rows: u32, format: KvFormat) -> bool {
    rows > decode_attn_abi::MLA_T_ROWS && rows <= 2 * decode_attn_abi::MLA_T_ROWS && decode_attn_abi::has_transposed_rows_form(format, Family::Mla)
}
