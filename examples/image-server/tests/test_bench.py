"""bench.py's code path with --random-weights, run on the CPU in the tiny configuration (not a timing)."""

import re

from real_server import run_in_venv


def test_random_weights_bench_times_baseline_and_optimised_and_says_weights_do_not_matter():
    finished = run_in_venv(["bench.py", "--random-weights", "--tiny", "--no-compile", "--runs", "1",
                            "--size", "64x64", "--variants", "4b-distilled,9b-base"])
    assert finished.returncode == 0, finished.stderr
    rows = {line.split()[0] + " " + line.split()[1]: line.split()[2:] for line in finished.stdout.splitlines()
            if re.match(r"^(4B|9B) (distilled|base) ", line)}
    assert set(rows) == {"4B distilled", "9B base"}
    steps, baseline, optimised = (rows["9B base"][index] for index in range(3))
    assert steps == "50"
    assert float(baseline) > 0 and float(optimised) > 0
    assert "seconds per image (median) on the CPU" in finished.stdout
    assert "building the tiny architecture with random bf16 weights" in finished.stderr
    assert "these seconds check the benchmark's code, they say nothing about the real models" in finished.stdout


def test_the_bench_times_each_step_compares_the_same_seed_and_serves_concurrent_requests():
    """Without compiling, on the CPU, no step of the CUDA path applies: the baseline, then the prompt cache.
    The cache changes no pixel, and two requests sent at once through the server's app are both answered."""
    finished = run_in_venv(["bench.py", "--random-weights", "--tiny", "--no-compile", "--runs", "1",
                            "--size", "64x64", "--variants", "4b-distilled", "--concurrency", "2"])
    assert finished.returncode == 0, finished.stderr
    output = finished.stdout
    steps = re.findall(r"^  (baseline|prompt embedding cache \(the same prompt again\)) +\d+\.\d{3} +(\S+)$",
                       output, re.MULTILINE)
    assert [name for name, _ in steps] == ["baseline", "prompt embedding cache (the same prompt again)"]
    assert steps[0][1] == "-" and re.fullmatch(r"[+-]\d+%", steps[1][1])
    assert "same seed, optimised against baseline: pixels differ by 0.00 on average, 0 at most (of 255)" in output
    served = re.search(r"through the server: one request alone (\d+\.\d\d) s; 2 at once answered in "
                       r"(\d+\.\d\d), (\d+\.\d\d) s; (\d+\.\d\d) images/s", output)
    assert served, output
    # One pipeline: the second request waits for the first, so it takes about twice as long.
    assert float(served.group(3)) > float(served.group(2))


def test_full_size_random_weights_need_a_gpu_and_tiny_needs_random_weights():
    on_cpu = run_in_venv(["bench.py", "--random-weights", "--variants", "4b-distilled"])
    assert on_cpu.returncode == 1
    assert "needs a CUDA GPU (only --random-weights --tiny runs on a CPU)" in on_cpu.stderr
    tiny_alone = run_in_venv(["bench.py", "--tiny"])
    assert tiny_alone.returncode == 2
    assert "--tiny needs --random-weights" in tiny_alone.stderr


def test_the_published_configurations_build_the_4b_and_9b_sizes():
    """Built on the meta device, which allocates nothing: the parameter counts of the real checkpoints."""
    count = ("import torch; from random_pipeline import build_pipeline\n"
             "for size in ('4b', '9b'):\n"
             "    pipeline = build_pipeline(size, True, torch, torch.bfloat16, 'meta')\n"
             "    print(size, *(round(sum(p.numel() for p in getattr(pipeline, part).parameters()) / 1e9, 2)\n"
             "                  for part in ('transformer', 'text_encoder', 'vae')))")
    finished = run_in_venv(["-c", count])
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.split("\n")[:2] == ["4b 3.88 4.02 0.08", "9b 9.08 8.19 0.08"]
