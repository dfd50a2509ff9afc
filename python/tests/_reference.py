"""The float64 reference: decode attention as SPEC.md defines it, written
plainly with torch (queries causal among themselves, the variant's logits
transform, mask and sinks)."""

import torch


def attention(q, k, v, lens, scale, soft_cap=None, window=None, sinks=None, alibi=None, starts=None, tree=None):
    """q: [B, q_len, Hq, D]; k, v: [B, >=max(lens), Hkv, D] (token-major);
    lens: host lengths (new tokens included); starts: host first keys
    (key ranges; read as at most `lens[b] - q_len`); tree: a draft tree,
    host lists `(masks, positions)` of `[B][q_len]` (new token i sees new
    token j when bit j of masks[b][i] is set; its position, and each new
    key's, is positions[b][.]). Returns [B, q_len, Hq, V's D] float64
    (MLA: V the first 512 values of K's 576)."""
    q, k, v = q.double(), k.double(), v.double()
    b_count, q_len, hq, d = q.shape
    group = hq // k.shape[2]
    out = torch.zeros(b_count, q_len, hq, v.shape[-1], dtype=torch.float64, device=q.device)
    for b, n in enumerate(lens):
        if n < q_len:
            continue
        kb = k[b, :n].repeat_interleave(group, dim=1)  # [n, Hq, D]
        vb = v[b, :n].repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[b], kb) * scale
        if soft_cap is not None:
            s = soft_cap * torch.tanh(s / soft_cap)
        pos = torch.arange(n - q_len, n, device=q.device)
        t = torch.arange(n, device=q.device)
        if alibi is not None:
            s = s + alibi.double()[:, None, None] * (t[None, None, :] - pos[None, :, None])
        mask = t[None, :] <= pos[:, None]
        if tree is not None:
            masks, positions = tree
            pos = torch.tensor(positions[b], device=q.device)
            t = torch.cat([t[: n - q_len], pos])
            bits = torch.tensor([[(masks[b][i] >> j) & 1 == 1 for j in range(q_len)] for i in range(q_len)], device=q.device)
            mask = torch.cat([torch.ones(q_len, n - q_len, dtype=torch.bool, device=q.device), bits], dim=1)
        if window is not None:
            mask &= t[None, :] >= pos[:, None] - window
        if starts is not None:
            mask &= t[None, :] >= min(starts[b], n - q_len)
        s = s.masked_fill(~mask[None], float("-inf"))
        m = s.amax(-1, keepdim=True)
        if sinks is not None:
            m = torch.maximum(m, sinks.double()[:, None, None])
        p = torch.exp(s - m)
        den = p.sum(-1, keepdim=True)
        if sinks is not None:
            den = den + torch.exp(sinks.double()[:, None, None] - m)
        out[b] = torch.einsum("hqk,khd->qhd", p / den, vb)
    return out


def rel_l2(x, ref) -> float:
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm()).item()
