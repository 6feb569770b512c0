"""The importance matrix (llama.cpp's imatrix) computed from the user's own text, which calibrates a
quantization; its worker runs in a child process."""
