# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "diffusers==0.37.0",
#     "transformers==4.57.6",
#     "accelerate==1.12.0",
#     "torch==2.10.0",
#     "huggingface-hub==0.36.2",
#     "starlette==0.52.1",
#     "uvicorn==0.40.0",
#     "pillow==12.1.1",
#     "setuptools==80.9.0",
# ]
# ///
"""A Flux2KleinPipeline with random weights, built from the classes and configurations of the real one.

    uv run random_pipeline.py OUT_DIR [--size tiny|4b|9b] [--variant distilled|base]

writes a folder that `server.py --model-dir OUT_DIR` serves like a downloaded checkpoint: the same
transformer, VAE, text encoder, scheduler and tokenizer classes, nothing fetched from a hub. The
images are noise; what it is for is running the real loading, generation and compile code (tiny)
and timing the real architecture (4b, 9b: the same shapes and kernels as the published weights).

configs/ holds the configurations: the transformers are those of diffusers' FLUX.2 conversion
script for klein-4b and klein-9b, the text encoders Qwen3-4B and Qwen3-8B, the VAE
AutoencoderKLFlux2's defaults (which the conversion script loads the real VAE into) and the
scheduler the FLUX.1-dev one that the conversion script copies. configs/tiny keeps the layer
layout (28 text encoder layers for the hidden states 9, 18 and 27, a VAE that scales by 8, 128
latent channels) with widths of a few units, so that a CPU runs it in well under a second.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

CONFIG_DIR = Path(__file__).resolve().with_name("configs")
SIZES = ("tiny", "4b", "9b")
SEED = 0
# The tokenizer's merges are learnt from these lines, so it splits prompts into a few tokens
# each like a real BPE tokenizer does; its special tokens and chat template are Qwen3's.
TOKENIZER_CORPUS = (
    "a red fox in fresh snow, morning light, 85mm photograph",
    "a lighthouse on a rocky coast at dusk, photograph",
    "the same street at night, wet asphalt, neon signs",
    "make it night; put them together; a cat holding a sign that says hello world",
)
PAD_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (PAD_TOKEN, "<|im_start|>", "<|im_end|>", "<think>", "</think>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def read_config(size: str, part: str) -> dict:
    """configs/<size>/<part>.json, else the configuration that the sizes share, configs/<part>.json."""
    own = CONFIG_DIR / size / f"{part}.json"
    return json.loads((own if own.exists() else CONFIG_DIR / f"{part}.json").read_text())


def build_tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(vocab_size, 512), special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(TOKENIZER_CORPUS, trainer)
    fast = Qwen2TokenizerFast(tokenizer_object=tokenizer, pad_token=PAD_TOKEN, eos_token="<|im_end|>",
                              unk_token=None, bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_pipeline(size: str, distilled: bool, torch: Any, dtype: Any, device: str = "cpu") -> Any:
    """Every component made on `device` in `dtype` directly, so a 9B one never exists in float32."""
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; sizes are {', '.join(SIZES)}")
    torch.manual_seed(SEED)
    text_config = Qwen3Config(**read_config(size, "text_encoder"))
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            transformer = Flux2Transformer2DModel.from_config(read_config(size, "transformer"))
            vae = AutoencoderKLFlux2.from_config(read_config(size, "vae"))
            text_encoder = Qwen3ForCausalLM(text_config)
    finally:
        torch.set_default_dtype(previous_dtype)
    pipeline = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(read_config(size, "scheduler")),
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=build_tokenizer(text_config.vocab_size),
        transformer=transformer.eval(),
        is_distilled=distilled,
    )
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def save_random_pipeline(out_dir: Path, size: str, distilled: bool) -> Path:
    import torch

    build_pipeline(size, distilled, torch, torch.bfloat16).save_pretrained(out_dir)
    return out_dir


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="folder to write; server.py --model-dir serves it")
    parser.add_argument("--size", choices=SIZES, default="tiny",
                        help="tiny: seconds on a CPU; 4b, 9b: the published architectures (about 16 and 35 GB written)")
    parser.add_argument("--variant", choices=("distilled", "base"), default="distilled",
                        help="sets is_distilled, which turns classifier-free guidance off, as in the real checkpoints")
    args = parser.parse_args(argv)
    saved = save_random_pipeline(args.out_dir, args.size, args.variant == "distilled")
    print(f"wrote a random-weight {args.size} {args.variant} Flux2KleinPipeline to {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
