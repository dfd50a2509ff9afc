//! `cargo xtask bench`: the SPEC.md benchmark grids against the HBM roofline.
//!
//! Per row: inputs filled on the device (random, never zeros), one checked
//! run against the f64 reference (sampled sequences), then `--iters` timed
//! launches (CUDA events around each launch; L2 flushed before each, outside
//! the timed region), median/min/max, GB/s and % of the copy roofline
//! measured in the same run. Writes `<out>/<date>-<device>.{json,csv,svg}`.
//!
//! Flags: --grid A,B,C,D  --format bf16,f16  --quick  --device N
//!        --iters N  --out DIR  --compare OLD.json

#[path = "../tests/common/mod.rs"]
mod common;

use std::ffi::c_void;
use std::fmt::Write as _;
use std::time::Instant;

use decode_attn::cust::event::{Event, EventFlags};
use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::{Stream, StreamFlags};
use decode_attn::cust::sys as cuda;
use decode_attn::half::{bf16, f16};
use decode_attn::{DecodeAttention, DecodeShape, Dtype, KvFormat, KvLayout, PlanOptions, Workspace};

const TOLERANCE: f64 = 1e-2;

#[derive(Clone, Debug)]
struct RowSpec {
    grid: char,
    batch: u32,
    ctx: u32,
    hq: u32,
    hkv: u32,
    q_len: u32,
    d: u32,
    format: KvFormat,
}

#[derive(Clone, Debug, Default)]
struct RowResult {
    key: String,
    grid: String,
    batch: u32,
    ctx: u32,
    hq: u32,
    hkv: u32,
    q_len: u32,
    d: u32,
    format: String,
    splits: u32,
    block: String,
    median_us: f64,
    min_us: f64,
    max_us: f64,
    bytes: u64,
    gbps: f64,
    pct_roofline: f64,
    rel_err: f64,
    status: String,
}

fn grid_rows(grid: char) -> Vec<(u32, u32, u32, u32, u32)> {
    // (batch, ctx, hq, hkv, q_len), SPEC.md "Benchmark grids".
    match grid {
        'A' => [32, 64, 128, 256, 512].iter().map(|&b| (b, 8192, 8, 1, 1)).collect(),
        'B' => [(1024, 256), (2048, 128), (4096, 64), (8192, 32), (16384, 16), (32768, 8), (65536, 4), (131072, 2)]
            .iter()
            .map(|&(c, b)| (b, c, 16, 1, 3))
            .collect(),
        'C' => [8192, 32768, 131072].iter().map(|&c| (1, c, 32, 8, 1)).collect(),
        'D' => [(1, 1024), (8, 1024), (64, 128), (128, 2048)].iter().map(|&(b, c)| (b, c, 32, 32, 1)).collect(),
        _ => Vec::new(),
    }
}

fn quick_rows() -> Vec<(char, u32, u32)> {
    vec![('A', 128, 8192), ('B', 64, 4096), ('C', 1, 32768), ('D', 8, 1024)]
}

