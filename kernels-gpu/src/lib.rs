//! decode-attn GPU kernels, compiled by `ptx-builder` to one PTX module per
//! architecture (`decode_attn_abi::Arch`): each build sets the cfg
//! `decode_attn_arch` to the architecture's name, and the kernel tables'
//! rows of that architecture become its entry points.
//!
//! `arch` is the device support layer (the role `cuda_std` plays for
//! Rust-CUDA); `format` the KV cache formats; `decode` the attention
//! bodies (wide, narrow and wgmma), each generic over the format; `merge` the split
//! merge (in the attention grid's last block, or as its own kernel;
//! `decode::cluster` merges in a thread-block cluster instead). The
//! entry points are expanded from the kernel tables in `decode_attn_abi`
//! (`decode_kernel_table!`, `merge_kernel_table!`, `quant_kernel_table!`),
//! which the host expands too: one list of names.
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, gpu_intrinsics, gpu_launch_sized_workgroup_mem, core_intrinsics, stmt_expr_attributes)]
#![allow(internal_features)]

pub mod addressing;
pub mod arch;
pub mod decode;
pub mod fill;
pub mod format;
pub mod lengths;
pub mod merge;
pub mod quant;
pub mod rate;
pub mod sleep;
pub mod state;
pub mod variant;

#[allow(unused_imports)]
use decode_attn_abi::{Addressing, AdvanceParams, DecodeParams, Family, FillParams, Form, Merge, MergeParams, MmaRateParams, QuantParams, SleepParams};
// (Each architecture's module names only some of the formats and params.)
#[allow(unused_imports)]
use format::{Bf16, Fp8DsMlaKv, Fp8Kv, Fp8PerHeadKv, Int4Kv, Int8Kv, PlainKv, F16};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    arch::thread::trap()
}

macro_rules! decode_kernels {
    ($($name:ident => ($arch:literal, $arch_id:ident, $f:ident, $q:ident, $d:literal, $dv:literal, $fam:ident, $a:ident, $m:ident, $form:ident, $v:ident, $kv:ty);)*) => {$(
        /// Attention over one point of the kernel set (`decode_attn_abi::KernelId`):
        /// see `decode::decode_wide`, `decode::decode_narrow`, `decode::decode_wgmma`
        /// `decode::decode_mla` and `decode::decode_mla_t`. (All but the MLA body read V rows of
        /// Q·K's head dim: the set holds no other, `KernelId::exists`.)
        ///
        /// # Safety
        /// Launched only by the host library, with the planner's launch shape.
        #[cfg(decode_attn_arch = $arch)]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(p: DecodeParams) {
            const { assert!($d == $dv || Family::$fam.is_latent()) };
            decode_body!(
                $fam,
                $kv,
                variant::$v,
                $d,
                { Addressing::$a.is_paged() },
                { Merge::$m.is_cluster() },
                $form,
                &p
            )
        }
    )*};
}

/// The body of a family, its const parameters from the row's axes (the
/// MLA family's transposed form is a body of its own).
macro_rules! decode_body {
    (Wide, $t:ty, $v:ty, $d:literal, $paged:expr, $cluster:expr, $form:ident, $p:expr) => {
        decode::decode_wide::<$t, $v, $d, { $d / 16 }, { $d / 8 }, $paged, $cluster, { Form::$form.is_capacity() }>($p)
    };
    (Narrow, $t:ty, $v:ty, $d:literal, $paged:expr, $cluster:expr, $form:ident, $p:expr) => {
        decode::decode_narrow::<$t, $v, $d, { $d / 16 }, { $d / 16 }, $paged, $cluster, { Form::$form.heads_per_block() }>($p)
    };
    (Wgmma, $t:ty, $v:ty, $d:literal, $paged:expr, $cluster:expr, $form:ident, $p:expr) => {
        decode::decode_wgmma::<$t, $v, $d, $paged, $cluster, { Form::$form.is_specialized() }>($p)
    };
    (Mla, $t:ty, $v:ty, $d:literal, $paged:expr, $cluster:expr, Transposed, $p:expr) => {
        decode::decode_mla_t::<$t, $paged>($p)
    };
    (Mla, $t:ty, $v:ty, $d:literal, $paged:expr, $cluster:expr, TransposedRows, $p:expr) => {
        decode::decode_mla_t_rows::<$t, $paged>($p)
    };
    (Mla, $t:ty, $v:ty, $d:literal, $paged:expr, $cluster:expr, $form:ident, $p:expr) => {
        decode::decode_mla::<$t, $paged, $cluster>($p)
    };
}

macro_rules! merge_kernels {
    ($($name:ident => ($arch:literal, $arch_id:ident, $q:ident, $d:literal, $sinks:literal);)*) => {$(
        /// Split merge for one dtype / head dim, with or without sinks; see `merge::merge_kernel`.
        ///
        /// # Safety
        /// Launched only by the host library after the attention kernel.
        #[cfg(decode_attn_arch = $arch)]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(p: MergeParams) {
            merge::merge_kernel::<$q, $d, $sinks>(&p)
        }
    )*};
}

macro_rules! quant_kernels {
    ($($name:ident => ($arch:literal, $arch_id:ident, $f:ident, $q:ident, $d:literal, $dir:ident, $call:path);)*) => {$(
        /// Cache store / quantize / dequantize for one format / dtype / head dim; see `quant`.
        ///
        /// # Safety
        /// Launched only by the host library, on buffers it checked.
        #[cfg(decode_attn_arch = $arch)]
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(p: QuantParams) {
            $call(&p)
        }
    )*};
}

decode_attn_abi::decode_kernel_table!(decode_kernels);
decode_attn_abi::quant_kernel_table!(quant_kernels);
decode_attn_abi::merge_kernel_table!(merge_kernels);

/// Fills a bf16 buffer with `fill_value`s (test and benchmark inputs).
///
/// # Safety
/// See `fill::fill`.
#[cfg(any(decode_attn_arch = "sm_80", decode_attn_arch = "sm_90a"))]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_random_bf16(p: FillParams) {
    fill::fill::<Bf16>(&p)
}

/// Fills an f16 buffer with `fill_value`s.
///
/// # Safety
/// See `fill::fill`.
#[cfg(any(decode_attn_arch = "sm_80", decode_attn_arch = "sm_90a"))]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn fill_random_f16(p: FillParams) {
    fill::fill::<F16>(&p)
}

/// Busy-waits `p.ns` nanoseconds (benchmark queue filler).
///
/// # Safety
/// See `sleep::sleep`.
#[cfg(any(decode_attn_arch = "sm_80", decode_attn_arch = "sm_90a"))]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gpu_sleep(p: SleepParams) {
    sleep::sleep(&p)
}

/// The tensor cores' bf16 rate (benchmark).
///
/// # Safety
/// See `rate::mma_rate`.
/// (`wgmma`: Hopper's module only.)
#[cfg(decode_attn_arch = "sm_90a")]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gpu_mma_rate(p: MmaRateParams) {
    rate::mma_rate(&p)
}

/// Grows each sequence's device length by `p.by` (the end of a CUDA-graph
/// decode step).
///
/// # Safety
/// See `lengths::advance_seq_lens`.
#[cfg(any(decode_attn_arch = "sm_80", decode_attn_arch = "sm_90a"))]
#[no_mangle]
pub unsafe extern "ptx-kernel" fn advance_seq_lens(p: AdvanceParams) {
    lengths::advance_seq_lens(&p)
}

