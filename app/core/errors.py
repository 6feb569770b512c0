"""Typed errors whose message is one sentence a user understands.

Deeper code raises these; only the CLI's printer and the UI's message bridge
show them. Anything that is not a HearthError is a bug and gets a crash log.
"""


class HearthError(Exception):
    """An error with a user-facing sentence as its message."""


class BadArgument(HearthError):
    """A command-line value the command cannot use (a port past 65535, a number of days that is nan): the CLI says
    it in one sentence and exits with 2, as argparse does for the arguments it refuses itself."""


class ModelFileError(HearthError):
    """A model file is missing, empty, not GGUF, truncated or unsupported."""


class ModelLoadError(HearthError):
    """llama.cpp refused to load a model or create its context."""


class ModelTooBig(ModelLoadError):
    """The memory-fit estimate says the model does not fit; loading it anyway needs ignore_fit."""


class EngineCrashed(HearthError):
    """The engine process died (native crash, kill, out of memory)."""


class EngineBusy(HearthError):
    """A command arrived while the engine was doing something it cannot interrupt."""


class GenerationError(HearthError):
    """llama.cpp failed while evaluating tokens (for example the context is full)."""


class ContextTooLong(GenerationError):
    """A prompt longer than the context, where truncating it was not allowed (the API never truncates)."""


class InvalidRequest(HearthError):
    """A request the engine cannot carry out as asked (a grammar llama.cpp cannot parse)."""


class EmptyPrompt(InvalidRequest, GenerationError):
    """A prompt of no tokens: llama.cpp would sample from logits never computed (and abort)."""


class DependencyMissing(HearthError):
    """An optional dependency is not installed; the message says how to install it."""
