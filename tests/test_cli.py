"""tlc-opt: exit codes and one-line errors, safe writes, --list-passes and --stats, run in-process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tlc
import tlc.io
from tlc.cli import main
from tlc.passes import all_passes


def demo_graph() -> tlc.Graph:
    """Foldable constants, a commutative duplicate, an Identity and a dead node."""
    g = tlc.Graph("demo")
    x = g.input("x", "float32", ("N", 4))
    c = g.add_node("Add", [g.constant(np.ones(4, np.float32), name="a"),
                           g.constant(np.full(4, 2, np.float32), name="b")], name="c")
    y1 = g.add_node("Mul", [x, c])
    y2 = g.add_node("Mul", [c, x])
    g.add_node("Relu", [x], name="dead")
    g.output(g.add_node("Identity", [g.add_node("Add", [y1, y2])]), "z")
    return g


@pytest.fixture
def model(tmp_path) -> str:
    path = tmp_path / "demo.onnx"
    tlc.io.save(demo_graph(), path)
    return str(path)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tlc-opt: error: ") and "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------- user errors
def test_missing_file(capsys, tmp_path):
    code, out, err = run_cli(capsys, str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "o.onnx"))
    line = one_error_line(err)
    assert code == 1 and out == ""
    assert "no such model file" in line and "nope.onnx" in line and "(hint: check the path)" in line


def test_unknown_pass(capsys, model, tmp_path):
    code, _, err = run_cli(capsys, model, "--passes=fold,cse2", "-o", str(tmp_path / "o.onnx"))
    line = one_error_line(err)
    assert code == 1
    known = ", ".join(sorted(cls.name for cls in all_passes()))
    assert f"unknown pass 'cse2'; known passes: {known}" in line and "hint: run tlc-opt --list-passes" in line
    assert not (tmp_path / "o.onnx").exists()


def test_refuses_to_overwrite_its_input(capsys, model, tmp_path):
    before = open(model, "rb").read()
    link = tmp_path / "link.onnx"
    os.symlink(model, link)
    for target in (model, str(link), os.path.join(os.path.dirname(model), ".", "demo.onnx")):
        code, _, err = run_cli(capsys, model, "-O2", "-o", target)
        assert code == 1 and "is the input file; tlc-opt does not overwrite its input" in one_error_line(err)
    code, _, err = run_cli(capsys, model, "--dump-dot", model)
    assert code == 1 and "--dump-dot" in one_error_line(err)
    assert open(model, "rb").read() == before


def test_bad_extensions(capsys, model, tmp_path):
    code, _, err = run_cli(capsys, model, "-o", str(tmp_path / "out.xyz"))
    line = one_error_line(err)
    assert code == 1 and "cannot tell the format" in line and "'xyz'" in line and "hint:" in line
    notes = tmp_path / "model.txt"
    notes.write_text("hello")
    code, _, err = run_cli(capsys, str(notes), "--emit", "tlc")
    assert code == 1 and "expected a .onnx or .tlc file, got .txt" in one_error_line(err)
    code, _, err = run_cli(capsys, model, "--emit", "onnx")
    assert code == 1 and "--emit onnx needs an output file (hint: add -o FILE.onnx)" in one_error_line(err)
    assert sorted(os.listdir(tmp_path)) == ["demo.onnx", "model.txt"]


@pytest.fixture
def absent_cuda():
    """The cuda target as on a machine without a device or the simulator, registered as "cuda-absent"."""
    import dataclasses

    from tlc.targets import CUDA, register, unregister

    def missing():
        raise tlc.CompileError("the cuda target needs a CUDA device (or NUMBA_ENABLE_CUDASIM=1)")

    yield register(dataclasses.replace(CUDA, name="cuda-absent", check=missing))
    unregister("cuda-absent")


def test_bad_flag_values_exit_1_and_usage_errors_exit_2(capsys, model, tmp_path, absent_cuda):
    out = str(tmp_path / "o.onnx")
    for flags, text in [(["-O5"], "-O 5 is out of range: expected 0 to 3"),
                        (["--max-iterations", "0"], "--max-iterations 0 is out of range"),
                        (["--skip", "nothing"], "unknown pass to skip 'nothing'"),
                        (["--target", "tpu"], "unknown target 'tpu'"),
                        (["--target", "cuda-absent", "--bench"],
                         "--bench cannot run on target 'cuda-absent' here: the cuda target needs a CUDA device")]:
        code, _, err = run_cli(capsys, model, *flags, "-o", out)
        assert code == 1 and text in one_error_line(err), flags
    for argv in ([model, "--no-such-flag"], [model, "-O", "two"], [model, "-O1", "--passes", "dce"], []):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "usage: tlc-opt" in err and "Traceback" not in err, argv
    assert not os.path.exists(out)


def test_invalid_model_is_a_one_line_error(capsys, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 not a protobuf")
    code, _, err = run_cli(capsys, str(bad), "-o", str(tmp_path / "o.onnx"))
    assert code == 1 and "is not a valid ONNX model" in one_error_line(err)


# ---------------------------------------------------------------------------- writing
def test_writes_an_optimized_model_that_onnxruntime_runs(capsys, model, tmp_path):
    out = tmp_path / "opt.onnx"
    code, stdout, err = run_cli(capsys, model, "-O1", "--verify-each", "-o", str(out))
    assert code == 0 and stdout == "" and err == ""
    optimized = onnx.load(str(out))
    assert sorted(n.op_type for n in optimized.graph.node) == ["Add", "Mul", "Mul"]
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    want = tlc.reference.run(demo_graph(), {"x": x})["z"]
    np.testing.assert_array_equal(sess.run(["z"], {"x": x})[0], want)


def test_output_is_written_atomically(capsys, model, tmp_path, monkeypatch):
    out = tmp_path / "opt.onnx"
    out.write_bytes(b"previous result")

    def half_write(proto, path, *args, **kwargs):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(onnx, "save", half_write)
    code, _, err = run_cli(capsys, model, "-o", str(out))
    assert code == 1 and "No space left on device" in one_error_line(err)
    assert out.read_bytes() == b"previous result"
    assert sorted(os.listdir(tmp_path)) == ["demo.onnx", "opt.onnx"]


def test_nothing_is_written_without_an_output(capsys, model, tmp_path):
    code, stdout, err = run_cli(capsys, model, "-O2")
    assert code == 0 and stdout == ""
    assert err.startswith("tlc-opt: 9 -> ") and "nothing written (use -o FILE or --emit tlc)" in err
    assert sorted(os.listdir(tmp_path)) == ["demo.onnx"]


# ---------------------------------------------------------------------------- reports
def test_list_passes_comes_from_the_registry(capsys):
    code, out, err = run_cli(capsys, "--list-passes")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["pass", "level", "description"]
    for cls in all_passes():
        (row,) = [line for line in lines if line.split()[:1] == [cls.name]]
        assert row.split()[1] == f"-O{cls.min_level}" and row.endswith(cls.description)
    assert "  -O0: (nothing)" in lines
    (o2,) = [line for line in lines if line.startswith("  -O2: (")]
    assert all(name in o2 for name in ("fold", "dce", "cse", "fuse"))


def test_stats_table(capsys, model):
    code, out, err = run_cli(capsys, model, "-O2", "--skip", "fuse,simplify", "--stats")
    assert code == 0 and out == ""
    rows = {line.split()[0]: line.split()[1:] for line in err.splitlines() if line and not line.startswith(" ")}
    assert rows["op"] == ["before", "after"]
    assert rows["Add"] == ["2", "1"] and rows["Mul"] == ["2", "1"] and rows["Identity"] == ["1", "0"]
    assert rows["Relu"] == ["1", "0"] and rows["Constant"] == ["2", "1"] and rows["Input"] == ["1", "1"]
    assert _row(err, "total nodes") == ["9", "4"]
    assert _row(err, "parameters") == ["8", "4"]
    assert "folded constants: 1" in err and "fused groups: 0" in err
    assert "  fold: folded=1" in err and "  cse: nodes_merged=1" in err
    assert "  dce: bypassed=1 constants_removed=2 nodes_removed=1" in err


def _row(text: str, label: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith(label)]
    return line[len(label):].split()


def test_stats_counts_fused_groups(capsys, model):
    code, _, err = run_cli(capsys, model, "-O2", "--stats")
    assert code == 0
    fused = _row(err, "tlc.Fused")
    assert fused[0] == "0" and int(fused[1]) >= 1 and f"fused groups: {fused[1]}" in err


def test_target_steers_the_passes(capsys):
    """--target names the target fusion groups for: the bundled encoder gets epilogue, softmax and layer norm
    groups for the cpu and cuda targets, and only elementwise groups for a target that runs no other kind."""
    import dataclasses

    from tlc.targets import CUDA, register, unregister

    register(dataclasses.replace(CUDA, name="cuda-elementwise", group_kinds=("elementwise",),
                                 rendered_kinds=("elementwise",)))
    example = str(Path(tlc.__file__).parent / "examples" / "transformer_small.onnx")
    lines = {}
    try:
        for target in ("cpu", "cuda", "cuda-elementwise"):
            code, _, err = run_cli(capsys, example, "-O2", "--stats", "--target", target)
            assert code == 0, err
            lines[target] = next(line for line in err.splitlines() if line.strip().startswith("fuse:"))
    finally:
        unregister("cuda-elementwise")
    for target in ("cpu", "cuda"):
        assert "groups_epilogue=" in lines[target] and "groups_reduction=3" in lines[target], lines
    only = lines["cuda-elementwise"]
    assert "groups_elementwise=" in only and "groups_epilogue" not in only and "groups_reduction" not in only


def test_time_passes_and_print_ir_go_to_stderr(capsys, model):
    code, out, err = run_cli(capsys, model, "--passes=fold,dce", "--time-passes", "--print-ir-after-all")
    assert code == 0 and out == ""
    assert err.index("IR after fold //") < err.index("IR after dce //") < err.index("===== pass timing =====")
    timing = err[err.index("===== pass timing ====="):].splitlines()
    assert timing[1].split()[:2] == ["pass", "runs"] and {t.split()[0] for t in timing[2:4]} == {"fold", "dce"}


def test_progress_only_when_asked_off_a_terminal(capsys, model):
    _, _, quiet = run_cli(capsys, model, "-O1", "--stats")
    assert "tlc: pass" not in quiet
    _, _, loud = run_cli(capsys, model, "-O1", "--stats", "--progress")
    assert "tlc: pass 1: fold on 9 nodes" in loud


def test_pass_failure_is_one_line_naming_the_pass(capsys, model, monkeypatch, tmp_path):
    from tlc.passes.cse import CsePass

    def explode(self, graph):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(CsePass, "run", explode)
    code, _, err = run_cli(capsys, model, "--passes=cse", "-o", str(tmp_path / "o.onnx"))
    line = one_error_line(err)
    assert code == 1 and "pass 'cse' failed: RuntimeError: kaboom" in line and "--reproducer DIR" in line


# ---------------------------------------------------------------------------- text IR, dumps, reproducers
def test_text_ir_in_and_out(capsys, model, tmp_path):
    code, stdout, _ = run_cli(capsys, model, "-O1", "--emit", "tlc")
    assert code == 0 and stdout.startswith("graph @demo")
    text_file = tmp_path / "demo.opt.tlc"
    text_file.write_text(stdout)
    code, again, _ = run_cli(capsys, str(text_file), "-O1", "--emit=tlc")
    assert code == 0 and again == stdout           # optimizing an optimized graph changes nothing
    out = tmp_path / "again.tlc"
    code, _, _ = run_cli(capsys, str(text_file), "--passes=", "-o", str(out))
    assert code == 0 and tlc.io.load(out).structural_hash() == tlc.io.load(text_file).structural_hash()


def test_dot_and_graphml_dumps(capsys, model, tmp_path):
    dot, graphml = tmp_path / "g.dot", tmp_path / "g.graphml"
    code, _, err = run_cli(capsys, model, "-O2", "--dump-dot", str(dot), "--dump-graphml", str(graphml), "--stats")
    assert code == 0
    assert dot.read_text().lstrip().startswith("digraph") and "cluster" in dot.read_text()
    loaded = tlc.io.load(graphml)
    assert loaded.op_counts() == {"Constant": 1, "Input": 1, "tlc.Fused": 1}
    assert _row(err, "tlc.Fused") == ["0", "1"]


def test_reproducer_from_the_command_line(capsys, model, monkeypatch, tmp_path):
    from tlc.passes.cse import CsePass

    def explode(self, graph):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(CsePass, "run", explode)
    repro = tmp_path / "repro"
    code, _, err = run_cli(capsys, model, "--passes=fold,dce,cse", "--reproducer", str(repro))
    line = one_error_line(err)
    (saved,) = repro.iterdir()
    assert code == 1 and saved.name == "002-cse.before.tlc"
    assert f"(hint: reproduce with: tlc-opt {saved} --passes=cse)" in line
    graph = tlc.io.load(saved)
    assert sorted(graph.op_counts()) == ["Add", "Constant", "Input", "Mul"]   # folded and cleaned: fold,dce ran


def test_bench_compares_compiled_plan_with_reference_and_onnxruntime(capsys, model):
    code, out, err = run_cli(capsys, model, "-O2", "--bench", "--rounds", "2")
    assert code == 0 and out == ""
    rows = {line[:28].strip(): line[28:].split() for line in err.splitlines()
            if line.startswith(("tlc -O", "onnxruntime"))}
    assert set(rows) == {"tlc -O0 (reference)", "tlc -O2 (compiled)", "onnxruntime (ORT_ENABLE_ALL)"}
    assert rows["tlc -O0 (reference)"][3] == "1.00x" and float(rows["tlc -O0 (reference)"][4]) == 0.0
    for label in ("tlc -O2 (compiled)", "onnxruntime (ORT_ENABLE_ALL)"):
        assert float(rows[label][4]) < 1e-4  # outputs agree with the unoptimized reference
    assert " 0 failed to compile" in err and "0 reference step(s)" in err and "first call" in err


def test_onnxruntime_runs_on_the_targets_provider_where_it_has_it(model):
    """--bench's onnxruntime contender: the target's provider when the installed onnxruntime has it, else its
    CPU provider, and the caller is told which ran (the table then names it)."""
    from tlc.runtime.benchmark import onnxruntime_runner

    data = Path(model).read_bytes()
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    run_cpu, cpu = onnxruntime_runner(data, 1)
    run_cuda, used = onnxruntime_runner(data, 1, "CUDAExecutionProvider")
    assert cpu == "CPUExecutionProvider"
    assert used == ("CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers()
                    else "CPUExecutionProvider")
    np.testing.assert_allclose(run_cuda(feeds)[0], run_cpu(feeds)[0], rtol=1e-6)


def test_bench_rejects_zero_rounds(capsys, model):
    code, _, err = run_cli(capsys, model, "--bench", "--rounds", "0")
    assert code == 1 and "--rounds must be at least 1" in err


def test_a_missing_output_folder_fails_before_anything_is_written(tmp_path, capsys):
    """Every target's folder is checked before writing: a dump whose folder is missing leaves no -o file (and no
    temporary file) behind."""
    model = tmp_path / "m.tlc"
    model.write_text('graph @g {\n  %x = Input : float32[2]\n  %y = Relu(%x) : float32[2]\n  return %y\n}\n')
    out, dot = tmp_path / "out.onnx", tmp_path / "out.dot"
    assert main([str(model), "-O1", "-o", str(out), "--dump-dot", str(dot),
                 "--dump-graphml", str(tmp_path / "missing" / "g.graphml")]) == 1
    assert "cannot access" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tlc"]
    assert main([str(model), "-O1", "-o", str(out), "--dump-dot", str(dot)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tlc", "out.dot", "out.onnx"]


# ---------------------------------------------------------------------------- scoring a dataset
def integer_rows(rows: int) -> np.ndarray:
    """Small integers as float32: demo_graph's products and sums are exact, so any plan's outputs agree bit for bit."""
    return np.random.default_rng(1).integers(-4, 5, (rows, 4)).astype(np.float32)


def test_run_inputs_streams_rows_to_an_output_file(capsys, model, tmp_path):
    x = integer_rows(13)
    want = tlc.compile(demo_graph()).run({"x": x})["z"]
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez_compressed(inputs, x=x)                   # a compressed member is streamed by rows too
    before = inputs.read_bytes()
    code, stdout, err = run_cli(capsys, model, "-O2", "--run-inputs", str(inputs), "--run-outputs", str(outputs),
                                "--batch-size", "4")
    assert code == 0 and stdout == ""
    assert "ran 13 rows in 4 run(s)" in err and f"wrote {outputs}" in err
    with np.load(outputs) as result:
        assert result.files == ["z"]
        np.testing.assert_array_equal(result["z"], want)
    assert inputs.read_bytes() == before
    np.save(tmp_path / "in.npy", x)                    # one input, one output: .npy both ways
    code, _, _ = run_cli(capsys, model, "--run-inputs", str(tmp_path / "in.npy"), "--run-outputs",
                         str(tmp_path / "out.npy"), "--batch-size", "5")
    assert code == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), want)
    assert sorted(os.listdir(tmp_path)) == ["demo.onnx", "in.npy", "in.npz", "out.npy", "out.npz"]


def test_run_inputs_never_overwrites_and_a_failure_leaves_no_output(capsys, model, tmp_path, monkeypatch):
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    np.savez(inputs, x=integer_rows(10))
    before = inputs.read_bytes()
    os.symlink(inputs, tmp_path / "link.npz")
    for target in (inputs, tmp_path / "link.npz"):
        code, _, err = run_cli(capsys, model, "--run-inputs", str(inputs), "--run-outputs", str(target))
        assert code == 1 and "is the --run-inputs file; tlc-opt does not overwrite it" in one_error_line(err)
    code, _, err = run_cli(capsys, model, "--run-inputs", str(inputs), "--run-outputs", model)
    assert code == 1 and "is the input file" in one_error_line(err)
    outputs.write_bytes(b"previous result")
    run = tlc.Plan.run

    def fail_on_the_third_chunk(self, feeds, **kwargs):
        if self.runs == 2:
            raise tlc.ExecutionError("node 'm' (Mul) failed: out of luck")
        return run(self, feeds, **kwargs)

    monkeypatch.setattr(tlc.Plan, "run", fail_on_the_third_chunk)
    code, _, err = run_cli(capsys, model, "--run-inputs", str(inputs), "--run-outputs", str(outputs),
                           "--batch-size", "4")
    assert code == 1 and "node 'm' (Mul) failed: out of luck" in one_error_line(err)
    assert outputs.read_bytes() == b"previous result" and inputs.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["demo.onnx", "in.npz", "link.npz", "out.npz"]   # no temporary left


def test_run_flags_go_together(capsys, model, tmp_path, monkeypatch):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=integer_rows(3))
    for flags, text in [(["--batch-size", "4"], "--batch-size is used only with --run-inputs"),
                        (["--run-inputs", str(inputs)], "--run-inputs needs --run-outputs"),
                        (["--run-inputs", str(inputs), "--run-outputs", str(tmp_path / "o.csv")],
                         "expected a .npz or .npy file")]:
        code, _, err = run_cli(capsys, model, *flags)
        assert code == 1 and text in one_error_line(err), flags
    monkeypatch.setitem(sys.modules, "tqdm", None)          # as if tqdm were not installed
    code, _, err = run_cli(capsys, model, "--run-inputs", str(inputs), "--run-outputs", str(tmp_path / "o.npz"),
                           "--progress")
    assert code == 1 and "(hint: pip install 'tlc[progress]')" in one_error_line(err)
    assert sorted(os.listdir(tmp_path)) == ["demo.onnx", "in.npz"]
