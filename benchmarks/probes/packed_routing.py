# The forward routing of the library up to session 18, which the forward probes compare against
# (and ran with): every segment split into items of at most ``rows_per_prog`` rows, consecutive
# items packed into programs of about ``rows_per_prog`` padded rows, a program reading
# prog_ptr -> items -> rows. Session 19 replaced it with block tables
# (``segment_matmul_config.build_blocks``; see segment_matmul_fwd_stream.py, block_split).
import torch


def _pack(ptr, rows_per_prog, block_m):
    counts = ptr.diff()
    chunks = torch.div(counts + rows_per_prog - 1, rows_per_prog, rounding_mode="floor")
    item_type = torch.repeat_interleave(torch.arange(counts.numel()), chunks)
    within = torch.arange(item_type.numel()) - (torch.cumsum(chunks, 0) - chunks)[item_type]
    start = ptr[:-1][item_type] + within * rows_per_prog
    end = torch.minimum(start + rows_per_prog, ptr[1:][item_type])
    items = torch.stack([item_type, start, end], 1).to(torch.int32)
    if items.size(0) == 0:
        return items, torch.zeros(1, dtype=torch.int32)
    cost = torch.div(end - start + block_m - 1, block_m, rounding_mode="floor") * block_m
    prog = torch.div(torch.cumsum(cost, 0) - cost, rows_per_prog, rounding_mode="floor")
    return items, torch.searchsorted(prog, torch.arange(int(prog[-1]) + 2)).to(torch.int32)


def packed_routing(ptr, rows_per_prog, block_m, short_tail=0, tail_prog_rows=None):
    """(items [I, 3] int32 rows (type, start, end), prog_ptr [P + 1] int32): the last
    ``short_tail`` rows in programs of ``tail_prog_rows`` (the library's a quarter as long)."""
    tail_prog_rows = tail_prog_rows or max(block_m, rows_per_prog // 4)
    if short_tail <= 0 or tail_prog_rows >= rows_per_prog:
        return _pack(ptr, rows_per_prog, block_m)
    cut = max(0, int(ptr[-1]) - short_tail)
    head_items, head_ptr = _pack(ptr.clamp(max=cut), rows_per_prog, block_m)
    tail_items, tail_ptr = _pack(ptr.clamp(min=cut), tail_prog_rows, block_m)
    return torch.cat([head_items, tail_items]), torch.cat([head_ptr[:-1], tail_ptr + head_items.size(0)])
