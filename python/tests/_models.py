"""Random-weight transformers models and the generation scenarios the
integration tests run, on the GPU with the kernels and on the CPU with the
emulated ones (`_emulated.py`): each scenario generates greedily with
`attn_implementation="decode_attn"` and with the model's reference
attention (SDPA; eager where SDPA drops a soft-cap or sinks), and compares
every step's logits and the tokens."""

from dataclasses import dataclass, field

import torch
import transformers

from _reference import rel_l2

VOCAB = 32000


def llama(layers=2, **kw):
    return transformers.LlamaConfig(
        hidden_size=1024, num_attention_heads=16, num_key_value_heads=4, head_dim=128, intermediate_size=2048,
        num_hidden_layers=layers, vocab_size=VOCAB, max_position_embeddings=8192, rope_theta=500000.0, **kw,
    )


def mistral():
    # A 16-token window, so that it binds within the prompt.
    return transformers.MistralConfig(
        hidden_size=1024, num_attention_heads=16, num_key_value_heads=4, head_dim=128, intermediate_size=2048,
        num_hidden_layers=2, vocab_size=VOCAB, sliding_window=16,
    )


def qwen3():
    return transformers.Qwen3Config(
        hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=2048,
        num_hidden_layers=2, vocab_size=VOCAB,
    )


def gemma2():
    # Soft-caps, query_pre_attn_scalar, head_dim 256; layers alternate
    # sliding (window 16) and global.
    return transformers.Gemma2Config(
        hidden_size=1024, num_attention_heads=8, num_key_value_heads=4, head_dim=256, intermediate_size=2048,
        num_hidden_layers=4, vocab_size=VOCAB, sliding_window=16, query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
    )


def gemma3():
    # Five local layers to one global (window 16), as Gemma 3.
    return transformers.Gemma3TextConfig(
        hidden_size=1024, num_attention_heads=8, num_key_value_heads=4, head_dim=128, intermediate_size=2048,
        num_hidden_layers=6, vocab_size=VOCAB, sliding_window=16, query_pre_attn_scalar=128,
    )


def gpt_oss():
    # Sinks on every layer, a 24-token window on alternate layers.
    return transformers.GptOssConfig(
        hidden_size=512, num_attention_heads=16, num_key_value_heads=4, head_dim=64, intermediate_size=512,
        num_hidden_layers=2, vocab_size=VOCAB, sliding_window=24, num_local_experts=4, num_experts_per_tok=2,
    )


CONFIGS = {"llama": llama, "mistral": mistral, "qwen3": qwen3, "gemma2": gemma2, "gemma3": gemma3, "gpt_oss": gpt_oss}
# The reference each model is compared with: SDPA, or eager where SDPA
# drops something (Gemma 2's soft-cap, gpt-oss's sinks).
REFERENCE = {"gemma2": "eager", "gpt_oss": "eager"}


def build(name, device, dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(CONFIGS[name](), dtype=dtype)
    return model.eval()


def prompts(batch, length, pads, device, seed=1):
    """Random prompts of `length` tokens, sequence b left-padded by `pads[b]`."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b, p in enumerate(pads):
        ids[b, :p] = 0
        mask[b, :p] = 0
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def fp32_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, sliding_window=None, **kwargs):
    """The attention computed in float32 from the same 16-bit inputs (mask,
    soft-cap and sinks as the model's), rounded once at the end: another
    correct implementation, whose distance from the reference is the floor
    of the comparison."""
    from decode_attn.hf import KeyRanges, _eager_inputs

    mask = attention_mask.mask() if isinstance(attention_mask, KeyRanges) else attention_mask
    key, value, mask = _eager_inputs(mask, query, key, value)
    groups = query.shape[1] // key.shape[1]
    k = key.float().repeat_interleave(groups, 1)
    v = value.float().repeat_interleave(groups, 1)
    s = query.float() @ k.transpose(-1, -2) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        s = s + mask.float()
    sinks = kwargs.get("s_aux")
    if sinks is not None:
        s = torch.cat([s, sinks.float().reshape(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)], -1)
    p = torch.softmax(s, -1)
    if sinks is not None:
        p = p[..., :-1]
    out = p @ v
    return out.transpose(1, 2).contiguous().to(query.dtype), None


def register_fp32_reference() -> str:
    """Registers `fp32_attention` (with transformers' SDPA mask) as "fp32_reference"."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    transformers.AttentionInterface.register("fp32_reference", fp32_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register("fp32_reference", sdpa_mask)
    return "fp32_reference"


@dataclass
class Result:
    worst: float
    first_diff: int | None
    margin: float | None
    tokens_equal: bool
    per_step: list = field(default_factory=list)


@torch.no_grad()
def generate(model, impl, inputs, steps, **kwargs):
    """Greedy generation with attention `impl`: (logits `[B, steps, V]`
    float32, new tokens `[B, steps]`)."""
    model.set_attn_implementation(impl)
    out = model.generate(**inputs, max_new_tokens=steps, min_new_tokens=steps, do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0, **kwargs)
    logits = torch.stack([x.float() for x in out.logits], 1)
    return logits, out.sequences[:, inputs["input_ids"].shape[1] :]


def compare(ref, ours) -> Result:
    """Worst per-step relative L2 over the steps both runs saw the same
    tokens (the diverging step's logits included), the first divergence
    and the reference's top-2 margin there."""
    (ref_logits, ref_tokens), (logits, tokens) = ref, ours
    steps = ref_tokens.shape[1]
    same = (ref_tokens == tokens).all(0)
    first_diff = int((~same).nonzero()[0]) if (~same).any() else None
    upto = steps if first_diff is None else first_diff + 1
    errs = [rel_l2(logits[:, i], ref_logits[:, i]) for i in range(upto)]
    margin = None
    if first_diff is not None:
        top2 = ref_logits[:, first_diff].topk(2, -1).values
        margin = (top2[:, 0] - top2[:, 1]).min().item()
    return Result(max(errs), first_diff, margin, first_diff is None, errs)
