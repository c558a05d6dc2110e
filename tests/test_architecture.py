"""The house keeps its shape (ARCHITECTURE.md): layers that import only downward, the library's
packages by level, the app's and training's families, no circles, and modules and functions short
enough to read. Read from the source with `ast` (lazy imports inside functions count too), plus
what `import specdec` really loads."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "specdec"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_BUILD_APP_LINES = 60   # the page's layout, read on one screen

# Bottom to top. A module may import its own layer and the layers below; training and app are
# siblings on one floor and import neither each other nor anything above.
LAYERS = {"library": 0, "training": 1, "app": 1, "bench": 2, "cli": 3}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("app", "bench", "training"):
        return parts[1]
    if len(parts) > 1 and parts[1] in ("cli", "__main__"):
        return "cli"
    return "library"


def imports(module: str) -> set[str]:
    """The specdec modules `module` imports, anywhere in its source."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:   # `from pkg import mod` imports the module pkg.mod
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: imports(m) for m in MODULES}


def test_the_import_graph_is_read():
    assert GRAPH["specdec.decoding.loop"] >= {"specdec.decoding.rounds", "specdec.trace.spine", "specdec.core.sampling"}
    assert GRAPH["specdec.decoding.rounds"] >= {"specdec.drafting.drafters", "specdec.engine.engine",
                                                "specdec.core.sampling"}
    assert "specdec.app.server.limits" in GRAPH["specdec.cli.main"] and "specdec.app.page.layout" in MODULES


def test_no_module_imports_a_layer_above_its_own():
    wrong = [f"{m} ({layer(m)}) imports {t} ({layer(t)})" for m, targets in GRAPH.items() for t in targets
             if LAYERS[layer(t)] > LAYERS[layer(m)] or (LAYERS[layer(t)] == LAYERS[layer(m)] and layer(t) != layer(m))]
    assert not wrong, "\n".join(wrong)


def test_the_library_imports_neither_app_nor_bench_nor_training_nor_the_cli():
    library = [m for m in MODULES if layer(m) == "library"]
    assert {"specdec.decoding.loop", "specdec.trace.spine", "specdec.trace.validate",
            "specdec.explain.lab"} <= set(library)
    wrong = [f"{m} imports {t}" for m in library for t in GRAPH[m] if layer(t) != "library"]
    assert not wrong, "\n".join(wrong)


# The app floor in three families (ARCHITECTURE.md): the page may import the other two; what the
# page shows imports neither the page nor how it is served; how it is served never imports the page
# and takes from what is shown only its words (`messages`, the sentences a refused request gets).
FAMILIES = ("page", "shows", "server")
FAMILY_MAY_IMPORT = {"page": {"page", "shows", "server"}, "shows": {"shows"}, "server": {"server"}}
SERVER_MAY_IMPORT = {"specdec.app.shows.messages"}


