"""The import rules of DESIGN.md ("Layers"), checked on the source: every module under rlops/ is
parsed with `ast` (imports inside functions included), nothing is imported.

(a) the four components are siblings: none imports another (they share rlops.components.common);
(b) no module imports another rlops module's private name (`from x import _y`);
(c) imports point down the layers: heads import no other layer (tensorflow, tensorflow-probability
    and numpy only), agents and features only heads, envs only agents and heads, train only agents,
    envs, features and heads; nothing below the components imports a component or a pipeline, and
    the components never import rlops.pipelines or rlops.testing;
(d) no module outside rlops.heads writes a head's formula (the epsilon-greedy mixture).
Each failure names the importing module, its line and the import.
"""

from __future__ import annotations

import ast
import pathlib
import re
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rlops"
COMPONENTS = ("experience_gen", "trainer", "evaluator", "pusher")

# What each layer below the components may import from rlops (DESIGN.md's table).
LOWER_LAYERS = {
    "rlops.heads": ("rlops.heads",),  # the bottom: one head module per decision kind
    "rlops.agents": ("rlops.agents", "rlops.heads"),
    "rlops.features": ("rlops.features", "rlops.heads"),
    "rlops.envs": ("rlops.envs", "rlops.agents", "rlops.heads"),
    "rlops.train": ("rlops.train", "rlops.agents", "rlops.envs", "rlops.features", "rlops.heads"),
    # rlops.components.properties (finite MLMD / KFP properties) sits below the components too.
    "rlops.components.common": (
        "rlops.components.common",
        "rlops.components.properties",
        "rlops.agents",
        "rlops.features",
        "rlops.heads",
    ),
}
ABOVE_COMPONENTS = ("rlops.pipelines", "rlops.testing")
# A module path written as a string (importlib, registries of "module:name" or ("module", "name")).
DOTTED = re.compile(r"^rlops(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    line: int
    target: str  # the imported module, or module.name for `from module import name`
    text: str  # the statement as written

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}): {self.text}"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module of `from <node.module> import ...` written in `module`."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: pathlib.Path) -> list[Import]:
    return _parse(_module_name(path), path.name == "__init__.py", path.read_text())


