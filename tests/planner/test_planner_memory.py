"""The memory model against published figures (docs/MEMORY_MODEL.md cites each)."""
import pytest

from yeto.schemas.memory_model import Workload, fits, per_gpu_need
from yeto.services.planner.gpus import GIB

pytestmark = pytest.mark.timeout(30)


def test_zero_paper_full_mixed_precision_adam_is_16_bytes_per_parameter():
    # Rajbhandari et al. 2020 (ZeRO), sec. 3.1: 1.5B params -> 24 GB of model states; 7.5B -> 120 GB.
    assert per_gpu_need(Workload(weights_gb=3.0, tuning="full", seq_len=1, vocab=1), 1).state_gb == pytest.approx(24.0)
    assert per_gpu_need(Workload(weights_gb=15.0, tuning="full", seq_len=1, vocab=1), 1).state_gb == pytest.approx(120.0)
    # ... and sharded evenly over an FSDP island: 7.5B over 8 GPUs is 15 GB each.
    assert per_gpu_need(Workload(weights_gb=15.0, tuning="full", seq_len=1, vocab=1), 8).state_gb == pytest.approx(15.0)


def test_qlora_paper_65b_fits_one_48gb_gpu_but_bf16_lora_does_not():
    # Dettmers et al. 2023 (QLoRA): LLaMA-65B fine-tuned on a single 48 GB GPU (seq 512, vocab 32k).
    qlora = Workload(weights_gb=130, base_quantization="nf4", seq_len=512, vocab=32_000)
    assert fits(qlora, 1, 48 * GIB)[0]
    assert not fits(Workload(weights_gb=130, seq_len=512, vocab=32_000), 1, 48 * GIB)[0]


def test_qlora_paper_33b_fits_a_24gb_consumer_gpu():
    assert fits(Workload(weights_gb=66, base_quantization="nf4", seq_len=512, vocab=32_000), 1, 24 * GIB)[0]


def test_lora_7b_bf16_fits_a_24gb_gpu_and_full_tuning_does_not():
    # LoRA on a 7B bf16 base is routinely run on one 24 GB card; full tuning needs ~112 GB of states.
    assert fits(Workload(weights_gb=14, seq_len=512, vocab=32_000), 1, 24 * GIB)[0]
    assert not fits(Workload(weights_gb=14, tuning="full", seq_len=512, vocab=32_000), 1, 80 * GIB)[0]
    assert fits(Workload(weights_gb=14, tuning="full", seq_len=512, vocab=32_000), 2, 80 * GIB)[0]


def test_activations_grow_with_sequence_length_and_micro_batch():
    a = per_gpu_need(Workload(weights_gb=16), 1).activations_gb
    assert per_gpu_need(Workload(weights_gb=16, seq_len=8192), 1).activations_gb == pytest.approx(2 * a)
    assert per_gpu_need(Workload(weights_gb=16, micro_batch=4), 1).activations_gb == pytest.approx(4 * a)


def test_unsupported_combination_is_a_user_error():
    with pytest.raises(ValueError, match="--base-quantization nf4"):
        Workload(weights_gb=16, tuning="full", base_quantization="nf4")
