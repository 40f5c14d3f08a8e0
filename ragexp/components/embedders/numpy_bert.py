"""`embedder.backend=numpy`: a BERT encoder's forward pass in numpy, so MiniLM runs without PyTorch.

The weights are read from the model folder's `model.safetensors` (with the `safetensors` package,
no torch; float16 files are computed in float32) and the pass is BERT's as transformers computes it
for a `BertModel` with absolute positions: embeddings (word + position + token type, LayerNorm),
then per layer self-attention (padded tokens masked out), a residual LayerNorm, the GELU (erf) feed-
forward and a residual LayerNorm. The output is the last hidden state, pooled by
`ragexp.components.embedders.backends.Encoder` as the sentence-transformers model's pooling says.
Batches of texts of different lengths are padded: a padded token is never attended to, so a text's
vector does not depend on its batch (the tests compare it with sentence-transformers' vectors)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from ragexp.errors import RagexpError


@lru_cache(maxsize=1)
def blas_threads():
    """The BLAS libraries numpy loaded (inspected once: threadpoolctl reads the process's libraries)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def single_blas_thread():
    return blas_threads().limit(limits=1, user_api="blas")


class NumpyBert:
    """The last hidden state of the BERT model in `folder` (config.json, model.safetensors)."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        try:
            config = json.loads((folder / "config.json").read_text())
            from safetensors.numpy import load_file

            tensors = load_file(str(folder / "model.safetensors"))
        except (OSError, ValueError, Exception) as err:  # noqa: BLE001 - a folder without what this backend reads
            raise RagexpError(f"embedder.backend=numpy: {folder} has no readable config.json and model.safetensors "
                              f"({type(err).__name__}: {err}); use embedder.backend=torch "
                              "(pip install 'ragexp[torch]')") from None
        if config.get("model_type") != "bert" or config.get("position_embedding_type", "absolute") != "absolute" \
                or config.get("hidden_act", "gelu") != "gelu":
            raise RagexpError(f"embedder.backend=numpy runs BERT models (absolute positions, GELU); {folder} is a "
                              f"{config.get('model_type')!r} model: use embedder.backend=torch (pip install 'ragexp[torch]')")
        prefix = "bert." if any(name.startswith("bert.") for name in tensors) else ""

        def weight(name: str) -> np.ndarray:
            return np.ascontiguousarray(tensors[prefix + name], dtype=np.float32)

        def linear(name: str) -> tuple[np.ndarray, np.ndarray]:  # torch's (out, in) weight, kept as (in, out)
            return np.ascontiguousarray(weight(f"{name}.weight").T), weight(f"{name}.bias")

        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.word = weight("embeddings.word_embeddings.weight")
        self.position = weight("embeddings.position_embeddings.weight")
        self.token_type = weight("embeddings.token_type_embeddings.weight")
        self.norm = (weight("embeddings.LayerNorm.weight"), weight("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            layer = f"encoder.layer.{i}"
            q, k, v = (linear(f"{layer}.attention.self.{part}") for part in ("query", "key", "value"))
            self.layers.append({
                "qkv": (np.concatenate([q[0], k[0], v[0]], axis=1), np.concatenate([q[1], k[1], v[1]])),
                "attention_out": linear(f"{layer}.attention.output.dense"),
                "attention_norm": (weight(f"{layer}.attention.output.LayerNorm.weight"),
                                   weight(f"{layer}.attention.output.LayerNorm.bias")),
                "intermediate": linear(f"{layer}.intermediate.dense"),
                "out": linear(f"{layer}.output.dense"),
                "out_norm": (weight(f"{layer}.output.LayerNorm.weight"), weight(f"{layer}.output.LayerNorm.bias")),
            })

    def layer_norm(self, x: np.ndarray, norm: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """LayerNorm of each row of `x`, in place."""
        x -= x.mean(axis=-1, keepdims=True)
        x /= np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps)
        x *= norm[0]
        x += norm[1]
        return x

    def __call__(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """`feed`: input_ids, attention_mask, token_type_ids (batch x tokens) -> batch x tokens x hidden,
        on one BLAS thread: OpenBLAS's threads spin and wait on each other at every product, and on a
        busy 2-core machine a batch of 16 short texts took 4.5x the wall time and 4x the CPU time with
        two of them (thread-level parallelism comes from the callers: a sweep's jobs, the judge's threads)."""
        with single_blas_thread():
            return self.forward(feed)

    def forward(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        from scipy.special import erf

        ids, mask, types = feed["input_ids"], feed["attention_mask"], feed["token_type_ids"]
        batch, tokens = ids.shape
        x = self.layer_norm(self.word[ids] + self.position[:tokens] + self.token_type[types], self.norm)
        hidden = x.shape[-1]
        size = hidden // self.heads
        x = x.reshape(batch * tokens, hidden)  # every token a row: each linear layer is one matrix product
        # a padded key gets the lowest float32 added to its score: exp() of it is 0 (as in transformers)
        masked = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)

        def heads(part: np.ndarray, order: tuple[int, ...]) -> np.ndarray:  # contiguous, so numpy's products use BLAS
            return np.ascontiguousarray(part.reshape(batch, tokens, self.heads, size).transpose(order))

        for layer in self.layers:
            qkv = x @ layer["qkv"][0]
            qkv += layer["qkv"][1]  # tokens x 3*hidden
            q = heads(qkv[:, :hidden], (0, 2, 1, 3))  # batch x heads x tokens x size
            q *= np.float32(1 / np.sqrt(size))
            k = heads(qkv[:, hidden:2 * hidden], (0, 2, 3, 1))  # batch x heads x size x tokens
            v = heads(qkv[:, 2 * hidden:], (0, 2, 1, 3))
            scores = q @ k  # softmax in place: the batch x heads x tokens x tokens scores are the largest array
            scores += masked
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = scores @ v
            attended = context.transpose(0, 2, 1, 3).reshape(batch * tokens, hidden) @ layer["attention_out"][0]
            attended += layer["attention_out"][1]
            attended += x
            x = self.layer_norm(attended, layer["attention_norm"])
            inner = x @ layer["intermediate"][0]
            inner += layer["intermediate"][1]
            gate = inner * np.float32(1 / np.sqrt(2))  # GELU: inner * (1 + erf(inner / sqrt 2)) / 2
            erf(gate, out=gate)
            gate += np.float32(1.0)
            gate *= np.float32(0.5)
            inner *= gate
            out = inner @ layer["out"][0]
            out += layer["out"][1]
            out += x
            x = self.layer_norm(out, layer["out_norm"])
        return x.reshape(batch, tokens, hidden)
