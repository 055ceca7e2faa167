"""The decompositions behind the idioms of test_training_idioms.py, run by torch eager against what they replace:
topk (values exact, indices up to ties, NaN ordered as torch), gather, scatter, scatter_add, index_select,
index_add, index_put, one_hot as one-hot forms, cumsum as a triangular mask (decomp_indexing.py);
scaled_dot_product_attention as its math (decomp_attention.py); prims views as aten views (decomp_prims.py).
And what the import says where an idiom cannot be imported: a FrontendError naming the op and the model's line."""

import itertools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from slicer.frontends import decomp_attention, decomp_indexing  # noqa: E402
from slicer.frontends.decompositions import decompositions  # noqa: E402

F = torch.nn.functional
aten = torch.ops.aten
TABLE = decompositions(torch)


@pytest.mark.parametrize("dim, k, largest", list(itertools.product([0, 1, -1], [1, 2, 3], [True, False])))
def test_topk_is_torchs(dim, k, largest):
    torch.manual_seed(0)
    x = torch.randn(4, 6, 5)
    values, indices = TABLE[aten.topk.default](x, k, dim, largest)
    want = torch.topk(x, k, dim, largest)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_ties_infinities_and_nan_picks_what_torch_picks(largest):
    """Values as torch's (NaN above every number, so first when largest and last otherwise); among equal
    values torch's CPU kernel picks in an order of its selection algorithm, here in increasing index order:
    the indices name entries holding those values, each once."""
    x = torch.tensor([[1.0, 2.0, 2.0, float("nan"), 0.0, 2.0, float("-inf")],
                      [0.0, 0.0, float("-inf"), float("-inf"), 0.0, float("inf"), 0.0]])
    for k in range(1, 8):
        values, indices = TABLE[aten.topk.default](x, k, -1, largest)
        want = torch.topk(x, k, -1, largest)
        assert torch.allclose(values, want.values, equal_nan=True)
        assert torch.allclose(x.gather(-1, indices), values, equal_nan=True)
        assert all(len(set(row.tolist())) == k for row in indices)
    assert TABLE[aten.topk.default](x, 2, -1, largest)[1][0].tolist() == ([3, 1] if largest else [6, 4])


def test_gather_and_scatters_are_torchs():
    torch.manual_seed(1)
    x, src = torch.randn(4, 6, 5), torch.randn(4, 6, 5)
    index = torch.randint(0, 6, (4, 3, 5))
    narrow = torch.randint(0, 5, (3, 2, 4))  # smaller than x in every dim: reads and writes its leading part
    assert torch.equal(TABLE[aten.gather.default](x, 1, index), torch.gather(x, 1, index))
    assert torch.equal(TABLE[aten.gather.default](x, -1, narrow), torch.gather(x, -1, narrow))
    assert torch.allclose(TABLE[aten.scatter_add.default](x, 1, index, src), x.scatter_add(1, index, src))
    assert torch.allclose(TABLE[aten.scatter_add.default](x, 2, narrow, src), x.scatter_add(2, narrow, src))
    unique = torch.stack([torch.randperm(6)[:3] for _ in range(20)]).reshape(4, 5, 3).transpose(1, 2)
    assert torch.equal(TABLE[aten.scatter.src](x, 1, unique, src), x.scatter(1, unique, src))
    assert torch.equal(TABLE[aten.scatter.value](x, 1, unique, 2.5), x.scatter(1, unique, 2.5))
    assert TABLE[aten.scatter.src](x, 1, unique, src, reduce="add") is NotImplemented


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_and_index_add_are_torchs(dim):
    torch.manual_seed(2)
    x = torch.randn(4, 6, 5)
    index = torch.tensor([3, 0, 3, 1]) % x.shape[dim]
    source = torch.randn(*[4 if d == dim else x.shape[d] for d in range(3)])
    assert torch.equal(TABLE[aten.index_select.default](x, dim, index), torch.index_select(x, dim, index))
    assert torch.allclose(TABLE[aten.index_add.default](x, dim, index, source, alpha=0.5),
                          x.index_add(dim, index, source, alpha=0.5))
    written = x.clone()
    assert TABLE[aten.index_add_.default](written, dim, index, source) is written  # in place, as index_add_
    assert torch.allclose(written, x.index_add(dim, index, source))


def test_index_put_of_one_index_tensor_is_torchs():
    torch.manual_seed(3)
    x = torch.randn(4, 6, 5)
    for indices, values, accumulate in [([None, torch.tensor([1, -1])], torch.tensor(7.0), False),
                                        ([torch.tensor([1, 1, 2])], torch.ones(3, 6, 5), True),
                                        ([None, torch.tensor([[0, 2], [5, 2]])], torch.randn(4, 2, 2, 5), True)]:
        got = TABLE[aten.index_put.default](x, indices, values, accumulate)
        assert torch.allclose(got, aten.index_put(x, indices, values, accumulate))
    mask = [x[:, 0, 0] > 0]  # a boolean mask: left to torch-mlir (a data-dependent count)
    assert TABLE[aten.index_put.default](x, mask, torch.tensor(1.0)) is NotImplemented


def test_one_hot_is_torchs_for_a_given_number_of_classes():
    index = torch.randint(0, 6, (4, 3))
    assert torch.equal(decomp_indexing.one_hot(index, 6), F.one_hot(index, 6))
    assert decomp_indexing.one_hot(index) is NotImplemented  # the classes counted from the data: refused


