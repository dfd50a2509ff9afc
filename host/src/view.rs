//! Tensor views as a binding holds them (dims and strides in elements of
//! the buffer's type, as torch and numpy give them), checked against what
//! a shape expects of each role: one check and one message, whichever
//! binding calls it. Each check returns the view's extent in elements
//! (one past the last element it addresses), which the binding passes on
//! as the buffer's length, so the launch checks that the extent covers
//! what the shape reads.

use decode_attn_abi::{Dtype, KvFormat};

use crate::check::scale_elem;
use crate::error::{Error, Result};
use crate::shape::{DecodeShape, KvLayout, PageOrder};
use crate::tensor::ElemType;
use crate::variant::{VariantArray, VariantBuffers, VariantCount};

/// One accepted form of a view: its dims, the strides they must have
/// (a dimension of extent 1 may have any) and their names.
struct Form {
    dims: Vec<u64>,
    strides: Vec<u64>,
    what: &'static str,
}

fn fmt_tuple(xs: &[impl std::fmt::Display]) -> String {
    let parts: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

/// Elements from a view's first to one past its last; 0 for an empty one.
fn extent(dims: &[u64], strides: &[u64]) -> u64 {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims.iter().zip(strides).map(|(&n, &s)| (n - 1).saturating_mul(s)).fold(0u64, u64::saturating_add)
}

fn contiguous(dims: &[u64]) -> Vec<u64> {
    let mut out = vec![0; dims.len()];
    let mut acc = 1u64;
    for (o, &n) in out.iter_mut().zip(dims).rev() {
        *o = acc;
        acc = acc.saturating_mul(n);
    }
    out
}

/// A binding's dims and strides as unsigned figures: negative ones are no
/// view the kernels can read.
fn unsigned(name: &str, dims: &[i64], strides: &[i64]) -> Result<(Vec<u64>, Vec<u64>)> {
    if dims.len() != strides.len() {
        return Err(Error::invalid(name, format!("as many strides as dims ({})", dims.len()), strides.len()));
    }
    let cast = |xs: &[i64], what: &str| xs.iter().map(|&x| u64::try_from(x).map_err(|_| Error::invalid(name, format!("non-negative {what}"), fmt_tuple(xs)))).collect::<Result<Vec<_>>>();
    Ok((cast(dims, "dims")?, cast(strides, "strides")?))
}

fn strides_match(dims: &[u64], got: &[u64], want: &[u64]) -> bool {
    dims.iter().zip(got).zip(want).all(|((&n, &g), &w)| n == 1 || g == w)
}

/// The view if it has one of `forms`; else the error naming the first
/// form (its shape when no form's dims match, else its strides, with
/// `hint`).
fn one_of(name: &str, dims: &[i64], strides: &[i64], forms: &[Form], hint: &str) -> Result<u64> {
    let (dims, strides) = unsigned(name, dims, strides)?;
    if forms.iter().any(|f| f.dims == dims && strides_match(&dims, &strides, &f.strides)) {
        return Ok(extent(&dims, &strides));
    }
    let first = &forms[0];
    if forms.iter().all(|f| f.dims != dims) {
        return Err(Error::invalid(name, format!("shape {} ({})", fmt_tuple(&first.dims), first.what), fmt_tuple(&dims)));
    }
    Err(Error::invalid(name, format!("strides {}{hint}", fmt_tuple(&first.strides)), format!("strides {}", fmt_tuple(&strides))))
}

impl DecodeShape {
    /// A contiguous view of exactly `want` dims (named by `what`): Q, O,
    /// new rows, lengths and the like.
    fn dense_view(name: &str, dims: &[i64], strides: &[i64], want: Vec<u64>, what: &'static str) -> Result<u64> {
        let strides_want = contiguous(&want);
        let form = Form { dims: want, strides: strides_want, what };
        let (d, s) = unsigned(name, dims, strides)?;
        if d != form.dims {
            return Err(Error::invalid(name, format!("shape {} ({what})", fmt_tuple(&form.dims)), fmt_tuple(&d)));
        }
        if !strides_match(&d, &s, &form.strides) {
            return Err(Error::invalid(name, format!("a contiguous tensor (strides {})", fmt_tuple(&form.strides)), format!("strides {}", fmt_tuple(&s))));
        }
        Ok(extent(&d, &s))
    }

    /// Checks a view of Q, O (`heads` = `num_q_heads`) or new K / V rows
    /// (`num_kv_heads`): `[batch, q_len, heads, head_dim]`, contiguous.
    pub fn check_rows_view(&self, name: &str, heads: u32, dims: &[i64], strides: &[i64]) -> Result<u64> {
        let want = vec![self.batch as u64, self.q_len as u64, heads as u64, self.head_dim as u64];
        Self::dense_view(name, dims, strides, want, "batch, q_len, heads, head_dim")
    }

    /// Checks a view of O: `[batch, q_len, num_q_heads, V's head dim]`
    /// (`head_dim`, but a latent cache's 512), contiguous.
    pub fn check_out_view(&self, name: &str, dims: &[i64], strides: &[i64]) -> Result<u64> {
        let want = vec![self.batch as u64, self.q_len as u64, self.num_q_heads as u64, self.head_dims().v as u64];
        Self::dense_view(name, dims, strides, want, "batch, q_len, num_q_heads, V's head_dim")
    }

    /// Checks a view of per-sequence figures (device lengths, first keys):
    /// `[batch]`, contiguous.
    pub fn check_per_sequence_view(&self, name: &str, dims: &[i64], strides: &[i64]) -> Result<u64> {
        Self::dense_view(name, dims, strides, vec![self.batch as u64], "batch")
    }

    /// Checks a view of a K or V cache in the shape's layout, its elements
    /// the format's storage (int4: bytes of two values) or, `plain`, 16-bit
    /// values (a plain copy of the rows): `[batch, max_seq_len, Hkv, D]`
    /// (token-major) or `[batch, Hkv, max_seq_len, D]` (head-major) with
    /// the layout's strides (a strided layout takes either), or a paged
    /// pool's `[num_pages, page_size, Hkv, D]` / `[num_pages, Hkv,
    /// page_size, D]`; `head_dim` contiguous. (fp8-ds-mla's rows are D =
    /// 656 bytes; its plain copy is its twin's, `plain_shape`.)
    pub fn check_cache_view(&self, name: &str, dims: &[i64], strides: &[i64], plain: bool) -> Result<u64> {
        let per = if plain || self.kv_format.bits() != 4 { 1 } else { 2 };
        if self.head_dim % per != 0 {
            return Err(Error::invalid("head_dim", format!("a multiple of {per}"), self.head_dim));
        }
        let (shape, row) = if plain { (self.plain_shape(), self.head_dim) } else { (self.clone(), self.kv_format.row_len(self.head_dim)) };
        let s = shape.kv_strides_checked().ok_or_else(|| Error::invalid("kv_layout", "strides that fit in 64 bits", "an overflow"))?;
        let per = per as u64;
        if [s.batch, s.token, s.head].iter().any(|x| x % per != 0) {
            return Err(Error::invalid("kv_layout", format!("strides that are multiples of {per} values (whole bytes)"), fmt_tuple(&[s.batch, s.token, s.head])));
        }
        let (sb, st, sh, d) = (s.batch / per, s.token / per, s.head / per, row as u64 / per);
        if dims.len() != 4 {
            return Err(Error::invalid(name, "a 4-D tensor", format!("{}-D", dims.len())));
        }
        if strides.len() == 4 && strides[3] != 1 && dims[3] > 1 {
            return Err(Error::invalid(name, "a tensor whose last dimension is contiguous (stride 1)", format!("stride {}", strides[3])));
        }
        let (b, l, h) = (self.batch as u64, self.max_seq_len as u64, self.num_kv_heads as u64);
        let nhd = Form { dims: vec![b, l, h, d], strides: vec![sb, st, sh, 1], what: "batch, max_seq_len, num_kv_heads, head_dim" };
        let hnd = Form { dims: vec![b, h, l, d], strides: vec![sb, sh, st, 1], what: "batch, num_kv_heads, max_seq_len, head_dim" };
        let (forms, hint) = match self.kv_layout {
            KvLayout::Nhd => (vec![nhd], "; a tensor of other strides needs the strided layout with them"),
            KvLayout::Hnd => (vec![hnd], "; a tensor of other strides needs the strided layout with them"),
            KvLayout::Strided { .. } => (vec![nhd, hnd], ""),
            KvLayout::Paged { page_size, num_pages, order, .. } => {
                let (n, p) = (num_pages as u64, page_size as u64);
                let form = match order {
                    PageOrder::TokenMajor => Form { dims: vec![n, p, h, d], strides: vec![sb, st, sh, 1], what: "num_pages, page_size, num_kv_heads, head_dim" },
                    PageOrder::HeadMajor => Form { dims: vec![n, h, p, d], strides: vec![sb, sh, st, 1], what: "num_pages, num_kv_heads, page_size, head_dim" },
                };
                (vec![form], "")
            }
        };
        one_of(name, dims, strides, &forms, hint)
    }

    /// The dims of a quantized cache's scales and their names: one entry
    /// per (sequence or page, kv head, token), `[batch, Hkv, max_seq_len
    /// rounded up to 4]` or `[num_pages, Hkv, page_size]`; int4's entries
    /// are a trailing dimension of one u32 word per group (an fp16 scale and
    /// an fp16 zero). `None` for formats without side rows (16-bit, and fp8
    /// per tensor, whose scale is one f32).
    pub fn scale_dims(&self) -> Option<(Vec<u64>, &'static str)> {
        let entry = self.kv_format.scale_bytes(self.head_dim);
        if entry == 0 || self.kv_format.tensor_scaled() {
            return None;
        }
        let h = self.num_kv_heads as u64;
        let (mut dims, mut what) = match self.kv_layout {
            KvLayout::Paged { page_size, num_pages, .. } => (vec![num_pages as u64, h, page_size as u64], "num_pages, num_kv_heads, page_size"),
            _ => (vec![self.batch as u64, h, self.scale_strides().head], "batch, num_kv_heads, max_seq_len rounded up to 4"),
        };
        if entry / 4 > 1 {
            dims.push(entry as u64 / 4);
            what = match self.kv_layout {
                KvLayout::Paged { .. } => "num_pages, num_kv_heads, page_size, groups",
                _ => "batch, num_kv_heads, max_seq_len rounded up to 4, groups",
            };
        }
        Some((dims, what))
    }

    /// The element types a binding may hold K or V in (`plain`: a 16-bit
    /// copy of the rows), by name: [`ElemType::name`]s, and `e4m3` for an
    /// fp8 cache held in an e4m3 type (the same bytes). The first is the
    /// one the launch takes.
    pub fn value_elems(&self, plain: bool) -> &'static [&'static str] {
        let own = match self.dtype {
            Dtype::Bf16 => &["bf16"],
            Dtype::F16 => &["f16"],
        };
        if plain {
            return own;
        }
        match self.kv_format {
            KvFormat::Bf16 | KvFormat::F16 => own,
            KvFormat::Fp8PerHead | KvFormat::Fp8 => &["u8", "e4m3"],
            // (Rows of three kinds of bytes: held as bytes.)
            KvFormat::Int8 | KvFormat::Fp8DsMla | KvFormat::Int4G32 | KvFormat::Int4G64 | KvFormat::Int4G128 => &["u8"],
        }
    }

    /// The element types a binding may hold a quantized cache's scales
    /// in (none for 16-bit caches): f32 scales, or int4's words as u32 (or
    /// i32, the same bits). The first is the one the launch takes.
    pub fn scale_elems(&self) -> &'static [&'static str] {
        match scale_elem(self.kv_format) {
            None => &[],
            Some(ElemType::U32) => &["u32", "i32"],
            Some(ElemType::F32) => &["f32"],
            Some(ElemType::Bf16 | ElemType::F16 | ElemType::U8 | ElemType::I32) => &[],
        }
    }

    /// Checks a view of a paged cache's block table: `[batch,
    /// pages_per_seq]` i32 page ids, contiguous; none for other layouts.
    pub fn check_table_view(&self, name: &str, dims: &[i64], strides: &[i64]) -> Result<u64> {
        if !self.is_paged() {
            return Err(Error::invalid(name, "none (the cache is not paged)", "a tensor"));
        }
        Self::dense_view(name, dims, strides, vec![self.batch as u64, self.pages_per_seq() as u64], "batch, pages_per_seq")
    }

    /// The array `name` of the shape's variant ([`VariantBuffers::arrays`]),
    /// or an error naming the array names there are.
    fn variant_array(&self, name: &str) -> Result<VariantArray<()>> {
        VariantBuffers::<()>::NONE
            .arrays(&self.variant)
            .into_iter()
            .find(|a| a.name == name)
            .ok_or_else(|| Error::invalid("name", "sinks, alibi_slopes, tree_masks or tree_positions", name))
    }

    /// The element types a binding may hold the variant's array `name` in
    /// (sinks and ALiBi slopes f32, tree masks u8, tree positions u32 or
    /// i32, the same bits). The first is the one the launch takes.
    pub fn variant_elems(&self, name: &str) -> Result<&'static [&'static str]> {
        Ok(match self.variant_array(name)?.elem {
            ElemType::F32 => &["f32"],
            ElemType::U8 => &["u8"],
            ElemType::U32 => &["u32", "i32"],
            ElemType::Bf16 | ElemType::F16 | ElemType::I32 => &[],
        })
    }

    /// Checks a view of the variant's array `name` for a shape whose
    /// [`VariantSpec`](crate::VariantSpec) has its part: `[num_q_heads]`
    /// (sinks, ALiBi slopes) or `[batch, q_len]` (a draft tree's masks and
    /// positions), contiguous.
    pub fn check_variant_view(&self, name: &str, dims: &[i64], strides: &[i64]) -> Result<u64> {
        let a = self.variant_array(name)?;
        if !a.wanted {
            return Err(Error::invalid(name, format!("none (the shape has variant.{} = false)", a.part), "a tensor"));
        }
        match a.count {
            VariantCount::PerQueryHead => Self::dense_view(name, dims, strides, vec![self.num_q_heads as u64], "num_q_heads"),
            VariantCount::PerRow => Self::dense_view(name, dims, strides, vec![self.batch as u64, self.q_len as u64], "batch, q_len"),
        }
    }

    /// Checks a view of a workspace: a contiguous 1-D byte tensor of at
    /// least `bytes` (`Plan::workspace_bytes`).
    pub fn check_workspace_view(name: &str, dims: &[i64], strides: &[i64], bytes: u64) -> Result<u64> {
        let (d, s) = unsigned(name, dims, strides)?;
        if d.len() != 1 || (d[0] > 1 && s[0] != 1) {
            return Err(Error::invalid(name, "a contiguous 1-D byte tensor", format!("shape {} strides {}", fmt_tuple(&d), fmt_tuple(&s))));
        }
        if d[0] < bytes {
            return Err(Error::invalid(name, format!("at least {bytes} bytes (Plan::workspace_bytes)"), format!("{} bytes", d[0])));
        }
        Ok(d[0])
    }

    /// Checks a view of any number of new K or V rows (`append_rows`):
    /// `[batch, rows, Hkv, D]` (`hnd` false) or `[batch, Hkv, rows, D]`
    /// (`hnd`, transformers' states), any strides with `head_dim`
    /// contiguous, at least one row. Returns the rows, the `(batch, token,
    /// head)` strides (0 for a dimension of extent 1) and the extent.
    pub fn check_new_rows_view(&self, name: &str, dims: &[i64], strides: &[i64], hnd: bool) -> Result<(u32, [u64; 3], u64)> {
        let (d, s) = unsigned(name, dims, strides)?;
        if d.len() != 4 {
            return Err(Error::invalid(name, "a 4-D tensor", format!("{}-D", d.len())));
        }
        let (tok, head) = if hnd { (2, 1) } else { (1, 2) };
        let rows = d[tok];
        let (b, h, hd) = (self.batch as u64, self.num_kv_heads as u64, self.head_dim as u64);
        let (want, what) = if hnd { ([b, h, rows, hd], "batch, num_kv_heads, rows, head_dim") } else { ([b, rows, h, hd], "batch, rows, num_kv_heads, head_dim") };
        if d != want || rows < 1 || rows > u32::MAX as u64 {
            return Err(Error::invalid(name, format!("shape {} ({what}, rows >= 1)", fmt_tuple(&want)), fmt_tuple(&d)));
        }
        if s[3] != 1 && d[3] > 1 {
            return Err(Error::invalid(name, "a tensor whose last dimension is contiguous (stride 1)", format!("stride {}", s[3])));
        }
        // (A dimension of extent 1 has no meaningful stride.)
        let at = |i: usize| if d[i] > 1 { s[i] } else { 0 };
        Ok((rows as u32, [at(0), at(tok), at(head)], extent(&d, &s)))
    }

    /// Checks a view of a quantized cache's scales ([`DecodeShape::scale_dims`],
    /// contiguous; entries of 4 bytes: int8's and fp8's f32 scales, int4's
    /// u32 words), or of a per-tensor fp8 scale (one element).
    pub fn check_scales_view(&self, name: &str, dims: &[i64], strides: &[i64]) -> Result<u64> {
        if self.kv_format.tensor_scaled() {
            let (d, _) = unsigned(name, dims, strides)?;
            let n: u64 = d.iter().product();
            if n != 1 {
                return Err(Error::invalid(name, "one float32 scale (a per-tensor fp8 cache)", format!("{n} elements")));
            }
            return Ok(1);
        }
        let (want, what) = self.scale_dims().ok_or_else(|| Error::invalid(name, format!("no scales (a {} cache has none)", self.kv_format.name()), "a tensor"))?;
        Self::dense_view(name, dims, strides, want, what)
    }
}