def _parse(module: str, is_package: bool, source: str) -> list[Import]:
    out = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            out += [Import(module, node.lineno, alias.name, ast.unparse(node)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base, text = _resolve(module, is_package, node), ast.unparse(node)
            out += [Import(module, node.lineno, f"{base}.{alias.name}", text) for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.match(node.value):
            out.append(Import(module, node.lineno, node.value.split(":")[0], repr(node.value)))
    return out


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    found = [i for path in sorted(PACKAGE.rglob("*.py")) for i in _imports(path)]
    assert len({i.module for i in found}) > 50, "the scan found too few modules: is rlops/ where it was?"
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _component(name: str) -> str | None:
    """The component package `name` lies in (rlops.components.<component>...), else None."""
    parts = name.split(".")
    if len(parts) > 2 and parts[:2] == ["rlops", "components"] and parts[2] in COMPONENTS:
        return parts[2]
    return None


def _report(bad: list[Import], rule: str) -> str:
    return f"{rule}:\n  " + "\n  ".join(str(i) for i in bad)


def test_no_component_imports_a_sibling(imports):
    bad = [
        i
        for i in imports
        if _component(i.module) and _component(i.target) and _component(i.target) != _component(i.module)
    ]
    assert not bad, _report(bad, "a component imports a sibling component (share it through rlops.components.common)")


def test_no_private_name_is_imported_from_another_module(imports):
    bad = [
        i
        for i in imports
        if i.text.startswith("from ")
        and _within(i.target, "rlops")
        and (leaf := i.target.rsplit(".", 1)[-1]).startswith("_")
        and not leaf.startswith("__")
    ]
    assert not bad, _report(bad, "a private name is imported from another module (make it public or stop using it)")


def _neutral(target: str) -> bool:
    """rlops itself (its version), and rlops.quiet (the entry points' start-up switches): below every layer."""
    return target == "rlops" or target.startswith("rlops.__") or _within(target, "rlops.quiet")


def test_imports_point_down_the_layers(imports):
    bad = []
    for i in imports:
        if not _within(i.target, "rlops") or _neutral(i.target):
            continue
        layer = next((layer for layer in LOWER_LAYERS if _within(i.module, layer)), None)
        if layer is not None:
            if not any(_within(i.target, allowed) for allowed in LOWER_LAYERS[layer]):
                bad.append(i)
        elif _within(i.module, "rlops.components") and any(_within(i.target, up) for up in ABOVE_COMPONENTS):
            bad.append(i)
    assert not bad, _report(bad, "an import points up the layers of DESIGN.md")


@pytest.mark.parametrize(
    "source, rule",
    [
        ("from rlops.components.trainer.core import run_trainer\n", "sibling"),
        ("def f():\n    from rlops.components import trainer\n", "sibling"),
        ("import rlops.components.pusher.core as pc\n", "sibling"),
        ("REGISTRY = {'x': 'rlops.components.trainer.agents:build'}\n", "sibling"),
        ("from rlops.envs.plots import _pyplot\n", "private"),
        ("from rlops.pipelines.config import PipelineConfig\n", "layer"),
    ],
)
def test_the_rules_catch_what_they_name(source, rule):
    """Each rule fails on a planted evaluator module that breaks it (so none passes vacuously)."""
    found = _parse("rlops.components.evaluator.planted", False, source)
    checks = {
        "sibling": test_no_component_imports_a_sibling,
        "private": test_no_private_name_is_imported_from_another_module,
        "layer": test_imports_point_down_the_layers,
    }
    with pytest.raises(AssertionError, match=r"rlops\.components\.evaluator\.planted \(line \d+\)"):
        checks[rule](found)


def test_lower_layers_may_not_import_components():
    found = _parse("rlops.train.planted", False, "from rlops.components.common import records\n")
    with pytest.raises(AssertionError, match="rlops.train.planted"):
        test_imports_point_down_the_layers(found)


# --- decision kinds: a table per component, no branches (DESIGN.md, "Decision kinds") ----------

# A kind's name, in either vocabulary users meet: the decision kinds and the pipelines that train them.
KIND_NAMES = {"bandit", "trajectory", "slate", "continuous", "ppo", "ranking"}
KIND_CONSTANTS = {"BANDIT", "TRAJECTORY", "SLATE", "CONTINUOUS"}  # as rlops.components.common.decision_kinds names them
# Functions that guess a kind from data or an artifact instead of reading the name that travels.
KIND_PROBES = {"holds_slates", "is_slates", "serves_slates", "kind_of_payload"}
KIND_TABLE = "rlops.components.common.decision_kinds"
# The layers below the components have no decision kinds: envs' simulators name file layouts
# ("slate": one JSON record per page), which are not kinds.
KIND_FREE = ("rlops.envs",)
# A justified exception carries this marker and its reason on the line; there may be at most
# MAX_JUSTIFIED of them in the whole package.
JUSTIFIED = "# kind branch:"
MAX_JUSTIFIED = 5


@dataclass(frozen=True)
class KindBranch:
    module: str
    line: int
    text: str
    justified: bool

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}): {self.text}"


def _kind_branches(module: str, source: str) -> list[KindBranch]:
    """Comparisons and membership tests against a kind's name (a string, a constant imported from
    the kind table, or a module constant bound to a kind's name), and calls to probes, in one
    module's source."""
    tree = ast.parse(source, module)
    lines = source.splitlines()
    constants = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == KIND_TABLE
        for alias in node.names
        if alias.name in KIND_CONSTANTS
    }
    for node in tree.body:  # NAME = "bandit", and A, B = "bandit", "x"
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = (
                zip(target.elts, value.elts)
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                else [(target, value)]
            )
            for name, bound in pairs:
                if isinstance(name, ast.Name) and isinstance(bound, ast.Constant) and bound.value in KIND_NAMES:
                    constants.add(name.id)

    def names_a_kind(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in KIND_NAMES
        if isinstance(node, ast.Name):
            return node.id in constants
        if isinstance(node, ast.Attribute):  # decision_kinds.SLATE
            return node.attr in KIND_CONSTANTS
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_kind(e) for e in node.elts)
        return False

    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare) and any(
            isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for o in node.ops
        ):
            hit = any(names_a_kind(x) for x in (node.left, *node.comparators))
        elif isinstance(node, ast.Call):
            f = node.func
            hit = (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) in KIND_PROBES
        if hit:
            line = lines[node.lineno - 1]
            found.append(KindBranch(module, node.lineno, ast.unparse(node)[:100], JUSTIFIED in line))
    return found


