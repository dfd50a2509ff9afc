//! The kernel set: every kernel of the PTX module is a point of the product
//! of its axes (`axes.rs`) that the rules admit, named by one identity.
//!
//! `build.rs` compiles this file too and expands [`KernelId::all`],
//! [`QuantKernelId::all`] and [`MergeKernelId::all`] into the table macros
//! (`decode_kernel_table!`, …) that `kernels-gpu` expands into its entry
//! points and this crate into the host's look-ups: nobody types a row, and
//! adding a format or a variant is one enum value and its predicates.
//! (It uses nothing but `core` and `crate::axes`.)

use core::fmt::{self, Write};

use crate::axes::{has_capacity_twin, has_head_pair_form, has_transposed_form, has_transposed_rows_form, wgmma_specializable, Addressing, Arch, Dtype, Family, Form, HeadDims, KvFormat, Merge, Variant, CACHE_DIMS, KERNEL_DIMS, MLA_DIMS, V_HEAD_DIMS};

/// One attention kernel: the architecture of its module, its KV format,
/// Q/O dtype, head dims, family, addressing, merge, form and attention
/// variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelId {
    pub arch: Arch,
    pub format: KvFormat,
    pub dtype: Dtype,
    /// Q·K's and V's head dims (equal but in the MLA family's).
    pub dims: HeadDims,
    pub family: Family,
    pub addressing: Addressing,
    pub merge: Merge,
    pub form: Form,
    pub variant: Variant,
}

impl KernelId {
    /// Whether the module has this kernel: the rules of the kernel set.
    /// - V's rows are as long as K's, but in the MLA family, whose rows are
    ///   [`crate::MLA_DIMS`]'s (`Family::serves`); its kernels have bf16
    ///   queries, a bf16 or fp8 cache ([`KvFormat::holds_latent`]), are
    ///   plain or transposed, of the standard variant, and merge globally
    ///   or (the plain 64-row kernel) in a cluster;
    /// - the format has rows of `head_dim` values and computes with `dtype`
    ///   (16-bit caches with their own type, quantized ones with either);
    /// - the family serves the format and head dim ([`Family::serves`]);
    /// - a form other than [`Form::Plain`] exists where its predicate says
    ///   ([`wgmma_specializable`], [`has_capacity_twin`],
    ///   [`has_head_pair_form`], [`has_transposed_form`]);
    /// - the variant is built for the merge and form ([`Variant::builds`]);
    /// - the module's architecture holds a kernel of what its parts need
    ///   ([`Arch::holds`]).
    pub const fn exists(&self) -> bool {
        let dtype_ok = match self.format.required_dtype() {
            Some(d) => d as u32 == self.dtype as u32,
            None => true,
        };
        let paged = matches!(self.addressing, Addressing::Paged);
        let cluster = self.merge.is_cluster();
        let head_dim = self.dims.qk;
        let form_ok = match self.form {
            Form::Plain => true,
            Form::Specialized => matches!(self.family, Family::Wgmma) && wgmma_specializable(self.format, paged),
            Form::Capacity => has_capacity_twin(self.format, head_dim, self.family, paged, cluster),
            Form::HeadPair => has_head_pair_form(self.format, head_dim, self.family, cluster),
            Form::Transposed => has_transposed_form(self.format, self.family),
            Form::TransposedRows => has_transposed_rows_form(self.format, self.family),
        };
        let latent = self.family.is_latent();
        // (bf16 queries: the MMAs take the fp8 cache's rows as bf16.)
        let mla_ok = !latent || (matches!(self.form, Form::Plain | Form::Transposed | Form::TransposedRows) && matches!(self.variant, Variant::Standard) && (!cluster || matches!(self.form, Form::Plain)) && matches!(self.dtype, Dtype::Bf16));
        self.dims.is_square() != latent
            && mla_ok
            && self.format.supports_head_dim(head_dim)
            && dtype_ok
            && self.family.serves(self.format, head_dim)
            && form_ok
            && self.variant.builds(self.merge, self.form)
            && self.arch.holds(self.needs())
    }

    /// This kernel in the module that holds it on a GPU whose kernels are
    /// of `device`'s architecture ([`Arch::module_for`]), or in `device`'s
    /// own, where it does not exist, when no module there holds it.
    pub const fn on(mut self, device: Arch) -> KernelId {
        self.arch = match device.module_for(self.needs()) {
            Some(module) => module,
            None => device,
        };
        self
    }

    /// The architecture the kernel's parts need (format, family, merge).
    pub const fn needs(&self) -> Arch {
        Arch::needed_by(&[self.format.needs(), self.family.needs(), self.merge.needs()])
    }

