"""The CLI as a user runs it: real subprocesses, real engine, the bundled model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__


def hearth(*args: str, env_extra: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def test_version():
    proc = hearth("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"hearth {__version__}"


def test_chat_json_has_the_documented_fields():
    proc = hearth("chat", "--prompt", "Say hello.", "--temp", "0", "--max-tokens", "12", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("text", "model", "prompt_tokens", "completion_tokens", "finish_reason", "ttft_s", "prompt_tok_s",
                "gen_tok_s", "peak_rss_mb"):
        assert key in out, key
    assert out["model"].endswith(".gguf")
    assert 0 < out["completion_tokens"] <= 12
    assert out["gen_tok_s"] > 0 and out["peak_rss_mb"] > 50
    assert out["finish_reason"] in ("stop", "length")


def test_chat_prints_the_streamed_answer_and_honours_system_and_options():
    args = ("chat", "--prompt", "Name a fruit.", "--system", "You answer in one word.", "--temp", "0",
            "--max-tokens", "8", "--ctx", "512", "--threads", "1", "--kv-type", "q8_0", "--flash-attn", "on")
    plain = hearth(*args)
    assert plain.returncode == 0, plain.stderr
    js = json.loads(hearth(*args, "--json").stdout)
    assert plain.stdout.strip() == js["text"].strip()
    assert js["n_ctx"] == 512


def test_a_draft_model_that_cannot_pay_is_said_before_the_load_and_the_answer_still_comes(bundled_model):
    """The window says before Load that a draft model cannot pay (#49.2); `hearth chat` and `hearth serve` (the
    same option reading) held its memory without a word. A model as its own draft costs a whole step a token."""
    proc = hearth("chat", "--prompt", "Name a fruit.", "--temp", "0", "--max-tokens", "4", "--ctx", "512",
                  "--draft-model", str(bundled_model))
    assert proc.returncode == 0, proc.stderr
    (said,) = [line for line in proc.stderr.splitlines() if line.startswith("hearth: --draft-model")]
    assert f"of a step of {bundled_model.name}" in said and "drafting cannot pay" in said
    assert re.search(r"costs about \d+%", said) and "Traceback" not in proc.stderr
    assert proc.stdout.strip()
    # Without a draft model nothing of the kind is said.
    plain = hearth("chat", "--prompt", "Name a fruit.", "--temp", "0", "--max-tokens", "4", "--ctx", "512")
    assert plain.returncode == 0 and "--draft-model" not in plain.stderr


def test_interactive_chat_two_turns_then_exit():
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--temp", "0", "--max-tokens", "10"],
                          input="Hello!\nAnd again?\n/exit\n", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("assistant>") == 2
    assert proc.stdout.count("tok/s]") == 2


@pytest.mark.parametrize("content,expected", [
    (None, "not found"),
    (b"", "empty"),
    (b"hello, I am not a model\n", "not a GGUF"),
])
def test_bad_model_path_prints_one_sentence(tmp_path, content, expected):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    proc = hearth("chat", "--model", str(path), "--prompt", "hi")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "model.gguf" in lines[0]


def test_truncated_model_fails_cleanly_in_the_engine(tmp_path, bundled_model):
    from tests.helpers.tiny_gguf import write_truncated_copy

    path = write_truncated_copy(bundled_model, tmp_path / "half.gguf", 0.5)
    proc = hearth("chat", "--model", str(path), "--prompt", "hi")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "half.gguf" in proc.stderr and "truncated" in proc.stderr


def test_doctor_json_reports_machine_and_probe():
    proc = hearth("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["cpu"]["logical_cores"] >= 1
    assert report["ram_total_mb"] > 0
    assert isinstance(report["gpu_offload"], bool)
    assert report["extra_bufts"]["ok"] in (True, False)
    assert report["versions"]["llama-cpp-python"] == "0.3.36"
    assert os.environ["HEARTH_HOME"] in report["paths"]["data"]


def test_chat_predict_drafts_from_the_file_and_doctor_shows_the_calibration_it_kept(tmp_path):
    ask = ("chat", "--prompt", "Write a Python function that adds two numbers.", "--temp", "0", "--max-tokens", "40",
           "--threads", "1", "--json")
    first = hearth(*ask)
    assert first.returncode == 0, first.stderr
    previous = tmp_path / "previous.txt"
    previous.write_text(json.loads(first.stdout)["text"], encoding="utf-8")
    again = hearth(*ask, "--predict", str(previous))
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["spec"]["drafter"] == "prediction"
    assert out["prediction"]["accepted"] > 0.5 * out["completion_tokens"]
    doctor = hearth("doctor")
    assert "Speculation calibration:" in doctor.stdout and f"{Path(out['model_path']).name} (target, 1 threads" \
        in doctor.stdout, doctor.stdout
    missing = hearth("chat", "--prompt", "hi", "--predict", str(tmp_path / "nothing.txt"))
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1 and "--predict: cannot read" in missing.stderr


def test_doctor_text_mentions_gpu_and_extra_buffers():
    proc = hearth("doctor")
    assert proc.returncode == 0
    assert "GPU offload:" in proc.stdout and "Extra buffer types" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.heavy
def test_bench_json_fields():
    proc = hearth("bench", "--threads", "1", "--repeats", "1", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    for key in ("pp512", "tg128", "overhead_ms_per_token", "llama_generate_tg", "ratio_vs_llama_generate"):
        assert r[key] > 0 or key == "overhead_ms_per_token", key
    assert r["ratio_vs_llama_generate"] == pytest.approx(r["tg128_runs"][0] / r["llama_generate_tg_runs"][0])
    assert 0.5 < r["eval_bound_ratio"] <= 1.0


def test_a_model_too_big_gets_the_fit_verdict_in_one_sentence(tmp_path):
    from tests.helpers.tiny_gguf import write_oversized

    big = write_oversized(tmp_path / "huge.gguf")
    result = hearth("chat", "--model", str(big), "--prompt", "Hi")
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "Does not fit: huge.gguf" in result.stderr and "--ignore-fit" in result.stderr


@pytest.mark.parametrize("flags, sentence", [
    (["--threads", "999"], "--threads 999: this computer has"),
    (["--threads", "0"], "--threads 0: this computer has"),
    (["--temp", "-1"], "--temp must be between 0 and 2, not -1"),
    (["--top-p", "2"], "--top-p must be between 0 and 1, not 2"),
    (["--top-k", "-5"], "--top-k must be between 0 and"),
    (["--min-p", "7"], "--min-p must be between 0 and 1, not 7"),
    (["--repeat-penalty", "-2"], "--repeat-penalty must be between 0 and 10, not -2"),
    (["--max-tokens", "0"], "--max-tokens must be between 1 and"),
    (["--max-tokens", "-1"], "--max-tokens must be between 1 and"),
    (["--sink-tokens", "-3"], "--sink-tokens must be between 0 and"),
    (["--window-fraction", "5"], "--window-fraction must be between 0.01 and 0.99, not 5"),
    (["--ctx", "0", "--ignore-fit"], "--ctx must be between 64 and"),
    (["--lookup", "--draft-model", "other.gguf"], "--lookup and --draft-model are two ways of drafting"),
])
def test_out_of_range_options_are_refused_in_one_sentence(flags, sentence):
    proc = hearth("chat", "--prompt", "Hello", *flags, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr  # a bad argument, as argparse's own (issue 56 E17)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hearth: {sentence}"), proc.stderr
    assert proc.stdout == ""


def test_text_that_is_not_utf8_is_replaced_and_said_once(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--max-tokens", "2", "--temp", "0",
                           "--prompt", b"caf\xe9 au lait"], capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err
    assert "--prompt had bytes that are not UTF-8 text; they were replaced" in err
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--max-tokens", "2", "--temp", "0"],
                          input=b"hi \xff there\n/exit\n", capture_output=True, timeout=300)
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err
    assert "your message had bytes that are not UTF-8 text" in err
    assert "assistant> " in proc.stdout.decode()


def test_an_interactive_chat_survives_a_refused_message(tmp_path, bundled_model):
    """The engine refusing a message (here a chat template that renders nothing) ends that turn, not the chat."""
    from tests.helpers.gguf_edit import copy_with_template

    model = copy_with_template(bundled_model, tmp_path / "empty-template.gguf", "{{ '' }}")
    proc = subprocess.run([sys.executable, "-m", "app", "chat", "--model", str(model), "--max-tokens", "2"],
                          input="hello\nhello again\n/exit\n", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.count("the prompt is empty") == 2
    assert proc.stderr.count("The conversation is kept") == 2


def test_a_data_folder_that_cannot_be_written_costs_the_log_not_the_chat(tmp_path):
    """A read-only or full disk: Hearth's own state (logs, machine facts) fails soft, the answer still comes."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where Hearth's data folder should be")
    proc = hearth("chat", "--prompt", "Hello", "--max-tokens", "3", "--temp", "0",
                  env_extra={"HEARTH_HOME": str(blocker / "home")}, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip()
    assert "cannot write logs in Hearth's folder" in proc.stderr


def test_a_prompt_longer_than_the_context_is_never_cut_silently():
    proc = hearth("chat", "--ctx", "256", "--max-tokens", "2", "--temp", "0", "--json", "--prompt", "word " * 1500)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["prompt_dropped"] > 1000 and out["prompt_tokens"] < 256
    assert (f"the model saw {out['prompt_tokens']} of them (its start and its most recent part), the "
            f"{out['prompt_dropped']} in between were left out") in proc.stderr


def test_chat_takes_a_library_name_as_inspect_and_fit_do():
    proc = hearth("chat", "--model", "bundled", "--prompt", "Hello", "--max-tokens", "2", "--temp", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    proc = hearth("chat", "--model", "no-such-model", "--prompt", "Hello", timeout=60)
    assert proc.returncode != 0 and "No model named 'no-such-model'" in proc.stderr and "Traceback" not in proc.stderr


def test_the_startup_timing_command_reports_paint_and_model_ready(tmp_path):
    proc = hearth("gui", "--startup-time", "--json", env_extra={"QT_QPA_PLATFORM": "offscreen",
                                                                "HEARTH_HOME": str(tmp_path / "fresh")})
    assert proc.returncode == 0, proc.stderr
    marks = json.loads(proc.stdout)
    assert 0 < marks["qt_ready_s"] <= marks["painted_s"] < 60
    assert 0 < marks["model_ready_s"] < 60 and marks["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    # A fresh home: the probe (a second or two) ran before the first load, which used its answer (#49.11).
    assert marks["extra_bufts_probe"] and "background" not in marks["extra_bufts_probe"]


def test_the_window_paints_before_its_heavy_parts_are_imported_and_after_the_engine_started(tmp_path):
    """How a start is fast, not how fast it is (timings vary with the machine's load): the engine process
    starts before the window paints, and what the first paint does not need is imported after it.

    No GPU runtime installed, as a default install has none: with one, the very first start of a data folder
    probes it (0.5-1 s, a child process) before its engine can start, and later starts read the answer kept in
    the machine facts."""
    proc = hearth("gui", "--startup-time", "--json", env_extra={"QT_QPA_PLATFORM": "offscreen",
                                                                "HEARTH_HOME": str(tmp_path / "fresh"),
                                                                "HEARTH_RUNTIMES_DIR": str(tmp_path / "none")})
    assert proc.returncode == 0, proc.stderr
    marks = json.loads(proc.stdout)
    assert marks["heavy_modules_at_paint"] == []
    assert 0 < marks["engine_started_s"] < marks["window_built_s"] < marks["painted_s"]
    assert marks["model_ready_s"] < marks["pages_built_s"]  # the pages that can wait wait for the model
    # They were imported later, once the monitor and the other pages were built: the list is not empty by mistake.
    assert {"pyqtgraph", "httpx", "keyring", "app.server.openai"} <= set(marks["heavy_modules_at_end"])


def test_gpu_layers_without_a_gpu_are_said_not_ignored():
    from app.engine.probes.gpu_memory import gpu_devices

    if gpu_devices():
        pytest.skip("this machine has a GPU llama.cpp can use")
    proc = hearth("chat", "--gpu-layers", "999", "--prompt", "Hello", "--max-tokens", "2", "--temp", "0")
    assert proc.returncode == 0 and proc.stdout.strip()
    assert "--gpu-layers 999: no engine runtime here sees a GPU (hearth runtimes list), so the model runs on the CPU." in proc.stderr


def test_a_context_above_the_trained_one_is_said_as_the_window_says_it():
    """#29: `--ctx` above the trained context loaded in the CLI without the warning the window gives."""
    from app.core.gguf.modelfile import above_trained_context

    proc = hearth("chat", "--ctx", "10000", "--prompt", "Hi", "--max-tokens", "2", "--temp", "0")
    assert proc.returncode == 0, proc.stderr
    assert f"hearth: {above_trained_context(10000, 8192)}" in proc.stderr.splitlines()
    within = hearth("chat", "--ctx", "8192", "--prompt", "Hi", "--max-tokens", "2", "--temp", "0")
    assert within.returncode == 0 and "trained on" not in within.stderr


def test_chat_json_says_which_thread_count_answered_and_why():
    """#32: the README promises the thread count and the controller's reason in `hearth chat --json`."""
    fixed = json.loads(hearth("chat", "--threads", "1", "--prompt", "Hi", "--max-tokens", "2", "--json").stdout)
    assert fixed["n_threads"] == 1 and "threads_reason" not in fixed  # a count the user set is not the controller's
    adaptive = json.loads(hearth("chat", "--prompt", "Hi", "--max-tokens", "2", "--json").stdout)
    assert 1 <= adaptive["n_threads"] <= (os.cpu_count() or 1)
    assert re.fullmatch(rf"{adaptive['n_threads']} of \d+ threads.*", adaptive["threads_reason"])


@pytest.mark.slow
def test_the_same_lookup_answer_from_the_first_run_of_a_fresh_data_folder_on(tmp_path, model_variant):
    """#49.11: three runs of `hearth chat --lookup` at temperature 0 on Q4_0 from a fresh data folder gave two
    texts: the first run's (loaded before the probe had answered, its drafts calibrated on other kernels) and the
    later ones'. The probe now comes before the first load."""
    env = {"HEARTH_HOME": str(tmp_path / "fresh")}
    args = ("chat", "--model", str(model_variant("Q4_0")), "--lookup", "--temp", "0", "--max-tokens", "48",
            "--prompt", "Repeat this list: apples, pears, plums, apples, pears, plums, apples, pears.", "--json")
    answers = []
    for _ in range(3):
        proc = hearth(*args, env_extra=env)
        assert proc.returncode == 0, proc.stderr
        answers.append(json.loads(proc.stdout)["text"])
    assert answers[0] == answers[1] == answers[2] and answers[0]
