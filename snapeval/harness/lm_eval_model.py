"""The ``snapeval`` lm-eval model: any supported Hugging Face model under any KV-cache method and budget (its old name
``snapstream`` is a deprecated alias).

    lm_eval --model snapeval \\
        --model_args pretrained=smollm2-135m-instruct,method=snapstream,budget=1024 \\
        --include_path tasks/ --tasks snapeval_passkey

- ``generate_until``: the whole prompt is prefilled, compressed once, then decoded through the ring. With a
  fixed-size cache (snapstream, streamingllm) this runs on the continuous-batching engine by default
  (:mod:`snapeval.engine`: batch-1 prefill, static decode slots; ``engine=false`` for lm-eval's padded batches,
  whose rows are compressed row by row); full and snapkv caches grow while decoding: on the CPU they use padded
  batches (or the engine's static rows with ``engine=true``), and where the decode step is captured (CUDA,
  ``capture`` not false) the engine's captured rows (:meth:`snapeval.cache.methods.MethodInfo.on_engine`, the one
  resolution); a kvpress press prefills through its own hooks, one prompt at a time.
- ``loglikelihood``/``loglikelihood_rolling``: the context (all but its last token) is prefilled and compressed;
  the last context token and the continuation are then run in a second forward pass *against the compressed cache*,
  so every continuation token, even a one-token answer, is scored under the budget (scoring it in the same pass as
  the context would hide every effect of the budget).
- lm-eval's response cache (``--use_cache``) is keyed on the request alone; this model moves it to a table named
  after its configuration, so responses are never reused across models, methods or budgets.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict, dataclass

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

import snapeval
from snapeval.cache import METHOD_TABLE, MethodConfig, method_info, resolve_method
from snapeval.cache.methods import settings_from_text
from snapeval.errors import SnapevalError
from snapeval.decoding import SamplingParams, pad_token_id
from snapeval.generation import generate_ids
from snapeval.tasks.followup import Followup, two_pass_response
from snapeval.models.devices import input_device, usable_device
from snapeval.models.loading import load_model
from snapeval.run_args import RunArgs
from snapeval.harness.quiet import silence_lm_eval_noise

silence_lm_eval_noise()  # lm-eval's per-cell warnings that say nothing about a snapeval run

#: model_args read as integers besides the run arguments (:class:`snapeval.run_args.RunArgs`, parsed as declared)
#: and a method's own settings (``sink``, ``recent``, ...: :func:`snapeval.cache.methods.settings_from_text`).
INT_ARGS = ("budget",)


@dataclass
class RunStats:
    """Measured over every request this model served (prefill/decode split as in ``snapeval.generate``)."""

    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    compress_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_token_steps: int = 0
    kv_cache_bytes: int = 0  # largest per-sequence KV cache seen
    specprefill_prompts: int = 0  # prompts compressed by a draft model before prefill
    specprefill_draft_seconds: float = 0.0
    specprefill_full_tokens: int = 0  # target tokens of those prompts before compression
    specprefill_kept_tokens: int = 0  # ... and after

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_token_steps / self.decode_seconds if self.decode_seconds else float("nan")

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds else float("nan")

    def since(self, earlier: "RunStats") -> "RunStats":
        """What was measured after ``earlier`` (a copy of these stats taken before); the KV size stays the maximum."""
        delta = {k: v - getattr(earlier, k) for k, v in asdict(self).items()}
        return RunStats(**{**delta, "kv_cache_bytes": self.kv_cache_bytes})

    def to_dict(self) -> dict:
        kept = self.specprefill_kept_tokens / self.specprefill_full_tokens if self.specprefill_full_tokens else None
        return {**asdict(self), "decode_tokens_per_s": self.decode_tokens_per_s,
                "prefill_tokens_per_s": self.prefill_tokens_per_s, "specprefill_kept_fraction": kept}


def derived_seed(*parts) -> int:
    """A 63-bit seed from any JSON-able parts (stable across processes and machines)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def request_seeds(requests, base_seed: int, documents: dict[str, list[int]] | None = None) -> list[int]:
    """One sampling seed per ``generate_until`` request, from its identity: (task, document, request index, which of
    its repeats). A sampled answer then does not depend on batching, chunking, sharding or the order of requests,
    and every method and budget draws the same random numbers for the same item (common random numbers: their paired
    comparison compares like with like). ``documents``: per task, the task's own index of each evaluated document (an
    item shard's documents, which lm-eval numbers from 0 again); the identity holds that index. Requests without
    lm-eval metadata fall back to their position."""
    occurrences: dict[tuple, int] = {}
    seeds = []
    for position, request in enumerate(requests):
        metadata = getattr(request, "metadata", None)
        if not metadata or metadata[1] is None:
            seeds.append(base_seed + position)
            continue
        document = metadata[1]
        if documents is not None and metadata[0] in documents:
            document = documents[metadata[0]][document]
        identity = (metadata[0], document, getattr(request, "idx", 0))
        repeat = occurrences.get(identity, 0)
        occurrences[identity] = repeat + 1
        seeds.append(derived_seed(base_seed, *identity, repeat))
    return seeds


