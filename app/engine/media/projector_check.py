"""Child process: open a projector as the engine would (libmtmd, warm-up included), and say whether it could.

libmtmd aborts the process on some projectors it cannot run (a Voxtral projector in this build dies in its
warm-up); here that costs this child, never the engine. The text model is read without its weights
(vocab_only): libmtmd needs only its embedding width and vocabulary.

    python -m app.engine.media.projector_check MODEL MMPROJ
"""

from __future__ import annotations

import sys

from app.core.proc import emit, keep_stdout_for_events


def child_main(argv: list[str] | None = None) -> int:
    keep_stdout_for_events()
    model_path, mmproj_path = (argv if argv is not None else sys.argv[1:])[:2]
    import llama_cpp
    from llama_cpp import mtmd_cpp as mtmd

    from app.engine.media.projector import explain
    from app.engine.process import llamalog
    from pathlib import Path

    llamalog.install()
    llamalog.install_mtmd()
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), params)
    if not model:
        emit("projector", ok=False, detail=f"llama.cpp could not read {Path(model_path).name}.")
        return 0
    ctx_params = mtmd.mtmd_context_params_default()
    ctx_params.use_gpu = False
    ctx_params.n_threads = 1
    ctx_params.warmup = True
    ctx = mtmd.mtmd_init_from_file(mmproj_path.encode(), model, ctx_params)
    if not ctx:
        emit("projector", ok=False, detail=explain(Path(mmproj_path), Path(model_path).name))
        return 0
    emit("projector", ok=True, vision=bool(mtmd.mtmd_support_vision(ctx)), audio=bool(mtmd.mtmd_support_audio(ctx)))
    mtmd.mtmd_free(ctx)
    llama_cpp.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
