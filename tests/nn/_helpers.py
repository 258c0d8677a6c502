"""Shared helpers of the layer tests."""
import torch

from pyg_fast.testing import PygFastOps


def random_graph(num_nodes, num_edges, device="cpu", num_dst=None):
    """Random edges with multi-edges, self loops and isolated nodes (the last quarter of
    targets receives nothing, the last node sends nothing)."""
    num_dst = num_nodes if num_dst is None else num_dst
    src = torch.randint(0, max(1, num_nodes - 1), (num_edges,), device=device)
    dst = torch.randint(0, max(1, 3 * num_dst // 4), (num_edges,), device=device)
    return torch.stack([src, dst])


def grads(module, *tensors):
    return [p.grad.clone() for p in module.parameters() if p.grad is not None] + [t.grad.clone() for t in tensors]


def compare(pyg_layer, fast_layer, inputs, grad_inputs=(), rtol=1e-5, atol=1e-5, expect_ops=None):
    """Runs both layers on inputs (a tuple of args), compares outputs and all gradients;
    returns the set of pyg_fast ops the fast layer ran."""
    ref = pyg_layer(*inputs)
    with PygFastOps() as mode:
        out = fast_layer(*inputs)
        out_t, ref_t = (out[0], ref[0]) if isinstance(out, tuple) else (out, ref)
        torch.testing.assert_close(out_t, ref_t, rtol=rtol, atol=atol)
        seed = torch.randn_like(ref_t)
        for t in grad_inputs:
            t.grad = None
        (out_t * seed).sum().backward()
    fast_grads = grads(fast_layer, *grad_inputs)
    for t in grad_inputs:
        t.grad = None
    (ref_t * seed).sum().backward()
    for g_fast, g_ref in zip(fast_grads, grads(pyg_layer, *grad_inputs)):
        torch.testing.assert_close(g_fast, g_ref, rtol=rtol, atol=atol)
    if expect_ops is not None:
        assert expect_ops <= mode.ops, f"expected pyg_fast ops {expect_ops}, ran {mode.ops}"
    return out, ref, mode.ops
