"""The SAGE convolutions of a ``to_hetero`` model (one ``SAGEConv`` per relation, their outputs
summed per target type): the relations into one node type share one product of its features with
their summed root weights (``pyg_fast.nn.sage_conv.summed_roots``), where only that sum of their
outputs is read."""
import operator
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch
from torch import Tensor
from torch.nn.parameter import UninitializedParameter

from pyg_fast.hetero.typed_calls import features, finish, group, keys_of, order_problem, typed_calls
from pyg_fast.nn.sage_conv import SAGEConv, summed_roots


def summed_sage(convs: Sequence[SAGEConv], pairs: Sequence[bool], x_src: Sequence[Tensor], x_dst: Tensor,
                edge_index: Sequence[Tensor]) -> List[Tensor]:
    """Outputs of the relations ``convs`` into one target type whose sum is that of
    ``[conv((xs, x_dst) if pair else xs, ei)]`` (see ``summed_roots``); each layer's own output
    where one of them must take PyG's path or cannot share its root term."""
    parts = [conv._fused_input((xs, x_dst) if pair else xs, e) for conv, pair, xs, e in zip(convs, pairs, x_src,
                                                                                           edge_index)]
    outs = None if any(part is None for part in parts) else summed_roots(convs, x_dst, parts)
    if outs is None:
        return [conv((xs, x_dst) if pair else xs, e) for conv, pair, xs, e in zip(convs, pairs, x_src, edge_index)]
    return outs


def _run_summed(convs: torch.nn.ModuleDict, keys: Tuple[str, ...], pairs: Tuple[bool, ...], x_dst: Tensor,
                *inputs: Tensor) -> Tuple[Tensor, ...]:
    """The call a grouping puts into a traced model; ``inputs``: after the target features, each
    relation's source features and edge_index, in turn."""
    return tuple(summed_sage([convs[key] for key in keys], pairs, inputs[0::2], x_dst, inputs[1::2]))


def _is_add(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target in (torch.add, operator.add) and len(node.args) == 2
            and not node.kwargs and all(isinstance(a, torch.fx.Node) for a in node.args))


def summed_only(model: torch.fx.GraphModule, members: Sequence[torch.fx.Node]) -> bool:
    """Whether the outputs of ``members`` are read only through one sum of all of them: a tree of
    additions (``to_hetero``'s sum over relations) whose inner nodes nothing else reads."""
    covered: Dict[torch.fx.Node, frozenset] = {node: frozenset([node]) for node in members}
    for node in model.graph.nodes:
        if _is_add(node) and all(a in covered for a in node.args) and not (
                covered[node.args[0]] & covered[node.args[1]]):
            covered[node] = covered[node.args[0]] | covered[node.args[1]]
    everything = frozenset(members)
    root = next((node for node, leaves in covered.items() if leaves == everything and node not in everything), None)
    if root is None:
        return False
    inner: Set[torch.fx.Node] = set()
    stack = list(root.args)
    while stack:
        node = stack.pop()
        inner.add(node)
        if node not in everything:
            stack.extend(node.args)
    return all(len(node.users) == 1 for node in inner)


def _why_not(model: torch.fx.GraphModule, layers: Sequence[SAGEConv], members: Sequence[torch.fx.Node]) -> str:
    if any(isinstance(p, UninitializedParameter) for conv in layers for p in conv.parameters()):
        return "lazily initialised layers (run the model once before convert)"
    if any(not conv.root_weight or conv.normalize for conv in layers):
        return "layers without a root weight or with a normalised output"
    if not summed_only(model, members):
        return "the relations' outputs are read other than through their sum"
    return order_problem(model, members, [n for node in members for n in features(node.args[0]) + [node.args[1]]])


def group_typed_sages(model: torch.fx.GraphModule) -> List[Tuple[str, List[str], str]]:
    """Rewrites the calls of a traced model's converted ``SAGEConv`` layers into one call
    (:func:`summed_sage`) per target type with at least two relations. Returns (ModuleDict name,
    the relations grouped, '' or why they were left) per candidate."""
    done = []
    for parent, members in typed_calls(model).items():
        owner = model.get_submodule(parent)
        if len(members) < 2 or not all(type(owner[key]) is SAGEConv for key in keys_of(members)):
            continue
        by_target: Dict[Optional[torch.fx.Node], List[torch.fx.Node]] = {}
        for node in members:
            ends = features(node.args[0]) if len(node.args) == 2 and not node.kwargs and isinstance(
                node.args[1], torch.fx.Node) else []
            by_target.setdefault(ends[1] if ends else None, []).append(node)
        for target, nodes in by_target.items():
            if target is None or len(nodes) < 2:
                continue
            keys = keys_of(nodes)
            why = _why_not(model, [owner[key] for key in keys], nodes)
            done.append((parent, keys, why))
            if not why:
                pairs = tuple(isinstance(node.args[0], tuple) for node in nodes)
                inputs = [target] + [n for node in nodes for n in (features(node.args[0])[0], node.args[1])]
                group(model, parent, nodes, _run_summed, (pairs,), inputs)
    if any(not why for _, _, why in done):
        finish(model)
    return done
