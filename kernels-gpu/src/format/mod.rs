//! KV cache formats. The attention kernel body is generic over [`KvFormat`]:
//! a format owns storage only — how its rows (found by a
//! `crate::addressing::RowAddressing`) reach shared memory and how mma
//! B-fragments of K (non-transposed) and V (transposed) are produced from
//! there, so quantized formats dequantize at that point and reuse
//! everything else.

mod int4;
mod int8;
mod latent;
mod plain;

pub use int4::Int4Kv;
pub use int8::{Fp8Kv, Fp8PerHeadKv, Int8Kv};
pub use latent::Fp8DsMlaKv;
pub use plain::PlainKv;

use crate::addressing::RowAddressing;
use crate::arch::{math, mma, wgmma};
use decode_attn_abi::{Dtype, WGMMA_M};

/// The 16-bit float type the tensor cores compute in (Q, P and dequantized K/V).
pub trait Half {
    const DTYPE: Dtype;
    /// `d = a·b + c` on one m16n8k16 tile.
    fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4];
    /// Two f32 → one packed pair, `lo` in the low half.
    fn pack(lo: f32, hi: f32) -> u32;
    /// A packed pair back to two f32 (exact).
    fn unpack(x: u32) -> (f32, f32);
    /// `arch::wgmma`'s score MMA (head_dim 128) in this type.
    ///
    /// # Safety
    /// As `arch::wgmma::scores_bf16_d128`.
    unsafe fn wgmma_scores_d128(q: u64, k: u64) -> [f32; 16];
    /// `arch::wgmma`'s P·V MMA (head_dim 128) in this type.
    ///
    /// # Safety
    /// As `arch::wgmma::pv_bf16_d128`.
    unsafe fn wgmma_pv_d128(o: &mut [[f32; 4]; 16], a: [[u32; 4]; 2], v: u64);
    /// `arch::wgmma`'s 64-key score MMA (head_dim 128) in this type.
    ///
    /// # Safety
    /// As `arch::wgmma::scores64_bf16_d128`.
    unsafe fn wgmma_scores64_d128(q: u64, k: u64) -> [f32; 32];
    /// `arch::wgmma`'s 64-key P·V MMA (head_dim 128) in this type.
    ///
    /// # Safety
    /// As `arch::wgmma::pv64_bf16_d128`.
    unsafe fn wgmma_pv64_d128(o: &mut [[f32; 4]; 16], a: [[u32; 4]; 4], v: u64);
}

pub struct Bf16;
pub struct F16;

/// [`Half`]'s wgmma methods as `arch::wgmma`'s functions of one type.
macro_rules! wgmma_methods {
    ($scores:ident, $pv:ident, $scores64:ident, $pv64:ident) => {
        #[inline(always)]
        unsafe fn wgmma_scores_d128(q: u64, k: u64) -> [f32; 16] {
            wgmma::$scores(q, k)
        }
        #[inline(always)]
        unsafe fn wgmma_pv_d128(o: &mut [[f32; 4]; 16], a: [[u32; 4]; 2], v: u64) {
            wgmma::$pv(o, a, v)
        }
        #[inline(always)]
        unsafe fn wgmma_scores64_d128(q: u64, k: u64) -> [f32; 32] {
            wgmma::$scores64(q, k)
        }
        #[inline(always)]
        unsafe fn wgmma_pv64_d128(o: &mut [[f32; 4]; 16], a: [[u32; 4]; 4], v: u64) {
            wgmma::$pv64(o, a, v)
        }
    };
}

impl Half for Bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
    #[inline(always)]
    fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
        mma::mma_bf16_m16n8k16(a, b, c)
    }
    #[inline(always)]
    fn pack(lo: f32, hi: f32) -> u32 {
        math::pack_bf16x2(lo, hi)
    }
    #[inline(always)]
    fn unpack(x: u32) -> (f32, f32) {
        math::unpack_bf16x2(x)
    }
    wgmma_methods!(scores_bf16_d128, pv_bf16_d128, scores64_bf16_d128, pv64_bf16_d128);
}

impl Half for F16 {
    const DTYPE: Dtype = Dtype::F16;
    #[inline(always)]
    fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
        mma::mma_f16_m16n8k16(a, b, c)
    }
    #[inline(always)]
    fn pack(lo: f32, hi: f32) -> u32 {
        math::pack_f16x2(lo, hi)
    }
    #[inline(always)]
    fn unpack(x: u32) -> (f32, f32) {
        math::unpack_f16x2(x)
    }
    wgmma_methods!(scores_f16_d128, pv_f16_d128, scores64_f16_d128, pv64_f16_d128);
}

