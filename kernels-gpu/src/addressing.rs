//! Where K/V rows live in global memory, apart from how a row is stored
//! (`format`): the kernel body asks an addressing for a row's address and
//! hands it to the format's copy. Strided caches today; a paged cache is
//! another implementation of [`RowAddressing`].

/// The rows of one (sequence, kv head) of K or V.
pub trait RowAddressing: Copy {
    /// Byte address of the first byte of token `token`'s row.
    fn row(&self, token: u32) -> u64;
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
    #[inline(always)]
    fn row(&self, token: u32) -> u64 {
        self.base + token as u64 * self.token_stride
    }
}
