"""The runtimes of a sentence-transformers model (`embedder.backend`): numpy (`numpy`, the
default: no PyTorch, see `ragexp.components.embedders.numpy_bert`), ONNX Runtime in fp32 (`onnx`) or
with int8 weights (`onnx-int8`, dynamic quantisation), and OpenVINO (`openvino`). PyTorch (`torch`)
runs through sentence-transformers itself (`ragexp.components.embedders.local_model`).

For the ONNX runtimes the model's transformer is exported to ONNX from its local folder with torch's
exporter (no model hub, no optimum: optimum-onnx requires transformers < 4.58, ragexp runs 5.x), once,
into a models folder (the run's cache folder, `<cache.dir>/models/`); the file is plain data (an ONNX
protobuf). Every runtime here shares the `Encoder`: tokenisation (the model's `tokenizer.json`,
truncated at its `max_seq_length`) and pooling as the model's Pooling module says, so the vectors
match PyTorch's (fp32: cosine ~1.0). ONNX Runtime and OpenVINO come with the optional extra
`pip install 'ragexp[backends]'`; the export needs PyTorch too (`pip install 'ragexp[torch]'`)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Callable, Literal

import numpy as np

from ragexp.base.progress import loading
from ragexp.base.digests import file_digest
from ragexp.errors import RagexpError
from ragexp.base.threads import passive_waiting

log = logging.getLogger(__name__)

Backend = Literal["numpy", "torch", "onnx", "onnx-int8", "openvino"]
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_LOCK = threading.Lock()


def models_dir(cache) -> Path:
    """Where exported or distilled models are kept: `<cache.dir>/models/` when the run's embedding
    cache has an on-disk store, else a temporary folder of this process."""
    store = getattr(cache, "store", None)
    if store is not None:
        return Path(store.file).parent / "models"
    return Path(_process_dir()) / "models"


def model_folder(cache, kind: str, model_path: str, *settings) -> Path:
    """The folder of one derived model (`kind`: onnx, static) of the model at `model_path`, named by
    a hash of its path, its config and weight files' contents, and `settings`: another model, another
    version of it (new weights in the same folder included) or other settings get another folder."""
    files = sorted(Path(model_path).glob("*.json")) + sorted(Path(model_path).glob("*.safetensors"))
    identity = [model_path, *settings, *((f.name, file_digest(f)) for f in files)]
    digest = hashlib.sha256(json.dumps(identity, default=str).encode()).hexdigest()[:16]
    return models_dir(cache) / f"{kind}-{digest}"


@lru_cache(maxsize=1)
def _process_dir() -> str:
    """A temporary folder for this process's models (the cache is off), removed when it exits."""
    import atexit
    import shutil

    folder = tempfile.mkdtemp(prefix="ragexp-models-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def export_onnx(model_path: str, target: Path) -> None:
    """The transformer of the sentence-transformers model at `model_path` as ONNX (fp32) at `target`
    (written to a temporary file, then renamed: several processes may export at once)."""
    passive_waiting()  # before torch starts its threads
    import torch
    from transformers import AutoModel

    base = AutoModel.from_pretrained(model_path, local_files_only=True).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base = base

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.base(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    example = tuple(torch.ones(2, 8, dtype=torch.long) for _ in INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "last_hidden_state")}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent branches: checked by the tests
        torch.onnx.export(LastHiddenState(), example, str(tmp), input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    os.replace(tmp, target)


def quantize_int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
    quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8)
    os.replace(tmp, target)


def onnx_file(model_path: str, backend: Backend, folder: Path) -> Path:
    """The model's ONNX file for `backend` in `folder`, exported (and quantised) on first use."""
    fp32, int8 = folder / "model.onnx", folder / "model-int8.onnx"
    with _LOCK:
        if not fp32.exists():
            log.info("exporting %s to ONNX in %s (once)", model_path, folder)
            export_onnx(model_path, fp32)
        if backend == "onnx-int8" and not int8.exists():
            quantize_int8(fp32, int8)
    return int8 if backend == "onnx-int8" else fp32


class Encoder:
    """Texts -> pooled token vectors: the model's tokenizer (truncated at its `max_seq_length`,
    padded to a batch's longest text), its transformer's last hidden state computed by `backend`
    (numpy, or an ONNX Runtime or OpenVINO session of the file exported into `folder`), and the
    pooling its sentence-transformers Pooling module says (mean, CLS token or max)."""

    def __init__(self, model_path: str, backend: Backend, folder: Path):
        from tokenizers import Tokenizer

        try:
            settings = json.loads((Path(model_path) / "sentence_bert_config.json").read_text())
            self.tokenizer = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
            self.pooling = pooling_mode(Path(model_path))
        except (OSError, ValueError, Exception) as err:  # noqa: BLE001 - a folder without what the backends need
            raise RagexpError(f"embedder.backend={backend}: {model_path} has no readable tokenizer.json, "
                              f"sentence_bert_config.json and pooling settings ({err}); use embedder.backend=torch "
                              "(the torch extra: pip install 'ragexp[torch]')") from None
        self.tokenizer.enable_truncation(int(settings.get("max_seq_length") or 512))
        self.tokenizer.enable_padding()
        self.run: Callable[[dict[str, np.ndarray]], np.ndarray]  # the feed -> the last hidden state
        if backend == "numpy":
            from ragexp.components.embedders.numpy_bert import NumpyBert

            self.run = NumpyBert(model_path)
        else:
            self.run = self.session(onnx_file(model_path, backend, folder), backend)

    @staticmethod
    def session(file: Path, backend: Backend):
        try:
            if backend == "openvino":
                import openvino as ov

                compiled = ov.Core().compile_model(str(file), "CPU")
                return lambda feed: compiled(feed)[0]
            import onnxruntime as ort
        except ImportError as err:
            raise RagexpError(f"embedder.backend={backend} needs the optional extra: pip install 'ragexp[backends]' "
                              f"({err})") from None
        session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        return lambda feed: session.run(None, feed)[0]

    def encode(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        feed = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64)}
        hidden = np.asarray(self.run(feed), dtype=np.float32)
        mask = feed["attention_mask"][:, :, None].astype(np.float32)
        if self.pooling == "cls":
            return hidden[:, 0]
        if self.pooling == "max":
            return np.where(mask > 0, hidden, np.finfo(np.float32).min).max(axis=1)
        return (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)


POOLING = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens"}


def pooling_mode(model_path: Path) -> str:
    """mean, cls or max: what the model's Pooling module (modules.json, e.g. 1_Pooling/config.json)
    says; mean for a folder without one (a plain transformer, as sentence-transformers loads it)."""
    modules = json.loads((model_path / "modules.json").read_text()) if (model_path / "modules.json").is_file() else []
    folder = next((m.get("path", "") for m in modules if str(m.get("type", "")).endswith(".Pooling")), None)
    if folder is None:
        return "mean"
    config = json.loads((model_path / folder / "config.json").read_text())
    chosen = [flag for flag, on in config.items() if flag.startswith("pooling_mode_") and on is True]
    modes = [mode for mode, flag in POOLING.items() if chosen == [flag]]
    if not modes:
        raise ValueError(f"{model_path / folder}/config.json pools by {chosen or 'nothing'} (these backends pool by "
                         f"one of {', '.join(POOLING.values())})")
    return modes[0]


@lru_cache(maxsize=8)
def load_encoder(model_path: str, backend: Backend, folder: str) -> Encoder:
    with loading(f"the embedding model {Path(model_path).parent.name}/{Path(model_path).name} ({backend})"):
        return Encoder(model_path, backend, Path(folder))
