//! The tensor cores' bf16 rate as the decode kernels drive them: the
//! bench's GEMM rate, one term of its achievable bound (docs/benchmark.md,
//! "The bound column"). Each warpgroup loops over the P·V MMA of a 64-key
//! step (`arch::wgmma::pv64_bf16_d128`: four `m64n128k16` steps, A from
//! registers, B from shared memory, committed and waited for) on a tile it
//! never reloads: no memory traffic in the loop.

use decode_attn_abi::{MmaRateParams, MMA_RATE_TILE_BYTES};

use crate::arch::{memory, shared, thread, wgmma};

/// bf16 1/64 twice: products and sums stay exact and finite for any round
/// count a launch can take.
const SIXTY_FOURTH_PAIR: u32 = 0x3C80_3C80;

/// # Safety
/// Launched with `MMA_RATE_SMEM_BYTES` of dynamic shared memory and whole
/// warpgroups (a multiple of 128 threads); `p.out` holds one f32 per
/// warpgroup of the grid.
#[inline(always)]
pub unsafe fn mma_rate(p: &MmaRateParams) {
    let tid = thread::thread_idx_x();
    // The 128-byte swizzled layout's pattern starts on a 1024-byte boundary
    // (`wgmma::descriptor`); every element is the same value, so the
    // swizzle does not matter beyond staying inside the tile.
    let tile = (shared::dynamic_smem_base() + 1023) & !1023;
    let mut at = 4 * tid;
    while at < MMA_RATE_TILE_BYTES {
        shared::st_shared_u32(tile + at, SIXTY_FOURTH_PAIR);
        at += 4 * thread::block_dim_x();
    }
    // Ordinary stores, read by the async proxy: fence, then the barrier.
    shared::fence_proxy_async_shared();
    thread::sync_threads();
    let v = wgmma::descriptor(tile, 64 * 128, 1024);
    let a = [[SIXTY_FOURTH_PAIR; 4]; 4];
    let mut o = [[0f32; 4]; 16];
    let mut round = 0;
    while round < p.rounds {
        wgmma::pv64_bf16_d128(&mut o, a, v);
        round += 1;
    }
    if tid % 128 == 0 {
        let warpgroup = thread::block_idx_x() * (thread::block_dim_x() / 128) + tid / 128;
        memory::st_global_f32(p.out + 4 * warpgroup as u64, o[0][0]);
    }
}
