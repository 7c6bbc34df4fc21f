"""MaxSim against a brute-force numpy reference, on ragged batches."""
import numpy as np
import pytest
import torch

from pyterrier_fandom_colbert.model.scoring import maxsim, maxsim_repeat_padded, similarity_matrix, token_similarities


def _sim(a, b, kind):
    if kind == "cosine":
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    if kind == "l2":
        return -np.sum((a - b) ** 2)
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    return -np.sum((a - b) ** 2)


def _brute(q, qn, d, dn, kind, reduction):
    """Loops over the unpadded vectors only."""
    per = [max(_sim(q[i], d[j], kind) for j in range(dn)) for i in range(qn)]
    return sum(per) / (qn if reduction == "mean" else 1)


def _ragged(rng, b=7, lq=5, ld=9, dim=6):
    q = rng.normal(size=(b, lq, dim)).astype(np.float32)
    d = rng.normal(size=(b, ld, dim)).astype(np.float32)
    qn = rng.integers(1, lq + 1, size=b)
    dn = rng.integers(1, ld + 1, size=b)
    # garbage in the padding: must never influence scores
    for i in range(b):
        q[i, qn[i]:] = 100.0
        d[i, dn[i]:] = 100.0
    qm = np.arange(lq)[None] < qn[:, None]
    dm = np.arange(ld)[None] < dn[:, None]
    return q, qm, qn, d, dm, dn


@pytest.mark.parametrize("kind", ["cosine", "l2", "l2_normalised"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_maxsim_matches_bruteforce(kind, reduction):
    rng = np.random.default_rng(0)
    q, qm, qn, d, dm, dn = _ragged(rng)
    got = maxsim(torch.tensor(q), torch.tensor(d), torch.tensor(qm), torch.tensor(dm), kind, reduction).numpy()
    want = [_brute(q[i], qn[i], d[i], dn[i], kind, reduction) for i in range(len(q))]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kind", ["cosine", "l2", "l2_normalised"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_repeat_padded_matches_bruteforce(kind, reduction):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(4, 6)).astype(np.float32)
    lengths = [3, 1, 7, 4]
    docs = [rng.normal(size=(n, 6)).astype(np.float32) for n in lengths]
    width = max(lengths)
    tokens = torch.tensor(np.concatenate([doc[np.minimum(np.arange(width), len(doc) - 1)] for doc in docs]))
    got = maxsim_repeat_padded(torch.tensor(q), tokens, len(docs), similarity=kind, reduction=reduction).numpy()
    want = [_brute(q, 4, doc, len(doc), kind, reduction) for doc in docs]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kind", ["cosine", "l2", "l2_normalised"])
def test_token_similarities_are_the_transposed_similarity_matrix(kind):
    rng = np.random.default_rng(2)
    q, d = torch.tensor(rng.normal(size=(5, 8))), torch.tensor(rng.normal(size=(9, 8)) * 3)
    torch.testing.assert_close(token_similarities(d, q, kind), similarity_matrix(q, d, kind).T)


def test_query_mask_excludes_vectors_from_mean():
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    d = torch.tensor([[[1.0, 0.0]]])
    assert maxsim(q, d, torch.tensor([[True, False]]))[0] == pytest.approx(1.0)
    assert maxsim(q, d)[0] == pytest.approx(0.5)


def test_l2_is_negated_squared_distance():
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[4.0, 6.0]])
    assert similarity_matrix(a, b, "l2").item() == pytest.approx(-25.0)


def test_unknown_similarity_is_named():
    with pytest.raises(ValueError, match="'dot'"):
        similarity_matrix(torch.ones(1, 2), torch.ones(1, 2), "dot")
