"""What stays in the KV cache when a chat outgrows it: the StreamingLLM window (sinks plus recent tokens) and
H2O (heavy hitters by the attention they get, read through llama.cpp's graph callback)."""
