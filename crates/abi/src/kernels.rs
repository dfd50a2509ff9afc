//! The kernel tables, generated from the kernel set's rules
//! (`kernel_set.rs`) by `build.rs`, and the look-ups the host names kernels
//! by. `kernels-gpu` expands the same macros into its entry points, so a
//! kernel cannot be named on one side and missing on the other.
//!
//! A table macro takes the name of a macro and calls it with every row:
//! `decode_kernel_table!(m)` calls `m! { name => ("arch", Arch, KvFormat,
//! Dtype, Q·K's head_dim, V's head_dim, Family, Addressing, Merge, Form,
//! Variant, kernel type);
//! … }` (each a variant name of its enum; `"arch"` the architecture's name,
//! which `kernels-gpu` compares with its `decode_attn_arch` cfg),
//! `quant_kernel_table!(m)` `m! { name => ("arch", Arch, KvFormat, Dtype,
//! head_dim, QuantDirection, function); … }`, `merge_kernel_table!(m)`
//! `m! { name => ("arch", Arch, Dtype, head_dim, sinks); … }`.
//!
//! A kernel's symbol is unique within its architecture's module; the same
//! symbol names the kernel of another architecture in that one's module.

use crate::axes::{Addressing, Arch, Dtype, Family, Form, HeadDims, KvFormat, Merge, Variant};
use crate::kernel_set::{KernelId, MergeKernelId, QuantDirection, QuantKernelId};

include!(concat!(env!("OUT_DIR"), "/kernel_tables.rs"));

/// One attention kernel of the module: its identity and entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeKernel {
    pub id: KernelId,
    pub name: &'static str,
}

impl DecodeKernel {
    /// Registers per thread the kernel is compiled within (PTX `.maxnreg`),
    /// where the planner counts on the occupancy, head dims up to 128:
    /// - the narrow kernels of the quantized formats run 8-warp blocks two
    ///   per SM (65536 registers / 512 threads = 128). Without the cap, code
    ///   added after the key loop (the split merge) moved some from 128 to
    ///   130 registers and so to one block per SM;
    /// - the wide kernels run grid B's 6-warp blocks two per SM (65536 / 384,
    ///   rounded down to the allocation unit of 8: 168). The paged bf16 one
    ///   used 200 (187 with 2-chunk address batches), one block per SM;
    /// - the wgmma kernels run two 8-warp blocks per SM (128), except the
    ///   warp-specialised ones: one 12-warp block (65536 / 384: 168).
    ///
    /// The variant kernels (docs/perf.md, "Variant kernels") need more where
    /// the standard ones sat at their cap: the unspecialised wgmma ones use
    /// 155-160 registers uncapped and spilled up to 56 bytes at 128, so they
    /// run one block per SM at 168; the wide ALiBi ones use up to 205 and
    /// spilled up to 56 bytes at 168.
    pub const fn register_cap(&self) -> Option<u32> {
        let id = &self.id;
        let standard = matches!(id.variant, Variant::Standard);
        match id.family {
            Family::Narrow if id.format.is_quantized() && id.dims.qk <= 128 => Some(128),
            Family::Wide if id.dims.qk <= 128 && matches!(id.variant, Variant::Alibi) => Some(208),
            Family::Wide if id.dims.qk <= 128 => Some(168),
            Family::Wgmma if id.form.is_specialized() || !standard => Some(168),
            Family::Wgmma => Some(128),
            // The MLA ring's (`tile::MlaRing::register_cap`).
            Family::Mla if id.form.is_transposed() => match crate::tile::mla_form_ring(id.format, id.form) {
                Some(ring) => ring.register_cap,
                None => None,
            },
            _ => None,
        }
    }
}

/// One cache store / quantize / dequantize kernel of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantKernel {
    pub id: QuantKernelId,
    pub name: &'static str,
}

/// One split-merge kernel of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeKernel {
    pub id: MergeKernelId,
    pub name: &'static str,
}