def _with_args(request, arguments):
    """A copy of an lm-eval request with other ``(context, gen_kwargs)``."""
    import copy

    out = copy.copy(request)
    out.arguments = arguments
    return out


def cap_generation_budget(requests, cap: int, default: int) -> None:
    """Lower each request's generation budget (its task's ``max_gen_toks``, else ``default``) to at most ``cap``
    tokens, in place: ``snapeval run --max-gen-toks N`` caps a task's own budget (AIME's 32,768) as it caps the
    model's default; a smaller budget of the task is kept."""
    for request in requests:
        context, kwargs = request.args
        if int(kwargs.get("max_gen_toks", default)) > cap:
            request.arguments = (context, {**kwargs, "max_gen_toks": cap})


def _coerce(name: str, value):
    """model_args arrive as strings from the lm-eval CLI."""
    if value is None or value == "" or value == "None":
        return None
    if name in INT_ARGS:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SnapevalError(f"{name}={value!r} is invalid; allowed: an integer") from None
    return value


def check_declared_architecture(pretrained: str, config: MethodConfig) -> None:
    """A one-line error, before loading, when the model declares an architecture the caches (and kvpress's presses)
    do not support, read from ``model_type`` in a local directory's ``config.json``."""
    from pathlib import Path

    from snapeval.cache.attention import SUPPORTED_ARCHITECTURES

    declared = None  # presets are checked by load_model itself (the simulator-only one says so)
    if Path(pretrained, "config.json").is_file():
        try:
            declared = json.loads(Path(pretrained, "config.json").read_text()).get("model_type")
        except (OSError, ValueError):
            declared = None
    if declared is not None and declared not in SUPPORTED_ARCHITECTURES \
            and not METHOD_TABLE.is_reference(config.method):  # the uncompressed reference runs any architecture
        raise SnapevalError(f"model {pretrained!r} is a {declared!r} model; method={config.method!r} supports: "
                            f"{', '.join(SUPPORTED_ARCHITECTURES)}")


def press_value(value):
    """A kvpress argument from the command line: an int, a float, true/false, or the string itself."""
    if not isinstance(value, str):
        return value
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _hflm_arguments() -> set[str]:
    """What Hugging Face's lm-eval model accepts besides the arguments above (lm-eval passes some of them itself)."""
    import inspect

    return {name for name in inspect.signature(HFLM.__init__).parameters if name not in ("self", "kwargs")}


