//! The read floor (benchmarks): a plain read of a row's K/V bytes, the
//! fastest way to move them, timed beside the attention kernel that reads
//! the same bytes. What the attention kernel takes beyond it is its own
//! cost (prologue, epilogue, merge, imperfect overlap), not the memory's.

use decode_attn_abi::{ReadParams, READ_REGIONS};

use crate::arch::{memory, thread};

/// Loads in flight per thread.
const IN_FLIGHT: u64 = 4;

/// # Safety
/// Every region readable, 16-byte aligned with a multiple of 16 bytes;
/// `p.sink` a writable 4-byte word.
#[inline(always)]
pub unsafe fn read_floor(p: &ReadParams) {
    let threads = thread::block_dim_x() as u64;
    let first = (thread::block_idx_x() as u64 * threads + thread::thread_idx_x() as u64) * 16;
    // The grid sweeps each region front to back, 16 bytes a thread.
    let stride = thread::grid_dim_x() as u64 * threads * 16;
    let mut acc = 0u32;
    for r in 0..READ_REGIONS {
        let (base, bytes) = (p.src[r], p.bytes[r]);
        let mut at = first;
        while at + (IN_FLIGHT - 1) * stride < bytes {
            let mut v = [[0f32; 4]; IN_FLIGHT as usize];
            for (j, x) in v.iter_mut().enumerate() {
                *x = memory::ld_global_nc_v4_f32(base + at + j as u64 * stride);
            }
            for x in v {
                acc ^= x[0].to_bits() ^ x[1].to_bits() ^ x[2].to_bits() ^ x[3].to_bits();
            }
            at += IN_FLIGHT * stride;
        }
        while at < bytes {
            let x = memory::ld_global_nc_v4_f32(base + at);
            acc ^= x[0].to_bits() ^ x[1].to_bits() ^ x[2].to_bits() ^ x[3].to_bits();
            at += stride;
        }
    }
    if acc == 0x5EED_F100 {
        memory::st_global_u32(p.sink, acc);
    }
}
