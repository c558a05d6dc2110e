"""`gpu-check` tells the truth on a machine without a GPU: it says there is no CUDA and exits
non-zero unless the CPU is asked for, and its graph check fails where graphs were asked for and
are not in use (read from the engine, not assumed)."""

from __future__ import annotations

import pytest
import torch

from graph_emulation import Emulator
from specdec.bench.gpu_check import graphs_in_use
from specdec.cli.main import main
from specdec.engine.engine import Engine
from specdec.models.pair import ModelPair
from tiny import tiny_pair


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
@pytest.mark.parametrize("argv", [["gpu-check"], ["gpu-check", "--quick"], ["gpu-check", "--device", "cuda"]])
def test_without_cuda_gpu_check_says_so_and_exits_non_zero(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--device cpu" in err


def on(engine_kind: str, capture=None) -> ModelPair:
    pair = tiny_pair()
    pair = ModelPair(None, pair.target, pair.draft, "t", "d", engine=engine_kind)
    if capture is not None:
        pair._engine = Engine(pair, graphs=True, capture=capture)
    return pair


def test_the_graph_check_fails_when_graphs_were_asked_for_and_are_not_in_use():
    check = graphs_in_use(on("graphs"))          # a CPU: Engine.graphs is off
    assert not check["ok"] and "not in use" in check["result"]
    assert graphs_in_use(on("graphs", Emulator()))["ok"]
    failing = on("graphs", Emulator())
    failing._engine.failures[("verify",)] = failing._engine.failure = "RuntimeError: capture failed"
    check = graphs_in_use(failing)
    assert not check["ok"] and "capture failed" in check["result"]
    assert graphs_in_use(on("static"))["ok"]     # nobody asked for graphs


def test_the_joint_chi_square_passes_draws_from_its_law_and_fails_others():
    from specdec.bench.gpu_check import chi_square

    law = {(1, 2): 0.5, (1, 3): 0.2, (4,): 0.25, (2, 2): 0.05}
    gen = torch.Generator().manual_seed(0)
    cells, probs = list(law), torch.tensor(list(law.values()))
    draws = [cells[i] for i in torch.multinomial(probs, 2000, replacement=True, generator=gen).tolist()]
    p, outside = chi_square(draws, law)
    assert p > 1e-3 and outside == 0
    skewed = torch.tensor([0.4, 0.3, 0.25, 0.05])   # 0.1 moved between two cells
    draws = [cells[i] for i in torch.multinomial(skewed, 2000, replacement=True, generator=gen).tolist()]
    assert chi_square(draws, law)[0] < 1e-6
    assert chi_square(draws[:-1] + [(7, 7)], law)[1] == 1


def test_exactness_runs_traced_multi_round_runs_on_the_graph_path_and_quick_says_it_skips_the_control():
    from specdec.bench.gpu_check import exactness, joint_law

    pair = on("graphs", Emulator())
    law = joint_law(pair, [1, 2, 3])
    eps = torch.finfo(torch.float32).eps   # two float32 rows of 8, each summing to 1 within 8 eps
    assert abs(sum(law.values()) - 1) < 2 * 8 * eps and all(len(cell) <= 2 for cell in law)
    exact, control = exactness(pair, 40, control=False, prompt=[1, 2, 3])
    assert control["skipped"] and "SKIPPED" in control["result"]
    assert "40 traced runs" in exact["result"] and pair._engine.graphs and not pair._engine.failures


# ---------------------------------------------------------------- gpu-check --shapes

@pytest.mark.parametrize("name", ["SmolLM2-135M", "SmolLM2-360M", "SmolLM2-1.7B", "Qwen2.5-0.5B", "Qwen2.5-1.5B"])
def test_each_shape_is_the_model_it_names(name):
    """Built on the meta device (no memory), a shape has its model's stated parameter count (the
    name's or the card's 2-3 significant figures) within 1 %. Measured: 134.5M, 361.8M, 1,711M,
    494M, 1,544M. A wrong MLP width or key-value head count moves it by 10-20 %."""
    from transformers import AutoModelForCausalLM

    from specdec.bench import shapes

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shapes.config(name))
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(shapes.PARAMS[name], rel=0.01)
    assert model.config.vocab_size in (49152, 151936)


def test_shapes_time_each_pair_through_the_engine_and_run_it_sampled():
    """The whole `--shapes` path on the static engine, cut to one layer a model (the full-vocabulary
    head and top-p's sort over 49,152 ids stay): costs for every width, one traced T = 1 top-p run
    on the engine, and the graph check (graphs not asked for on a CPU)."""
    from specdec.bench import shapes

    rows = shapes.run_shapes("cpu", torch.float32, "static", ["smollm2"], [1, 2, 5], repeats=2, tokens=6,
                             graphs_check=graphs_in_use, log=lambda m: None, layers=1)
    (row,) = rows
    costs = row["costs"]
    assert costs["engine"] == "static cache" and set(costs["target_ms_by_width"]) == {1, 2, 5}
    assert all(ms > 0 for ms in costs["target_ms_by_width"].values()) and costs["c"] > 0
    assert row["sampled_run"] == {"tokens": 6, "rounds": row["sampled_run"]["rounds"], "engine": "static cache"}
    assert row["describe"]["vocab_size"] == 49152 and row["describe"]["target_layers"] == 1
    assert row["graphs"]["ok"] and "not asked for" in row["graphs"]["result"]


def test_shapes_refuses_an_unknown_pair_by_name(capsys):
    assert main(["gpu-check", "--device", "cpu", "--shapes", "llama-70b"]) == 2
    err = capsys.readouterr().err
    assert "llama-70b" in err and "smollm2-1.7b" in err
