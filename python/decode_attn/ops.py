"""torch custom ops: `decode_attn::run`, `decode_attn::run_step` and
`decode_attn::append_kv`, registered with `torch.library` (`mutates_args`
for what they write, `register_fake` for their (absent) outputs), so that
`torch.compile` keeps them as single nodes of its graph and
`torch.cuda.graph` captures them. Plans and shapes are passed by id
(`Plan.id`, `api.shape_id`): a custom op takes only tensors and numbers.

`DecodeAttention.run` / `run_step` / `append_kv` call these ops when
they are being compiled, and launch directly otherwise.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import api

Tensor = torch.Tensor


@torch.library.custom_op("decode_attn::run", mutates_args=("out", "workspace"), device_types="cuda")
def run(
    plan_id: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    workspace: Tensor,
    k_scales: Optional[Tensor],
    v_scales: Optional[Tensor],
    sinks: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
) -> None:
    plan = api.lookup_plan(plan_id)
    plan.attention._launch(plan, q, k, v, out, workspace, k_scales, v_scales, None, None, sinks, alibi_slopes, None)


@run.register_fake
def _run_fake(plan_id, q, k, v, out, workspace, k_scales, v_scales, sinks, alibi_slopes) -> None:
    return None


@torch.library.custom_op("decode_attn::run_step", mutates_args=("out", "workspace"), device_types="cuda")
def run_step(
    plan_id: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    workspace: Tensor,
    seq_lens: Tensor,
    block_table: Optional[Tensor],
    k_scales: Optional[Tensor],
    v_scales: Optional[Tensor],
    sinks: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
) -> None:
    plan = api.lookup_plan(plan_id)
    plan.attention._launch(plan, q, k, v, out, workspace, k_scales, v_scales, seq_lens, block_table, sinks, alibi_slopes, None)


@run_step.register_fake
def _run_step_fake(plan_id, q, k, v, out, workspace, seq_lens, block_table, k_scales, v_scales, sinks, alibi_slopes) -> None:
    return None


@torch.library.custom_op("decode_attn::append_kv", mutates_args=("data", "scales"), device_types="cuda")
def append_kv(shape_id: int, new_rows: Tensor, data: Tensor, scales: Optional[Tensor], seq_lens: Tensor, block_table: Optional[Tensor]) -> None:
    shape = api.lookup_shape(shape_id)
    attn = api.DecodeAttention(new_rows.device)
    attn._write(True, shape, new_rows, data, scales, seq_lens, block_table, None)


@append_kv.register_fake
def _append_kv_fake(shape_id, new_rows, data, scales, seq_lens, block_table) -> None:
    return None
