//! Where K/V rows live in global memory, apart from how a row is stored
//! (`format`): the kernel body asks an addressing for a row's address and
//! hands it to the format's copy. Strided caches address rows from a
//! sequence's first row; paged caches through a block table whose entries
//! for the current stage the pipeline has put in shared memory.

use decode_attn_abi::DecodeParams;

use crate::arch::{memory, shared};

/// The rows of one (sequence, kv head) of K or V (or of their scales).
pub trait RowAddressing: Copy {
    /// Whether rows of consecutive tokens can be in different pages (side
    /// data is then copied one page run at a time).
    const PAGED: bool;
    /// Byte address of the first byte of token `token`'s row.
    fn row(&self, token: u32) -> u64;
    /// Tokens per page (`u32::MAX` when not paged).
    fn page_tokens(&self) -> u32;
}

/// Rows at a fixed byte stride from token 0's (`[batch, max_len, Hkv, ..]`,
/// `[batch, Hkv, max_len, ..]` or any padded strides).
#[derive(Clone, Copy)]
pub struct Strided {
    /// Byte address of token 0's row.
    pub base: u64,
    /// Bytes between consecutive tokens' rows.
    pub token_stride: u64,
}

impl Strided {
    /// Sequence `batch`, kv head `head` of a cache at `base` with these byte strides.
    #[inline(always)]
    pub fn new(base: u64, batch: u32, head: u32, stride_batch: u64, stride_token: u64, stride_head: u64) -> Self {
        Strided { base: base + batch as u64 * stride_batch + head as u64 * stride_head, token_stride: stride_token }
    }
}

impl RowAddressing for Strided {
    const PAGED: bool = false;
    #[inline(always)]
    fn row(&self, token: u32) -> u64 {
        self.base + token as u64 * self.token_stride
    }
    #[inline(always)]
    fn page_tokens(&self) -> u32 {
        u32::MAX
    }
}

/// Which rows of a paged cache a [`PagedStage`] addresses (V's rows and
/// scales are addressed from K's: the tensors share strides).
pub mod paged_rows {
    pub const K: u8 = 0;
    pub const K_SIDE: u8 = 1;
}

/// The rows `W` (a [`paged_rows`] constant) of one stage of a paged cache:
/// tokens from a page-aligned `first_page << page_shift` on, whose page ids
/// (`i32`, one per page of the stage) the pipeline copied to shared memory
/// at `ids` — or, `TABLE`, read from the sequence's block-table row at
/// `table` (global memory) as each address is formed: the block's first
/// stages, which would otherwise wait for the ids' copy and a block
/// barrier before any row copy. Pool addresses and strides are read from
/// the kernel's params at each use rather than kept in registers (they are
/// constant-bank operands), which keeps the paged kernels near the strided
/// ones' registers.
#[derive(Clone, Copy)]
pub struct PagedStage<'a, const W: u8, const TABLE: bool = false> {
    pub p: &'a DecodeParams,
    pub kvh: u32,
    /// Shared address of the stage's page ids (not `TABLE`).
    pub ids: u32,
    pub first_page: u32,
    /// Global address of the sequence's block-table row (`TABLE`).
    pub table: u64,
}

impl<const W: u8, const TABLE: bool> PagedStage<'_, W, TABLE> {
    /// Pool address, page stride, token stride and head stride of rows `W`.
    #[inline(always)]
    fn geometry(&self) -> (u64, u64, u64, u64) {
        let p = self.p;
        match W {
            paged_rows::K => (p.k, p.k_stride_batch, p.k_stride_token, p.k_stride_head),
            _ => (p.k_scales, p.scale_stride_batch, p.scale_stride_token, p.scale_stride_head),
        }
    }

    /// The stage's rows as strided ones, when every token from `first` to
    /// the stage's end is in `first`'s page (one page-id lookup in all).
    #[inline(always)]
    pub fn single_page(&self, first: u32) -> Strided {
        let token_stride = self.geometry().2;
        Strided { base: self.row(first).wrapping_sub(first as u64 * token_stride), token_stride }
    }
}

impl<const W: u8, const TABLE: bool> RowAddressing for PagedStage<'_, W, TABLE> {
    const PAGED: bool = true;
    #[inline(always)]
    fn row(&self, token: u32) -> u64 {
        let p = self.p;
        // SAFETY: the pipeline fetched one id per page of the stage (up to
        // the sequence's end) into `ids`, or the table row (checked by the
        // host to hold the sequence's pages) is read directly; tokens past
        // the end are never asked for (copies read `first` instead). Ids
        // past the pool (or negative) read its last page: a corrupt table
        // cannot send a copy outside the pool.
        let id = if TABLE {
            unsafe { memory::ld_global_nc_u32(self.table + 4 * (token >> p.page_shift) as u64) }
        } else {
            let slot = (token >> p.page_shift) - self.first_page;
            unsafe { shared::ld_shared_u32(self.ids + 4 * slot) }
        }
        .min(p.num_pages - 1);
        let within = token & ((1u32 << p.page_shift) - 1);
        let (base, page, tok, head) = self.geometry();
        base + id as u64 * page + within as u64 * tok + self.kvh as u64 * head
    }
    #[inline(always)]
    fn page_tokens(&self) -> u32 {
        1 << self.p.page_shift
    }
}
