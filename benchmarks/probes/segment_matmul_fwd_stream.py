# Forward segment_matmul at small K against a plain streaming copy of the same rows: which part
# of the kernel costs the gap (BGS K = 32 bf16: 0.053 ms against 0.048 for a Triton tile copy,
# `stream_ceiling.py`)? Variants of the library's forward loop, each alone:
#   routed / arithmetic: rows from the session-18 routing table (prog_ptr -> items -> rows, a chain of
#       dependent loads before the first row tile), or program p takes rows [p R, (p + 1) R)
#       with weight 0 (no table; a timing variant only, its output is not a segment_matmul);
#   dot / pass: the row tile times the weight, or the row tile itself stored (K = N);
#   w_loop: the item's weight loaded with every row tile (from L2) inside the pipelined loop,
#       so that no load waits for the weight before the first row tiles are requested;
#   inline: each program's first item (type, start, end, index of its items, count) in one
#       row of a program table: one load before the weight and the first row tiles;
#   block_loaded / block_typed: arithmetic rows whose start (and, typed, the weight of the
#       block's first row's type) comes from a table: arithmetic plus one load (plus weights
#       that change between programs), without segment ends, packing or the short tail (added at
#       the end of session 18, first run in session 19);
#   routed_no_tail: the routed kernel on a routing without the short tail;
#   block_segments: a correct segment_matmul with arithmetic rows: block p is rows [p R, (p + 1) R)
#       (the short tail's blocks R / 4), its first row's type from a table, split at the segment
#       ends it holds (read from ptr): no load before the first row tile's address;
#   block_split: the same blocks cut at every segment start, one type per program, a table of
#       (type, start) rows (one load before everything; the program ends where the next starts).
# Needs no pyg_fast build. Run: python benchmarks/probes/segment_matmul_fwd_stream.py (GPU).
import importlib.util
import itertools
import os
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
spec = importlib.util.spec_from_file_location("cfg", os.path.join(ROOT, "pyg_fast/triton/segment_matmul_config.py"))
cfgmod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cfgmod)
sys.path.insert(0, HERE)
from packed_routing import packed_routing  # noqa: E402
from stream_ceiling import copy_tiles  # noqa: E402
from segment_matmul_fwd_tma import reference, segment_sizes  # noqa: E402


TABLE, INLINE, ARITHMETIC, BLOCK_LOADED, BLOCK_TYPED = 0, 1, 2, 3, 4  # where a program finds its rows
TABLE_NO_TAIL = 5  # the TABLE kernel on a routing without the short tail
BLOCK_SEGMENTS = 6  # arithmetic blocks (and short tail), each split at the segment ends it holds
BLOCK_SPLIT = 7  # the same blocks cut at every segment start into programs of one type each
# (route, dot, w_loop); session 18's runs also timed table/arithmetic x dot/pass and w_loop, the
# first session-19 run routed_no_tail, inline and block_loaded, the second block_segments
VARIANTS = ((TABLE, True, False), (BLOCK_SPLIT, True, False), (BLOCK_TYPED, True, False), (ARITHMETIC, True, False))
ROUTE_NAMES = {TABLE: "routed", TABLE_NO_TAIL: "routed_no_tail", INLINE: "inline", ARITHMETIC: "arithmetic",
               BLOCK_LOADED: "block_loaded", BLOCK_TYPED: "block_typed", BLOCK_SEGMENTS: "block_segments",
               BLOCK_SPLIT: "block_split"}


@triton.jit
def _item(x_ptr, w_ptr, out_ptr, t, start, end, K, N, stride_xm, stride_wt, stride_om, w_offs, w_mask,
          DOT: tl.constexpr, W_LOOP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_K: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if not W_LOOP:
        w = tl.load(w_ptr + t * stride_wt + w_offs, mask=w_mask, other=0.0)
    for m0 in range(start, end, BLOCK_M):
        if W_LOOP:
            w = tl.load(w_ptr + t * stride_wt + w_offs, mask=w_mask, other=0.0)
        offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask_m = offs_m < end
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                    mask=mask_m[:, None] & (offs_k[None, :] < K), other=0.0)
        if DOT:
            acc = tl.dot(a, w).to(out_ptr.dtype.element_ty)
        else:
            acc = a
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], acc,
                 mask=mask_m[:, None] & (offs_n[None, :] < N))


