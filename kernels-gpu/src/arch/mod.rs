//! Device-side support: the only module with `asm!`. Each function wraps one
//! PTX instruction (or one intrinsic) and is named after it.
//!
//! Warp-collective instructions (`shfl.sync`, `ldmatrix`, `mma.sync`) are
//! never marked `pure`: a pure `asm!` may be sunk into, hoisted out of or
//! speculated across branches, and a collective executed by part of a warp
//! deadlocks or is undefined. (A full-mask shuffle sunk into
//! `if lane % 4 == 0` hung the first version of the kernel.)
//!
//! Shared-memory addresses are 32-bit `.shared` window addresses (`u32`), as
//! `cp.async`, `ldmatrix` and `ld/st.shared` take them.

pub mod cluster;
pub mod math;
pub mod mbarrier;
pub mod memory;
pub mod mma;
pub mod shared;
pub mod thread;
pub mod warp;
pub mod wgmma;
