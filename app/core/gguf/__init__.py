"""What a model file is: its GGUF header, names, checks, quantization types, chat format, sampling."""
