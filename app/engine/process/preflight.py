"""Checks made before the engine lets go of the model it has loaded.

Loading a model first unloads the current one (two models rarely fit side by
side). So everything that can refuse a model cheaply runs before that: the
file's header, and the memory-fit estimate from it (app.core.library.fit, header only,
milliseconds). A model that would not fit is refused with the estimate's
sentence, and the current model stays loaded: a wrong choice costs nothing.
A model bigger than RAM would "load" through the memory map and then page
from disk for every token, which looks like a frozen machine.
"""

from __future__ import annotations

from app.core.errors import ModelTooBig
from app.core.gguf.modelfile import check_model_file
from app.protocol.messages import LoadOptions


def preflight(options: LoadOptions) -> None:
    """Raise ModelFileError or ModelTooBig for a model that should not be loaded."""
    check_model_file(options.model_path)
    if options.draft_model:
        check_model_file(options.draft_model)
    if options.ignore_fit:
        return
    from app.core.library.fit import estimate_fit
    from app.core.library.projectors import chosen_projector
    from app.engine.probes.gpu_memory import gpu_free_mb

    # Everything the load will hold: each parallel slot's context, and the draft model with its own KV cache.
    estimate = estimate_fit(options.model_path, n_ctx=options.n_ctx, kv_type=options.kv_type,
                            n_parallel=options.n_parallel,
                            draft=options.draft_model if options.draft_max != 0 else None,  # 0: never loaded
                            # the device this engine's runtime offloads to, as ggml sees it (any vendor)
                            gpu_available_mb=gpu_free_mb() if options.n_gpu_layers else None,
                            projector=chosen_projector(options.model_path, options.mmproj)[0])
    if not estimate.fits:
        raise ModelTooBig(f"{estimate.verdict} To try anyway, use “Load anyway” (Models page) or --ignore-fit; "
                          "it may be very slow.")

