//! `cargo xtask bench`: the benchmark grids (docs/benchmark.md) against the HBM roofline.
//!
//! Per row: inputs generated on the device (random, never zeros), one run
//! checked against the f64 reference on sampled sequences, then `--iters`
//! timed launches (`timing.rs` says how L2 is kept cold and the queue full),
//! median / min / max, GB/s and % of the copy
//! roofline measured in the same run. Writes
//! `<out>/<date>-<device>[-flush].{json,csv,svg}`; the table is printed last.

mod bound;
mod buffers;
mod check;
mod grids;
mod report;
mod sweep;
mod timing;

use clap::Parser;
use decode_attn::cust::memory::DeviceBuffer;
use decode_attn::cust::stream::{Stream, StreamFlags};
use decode_attn::{DecodeAttention, DecodeShape, Dtype, HeadPairChoice, KvFormat, KvLayout, MergeChoice, PageOrder, PlanOptions, SpecializeChoice, SplitPolicy, TransposeChoice, Family, FamilyChoice, Tuning, VariantSpec, Workspace};
use indicatif::{ProgressBar, ProgressStyle};

use buffers::BufferSet;
use grids::RowSpec;
use report::{Report, RowResult};
use timing::{median, L2Mode, TimedRun};

#[derive(Parser, Debug, Clone)]
#[command(name = "bench", bin_name = "cargo xtask bench", about = "decode-attn benchmark: grids A-E (docs/benchmark.md) against the copy roofline (needs a GPU)")]
struct Args {
    /// Grids to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = grids::GRIDS)]
    grid: Vec<char>,
    /// KV formats to run, comma-separated (bf16, f16, int8, fp8-per-head,
    /// fp8, int4-g32, int4-g64, int4-g128; the last two on grid A only).
    #[arg(long, value_delimiter = ',', value_parser = parse_format, default_values = ["bf16", "f16", "int8", "fp8-per-head", "fp8", "int4-g32", "int4-g128"])]
    format: Vec<KvFormat>,
    /// One row per grid.
    #[arg(long)]
    quick: bool,
    /// Only rows whose key contains this text (keys read like
    /// `C B=1 ctx=131072 Hq=32 Hkv=8 q=1 D=128 int8`), e.g. for a profiler.
    #[arg(long, value_name = "TEXT")]
    row: Option<String>,
    /// Grid-size study: every row at this batch instead of the grid's own
    /// (the keys say which; grid C stays at B = 1; rows made the same, once).
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u32).range(1..=65536))]
    batch: Option<u32>,
    /// Head-dim study: every row at this head dim (64, 128 or 256), its kv
    /// heads scaled by 128 / D where they divide (grids C and D: the same
    /// bytes a row, in rows of another size), its query heads by the same
    /// factor (the group kept).
    #[arg(long, value_name = "D", value_parser = ["64", "128", "256"])]
    head_dim: Option<String>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: u32,
    /// Timed launches per row (the median is reported; at least 50).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(50..))]
    iters: u32,
    /// How L2 is kept cold between timed launches.
    #[arg(long, value_enum, default_value_t = L2Mode::Rotate)]
    l2: L2Mode,
    /// Output directory for JSON / CSV / SVG.
    #[arg(long, default_value = "target/bench")]
    out: String,
    /// An earlier run's JSON: print per-row speedups against it.
    #[arg(long)]
    compare: Option<String>,
    /// Re-render an earlier run's JSON (table, CSV, SVG beside it) without a GPU.
    #[arg(long, value_name = "JSON")]
    from_json: Option<String>,
    /// Kernel family: auto (narrow for ≤ 8 query rows per kv head), wide or narrow.
    #[arg(long, value_parser = parse_family, default_value = "auto")]
    family: FamilyChoice,
    /// Split every sequence into chunks of this many keys (default: the
    /// planner's automatic split).
    #[arg(long, value_name = "KEYS")]
    chunk_keys: Option<u32>,
    /// Warps along the keys per block (default: the planner's choice).
    #[arg(long)]
    warps_k: Option<u32>,
    /// Also time each row in a paged pool (pages of 16 and 64 tokens, block
    /// tables in shuffled order): the pg16 / pg64 columns, paged time over
    /// contiguous time. The output with an identity table is checked
    /// bit-identical to the contiguous one first.
    #[arg(long)]
    paged: bool,
    /// Page order of the --paged tables: shuffled (default), or identity
    /// (pages in order: separates the kernel's paging cost from the
    /// memory system's cost of scattered pages).
    #[arg(long, value_enum, default_value = "shuffled")]
    page_table: PageTable,
    /// What the --paged pools hold: separate (K, V and their scales in
    /// four pools; default) or packed (one pool whose pages hold all four:
    /// `KvLayout::Paged { page_bytes: Some(..) }`).
    #[arg(long, value_enum, default_value = "separate")]
    page_layout: PageLayout,
    /// Also measure the empty launch, the tensor cores' bf16 rate and the
    /// SM clock, and give each row its bound (the %bound column: the bound
    /// over the row's time; docs/benchmark.md, "The bound column").
    #[arg(long)]
    bound: bool,
    /// Also time each row as a replayed CUDA graph of a capacity plan
    /// (lengths read on the device by the attention blocks): the
    /// graph column, graph time over planned time. Its output is checked
    /// bit-identical to the planned one first.
    #[arg(long)]
    graph: bool,
    /// Contiguous cache layout: nhd (`[batch, len, Hkv, D]`, default) or
    /// hnd (`[batch, Hkv, len, D]`: each kv head's rows contiguous). Not
    /// with --paged (its pools are built from NHD rows).
    #[arg(long, value_enum, default_value = "nhd")]
    layout: CacheLayout,
    /// Split merge: auto (in a thread-block cluster for two chunks per
    /// sequence, else through global memory), cluster (in a cluster when a
    /// sequence's chunks fit one) or global (never in a cluster).
    #[arg(long, value_enum, default_value = "auto")]
    merge: MergeArg,
    /// Warp-specialised wgmma kernel of strided quantized caches (block
    /// column `gs…`): auto (when its grid fits two waves), never or always.
    /// Paged columns run the unspecialised kernel whatever this says (no
    /// paged kernel is specialised).
    #[arg(long, value_enum, default_value = "auto")]
    specialize: SpecializeArg,
    /// Blocks of two adjacent kv heads (block column `…h2`) for narrow
    /// plans of int8 caches at head_dim 128: auto (token-major caches and
    /// pools, unsplit, sequences of 512 keys on average, the paired grid
    /// keeping 95 % of the busy SMs and, in a pool, filling two waves), never or
    /// always (rows that cannot pair report an error). Graph rows and the
    /// paged columns pair as the planned launch does (a paged pair's output
    /// is checked against the contiguous pair's).
    #[arg(long, value_enum, default_value = "auto")]
    head_pair: SpecializeArg,
    /// The MLA family's transposed kernel for plans of at most 16 query
    /// rows: auto (wherever it serves), never (the 64-row
    /// kernel) or always (other rows report an error).
    #[arg(long, value_enum, default_value = "auto")]
    transpose: SpecializeArg,
    /// Placement study: put each buffer set's K and V in one allocation, V
    /// starting this many bytes (a multiple of 16) after K's end, so the
    /// distance from a K row to its V row (which the kernels read
    /// together) is K's size plus this. Default: separate allocations.
    /// Every row prints where its buffer sets landed.
    #[arg(long, value_parser = parse_kv_gap)]
    kv_gap: Option<u64>,
    /// Skip the warm-up row. By default the first row is timed once more,
    /// first, and that result discarded: the first row a process timed
    /// read up to 13 % slow on some rows (docs/perf.md, "Method").
    #[arg(long)]
    no_warmup_row: bool,
    /// Plan with this tuning table (`H100 SXM`, `H200`) instead of the
    /// device's own (`Tuning::for_device`); with --sweep, the table the
    /// other thresholds are held at.
    #[arg(long, value_name = "NAME")]
    tuning: Option<String>,
    /// Instead of the grids: try each threshold of the tuning table at its
    /// candidate values on the rows it decides (`sweep.rs`), writing
    /// `<out>/<date>-<device>-sweep<tag>.json` for `cargo xtask tune --from`.
    #[arg(long)]
    sweep: bool,
    /// With --sweep: only these thresholds (comma-separated `Tuning` field
    /// names), e.g. to split a sweep over device calls.
    #[arg(long, value_name = "NAMES")]
    sweep_knobs: Option<String>,
    /// Appended to the output file names (several runs in one directory).
    #[arg(long, default_value = "")]
    tag: String,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum MergeArg {
    Auto,
    Cluster,
    Global,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SpecializeArg {
    Auto,
    Never,
    Always,
}

impl SpecializeArg {
    fn choice(self) -> SpecializeChoice {
        match self {
            SpecializeArg::Auto => SpecializeChoice::Auto,
            SpecializeArg::Never => SpecializeChoice::Never,
            SpecializeArg::Always => SpecializeChoice::Always,
        }
    }
    fn head_pair(self) -> HeadPairChoice {
        match self {
            SpecializeArg::Auto => HeadPairChoice::Auto,
            SpecializeArg::Never => HeadPairChoice::Never,
            SpecializeArg::Always => HeadPairChoice::Always,
        }
    }
    fn transpose(self) -> TransposeChoice {
        match self {
            SpecializeArg::Auto => TransposeChoice::Auto,
            SpecializeArg::Never => TransposeChoice::Never,
            SpecializeArg::Always => TransposeChoice::Always,
        }
    }
}

impl MergeArg {
    fn choice(self) -> MergeChoice {
        match self {
            MergeArg::Auto => MergeChoice::Auto,
            MergeArg::Cluster => MergeChoice::Cluster,
            MergeArg::Global => MergeChoice::Global,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PageLayout {
    Separate,
    Packed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CacheLayout {
    Nhd,
    Hnd,
}

impl CacheLayout {
    fn kv_layout(self) -> KvLayout {
        match self {
            CacheLayout::Nhd => KvLayout::Nhd,
            CacheLayout::Hnd => KvLayout::Hnd,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PageTable {
    Shuffled,
    Identity,
}

fn parse_family(s: &str) -> Result<FamilyChoice, String> {
    match s.trim() {
        "auto" => Ok(FamilyChoice::Auto),
        v => Family::ALL.into_iter().find(|x| x.name() == v).map(FamilyChoice::Force).ok_or_else(|| format!("unknown family `{s}` (have: auto, wide, narrow, wgmma, mla)")),
    }
}

fn parse_kv_gap(s: &str) -> Result<u64, String> {
    let gap: u64 = s.trim().parse().map_err(|e| format!("`{s}`: {e}"))?;
    if gap % 16 == 0 {
        Ok(gap)
    } else {
        Err(format!("{gap} is not a multiple of 16 (the kernels need 16-byte aligned rows)"))
    }
}

fn parse_format(s: &str) -> Result<KvFormat, String> {
    KvFormat::from_name(s.trim()).ok_or_else(|| {
        let names: Vec<&str> = KvFormat::ALL.iter().map(|f| f.name()).collect();
        format!("unknown format `{s}` (have: {})", names.join(", "))
    })
}

#[path = "../../tests/common/cuda.rs"]
mod cuda_init;

/// Relative paths are taken from where the user ran `cargo xtask bench`
/// (cargo runs benchmarks inside the package directory).
fn user_path(path: &str) -> String {
    match std::env::var_os("DECODE_ATTN_CALLER_DIR") {
        Some(dir) if std::path::Path::new(path).is_relative() => std::path::Path::new(&dir).join(path).to_string_lossy().into_owned(),
        _ => path.to_owned(),
    }
}

fn main() {
    let mut args = Args::parse();
    args.out = user_path(&args.out);
    args.compare = args.compare.as_deref().map(user_path);
    args.from_json = args.from_json.as_deref().map(user_path);
    if let Some(g) = args.grid.iter().find(|g| !grids::GRIDS.contains(&g.to_ascii_uppercase())) {
        let have: Vec<String> = grids::GRIDS.iter().map(char::to_string).collect();
        eprintln!("bench: --grid: unknown grid `{g}` (have: {})", have.join(", "));
        std::process::exit(2);
    }
    if let Some(path) = &args.from_json {
        let result = Report::read_json(path).and_then(|r| {
            let stem = path.trim_end_matches(".json");
            r.write_csv(&format!("{stem}.csv"))?;
            r.write_svg(&format!("{stem}.svg"))?;
            if let Some(old_path) = &args.compare {
                print!("{}", r.compare(&Report::read_json(old_path)?, old_path));
            }
            print!("{}", r.table());
            Ok(())
        });
        if let Err(e) = result {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
        return;
    }
    let _ctx = match cuda_init::init_cuda(args.device) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("bench: needs an NVIDIA GPU (Hopper, sm_90) and its driver; {why}");
            std::process::exit(1);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.paged && args.layout != CacheLayout::Nhd {
        return Err("--paged builds its pools from NHD rows: leave --layout at nhd".into());
    }
    let mut attn = DecodeAttention::new().map_err(|e| e.to_string())?;
    if let Some(name) = &args.tuning {
        let names: Vec<&str> = decode_attn::tuning::TABLES.iter().map(|t| t.name).collect();
        let t = Tuning::by_name(name).ok_or(format!("--tuning: no table `{name}` (have: {})", names.join(", ")))?;
        attn.set_tuning(*t);
    }
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).map_err(|e| e.to_string())?;
    let device = decode_attn::cust::device::Device::get_device(args.device).and_then(|d| d.name()).unwrap_or_else(|_| "unknown".into());
    let info = *attn.device_info();
    eprintln!("device: {device} ({} SMs, L2 {} MiB); kernels {}", info.sm_count, info.l2_bytes >> 20, info.arch.name());
    let roofline = timing::roofline(&attn, &stream)?;
    eprintln!("roofline: device-to-device copy of 4 GiB = {roofline:.0} GB/s (read + write)");
    eprintln!("tuning: the {} table (device: {:?}, {} GB/s peak)", info.tuning.name, info.facts, info.facts.peak_gbps());
    if args.bound {
        let m = bound::Machine::measure(&attn, &stream, args.device, roofline)?;
        eprintln!("bound: empty launch {:.2} µs, tensor cores {:.0} TFLOPS (bf16 wgmma), issue {:.0} G warp instructions/s", m.empty_launch_us, m.tensor_tflops, m.issue_ginstr_per_s);
        let _ = bound::MACHINE.set(m);
    }
    let date = time::OffsetDateTime::now_utc().date().to_string();
    if args.sweep {
        return run_sweep(&mut attn, &stream, args, roofline, &device, &date);
    }

    let grids: Vec<char> = args.grid.iter().map(|g| g.to_ascii_uppercase()).collect();
    let mut specs = grids::rows(&grids, &args.format, args.quick);
    if let Some(batch) = args.batch {
        for spec in specs.iter_mut().filter(|s| s.grid != 'C') {
            spec.batch = batch;
        }
        // (Rows that became the same row, kept once where they first were.)
        let mut seen = Vec::new();
        specs.retain(|s| if seen.contains(s) { false } else { seen.push(s.clone()); true });
    }
    if let Some(d) = args.head_dim.as_deref().and_then(|d| d.parse::<u32>().ok()) {
        for spec in specs.iter_mut() {
            let group = spec.hq / spec.hkv;
            let scaled = spec.hkv as u64 * 128;
            if scaled % d as u64 == 0 && scaled / d as u64 >= 1 {
                spec.hkv = (scaled / d as u64) as u32;
                spec.hq = spec.hkv * group;
            }
            spec.head_dim = d;
        }
    }
    if let Some(text) = &args.row {
        specs.retain(|r| r.key().contains(text.as_str()));
    }
    let flush = match args.l2 {
        L2Mode::Flush => Some(DeviceBuffer::<u32>::zeroed(info.l2_bytes as usize).map_err(|e| e.to_string())?),
        L2Mode::Rotate => None,
    };
    let bar = ProgressBar::new(specs.len() as u64).with_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").map_err(|e| e.to_string())?);
    let t0 = std::time::Instant::now();
    if let (Some(first), false) = (specs.first(), args.no_warmup_row) {
        bar.set_message(format!("warm-up: {}", first.key()));
        let w = bench_row(&attn, &stream, first, args, roofline, flush.as_ref())?;
        eprintln!("  warm-up row (discarded): {} {:.1} µs", w.key, w.median_us);
    }
    let mut rows = Vec::new();
    for spec in &specs {
        bar.set_message(spec.key());
        let r = bench_row(&attn, &stream, spec, args, roofline, flush.as_ref()).unwrap_or_else(|e| RowResult { key: spec.key(), status: format!("error: {e}"), ..Default::default() });
        rows.push(r);
        bar.inc(1);
    }
    bar.finish_and_clear();
    // Wall-time speedup of each row over the bf16 row of the same shape.
    let bf16: std::collections::HashMap<String, f64> =
        rows.iter().filter(|r| r.format == "bf16" && r.median_us > 0.0).map(|r| (r.key.replace(" bf16", ""), r.median_us)).collect();
    for r in rows.iter_mut() {
        let base = r.key.trim_end_matches(&format!(" {}", r.format)).to_string();
        if let Some(&t) = bf16.get(&base) {
            r.speedup_vs_bf16 = t / r.median_us;
        }
    }
    eprintln!("{} rows in {:.0} s", rows.len(), t0.elapsed().as_secs_f64());

    let paged = if args.paged { format!("{:?} block tables, {:?} pools", args.page_table, args.page_layout).to_lowercase() } else { String::new() };
    let report = Report { device: device.clone(), date: date.clone(), l2: args.l2, iters: args.iters as usize, roofline_gbps: roofline, paged, tuning: info.tuning.name.into(), machine: bound::MACHINE.get().copied(), rows };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out))?;
    let suffix = if args.l2 == L2Mode::Flush { "-flush" } else { "" };
    let stem = format!("{}/{date}-{}{suffix}{}", args.out, device.replace(|c: char| !c.is_ascii_alphanumeric(), "-"), args.tag);
    report.write_json(&format!("{stem}.json"))?;
    report.write_csv(&format!("{stem}.csv"))?;
    report.write_svg(&format!("{stem}.svg"))?;
    eprintln!("wrote {stem}.json, .csv, .svg");
    if let Some(old_path) = &args.compare {
        print!("{}", report.compare(&Report::read_json(old_path)?, old_path));
    }
    print!("{}", report.table());
    if report.rows.iter().any(|r| r.status != "ok") {
        return Err("some rows failed (see the status column)".into());
    }
    Ok(())
}

/// `--sweep`: every probe's rows under each candidate (`sweep.rs`), then
/// the JSON and, per threshold, each candidate's geometric-mean time over
/// the base value's.
fn run_sweep(attn: &mut DecodeAttention, stream: &Stream, args: &Args, roofline: f64, device: &str, date: &str) -> Result<(), String> {
    let info = *attn.device_info();
    let t0 = std::time::Instant::now();
    // The first row a process times can read slow (docs/perf.md, "Method"):
    // the first of the swept rows that this build serves, timed once first.
    if !args.no_warmup_row {
        for row in sweep::selected(args.sweep_knobs.as_deref()).flat_map(|p| p.rows) {
            if bench_row(attn, stream, &row, args, roofline, None).is_ok_and(|r| r.status == "ok") {
                break;
            }
        }
    }
    // Paged probes time the row's 16-token pool (shuffled table, the
    // layout --page-layout names).
    let paged_args = Args { paged: true, page_table: PageTable::Shuffled, graph: false, ..args.clone() };
    let knobs = sweep::run(attn, info.tuning, args.sweep_knobs.as_deref(), |attn, spec, paged| {
        let r = bench_row(attn, stream, spec, if paged { &paged_args } else { args }, roofline, None)?;
        match (r.status == "ok", paged) {
            (false, _) => Err(r.status),
            (true, false) => Ok((r.median_us, r.block)),
            (true, true) if r.paged16_us > 0.0 => Ok((r.paged16_us, format!("{} pg16", r.block))),
            (true, true) => Err("no 16-token pool for this length".into()),
        }
    });
    let f = info.facts;
    let report = sweep::SweepReport {
        device: device.into(),
        date: date.into(),
        compute_capability: f.compute_capability,
        sm_count: f.sm_count,
        l2_bytes: f.l2_bytes,
        memory_clock_khz: f.memory_clock_khz,
        memory_bus_bits: f.memory_bus_bits,
        roofline_gbps: roofline,
        base_table: info.tuning.name.into(),
        base_values: decode_attn::Knob::ALL.iter().map(|&k| (k.name().to_string(), info.tuning.get(k))).collect(),
        iters: args.iters as usize,
        knobs,
    };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out))?;
    let path = format!("{}/{date}-{}-sweep{}.json", args.out, device.replace(|c: char| !c.is_ascii_alphanumeric(), "-"), args.tag);
    std::fs::write(&path, serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?).map_err(|e| format!("{path}: {e}"))?;
    eprintln!("sweep: {} thresholds in {:.0} s; wrote {path}", report.knobs.len(), t0.elapsed().as_secs_f64());
    println!("\n{device}: sweep around the {} table (copy roofline {roofline:.0} GB/s): geometric-mean time over the base value's, per candidate", info.tuning.name);
    for k in &report.knobs {
        let at = |c: usize| sweep::geomean(&k.median_us[c]);
        let base = k.candidates.iter().position(|&c| c == k.base).and_then(at);
        let cells: Vec<String> = (0..k.candidates.len())
            .map(|c| match (at(c), base) {
                (Some(t), Some(b)) => format!("{}: {:.3}", k.candidates[c], t / b),
                _ => format!("{}: failed", k.candidates[c]),
            })
            .collect();
        println!("{:<32} base {:<8} {}", k.knob, k.base, cells.join("  "));
    }
    Ok(())
}

fn bench_row(attn: &DecodeAttention, stream: &Stream, s: &RowSpec, args: &Args, roofline: f64, flush: Option<&DeviceBuffer<u32>>) -> Result<RowResult, String> {
    let dtype = s.format.required_dtype().unwrap_or(Dtype::Bf16);
    let v = s.variant;
    let shape = DecodeShape {
        batch: s.batch,
        num_q_heads: s.hq,
        num_kv_heads: s.hkv,
        head_dim: s.head_dim,
        q_len: s.q_len,
        max_seq_len: s.ctx,
        dtype,
        kv_format: s.format,
        kv_layout: args.layout.kv_layout(),
        // DeepSeek's scale for its latent rows (1/√192), as FlashInfer's anchor.
        scale: (s.head_dim == 576).then(|| 1.0 / 192f32.sqrt()),
        variant: VariantSpec { soft_cap: v.soft_cap, window: v.window, sinks: v.sinks, alibi: v.alibi, ..VariantSpec::STANDARD },
    };
    let seq_lens = vec![s.ctx; s.batch as usize];
    let split = args.chunk_keys.map_or(SplitPolicy::Auto, SplitPolicy::ChunkKeys);
    let opts = PlanOptions { split, family: args.family, warps_k: args.warps_k, merge: args.merge.choice(), specialize: args.specialize.choice(), head_pair: args.head_pair.head_pair(), transpose: args.transpose.transpose() };
    let plan = attn.plan(&shape, &seq_lens, &opts).map_err(|e| e.to_string())?;
    if let Some(resident) = attn.resident_clusters(&plan).map_err(|e| e.to_string())? {
        println!("  {} clusters of {} blocks, {resident} resident at once", plan.grid().0 / plan.cluster(), plan.cluster());
    }
    let mut ws = Workspace::for_plan(&plan).map_err(|e| e.to_string())?;

    // Enough copies that their total is ≥ 4× L2 (at least two), within 60 %
    // of free device memory.
    let per_set = buffers::set_bytes(&shape) + args.kv_gap.unwrap_or(0);
    let l2 = attn.device_info().l2_bytes as u64;
    let (free, _) = decode_attn::cust::memory::mem_get_info().map_err(|e| e.to_string())?;
    let wanted = match args.l2 {
        L2Mode::Rotate => (4 * l2).div_ceil(per_set).max(2),
        L2Mode::Flush => 1,
    };
    let fits = (free as u64 * 6 / 10 / per_set).max(1);
    let n_sets = wanted.min(fits);
    let mut sets: Vec<BufferSet> = (0..n_sets).map(|i| BufferSet::new(attn, &shape, i + 1, args.kv_gap, stream)).collect::<Result<_, _>>()?;
    {
        // Where each set landed (placement study: docs/perf.md, "Method").
        let at = |b: &DeviceBuffer<u8>| b.as_device_ptr().as_raw();
        let sets_at: Vec<String> = sets.iter().map(|b| format!("Q {:#x} K {:#x} V {:#x} O {:#x}", at(&b.q), at(&b.k), at(&b.v), at(&b.o))).collect();
        println!("  buffers: {}", sets_at.join("; "));
    }

    // Correctness first, on the first copy.
    {
        let (q, cache, o) = sets[0].views();
        attn.run(&plan, q, &cache, o, &mut ws, stream).map_err(|e| e.to_string())?;
    }
    stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
    let rel_err = check::sampled_error(&plan, &sets[0])?;

    let mut run = TimedRun { attn, stream, plan: &plan, ws: &mut ws, iters: args.iters as usize };
    let t = match (args.l2, flush) {
        (L2Mode::Flush, Some(f)) => run.flush(&mut sets[0], f)?,
        _ => run.rotate(&mut sets)?,
    };
    let med = median(&t.total);
    let mut paged_us = [0.0f64; 2];
    if args.paged {
        for (slot, ps) in [16u32, 64].into_iter().enumerate() {
            if s.ctx % ps == 0 {
                paged_us[slot] = paged_median(attn, stream, &plan, &opts, ps, (args.page_table, args.page_layout), &mut sets, args.iters as usize)?;
            }
        }
    }
    let graph_us = if args.graph { graph_median(attn, stream, &plan, &opts, &mut sets, args.iters as usize)? } else { 0.0 };
    let bytes = plan.bytes_moved();
    let gbps = bytes as f64 / (med * 1e-6) / 1e9;
    let (bound_us, bound_by) = bound::MACHINE.get().map_or((0.0, ""), |m| bound::bound(m, &plan));
    let cold = n_sets * per_set >= 4 * l2 || args.l2 == L2Mode::Flush;
    let status = if rel_err <= check::TOLERANCE { "ok".to_string() } else { format!("WRONG (rel err {rel_err:.2e})") };
    let mut notes = Vec::new();
    if !cold {
        notes.push(format!("only {n_sets} copies fit: L2 may be warm"));
    }
    if !t.queued_ahead {
        notes.push("queue ran dry: host latency timed".to_string());
    }
    let (gx, gy, gz) = plan.grid();
    Ok(RowResult {
        key: s.key(),
        grid: s.grid.to_string(),
        batch: s.batch,
        ctx: s.ctx,
        hq: s.hq,
        hkv: s.hkv,
        q_len: s.q_len,
        head_dim: s.head_dim,
        format: s.format.name().into(),
        splits: plan.max_splits(),
        block: format!(
            "{}{}x{}w{} {gx}x{gy}x{gz}",
            match plan.family() {
                Family::Narrow => "n",
                Family::Wgmma if plan.warp_specialized() => "gs",
                Family::Wgmma => "g",
                Family::Wide => "",
                Family::Mla => "m",
            },
            plan.warps_m(),
            plan.warps_k(),
            if plan.cluster() > 1 {
                format!("c{}", plan.cluster())
            } else if plan.heads_per_block() > 1 {
                format!("h{}", plan.heads_per_block())
            } else {
                String::new()
            }
        ),
        buffer_sets: n_sets as u32,
        median_us: med,
        min_us: t.total.iter().copied().fold(f64::INFINITY, f64::min),
        max_us: t.total.iter().copied().fold(0.0, f64::max),
        bytes,
        gbps,
        tflops: plan.flops() as f64 / (med * 1e-6) / 1e12,
        pct_roofline: 100.0 * gbps / roofline,
        speedup_vs_bf16: 0.0,
        rel_err,
        status,
        note: notes.join("; "),
        paged16_us: paged_us[0],
        paged64_us: paged_us[1],
        graph_us,
        bound_us,
        bound_by: bound_by.into(),
    })
}

/// The row as a CUDA graph of a capacity plan, one graph per buffer set:
/// its output (lengths on the device) must equal the planned one bit for
/// bit; then the replays are timed like the planned launches.
fn graph_median(attn: &DecodeAttention, stream: &Stream, planned: &decode_attn::Plan, opts: &PlanOptions, sets: &mut [BufferSet], iters: usize) -> Result<f64, String> {
    let e = |e: decode_attn::Error| e.to_string();
    let shape = planned.shape();
    let plan = attn.plan_capacity(shape, opts).map_err(e)?;
    let lens = DeviceBuffer::from_slice(planned.seq_lens()).map_err(|e| e.to_string())?;
    let step = decode_attn::StepInputs::lengths(&lens);
    if output_of(attn, stream, &plan, Some(&step), &mut sets[0])? != output_of(attn, stream, planned, None, &mut sets[0])? {
        return Err("the capacity plan's output differs from the planned one".into());
    }
    let mut ws = Workspace::for_plan(&plan).map_err(e)?;
    let mut graphs = Vec::new();
    for set in sets.iter_mut() {
        let (q, cache, o) = set.views();
        graphs.push(cuda_init::Graph::capture(stream, || attn.run_step(&plan, &step, q, &cache, o, &mut ws, stream))?);
    }
    Ok(median(&timing::time_graphs(attn, stream, &graphs, iters)?))
}

/// The output of one run of `plan` on `set` (O poisoned first), as bits;
/// a capacity plan reads `step`'s device lengths.
fn output_of(attn: &DecodeAttention, stream: &Stream, plan: &decode_attn::Plan, step: Option<&decode_attn::StepInputs>, set: &mut BufferSet) -> Result<Vec<u16>, String> {
    let mut ws = Workspace::for_plan(plan).map_err(|e| e.to_string())?;
    set.poison_output(stream)?;
    let (q, cache, o) = set.views();
    match step {
        Some(step) => attn.run_step(plan, step, q, &cache, o, &mut ws, stream),
        None => attn.run(plan, q, &cache, o, &mut ws, stream),
    }
    .map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| format!("kernel failed: {e}"))?;
    buffers::download::<u16>(set.o.as_device_ptr().as_raw(), plan.shape().o_elems_checked().unwrap_or(0) as usize)
}

/// The row's buffers read as a pool of `ps`-token pages (token-major NHD
/// rows of a sequence are consecutive pages): first with the identity table,
/// whose output must equal the contiguous plan's bit for bit (a
/// warp-specialised plan's unspecialised twin: no paged kernel is
/// specialised, and the specialised kernels' 64-key steps sum in another
/// order), then timed with the pages of the table shuffled (every page
/// still read once).
#[allow(clippy::too_many_arguments)]
fn paged_median(
    attn: &DecodeAttention,
    stream: &Stream,
    contiguous: &decode_attn::Plan,
    opts: &PlanOptions,
    ps: u32,
    (order, layout): (PageTable, PageLayout),
    sets: &mut [BufferSet],
    iters: usize,
) -> Result<f64, String> {
    let shape = contiguous.shape();
    let num_pages = shape.batch * (shape.max_seq_len / ps);
    let pshape = DecodeShape { kv_layout: KvLayout::Paged { page_size: ps, num_pages, order: PageOrder::TokenMajor, page_bytes: None }, ..shape.clone() };
    let identity: Vec<i32> = (0..num_pages as i32).collect();
    let reference = if contiguous.warp_specialized() {
        let twin = attn.plan(shape, contiguous.seq_lens(), &same_shape(contiguous, opts, SpecializeChoice::Never)).map_err(|e| e.to_string())?;
        output_of(attn, stream, &twin, None, &mut sets[0])?
    } else {
        output_of(attn, stream, contiguous, None, &mut sets[0])?
    };
    if layout == PageLayout::Packed {
        // One pool per set, built from its values and its scales in the
        // dense paged layout.
        let page_bytes = pshape.packed_page().map(|p| p.page_bytes);
        let packed = DecodeShape { kv_layout: KvLayout::Paged { page_size: ps, num_pages, order: PageOrder::TokenMajor, page_bytes }, ..shape.clone() };
        for set in sets.iter_mut() {
            let side = set.paged_side(shape, &pshape)?;
            set.pack(&pshape, &packed, side.as_ref())?;
        }
        let result = paged_runs(attn, stream, contiguous, opts, &packed, identity, &reference, ps, order, sets, iters);
        sets.iter_mut().for_each(BufferSet::unpack);
        return result;
    }
    // Quantized caches: scales in the pool's layout, swapped in for the
    // paged runs and back out after (values are pages already).
    let mut saved = Vec::with_capacity(sets.len());
    for set in sets.iter_mut() {
        if let Some(side) = set.paged_side(shape, &pshape)? {
            saved.push(set.swap_side(side));
        }
    }
    let result = paged_runs(attn, stream, contiguous, opts, &pshape, identity, &reference, ps, order, sets, iters);
    for (set, side) in sets.iter_mut().zip(saved) {
        if let Some(side) = side {
            set.swap_side(side);
        }
    }
    result
}

/// Options that plan `contiguous`'s block shape (split, warps, family,
/// merge, head pairs, the transposed MLA kernel) again, with `specialize`.
fn same_shape(contiguous: &decode_attn::Plan, opts: &PlanOptions, specialize: SpecializeChoice) -> PlanOptions {
    let split = if contiguous.chunk_keys() == u32::MAX { SplitPolicy::Never } else { SplitPolicy::ChunkKeys(contiguous.chunk_keys()) };
    let head_pair = if contiguous.heads_per_block() > 1 { HeadPairChoice::Always } else { HeadPairChoice::Never };
    let transpose = if contiguous.transposed() { TransposeChoice::Always } else { TransposeChoice::Never };
    PlanOptions { split, warps_k: Some(contiguous.warps_k()), family: FamilyChoice::Force(contiguous.family()), merge: opts.merge, specialize, head_pair, transpose }
}

#[allow(clippy::too_many_arguments)]
fn paged_runs(
    attn: &DecodeAttention,
    stream: &Stream,
    contiguous: &decode_attn::Plan,
    opts: &PlanOptions,
    pshape: &DecodeShape,
    identity: Vec<i32>,
    reference: &[u16],
    ps: u32,
    order: PageTable,
    sets: &mut [BufferSet],
    iters: usize,
) -> Result<f64, String> {
    let e = |e: decode_attn::Error| e.to_string();
    let lens = contiguous.seq_lens();
    // The check runs the contiguous plan's block shape (the paged planner
    // may pick another: a different summation order); the timed run the
    // paged planner's own plan.
    let paged = attn.plan_paged(pshape, lens, &identity, &same_shape(contiguous, opts, SpecializeChoice::Auto)).map_err(e)?;
    let out = output_of(attn, stream, &paged, None, &mut sets[0])?;
    if paged.window_align() == contiguous.window_align() {
        if out != reference {
            return Err(format!("paged (page size {ps}, identity table) output differs from the contiguous one"));
        }
    } else {
        // A window's start aligns to 16 keys over a strided cache and to a
        // stage or a page over a paged one (`decode_attn::plan::window_align`):
        // the two sum different tiles, so they agree within the error bound
        // instead of bit for bit.
        let diff = check::relative_difference(&out, reference, pshape.dtype);
        if diff > check::TOLERANCE {
            return Err(format!("paged (page size {ps}, identity table) output differs from the contiguous one by {diff:.1e} (relative L2)"));
        }
    }
    let mut rng = decode_attn::testing::Rng::new(ps as u64);
    let mut table = identity;
    if order == PageTable::Shuffled {
        for i in (1..table.len()).rev() {
            table.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    let plan = attn.plan_paged(pshape, lens, &table, opts).map_err(e)?;
    let mut ws = Workspace::for_plan(&plan).map_err(e)?;
    let mut run = TimedRun { attn, stream, plan: &plan, ws: &mut ws, iters };
    Ok(median(&run.rotate(sets)?.total))
}
