//! Device-side support: the only module with `asm!`. Each function wraps one
//! PTX instruction (or one intrinsic) and is named after it.
//!
//! Shared-memory addresses are 32-bit `.shared` window addresses (`u32`), as
//! `cp.async`, `ldmatrix` and `ld/st.shared` take them.

pub mod math;
pub mod memory;
pub mod mma;
pub mod shared;
pub mod thread;
pub mod warp;