macro_rules! decode_list {
    ($($name:ident => ($arch_name:literal, $arch:ident, $f:ident, $q:ident, $d:literal, $dv:literal, $fam:ident, $a:ident, $m:ident, $form:ident, $v:ident, $kv:ty);)*) => {
        /// Every attention kernel of every architecture's module.
        pub const DECODE_KERNELS: &[DecodeKernel] = &[$(DecodeKernel {
            id: KernelId {
                arch: Arch::$arch,
                format: KvFormat::$f,
                dtype: Dtype::$q,
                dims: HeadDims { qk: $d, v: $dv },
                family: Family::$fam,
                addressing: Addressing::$a,
                merge: Merge::$m,
                form: Form::$form,
                variant: Variant::$v,
            },
            name: stringify!($name),
        },)*];
    };
}
decode_kernel_table!(decode_list);

macro_rules! quant_list {
    ($($name:ident => ($arch_name:literal, $arch:ident, $f:ident, $q:ident, $d:literal, $dir:ident, $call:path);)*) => {
        /// Every store / quantize / dequantize kernel of every architecture's module.
        pub const QUANT_KERNELS: &[QuantKernel] = &[$(QuantKernel {
            id: QuantKernelId { arch: Arch::$arch, format: KvFormat::$f, dtype: Dtype::$q, head_dim: $d, direction: QuantDirection::$dir },
            name: stringify!($name),
        },)*];
    };
}
quant_kernel_table!(quant_list);

macro_rules! merge_list {
    ($($name:ident => ($arch_name:literal, $arch:ident, $q:ident, $d:literal, $sinks:literal);)*) => {
        /// Every split-merge kernel of every architecture's module.
        pub const MERGE_KERNELS: &[MergeKernel] = &[$(MergeKernel { id: MergeKernelId { arch: Arch::$arch, dtype: Dtype::$q, head_dim: $d, sinks: $sinks }, name: stringify!($name) },)*];
    };
}
merge_kernel_table!(merge_list);

/// Utility kernels (random fill, busy-wait, length advance), by the names
/// their params use: in the sm_80 module and in every specific target's
/// (where a GPU finds them: `Arch::module_for(Arch::Sm80)`), but the
/// tensor-core rate (`wgmma`), which is in Hopper's alone.
pub const UTILITY_KERNELS: [&str; 5] = [crate::FILL_KERNEL_BF16, crate::FILL_KERNEL_F16, crate::SLEEP_KERNEL, crate::ADVANCE_KERNEL, crate::MMA_RATE_KERNEL];

/// `pub const fn $name(id: &$id) -> Option<&'static str>`: the entry point
/// of the kernel `id` in `$table`, or `None` when the set has no such kernel.
macro_rules! look_up {
    ($(#[$doc:meta])* $name:ident, $id:ty, $table:ident) => {
        $(#[$doc])*
        pub const fn $name(id: &$id) -> Option<&'static str> {
            let mut i = 0;
            while i < $table.len() {
                if $table[i].id.same(id) {
                    return Some($table[i].name);
                }
                i += 1;
            }
            None
        }
    };
}

look_up!(
    /// The entry point of an attention kernel, or `None` when the set has
    /// no such kernel ([`KernelId::exists`]).
    decode_kernel_name,
    KernelId,
    DECODE_KERNELS
);
look_up!(
    /// The entry point of a store / quantize / dequantize kernel.
    quant_kernel_name,
    QuantKernelId,
    QUANT_KERNELS
);
look_up!(
    /// The entry point of a split-merge kernel.
    merge_kernel_id_name,
    MergeKernelId,
    MERGE_KERNELS
);

/// The entry point of the split-merge kernel for a (dtype, head_dim), with
/// or without sinks, in the module of `arch`.
pub const fn merge_kernel_name(arch: Arch, dtype: Dtype, head_dim: u32, sinks: bool) -> Option<&'static str> {
    merge_kernel_id_name(&MergeKernelId { arch, dtype, head_dim, sinks })
}
