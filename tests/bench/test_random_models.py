"""The random-weight models the GPU check (scripts/gpu_check.py) writes on a machine the bundled model cannot be
carried to: a tokenizer-only GGUF from the bundled model, and a llama of a named shape with that tokenizer, which
llama.cpp loads with the shape asked for and which tokenizes as the bundled model does."""

from __future__ import annotations

import json
import subprocess
import sys

import gguf
import pytest

from app.protocol import messages as P
from tests.helpers.tiny_gguf import write_random_llama, write_tokenizer_only


pytestmark = pytest.mark.slow


@pytest.mark.heavy  # slow by design (its waits, or a benchmark's own run): the heavy tier, which CI runs after the suite
def test_a_random_llama_has_the_shape_asked_for_and_the_bundled_tokenizer(tmp_path, bundled_model):
    vocab = write_tokenizer_only(tmp_path / "vocab.gguf", bundled_model)
    reader = gguf.GGUFReader(str(vocab))
    assert len(reader.tensors) == 0
    assert vocab.stat().st_size < 4_000_000  # small enough to carry
    model = write_random_llama(tmp_path / "random.gguf", vocab, n_embd=128, n_layer=3, n_ff=256, n_head=4,
                               n_head_kv=2)
    fields = gguf.GGUFReader(str(model)).fields
    assert fields["llama.block_count"].contents() == 3
    assert fields["llama.embedding_length"].contents() == 128
    source = gguf.GGUFReader(str(bundled_model)).fields
    assert fields["tokenizer.ggml.tokens"].contents() == source["tokenizer.ggml.tokens"].contents()
    assert fields["tokenizer.chat_template"].contents() == source["tokenizer.chat_template"].contents()

    # llama.cpp loads it, with those layers, and splits a text into the bundled model's tokens.
    script = ("import json, sys, llama_cpp\n"
              "out = {}\n"
              "for path in sys.argv[1:]:\n"
              "    m = llama_cpp.Llama(path, n_ctx=64, verbose=False)\n"
              "    out[path] = [llama_cpp.llama_model_n_layer(m.model), m.tokenize(b'Hello, GPU world!')]\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script, str(model), str(bundled_model)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got[str(model)][0] == 3
    assert got[str(model)][1] == got[str(bundled_model)][1]

    # And Hearth's engine answers with it, as the GPU check's benchmarks need.
    from app.backends.client import EngineClient
    from app.backends.supervisor import Supervisor

    client = EngineClient(Supervisor())
    try:
        info = client.load(P.LoadOptions(model_path=str(model), n_ctx=256, n_threads=1))
        assert info["n_layer"] == 3
        sampling = P.SamplingOptions(max_tokens=8, temperature=0.0, ignore_eos=True)
        done = [e for e in client.chat([{"role": "user", "content": "Hi"}], sampling) if isinstance(e, P.Done)]
        assert done and done[0]["completion_tokens"] == 8
    finally:
        client.close()
