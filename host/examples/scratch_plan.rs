use decode_attn::plan::{plan, plan_paged};
use decode_attn::*;
fn main() {
    let dev = DeviceInfo::H100_SXM;
    let args: Vec<u32> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    let (regs_s, regs_p) = (args[0], args[1]);
    for fmt in [KvFormat::Int4G128, KvFormat::Int4G32, KvFormat::Int8] {
        for b in [32u32, 128, 256, 512] {
            let s = DecodeShape { kv_format: fmt, ..DecodeShape::bf16(b, 8, 1, 128, 1, 8192) };
            let lens = vec![8192u32; b as usize];
            let ks = KernelInfo { max_threads_per_block: 1024, regs_per_thread: regs_s };
            let kp = KernelInfo { max_threads_per_block: 1024, regs_per_thread: regs_p };
            let p1 = plan(&s, &lens, &dev, &ks, &PlanOptions::default()).unwrap();
            let ps = 16;
            let n = b * 8192 / ps;
            let sp = DecodeShape { kv_layout: KvLayout::Paged { page_size: ps, num_pages: n, order: PageOrder::TokenMajor }, ..s.clone() };
            let t: Vec<i32> = (0..n as i32).collect();
            let p2 = plan_paged(&sp, &lens, &t, &dev, &kp, &PlanOptions::default()).unwrap();
            println!("{} B={b}: contiguous wk{} splits{} smem{} bpsm{} | paged wk{} splits{} smem{} bpsm{}", fmt.name(), p1.warps_k(), p1.max_splits(), p1.smem_bytes(), p1.blocks_per_sm(), p2.warps_k(), p2.max_splits(), p2.smem_bytes(), p2.blocks_per_sm());
        }
    }
}