@pytest.fixture(scope="module")
def kind_branches() -> list[KindBranch]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == KIND_TABLE or any(_within(module, free) for free in KIND_FREE):
            continue
        found += _kind_branches(module, path.read_text())
    return found


def check_kind_branches(found: list[KindBranch]) -> None:
    bad = [b for b in found if not b.justified]
    assert not bad, (
        "code branches on a decision kind's name (or probes data for it) outside its component's table; "
        f"look the kind up in the table instead (or justify it with '{JUSTIFIED} <why>'):\n  "
        + "\n  ".join(str(b) for b in bad)
    )
    justified = [b for b in found if b.justified]
    assert len(justified) <= MAX_JUSTIFIED, (
        f"{len(justified)} justified kind branches (at most {MAX_JUSTIFIED}):\n  "
        + ("\n  ".join(str(b) for b in justified))
    )


def test_no_component_branches_on_a_kind_name(kind_branches):
    check_kind_branches(kind_branches)


@pytest.mark.parametrize(
    "source",
    [
        "from rlops.components.common.decision_kinds import SLATE\nif config.record_kind == SLATE:\n    pass\n",
        "def f(kind):\n    return kind in ('bandit', 'ranking')\n",
        "from rlops.components.common import decision_kinds\nok = decision_kinds.TRAJECTORY != kind\n",
        "from rlops.components.common.slates import holds_slates\nx = holds_slates(uri)\n",
    ],
)
def test_the_kind_rule_catches_a_planted_branch(source):
    found = _kind_branches("rlops.components.pusher.planted", source)
    with pytest.raises(AssertionError, match=r"rlops\.components\.pusher\.planted \(line \d+\)"):
        check_kind_branches(found)


def test_the_kind_rule_reads_justifications_and_their_limit():
    justified = "if kind == 'slate':  # kind branch: a planted reason\n    pass\n"
    check_kind_branches(_kind_branches("rlops.planted", justified))  # one justified: allowed
    with pytest.raises(AssertionError, match="justified kind branches"):
        check_kind_branches(_kind_branches("rlops.planted", justified * (MAX_JUSTIFIED + 1)))
    # a module constant bound to a kind's name is one
    with pytest.raises(AssertionError, match="rlops.planted"):
        check_kind_branches(_kind_branches("rlops.planted", "PPO = 'ppo'\nok = agent.pipeline == PPO\n"))


# --- heads: one module per decision kind, the bottom layer (DESIGN.md, "Heads") -----------------

HEADS_PACKAGE = "rlops.heads"
# What rlops.heads may import besides itself and the standard library.
HEADS_THIRD_PARTY = ("tensorflow", "tensorflow_probability", "numpy")


def test_heads_import_only_themselves_tensorflow_and_numpy(imports):
    import sys

    heads = [i for i in imports if _within(i.module, HEADS_PACKAGE)]
    assert heads, "the scan found no rlops.heads module"
    bad = [
        i
        for i in heads
        if not i.target.startswith("__future__")
        and not _within(i.target, HEADS_PACKAGE)
        and i.target.split(".")[0] not in HEADS_THIRD_PARTY
        and i.target.split(".")[0] not in sys.stdlib_module_names
    ]
    assert not bad, _report(
        bad, "rlops.heads imports something other than rlops.heads, tensorflow(-probability), numpy"
    )


