//! Every bad input is an `Err` naming the parameter (CPU only: planning and
//! buffer checks are pure functions).

use decode_attn::check::{check_buffers, RunBuffers};
use decode_attn::{BufferDesc, VariantBuffers, VariantSpec};
use decode_attn::plan::plan;
use decode_attn::{DecodeShape, DeviceInfo, Dtype, ElemType, Error, KernelInfo, KvFormat, KvLayout, PageOrder, PlanOptions, SplitPolicy};

const KERNEL: KernelInfo = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };

fn good() -> DecodeShape {
    DecodeShape::bf16(2, 8, 2, 128, 3, 1024)
}

fn plan_err(shape: &DecodeShape, lens: &[u32]) -> Error {
    plan(shape, lens, &DeviceInfo::H100_SXM, &KERNEL, &PlanOptions::default()).expect_err("must be rejected")
}

fn names(e: &Error, param: &str) {
    assert_eq!(e.param(), Some(param), "{e}");
    let text = e.to_string();
    assert!(text.contains("expected"), "{text}");
}

#[test]
fn shape_errors_name_the_parameter() {
    let lens = [100, 200];
    let cases: Vec<(fn(&mut DecodeShape), &str)> = vec![
        (|s| s.batch = 0, "batch"),
        (|s| s.num_kv_heads = 0, "num_kv_heads"),
        (|s| s.num_q_heads = 7, "num_q_heads"), // not a multiple of num_kv_heads
        (|s| s.head_dim = 96, "head_dim"),
        (|s| s.num_q_heads = 2 * 2_000_000, "num_q_heads"), // 6M rows: more row chunks than grid z allows
        (|s| s.q_len = 0, "q_len"),
        (|s| s.q_len = 9, "q_len"),
        (|s| s.max_seq_len = 2, "max_seq_len"),
        (|s| s.dtype = Dtype::F16, "dtype"),
        (|s| s.scale = Some(f32::NAN), "scale"),
        (|s| s.scale = Some(-1.0), "scale"),
        (|s| s.kv_layout = KvLayout::Strided { batch: 1024 * 256, token: 260, head: 128 }, "kv_layout.token"),
        (|s| s.kv_layout = KvLayout::Strided { batch: u64::MAX & !7, token: 256, head: 128 }, "kv_layout.batch"),
        // Each stride within its bound, the extent past memory.
        (
            |s| {
                s.batch = 64;
                s.kv_layout = KvLayout::Strided { batch: 1 << 57, token: 256, head: 128 };
            },
            "kv_layout",
        ),
    ];
    for (mutate, param) in cases {
        let mut s = good();
        mutate(&mut s);
        names(&plan_err(&s, &lens), param);
    }
}

#[test]
fn a_cache_format_needs_its_own_query_dtype() {
    let mut s = good();
    s.kv_format = KvFormat::F16;
    let e = plan_err(&s, &[100, 200]);
    names(&e, "dtype");
    assert!(e.to_string().contains("f16"), "{e}");
}

#[test]
fn sequence_length_errors_name_the_sequence() {
    names(&plan_err(&good(), &[100]), "seq_lens");
    names(&plan_err(&good(), &[100, 2]), "seq_lens[1]"); // shorter than q_len
    names(&plan_err(&good(), &[1025, 100]), "seq_lens[0]"); // beyond capacity
    let e = plan(&good(), &[100, 100], &DeviceInfo::H100_SXM, &KERNEL, &PlanOptions { split: SplitPolicy::ChunkKeys(0), ..Default::default() }).unwrap_err();
    names(&e, "split.chunk_keys");
}

fn buffers(shape: &DecodeShape) -> RunBuffers {
    let q = shape.q_elems() as usize;
    let kv = shape.kv_elems_required().unwrap() as usize;
    let d = |addr, len| BufferDesc { addr, len, elem: ElemType::Bf16 };
    let workspace = BufferDesc { addr: 0x10000000, len: 1 << 20, elem: ElemType::U8 };
    RunBuffers { q: d(0x10000, q), k: d(0x1000000, kv), v: d(0x8000000, kv), o: d(0x100000, q), workspace, k_scales: None, v_scales: None, seq_lens: None, block_table: None, seq_starts: None, variant: VariantBuffers::NONE }
}

