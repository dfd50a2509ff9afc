//! The benchmark grids (docs/benchmark.md, "The grids") as rows to run.

use decode_attn::KvFormat;

/// One benchmark row: a shape with every sequence at `ctx` tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct RowSpec {
    pub grid: char,
    pub batch: u32,
    pub ctx: u32,
    pub hq: u32,
    pub hkv: u32,
    pub q_len: u32,
    pub head_dim: u32,
    pub format: KvFormat,
}

impl RowSpec {
    /// Identifies the row across runs (`--compare` matches on it).
    pub fn key(&self) -> String {
        format!(
            "{} B={} ctx={} Hq={} Hkv={} q={} D={} {}",
            self.grid,
            self.batch,
            self.ctx,
            self.hq,
            self.hkv,
            self.q_len,
            self.head_dim,
            self.format.name()
        )
    }
}

pub const GRIDS: [char; 4] = ['A', 'B', 'C', 'D'];

/// `(batch, ctx, hq, hkv, q_len)` of each row of a grid (docs/benchmark.md).
fn grid_rows(grid: char) -> Vec<(u32, u32, u32, u32, u32)> {
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

/// One row per grid, for a fast look (`--quick`).
const QUICK: [(char, u32, u32); 4] = [('A', 128, 8192), ('B', 64, 4096), ('C', 1, 32768), ('D', 8, 1024)];

pub fn rows(grids: &[char], formats: &[KvFormat], quick: bool) -> Vec<RowSpec> {
    let mut out = Vec::new();
    for &format in formats {
        for &grid in grids {
            // docs/benchmark.md: int4 with G = 32 on every grid; G = 64 and 128 on grid A.
            if matches!(format, KvFormat::Int4G64 | KvFormat::Int4G128) && grid != 'A' {
                continue;
            }
            for (batch, ctx, hq, hkv, q_len) in grid_rows(grid) {
                if quick && !QUICK.contains(&(grid, batch, ctx)) {
                    continue;
                }
                out.push(RowSpec { grid, batch, ctx, hq, hkv, q_len, head_dim: 128, format });
            }
        }
    }
    out
}
