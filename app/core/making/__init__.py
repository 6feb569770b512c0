"""The jobs that write files: quantize, convert, importance-matrix text, native runtimes."""
