//! KV cache formats. The attention kernel body is generic over [`KvFormat`]:
//! a format owns storage only — how its rows (found by a
//! `crate::addressing::RowAddressing`) reach shared memory and how mma
//! B-fragments of K (non-transposed) and V (transposed) are produced from
//! there, so quantized formats dequantize at that point and reuse
//! everything else.

mod plain;

pub use plain::PlainKv;

use crate::addressing::RowAddressing;
use crate::arch::{math, mma};
use decode_attn_abi::Dtype;

/// The 16-bit float type the tensor cores compute in (Q, P and dequantized K/V).
pub trait Half {
    const DTYPE: Dtype;
    /// `d = a·b + c` on one m16n8k16 tile.
    fn mma(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4];
    /// Two f32 → one packed pair, `lo` in the low half.
    fn pack(lo: f32, hi: f32) -> u32;
}

pub struct Bf16;
pub struct F16;

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
}

pub trait KvFormat {
    const FORMAT: decode_attn_abi::KvFormat;
    /// The type K/V are fed to the tensor cores in (the query's dtype).
    type Compute: Half;

    /// Issues this thread's share of asynchronous copies of rows
    /// `first .. first + keys` into the shared tile at `tile`; rows at or past
    /// `end` are zero-filled (never read), so masked keys hold finite values.
    ///
    /// # Safety
    /// `tile` must have room for `keys` rows of this format; rows
    /// `first .. end` of `rows` must be readable; `first < end`.
    unsafe fn load_rows<const D: usize, A: RowAddressing>(rows: A, tile: u32, first: u32, end: u32, keys: u32, tid: u32, nthreads: u32);

    /// B fragments of K for keys `key .. key + 16` of the tile and head dims
    /// `16 * kc .. 16 * kc + 16`: `[b0, b1]` of keys 0..8, then of keys 8..16.
    ///
    /// # Safety
    /// The tile's rows must have landed (after the cp.async wait and barrier).
    unsafe fn k_fragment<const D: usize>(tile: u32, key: u32, kc: u32, lane: u32) -> [u32; 4];

    /// B fragments of V for keys `key .. key + 16` and head dims
    /// `16 * np .. 16 * np + 16`: `[b0, b1]` of dims 0..8, then of dims 8..16.
    ///
    /// # Safety
    /// As [`KvFormat::k_fragment`].
    unsafe fn v_fragment<const D: usize>(tile: u32, key: u32, np: u32, lane: u32) -> [u32; 4];
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are
/// `row_bytes` long. The chunk index is XOR-swizzled with the row so the 8
/// row addresses of one `ldmatrix` matrix fall in 8 different bank groups.
#[inline(always)]
pub fn swizzled(row: u32, chunk: u32, row_bytes: u32) -> u32 {
    row * row_bytes + ((chunk ^ (row & 7)) << 4)
}
