"""Tiny random-weight models that see and hear, made offline for tests: a text GGUF and its projector each.

No vision or audio model is on the package registries and Hugging Face cannot be reached here, so the tests of
images and audio make their own: a checkpoint with `transformers` (random weights, a few layers 64 wide), a
SentencePiece tokenizer trained on the licence texts every Debian has, and llama.cpp's own converter
(`convert_hf_to_gguf`, the `convert-hf-to-gguf` package) run twice, once for the text model and once with
`--mmproj` for the projector. What comes out is what a user downloads, only small: real llama.cpp and libmtmd
load it and answer from it.

    python -m tests.helpers.tiny_media OUT_DIR [--only gemma3,qwen2vl,qwen2audio]

Each family lands in OUT_DIR/<family>/ as <family>.gguf and mmproj-<family>.gguf. `ensure()` keeps the result in a
cache keyed by this file's source and the versions of what makes them (HEARTH_TINY_MEDIA_DIR, else
~/.cache/hearth-tiny-media), so only the first test run pays the minute.

What each pitfall below cost is in issue 53:
- transformers 5.x saves Gemma 3's vision tower as `vision_tower.*`, which the converter cannot map: the tensors
  are written as `vision_tower.vision_model.*`;
- transformers leaves Gemma 3's image projection at zero (every image would embed to nothing and give the same
  answer) and every norm at its default (the model repeats one token): every all-zero tensor and every norm is
  drawn at random again;
- a SentencePiece tokenizer takes the converter's SentencePiece path, so no BPE pre-tokenizer hash is checked;
- Qwen2-Audio's encoder needs at least 3 layers, or the converter cannot map `conv2`;
- the end-of-text tokens' output rows are made small, so that a random model writes a dozen tokens before it
  stops, and a comparison of two answers has something to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the child runs `-m tests.helpers.tiny_media` from here
FAMILIES = ("gemma3", "qwen2vl", "qwen2audio")
SEED = 53
WIDTH = 64  # the text models' hidden size; the projectors' output width must match it
TOWER = 64  # the vision and audio towers' own width
# --width makes the text models wider (heads of 32, feed-forward twice the width): for `hearth bench media`, where
# at 64 wide a token takes 0.1-0.25 ms and the ratio measures the loop around llama.cpp, not its work.


@dataclass(frozen=True)
class TinyModel:
    family: str
    model: Path  # the text GGUF
    mmproj: Path  # its projector

    @property
    def kind(self) -> str:
        return "audio" if self.family == "qwen2audio" else "image"


# --- the cache ------------------------------------------------------------------------------------------------
def cache_root() -> Path:
    # A variable of the tests, not of Hearth: the product's registry (app/core/env.py) does not list it.
    return Path(os.environ.get("HEARTH_TINY_MEDIA_DIR") or Path.home() / ".cache" / "hearth-tiny-media")


def recipe_key() -> str:
    """What the files depend on: this file's source and the versions of the makers."""
    from importlib import metadata

    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in ("torch", "transformers", "sentencepiece", "convert-hf-to-gguf", "gguf", "safetensors"):
        try:
            digest.update(f"{package}={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{package}=none".encode())
    return digest.hexdigest()[:16]


def made(folder: Path, family: str) -> TinyModel:
    return TinyModel(family, folder / family / f"{family}.gguf", folder / family / f"mmproj-{family}.gguf")


