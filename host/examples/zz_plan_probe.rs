use decode_attn::plan::plan;
use decode_attn::{DecodeShape, DeviceInfo, KernelInfo, PlanOptions};
fn main() {
    let dev = DeviceInfo::H100_SXM;
    let k = KernelInfo { max_threads_per_block: 384, regs_per_thread: 168 };
    for (b, hq, hkv, q, len) in [(128u32, 32u32, 32u32, 1u32, 2048u32), (256, 8, 1, 1, 8192), (128, 8, 1, 1, 8192), (1, 32, 32, 1, 1024), (64, 32, 32, 1, 128), (1,32,8,1,131072)] {
        let s = DecodeShape::bf16(b, hq, hkv, 128, q, len);
        let p = plan(&s, &vec![len; b as usize], &dev, &k, &PlanOptions::default()).unwrap();
        let (x, y, z) = p.grid();
        println!("B={b} len={len}: grid {x}x{y}x{z} threads {} smem {} stages {} bps {} splits {} chunk {}", p.block_threads(), p.smem_bytes(), p.stages(), p.blocks_per_sm(), p.max_splits(), p.chunk_keys());
    }
}
