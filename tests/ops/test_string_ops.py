"""String operators: ONNX backend cases, onnxruntime on random inputs, inferred types, refusals by name."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from nn_helpers import check_backend_case, feeds_of, output_types, run_ort, run_tlc, single_node_model

import tlc
from tests import onnx_cases
from tlc.ops.strings import case_mapping, compile_re2

STRING_OPS = ("StringConcat", "StringSplit", "StringNormalizer", "RegexFullMatch", "TfIdfVectorizer")
CASE_MODULES = ("string_concat", "string_split", "stringnormalizer", "regex_full_match", "tfidfvectorizer")


def string_cases() -> list:
    """The node cases of the string ops (27); importing onnx's case modules records them (see test_loss_ops)."""
    from onnx.backend.test.case import node  # noqa: PLC0415 - building the cases is slow; only when collecting

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in CASE_MODULES:
            importlib.import_module(f"{node.__name__}.{module}")
    # NOTE: _NodeTestCases is where onnx's ``expect`` records every case it builds
    return [c for c in node._NodeTestCases if c.model.graph.node[0].op_type in STRING_OPS]


CASES = string_cases()


def strings(*values: str) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def random_strings(rng, shape, alphabet: str, max_len: int = 8) -> np.ndarray:
    flat = ["".join(rng.choice(list(alphabet), rng.integers(0, max_len + 1))) for _ in range(int(np.prod(shape)))]
    return strings(*flat).reshape(shape)


def check_strings_against_ort(op: str, inputs: dict, attrs: dict | None = None, outputs: int = 1,
                              dims: dict | None = None) -> tlc.Graph:
    """One node in onnxruntime and in tlc: every output equal (dtype, shape, values); the inferred types fit."""
    model = single_node_model(op, inputs, attrs, outputs, dims)
    want = run_ort(model, feeds_of(inputs))
    graph, got = run_tlc(model, feeds_of(inputs))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"output {i}: {g.dtype}{g.shape}, ort {w.dtype}{w.shape}"
        if g.dtype == object:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-6)
    for t, g in zip(output_types(graph), got):
        assert t.matches(g), f"inferred {t} does not fit the result {g.dtype}{list(g.shape)}"
    return graph


