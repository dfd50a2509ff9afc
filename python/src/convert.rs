//! Python values to the library's types: shape arguments, plan options,
//! buffer triples, and the library's errors to Python exceptions.

use decode_attn::{Dtype, Error, FamilyChoice, HeadPairChoice, KvFormat, KvLayout, MergeChoice, PageOrder, PlanOptions, SpecializeChoice, SplitPolicy, TransposeChoice};
use decode_attn::{ElemType, Family, TensorMut, TensorRef};
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A device buffer as the Python layer passes it: address, length in
/// elements, element type name (`bf16`, `f16`, `u8`, `f32`, `u32`, `i32`).
pub(crate) type Buf = (u64, usize, String);

/// The `ValueError` every rejected argument raises: the Rust message,
/// `invalid `param`: expected …, got …`.
pub(crate) fn invalid(param: &str, expected: &str, got: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("invalid `{param}`: expected {expected}, got {got}"))
}

/// The library's errors as Python exceptions: bad arguments are
/// `ValueError`s, combinations without a kernel `NotImplementedError`s,
/// driver failures `RuntimeError`s.
pub(crate) fn py_err(e: Error) -> PyErr {
    match e {
        Error::InvalidArgument { .. } => PyValueError::new_err(e.to_string()),
        Error::Unsupported(_) => PyNotImplementedError::new_err(e.to_string()),
        Error::Cuda { .. } | Error::Driver { .. } => PyRuntimeError::new_err(format!("decode_attn: {e}")),
    }
}

pub(crate) fn elem(name: &str) -> PyResult<ElemType> {
    Ok(match name {
        "bf16" => ElemType::Bf16,
        "f16" => ElemType::F16,
        "u8" => ElemType::U8,
        "f32" => ElemType::F32,
        "u32" => ElemType::U32,
        "i32" => ElemType::I32,
        other => return Err(invalid("elem", "bf16, f16, u8, f32, u32 or i32", other)),
    })
}

/// # Safety
/// As `TensorRef::from_raw`: the triple describes live device memory.
pub(crate) unsafe fn buffer_ref(b: Buf) -> PyResult<TensorRef<'static>> {
    Ok(TensorRef::from_raw(b.0, b.1, elem(&b.2)?))
}

/// # Safety
/// As `TensorMut::from_raw`.
pub(crate) unsafe fn buffer_mut(b: Buf) -> PyResult<TensorMut<'static>> {
    Ok(TensorMut::from_raw(b.0, b.1, elem(&b.2)?))
}

/// The keyword arguments of `DecodeShape(...)`.
pub(crate) struct ShapeArgs<'a> {
    pub batch: i64,
    pub num_q_heads: i64,
    pub num_kv_heads: i64,
    pub head_dim: i64,
    pub max_seq_len: i64,
    pub q_len: i64,
    /// `None`: the format's own dtype (16-bit caches), else bf16.
    pub dtype: Option<&'a str>,
    pub kv_format: Option<&'a str>,
    pub layout: &'a str,
    pub strides: Option<(i64, i64, i64)>,
    pub page_size: Option<i64>,
    pub num_pages: Option<i64>,
    pub page_order: &'a str,
    pub scale: Option<f64>,
    pub soft_cap: Option<f64>,
    pub window: Option<i64>,
    pub sinks: bool,
    pub alibi: bool,
    pub key_ranges: bool,
    pub tree: bool,
}

fn count(param: &str, v: i64) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| invalid(param, "an integer in 0..2^32", v))
}

fn stride(param: &str, v: i64) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| invalid(param, "a non-negative stride", v))
}

