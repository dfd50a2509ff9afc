//! The contract between the host library and the PTX kernels.
//!
//! Everything here is `#[repr(C)]` plain data or a `const fn`, compiled into
//! both sides, so a field or a tile size can never be restated differently on
//! one of them (the lesson of FlashAttention-2's `set_params_splitkv`).
#![no_std]

mod axes;
mod fp8;
mod kernel_set;
mod kernels;
mod params;
mod quant;
mod tile;

pub use axes::*;
pub use fp8::*;
pub use kernel_set::*;
pub use kernels::*;
pub use params::*;
pub use quant::*;
pub use tile::*;
