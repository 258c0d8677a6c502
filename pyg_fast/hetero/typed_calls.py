"""The per-type calls of a model traced by ``to_hetero`` (a ModuleDict with one layer per node or
edge type, each called once), and the rewrite that runs them as one grouped call. The layers and
the state dict stay as they are: the grouped call reads the model's own ModuleDict."""
import operator
from typing import Callable, Dict, List, Sequence

import torch


def typed_calls(model: torch.fx.GraphModule) -> Dict[str, List[torch.fx.Node]]:
    """{name of a ModuleDict: the graph's calls of its layers, in graph order}."""
    calls: Dict[str, List[torch.fx.Node]] = {}
    for node in model.graph.nodes:
        if node.op == "call_module" and "." in node.target:
            calls.setdefault(node.target.rsplit(".", 1)[0], []).append(node)
    return {parent: members for parent, members in calls.items()
            if isinstance(model.get_submodule(parent), torch.nn.ModuleDict)}


def keys_of(members: Sequence[torch.fx.Node]) -> List[str]:
    return [node.target.rsplit(".", 1)[1] for node in members]


def features(arg) -> List[torch.fx.Node]:
    """[source, target] feature nodes of a layer call's first argument (a node, or a pair of
    nodes), or [] for anything else."""
    if isinstance(arg, torch.fx.Node):
        return [arg, arg]
    if isinstance(arg, tuple) and len(arg) == 2 and all(isinstance(a, torch.fx.Node) for a in arg):
        return list(arg)
    return []


def order_problem(model: torch.fx.GraphModule, members: Sequence[torch.fx.Node],
                  inputs: Sequence[torch.fx.Node]) -> str:
    """Why the calls cannot be grouped at the place of the last of their ``inputs`` ('' if they
    can): a layer called twice, or one's output used before another's input exists."""
    if len(set(keys_of(members))) != len(members):
        return "a layer is called more than once"
    position = {node: i for i, node in enumerate(model.graph.nodes)}
    last = max(position[node] for node in inputs)
    if any(position[user] <= last for node in members for user in node.users):
        return "a layer's output is used before another layer's input exists"
    return ""


def group(model: torch.fx.GraphModule, parent: str, members: Sequence[torch.fx.Node], run: Callable,
          constants: tuple, inputs: Sequence[torch.fx.Node]) -> None:
    """Replaces ``members`` by one call ``run(model.<parent>, keys, *constants, *inputs)`` placed
    after the last of ``inputs`` (``order_problem`` said it may be), whose i-th output stands for
    the i-th member's."""
    graph = model.graph
    position = {node: i for i, node in enumerate(graph.nodes)}
    with graph.inserting_after(max(inputs, key=position.__getitem__)):
        layers = graph.get_attr(parent)
    with graph.inserting_after(layers):
        grouped = graph.call_function(run, (layers, tuple(keys_of(members))) + tuple(constants) + tuple(inputs))
    anchor = grouped
    for i, node in enumerate(members):
        with graph.inserting_after(anchor):
            anchor = graph.call_function(operator.getitem, (grouped, i))
        node.replace_all_uses_with(anchor)
        graph.erase_node(node)


def finish(model: torch.fx.GraphModule) -> None:
    model.graph.lint()
    model.recompile()
