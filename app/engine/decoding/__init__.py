"""One model in llama.cpp: loading it (runtime), the decode loop, sampling and grammars, parallel slots in one
batch, adaptive threads, embeddings and token counts."""
