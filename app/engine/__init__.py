"""The inference engine: runs in its own process, one per loaded model, and is the only place llama.cpp runs.

llama.cpp can crash the whole process; keeping it out of the window's and the server's processes turns a
crash into an error message and a restart. Nothing here imports Qt. Its rooms, by job:

- process/      the engine process: the command loop (host), the loaded model's session, preflight, llama.cpp's log
- decoding/     one model in llama.cpp: load (runtime), the decode loop, sampling and grammars, parallel slots,
                adaptive threads, embeddings, token counts
- context/      what stays in the KV cache: the StreamingLLM window, H2O and the attention scores it reads
- speculation/  speculative decoding: draft models, prompt lookup, prediction, their calibration
- prompt/       a conversation into tokens: chat templates, their budget, literal user text
- probes/       what this machine can do, asked in child processes: extra buffer types, runtimes, GPU memory
- quantization/ the importance matrix that calibrates a quantization

What the clients share with it (the protocol, option fields, tool-call and grammar formats) is app.protocol.
"""