@triton.jit
def fwd(x_ptr, w_ptr, out_ptr, prog_ptr, items_ptr, heads_ptr, blocks_ptr, ptr_ptr, head_progs, M, K, N, stride_xm,
        stride_wt, stride_wk, stride_wn, stride_om, ROUTE: tl.constexpr, DOT: tl.constexpr, W_LOOP: tl.constexpr,
        ROWS: tl.constexpr, TAIL_ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_offs = offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    w_mask = (offs_k[:, None] < K) & (offs_n[None, :] < N)
    if ROUTE == 7:  # BLOCK_SPLIT: blocks_ptr rows (type, start), program pid ends where pid + 1 starts
        _item(x_ptr, w_ptr, out_ptr, tl.load(blocks_ptr + 2 * pid).to(tl.int64), tl.load(blocks_ptr + 2 * pid + 1),
              tl.load(blocks_ptr + 2 * pid + 3), K, N, stride_xm, stride_wt, stride_om, w_offs, w_mask, DOT, W_LOOP,
              BLOCK_M, BLOCK_N, BLOCK_K)
    elif ROUTE == 6:  # BLOCK_SEGMENTS: block pid's rows, split at segment ends; blocks_ptr: first row's type
        if pid < head_progs:
            start = pid * ROWS
            stop = tl.minimum(start + ROWS, M)
        else:
            start = head_progs * ROWS + (pid - head_progs) * TAIL_ROWS
            stop = tl.minimum(start + TAIL_ROWS, M)
        t = tl.load(blocks_ptr + pid)
        seg_end = tl.load(ptr_ptr + t + 1)
        _item(x_ptr, w_ptr, out_ptr, t.to(tl.int64), start, tl.minimum(seg_end, stop), K, N, stride_xm, stride_wt,
              stride_om, w_offs, w_mask, DOT, W_LOOP, BLOCK_M, BLOCK_N, BLOCK_K)
        while seg_end < stop:
            t += 1
            seg_start = seg_end
            seg_end = tl.load(ptr_ptr + t + 1)
            if seg_end > seg_start:  # empty segments load no weight
                _item(x_ptr, w_ptr, out_ptr, t.to(tl.int64), seg_start, tl.minimum(seg_end, stop), K, N, stride_xm,
                      stride_wt, stride_om, w_offs, w_mask, DOT, W_LOOP, BLOCK_M, BLOCK_N, BLOCK_K)
    elif ROUTE >= 2:  # ARITHMETIC, BLOCK_LOADED, BLOCK_TYPED: rows [pid ROWS, (pid + 1) ROWS)
        t = 0
        start = pid * ROWS
        if ROUTE >= 3:
            start = tl.load(blocks_ptr + 2 * pid + 1)
        if ROUTE == 4:
            t = tl.load(blocks_ptr + 2 * pid).to(tl.int64)
        _item(x_ptr, w_ptr, out_ptr, t, start, tl.minimum(start + ROWS, M), K, N, stride_xm, stride_wt, stride_om,
              w_offs, w_mask, DOT, W_LOOP, BLOCK_M, BLOCK_N, BLOCK_K)
    elif ROUTE == 1:  # INLINE: the first item in the program's own row of heads, one load
        t = tl.load(heads_ptr + 5 * pid).to(tl.int64)
        start = tl.load(heads_ptr + 5 * pid + 1)
        end = tl.load(heads_ptr + 5 * pid + 2)
        first = tl.load(heads_ptr + 5 * pid + 3)
        count = tl.load(heads_ptr + 5 * pid + 4)
        _item(x_ptr, w_ptr, out_ptr, t, start, end, K, N, stride_xm, stride_wt, stride_om, w_offs, w_mask,
              DOT, W_LOOP, BLOCK_M, BLOCK_N, BLOCK_K)
        for it in range(first + 1, first + count):
            _item(x_ptr, w_ptr, out_ptr, tl.load(items_ptr + 3 * it).to(tl.int64), tl.load(items_ptr + 3 * it + 1),
                  tl.load(items_ptr + 3 * it + 2), K, N, stride_xm, stride_wt, stride_om, w_offs, w_mask,
                  DOT, W_LOOP, BLOCK_M, BLOCK_N, BLOCK_K)
    else:  # TABLE, the library's up to session 18: prog_ptr -> items
        for it in range(tl.load(prog_ptr + pid), tl.load(prog_ptr + pid + 1)):
            _item(x_ptr, w_ptr, out_ptr, tl.load(items_ptr + 3 * it).to(tl.int64), tl.load(items_ptr + 3 * it + 1),
                  tl.load(items_ptr + 3 * it + 2), K, N, stride_xm, stride_wt, stride_om, w_offs, w_mask,
                  DOT, W_LOOP, BLOCK_M, BLOCK_N, BLOCK_K)


def blocks_of(ptr, rows):
    """[P, 2] int32: each block of ``rows`` rows' first row and that row's type."""
    starts = torch.arange(0, int(ptr[-1]), rows)
    return torch.stack([torch.searchsorted(ptr, starts, right=True) - 1, starts], 1).int()


def aligned_starts(M, rows, tail, tail_rows):
    """Arithmetic blocks: the head program count and every block's first row (the short tail's
    blocks of ``tail_rows`` start at head_progs * rows)."""
    head_progs = max(0, M - tail) // rows if tail else triton.cdiv(M, rows)
    return head_progs, torch.cat([torch.arange(0, head_progs * rows, rows),
                                  torch.arange(min(head_progs * rows, M), M, tail_rows)])


def block_segments_of(ptr, rows, tail, tail_rows):
    """BLOCK_SEGMENTS: head program count and [P] int32 type of each block's first row."""
    head_progs, starts = aligned_starts(int(ptr[-1]), rows, tail, tail_rows)
    return head_progs, (torch.searchsorted(ptr, starts, right=True) - 1).int()


def block_split_of(ptr, rows, tail, tail_rows):
    """BLOCK_SPLIT: [P + 1, 2] int32 (type, first row), the aligned blocks cut at every
    non-empty segment's start; the last row is (0, M)."""
    M = int(ptr[-1])
    starts = torch.cat([aligned_starts(M, rows, tail, tail_rows)[1], ptr[:-1][ptr.diff() > 0]]).unique()
    types = torch.searchsorted(ptr, starts, right=True) - 1
    return torch.cat([torch.stack([types, starts], 1), torch.tensor([[0, M]])]).int()


def heads_of(items, prog_ptr):
    """[P, 5] int32: each program's first item (type, start, end), its index and the item count."""
    first = prog_ptr[:-1].long()
    return torch.cat([items[first], first[:, None].int(), (prog_ptr[1:] - prog_ptr[:-1])[:, None].int()], 1)


def main():
    torch.backends.cuda.matmul.allow_tf32 = True  # the picks of the suite's fp32 (TF32) cases
    sizes = segment_sizes()
    ceil, num_sms = cfgmod.hardware(torch.device("cuda"))
    for ds, K, dtype in (("BGS", 32, torch.bfloat16), ("Freebase", 32, torch.bfloat16), ("BGS", 64, torch.bfloat16),
                         ("BGS", 32, torch.float32), ("BGS", 64, torch.float32), ("AM", 32, torch.bfloat16),
                         ("MUTAG", 32, torch.bfloat16), ("AIFB", 64, torch.float32)):
        ptr = torch.tensor([0] + sizes[ds]).cumsum(0)
        M, T = int(ptr[-1]), len(sizes[ds])
        x = torch.randn(M, K, device="cuda").to(dtype)
        w = (torch.randn(T, K, K, device="cuda") / K ** 0.5).to(dtype)
        out = torch.empty_like(x)
        floor = x.element_size() * (2 * M * K + T * K * K) / (ceil["gbps"] * 1e9) * 1e3
        block = 16384 // x.element_size()
        copy = do_bench(lambda: copy_tiles[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), block),
                        warmup=10, rep=200, return_mode="median")
        res = [f"tile copy 16 KB {copy:.4f} ({100 * floor / copy:.1f}%)"]
        pick = cfgmod.model_config(ptr.diff(), K, K, dtype, torch.device("cuda"))
        want = None
        for cfg in {pick, cfgmod.SegmmConfig(64, K, K, 128, 4, 3), cfgmod.SegmmConfig(128, K, K, 256, 4, 3)}:
            tail = cfgmod.tail_rows(M, cfg.rows_per_prog, num_sms)
            routing = packed_routing(ptr, cfg.rows_per_prog, cfg.block_m, tail)
            no_tail = packed_routing(ptr, cfg.rows_per_prog, cfg.block_m)
            heads = heads_of(*routing).cuda()
            blocks = blocks_of(ptr, cfg.rows_per_prog).cuda()
            tail_prog_rows = cfgmod.tail_program_rows(cfg.rows_per_prog, cfg.block_m)
            head_progs, block_types = block_segments_of(ptr, cfg.rows_per_prog, tail, tail_prog_rows)
            ptr_dev, block_types = ptr.int().cuda(), block_types.cuda()
            split = block_split_of(ptr, cfg.rows_per_prog, tail, tail_prog_rows).cuda()
            for route, dot, w_loop in VARIANTS:
                table = no_tail if route == TABLE_NO_TAIL else routing
                items, prog_ptr = (t.cuda() for t in table)
                kernel_route = TABLE if route == TABLE_NO_TAIL else route
                block_table = {BLOCK_SEGMENTS: block_types, BLOCK_SPLIT: split}.get(route, blocks)
                grid = ({BLOCK_SEGMENTS: block_types.numel(), BLOCK_SPLIT: split.size(0) - 1}.get(route)
                        or (triton.cdiv(M, cfg.rows_per_prog) if kernel_route >= ARITHMETIC else prog_ptr.numel() - 1),)

                def call():
                    fwd[grid](x, w, out, prog_ptr, items, heads, block_table, ptr_dev, head_progs, M, K, K,
                              x.stride(0), w.stride(0), w.stride(1), w.stride(2), out.stride(0), kernel_route, dot,
                              w_loop, cfg.rows_per_prog, tail_prog_rows, cfg.block_m, cfg.block_n, cfg.block_k,
                              num_warps=cfg.num_warps, num_stages=cfg.num_stages)
                call()
                if kernel_route < ARITHMETIC or route in (BLOCK_SEGMENTS, BLOCK_SPLIT):
                    want = reference(x, ptr, w) if want is None else want
                    assert (out.double() - want).abs().max().item() < 0.05 * want.abs().max().item(), route
                ms = do_bench(call, warmup=10, rep=200, return_mode="median")
                res.append(f"{tuple(cfg)} {ROUTE_NAMES[route]} {'dot' if dot else 'pass'}"
                           f"{' w_loop' if w_loop else ''} {ms:.4f} ({100 * floor / ms:.1f}%)")
        print(f"{ds} K={K} {str(dtype)[6:]} floor {floor:.4f}", *res, sep="\n  ", flush=True)