    /// Field-wise equality in a `const fn` (the look-ups are const).
    pub const fn same(&self, other: &KernelId) -> bool {
        self.arch as u32 == other.arch as u32
            && self.format as u32 == other.format as u32
            && self.dtype as u32 == other.dtype as u32
            && self.dims.same(other.dims)
            && self.family as u32 == other.family as u32
            && self.addressing as u32 == other.addressing as u32
            && self.merge as u32 == other.merge as u32
            && self.form as u32 == other.form as u32
            && self.variant as u32 == other.variant as u32
    }

    /// The entry point's symbol:
    /// `decode[_cluster][_capacity][_paged][_narrow|_wgmma|_mla][_ws|_pair|_transposed|_transposed_rows][_softcap|_masked|_alibi|_masked_tree|_softcap_tree]_kv_<format>_q_<dtype>_d<head_dim>[v<V's head_dim>]`,
    /// e.g. `decode_paged_narrow_kv_int8_q_bf16_d128`.
    pub fn write_symbol(&self, w: &mut impl Write) -> fmt::Result {
        w.write_str("decode")?;
        if self.merge.is_cluster() {
            w.write_str("_cluster")?;
        }
        if self.form.is_capacity() {
            w.write_str("_capacity")?;
        }
        if matches!(self.addressing, Addressing::Paged) {
            w.write_str("_paged")?;
        }
        match self.family {
            Family::Wide => {}
            Family::Narrow => w.write_str("_narrow")?,
            Family::Wgmma => w.write_str("_wgmma")?,
            Family::Mla => w.write_str("_mla")?,
        }
        match self.form {
            Form::Specialized => w.write_str("_ws")?,
            Form::HeadPair => w.write_str("_pair")?,
            Form::Transposed => w.write_str("_transposed")?,
            Form::TransposedRows => w.write_str("_transposed_rows")?,
            Form::Plain | Form::Capacity => {}
        }
        if !matches!(self.variant, Variant::Standard) {
            write!(w, "_{}", self.variant.name())?;
        }
        write!(w, "_kv_{}_q_{}_", self.format.symbol(), self.dtype.name())?;
        self.dims.write_symbol(w)
    }

    /// Every kernel of the set, in the product's order: architecture,
    /// format, dtype, head dim, family, addressing, merge, form, variant.
    pub fn all() -> impl Iterator<Item = KernelId> {
        Arch::ALL.into_iter().flat_map(|arch| {
            KvFormat::ALL.into_iter().flat_map(move |format| {
                Dtype::ALL.into_iter().flat_map(move |dtype| {
                    KERNEL_DIMS.into_iter().flat_map(move |dims| {
                        Family::ALL.into_iter().flat_map(move |family| {
                            Addressing::ALL.into_iter().flat_map(move |addressing| {
                                Merge::ALL.into_iter().flat_map(move |merge| {
                                    Form::ALL.into_iter().flat_map(move |form| {
                                        Variant::ALL.into_iter().map(move |variant| KernelId { arch, format, dtype, dims, family, addressing, merge, form, variant }).filter(KernelId::exists)
                                    })
                                })
                            })
                        })
                    })
                })
            })
        })
    }
}

/// Which way a cache kernel converts.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantDirection {
    /// 16-bit rows → cache rows: quantized rows + scales, or (16-bit
    /// formats) the rows themselves.
    Store = 0,
    /// Quantized rows + scales → 16-bit rows.
    Dequantize = 1,
}

impl QuantDirection {
    pub const ALL: [QuantDirection; 2] = [QuantDirection::Store, QuantDirection::Dequantize];
}

/// One cache store / quantize / dequantize kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantKernelId {
    /// The architecture of its module.
    pub arch: Arch,
    pub format: KvFormat,
    /// The 16-bit side's type.
    pub dtype: Dtype,
    pub head_dim: u32,
    pub direction: QuantDirection,
}

impl QuantKernelId {
    /// Every format has a store (16-bit) or quantize kernel per dtype it
    /// takes and head dim it supports (a latent row's where it holds one);
    /// quantized formats a dequantize too; in the modules that hold what
    /// the format needs ([`Arch::holds`]).
    pub const fn exists(&self) -> bool {
        let dtype_ok = match self.format.required_dtype() {
            Some(d) => d as u32 == self.dtype as u32,
            None => true,
        };
        let dim_ok = if self.head_dim == MLA_DIMS.qk { self.format.holds_latent() } else { self.format.supports_head_dim(self.head_dim) };
        dim_ok && dtype_ok && (matches!(self.direction, QuantDirection::Store) || self.format.is_quantized()) && self.arch.holds(self.format.needs())
    }

    pub const fn same(&self, other: &QuantKernelId) -> bool {
        self.arch as u32 == other.arch as u32 && self.format as u32 == other.format as u32 && self.dtype as u32 == other.dtype as u32 && self.head_dim == other.head_dim && self.direction as u32 == other.direction as u32
    }