# An exploration rate: eps, epsilon, self.epsilon, serving_epsilon, epsilon_greedy's `eps_...`.
EXPLORATION_RATE = re.compile(r"^(eps|epsilon)$|_(eps|epsilon)$|^(eps|epsilon)_", re.IGNORECASE)


@dataclass(frozen=True)
class Formula:
    module: str
    line: int
    rate: str

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}): mixes by the exploration rate {self.rate!r}"


def _rate(node: ast.AST) -> str | None:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name is not None and EXPLORATION_RATE.search(name) else None


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value in (1, 1.0)


def _mixtures(module: str, source: str) -> list[Formula]:
    """Scopes (a function, a lambda, the module body) that both take an exploration rate's
    complement (`1 - eps`) and scale by the rate (`eps * x`, `x * eps`, `eps / n`): the
    epsilon-greedy mixture (1 - eps) [greedy] + eps / n, however it is spelled or split into
    statements. PPO's clipping (`1 - eps`, `1 + eps`) scales nothing by its rate."""
    tree = ast.parse(source, module)
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    found = []
    for scope in scopes:
        complement: dict[str, int] = {}
        scaled: dict[str, int] = {}
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue  # a scope of its own
            stack.extend(ast.iter_child_nodes(node))
            if not isinstance(node, ast.BinOp):
                continue
            if isinstance(node.op, ast.Sub) and _is_one(node.left) and _rate(node.right):
                complement.setdefault(_rate(node.right), node.lineno)
            sides = (node.left, node.right) if isinstance(node.op, ast.Mult) else (node.left,)
            if isinstance(node.op, (ast.Mult, ast.Div)):
                for side in sides:
                    if _rate(side):
                        scaled.setdefault(_rate(side), node.lineno)
        for rate in sorted(complement.keys() & scaled.keys()):
            found.append(Formula(module, min(complement[rate], scaled[rate]), rate))
    return found


def check_no_head_formula_outside_heads(found: list[Formula]) -> None:
    bad = [f for f in found if not _within(f.module, HEADS_PACKAGE)]
    assert not bad, (
        "a head's exploration formula is written outside rlops.heads; call the head instead "
        "(rlops.heads.epsilon_greedy: propensity_tf, collect_draw, epsilon_greedy_probs, mix):\n  "
        + "\n  ".join(str(f) for f in bad)
    )


def test_no_head_formula_is_written_outside_the_heads():
    found = [f for path in sorted(PACKAGE.rglob("*.py")) for f in _mixtures(_module_name(path), path.read_text())]
    assert any(_within(f.module, HEADS_PACKAGE) for f in found), "the scan finds no formula even in rlops.heads"
    check_no_head_formula_outside_heads(found)


@pytest.mark.parametrize(
    "source",
    [  # how the formula was written outside the heads before they existed (main, 2026-12-07)
        "def f(self, eps, allowed, is_greedy):\n    propensity = eps / allowed + (1.0 - eps) * is_greedy\n",
        "def f(self, a, g, n):\n    return math.log(self.eps / n + (1.0 - self.eps) * (a == g))\n",
        "def f(self, epsilon, uniform):\n    return (1.0 - epsilon) * self.greedy + epsilon * uniform\n",
        "def f(eps, p, chosen, idx):\n    return eps * p + tf.where(chosen == idx, 1.0 - eps, 0.0)\n",
        "def f(epsilon, uniform, rows, greedy):\n    probs = epsilon * uniform\n    probs[rows, greedy] += 1 - epsilon\n",
    ],
)
def test_the_formula_rule_catches_a_planted_mixture(source):
    with pytest.raises(AssertionError, match=r"rlops\.components\.evaluator\.planted \(line \d+\)"):
        check_no_head_formula_outside_heads(_mixtures("rlops.components.evaluator.planted", source))


def test_the_formula_rule_leaves_ppo_clipping_alone():
    clip = "def f(ratio, eps, adv):\n    return tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps) * adv\n"
    check_no_head_formula_outside_heads(_mixtures("rlops.agents.ppo.planted", clip))