def family(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "app" else None


def may_import(module: str, target: str) -> bool:
    """Whether one app module may import another by the family rule (outside the app: always)."""
    if not (family(module) and family(target)):
        return True
    if family(target) in FAMILY_MAY_IMPORT[family(module)]:
        return True
    return family(module) == "server" and target in SERVER_MAY_IMPORT


def test_every_app_module_sits_in_one_of_the_three_families():
    loose = [m for m in MODULES if layer(m) == "app" and m != "specdec.app" and m.split(".")[2] not in FAMILIES]
    assert not loose, loose
    assert {family(m) for m in MODULES} - {None} == set(FAMILIES)


def test_app_families_import_only_what_they_may():
    wrong = [f"{m} ({family(m)}) imports {t} ({family(t)})" for m, targets in GRAPH.items() for t in targets
             if not may_import(m, t)]
    assert not wrong, "\n".join(wrong)


def test_the_family_rule_finds_a_wrong_import():
    """The rule can fail: a chart that imported the runs, or a server module that imported the layout."""
    graph = {"specdec.app.shows.charts": {"specdec.app.server.runs"},
             "specdec.app.server.runs": {"specdec.app.page.layout", "specdec.app.shows.messages"}}
    wrong = [(m, t) for m, targets in graph.items() for t in targets if not may_import(m, t)]
    assert wrong == [("specdec.app.shows.charts", "specdec.app.server.runs"),
                     ("specdec.app.server.runs", "specdec.app.page.layout")]


# The library floor in seven packages on six levels (ARCHITECTURE.md), bottom to top. A package
# imports itself and packages on a lower level only; two on one level (models and trace) import
# neither each other.
LIBRARY_LEVELS = {"core": 0, "models": 1, "trace": 1, "drafting": 2, "engine": 3, "decoding": 4, "explain": 5}


def library_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LIBRARY_LEVELS else None


def library_may_import(module: str, target: str) -> bool:
    """Whether one library module may import another by the level rule (outside the packages: always)."""
    here, there = library_package(module), library_package(target)
    if not (here and there):
        return True
    return here == there or LIBRARY_LEVELS[there] < LIBRARY_LEVELS[here]


def test_every_library_module_sits_in_one_of_the_seven_packages():
    loose = [m for m in MODULES if layer(m) == "library" and m != "specdec" and not library_package(m)]
    assert not loose, loose
    assert {library_package(m) for m in MODULES} - {None} == set(LIBRARY_LEVELS)


def test_library_packages_import_only_themselves_and_lower_levels():
    wrong = [f"{m} ({library_package(m)}) imports {t} ({library_package(t)})" for m, targets in GRAPH.items()
             for t in targets if not library_may_import(m, t)]
    assert not wrong, "\n".join(wrong)


def test_the_level_rule_finds_a_wrong_import():
    """The rule can fail: the math that imported the trace (upward), or a model that imported the
    trace (a sibling on its level); the loop importing the engine and its own rounds is fine."""
    graph = {"specdec.core.sampling": {"specdec.trace.spine"},
             "specdec.models.pair": {"specdec.trace.spine", "specdec.core.settings"},
             "specdec.decoding.loop": {"specdec.engine.engine", "specdec.decoding.rounds"}}
    wrong = [(m, t) for m, targets in graph.items() for t in sorted(targets) if not library_may_import(m, t)]
    assert wrong == [("specdec.core.sampling", "specdec.trace.spine"), ("specdec.models.pair", "specdec.trace.spine")]


# training/ in two families: the bundled pair, and a real chat target's drafter, which reuses the
# bundled pair's training loop. chat may import bundled; bundled never imports chat.
TRAINING_MAY_IMPORT = {"bundled": {"bundled"}, "chat": {"chat", "bundled"}}


def training_family(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "training" else None


def training_may_import(module: str, target: str) -> bool:
    here, there = training_family(module), training_family(target)
    return not (here and there) or there in TRAINING_MAY_IMPORT[here]


def test_every_training_module_sits_in_bundled_or_chat():
    loose = [m for m in MODULES if layer(m) == "training" and m != "specdec.training"
             and training_family(m) not in TRAINING_MAY_IMPORT]
    assert not loose, loose


def test_training_families_import_only_what_they_may():
    wrong = [f"{m} imports {t}" for m, targets in GRAPH.items() for t in targets if not training_may_import(m, t)]
    assert not wrong, "\n".join(wrong)
    assert "specdec.training.bundled.features" in GRAPH["specdec.training.chat.features_chat"]   # the edge is read


def test_the_training_rule_finds_a_wrong_import():
    graph = {"specdec.training.bundled.features": {"specdec.training.chat.chat_pool"},
             "specdec.training.chat.features_chat": {"specdec.training.bundled.features"}}
    wrong = [(m, t) for m, targets in graph.items() for t in targets if not training_may_import(m, t)]
    assert wrong == [("specdec.training.bundled.features", "specdec.training.chat.chat_pool")]


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    out.append(component)
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def test_no_import_circles():
    circles = [sorted(c) for c in strongly_connected(GRAPH) if len(c) > 1]
    assert not circles, circles


def test_the_circle_check_finds_a_circle():
    assert [sorted(c) for c in strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) if len(c) > 1] \
        == [["a", "b", "c"]]


def test_no_module_over_500_lines():
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    long = {m: n for m, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, long


def functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1


def test_no_function_over_80_lines():
    long = {f"{m}.{name}": n for m, p in MODULES.items() for name, n in functions(p) if n > MAX_FUNCTION_LINES}
    assert not long, long


def test_build_app_reads_on_one_screen():
    lengths = dict(functions(MODULES["specdec.app.page.layout"]))
    assert lengths["build_app"] <= MAX_BUILD_APP_LINES, lengths["build_app"]


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"})


@pytest.mark.slow
def test_import_specdec_loads_neither_gradio_nor_plotly_and_the_app_imports():
    out = _python("import sys, specdec; print(sorted(m for m in ('gradio', 'plotly') if m in sys.modules))")
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    out = _python("import specdec.app, specdec.app.page.layout; specdec.app.page.layout.build_app(); print('ok')")
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


MAX_CLASS_LINES = 150   # a class reads in a few screens: the engine is four (rounds, steps, buffers, timing)


def classes(source: str):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            yield node.name, node.end_lineno - node.lineno + 1


def test_no_class_over_150_lines():
    sizes = {f"{m}.{name}": n for m, p in MODULES.items() for name, n in classes(p.read_text(encoding="utf-8"))}
    # the package's classes are read
    assert "specdec.engine.engine.Engine" in sizes and "specdec.engine.slots.Slots" in sizes
    long = {c: n for c, n in sizes.items() if n > MAX_CLASS_LINES}
    assert not long, long
    assert dict(classes("class Long:\n" + "    x = 1\n" * 150)) == {"Long": 151}   # the control: one line over