pub trait KvFormat {
    const FORMAT: decode_attn_abi::KvFormat;
    /// The type K/V are fed to the tensor cores in.
    type Compute: Half;
    /// The query's and output's dtype. When it differs from `Compute`, the
    /// kernel converts Q rows into a shared tile first (exactly, with a
    /// power-of-two scale per row), in the head-dim order `k_fragment_pair` uses.
    type Query: Half;
    /// Where head dim `dim` of a converted Q row goes: (16-dim k-chunk,
    /// position 0..16 in it). Formats whose `k_fragment_pair` reads K's dims in
    /// another order store Q in that order, so Q·K is unchanged.
    #[inline(always)]
    fn q_position(dim: u32) -> (u32, u32) {
        (dim / 16, dim % 16)
    }
    /// The head dim of column `n` (0..8) of P·V's n8 tile `nt`: tiles `2·np`
    /// and `2·np + 1` are the two halves of 16-dim tile `np` of
    /// [`KvFormat::v_fragment_pair`]. Formats that reorder dims override it.
    #[inline(always)]
    fn v_dim(nt: u32, n: u32) -> u32 {
        8 * nt + n
    }
    /// The first of the two adjacent output dims a thread holds in column
    /// pair `2c, 2c+1` of P·V's n8 tile `nt` (formats whose `v_fragment_pair`
    /// permutes dims in adjacent pairs; `V_DIMS_INTERLEAVED` ones differ).
    #[inline(always)]
    fn o_pair(nt: u32, c: u32) -> u32 {
        Self::v_dim(nt, 2 * c)
    }
    /// Lazy rescaling: how far (base 2) a step's logits may exceed a row's
    /// running max before the warp moves its maxima and rescales its
    /// accumulator ([`crate::state::must_move`]); P's terms reach
    /// `2^slack`. 8 (terms ≤ 256) fits every 16-bit P. `None`: a plain
    /// online softmax (formats that scale P before packing it).
    const RESCALE_SLACK: Option<f32> = Some(8.0);
    /// Rows carry a per-row scale in scales (staged after a stage's rows):
    /// the body multiplies score columns by K's scales and P by V's.
    const SCALED: bool = false;
    /// [`KvFormat::v_fragment_pair`] yields, for each 16 head dims `16·np ..`,
    /// the even dims as the first n8 tile and the odd dims as the second
    /// (instead of dims `16np..+8` then `+8..+16`); the epilogue puts them back.
    const V_DIMS_INTERLEAVED: bool = false;

