//! The contract between the host library and the PTX kernels.
//!
//! Everything here is `#[repr(C)]` plain data or a `const fn`, compiled into
//! both sides, so a field or a tile size can never be restated differently on
//! one of them (the lesson of FlashAttention-2's `set_params_splitkv`).
#![no_std]

mod axes;
mod kernel_set;
mod kernels;
mod params;
mod tile;

pub use axes::*;
pub use kernel_set::*;
pub use kernels::*;
pub use params::*;
pub use tile::*;

/// FNV-1a (64-bit) of a PTX module's text: names the PTX a precompiled
/// cubin was built from (`DECODE_ATTN_CUBIN`, written by `cargo xtask
/// bundle` and checked by the host before it loads the cubin).
pub fn ptx_hash(ptx: &[u8]) -> u64 {
    ptx.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}