CASES = {
    "causal": {"is_causal": True},
    "causal_scale": {"is_causal": True, "scale": 0.3},
    "bool_mask": {"attn_mask": torch.rand(2, 1, 1, 7) > 0.3},
    "float_mask": {"attn_mask": torch.randn(2, 1, 5, 7)},
    "fully_masked_row": {"attn_mask": torch.tensor([[True] * 7] * 4 + [[False] * 7])},
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("gqa", [False, True])
def test_attention_math_is_torchs(case, gqa):
    torch.manual_seed(4)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2 if gqa else 4, 7, 8), torch.randn(2, 2 if gqa else 4, 7, 8)
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **CASES[case])
    got = decomp_attention.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **CASES[case])
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_prims_are_aten_ops_computing_the_same():
    """Each primitive op the table rewrites, against the primitive itself (the training steps that needed them:
    test_training_idioms.py's batched experts)."""
    prims = torch.ops.prims
    x = torch.randn(3, 1, 4, 1)
    for op, args in [(prims.squeeze.default, (x, [1, 3])), (prims.view_of.default, (x,)),
                     (prims.broadcast_in_dim.default, (torch.randn(4), [3, 4], [1])),
                     (prims.collapse_view.default, (x, 0, 3)), (prims.split_dim.default, (x, 2, 2)),
                     (prims.transpose.default, (x, [2, 0, 3, 1])), (prims.copy_strided.default, (x, [1, 1, 3, 1]))]:
        got, want = TABLE[op](*args), op(*args)
        assert got.shape == want.shape and torch.equal(got, want), op


class Uses(torch.nn.Module):
    """A linear layer, then one of the ways below."""

    def __init__(self, how: str):
        super().__init__()
        self.linear, self.how = torch.nn.Linear(8, 4), how

    def forward(self, x):
        y = torch.nn.functional.silu(self.linear(x))
        if self.how == "k_from_data":
            return torch.topk(y, int(y.abs().sum().item()) % 3 + 1).values  # LINE k_from_data
        if self.how == "one_hot_counts":
            return F.one_hot(y.argmax(-1)).float() * y  # LINE one_hot_counts
        return torch.sort(y, -1).values  # LINE sort


def line_of(tag: str) -> str:
    with open(__file__) as source:
        number = next(i for i, text in enumerate(source, 1) if text.rstrip().endswith(f"# LINE {tag}"))
    return f"{__file__}:{number}"


@pytest.mark.parametrize("how, op", [("k_from_data", "reads the value of a tensor while it is traced"),
                                     ("one_hot_counts", "reads the value of a tensor while it is traced"),
                                     ("sort", "uses 'tm_tensor.sort'")])
def test_what_cannot_be_imported_is_an_error_naming_the_op_and_the_line(how, op):
    model, x = Uses(how), torch.randn(2, 8)
    with pytest.raises(slicer.FrontendError) as error:
        slicer.training_step(model, lambda m, x: m(x).sum(), x, optimizer=slicer.SGD(0.1))
    assert op in str(error.value) and line_of(how) in str(error.value)
    assert "Traceback" not in str(error.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_cumsum_is_torchs(dtype):
    """A router's slot positions (`cumsum(mask, dim=tokens)`, GShard) as a triangular mask and a sum."""
    torch.manual_seed(2)
    x = (torch.randn(3, 5, 4) * 3).to(dtype)
    for dim in (0, 1, -1):
        got, want = TABLE[aten.cumsum.default](x, dim), torch.cumsum(x, dim)
        assert got.dtype == want.dtype and torch.allclose(got, want, rtol=1e-6, atol=1e-6), (dim, dtype)
    assert torch.equal(TABLE[aten.cumsum.default](x, 1, dtype=torch.float64), torch.cumsum(x, 1, dtype=torch.float64))


def test_topk_with_k_past_the_dim_is_an_error_naming_the_line():
    def pick(x):
        return torch.topk(x, 5).values  # LINE topk_k

    with pytest.raises(slicer.FrontendError, match=r"topk at .*: k=5 is not between 0 and the 4 entries") \
            as error:
        slicer.training_step(torch.nn.Linear(8, 4), lambda m, x: pick(m(x)).sum(), torch.randn(2, 8),
                             optimizer=slicer.SGD(0.1))
    assert line_of("topk_k") in str(error.value)


def test_integer_and_boolean_tensors_keep_their_dtype():
    x = torch.randint(-5, 5, (4, 6), dtype=torch.int32)
    index = torch.randint(0, 6, (4, 3))
    rows = torch.tensor([2, 0, 2])
    assert torch.equal(TABLE[aten.gather.default](x, 1, index), torch.gather(x, 1, index))
    assert torch.equal(TABLE[aten.gather.default](x > 0, 1, index), torch.gather(x > 0, 1, index))
    assert torch.equal(TABLE[aten.index_select.default](x, 0, rows), torch.index_select(x, 0, rows))
    assert torch.equal(TABLE[aten.index_add.default](x, 0, rows, x[:3]), x.index_add(0, rows, x[:3]))
    assert torch.equal(TABLE[aten.scatter_add.default](x, 1, index, x), x.scatter_add(1, index, x))