@register_model("snapeval")
class SnapStreamLM(HFLM):
    """lm-eval model wrapping :func:`snapeval.load_model` + the snapeval KV caches.

    model_args: ``pretrained`` (preset, local dir, .gguf, hub id), ``method`` (a name of the method table:
    ``snapeval methods`` lists them), ``budget`` and the settings of that method by name (``sink=4``; for
    ``method=kvpress:<Press>``, the press's own arguments as ``press_<name>``), or, from Python, ``config`` (a resolved method configuration, used unchanged; the old name
    ``cache_config`` is still accepted, deprecated); and the run arguments, declared once in
    :class:`snapeval.run_args.RunArgs` (the same names and values as ``snapeval run``'s flags and a sweep's model
    keys): ``dtype``, ``device``, ``device_map``, ``batch_size``, ``max_gen_toks``, ``max_length``, ``engine``
    (auto | true | false) with ``engine_slots``, ``decode_kernel`` (auto | sdpa | split | flex | triton), ``capture``
    (auto | true | false: CUDA graphs for the engine's decode step) and speculative prefill by a draft model
    (``specprefill_draft`` enables it; ``specprefill_keep``, ``_chunk``, ``_lookahead``, ``_pool_kernel``); or, from
    Python, ``run_args`` (a resolved :class:`~snapeval.run_args.RunArgs`, used unchanged).
    """

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "SnapStreamLM":
        """lm-eval's constructor from its command line: ``additional_config`` (its own ``--batch_size``,
        ``--device``, ...) fills in what model_args do not say (lm-eval's base class passed both, and a
        ``batch_size`` in model_args crashed with "multiple values")."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "SnapStreamLM":
        """As :meth:`create_from_arg_obj`, from ``key=value,...`` (split as lm-eval's command line splits it:
        commas inside braces, a JSON ``device_map``, are kept)."""
        from lm_eval._cli.utils import key_val_to_dict

        return cls.create_from_arg_obj(key_val_to_dict(arg_string or ""), additional_config)

    #: At most this many generated tokens per request, a task's own budget included (None: the task's budget, else
    #: ``max_gen_toks``); ``snapeval run`` sets it to ``--max-gen-toks`` (:func:`cap_generation_budget`).
    gen_toks_cap: int | None = None

    def __init__(
        self,
        pretrained: str = "smollm2-135m-instruct",
        method: str = "snapstream",
        config: MethodConfig | None = None,
        budget: int | None = None,
        run_args: RunArgs | None = None,
        loaded=None,
        shared=None,
        **kwargs,
    ):
        budget = _coerce("budget", budget)
        # The run arguments (dtype, device, batching, engine, decode kernel, capture, speculative prefill), declared
        # once in snapeval.run_args: given as model_args they are parsed as declared; from Python (a sweep), a
        # resolved RunArgs is used unchanged.
        given_run = {name: kwargs.pop(name) for name in RunArgs.names("model_args") if name in kwargs}
        if run_args is not None and (not isinstance(run_args, RunArgs) or given_run):
            raise SnapevalError("run_args must be a RunArgs given alone; allowed: run_args=RunArgs(...) or the "
                                f"run arguments as model_args ({', '.join(RunArgs.names('model_args'))})")
        # A method's settings (every name some method of the table declares), typed as the method declares them.
        given = {k: kwargs.pop(k) for k in [k for k in kwargs if k in METHOD_TABLE.user_keys()]}  # old ones too
        settings = settings_from_text(method, {k: v for k, v in given.items() if _coerce(k, v) is not None})
        press = {k[len("press_"):]: press_value(kwargs.pop(k)) for k in [k for k in kwargs if k.startswith("press_")]}
        if "cache_config" in kwargs:  # the old name of ``config`` (a documented argument until this release)
            warnings.warn("SnapStreamLM(cache_config=...) is deprecated; pass config=...", DeprecationWarning, 2)
            if config is not None:
                raise SnapevalError("give config or cache_config (its old name), not both")
            config = kwargs.pop("cache_config")
        if config is None:
            config = resolve_method(method, budget=budget, **settings, **press)
        elif not isinstance(config, MethodConfig) or budget is not None or settings:
            raise SnapevalError("config must be a method configuration given alone (no budget or settings)")
        if run_args is None:  # after the method: a bad method is named before lm-eval's own default device
            run_args = RunArgs.from_mapping(given_run, surface="model_args")
        device = usable_device(run_args.device)
        engine_on = method_info(config).on_engine(run_args, device)  # checked before the model loads
        unknown = sorted(set(kwargs) - _hflm_arguments())
        if unknown:
            allowed = ", ".join(sorted({*METHOD_TABLE.setting_names(), *RunArgs.names("model_args"), "pretrained",
                                        "method", "budget", *_hflm_arguments()}))
            raise SnapevalError(f"model_args: unknown argument {unknown[0]!r}; allowed: {allowed}")
        # A method configuration is a ``config`` everywhere; here ``self.config`` is lm-eval's (the Hugging Face
        # model's configuration), so the method's is ``self.method_config``.
        self.method_config = config
        self.run_args = run_args
        self.pretrained_name = str(pretrained)
        if loaded is None:
            check_declared_architecture(self.pretrained_name, config)  # before minutes of loading
            loaded = load_model(self.pretrained_name, dtype=None if run_args.dtype == "auto" else run_args.dtype,
                                device=device, device_map=run_args.device_map_value)
        model, tokenizer = loaded
        if run_args.device_map is not None:
            device = str(input_device(model))  # lm-eval puts its inputs there; accelerate's hooks do the rest
            engine_on = method_info(config).on_engine(run_args, device)  # captured there or not, now that it is known
        self.dtype_name = str(model.dtype).replace("torch.", "")
        kwargs.pop("tokenizer", None)
        super().__init__(
            pretrained=model, tokenizer=tokenizer, batch_size=run_args.batch_size,
            max_length=run_args.max_length, device=device, **kwargs,
        )
        self._snapeval_max_gen_toks = run_args.max_gen_toks or 256
        #: Base of the per-request sampling seeds (:func:`request_seeds`); :func:`snapeval.harness.evaluate` sets the
        #: run's seed.
        self.seed = 0
        #: Per task, the task's own index of each document lm-eval evaluates (set for an item shard, whose documents
        #: lm-eval renumbers from 0; None: lm-eval's numbering is the task's).
        self.documents: dict[str, list[int]] | None = None
        self.stats = RunStats()
        self.use_engine = engine_on
        #: the run's decode choices on the model's device (its kernel, whether the engine captures its step), resolved
        #: once and handed to every engine and decode call
        self.decoding = run_args.decode_choices(self.device)
        #: The engine's slots: as the run says; else on CUDA from the memory plan of each call's requests (None),
        #: and elsewhere max(batch size, 8).
        self.engine_slots = run_args.engine_slots
        if self.engine_slots is None and not str(self.device).startswith("cuda"):
            self.engine_slots = max(run_args.batch_size, 8)
        self._engine = None
        self.shared = shared  # a SharedBranches: answers come from one prefill shared by every configuration
        if shared is None and method_info(config).prefill_hook:  # it prefills through its own hooks (a kvpress press)
            from snapeval.branching import BranchSet, SharedBranches

            self.shared = SharedBranches(BranchSet(model, tokenizer, [config], seed=0, run_args=run_args))
        self.specprefill = None
        if run_args.specprefill_draft:
            from snapeval.specprefill import SpecPrefillConfig

            self.specprefill = SpecPrefillConfig(draft=run_args.specprefill_draft, **run_args.specprefill_options())

    # --- identity -----------------------------------------------------------------------------------------
    def describe(self) -> dict:
        """The full configuration: what makes two runs comparable."""
        import lm_eval
        import transformers

        config = self.method_config.to_dict()
        return {
            "model": self.pretrained_name,
            "method": self.method_config.method,
            "budget": config.get("budget"),
            "settings": config,
            "dtype": self.dtype_name,
            "max_length": self.max_length,
            "max_gen_toks": self.max_gen_toks,
            "specprefill": self.specprefill.to_dict() if self.specprefill is not None else None,
            "engine": {"slots": self.engine_slots or "plan"} if self.use_engine else None,
            # the decode kernel and capture when a run chose them (absent at auto: earlier descriptions, and the
            # response cache named after them, stay the same)
            **{k: v for k, v in self.run_args.changed().items() if k in ("decode_kernel", "capture")},
            "shared_prefill": self.shared.describe() if self.shared is not None else None,
            "versions": {"snapeval": snapeval.__version__, "lm_eval": lm_eval.__version__,
                         "transformers": transformers.__version__, "torch": torch.__version__},
        }

    def cache_namespace(self) -> str:
        identity = {k: v for k, v in self.describe().items() if k not in ("versions", "shared_prefill")}
        return "snapeval-" + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]

    def set_cache_hook(self, cache_hook) -> None:
        dbdict = getattr(cache_hook, "dbdict", None)
        if dbdict is not None and getattr(dbdict, "tablename", None) != self.cache_namespace():
            # CachingLM and its hook share this SqliteDict: re-point both at this configuration's own table.
            dbdict.tablename = self.cache_namespace()
            dbdict.conn.execute(f'CREATE TABLE IF NOT EXISTS "{dbdict.tablename}" (key TEXT PRIMARY KEY, value BLOB)')
            dbdict.conn.commit()
        super().set_cache_hook(cache_hook)

    def get_model_info(self) -> dict:
        return {**super().get_model_info(), "snapeval": self.describe()}

    @property
    def max_gen_toks(self) -> int:
        return self._snapeval_max_gen_toks

    # --- generation -----------------------------------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False):
        """With speculative prefill, each prompt is first compressed by the draft model (question and chat
        scaffolding kept whole), then generated exactly like an uncompressed one. A request whose generation_kwargs
        hold a ``followup`` runs two passes (:mod:`snapeval.tasks.followup`)."""
        if self.gen_toks_cap is not None:
            cap_generation_budget(requests, self.gen_toks_cap, self.max_gen_toks)
        contexts = [request.args[0] for request in requests]  # as lm-eval built them (a second pass is wrapped alike)
        if self.specprefill is not None:
            self._compress_by_draft(requests)
        followups = [Followup.parse(r.args[1]["followup"]) if "followup" in r.args[1] else None for r in requests]
        seeds = request_seeds(requests, self.seed, self.documents)
        single = [i for i, f in enumerate(followups) if f is None]
        double = [i for i, f in enumerate(followups) if f is not None]
        out: list[str | None] = [None] * len(requests)
        if single:
            texts = self._generate_texts([requests[i] for i in single], [seeds[i] for i in single], disable_tqdm)
            for i, text in zip(single, texts):
                out[i] = text
        if double:
            texts = self._generate_two_pass([requests[i] for i in double], [followups[i] for i in double],
                                            [contexts[i] for i in double], [seeds[i] for i in double])
            for i, text in zip(double, texts):
                out[i] = text
                self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return out

    def _compress_by_draft(self, requests) -> None:
        from snapeval.specprefill import compress_prompt

        for request in requests:
            context, gen_kwargs = request.args
            compressed = compress_prompt(context, self.tokenizer, self.specprefill)
            s = self.stats
            s.specprefill_prompts += 1
            s.specprefill_draft_seconds += compressed.draft_seconds
            s.specprefill_full_tokens += compressed.full_target_tokens
            s.specprefill_kept_tokens += len(compressed.target_ids)
            request.arguments = (compressed.text, gen_kwargs)

    def _generate_texts(self, requests, seeds: list[int], disable_tqdm: bool = False) -> list[str]:
        """One pass over ``requests``: the shared branches, the engine or lm-eval's padded batches."""
        if self.shared is not None:
            prompts, params = self._engine_inputs(requests, seeds)
            return self._finish_generations(requests, self.shared.generate(self.method_config, prompts, params))
        if self.use_engine:
            return self._generate_with_engine(requests, seeds)
        return self._generate_padded(requests, seeds)

    def _check_fits(self, request, prompt_tokens: int, max_new: int) -> None:
        """Nothing truncates a prompt here (a task's own rule does, e.g. LongBench-v2's middle cut): a request whose
        prompt and generation budget exceed the model's context is a one-line error naming the item and the lengths."""
        if prompt_tokens + max_new <= self.max_length:
            return
        metadata = getattr(request, "metadata", None) or (None, None, None)
        doc = getattr(request, "doc", None) or {}
        item = next((doc[k] for k in ("_id", "ID", "question_id", "id") if k in doc), metadata[1])
        raise SnapevalError(
            f"task {metadata[0]!r} item {item!r}: the prompt (chat template included) is {prompt_tokens} tokens and "
            f"max_gen_toks={max_new}, {prompt_tokens + max_new} in all > the model's max_length={self.max_length}; "
            "nothing cuts a prompt but the task's own rule: lower the task's prompt limit (LongBench-v2: "
            "max_input_tokens) or the generation budget, or raise max_length")

    def _generate_two_pass(self, requests, followups: list[Followup], contexts: list[str], seeds: list[int]) -> list[str]:
        """Both passes of two-pass requests; each answer is :func:`~snapeval.tasks.followup.two_pass_response`.
        In a shared-prefill group every configuration's second prompt (its own reasoning) is computed on top of one
        prefill per item of the prompts' common prefix (:meth:`~snapeval.branching.SharedBranches.generate_two_pass`)."""
        firsts = [_with_args(r, (r.args[0], {k: v for k, v in r.args[1].items() if k != "followup"})) for r in requests]
        second_seeds = [derived_seed(seed, "second pass") for seed in seeds]

        def second_request(i: int, first_text: str):
            context = followups[i].second_context(requests[i].doc, contexts[i], first_text)
            return _with_args(requests[i], (context, {"until": [], **followups[i].gen_kwargs}))

        if self.shared is not None:
            prompts, params = self._engine_inputs(firsts, seeds)

            def second(i, first_done):
                ids, params2 = self._engine_inputs([second_request(i, first_done.text)], [second_seeds[i]])
                return ids[0], params2[0]

            key = tuple(f.identity() for f in followups)
            pairs = self.shared.generate_two_pass(self.method_config, prompts, params, second, key)
            for first_done, second_done in pairs:
                self._record_completion(first_done)
                self._record_completion(second_done)
            first_texts, second_texts = [a.text for a, _ in pairs], [b.text for _, b in pairs]
        else:
            first_texts = self._generate_texts(firsts, seeds)
            second_texts = self._generate_texts([second_request(i, t) for i, t in enumerate(first_texts)], second_seeds)
        return [two_pass_response(a, b, self._count_tokens(a), self._count_tokens(b))
                for a, b in zip(first_texts, second_texts)]

    def _count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def _engine_inputs(self, requests, seeds: list[int]):
        """Token ids and :class:`SamplingParams` of ``generate_until`` requests, as the engine and branches take them
        (``seeds``: one per request, see :func:`request_seeds`)."""
        from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        prompts, params = [], []
        for request, seed in zip(requests, seeds):
            context, gen_kwargs = request.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_new = kwargs.pop("max_gen_toks")
            ids = self.tok_encode(context)
            self._check_fits(request, len(ids), max_new)
            params.append(self._sampling_params(kwargs, until, max_new, seed, eos))
            prompts.append(ids)
        return prompts, params

    @staticmethod
    def _sampling_params(kwargs: dict, until, max_new: int, seed: int | None, eos: str):
        """lm-eval's normalized gen_kwargs (``do_sample``, ``temperature``, ``top_p``, ``top_k``) and stop strings as
        one request's :class:`~snapeval.decoding.SamplingParams` (the eos string is a stop token already)."""
        temperature = float(kwargs.get("temperature", 0.0) or 0.0)
        sample = bool(kwargs.get("do_sample", temperature > 0))
        return SamplingParams(
            max_new_tokens=max_new, stop=tuple(u for u in until if u != eos), do_sample=sample,
            temperature=temperature if sample else 1.0, top_p=float(kwargs.get("top_p", 1.0) or 1.0),
            top_k=int(kwargs.get("top_k", 0) or 0), seed=seed)

    def _generate_with_engine(self, requests, seeds: list[int]):
        """All requests through one continuous-batching engine (static slots, per-request stops and sampling)."""
        from snapeval.engine import Engine

        prompts, params = self._engine_inputs(requests, seeds)
        slots = self.engine_slots if self.engine_slots is not None else self._planned_slots(prompts, params)
        if self._engine is None or self._engine.num_slots != slots:
            self._engine = Engine(self.model, self.tokenizer, self.method_config, num_slots=slots,
                                  decoding=self.decoding)
        return self._finish_generations(requests, self._engine.generate(prompts, params))

    def _planned_slots(self, prompts, params) -> int:
        """The engine's slot count from the memory plan (:func:`snapeval.memory_plan.engine_slots`): as many rows
        as the device holds at this method's per-row bytes for these requests (hundreds at a small budget: AIME's
        64 samples of up to 32k new tokens), at most one per request. The previous engine's rows are freed first."""
        import gc

        from snapeval.memory_plan import ModelShape, bytes_in_use, device_budget, engine_slots

        self._engine = None
        gc.collect()
        if str(self.device).startswith("cuda"):
            torch.cuda.empty_cache()
        return engine_slots(ModelShape.of(self.model), self.method_config, max(len(p) for p in prompts),
                            max(s.max_new_tokens for s in params), requests=len(prompts),
                            budget=device_budget(self.device), in_use=bytes_in_use(self.device))

    def _finish_generations(self, requests, completions):
        out = []
        for request, done in zip(requests, completions):
            out.append(done.text)
            self.cache_hook.add_partial("generate_until", request.args, done.text)
            self._record_completion(done)
        return out

    def _record_completion(self, done) -> None:
        decode_s = max(done.finished_at - done.time_to_first_token, 0.0)
        self._record(1, done.prompt_tokens, len(done.token_ids), done.prefill_seconds, 0.0, decode_s,
                     max(len(done.token_ids) - 1, 0), done.kv_bytes)

    def _generate_padded(self, requests, seeds: list[int]) -> list[str]:
        """Requests in left-padded batches of ``batch_size``, in their order, through snapeval's one decode loop
        (:func:`snapeval.generation.generate_ids`: ``model.generate``'s greedy tokens): each sampled row draws from
        its request's own seeded stream, as on the engine and the shared branches, so a sampled answer is the same
        on every path and every configuration of an item draws the same numbers (common random numbers)."""
        prompts, params = self._engine_inputs(requests, seeds)  # each prompt checked to fit: nothing cut it
        pad = pad_token_id(self.tokenizer)
        size = max(1, int(self.run_args.batch_size))
        texts: list[str] = []
        for start in range(0, len(prompts), size):
            rows, row_params = prompts[start:start + size], params[start:start + size]
            width = max(map(len, rows))
            context = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=input_device(self.model))
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=context.device)
            run = generate_ids(self.model, self.tokenizer, context, mask, self.method_config, row_params,
                               decoding=self.decoding)
            done = [request.completion(self.tokenizer, 0.0).text for request in run.requests]
            for request, text in zip(requests[start:start + size], done):
                self.cache_hook.add_partial("generate_until", request.args, text)
            texts += done
            self._record(len(rows), int(mask.sum()), sum(map(len, run.token_ids)), run.prefill_seconds,
                         run.cache.compress_seconds, run.decode_seconds, run.decode_steps * len(rows),
                         run.cache.kv_bytes_per_row())
        return texts

    def _record(self, requests, prompt_tokens, generated, prefill_s, compress_s, decode_s, decode_steps, kv_bytes):
        s = self.stats
        s.requests += requests
        s.prompt_tokens += prompt_tokens
        s.generated_tokens += generated
        s.prefill_seconds += prefill_s
        s.compress_seconds += compress_s
        s.decode_seconds += decode_s
        s.decode_token_steps += decode_steps
        s.kv_cache_bytes = max(s.kv_cache_bytes, kv_bytes)

    # --- scoring --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        """``requests``: ``((context, continuation) | None, context_ids, continuation_ids)``.

        Each unique context is prefilled once, all but its last token, and compressed; the last context token and
        the continuation then run against a copy of that compressed cache, so every continuation token, even a
        one-token answer, is scored under the budget (:func:`snapeval.branching.score_contexts`).
        Returns ``(sum of continuation log-probs, whether greedy decoding reproduces the continuation)``.
        """
        from snapeval.branching import BranchSet

        contexts, continuations = [], []
        for _, context_ids, continuation_ids in requests:
            continuation_ids = list(continuation_ids)[-(self.max_length - 1) :]
            context_ids = list(context_ids) or [self.prefix_token_id]
            if len(context_ids) < 2:
                context_ids = [self.prefix_token_id] + context_ids
            room = max(self.max_length - len(continuation_ids), 2)
            contexts.append(context_ids[-room:])
            continuations.append(continuation_ids)
        if self.shared is not None:
            results, stats = self.shared.score(self.method_config, contexts, continuations)
        else:
            branches = BranchSet(self.model, self.tokenizer, [self.method_config])
            results, stats = branches.score(contexts, continuations)[0], branches.stats
        self._record(len(requests), stats.prefill_tokens + len(requests), 0, stats.prefill_seconds, 0.0, 0.0, 0,
                     stats.kv_bytes_per_row.get(self.method_config.label, 0))
        for request, answer in zip(requests, results):
            if request[0] is not None:
                self.cache_hook.add_partial("loglikelihood", request[0], answer)
        return results


@register_model("snapstream")
class DeprecatedSnapStreamLM(SnapStreamLM):
    """``lm_eval --model snapstream``: the old name of the ``snapeval`` model (``snapstream`` is also a method name);
    the same model, with a ``DeprecationWarning``."""

    def __init__(self, *args, **kwargs):
        warnings.warn("lm-eval model 'snapstream' is deprecated; use --model snapeval", DeprecationWarning, 2)
        super().__init__(*args, **kwargs)