#[test]
fn buffer_errors_name_the_buffer() {
    let shape = good();
    let p = plan(&shape, &[100, 200], &DeviceInfo::H100_SXM, &KERNEL, &PlanOptions::default()).unwrap();
    assert!(check_buffers(&p, &buffers(&shape)).is_ok());
    let cases: Vec<(fn(&mut RunBuffers), &str)> = vec![
        (|b| b.q.len -= 1, "q"),
        (|b| b.o.len -= 1, "o"),
        (|b| b.k.len -= 1, "k"),
        (|b| b.v.len -= 1, "v"),
        (|b| b.k.addr += 8, "k"),
        (|b| b.q.addr = 0, "q"),
        (|b| b.v.elem = ElemType::F16, "v"),
        (|b| b.q.elem = ElemType::U8, "q"),
        (|b| b.o.addr = b.q.addr, "o"),
        (|b| b.workspace.len = 0, "workspace"),
        (|b| b.workspace.addr = 0, "workspace"),
        (|b| b.workspace.addr += 16, "workspace"),
        (|b| b.workspace.addr = b.k.addr, "workspace"),
        (|b| b.workspace.addr = b.o.addr - 256, "workspace"),
        (|b| b.workspace.addr = u64::MAX - 255, "workspace"),
    ];
    for (mutate, param) in cases {
        let mut b = buffers(&shape);
        mutate(&mut b);
        names(&check_buffers(&p, &b).expect_err(param), param);
    }
}

#[test]
fn strided_extent_counts_the_last_row() {
    let mut s = good();
    s.kv_layout = KvLayout::Strided { batch: 4096 * 300, token: 300 + 4, head: 136 };
    assert!(s.validate().is_ok());
    let st = s.kv_strides();
    assert_eq!(s.kv_elems_required(), Some(st.batch + 1023 * st.token + st.head + 128));
}

#[test]
fn every_format_and_dtype_has_one_name_and_parses_from_its_aliases() {
    use decode_attn::{Dtype, KvFormat};
    for f in KvFormat::ALL {
        assert_eq!(KvFormat::from_name(f.name()), Some(f));
        assert_eq!(KvFormat::from_name(&f.name().replace('-', "_").to_uppercase()), Some(f), "{}", f.name());
    }
    for (alias, f) in [("bfloat16", KvFormat::Bf16), ("fp16", KvFormat::F16), ("float16", KvFormat::F16), ("int4", KvFormat::Int4G32), ("fp8_e4m3", KvFormat::Fp8)] {
        assert_eq!(KvFormat::from_name(alias), Some(f), "{alias}");
    }
    for bad in ["", "int2", "int4-g16", "fp8-per-token", "bf16 ", "f16x"] {
        assert_eq!(KvFormat::from_name(bad), None, "{bad:?}");
    }
    for d in Dtype::ALL {
        assert_eq!(Dtype::from_name(d.name()), Some(d));
    }
    for (alias, d) in [("bfloat16", Dtype::Bf16), ("fp16", Dtype::F16), ("float16", Dtype::F16), ("half", Dtype::F16), ("BF16", Dtype::Bf16)] {
        assert_eq!(Dtype::from_name(alias), Some(d), "{alias}");
    }
    assert_eq!(Dtype::from_name("fp32"), None);
}