struct Args {
    grids: Vec<char>,
    formats: Vec<KvFormat>,
    quick: bool,
    device: u32,
    iters: usize,
    out: String,
    compare: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { grids: vec!['A', 'B', 'C', 'D'], formats: KvFormat::ALL.to_vec(), quick: false, device: 0, iters: 30, out: "target/bench".into(), compare: None };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--grid" => a.grids = val()?.split(',').map(|g| g.trim().to_ascii_uppercase().chars().next().unwrap_or('?')).collect(),
            "--format" => {
                a.formats = val()?
                    .split(',')
                    .map(|f| KvFormat::ALL.into_iter().find(|k| k.name() == f.trim()).ok_or(format!("unknown format `{f}` (have: bf16, f16)")))
                    .collect::<Result<_, _>>()?
            }
            "--quick" => a.quick = true,
            "--device" => a.device = val()?.parse().map_err(|e| format!("--device: {e}"))?,
            "--iters" => a.iters = val()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--out" => a.out = val()?,
            "--compare" => a.compare = Some(val()?),
            "--bench" => {} // passed by `cargo bench`
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if a.grids.iter().any(|g| !"ABCD".contains(*g)) {
        return Err(format!("--grid: expected letters among A,B,C,D, got {:?}", a.grids));
    }
    if a.iters < 20 {
        return Err("--iters: at least 20 timed launches (SPEC.md)".into());
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(2);
        }
    };
    let _ctx = match common::init_cuda(args.device) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("bench: no CUDA device found ({why})");
            std::process::exit(1);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn device_name(ordinal: u32) -> String {
    decode_attn::cust::device::Device::get_device(ordinal).and_then(|d| d.name()).unwrap_or_else(|_| "unknown".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Times `f` `iters` times after `warmup` runs, each launch between its own
/// events; `before` runs outside the timed region. Returns microseconds.
fn time_launches(stream: &Stream, warmup: usize, iters: usize, mut before: impl FnMut() -> Result<(), String>, mut f: impl FnMut() -> Result<(), String>) -> Result<Vec<f64>, String> {
    let ev = |_| Event::new(EventFlags::DEFAULT).map_err(|e| e.to_string());
    let starts: Vec<Event> = (0..iters).map(ev).collect::<Result<_, _>>()?;
    let stops: Vec<Event> = (0..iters).map(ev).collect::<Result<_, _>>()?;
    for _ in 0..warmup {
        before()?;
        f()?;
    }
    for i in 0..iters {
        before()?;
        starts[i].record(stream).map_err(|e| e.to_string())?;
        f()?;
        stops[i].record(stream).map_err(|e| e.to_string())?;
    }
    stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
    (0..iters).map(|i| stops[i].elapsed_time_f32(&starts[i]).map(|ms| ms as f64 * 1e3).map_err(|e| e.to_string())).collect()
}

fn check(status: cuda::CUresult, what: &str) -> Result<(), String> {
    if status == cuda::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(format!("{what} failed: {status:?}")) }
}

/// Device-to-device copy of 4 GiB: (bytes read + bytes written) / median time.
fn roofline(stream: &Stream) -> Result<f64, String> {
    let bytes: usize = 4 << 30;
    let src = DeviceBuffer::<u8>::zeroed(bytes).map_err(|e| e.to_string())?;
    let dst = DeviceBuffer::<u8>::zeroed(bytes).map_err(|e| e.to_string())?;
    let (s, d) = (src.as_device_ptr().as_raw(), dst.as_device_ptr().as_raw());
    let mut t = time_launches(stream, 2, 20, || Ok(()), || check(unsafe { cuda::cuMemcpyDtoDAsync_v2(d, s, bytes, stream.as_inner()) }, "cuMemcpyDtoDAsync"))?;
    Ok(2.0 * bytes as f64 / (median(&mut t) * 1e-6) / 1e9)
}

fn run(args: &Args) -> Result<(), String> {
    let t0 = Instant::now();
    let attn = DecodeAttention::new().map_err(|e| e.to_string())?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).map_err(|e| e.to_string())?;
    let dev = device_name(args.device);
    let info = *attn.device_info();
    eprintln!("device: {dev} ({} SMs, L2 {} MiB); PTX {}", info.sm_count, info.l2_bytes >> 20, decode_attn::PTX_ARCH);
    let roof = roofline(&stream)?;
    eprintln!("roofline: device-to-device copy of 4 GiB = {roof:.0} GB/s (read + write)");

    // Written before every timed launch so no launch starts with its data in L2.
    let flush_bytes = 4 * info.l2_bytes as usize;
    let flush = DeviceBuffer::<u32>::zeroed(flush_bytes / 4).map_err(|e| e.to_string())?;

    let mut specs = Vec::new();
    for &format in &args.formats {
        for &grid in &args.grids {
            for (batch, ctx, hq, hkv, q_len) in grid_rows(grid) {
                if args.quick && !quick_rows().contains(&(grid, batch, ctx)) {
                    continue;
                }
                specs.push(RowSpec { grid, batch, ctx, hq, hkv, q_len, d: 128, format });
            }
        }
    }
    let mut results = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let done = 30 * i / specs.len().max(1);
        eprint!("\r[{}{}] {:>3}/{:<3} {:<48}", "#".repeat(done), ".".repeat(30 - done), i + 1, specs.len(), row_key(spec));
        let r = bench_row(&attn, &stream, spec, args.iters, roof, &flush).unwrap_or_else(|e| RowResult { key: row_key(spec), status: format!("error: {e}"), ..Default::default() });
        results.push(r);
    }
    eprintln!("\rdone: {} rows in {:.0} s{}", results.len(), t0.elapsed().as_secs_f64(), " ".repeat(40));

    let table = render_table(&dev, roof, &results);
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out))?;
    let stem = format!("{}/{}-{}", args.out, today(), dev.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    std::fs::write(format!("{stem}.json"), to_json(&dev, roof, &results)).map_err(|e| e.to_string())?;
    std::fs::write(format!("{stem}.csv"), to_csv(&results)).map_err(|e| e.to_string())?;
    std::fs::write(format!("{stem}.svg"), to_svg(&dev, roof, &results)).map_err(|e| e.to_string())?;
    eprintln!("wrote {stem}.json, .csv, .svg");
    if let Some(old) = &args.compare {
        print!("{}", compare(old, &results)?);
    }
    print!("{table}");
    if results.iter().any(|r| r.status != "ok") {
        return Err("some rows failed (see status column)".into());
    }
    Ok(())
}

