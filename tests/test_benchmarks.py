"""Benchmark scripts stay runnable: a tiny smoke run of each (figures are not checked: machines are noisy)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def smoke(tmp_path, script: str, *options: str, timeout: int = 600) -> str:
    """Run a benchmark in its quick form with its scratch folder in tmp_path; its output, once it is removed."""
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick", *options, "--folder", str(tmp_path)],
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []  # its scratch folder is removed
    return result.stdout


def test_write_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "write.py", "--no-seed", "--episodes", "3", timeout=300)
    assert "store (per step)" in out and "store_episode" in out


def test_read_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "read.py", "--no-seed", "--no-torchrl", "--no-workers", "--warm-mb", "1")
    assert "same bytes: checked" in out and "x numpy" in out


def test_samplers_benchmark_smoke(tmp_path):
    # --warm-mb 1: 256 MB touched before each run is seconds; --no-compile-time: three fresh processes compiling
    # the numba kernels with an empty cache is 10-30 s (tests/samplers/test_kernels.py compiles in fresh processes)
    out = smoke(tmp_path, "samplers.py", "--warm-mb", "1", "--no-compile-time", timeout=300)
    assert "same bytes: checked" in out and "x numpy" in out
    assert "Sampler figures" in out and "sum tree" in out


def test_stress_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "stress.py", "--minutes", "0.03", "--rate-seconds", "0.5")  # 2 s of readers, 0.5 s rates
    assert "Stress figures" in out and "reopened with every committed episode intact" in out
    assert "4 actors / 0 actors" in out
    assert "\nPASS: " in out or "\nFAIL: " in out  # the verdict is test_live.py's to assert


def test_io_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "io.py", "--episodes", "3", "--no-sync", timeout=300)
    assert "export_d4rl .hdf5" in out and "Import/export figures" in out
    assert "store_episode without stats" in out and "stats(recompute=True)" in out


def test_ray_shards_benchmark_smoke(tmp_path):
    pytest.importorskip("ray")
    out = smoke(tmp_path, "ray_shards.py", timeout=300)
    assert "Ray shard figures" in out and "x local" in out and "piggyback" in out


def test_cold_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "cold.py")
    assert "(a) Cold batches" in out and "same bytes: checked" in out and "x limit" in out
    assert "MISMATCH" not in out
    assert "(b) Epoch over a store bigger than its memory budget" in out and "sequential read" in out
    assert "Cold figures" in out and "run benchmarks/read.py" in out


def test_viewer_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "viewer.py", "--no-browser", timeout=300)
    assert "Viewer figures: 2,000 episodes" in out and "first byte" in out and "/api/episodes" in out


def test_compressed_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "compressed.py", timeout=300)
    if out.startswith("SKIPPED: "):  # without zstandard, gymnasium or ale-py (the zstd and atari extras)
        pytest.skip(out.strip())
    assert "codec study (one thread)" in out and "per-frame blocks" in out and "chunks of 16 frames" in out
    assert "same bytes: checked" in out and "MISMATCH" not in out
    assert "warm T" in out and "cold T" in out and "x raw" in out and "Goals (issue 29)" in out


def test_edit_benchmark_smoke(tmp_path):
    out = smoke(tmp_path, "edit.py", timeout=300)
    assert "Edit figures" in out and "delete_episodes (10)" in out and "relabel (filter, 1%)" in out
    assert "merge(out, store, store)" in out and "split 0.9 / 0.1" in out
    assert "episodes changed [1, 1]" in out  # the filter names one group, 1% of the episodes, each time

def test_read_benchmark_outputs_in_process(tmp_path, monkeypatch, capsys):
    """read.py --outputs (output='dict' / 'tensordict' / 'torchrl' figures), run in this process: a fresh
    interpreter would spend seconds importing torch for well under one of figures."""
    import importlib.util

    import torch

    monkeypatch.syspath_prepend(str(BENCHMARKS))  # (read.py imports workload.py)
    spec = importlib.util.spec_from_file_location("read_benchmark", BENCHMARKS / "read.py")
    read = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(read)
    threads = torch.get_num_threads()
    try:
        assert read.main(["--quick", "--outputs", "--folder", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "output= figures" in out and "transitions" in out and "window 16" in out
    if importlib.util.find_spec("tensordict"):
        assert "x dict)" in out and "torchrl" in out
    assert list(tmp_path.iterdir()) == []