    /// Copies this thread's share of K's and V's scales of rows
    /// `first .. first + keys` to `k_tile` / `v_tile` (V's entries
    /// `v_delta` bytes after K's: the side tensors share strides); rows at
    /// or past `end` read 0. Formats without scales copy nothing.
    ///
    /// # Safety
    /// As [`KvFormat::load_kv_rows`], for side entries of
    /// `FORMAT.scale_bytes(D)` bytes.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn load_kv_scales<const D: usize, A: RowAddressing>(k: A, v_delta: u64, k_tile: u32, v_tile: u32, first: u32, end: u32, keys: u32, tid: u32, nthreads: u32) {
        let row_side = Self::FORMAT.scale_bytes(D as u32);
        if row_side > 0 {
            copy_kv_scales(k, v_delta, k_tile, v_tile, first, end, keys, row_side, tid, nthreads)
        }
    }

    /// Issues this thread's share of asynchronous copies of K's and V's
    /// rows `first .. first + keys` into the shared tiles at `k_tile` and
    /// `v_tile`; rows at or past `end` are zero-filled (never read), so
    /// masked keys hold finite values. V's rows sit `v_delta` bytes after
    /// K's (the caches share strides), so one address serves both when
    /// `JOINT` (K and V chunks issued in pairs); otherwise K's rows, then
    /// V's. `U` chunk addresses are computed before their copies issue.
    ///
    /// # Safety
    /// The tiles must have room for `keys` rows of this format; rows
    /// `first .. end` of `k` (and `v_delta` bytes on) must be readable;
    /// `first < end`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn load_kv_rows<const D: usize, A: RowAddressing, const U: usize, const JOINT: bool>(
        k: A,
        v_delta: u64,
        k_tile: u32,
        v_tile: u32,
        first: u32,
        end: u32,
        keys: u32,
        tid: u32,
        nthreads: u32,
    ) {
        let row_bytes = Self::FORMAT.row_bytes(D as u32);
        if JOINT {
            copy_rows::<A, U, true, _>(SwizzledRows, k, k_tile, v_delta, v_tile, first, end, keys, row_bytes, tid, nthreads)
        } else {
            copy_rows::<A, U, false, _>(SwizzledRows, k, k_tile, 0, 0, first, end, keys, row_bytes, tid, nthreads);
            copy_rows::<_, U, false, _>(SwizzledRows, Shifted { rows: k, by: v_delta }, v_tile, 0, 0, first, end, keys, row_bytes, tid, nthreads);
        }
    }

    /// B fragments of K for keys `key .. key + 16` of the tile and the head
    /// dims of k-chunks `2·kp` and `2·kp + 1` (16 dims each, in the order
    /// `q_position` gives): per chunk, `[b0, b1]` of keys 0..8, then of keys
    /// 8..16. Pairs, so a format whose two chunks share loads or scales
    /// (int8: one 64-bit load; int4: one word and one scale / zero) reads
    /// them once.
    ///
    /// # Safety
    /// The tile's rows must have landed (after the cp.async wait and barrier).
    unsafe fn k_fragment_pair<const D: usize>(tile: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2];

    /// B fragments of V for keys `key .. key + 16` and the head dims of
    /// 16-dim tiles `2·mp` and `2·mp + 1`: per tile, `[b0, b1]` of its first
    /// 8 output dims, then of the other 8 (which dims: `v_dim`).
    ///
    /// # Safety
    /// As [`KvFormat::k_fragment_pair`].
    unsafe fn v_fragment_pair<const D: usize>(tile: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2];

    /// [`KvFormat::k_fragment_pair`] of a K tile whose rows' scales is
    /// at `side` rather than where a whole stage puts it (a head pair's
    /// second head: `Pipeline::head_tiles`). Formats that dequantize
    /// without scales in the fragment ignore it.
    ///
    /// # Safety
    /// As [`KvFormat::k_fragment_pair`].
    #[inline(always)]
    unsafe fn k_fragment_pair_in<const D: usize>(tile: u32, _side: u32, key: u32, kp: u32, lane: u32) -> [[u32; 4]; 2] {
        Self::k_fragment_pair::<D>(tile, key, kp, lane)
    }

    /// [`KvFormat::v_fragment_pair`] with V's scales at `side` (as
    /// [`KvFormat::k_fragment_pair_in`]).
    ///
    /// # Safety
    /// As [`KvFormat::k_fragment_pair`].
    #[inline(always)]
    unsafe fn v_fragment_pair_in<const D: usize>(tile: u32, _side: u32, key: u32, mp: u32, lane: u32) -> [[u32; 4]; 2] {
        Self::v_fragment_pair::<D>(tile, key, mp, lane)
    }

    /// The wgmma kernels' conversion: K's and V's rows `key .. key +
    /// HALVES · WGMMA_KEYS` of a landed stage become `Compute` rows `row ..` of the
    /// [`Swizzle128`] tiles `k_half` and `v_half` (`WGMMA_M` rows each),
    /// head dims in order, as the tensor cores read them; scales the
    /// format multiplies in here (int4's scales and zeros) is applied,
    /// what the body applies (`SCALED`) is not. `t` (0..128) is the
    /// thread's index in its warpgroup, whose threads convert together.
    /// `HALVES` (1 or 2) 32-key halves in one call (a thread's jobs of the
    /// second half are the first's, 32 rows on).
    /// `EAGER`: every load of the thread's jobs is issued before the first
    /// conversion (the compiler cannot move a load above an earlier store
    /// to shared memory, so otherwise each job waits out its own load's
    /// latency; worth the registers in the warp-specialised producer).
    /// Rows of the stage from `valid` on are past the work item's end and
    /// may hold stale bytes: their P is 0, so formats with NaN codes must
    /// convert them to finite values.
    /// Formats the MMAs read as stored convert nothing.
    ///
    /// # Safety
    /// The stage's rows must have landed (after the cp.async wait and
    /// barrier); no MMA may be reading the destination rows.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn stage_to_half<const D: usize, const EAGER: bool, const HALVES: usize>(stage: StageTiles, key: u32, valid: u32, k_half: u32, v_half: u32, row: u32, t: u32) {
        let _ = (stage, key, valid, k_half, v_half, row, t);
    }

    /// K's and V's scales of a per-tensor format (`decode_attn_abi::KvFormat::tensor_scaled`),
    /// device scalars at `DecodeParams::k_scales` / `v_scales`, read at each
    /// launch: K's multiplies Q's row factors (`decode::query`), V's the
    /// output's `1 / l` (`decode::epilogue`). 1 for every other format
    /// (a multiplication the compiler removes).
    ///
    /// # Safety
    /// For per-tensor formats the params' side pointers must be readable f32s.
    #[inline(always)]
    unsafe fn tensor_scales(p: &decode_attn_abi::DecodeParams) -> (f32, f32) {
        if Self::FORMAT.tensor_scaled() {
            (crate::arch::memory::ld_global_nc_f32(p.k_scales), crate::arch::memory::ld_global_nc_f32(p.v_scales))
        } else {
            (1.0, 1.0)
        }
    }
}