fn row_key(s: &RowSpec) -> String {
    format!("{} B={} ctx={} Hq={} Hkv={} q={} D={} {}", s.grid, s.batch, s.ctx, s.hq, s.hkv, s.q_len, s.d, s.format.name())
}

fn bench_row(attn: &DecodeAttention, stream: &Stream, s: &RowSpec, iters: usize, roof: f64, flush: &DeviceBuffer<u32>) -> Result<RowResult, String> {
    // Plain formats compute in their own type; quantized ones will name one here.
    let dtype = s.format.required_dtype().unwrap_or(Dtype::Bf16);
    let shape = DecodeShape { batch: s.batch, num_q_heads: s.hq, num_kv_heads: s.hkv, head_dim: s.d, q_len: s.q_len, max_seq_len: s.ctx, dtype, kv_format: s.format, kv_layout: KvLayout::Nhd, scale: None };
    let seq_lens = vec![s.ctx; s.batch as usize];
    let plan = attn.plan(&shape, &seq_lens, &PlanOptions::default()).map_err(|e| e.to_string())?;
    let mut ws = Workspace::for_plan(&plan).map_err(|e| e.to_string())?;
    let kv_len = shape.kv_elems_required().unwrap() as usize;
    let q_len = shape.q_elems() as usize;
    let (rel_err, mut times) = match dtype {
        Dtype::Bf16 => measure::<bf16>(attn, stream, &plan, &mut ws, q_len, kv_len, iters, flush)?,
        Dtype::F16 => measure::<f16>(attn, stream, &plan, &mut ws, q_len, kv_len, iters, flush)?,
    };
    let bytes = plan.bytes_moved();
    let med = median(&mut times);
    let gbps = bytes as f64 / (med * 1e-6) / 1e9;
    Ok(RowResult {
        key: row_key(s),
        grid: s.grid.to_string(),
        batch: s.batch,
        ctx: s.ctx,
        hq: s.hq,
        hkv: s.hkv,
        q_len: s.q_len,
        d: s.d,
        format: s.format.name().into(),
        splits: plan.max_splits(),
        block: format!("{}x{}w grid {}x{}x{}", plan.warps_m(), plan.warps_k(), plan.grid().0, plan.grid().1, plan.grid().2),
        median_us: med,
        min_us: times.iter().copied().fold(f64::INFINITY, f64::min),
        max_us: times.iter().copied().fold(0.0, f64::max),
        bytes,
        gbps,
        pct_roofline: 100.0 * gbps / roof,
        rel_err,
        status: if rel_err <= TOLERANCE { "ok".into() } else { format!("WRONG (rel err {rel_err:.2e})") },
    })
}

/// Fills inputs on the device, checks one run against the reference on
/// sampled sequences (first and last), then times the launches.
#[allow(clippy::too_many_arguments)]
fn measure<T: decode_attn::Element + Default + Copy + Into16>(attn: &DecodeAttention, stream: &Stream, plan: &decode_attn::Plan, ws: &mut Workspace, q_len: usize, kv_len: usize, iters: usize, flush: &DeviceBuffer<u32>) -> Result<(f64, Vec<f64>), String> {
    let e = |e: decode_attn::Error| e.to_string();
    // SAFETY: every element is written (fill, or NaN poison) before it is read.
    let alloc = |n| unsafe { DeviceBuffer::<T>::uninitialized(n) }.map_err(|e| e.to_string());
    let (mut q, mut k, mut v, mut o) = (alloc(q_len)?, alloc(kv_len)?, alloc(kv_len)?, alloc(q_len)?);
    attn.fill_random(&mut q, 1, stream).map_err(e)?;
    attn.fill_random(&mut k, 2, stream).map_err(e)?;
    attn.fill_random(&mut v, 3, stream).map_err(e)?;
    // Poison O with NaN (0x7FFF in both 16-bit types).
    check(unsafe { cuda::cuMemsetD16Async(o.as_device_ptr().as_raw(), 0x7FFF, q_len, stream.as_inner()) }, "cuMemsetD16Async")?;
    attn.run(plan, &q, &k, &v, &mut o, ws, stream).map_err(e)?;
    stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
    let rel_err = check_sampled::<T>(plan, &q, &k, &v, &o)?;
    let flush_ptr = flush.as_device_ptr().as_raw();
    let times = time_launches(
        stream,
        3,
        iters,
        || check(unsafe { cuda::cuMemsetD32Async(flush_ptr, 0x3F80_0000, flush.len(), stream.as_inner()) }, "cuMemsetD32Async"),
        || attn.run(plan, &q, &k, &v, &mut o, ws, stream).map_err(|e| e.to_string()),
    )?;
    Ok((rel_err, times))
}