def test_every_string_case_is_collected():
    assert len(CASES) == 27
    assert {op for c in CASES for op in onnx_cases.case_ops(c)} == set(STRING_OPS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


@pytest.mark.parametrize("name", ["test_string_split_maxsplit", "test_tfidfvectorizer_tf_batch_uniandbigrams_skip5"])
def test_backend_case_compiled(name):
    (case,) = [c for c in CASES if c.name == name]
    assert onnx_cases.run_case(case, onnx_cases.CompiledRunner(opt_level=2)) == (onnx_cases.PASS, "")


# ---------------------------------------------------------------------------- StringConcat, StringSplit
@pytest.mark.parametrize("x_shape,y_shape", [((3, 4), (4,)), ((2, 1, 3), (5, 1)), ((), (2,))])
def test_concat_broadcasts_like_onnxruntime(rng, x_shape, y_shape):
    inputs = {"x": random_strings(rng, x_shape, "ab的"), "y": random_strings(rng, y_shape, "xy ")}
    check_strings_against_ort("StringConcat", inputs)


@pytest.mark.parametrize("attrs", [{}, {"maxsplit": 1}, {"maxsplit": 0}, {"delimiter": "-"},
                                   {"delimiter": "--", "maxsplit": 2}, {"delimiter": "", "maxsplit": 2}])
def test_split_matches_onnxruntime(rng, attrs):
    """Spaces only: onnxruntime splits on ' ' alone where the spec (and tlc) take any whitespace."""
    x = random_strings(rng, (3, 5), "ab- ", max_len=10)
    x[0, 0], x[1, 1], x[2, 2] = "", "  ", "--"
    check_strings_against_ort("StringSplit", {"x": x}, attrs, outputs=2)


def test_split_whitespace_is_any_python_whitespace():
    (op,) = [tlc.ops.get("StringSplit")]
    y, z = op.run_reference([strings(" a\tb\n c \u00a0", "")], {"maxsplit": 1})
    assert y.tolist() == [["a", "b\n c"], ["", ""]] and z.tolist() == [2, 0]


# ---------------------------------------------------------------------------- StringNormalizer
@pytest.mark.parametrize("attrs", [{"case_change_action": "LOWER"},
                                   {"case_change_action": "UPPER", "stopwords": ["ab"]},
                                   {"stopwords": ["Ab", "b"], "is_case_sensitive": 1},
                                   {"stopwords": ["Ab", "b"], "case_change_action": "LOWER"}])
@pytest.mark.parametrize("shape", [(7,), (1, 7)])
def test_normalizer_matches_onnxruntime_in_the_c_locale(rng, attrs, shape):
    """onnxruntime builds other locales from the system's, which this machine lacks: "C" (ASCII casing)."""
    x = random_strings(rng, shape, "aAbBé", max_len=2)
    check_strings_against_ort("StringNormalizer", {"x": x}, {**attrs, "locale": "C"})


def test_normalizer_drops_everything_to_one_empty_string():
    op = tlc.ops.get("StringNormalizer")
    (y,) = op.run_reference([strings("a", "A").reshape(1, 2)], {"stopwords": ["a"]})
    assert y.shape == (1, 1) and y.tolist() == [[""]]


@pytest.mark.parametrize("locale,lower,upper", [("", "istanbul straße ıi", "ISTANBUL STRASSE II"),
                                                 ("en_US.UTF-8", "istanbul straße ıi", "ISTANBUL STRASSE II"),
                                                 ("tr_TR", "ıstanbul straße ıi", "ISTANBUL STRASSE Iİ"),
                                                 ("C", "istanbul straße ıi", "ISTANBUL STRAßE ıI")])
def test_normalizer_locales(locale, lower, upper):
    to_lower, to_upper = case_mapping(locale)
    assert (to_lower("Istanbul Straße ıi"), to_upper("Istanbul Straße ıi")) == (lower, upper)


@pytest.mark.parametrize("attrs,match", [({"locale": "lt_LT"}, "Lithuanian"), ({"locale": "xx_QQ"}, "'xx_QQ' is not"),
                                         ({"case_change_action": "TITLE"}, "case_change_action 'TITLE'")])
def test_normalizer_refuses_by_name(attrs, match):
    model = single_node_model("StringNormalizer", {"x": strings("a")}, attrs)
    with pytest.raises(tlc.ShapeInferenceError, match=match):
        run_tlc(model, {"x": strings("a")})


# ---------------------------------------------------------------------------- RegexFullMatch
PATTERNS = [r"\d+", r"\w+", r"a\b.*", r"[[:alpha:]]+\d?", r"\Q.*\E+", r"(?i)ab+", r"a{,2}", r"(?P<x>a|b)*c$",
            r"[\w-]+@[a-z]+\.com", r".\z", r"[\d.]+"]
SUBJECTS = strings("123", "١٢٣", "abc", "é", "a b", "a-b", ".*.*", "AbB", "a{,2}", "abac", "x@y.com", "1.5", "a\n", "")


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_matches_onnxruntime_re2(pattern):
    """RE2's \\d, \\w, \\b and POSIX classes are ASCII; \\Q..\\E quotes; {,2} is literal text."""
    check_strings_against_ort("RegexFullMatch", {"x": SUBJECTS.reshape(2, 7)}, {"pattern": pattern})


@pytest.mark.parametrize("pattern,match", [(r"(a)\1", "backreference"), (r"a(?=b)", "lookahead"),
                                           (r"(?<!a)b", "negative lookbehind"), (r"a*+", "possessive"),
                                           (r"(?>a)", "atomic group"), (r"a\Z", r"\\Z"), (r"\pL", "Unicode class"),
                                           (r"(?U)a*", "ungreedy"), (r"(?x) a", "flags 'x'"), (r"a{1001}", "1000"),
                                           (r"a(", "not valid")])
def test_regex_refuses_what_re2_lacks_by_name(pattern, match):
    with pytest.raises(ValueError, match=match):
        compile_re2(pattern)
    model = single_node_model("RegexFullMatch", {"x": strings("a")}, {"pattern": pattern})
    with pytest.raises(tlc.ShapeInferenceError, match=match):
        run_tlc(model, {"x": strings("a")})


# ---------------------------------------------------------------------------- TfIdfVectorizer
def _tfidf_attrs(rng, pool_kind: str, mode: str, min_gram: int, max_gram: int, skip: int) -> dict:
    """A pool of 5 unigrams and 4 bigrams over a small vocabulary, shuffled output positions, random weights."""
    vocab = list("abcdef") if pool_kind == "strings" else list(range(6))
    unigrams = list(rng.choice(vocab, 5, replace=False))
    pairs = [(a, b) for a in vocab for b in vocab]
    bigrams = [x for k in rng.choice(len(pairs), 4, replace=False) for x in pairs[k]]
    pool = [str(v) if pool_kind == "strings" else int(v) for v in unigrams + bigrams]
    attrs = {"mode": mode, "min_gram_length": min_gram, "max_gram_length": max_gram, "max_skip_count": skip,
             "ngram_counts": [0, 5], "ngram_indexes": [int(i) for i in rng.permutation(9) + 1],
             f"pool_{pool_kind}": pool}
    if mode != "TF":
        attrs["weights"] = [float(w) for w in rng.uniform(0.5, 2.0, 9)]
    return attrs


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("pool_kind,dtype", [("int64s", np.int64), ("int64s", np.int32), ("strings", object)])
@pytest.mark.parametrize("grams,skip,shape", [((1, 1), 0, (12,)), ((1, 2), 2, (3, 10)), ((2, 2), 3, (2, 9))])
def test_tfidf_matches_onnxruntime(rng, mode, pool_kind, dtype, grams, skip, shape):
    attrs = _tfidf_attrs(rng, pool_kind, mode, grams[0], grams[1], skip)
    values = rng.integers(0, 6, shape)
    x = values.astype(dtype) if dtype is not object else np.array(list("abcdef"), dtype=object)[values]
    graph = check_strings_against_ort("TfIdfVectorizer", {"x": x}, attrs)
    assert output_types(graph)[0].shape == shape[:-1] + (10,)


def test_inferred_types_keep_symbolic_dims():
    g = tlc.Graph()
    x, y = g.input("x", "string", ("N", 3)), g.input("y", "string", (3,))
    assert g.type_of(g.add_node("StringConcat", [x, y])).shape == ("N", 3)
    words, counts = g.add_node("StringSplit", [x], delimiter=",")
    assert (g.type_of(words).shape, g.type_of(counts).dtype, g.type_of(counts).shape) == (("N", 3, None), "int64",
                                                                                        ("N", 3))
    assert g.type_of(g.add_node("RegexFullMatch", [x], pattern="a+")).dtype == "bool"
    row, words = g.input("row", "string", (1, 4)), g.input("words", "string", ("C",))
    assert g.type_of(g.add_node("StringNormalizer", [row])).shape == (1, 4)
    assert g.type_of(g.add_node("StringNormalizer", [row], stopwords=["a"])).shape == (1, None)
    assert g.type_of(g.add_node("StringNormalizer", [words])).shape == (None,)  # C = 0 gives one ""
    ids = g.input("ids", "int64", ("B", "T"))
    tfidf = g.add_node("TfIdfVectorizer", [ids], mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0,
                       ngram_counts=[0], ngram_indexes=[0, 4], pool_int64s=[7, 9])
    assert g.type_of(tfidf).shape == ("B", 5) and g.type_of(tfidf).dtype == "float32"


@pytest.mark.parametrize("op,inputs,attrs,match", [
    ("StringConcat", {"x": strings("a"), "y": np.array([1], np.int64)}, {}, "Y has dtype int64"),
    ("TfIdfVectorizer", {"x": strings("a")}, {"mode": "TF", "min_gram_length": 1, "max_gram_length": 1,
                                              "max_skip_count": 0, "ngram_counts": [0], "ngram_indexes": [0],
                                              "pool_int64s": [1]}, "pool_int64s needs an int32 or int64 input"),
    ("TfIdfVectorizer", {"x": np.array([1], np.int64)}, {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2,
                                                        "max_skip_count": 0, "ngram_counts": [0, 1],
                                                        "ngram_indexes": [0, 1], "pool_int64s": [1, 2, 3, 4]},
     "2-grams take 3 items"),
    ("StringNormalizer", {"x": strings("a", "b", "c", "d").reshape(2, 2)}, {}, "shape \\[C\\] or \\[1, C\\]"),
    ("TfIdfVectorizer", {"x": np.array([1], np.int64)}, {"mode": "TF", "min_gram_length": 1, "max_gram_length": 1,
                                                        "max_skip_count": 0, "ngram_counts": [0],
                                                        "ngram_indexes": [0, 1], "pool_int64s": [4, 4]},
     "repeats the 1-gram \\[4\\]"),
])
def test_bad_input_is_a_named_error(op, inputs, attrs, match):
    model = single_node_model(op, inputs, attrs)
    with pytest.raises(tlc.ShapeInferenceError, match=f"{op.lower()}_node.*{match}"):
        run_tlc(model, feeds_of(inputs))
