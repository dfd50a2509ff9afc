"""DeepSeek V3 on the MLA kernels: a random-weight `DeepseekV3` model from
transformers decodes with its own (eager) attention, and again with every
layer's attention absorbed (`_deepseek.AbsorbedMla`: `kv_b_proj` folded
into the query and the output by hand, one latent row a token in a bf16 or
fp8 cache, each decode step on the kernels) fed the same tokens. Each
step's logits must agree to a relative L2 of 1e-2 for the bf16 cache (or
the floor: the model's attention in float32 against its bf16 eager, bf16
noise), and to 5e-2 for fp8: every latent and RoPE value e4m3 with a
scale per token, or DeepSeek V3.2's rows (latent values e4m3 with a
power-of-two scale per 128, RoPE bf16); an argmax may differ only where the
reference's top two logits nearly tie. The errors go to the report
(docs/python.md, "DeepSeek V3")."""

import pytest

from conftest import GPU_SKIP

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if GPU_SKIP is not None:
    pytest.skip(f"GPU test: {GPU_SKIP}", allow_module_level=True)

import _deepseek  # noqa: E402
import _models  # noqa: E402
from _reference import rel_l2  # noqa: E402

STEPS = 12
BOUND = {"bf16": 1e-2, "fp8-per-head": 5e-2, "fp8-ds-mla": 5e-2}


@pytest.fixture(scope="module")
def deepseek():
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(_deepseek.config(_models.VOCAB), dtype=torch.bfloat16)
    model.eval()
    inputs = _models.prompts(2, 24, [0, 0], "cuda")
    ref = _models.generate(model, "eager", inputs, STEPS)
    floor = _models.compare(ref, _models.generate(model, _models.register_fp32_reference(), inputs, STEPS)).worst
    return model, inputs, ref, floor


@pytest.mark.parametrize("kv_format", ["bf16", "fp8-per-head", "fp8-ds-mla"])
def test_deepseek_v3_decodes_on_the_absorbed_latent_cache(deepseek, report, kv_format):
    model, inputs, ref, floor = deepseek
    logits, tokens, served = _deepseek.decode_absorbed(model, inputs, ref[1], kv_format)
    assert served == model.config.num_hidden_layers * (STEPS - 1)
    ref_logits, ref_tokens = ref
    # Fed the reference's tokens, every step is comparable (a differing
    # argmax does not change what the next step sees).
    per_step = [rel_l2(logits[:, i], ref_logits[:, i]) for i in range(STEPS)]
    differ = [i for i in range(STEPS) if not torch.equal(tokens[:, i], ref_tokens[:, i])]
    top2 = ref_logits.topk(2, -1).values
    margins = {i: (top2[:, i, 0] - top2[:, i, 1]).min().item() for i in differ}
    worst, bound = max(per_step), max(BOUND[kv_format], floor)
    report(test="deepseek_v3", kv_format=kv_format, worst_step_rel_l2=worst, per_step=per_step, differing_steps=differ, margins=margins, floor=floor)
    print(f"DeepSeek V3, {kv_format} latent cache: worst step logits rel L2 {worst:.3e} (floor {floor:.3e}), argmax differs at steps {differ} (margins {margins})")
    assert worst <= bound, f"per-step logits rel L2 {worst:.3e} (floor {floor:.3e}, bound {bound})"
    assert all(m < 0.05 for m in margins.values()), f"tokens differ where the reference's margin is {margins}"