trait Into16 {
    fn to_f32_(self) -> f32;
}
impl Into16 for bf16 {
    fn to_f32_(self) -> f32 {
        self.to_f32()
    }
}
impl Into16 for f16 {
    fn to_f32_(self) -> f32 {
        self.to_f32()
    }
}

fn download<T: Default + Copy + Into16>(addr: u64, n: usize) -> Result<Vec<f32>, String> {
    let mut h = vec![T::default(); n];
    check(unsafe { cuda::cuMemcpyDtoH_v2(h.as_mut_ptr() as *mut c_void, addr, n * std::mem::size_of::<T>()) }, "cuMemcpyDtoH")?;
    Ok(h.into_iter().map(Into16::to_f32_).collect())
}

/// Relative L2 error of sequences 0 and batch-1 against the f64 reference
/// (each sequence's NHD rows are contiguous, so only they are downloaded).
fn check_sampled<T: decode_attn::Element + Default + Copy + Into16>(plan: &decode_attn::Plan, q: &DeviceBuffer<T>, k: &DeviceBuffer<T>, v: &DeviceBuffer<T>, o: &DeviceBuffer<T>) -> Result<f64, String> {
    let shape = plan.shape();
    let mut sub = shape.clone();
    sub.batch = 1;
    let q_seq = sub.q_elems() as usize;
    let kv_seq = shape.kv_strides().batch as usize;
    let (mut num, mut den) = (0.0f64, 0.0f64);
    let mut samples = vec![0usize, shape.batch as usize - 1];
    samples.dedup();
    for b in samples {
        let at = |buf: &DeviceBuffer<T>, elems: usize| buf.as_device_ptr().as_raw() + (b * elems * 2) as u64;
        let qh = download::<T>(at(q, q_seq), q_seq)?;
        let kh = download::<T>(at(k, kv_seq), kv_seq)?;
        let vh = download::<T>(at(v, kv_seq), kv_seq)?;
        let oh = download::<T>(at(o, q_seq), q_seq)?;
        if oh.iter().any(|x| !x.is_finite()) {
            return Ok(f64::INFINITY);
        }
        let lens = [plan.seq_lens()[b]];
        let r = decode_attn::reference::decode_attention(&sub, &lens, &qh, &kh, &vh);
        for (&x, &y) in oh.iter().zip(&r) {
            num += (x as f64 - y).powi(2);
            den += y * y;
        }
    }
    Ok((num / den).sqrt())
}

fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86400) as i64;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!("{y:04}-{m:02}-{d:02}")
}

fn render_table(dev: &str, roof: f64, rows: &[RowResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n{dev}: copy roofline {roof:.0} GB/s");
    let _ = writeln!(s, "{:<4} {:>5} {:>7} {:>3} {:>3} {:>2} {:>3} {:<5} {:>6} {:<26} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8}  status", "grid", "B", "ctx", "Hq", "Hkv", "q", "D", "kv", "splits", "block", "MB read", "med µs", "min µs", "max µs", "GB/s", "%roof", "rel err");
    for r in rows {
        let _ = writeln!(
            s,
            "{:<4} {:>5} {:>7} {:>3} {:>3} {:>2} {:>3} {:<5} {:>6} {:<26} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8.0} {:>6.1}% {:>8.1e}  {}",
            r.grid, r.batch, r.ctx, r.hq, r.hkv, r.q_len, r.d, r.format, r.splits, r.block, r.bytes as f64 / 1e6, r.median_us, r.min_us, r.max_us, r.gbps, r.pct_roofline, r.rel_err, if r.key.is_empty() { "" } else { &r.status }
        );
    }
    s
}

fn to_json(dev: &str, roof: f64, rows: &[RowResult]) -> String {
    let mut s = format!("{{\n\"device\": \"{dev}\",\n\"date\": \"{}\",\n\"roofline_gbps\": {roof:.1},\n\"rows\": [\n", today());
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "{{\"key\": \"{}\", \"grid\": \"{}\", \"batch\": {}, \"ctx\": {}, \"hq\": {}, \"hkv\": {}, \"q_len\": {}, \"head_dim\": {}, \"format\": \"{}\", \"splits\": {}, \"block\": \"{}\", \"median_us\": {:.3}, \"min_us\": {:.3}, \"max_us\": {:.3}, \"bytes\": {}, \"gbps\": {:.1}, \"pct_roofline\": {:.2}, \"rel_err\": {:.3e}, \"status\": \"{}\"}}{}\n",
            r.key, r.grid, r.batch, r.ctx, r.hq, r.hkv, r.q_len, r.d, r.format, r.splits, r.block, r.median_us, r.min_us, r.max_us, r.bytes, r.gbps, r.pct_roofline, r.rel_err, r.status,
            if i + 1 < rows.len() { "," } else { "" }
        );
    }
    s.push_str("]\n}\n");
    s
}

