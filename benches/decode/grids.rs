//! The benchmark grids (docs/benchmark.md, "The grids") as rows to run.

use decode_attn::KvFormat;

/// The attention variant of a row (grid E; the others are the standard
/// softmax).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowVariant {
    pub soft_cap: Option<f32>,
    pub window: Option<u32>,
    pub sinks: bool,
    pub alibi: bool,
}

impl RowVariant {
    const STANDARD: RowVariant = RowVariant { soft_cap: None, window: None, sinks: false, alibi: false };
    fn soft_cap(cap: f32) -> Self {
        RowVariant { soft_cap: Some(cap), ..Self::STANDARD }
    }
    fn window(self, w: u32) -> Self {
        RowVariant { window: Some(w), ..self }
    }
    fn sinks(self) -> Self {
        RowVariant { sinks: true, ..self }
    }
    fn alibi(self) -> Self {
        RowVariant { alibi: true, ..self }
    }
    /// The variant's part of a row key: `softcap50`, `win4096`, `sinks`,
    /// `alibi`, joined by `+` (empty for the standard softmax).
    pub fn tag(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.soft_cap {
            parts.push(format!("softcap{c}"));
        }
        if let Some(w) = self.window {
            parts.push(format!("win{w}"));
        }
        if self.sinks {
            parts.push("sinks".into());
        }
        if self.alibi {
            parts.push("alibi".into());
        }
        parts.join("+")
    }
}

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
    pub variant: RowVariant,
}

impl RowSpec {
    /// Identifies the row across runs (`--compare` matches on it): the
    /// grid, the shape, the variant (where not standard), the format last.
    pub fn key(&self) -> String {
        let tag = self.variant.tag();
        format!(
            "{} B={} ctx={} Hq={} Hkv={} q={} D={} {}{}",
            self.grid,
            self.batch,
            self.ctx,
            self.hq,
            self.hkv,
            self.q_len,
            self.head_dim,
            if tag.is_empty() { String::new() } else { format!("{tag} ") },
            self.format.name()
        )
    }
}

pub const GRIDS: [char; 6] = ['A', 'B', 'C', 'D', 'E', 'F'];

/// Grid E (docs/benchmark.md, "The grids"): `(batch, ctx, hq, hkv, head_dim,
/// variant)` of model-like rows with their variants, the rows their costs
/// are measured against, and grids A's and C's shapes under soft-cap,
/// sinks and ALiBi (against those grids' own rows).
fn grid_e_rows() -> Vec<(u32, u32, u32, u32, u32, RowVariant)> {
    let mut out = Vec::new();
    let standard = RowVariant::STANDARD;
    // Gemma-2-9B-like: 16 / 8 heads, D 256, soft-cap 50; its local layers'
    // window of 4096 over 32K, against the capped row of ctx = W; the capped
    // row of 8K against the standard one.
    for b in [8, 64] {
        let cap = RowVariant::soft_cap(50.0);
        out.extend([(b, 8192, 16, 8, 256, cap), (b, 8192, 16, 8, 256, standard), (b, 32768, 16, 8, 256, cap.window(4096)), (b, 4096, 16, 8, 256, cap)]);
    }
    // gpt-oss-20B-like: 64 / 8 heads, D 64, sinks; its banded layers'
    // window of 128 over 8K and 64K, against the sinks row of ctx = W; its
    // full layers (sinks alone) against the standard row.
    for b in [1, 32] {
        let sinks = standard.sinks();
        for ctx in [8192, 65536] {
            out.push((b, ctx, 64, 8, 64, sinks.window(128)));
        }
        out.extend([(b, 128, 64, 8, 64, sinks), (b, 8192, 64, 8, 64, sinks), (b, 8192, 64, 8, 64, standard)]);
    }
    // Mistral-like: 32 / 8 heads, D 128, window 4096 over 32K and 128K,
    // against the standard row of ctx = W.
    for b in [1, 16] {
        for ctx in [32768, 131072] {
            out.push((b, ctx, 32, 8, 128, standard.window(4096)));
        }
        out.push((b, 4096, 32, 8, 128, standard));
    }
    // Grids A and C under each variant without a window.
    for grid in ['A', 'C'] {
        for variant in [RowVariant::soft_cap(30.0), standard.sinks(), standard.alibi()] {
            out.extend(grid_rows(grid).into_iter().map(|(b, ctx, hq, hkv, _)| (b, ctx, hq, hkv, 128, variant)));
        }
    }
    out
}

/// Grid F (docs/benchmark.md, "The grids"): `(batch, ctx, hq, q_len)` of
/// dense MLA — 16 heads (a tensor-parallel shard, bandwidth-bound) and 128
/// (a whole DeepSeek V3 layer, compute-bound), decode and multi-token
/// prediction.
fn grid_f_rows() -> Vec<(u32, u32, u32, u32)> {
    let mut out = Vec::new();
    for hq in [16, 128] {
        for batch in [1, 32, 128] {
            for ctx in [4096, 32768] {
                for q_len in [1, 2] {
                    out.push((batch, ctx, hq, q_len));
                }
            }
        }
    }
    out
}

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
            if grid == 'E' {
                // bf16, int8 and both fp8 (docs/benchmark.md); none in a quick look.
                if matches!(format, KvFormat::Bf16 | KvFormat::Int8 | KvFormat::Fp8PerHead | KvFormat::Fp8) && !quick {
                    out.extend(grid_e_rows().into_iter().map(|(batch, ctx, hq, hkv, head_dim, variant)| RowSpec { grid, batch, ctx, hq, hkv, q_len: 1, head_dim, format, variant }));
                }
                continue;
            }
            if grid == 'F' {
                // Dense MLA (docs/benchmark.md): DeepSeek's latent rows, bf16,
                // fp8 with a scale per token and DeepSeek V3.2's fp8 rows.
                if format.holds_latent() && !quick {
                    out.extend(grid_f_rows().into_iter().map(|(batch, ctx, hq, q_len)| RowSpec { grid, batch, ctx, hq, hkv: 1, q_len, head_dim: 576, format, variant: RowVariant::default() }));
                }
                continue;
            }
            // docs/benchmark.md: int4 with G = 32 on every grid; G = 64 and 128 on grid A.
            // (A latent-only format has grid F alone.)
            if (matches!(format, KvFormat::Int4G64 | KvFormat::Int4G128) && grid != 'A') || format.latent_only() {
                continue;
            }
            for (batch, ctx, hq, hkv, q_len) in grid_rows(grid) {
                if quick && !QUICK.contains(&(grid, batch, ctx)) {
                    continue;
                }
                out.push(RowSpec { grid, batch, ctx, hq, hkv, q_len, head_dim: 128, format, variant: RowVariant::default() });
            }
        }
    }
    out
}