/// A binding's tensor views (dims and strides in elements) are checked in
/// Rust, one message whichever binding asks: a K/V cache in the shape's
/// layout (token- or head-major, either for the strided layout, a paged
/// pool in its page order; int4 in bytes of two values), Q/O rows and
/// per-sequence figures contiguous, scales in `scale_dims`. Each check
/// returns the view's extent in elements.
#[test]
fn tensor_views_are_checked_against_the_shape_in_one_place() {
    let s = DecodeShape::bf16(2, 8, 2, 128, 1, 64);
    let nhd = [2i64, 64, 2, 128];
    let nhd_strides = [64 * 2 * 128i64, 2 * 128, 128, 1];
    assert_eq!(s.check_cache_view("k", &nhd, &nhd_strides, false).unwrap(), 2 * 64 * 2 * 128);
    let e = s.check_cache_view("k", &[2, 2, 64, 128], &[64 * 2 * 128, 64 * 128, 128, 1], false).unwrap_err().to_string();
    assert!(e.starts_with("invalid `k`: expected shape (2, 64, 2, 128) (batch, max_seq_len, num_kv_heads, head_dim)"), "{e}");
    // A view with a gap between sequences: the strided layout takes it.
    let padded = [2 * 64 * 2 * 128i64, 2 * 128, 128, 1];
    let e = s.check_cache_view("v", &nhd, &padded, false).unwrap_err().to_string();
    assert!(e.starts_with("invalid `v`: expected strides") && e.contains("strided layout"), "{e}");
    let strided = DecodeShape { kv_layout: KvLayout::Strided { batch: 2 * 64 * 2 * 128, token: 256, head: 128 }, ..s.clone() };
    assert_eq!(strided.check_cache_view("v", &nhd, &padded, false).unwrap(), (2 * 64 * 2 * 128) + 63 * 256 + 128 + 128);
    let e = s.check_cache_view("k", &[2, 64, 2, 128], &[64 * 2 * 128, 2 * 128, 128, 2], false).unwrap_err().to_string();
    assert!(e.contains("last dimension is contiguous"), "{e}");
    assert!(s.check_cache_view("k", &[2, 64, 256], &[1, 1, 1], false).unwrap_err().to_string().contains("a 4-D tensor"));
    assert!(s.check_cache_view("k", &nhd, &[-1, 256, 128, 1], false).unwrap_err().to_string().contains("non-negative strides"));
    // int4: bytes of two values; its plain copy in values.
    let int4 = DecodeShape { kv_format: KvFormat::Int4G32, ..s.clone() };
    assert_eq!(int4.check_cache_view("k", &[2, 64, 2, 64], &[64 * 2 * 64, 2 * 64, 64, 1], false).unwrap(), 2 * 64 * 2 * 64);
    assert!(int4.check_cache_view("k", &nhd, &nhd_strides, true).is_ok());
    // A paged pool, head-major pages.
    let paged = DecodeShape { kv_layout: KvLayout::Paged { page_size: 16, num_pages: 9, order: PageOrder::HeadMajor, page_bytes: None }, ..s.clone() };
    assert!(paged.check_cache_view("k", &[9, 2, 16, 128], &[2 * 16 * 128, 16 * 128, 128, 1], false).is_ok());
    assert!(paged.check_cache_view("k", &[9, 16, 2, 128], &[2 * 16 * 128, 2 * 128, 128, 1], false).is_err());
    // Rows and per-sequence figures: contiguous, exactly their dims.
    assert_eq!(s.check_rows_view("q", 8, &[2, 1, 8, 128], &[1024, 1024, 128, 1]).unwrap(), 2048);
    let e = s.check_rows_view("q", 8, &[2, 1, 8, 128], &[2048, 1024, 128, 1]).unwrap_err().to_string();
    assert!(e.contains("a contiguous tensor (strides (1024, 1024, 128, 1))"), "{e}");
    assert!(s.check_per_sequence_view("seq_lens", &[3], &[1]).unwrap_err().to_string().contains("shape (2,) (batch)"));
    // Scales: int8's f32 per (sequence, kv head, token rounded up to 4);
    // int4's words per group a trailing dim; fp8 per tensor one scale;
    // 16-bit caches none.
    let int8 = DecodeShape { kv_format: KvFormat::Int8, ..s.clone() };
    assert_eq!(int8.scale_dims(), Some((vec![2, 2, 64], "batch, num_kv_heads, max_seq_len rounded up to 4")));
    assert_eq!(int8.check_scales_view("k_scales", &[2, 2, 64], &[128, 64, 1]).unwrap(), 256);
    assert_eq!(int4.scale_dims().unwrap().0, vec![2, 2, 64, 4]);
    let fp8 = DecodeShape { kv_format: KvFormat::Fp8, ..s.clone() };
    assert_eq!((fp8.scale_dims(), fp8.check_scales_view("k_scale", &[1], &[1]).unwrap()), (None, 1));
    assert!(s.check_scales_view("k_scales", &[2, 2, 64], &[128, 64, 1]).unwrap_err().to_string().contains("no scales"));
    // A variant's arrays: one per query head (sinks, ALiBi slopes) or per
    // new token (a tree's masks and positions), for a shape with the part,
    // in the element types Rust names.
    let tree = DecodeShape { q_len: 4, variant: VariantSpec { tree: true, sinks: true, ..VariantSpec::STANDARD }, ..s.clone() };
    assert_eq!(tree.check_variant_view("sinks", &[8], &[1]).unwrap(), 8);
    assert_eq!(tree.check_variant_view("tree_masks", &[2, 4], &[4, 1]).unwrap(), 8);
    assert_eq!((tree.variant_elems("tree_masks").unwrap(), tree.variant_elems("tree_positions").unwrap()), (&["u8"][..], &["u32", "i32"][..]));
    assert!(tree.check_variant_view("tree_positions", &[2, 4], &[1, 2]).unwrap_err().to_string().contains("contiguous"));
    assert!(tree.check_variant_view("alibi_slopes", &[8], &[1]).unwrap_err().to_string().contains("variant.alibi = false"));
    assert!(tree.check_variant_view("slopes", &[8], &[1]).unwrap_err().to_string().starts_with("invalid `name`"));
}