fn to_csv(rows: &[RowResult]) -> String {
    let mut s = String::from("grid,batch,ctx,hq,hkv,q_len,head_dim,format,splits,block,median_us,min_us,max_us,bytes,gbps,pct_roofline,rel_err,status\n");
    for r in rows {
        let _ = writeln!(s, "{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{:.1},{:.2},{:.3e},{}", r.grid, r.batch, r.ctx, r.hq, r.hkv, r.q_len, r.d, r.format, r.splits, r.block, r.median_us, r.min_us, r.max_us, r.bytes, r.gbps, r.pct_roofline, r.rel_err, r.status);
    }
    s
}

/// Horizontal bars of % of roofline per row, one colour per format.
fn to_svg(dev: &str, roof: f64, rows: &[RowResult]) -> String {
    let (left, bar_h, width) = (330.0, 18.0, 900.0);
    let plot_w = width - left - 60.0;
    let height = 60.0 + rows.len() as f64 * (bar_h + 4.0) + 30.0;
    let mut s = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"14\">decode-attn: % of copy roofline ({roof:.0} GB/s), {dev}, {}</text>\n", today());
    for pct in [0, 25, 50, 75, 100] {
        let x = left + plot_w * pct as f64 / 110.0;
        let _ = writeln!(s, "<line x1=\"{x}\" y1=\"35\" x2=\"{x}\" y2=\"{}\" stroke=\"#ccc\"/><text x=\"{}\" y=\"{}\">{pct}%</text>", height - 25.0, x - 10.0, height - 10.0);
    }
    for (i, r) in rows.iter().enumerate() {
        let y = 40.0 + i as f64 * (bar_h + 4.0);
        let w = plot_w * r.pct_roofline.clamp(0.0, 110.0) / 110.0;
        let colour = match r.format.as_str() {
            "bf16" => "#4477aa",
            "f16" => "#66ccee",
            "int8" => "#228833",
            _ => "#ccbb44",
        };
        let _ = writeln!(s, "<text x=\"10\" y=\"{}\">{}</text><rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{:.1}%</text>", y + 13.0, r.key, left + w + 4.0, y + 13.0, r.pct_roofline);
    }
    s.push_str("</svg>\n");
    s
}

/// Reads a number or string field from one JSON row line written by `to_json`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{key}\": "))? + key.len() + 4;
    let rest = &line[at..];
    if let Some(stripped) = rest.strip_prefix('"') {
        stripped.split('"').next()
    } else {
        rest.split([',', '}']).next().map(str::trim)
    }
}

/// Per-row speedups against an earlier JSON; rows more than 5% slower are flagged.
fn compare(old_path: &str, rows: &[RowResult]) -> Result<String, String> {
    let old = std::fs::read_to_string(old_path).map_err(|e| format!("--compare {old_path}: {e}"))?;
    let mut old_rows = std::collections::HashMap::new();
    for line in old.lines().filter(|l| l.contains("\"key\"")) {
        if let (Some(k), Some(t)) = (field(line, "key"), field(line, "median_us").and_then(|t| t.parse::<f64>().ok())) {
            old_rows.insert(k.to_owned(), t);
        }
    }
    let mut s = format!("\ncompared with {old_path} (speedup = old time / new time; < 0.95 flagged)\n");
    for r in rows {
        match old_rows.get(&r.key) {
            Some(&t) if r.median_us > 0.0 => {
                let speedup = t / r.median_us;
                let _ = writeln!(s, "{:<50} {:>9.1} µs -> {:>9.1} µs  x{speedup:.3}{}", r.key, t, r.median_us, if speedup < 0.95 { "  REGRESSION" } else { "" });
            }
            _ => {
                let _ = writeln!(s, "{:<50} (not in old run)", r.key);
            }
        }
    }
    Ok(s)
}