/// `'a', 'b' or 'c'`: names for an error's "expected".
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("one of {} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

pub(crate) fn dtype(name: &str) -> PyResult<Dtype> {
    Dtype::from_name(name).ok_or_else(|| invalid("dtype", &one_of(&Dtype::ALL.map(Dtype::name)), format!("'{name}'")))
}

pub(crate) fn kv_format(name: &str) -> PyResult<KvFormat> {
    KvFormat::from_name(name).ok_or_else(|| invalid("kv_format", &one_of(&KvFormat::ALL.map(KvFormat::name)), format!("'{name}'")))
}

pub(crate) fn shape_from_args(a: &ShapeArgs) -> PyResult<decode_attn::DecodeShape> {
    let format = a.kv_format.map(kv_format).transpose()?;
    let dtype = match a.dtype {
        Some(d) => dtype(d)?,
        None => format.and_then(KvFormat::required_dtype).unwrap_or(Dtype::Bf16),
    };
    let kv_format = format.unwrap_or(if dtype == Dtype::Bf16 { KvFormat::Bf16 } else { KvFormat::F16 });
    let paged_only = |param: &str, given: bool| -> PyResult<()> {
        if given {
            Err(invalid(param, "None unless layout='paged'", "a value"))
        } else {
            Ok(())
        }
    };
    if a.layout != "paged" {
        paged_only("page_size", a.page_size.is_some())?;
        paged_only("num_pages", a.num_pages.is_some())?;
    }
    if a.layout != "strided" && a.strides.is_some() {
        return Err(invalid("strides", "None unless layout='strided'", "strides"));
    }
    let kv_layout = match a.layout {
        "nhd" => KvLayout::Nhd,
        "hnd" => KvLayout::Hnd,
        "strided" => {
            let (b, t, h) = a.strides.ok_or_else(|| invalid("strides", "(batch, token, head) strides in cache values for layout='strided'", "None"))?;
            KvLayout::Strided { batch: stride("strides[0]", b)?, token: stride("strides[1]", t)?, head: stride("strides[2]", h)? }
        }
        "paged" => {
            let page_size = a.page_size.ok_or_else(|| invalid("page_size", "the tokens per page (a power of two, 1..=256) for layout='paged'", "None"))?;
            let num_pages = a.num_pages.ok_or_else(|| invalid("num_pages", "the pages in the pool for layout='paged'", "None"))?;
            let order = match a.page_order {
                "token_major" | "nhd" => PageOrder::TokenMajor,
                "head_major" | "hnd" => PageOrder::HeadMajor,
                other => return Err(invalid("page_order", "'token_major' or 'head_major'", format!("'{other}'"))),
            };
            KvLayout::Paged { page_size: count("page_size", page_size)?, num_pages: count("num_pages", num_pages)?, order, page_bytes: None }
        }
        other => return Err(invalid("layout", "'nhd', 'hnd', 'strided' or 'paged'", format!("'{other}'"))),
    };
    let float = |param: &str, v: Option<f64>| -> PyResult<Option<f32>> {
        match v {
            Some(x) if !x.is_finite() || (x as f32).is_infinite() => Err(invalid(param, "a finite float or None", x)),
            Some(x) => Ok(Some(x as f32)),
            None => Ok(None),
        }
    };
    Ok(decode_attn::DecodeShape {
        batch: count("batch", a.batch)?,
        num_q_heads: count("num_q_heads", a.num_q_heads)?,
        num_kv_heads: count("num_kv_heads", a.num_kv_heads)?,
        head_dim: count("head_dim", a.head_dim)?,
        q_len: count("q_len", a.q_len)?,
        max_seq_len: count("max_seq_len", a.max_seq_len)?,
        dtype,
        kv_format,
        kv_layout,
        scale: float("scale", a.scale)?,
        variant: decode_attn::VariantSpec {
            soft_cap: float("soft_cap", a.soft_cap)?,
            alibi: a.alibi,
            window: a.window.map(|w| count("window", w)).transpose()?,
            key_ranges: a.key_ranges,
            tree: a.tree,
            sinks: a.sinks,
        },
    })
}

pub(crate) fn layout_name(l: &KvLayout) -> &'static str {
    match l {
        KvLayout::Nhd => "nhd",
        KvLayout::Hnd => "hnd",
        KvLayout::Strided { .. } => "strided",
        KvLayout::Paged { .. } => "paged",
    }
}

pub(crate) fn page_order_name(l: &KvLayout) -> Option<&'static str> {
    match l {
        KvLayout::Paged { order: PageOrder::TokenMajor, .. } => Some("token_major"),
        KvLayout::Paged { order: PageOrder::HeadMajor, .. } => Some("head_major"),
        _ => None,
    }
}