def ensure(families=FAMILIES) -> dict[str, TinyModel]:
    """The tiny models, made once per recipe and kept; made in a child process, so that torch and transformers
    (a second and hundreds of MB) never load into the caller."""
    import subprocess

    folder = cache_root() / recipe_key()
    missing = [f for f in families if not made(folder, f).mmproj.is_file()]
    if missing:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".making-", dir=folder.parent))
        try:
            done = subprocess.run([sys.executable, "-m", "tests.helpers.tiny_media", str(staging), "--only",
                                   ",".join(missing)], capture_output=True, text=True, timeout=900, cwd=REPO)
            if done.returncode != 0:
                raise RuntimeError(f"tiny_media failed:\n{done.stderr[-4000:]}")
            folder.mkdir(exist_ok=True)
            for family in missing:
                target = folder / family
                if not target.exists():  # another run made it meanwhile: theirs is the same
                    with contextlib.suppress(OSError):
                        os.replace(staging / family, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {f: made(folder, f) for f in families}


def tiny_media_models() -> dict[str, TinyModel]:
    """ensure() for a test: skips it when the makers (the `convert` extra) are not installed."""
    import importlib.util

    import pytest

    missing = [name for name in ("torch", "transformers", "sentencepiece", "conversion")
               if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the tiny media models are made with {', '.join(missing)}: install hearth[convert]")
    return ensure()


# --- making ---------------------------------------------------------------------------------------------------
def _corpus(folder: Path) -> Path:
    texts = [Path(p).read_text("utf-8", "ignore") for p in sorted(glob.glob("/usr/share/common-licenses/*"))
             if Path(p).is_file()]
    if not texts:  # not a Debian: any fixed text will do
        texts = [Path(__file__).read_text("utf-8")] * 20
    path = folder / "corpus.txt"
    path.write_text("\n".join(texts), "utf-8")
    return path


def _tokenizer(folder: Path, corpus: Path, specials: list[str], bos: bool, vocab_size: int = 512):
    """A SentencePiece BPE model trained on the corpus, its special tokens as control symbols (ids 4.. in
    order), and the tokenizer_config.json the converter reads them from."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=vocab_size, model_type="bpe",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, control_symbols=specials, byte_fallback=True, num_threads=1,
        input_sentence_size=20000, shuffle_input_sentence=False, minloglevel=2)
    (folder / "tokenizer.vocab").unlink(missing_ok=True)
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    ids = {s: sp.PieceToId(s) for s in specials}
    return sp.vocab_size(), ids


def _tokenizer_config(folder: Path, template: str, ids: dict[str, int], bos: bool, eos: str) -> None:
    config = {"bos_token": "<s>", "eos_token": eos, "pad_token": "<pad>", "unk_token": "<unk>",
              "add_bos_token": bos, "add_eos_token": False, "chat_template": template,
              "added_tokens_decoder": {str(i): {"content": s, "special": True} for s, i in ids.items()}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1), "utf-8")


def _randomized(model, seed: int, quiet: list[int], offset_norm=lambda name: False, gains=None) -> dict:
    """The model's tensors drawn again, all of them, from one seeded generator.

    transformers' own initialisation leaves Gemma 3's image projection at zero and every norm at its default,
    and its small weights make a model of this size repeat one token whatever it is shown. Here a matrix gets
    unit-gain weights (standard deviation 1/sqrt(fan-in)), a norm 1 +- 0.3 (or +- 0.3 where the model adds the 1
    itself: `offset_norm`), a bias a little noise, and the output layer enough spread that it
    makes sharp choices. The output layer is its own (untied): a tied one scores the token just read highest, and
    the model repeats it. The output rows of the `quiet` tokens (end of text, turn markers) are scaled down, so
    that an answer runs a dozen tokens before it stops."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in model.state_dict().items():
        shape = tensor.shape
        if tensor.ndim == 1 and "norm" in name:
            tensor = (0.0 if offset_norm(name) else 1.0) + 0.3 * torch.randn(shape, generator=generator)
        elif tensor.ndim <= 1:
            tensor = 0.1 * torch.randn(shape, generator=generator)
        elif "embed_tokens" in name:
            tensor = 0.1 * torch.randn(shape, generator=generator)
        elif "lm_head" in name:
            tensor = 0.3 * torch.randn(shape, generator=generator)
        else:
            fan_in = max(1, tensor[0].numel())
            tensor = torch.randn(shape, generator=generator) / fan_in ** 0.5
        for part, gain in (gains or {}).items():
            if part in name:
                tensor = tensor * gain
        state[name] = tensor.float()
    for name, tensor in state.items():
        if name.endswith("lm_head.weight"):
            tensor[quiet] *= 0.05
    return state


def _transformers4_name(name: str) -> str | None:
    """A composite model's tensor name as transformers 5 writes it, in the transformers 4 form the converter knows
    (Gemma 3's and Qwen2-Audio's: the text model under language_model.model, its head beside it, Gemma 3's vision
    tower under vision_model)."""
    name = name.removeprefix("model.")
    if name.startswith("language_model."):
        return "language_model.model." + name.removeprefix("language_model.")
    if name.startswith("vision_tower."):
        return "vision_tower.vision_model." + name.removeprefix("vision_tower.")
    if name.startswith("lm_head."):
        return "language_model." + name
    return name


def _write_checkpoint(folder: Path, architecture: str, config, state: dict, rename) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in state.items():
        name = rename(name)
        if name is not None:
            tensors[name] = tensor.contiguous()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    data = config.to_dict()
    data["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(data, indent=1, default=str), "utf-8")


def _convert(checkpoint: Path, out: Path, mmproj: bool) -> None:
    """llama.cpp's converter, in this process (the same calls convert_hf_to_gguf.main makes)."""
    import gguf
    import torch
    from conversion import ModelBase, ModelType, get_model_architecture, get_model_class

    kind = ModelType.MMPROJ if mmproj else ModelType.TEXT
    hparams = ModelBase.load_hparams(checkpoint, False)
    model_class = get_model_class(get_model_architecture(hparams, kind), mmproj=mmproj)
    with torch.inference_mode():
        model = model_class(checkpoint, gguf.LlamaFileType.MOSTLY_F16, out)
        model.write()
    if mmproj and not out.is_file():  # the converter names a projector mmproj-<name> when given a folder
        raise RuntimeError(f"the converter wrote no projector at {out}")


GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_gemma3(work: Path, corpus: Path, out: Path, width: int = WIDTH) -> None:
    """Gemma 3 with a SigLIP tower: 128-pixel images of 8x8 patches, pooled to 16 image tokens. Six text layers:
    llama.cpp gives Gemma 3 sliding-window attention on five layers of six, and a model with no full-attention
    layer aborts in llama.cpp's K-shift (GGML_ASSERT(buffer) in set_input_k_shift), so the window policy could
    not be tested on it."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    specials = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    n_vocab, ids = _tokenizer(work, corpus, specials, bos=True)
    _tokenizer_config(work, GEMMA3_TEMPLATE, ids, bos=True, eos="<end_of_turn>")
    (work / "preprocessor_config.json").write_text(json.dumps({
        "image_seq_length": 16, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
        "size": {"height": 128, "width": 128}, "image_processor_type": "Gemma3ImageProcessor"}), "utf-8")
    torch.manual_seed(SEED)
    config = Gemma3Config(
        text_config=dict(vocab_size=n_vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=6,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
                         sliding_window=512, rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, pad_token_id=0,
                         tie_word_embeddings=False),
        vision_config=dict(hidden_size=TOWER, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                           image_size=128, patch_size=16, vision_use_head=False),
        mm_tokens_per_image=16, boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"], tie_word_embeddings=False)
    model = Gemma3ForConditionalGeneration(config).eval()
    # Gemma's RMS norms add the 1 themselves (the converter writes 1 + w), SigLIP's layer norms do not.
    state = _randomized(model, SEED, [0, 1, 2, 3, *ids.values()],
                        offset_norm=lambda name: "language_model" in name or "soft_emb_norm" in name)

    _write_checkpoint(work, "Gemma3ForConditionalGeneration", config, state, _transformers4_name)
    _convert(work, out / "gemma3.gguf", mmproj=False)
    _convert(work, out / "mmproj-gemma3.gguf", mmproj=True)


def make_qwen2vl(work: Path, corpus: Path, out: Path, width: int = WIDTH) -> None:
    """Qwen2-VL: M-RoPE positions, 14-pixel patches merged 2x2. The vision tower has 3 blocks: the converter maps
    the merger's `mlp.2` through the block table, which a 2-block tower does not reach."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    specials = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                "<|video_pad|>", "<|endoftext|>"]
    n_vocab, ids = _tokenizer(work, corpus, specials, bos=False)
    _tokenizer_config(work, CHATML_TEMPLATE, ids, bos=False, eos="<|im_end|>")
    (work / "preprocessor_config.json").write_text(json.dumps({
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "min_pixels": 56 * 56, "max_pixels": 224 * 224, "patch_size": 14, "merge_size": 2,
        "temporal_patch_size": 2, "image_processor_type": "Qwen2VLImageProcessor"}), "utf-8")
    torch.manual_seed(SEED)
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=n_vocab, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                         num_attention_heads=width // 32, num_key_value_heads=1, max_position_embeddings=4096,
                         rms_norm_eps=1e-6, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                          "mrope_section": [4, 6, 6]}, tie_word_embeddings=False),
        vision_config=dict(depth=3, embed_dim=TOWER, hidden_size=width, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)
    model = Qwen2VLForConditionalGeneration(config).eval()
    state = _randomized(model, SEED, [0, 1, 2, 3, *ids.values()])

    def rename(name: str) -> str | None:
        name = name.removeprefix("model.")
        if name.startswith("language_model."):
            return "model." + name.removeprefix("language_model.")
        return name

    _write_checkpoint(work, "Qwen2VLForConditionalGeneration", config, state, rename)
    _convert(work, out / "qwen2vl.gguf", mmproj=False)
    _convert(work, out / "mmproj-qwen2vl.gguf", mmproj=True)


def make_qwen2audio(work: Path, corpus: Path, out: Path, width: int = WIDTH) -> None:
    """Qwen2-Audio: a Whisper encoder of 3 layers (fewer and the converter cannot map conv2)."""
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    specials = ["<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|audio_eos|>", "<|AUDIO|>", "<|endoftext|>"]
    n_vocab, ids = _tokenizer(work, corpus, specials, bos=False)
    _tokenizer_config(work, CHATML_TEMPLATE, ids, bos=False, eos="<|im_end|>")
    (work / "preprocessor_config.json").write_text(json.dumps({
        "feature_size": 128, "sampling_rate": 16000, "n_fft": 400, "hop_length": 160, "chunk_length": 30,
        "feature_extractor_type": "WhisperFeatureExtractor"}), "utf-8")
    torch.manual_seed(SEED)
    config = Qwen2AudioConfig(
        audio_config=dict(d_model=TOWER, encoder_layers=3, encoder_attention_heads=2, encoder_ffn_dim=128,
                          num_mel_bins=128, max_source_positions=1500),
        text_config=dict(model_type="qwen2", vocab_size=n_vocab, hidden_size=width, intermediate_size=2 * width,
                         num_hidden_layers=2, num_attention_heads=width // 32, num_key_value_heads=1,
                         max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"]),
        audio_token_index=ids["<|AUDIO|>"], tie_word_embeddings=False)
    model = Qwen2AudioForConditionalGeneration(config).eval()
    # libmtmd pads every sound to Whisper's 30 s (750 tokens), so the sound itself is a short part of what the text
    # model reads. A louder first convolution and norms and projector without biases make the part that differs
    # between two sounds large against the part they share (positions, padding): with transformers' own scales
    # three sounds gave one answer, with these three answers.
    gains = {"conv1.weight": 8, "conv2.weight": 2, "layer_norm.bias": 0, "multi_modal_projector.linear.bias": 0}
    state = _randomized(model, SEED, [0, 1, 2, 3, *ids.values()], gains=gains)

    _write_checkpoint(work, "Qwen2AudioForConditionalGeneration", config, state, _transformers4_name)
    _convert(work, out / "qwen2audio.gguf", mmproj=False)
    _convert(work, out / "mmproj-qwen2audio.gguf", mmproj=True)


MAKERS = {"gemma3": make_gemma3, "qwen2vl": make_qwen2vl, "qwen2audio": make_qwen2audio}


def make(out_dir: Path, families=FAMILIES, width: int = WIDTH) -> dict[str, TinyModel]:
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {}
    with tempfile.TemporaryDirectory(prefix="tiny-media-") as scratch:
        corpus = _corpus(Path(scratch))
        for family in families:
            work = Path(scratch) / family
            work.mkdir()
            target = out_dir / family
            target.mkdir(exist_ok=True)
            MAKERS[family](work, corpus, target, width)
            result[family] = made(out_dir, family)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.tiny_media", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--only", default=",".join(FAMILIES), help="families to make (default: all)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"the text models' width, a multiple of 32 "
                        f"(default {WIDTH}; wider ones for hearth bench media)")
    args = parser.parse_args(argv)
    families = [f for f in args.only.split(",") if f]
    unknown = [f for f in families if f not in MAKERS]
    if unknown:
        parser.error(f"unknown families: {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    started = time.perf_counter()
    if args.width < 64 or args.width % 32:
        parser.error("--width must be a multiple of 32, at least 64")
    for family, model in make(args.out_dir, families, args.width).items():
        print(f"{family}: {model.model} ({model.model.stat().st_size:,} B), {model.mmproj} "
              f"({model.mmproj.stat().st_size:,} B)")
    print(f"made in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
