"""Every registered similarity and MaxSim against brute-force numpy references (tests/conftest.py), on ragged
batches; the similarity registry and its use by the configuration."""
import numpy as np
import pytest
import torch

import pyterrier_fandom_colbert as pfc
from pyterrier_fandom_colbert.model.scoring import maxsim, maxsim_repeat_padded, similarity_matrix, token_similarities
from pyterrier_fandom_colbert.model.similarity import SIMILARITIES, Similarity, get_similarity

REGISTERED = pytest.mark.parametrize("kind", list(SIMILARITIES))


def _brute(q, qn, d, dn, kind, reduction, reference):
    """Over the unpadded vectors only."""
    per = reference(kind, q[:qn], d[:dn]).max(1)
    return per.sum() / (qn if reduction == "mean" else 1)


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


@REGISTERED
def test_matrix_matches_numpy_reference(kind, numpy_similarity):
    rng = np.random.default_rng(4)
    q = rng.normal(size=(3, 5, 8)) * rng.uniform(0.2, 3, (3, 5, 1))
    d = rng.normal(size=(3, 9, 8)) * rng.uniform(0.2, 3, (3, 9, 1))
    similarity = get_similarity(kind)
    got = similarity.matrix(torch.tensor(q), torch.tensor(d)).numpy()  # batched [3, 5, 9]
    for i in range(3):
        np.testing.assert_allclose(got[i], numpy_similarity(kind, q[i], d[i]), rtol=1e-10, atol=1e-10)
    # the scoring function takes the name or the object
    torch.testing.assert_close(similarity_matrix(torch.tensor(q), torch.tensor(d), similarity),
                               similarity_matrix(torch.tensor(q), torch.tensor(d), kind))


@REGISTERED
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_maxsim_matches_bruteforce(kind, reduction, numpy_similarity):
    rng = np.random.default_rng(0)
    q, qm, qn, d, dm, dn = _ragged(rng)
    got = maxsim(torch.tensor(q), torch.tensor(d), torch.tensor(qm), torch.tensor(dm), kind, reduction).numpy()
    want = [_brute(q[i], qn[i], d[i], dn[i], kind, reduction, numpy_similarity) for i in range(len(q))]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@REGISTERED
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_repeat_padded_matches_bruteforce(kind, reduction, numpy_similarity):
    rng = np.random.default_rng(1)
    q = rng.normal(size=(4, 6)).astype(np.float32)
    lengths = [3, 1, 7, 4]
    docs = [rng.normal(size=(n, 6)).astype(np.float32) for n in lengths]
    width = max(lengths)
    tokens = torch.tensor(np.concatenate([doc[np.minimum(np.arange(width), len(doc) - 1)] for doc in docs]))
    got = maxsim_repeat_padded(torch.tensor(q), tokens, len(docs), similarity=kind, reduction=reduction).numpy()
    want = [_brute(q, 4, doc, len(doc), kind, reduction, numpy_similarity) for doc in docs]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@REGISTERED
def test_token_matrix_is_the_transposed_matrix(kind):
    rng = np.random.default_rng(2)
    q, d = torch.tensor(rng.normal(size=(5, 8))), torch.tensor(rng.normal(size=(9, 8)) * 3)
    similarity = get_similarity(kind)
    torch.testing.assert_close(similarity.token_matrix(d, q), similarity.matrix(q, d).T)
    torch.testing.assert_close(token_similarities(d, q, kind), similarity_matrix(q, d, kind).T)


@REGISTERED
def test_similarity_from_dots_and_norms_is_the_token_matrix(kind):
    rng = np.random.default_rng(3)
    q, d = torch.tensor(rng.normal(size=(5, 8))), torch.tensor(rng.normal(size=(9, 8)) * 3)
    similarity = get_similarity(kind)
    dots = d @ similarity.dot_query(q).T
    torch.testing.assert_close(similarity.from_dots(dots, torch.linalg.vector_norm(d, dim=-1), q),
                               similarity.token_matrix(d, q))


@REGISTERED
def test_config_keeps_the_name_of_a_registered_similarity(kind):
    assert pfc.ColBERTConfig(similarity=kind).similarity == kind
    config = pfc.ColBERTConfig(similarity=SIMILARITIES[kind])  # an object is stored by its name
    assert config.similarity == kind and pfc.ColBERTConfig.from_dict(config.to_dict()) == config


def test_query_mask_excludes_vectors_from_mean():
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    d = torch.tensor([[[1.0, 0.0]]])
    assert maxsim(q, d, torch.tensor([[True, False]]))[0] == pytest.approx(1.0)
    assert maxsim(q, d)[0] == pytest.approx(0.5)


def test_l2_is_negated_squared_distance():
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[4.0, 6.0]])
    assert similarity_matrix(a, b, "l2").item() == pytest.approx(-25.0)
    assert similarity_matrix(a, b, "dot").item() == pytest.approx(16.0)


def test_unknown_similarity_is_named_with_the_registered_ones():
    for call in (lambda: similarity_matrix(torch.ones(1, 2), torch.ones(1, 2), "manhattan"),
                 lambda: pfc.ColBERTConfig(similarity="manhattan")):
        with pytest.raises(ValueError, match="similarity='manhattan' is not supported") as err:
            call()
        assert all(repr(name) in str(err.value) for name in SIMILARITIES)


def test_registered_similarities_are_frozen_objects_named_by_their_key():
    for name, similarity in SIMILARITIES.items():
        assert isinstance(similarity, Similarity) and similarity.name == name
        with pytest.raises(AttributeError):
            similarity.name = "other"