def fp32_tiles():
    """The library's kernel (block_split) at fp32 K = 128 with 32- and 64-row tiles, 4 and 8 warps:
    the model picks 64-row 8-warp tiles for BGS and AM, the sweep measures 32-row ones faster."""
    torch.backends.cuda.matmul.allow_tf32 = True
    sizes = segment_sizes()
    ceil, num_sms = cfgmod.hardware(torch.device("cuda"))
    for ds in ("BGS", "AM"):
        ptr = torch.tensor([0] + sizes[ds]).cumsum(0)
        M, T, K = int(ptr[-1]), len(sizes[ds]), 128
        x = torch.randn(M, K, device="cuda")
        w = torch.randn(T, K, K, device="cuda") / K ** 0.5
        out = torch.empty_like(x)
        floor = 4 * (2 * M * K + T * K * K) / (ceil["gbps"] * 1e9) * 1e3
        res = []
        for block_m, warps, stages, rows in itertools.product((32, 64), (4, 8), (2, 3), (256, 512, 1024)):
            cfg = cfgmod.SegmmConfig(block_m, K, K, rows, warps, stages)
            if cfgmod.fwd_smem_bytes(cfg, 4) > ceil["smem_kb"] * 1024:
                continue
            tail = cfgmod.tail_rows(M, rows, num_sms)
            split = block_split_of(ptr, rows, tail, cfgmod.tail_program_rows(rows, block_m)).cuda()

            def call():
                fwd[(split.size(0) - 1,)](x, w, out, None, None, None, split, None, 0, M, K, K, x.stride(0),
                                          w.stride(0), w.stride(1), w.stride(2), out.stride(0), BLOCK_SPLIT, True,
                                          False, rows, 0, block_m, K, K, num_warps=warps, num_stages=stages)
            ms = do_bench(call, warmup=10, rep=100, return_mode="median")
            res.append(f"{tuple(cfg)} {ms:.4f} ({100 * floor / ms:.1f}%)")
        print(f"{ds} K=128 fp32 floor {floor:.4f}", *res, sep="\n  ", flush=True)


if __name__ == "__main__":
    fp32_tiles() if sys.argv[1:] == ["fp32_tiles"] else main()