    /// `store_<format>_d<D>` (16-bit formats), `quantize_<format>_from_<dtype>_d<D>`,
    /// `dequantize_<format>_to_<dtype>_d<D>`.
    pub fn write_symbol(&self, w: &mut impl Write) -> fmt::Result {
        let (format, dtype, d) = (self.format.symbol(), self.dtype.name(), self.head_dim);
        match (self.format.is_quantized(), self.direction) {
            (false, _) => write!(w, "store_{format}_d{d}"),
            (true, QuantDirection::Store) => write!(w, "quantize_{format}_from_{dtype}_d{d}"),
            (true, QuantDirection::Dequantize) => write!(w, "dequantize_{format}_to_{dtype}_d{d}"),
        }
    }

    /// The kernel's function in `kernels-gpu`'s `quant` module with its
    /// generic arguments, as a path (`build.rs` writes it into the table
    /// row): `quant::<function>::<Q, D, D / 32[, G]>`.
    pub fn write_function(&self, w: &mut impl Write) -> fmt::Result {
        let (q, d, e) = (self.dtype.type_name(), self.head_dim, self.head_dim / 32);
        let function = match (self.format, self.direction) {
            (KvFormat::Bf16 | KvFormat::F16, _) => return write!(w, "quant::store_plain::<{d}, {e}>"),
            (KvFormat::Int8, QuantDirection::Store) => "quantize_int8",
            (KvFormat::Int8, QuantDirection::Dequantize) => "dequantize_int8",
            (KvFormat::Fp8PerHead, QuantDirection::Store) => "quantize_fp8_per_head",
            (KvFormat::Fp8, QuantDirection::Store) => "quantize_fp8_per_tensor",
            (KvFormat::Fp8PerHead | KvFormat::Fp8, QuantDirection::Dequantize) => "dequantize_fp8",
            (KvFormat::Fp8DsMla, QuantDirection::Store) => "quantize_fp8_ds_mla",
            (KvFormat::Fp8DsMla, QuantDirection::Dequantize) => "dequantize_fp8_ds_mla",
            (KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128, QuantDirection::Store) => "quantize_int4",
            (KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128, QuantDirection::Dequantize) => "dequantize_int4",
        };
        match self.format.group() {
            Some(g) => write!(w, "quant::{function}::<{q}, {d}, {e}, {g}>"),
            None => write!(w, "quant::{function}::<{q}, {d}, {e}>"),
        }
    }

    pub fn all() -> impl Iterator<Item = QuantKernelId> {
        Arch::ALL.into_iter().flat_map(|arch| {
            KvFormat::ALL.into_iter().flat_map(move |format| {
                Dtype::ALL.into_iter().flat_map(move |dtype| {
                    CACHE_DIMS.into_iter().flat_map(move |head_dim| {
                        QuantDirection::ALL.into_iter().map(move |direction| QuantKernelId { arch, format, dtype, head_dim, direction }).filter(QuantKernelId::exists)
                    })
                })
            })
        })
    }
}

/// One split-merge kernel: the O dtype and head dim, and whether it adds
/// the sinks of `MergeParams::sinks` (the merge of every variant that
/// [`Variant::takes_sinks`]; a sequence's sink enters its
/// denominator once, in the merge, never in a split's partial).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MergeKernelId {
    /// The architecture of its module: sm_80 (portable, without the
    /// programmatic launch's wait) or a specific target's.
    pub arch: Arch,
    pub dtype: Dtype,
    pub head_dim: u32,
    pub sinks: bool,
}

impl MergeKernelId {
    pub const fn same(&self, other: &MergeKernelId) -> bool {
        self.arch as u32 == other.arch as u32 && self.dtype as u32 == other.dtype as u32 && self.head_dim == other.head_dim && self.sinks == other.sinks
    }

    /// `merge[_sinks]_<dtype>_d<D>`.
    pub fn write_symbol(&self, w: &mut impl Write) -> fmt::Result {
        write!(w, "merge{}_{}_d{}", if self.sinks { "_sinks" } else { "" }, self.dtype.name(), self.head_dim)
    }

    /// Whether a module of its architecture has it: merges need sm_80, and
    /// those of V's head dim 512 are where the MLA family is (sm_90a).
    pub const fn exists(&self) -> bool {
        let needs = if self.head_dim == crate::axes::MLA_DIMS.v { Family::Mla.needs() } else { Arch::Sm80 };
        self.arch.holds(needs)
    }

    pub fn all() -> impl Iterator<Item = MergeKernelId> {
        Arch::ALL.into_iter().flat_map(|arch| {
            Dtype::ALL.into_iter().flat_map(move |dtype| V_HEAD_DIMS.into_iter().flat_map(move |head_dim| [false, true].map(move |sinks| MergeKernelId { arch, dtype, head_dim, sinks })))
        }).filter(MergeKernelId::exists)
    }
}
