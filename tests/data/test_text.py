"""Text classification data: tokenizer, loaders, synthetic corpus and data module."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.classify.module import TextClassificationDataModule
from attnkit.data.classify.splits import load_splits, load_table
from attnkit.data.collate import collate_text_batch
from attnkit.data.generators.reviews import generate_synthetic_corpus
from attnkit.data.readers.imdb import load_imdb
from attnkit.data.splits import TextSplits, stratified_split
from attnkit.text.tokenizers import PAD, UNK, build_tokenizer, tokenizer_from_dict

# ---------------------------------------------------------------------------------------- tokenizer

CORPUS = [
    "The movie was great. Great acting!",
    "The movie was awful.<br /><br />Awful plot, awful acting.",
    "I didn't like the plot.",
]


def _text_tokenizer(texts=CORPUS, **kw):
    return build_tokenizer("text", texts, **kw)


PIECES = _text_tokenizer().pieces


def test_tokenize_lowercases_splits_punctuation_and_strips_br() -> None:
    assert PIECES("I didn't LIKE it.<br /><br />Really!<BR>ok<br/>") == [
        "i",
        "didn't",
        "like",
        "it",
        ".",
        "really",
        "!",
        "ok",
    ]
    assert PIECES("don\u2019t") == ["don't"]
    assert PIECES("   ") == []


def test_build_orders_by_frequency_then_alphabetically_and_applies_min_freq() -> None:
    tok = _text_tokenizer(min_freq=2)
    # counts: the 3, awful 3, . 3, acting 2, movie 2, was 2, great 2, plot 2
    assert tok.vocab[:2] == [PAD, UNK]
    assert tok.vocab[2:] == [".", "awful", "the", "acting", "great", "movie", "plot", "was"]
    assert tok.pad_id == 0 and tok.unk_id == 1
    assert tok.vocab_size == len(tok) == 10
    assert "didn't" not in tok  # seen once < min_freq


def test_build_max_size_counts_specials_and_is_order_independent() -> None:
    small = _text_tokenizer(vocab_size=5, min_freq=1)
    assert small.vocab == [PAD, UNK, ".", "awful", "the"]
    assert _text_tokenizer(list(reversed(CORPUS)), vocab_size=5, min_freq=1) == small
    with pytest.raises(ValueError, match="vocab_size"):
        _text_tokenizer(vocab_size=1)
    with pytest.raises(ValueError, match="min_freq"):
        _text_tokenizer(min_freq=0)
    with pytest.raises(TypeError, match="single str"):
        _text_tokenizer("one text")


def test_encode_decode_unk_and_truncation() -> None:
    tok = _text_tokenizer(min_freq=2)
    ids = tok.encode("The movie was GREAT.")
    assert ids == [tok.token_to_id(t) for t in ["the", "movie", "was", "great", "."]]
    assert tok.unk_id not in ids
    assert tok.decode(ids) == "the movie was great ."
    unseen = tok.encode("The zebra was great")
    assert unseen[1] == tok.unk_id and tok.decode(unseen) == f"the {UNK} was great"
    assert tok.encode("The movie was great.", max_len=2) == ids[:2]
    assert tok.decode([*ids[:2], tok.pad_id, tok.pad_id]) == "the movie"
    with pytest.raises(ValueError, match="max_len"):
        tok.encode("x", max_len=0)
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([tok.vocab_size])


def test_to_dict_from_dict_round_trip_through_json() -> None:
    tok = _text_tokenizer(min_freq=1)
    restored = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert restored == tok and restored.vocab == tok.vocab
    text = "I didn't like the awful plot, zebra!"
    assert restored.encode(text) == tok.encode(text)
    old = {"format": "attnkit.word_tokenizer", "version": 1, "vocab": tok.vocab}  # attnkit 0.1's format
    assert tokenizer_from_dict(old) == tok
    with pytest.raises(ValueError, match="must start with"):
        tokenizer_from_dict({**old, "vocab": ["a", "b"]})
    with pytest.raises(ValueError, match="format"):
        tokenizer_from_dict({"vocab": tok.vocab})
    with pytest.raises(ValueError, match="duplicate"):
        tokenizer_from_dict({**old, "vocab": [PAD, UNK, "a", "a"]})


# ---------------------------------------------------------------------------------------- aclImdb


def _write_imdb(root: Path, n: int = 3) -> Path:
    for split in ("train", "test"):
        for sub, word in (("neg", "awful"), ("pos", "great")):
            folder = root / split / sub
            folder.mkdir(parents=True)
            for i in range(n):
                (folder / f"{i}_{1 if sub == 'neg' else 9}.txt").write_text(
                    f"A {word} {split} film number {i}.<br /><br />Really {word}!", encoding="utf-8"
                )
    unsup = root / "train" / "unsup"
    unsup.mkdir()
    (unsup / "0_0.txt").write_text("unlabelled review", encoding="utf-8")
    return root


def test_load_imdb_labels_splits_and_ignores_unsup(tmp_path: Path) -> None:
    root = _write_imdb(tmp_path / "aclImdb", n=5)
    splits = load_imdb(root, val_fraction=0.2, seed=0)
    assert splits.label_names == ["negative", "positive"]
    assert splits.sizes() == {"train": 8, "val": 2, "test": 10}
    assert Counter(splits.val_labels) == {0: 1, 1: 1}  # stratified
    assert Counter(splits.test_labels) == {0: 5, 1: 5}
    all_train = splits.train_texts + splits.val_texts
    assert not any("unlabelled" in t for t in all_train)
    for text, y in zip(all_train + splits.test_texts, splits.train_labels + splits.val_labels + splits.test_labels):
        assert ("great" in text) == (y == 1) and ("awful" in text) == (y == 0)
    assert "<br />" in splits.test_texts[0]  # raw text kept; the tokenizer strips the tags
    # deterministic, and the parent folder of aclImdb/ works too
    assert load_imdb(tmp_path, val_fraction=0.2, seed=0) == splits


def test_load_imdb_missing_or_empty_folder(tmp_path: Path) -> None:
    root = _write_imdb(tmp_path / "aclImdb")
    for f in (root / "test" / "pos").iterdir():
        f.unlink()
    with pytest.raises(ValueError, match=r"test[/\\]pos has no \.txt files"):
        load_imdb(root)
    (root / "test" / "pos").rmdir()
    with pytest.raises(FileNotFoundError, match=r"missing folder .*test[/\\]pos"):
        load_imdb(root)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_imdb(tmp_path / "nowhere")


# ---------------------------------------------------------------------------------------- tables


def _write_delimited(path: Path, rows: list[list[str]], delimiter: str) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, delimiter=delimiter).writerows(rows)
    return path


def _rows(n: int, labels: tuple[str, ...]) -> list[list[str]]:
    return [["id", "review", "sentiment"]] + [
        [str(i), f'text {i}, with a comma and "quotes" for {labels[i % len(labels)]}', labels[i % len(labels)]]
        for i in range(n)
    ]


@pytest.mark.parametrize(("suffix", "delimiter"), [(".csv", ","), (".tsv", "\t")])
def test_load_table_delimited_string_labels(tmp_path: Path, suffix: str, delimiter: str) -> None:
    path = _write_delimited(tmp_path / f"data{suffix}", _rows(20, ("pos", "neg")), delimiter)
    splits = load_table(path, "review", "sentiment", val_fraction=0.2, test_fraction=0.2, seed=1)
    assert splits.label_names == ["neg", "pos"]  # sorted names -> ids
    assert splits.sizes() == {"train": 12, "val": 4, "test": 4}
    for texts, labels in [
        (splits.train_texts, splits.train_labels),
        (splits.val_texts, splits.val_labels),
        (splits.test_texts, splits.test_labels),
    ]:
        for text, y in zip(texts, labels):
            assert text.endswith(splits.label_names[y]) and '"quotes"' in text
    everything = sorted(splits.train_texts + splits.val_texts + splits.test_texts)
    assert everything == sorted(r[1] for r in _rows(20, ("pos", "neg"))[1:])


def test_load_table_jsonl_int_labels_and_separate_test_file(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(
        "\n".join(json.dumps({"text": f"doc {i}", "label": i % 3, "extra": None}) for i in range(12)) + "\n\n",
        encoding="utf-8",
    )
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"text": "held out", "label": 2}) + "\n", encoding="utf-8")
    splits = load_table(train, test_path=test, val_fraction=0.25, seed=0)
    assert splits.label_names == ["0", "1", "2"]
    assert splits.test_texts == ["held out"] and splits.test_labels == [2]
    assert splits.sizes() == {"train": 9, "val": 3, "test": 1}
    assert sorted(splits.val_labels) == [0, 1, 2]
    for text, y in zip(splits.train_texts, splits.train_labels):
        assert int(text.split()[1]) % 3 == y


def test_load_table_csv_int_labels_and_jsonl_string_labels(tmp_path: Path) -> None:
    path = _write_delimited(tmp_path / "d.csv", [["text", "label"], ["a b", "1"], ["c d", "0"], ["e", "1"]], ",")
    splits = load_table(path, val_fraction=0.0, test_fraction=0.0)
    assert splits.label_names == ["0", "1"] and splits.train_labels == [1, 0, 1]
    jl = tmp_path / "d.jsonl"
    jl.write_text('{"text": "x", "label": "spam"}\n{"text": "y", "label": "ham"}\n', encoding="utf-8")
    splits = load_table(jl, val_fraction=0.0, test_fraction=0.0)
    assert splits.label_names == ["ham", "spam"] and splits.train_labels == [1, 0]


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.jsonl", '{"text": "ok", "label": 1}\n{"text": "broken", \n', r"bad\.jsonl:2: malformed JSON"),
        ("key.jsonl", '{"text": "ok", "label": 1}\n\n{"txt": "x", "label": 0}\n', r"key\.jsonl:3: missing key 'text'"),
        ("arr.jsonl", "[1, 2]\n", r"arr\.jsonl:1: expected a JSON object"),
        ("emp.jsonl", '{"text": "ok", "label": 1}\n{"text": "  ", "label": 0}\n', r"emp\.jsonl:2: empty text"),
        ("flt.jsonl", '{"text": "ok", "label": 0.5}\n', r"flt\.jsonl:1: label .* string or an integer"),
        ("none.jsonl", "\n\n", r"none\.jsonl: no data rows"),
        (
            "col.csv",
            "text,label\na,1\nb\n",
            r"col\.csv:3: row has 1 field\(s\), missing column 'label'.*\['text', 'label'\]",
        ),
        ("hdr.csv", "body,label\na,1\n", r"hdr\.csv:1: no column 'text'.*\['body', 'label'\]"),
        ("emp.tsv", "text\tlabel\nfine\t0\n\t1\n", r"emp\.tsv:3: empty text in column 'text'"),
        ("lab.csv", "text,label\nfine,\n", r"lab\.csv:2: empty label"),
        ("multi.csv", 'text,label\n"two\nlines",1\n"",0\n', r"multi\.csv:4: empty text"),
        ("rows.csv", "text,label\n", r"rows\.csv: no data rows"),
        ("nothing.csv", "", r"nothing\.csv: empty file"),
        ("gaps.csv", "text,label\na,0\nb,2\n", r"integer labels must be the class ids 0\.\.K-1, found \[0, 2\]"),
        ("data.txt", "whatever", r"unsupported file type '\.txt'; supported: \.csv, \.tsv, \.jsonl"),
    ],
)
def test_load_table_errors_name_file_and_line(tmp_path: Path, name: str, content: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        load_table(path)


# ---------------------------------------------------------------------------------------- synthetic


def test_synthetic_corpus_is_deterministic_and_balanced() -> None:
    texts, labels, names = generate_synthetic_corpus(301, seed=3)
    assert names == ["negative", "positive"]
    assert len(texts) == len(labels) == 301
    assert Counter(labels) == {0: 150, 1: 151}
    assert generate_synthetic_corpus(301, seed=3) == (texts, labels, names)
    assert generate_synthetic_corpus(301, seed=4)[0] != texts
    assert len(set(texts)) > 290  # varied documents
    assert any(" not " in t for t in texts) and any("<br />" in t for t in texts)


def test_synthetic_label_is_a_function_of_the_text() -> None:
    """Recompute each label from the text: majority polarity of the opinions, negation flips."""
    from attnkit.data.generators import reviews as T

    pos, neg = set(T._POSITIVE), set(T._NEGATIVE)
    negators = {"not", "never", "hardly", "from"}
    texts, labels, _ = generate_synthetic_corpus(200, seed=0)
    for text, label in zip(texts, labels):
        votes = 0
        for sentence in text.replace("<br />", " ").split("."):
            words = PIECES(sentence)
            adjs = [i for i, w in enumerate(words) if w in pos or w in neg]
            if not adjs:
                continue
            polarity = 1 if words[adjs[-1]] in pos else -1
            if negators & set(words[: adjs[-1]]):
                polarity = -polarity
            votes += polarity
        assert (votes > 0) == (label == 1), text


def test_stratified_split_is_seeded_disjoint_and_keeps_each_class() -> None:
    labels = [0] * 10 + [1] * 30 + [2]
    rest, (a, b) = stratified_split(labels, [0.1, 0.2], seed=0)
    assert sorted(rest + a + b) == list(range(41))
    assert Counter(labels[i] for i in a) == {0: 1, 1: 3}
    assert Counter(labels[i] for i in b) == {0: 2, 1: 6}
    assert 40 in rest  # a singleton class is never held out
    assert stratified_split(labels, [0.1, 0.2], seed=0) == (rest, [a, b])
    assert stratified_split(labels, [0.1, 0.2], seed=1) != (rest, [a, b])


# ---------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_len": 0}, r"max_len\n  Input should be greater than or equal to 1"),
        ({"vocab_size": 2}, r"vocab_size\n  Input should be greater than or equal to 3"),
        ({"min_freq": 0}, r"min_freq\n  Input should be greater than or equal to 1"),
        ({"val_fraction": 1.0}, r"val_fraction\n  Input should be less than 1"),
        ({"test_fraction": -0.1}, r"test_fraction\n  Input should be greater than or equal to 0"),
        ({"val_fraction": 0.6, "test_fraction": 0.5}, r"val_fraction \+ test_fraction must be below 1"),
        ({"source": "reviews.xlsx"}, r"data\.source='reviews\.xlsx' is invalid.*\.csv/\.tsv/\.jsonl"),
        ({"source": ""}, r"source\n  String should have at least 1 character"),
        ({"test_source": "t.jsonl"}, r"data\.test_source='t\.jsonl' .*source is 'synthetic'"),
        ({"source": "a.csv", "test_source": "t.xml"}, r"data\.test_source='t\.xml'"),
        ({"synthetic_size": 1}, r"synthetic_size\n  Input should be greater than or equal to 4"),
        ({"text_column": ""}, r"text_column\n  String should have at least 1 character"),
        ({"seed": "one"}, r"seed\n  Input should be a valid integer"),
        ({"max_len": 1.5}, r"max_len\n  Input should be a valid integer"),
        ({"sorce": "x"}, r"sorce\n  Extra inputs are not permitted"),
    ],
)
def test_config_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ClassifyDataConfig(**kwargs)


def test_config_accepts_sources(tmp_path: Path) -> None:
    assert ClassifyDataConfig().source == "synthetic"
    ClassifyDataConfig(source=str(tmp_path))  # a folder (aclImdb)
    ClassifyDataConfig(source="train.csv", test_source="test.csv")
    assert ClassifyDataConfig(source=tmp_path).source == str(tmp_path)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- data module


def _dm(**kwargs) -> TextClassificationDataModule:
    cfg = ClassifyDataConfig(synthetic_size=kwargs.pop("synthetic_size", 200), max_len=kwargs.pop("max_len", 24))
    dm = TextClassificationDataModule(cfg, batch_size=kwargs.pop("batch_size", 16), **kwargs)
    dm.setup("fit")
    return dm


def test_collate_pads_to_longest_in_batch() -> None:
    ids, mask, labels = collate_text_batch([([5, 6, 7], 1), ([8], 0)], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and ids.dtype == torch.int64
    assert mask.tolist() == [[True, True, True], [True, False, False]] and mask.dtype == torch.bool
    assert labels.tolist() == [1, 0] and labels.dtype == torch.int64


def test_datamodule_batches_shapes_padding_and_mask() -> None:
    dm = _dm(max_len=256, batch_size=8)
    assert dm.num_classes == 2 and dm.label_names == ["negative", "positive"]
    assert dm.pad_id == 0 and dm.max_len == 256 and dm.vocab_size == dm.tokenizer.vocab_size > 50
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 160, "val": 20, "test": 20}
    widths = set()
    n_seen = 0
    for ids, mask, labels in dm.train_dataloader():
        b, t = ids.shape
        assert ids.dtype == torch.int64 and mask.dtype == torch.bool and labels.dtype == torch.int64
        assert mask.shape == (b, t) and labels.shape == (b,) and b <= 8
        lengths = mask.sum(1)
        assert int(lengths.max()) == t < 256  # padded to the batch max, not max_len
        assert torch.equal(mask, torch.arange(t)[None, :] < lengths[:, None])  # mask is a prefix
        assert bool((ids[~mask] == dm.pad_id).all()) and bool((ids[mask] != dm.pad_id).all())
        assert set(labels.tolist()) <= {0, 1}
        widths.add(t)
        n_seen += b
    assert n_seen == 160 and len(widths) > 1


def test_datamodule_truncates_and_shuffles_train_only_with_seed() -> None:
    dm = _dm(max_len=8)
    assert max(len(s) for s in dm.datasets["train"].ids) == 8

    def first_labels_and_ids(loader):  # whole-epoch order, as a list of tensors
        return [ids for ids, _, _ in loader]

    train_a = first_labels_and_ids(dm.train_dataloader())
    train_b = first_labels_and_ids(dm.train_dataloader())
    assert all(torch.equal(x, y) for x, y in zip(train_a, train_b))  # seeded
    expected_first = collate_text_batch([dm.datasets["train"][i] for i in range(16)])[0]
    assert not torch.equal(train_a[0], expected_first)  # shuffled
    for split, loader in (("val", dm.val_dataloader()), ("test", dm.test_dataloader())):
        ds = dm.datasets[split]
        got = torch.cat([labels for _, _, labels in loader]).tolist()
        assert got == ds.labels  # dataset order
        ids, mask, _ = next(iter(loader))
        for row in range(ids.shape[0]):
            assert ids[row][mask[row]].tolist() == ds.ids[row]


def test_tokenizer_is_built_on_train_only(tmp_path: Path) -> None:
    train = tmp_path / "train.jsonl"
    rows = [{"text": f"good movie {i % 3}", "label": "pos"} for i in range(6)]
    rows += [{"text": f"bad movie {i % 3}", "label": "neg"} for i in range(6)]
    train.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    test = tmp_path / "test.jsonl"
    test.write_text(
        "\n".join(json.dumps({"text": "zanzibar zanzibar zanzibar movie", "label": "pos"}) for _ in range(3)),
        encoding="utf-8",
    )
    cfg = ClassifyDataConfig(source=str(train), test_source=str(test), val_fraction=0.0, min_freq=1)
    dm = TextClassificationDataModule(cfg, batch_size=4)
    dm.setup()
    assert "zanzibar" not in dm.tokenizer and "movie" in dm.tokenizer
    ids, mask, labels = next(iter(dm.test_dataloader()))
    unk, movie = dm.tokenizer.unk_id, dm.tokenizer.token_to_id("movie")
    assert ids.tolist() == [[unk, unk, unk, movie]] * 3 and bool(mask.all())
    assert labels.tolist() == [1, 1, 1] and dm.label_names == ["neg", "pos"]
    assert len(dm.val_dataloader()) == 0


def test_artifacts_round_trip_and_encode_texts() -> None:
    dm = _dm(max_len=10)
    art = json.loads(json.dumps(dm.artifacts()))
    assert art["label_names"] == ["negative", "positive"] and art["max_len"] == 10
    cfg = ClassifyDataConfig(synthetic_size=100, seed=7, max_len=99)  # another corpus: vocab must NOT be rebuilt
    dm2 = TextClassificationDataModule.from_artifacts(cfg, art)
    assert dm2.tokenizer == dm.tokenizer and dm2.vocab_size == dm.vocab_size and dm2.max_len == 10
    dm2.setup()
    assert dm2.tokenizer == dm.tokenizer
    ids, mask = dm2.encode_texts(["The plot was great.", "", "awful " * 50])
    assert ids.shape == (3, 10) and ids.dtype == torch.int64 and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [5, 1, 10]  # empty text -> one <unk>, long text truncated
    assert ids[1, 0].item() == dm.tokenizer.unk_id and bool((ids[~mask] == 0).all())
    # Lightning checkpoint hooks carry the same artifacts
    dm3 = _dm(max_len=10, synthetic_size=120)
    dm3.load_state_dict(dm.state_dict())
    assert dm3.tokenizer == dm.tokenizer
    assert max(max(s) for s in dm3.datasets["train"].ids) < dm.vocab_size


def test_given_label_names_remap_and_range_check(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        "\n".join(json.dumps({"text": f"w{i}", "label": ["b", "c"][i % 2]}) for i in range(8)), encoding="utf-8"
    )
    cfg = ClassifyDataConfig(source=str(path), val_fraction=0.0, test_fraction=0.0, min_freq=1)
    dm = TextClassificationDataModule(cfg, label_names=["a", "b", "c"])
    dm.setup()
    assert dm.num_classes == 3 and dm.datasets["train"].labels == [1, 2] * 4
    with pytest.raises(ValueError, match=r"label\(s\) \['c'\] that are not among the given label_names"):
        TextClassificationDataModule(cfg, label_names=["a", "b"]).setup()


def test_datamodule_rejects_out_of_range_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    import attnkit.data.classify.module as T

    bad = TextSplits(["a b", "c d"], [0, 2], [], [], ["e"], [-1], ["x", "y"])
    monkeypatch.setattr(T, "load_splits", lambda cfg: bad)
    with pytest.raises(ValueError, match=r"train label 2 at index 1 is out of range \[0, 2\)"):
        TextClassificationDataModule(ClassifyDataConfig()).setup()
    empty = TextSplits([], [], [], [], [], [], ["x", "y"])
    monkeypatch.setattr(T, "load_splits", lambda cfg: empty)
    with pytest.raises(ValueError, match="training split is empty"):
        TextClassificationDataModule(ClassifyDataConfig()).setup()


def test_datamodule_needs_setup_and_valid_args() -> None:
    dm = TextClassificationDataModule(ClassifyDataConfig())
    with pytest.raises(RuntimeError, match="setup"):
        _ = dm.vocab_size
    with pytest.raises(RuntimeError, match="setup"):
        dm.train_dataloader()
    with pytest.raises(ValueError, match="batch_size"):
        TextClassificationDataModule(ClassifyDataConfig(), batch_size=0)


def test_load_splits_synthetic_is_stratified_and_deterministic() -> None:
    cfg = ClassifyDataConfig(synthetic_size=100, val_fraction=0.1, test_fraction=0.2)
    splits = load_splits(cfg)
    assert splits.sizes() == {"train": 70, "val": 10, "test": 20}
    assert Counter(splits.test_labels) == {0: 10, 1: 10}
    assert load_splits(cfg) == splits
    texts, _, _ = generate_synthetic_corpus(100, seed=cfg.seed)
    assert sorted(splits.train_texts + splits.val_texts + splits.test_texts) == sorted(texts)
