//! decode-attn GPU kernels, compiled to one PTX module by `ptx-builder`.
//!
//! `arch` is the device support layer (the role `cuda_std` plays for
//! Rust-CUDA); `format` the KV cache formats; `decode` the one generic
//! attention body; `merge` the split merge. The entry points below are the
//! only monomorphizations; their names are listed once more in
//! `decode_attn_abi::{decode_kernel_name, merge_kernel_name}` and a host test
//! checks the two lists agree.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, gpu_intrinsics, gpu_launch_sized_workgroup_mem, core_intrinsics)]
#![allow(internal_features)]

pub mod arch;
pub mod decode;
pub mod fill;
pub mod format;
pub mod merge;
pub mod sleep;
pub mod state;

use decode_attn_abi::{DecodeParams, FillParams, MergeParams, SleepParams};
use format::{Bf16, PlainKv, F16};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    arch::thread::trap()
}

macro_rules! decode_kernels {
    ($($name:ident => $format:ty, $d:literal;)*) => {$(
        /// Attention over one KV format / head dim; see `decode::decode`.
        ///
        /// # Safety
        /// Launched only by the host library, with the planner's launch shape.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(p: DecodeParams) {
            decode::decode::<$format, $d, { $d / 16 }, { $d / 8 }>(&p)
        }
    )*};
}

macro_rules! merge_kernels {
    ($($name:ident => $half:ty, $d:literal;)*) => {$(
        /// Split merge for one dtype / head dim; see `merge::merge`.
        ///
        /// # Safety
        /// Launched only by the host library after the attention kernel.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(p: MergeParams) {
            merge::merge::<$half, $d>(&p)
        }
    )*};
}

decode_kernels! {
    decode_kv_bf16_q_bf16_d64 => PlainKv<Bf16>, 64;
    decode_kv_bf16_q_bf16_d128 => PlainKv<Bf16>, 128;
    decode_kv_bf16_q_bf16_d256 => PlainKv<Bf16>, 256;
    decode_kv_f16_q_f16_d64 => PlainKv<F16>, 64;
    decode_kv_f16_q_f16_d128 => PlainKv<F16>, 128;
    decode_kv_f16_q_f16_d256 => PlainKv<F16>, 256;
}

merge_kernels! {
    merge_bf16_d64 => Bf16, 64;
    merge_bf16_d128 => Bf16, 128;
    merge_bf16_d256 => Bf16, 256;
    merge_f16_d64 => F16, 64;
    merge_f16_d128 => F16, 128;
    merge_f16_d256 => F16, 256;
}

/// Fills a bf16 buffer with `fill_value`s (test and benchmark inputs).
///
/// # Safety
/// See `fill::fill`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_random_bf16(p: FillParams) {
    fill::fill::<Bf16>(&p)
}

/// Fills an f16 buffer with `fill_value`s.
///
/// # Safety
/// See `fill::fill`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_random_f16(p: FillParams) {
    fill::fill::<F16>(&p)
}

/// Busy-waits `p.ns` nanoseconds (benchmark queue filler).
///
/// # Safety
/// See `sleep::sleep`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gpu_sleep(p: SleepParams) {
    sleep::sleep(&p)
}
