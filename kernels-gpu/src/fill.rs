//! Random fill of 16-bit buffers for tests and benchmarks (multi-GiB caches
//! are generated on the device; the host recomputes any value it needs with
//! the same `fill_value`).

use decode_attn_abi::{fill_value, FillParams};

use crate::arch::{memory, thread};
use crate::format::Half;

/// # Safety
/// `p.ptr` must be a writable, 4-byte aligned buffer of `p.len` (even) 16-bit elements.
#[inline(always)]
pub unsafe fn fill<H: Half>(p: &FillParams) {
    let stride = thread::block_dim_x() as u64 * thread::grid_dim_x() as u64;
    let mut pair = thread::block_idx_x() as u64 * thread::block_dim_x() as u64 + thread::thread_idx_x() as u64;
    while 2 * pair < p.len {
        let i = 2 * pair;
        memory::st_global_u32(p.ptr + 2 * i, H::pack(fill_value(p.seed, i), fill_value(p.seed, i + 1)));
        pair += stride;
    }
}
