"""`envtrain merge` against PEFT's own `merge_and_unload` (issue 37).

A small Qwen3 base is made and saved by transformers (random weights, float32 and bfloat16); PEFT wraps it with a
LoRA whose B is not zero (init_lora_weights=False: both factors keep nn.Linear's random init) and saves the adapter
with `save_pretrained`. The real `envtrain merge` CLI folds that adapter into the base directory; PEFT's
`merge_and_unload` of the same adapter is the judge. Every tensor must agree within the rounding of the base's dtype,
the merged directory must be stored in the base's dtype, and transformers must load it and compute what the
unmerged PEFT model computes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_envtrain

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from peft_judge import VOCAB, make_adapter, make_base  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def stored(dir: Path) -> dict[str, torch.Tensor]:
    out = {}
    with safe_open(dir / "model.safetensors", "pt") as f:
        for key in f.keys():
            out[key] = f.get_tensor(key)
    return out


CASES = [
    ("f32-untied", torch.float32, False, dict(r=4, lora_alpha=16, target_modules=ALL_TARGETS)),
    ("bf16-tied-rslora", torch.bfloat16, True, dict(r=8, lora_alpha=8, use_rslora=True,
                                                    target_modules=["q_proj", "v_proj", "down_proj"])),
]


@pytest.mark.parametrize("name,dtype,tie,lora", CASES, ids=[c[0] for c in CASES])
def test_envtrain_merge_equals_peft_merge_and_unload(tmp_path: Path, name, dtype, tie, lora) -> None:
    base, adapter, merged = tmp_path / "base", tmp_path / "adapter", tmp_path / "merged"
    make_base(str(base), dtype, tie, seed=len(name))
    make_adapter(str(base), str(adapter), **lora)
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved["init_lora_weights"] is False and saved["peft_type"] == "LORA"

    out = run_envtrain("merge", "--base", str(base), "--adapter", str(adapter), "--out", str(merged))
    assert "projections merged" in out

    # PEFT's merge of the same adapter onto the same base, in the base's dtype.
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=dtype), adapter)
    lora_b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.abs().max() > 0 for p in lora_b), "the adapter must change the model"
    want = {k: v for k, v in peft_model.merge_and_unload().state_dict().items()}

    got = stored(merged)
    base_weights = stored(base)
    assert set(got) == set(base_weights)
    changed = 0
    for key, tensor in got.items():
        assert tensor.dtype == dtype, f"{key} stored as {tensor.dtype}, the base is {dtype}"
        reference = want[key]
        assert reference.dtype == dtype
        if not torch.equal(tensor, base_weights[key]):
            changed += 1
        if dtype == torch.float32:
            # Both sum W + s·B·A; envtrain in f64 rounded once, PEFT in f32: a few f32 ulps apart at most.
            torch.testing.assert_close(tensor, reference, rtol=1e-6, atol=1e-7, msg=key)
        else:
            # One bf16 rounding each, of sums that differ only by f32 rounding: equal, or one bf16 ulp apart.
            diff = (tensor.float() - reference.float()).abs()
            ulp = reference.float().abs().clamp_min(2.0**-126) * 2.0**-7
            assert bool((diff <= ulp).all()), f"{key}: {int((diff > ulp).sum())} values beyond one bf16 ulp"
            assert float((diff > 0).float().mean()) < 0.01, f"{key}: too many values differ"
    per_layer = len(lora["target_modules"])
    assert changed == 2 * per_layer

    # The merged directory is a plain checkpoint: transformers loads it and computes what PEFT's model computes.
    assert sorted(os.listdir(merged)) == sorted(os.listdir(base))
    plain = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()
    reference_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
    ).eval()
    ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = torch.log_softmax(plain(ids).logits, -1)
        b = torch.log_softmax(reference_model(ids).logits, -1)
    # bf16 storage of the merged weights is the only difference from the f32 unmerged forward.
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    assert float((a - b).abs().max()) < tolerance