fn choice<T>(options: &Bound<'_, PyDict>, key: &str, parse: impl Fn(&str) -> Option<T>, expected: &str) -> PyResult<Option<T>> {
    let Some(v) = options.get_item(key)? else { return Ok(None) };
    let s: String = v.extract().map_err(|_| invalid(key, expected, v.repr().map_or_else(|_| "?".into(), |r| r.to_string())))?;
    parse(&s).map(Some).ok_or_else(|| invalid(key, expected, format!("'{s}'")))
}

/// 'auto', 'never' or 'always' as the option's three values, in that order.
fn auto_never_always<T: Copy>(values: [T; 3]) -> impl Fn(&str) -> Option<T> {
    move |s| ["auto", "never", "always"].iter().position(|&name| name == s).map(|i| values[i])
}

/// `PlanOptions` from keyword arguments: `split` ('auto', 'never' or a
/// chunk size in keys), `family` ('auto', 'wide', 'narrow', 'wgmma'),
/// `warps_k`, `merge` ('auto', 'cluster', 'global'), `specialize`,
/// `head_pair` and `transpose` ('auto', 'never', 'always').
pub(crate) fn parse_options(options: Option<&Bound<'_, PyDict>>) -> PyResult<PlanOptions> {
    let mut opts = PlanOptions::default();
    let Some(options) = options else { return Ok(opts) };
    const KNOWN: [&str; 7] = ["split", "family", "warps_k", "merge", "specialize", "head_pair", "transpose"];
    for key in options.keys() {
        let k: String = key.extract()?;
        if !KNOWN.contains(&k.as_str()) {
            return Err(invalid("options", "split, family, warps_k, merge, specialize, head_pair or transpose", format!("'{k}'")));
        }
    }
    if let Some(v) = options.get_item("split")? {
        opts.split = if let Ok(n) = v.extract::<i64>() {
            SplitPolicy::ChunkKeys(u32::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| invalid("split", "a positive chunk size in keys", n))?)
        } else {
            match v.extract::<String>().as_deref() {
                Ok("auto") => SplitPolicy::Auto,
                Ok("never") => SplitPolicy::Never,
                _ => return Err(invalid("split", "'auto', 'never' or a chunk size in keys", v.repr()?)),
            }
        };
    }
    let family = |s: &str| match s {
        "auto" => Some(FamilyChoice::Auto),
        "wide" => Some(FamilyChoice::Force(Family::Wide)),
        "narrow" => Some(FamilyChoice::Force(Family::Narrow)),
        "wgmma" => Some(FamilyChoice::Force(Family::Wgmma)),
        "mla" => Some(FamilyChoice::Force(Family::Mla)),
        _ => None,
    };
    opts.family = choice(options, "family", family, "'auto', 'wide', 'narrow', 'wgmma' or 'mla'")?.unwrap_or_default();
    if let Some(v) = options.get_item("warps_k")? {
        if !v.is_none() {
            opts.warps_k = Some(v.extract::<u32>().map_err(|_| invalid("warps_k", "1, 2, 4, 8 or None", v.repr().map_or_else(|_| "?".into(), |r| r.to_string())))?);
        }
    }
    let merge = |s: &str| match s {
        "auto" => Some(MergeChoice::Auto),
        "cluster" => Some(MergeChoice::Cluster),
        "global" => Some(MergeChoice::Global),
        _ => None,
    };
    opts.merge = choice(options, "merge", merge, "'auto', 'cluster' or 'global'")?.unwrap_or_default();
    opts.specialize = choice(options, "specialize", auto_never_always([SpecializeChoice::Auto, SpecializeChoice::Never, SpecializeChoice::Always]), "'auto', 'never' or 'always'")?.unwrap_or_default();
    opts.head_pair = choice(options, "head_pair", auto_never_always([HeadPairChoice::Auto, HeadPairChoice::Never, HeadPairChoice::Always]), "'auto', 'never' or 'always'")?.unwrap_or_default();
    opts.transpose = choice(options, "transpose", auto_never_always([TransposeChoice::Auto, TransposeChoice::Never, TransposeChoice::Always]), "'auto', 'never' or 'always'")?.unwrap_or_default();
    Ok(opts)
}