/// Shared addresses of one pipeline stage: K's and V's rows and scales.
#[derive(Clone, Copy)]
pub struct StageTiles {
    pub k: u32,
    pub v: u32,
    pub k_scales: u32,
    pub v_scales: u32,
}

/// The 16-bit tiles of the wgmma kernels ([`KvFormat::stage_to_half`]).
pub const HALF_TILE: Swizzle128 = Swizzle128 { rows: WGMMA_M };

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are
/// `row_bytes` long (a multiple of 16, at least 32). The chunk index is
/// XOR-swizzled so that one chunk of 8 consecutive rows (an `ldmatrix`
/// matrix) lands in 8 different 16-byte bank groups: with `U` chunks per row
/// and `R = max(1, 8 / U)` rows per 128 bytes, rows `r` and `r + R·k` differ
/// in `(r / R) mod min(U, 8)`, which is XORed into the chunk (never past the
/// row's end).
#[inline(always)]
pub fn swizzled(row: u32, chunk: u32, row_bytes: u32) -> u32 {
    let chunks = row_bytes / 16;
    let rows_per_line = if chunks >= 8 { 1 } else { 8 / chunks };
    let mask = if chunks >= 8 { 7 } else { chunks - 1 };
    row * row_bytes + ((chunk ^ ((row / rows_per_line) & mask)) << 4)
}

/// How a stage's rows are laid out in shared memory, and in which order a
/// block's threads copy their 16-byte chunks (consecutive copies go to
/// consecutive threads: a row's chunks, for coalesced global reads).
pub trait TileLayout: Copy {
    /// Byte offset of chunk `chunk` of row `row` in the tile.
    fn at(self, row: u32, chunk: u32, row_bytes: u32) -> u32;
}

/// Rows one after another, chunks [`swizzled`] for `ldmatrix`.
#[derive(Clone, Copy)]
pub struct SwizzledRows;

impl TileLayout for SwizzledRows {
    #[inline(always)]
    fn at(self, row: u32, chunk: u32, row_bytes: u32) -> u32 {
        swizzled(row, chunk, row_bytes)
    }
}

/// Rows one after another, chunks in order: the quantized wgmma kernels'
/// raw stages (one bulk copy lands a run of contiguous rows as it is;
/// `decode_attn_abi::wgmma_conversion_job` reads it without bank conflicts).
#[derive(Clone, Copy)]
pub struct LinearRows;

impl TileLayout for LinearRows {
    #[inline(always)]
    fn at(self, row: u32, chunk: u32, row_bytes: u32) -> u32 {
        row * row_bytes + 16 * chunk
    }
}

/// The warpgroup MMA's 128-byte swizzle (`arch::wgmma`, K-major for K and
/// Q, MN-major for V: the same bytes): each row's 128-byte slices (64
/// 16-bit values) go to column blocks of `rows × 128` bytes, row `r` of a
/// block at `128 r`, its 16-byte chunk `c` at chunk `c ^ (r % 8)`. A
/// quarter-warp copying one slice writes 8 different bank groups, and a
/// warp reads whole 128-byte lines of global memory. Tiles start on
/// 1024-byte boundaries (the swizzle's period).
#[derive(Clone, Copy)]
pub struct Swizzle128 {
    /// Rows of the tile.
    pub rows: u32,
}

impl TileLayout for Swizzle128 {
    #[inline(always)]
    fn at(self, row: u32, chunk: u32, _row_bytes: u32) -> u32 {
        (chunk / 8) * self.rows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) << 4)
    }
}

