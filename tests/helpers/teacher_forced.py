"""Run as a child with an engine runtime's LLAMA_CPP_LIB_PATH: evaluate a fixed text in one batch with
Hearth's own runtime and decoder, and print the top token at every position and the last position's logits
(base64 float32), as JSON. A process loads one runtime's libraries, so each runtime gets its own child.

    python -m tests.helpers.teacher_forced MODEL GPU_LAYERS
"""

from __future__ import annotations

import base64
import json
import sys

# One sentence (21 tokens): lavapipe takes about 9 s to start a graph and half a second a token, so every
# token here costs the suite a second per layer count.
TEXT = "The history of the printing press begins in the fifteenth century, when movable type made books cheaper to produce."


def main(argv: list[str]) -> int:
    from app.engine.decoding.decode import Decoder
    from app.protocol.messages import LoadOptions
    from app.engine.decoding.runtime import Runtime

    rt = Runtime(LoadOptions(model_path=argv[0], n_ctx=256, n_gpu_layers=int(argv[1]), n_threads=2),
                 extra_bufts=False)
    tokens = rt.tokenize(TEXT, add_special=rt.add_bos(), parse_special=False)
    logits = Decoder(rt).verify(tokens)
    print(json.dumps({"top": [int(i) for i in logits.argmax(axis=1)], "n": len(tokens),
                      "gpu_layers": rt.describe()["gpu_layers"],
                      "last": base64.b64encode(logits[-1].astype("<f4").tobytes()).decode()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