/// Issues this thread's share of 16-byte `cp.async` copies of rows
/// `first .. first + keys` (each `row_bytes` long) of `rows` into `tile`,
/// laid out as `L`, and when `PAIRED` also of the rows `v_delta` bytes on
/// into `v_tile` (V's, from K's: one row address, for paged caches one
/// page-id lookup, per chunk pair). Rows at or past `end` read nothing and
/// are zero-filled, their source address staying a valid one. The row copy
/// every format shares.
///
/// # Safety
/// As [`KvFormat::load_kv_rows`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_rows<A: RowAddressing, const U: usize, const PAIRED: bool, L: TileLayout>(
    layout: L,
    rows: A,
    tile: u32,
    v_delta: u64,
    v_tile: u32,
    first: u32,
    end: u32,
    keys: u32,
    row_bytes: u32,
    tid: u32,
    nthreads: u32,
) {
    let chunks_per_row = row_bytes / 16;
    let total = keys * chunks_per_row;
    let mut c = tid;
    while c < total {
        // Paged rows: the addresses of U chunks first, so their page-id
        // reads from shared memory overlap instead of each one delaying its
        // copy (one read's latency per stage, not one per chunk).
        let mut src = [0u64; U];
        for (u, s) in src.iter_mut().enumerate() {
            let cc = c + u as u32 * nthreads;
            let key = first + cc / chunks_per_row;
            let src_key = if cc < total && key < end { key } else { first };
            *s = rows.row(src_key) + ((cc % chunks_per_row) as u64) * 16;
        }
        for (u, &addr) in src.iter().enumerate() {
            let cc = c + u as u32 * nthreads;
            if cc < total {
                let (row, chunk) = (cc / chunks_per_row, cc % chunks_per_row);
                let (at, bytes) = (layout.at(row, chunk, row_bytes), if first + row < end { 16 } else { 0 });
                crate::arch::memory::cp_async_16(tile + at, addr, bytes);
                if PAIRED {
                    crate::arch::memory::cp_async_16(v_tile + at, addr.wrapping_add(v_delta), bytes);
                }
            }
        }
        c += U as u32 * nthreads;
    }
}

/// Rows `by` bytes after another addressing's (V's rows, from K's).
#[derive(Clone, Copy)]
struct Shifted<A> {
    rows: A,
    by: u64,
}

impl<A: RowAddressing> RowAddressing for Shifted<A> {
    const PAGED: bool = A::PAGED;
    #[inline(always)]
    fn row(&self, token: u32) -> u64 {
        self.rows.row(token).wrapping_add(self.by)
    }
    #[inline(always)]
    fn page_tokens(&self) -> u32 {
        self.rows.page_tokens()
    }
}

/// Issues this thread's share of copies of K's and V's scales of rows
/// `first .. first + keys` (`row_side` bytes each, a power of two ≥ 4,
/// contiguous over the tokens of a page and 16-byte aligned at `first`)
/// into the tiles, V's source `v_delta` bytes after K's; bytes of rows at
/// or past `end` are zero-filled. Strided caches copy 16 bytes at a time;
/// paged ones whose pages hold fewer than 16 bytes of scales (int8 at
/// page sizes 1 and 2) one page at a time. One address per K/V pair.
///
/// # Safety
/// As [`KvFormat::load_kv_scales`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn copy_kv_scales<A: RowAddressing>(k: A, v_delta: u64, k_tile: u32, v_tile: u32, first: u32, end: u32, keys: u32, row_side: u32, tid: u32, nthreads: u32) {
    let valid = if end > first { (end - first).min(keys) * row_side } else { 0 };
    if !A::PAGED {
        let base = k.row(first);
        let mut j = tid;
        while 16 * j < keys * row_side {
            let bytes = if valid > 16 * j { (valid - 16 * j).min(16) } else { 0 };
            let src = if bytes > 0 { base + 16 * j as u64 } else { base };
            crate::arch::memory::cp_async_16(k_tile + 16 * j, src, bytes);
            crate::arch::memory::cp_async_16(v_tile + 16 * j, src.wrapping_add(v_delta), bytes);
            j += nthreads;
        }
        return;
    }
    // Bytes of one page's run (`first` is page- or stage-aligned, so a
    // chunk never crosses a page).
    let run = k.page_tokens().saturating_mul(row_side);
    let chunk = if run >= 16 { 16 } else { run };
    let mut j = tid;
    while chunk * j < keys * row_side {
        let at = chunk * j;
        let bytes = if valid > at { (valid - at).min(chunk) } else { 0 };
        let src = if bytes > 0 { k.row(first + at / row_side) + (at % row_side) as u64 } else { k.row(first) };
        let (vsrc, kt, vt) = (src.wrapping_add(v_delta), k_tile + at, v_tile + at);
        match chunk {
            16 => {
                crate::arch::memory::cp_async_16(kt, src, bytes);
                crate::arch::memory::cp_async_16(vt, vsrc, bytes);
            }
            8 => {
                crate::arch::memory::cp_async_8(kt, src, bytes);
                crate::arch::memory::cp_async_8(vt, vsrc, bytes);
            }
            _ => {
                crate::arch::memory::cp_async_4(kt, src, bytes);
                crate::arch::memory::cp_async_4(vt, vsrc, bytes);
            }
        }
        j += nthreads;
    }
}
