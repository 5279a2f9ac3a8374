"""Translation pairs: the built-in English->Spanish numbers, pairs files, splits and the data module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit.data.generators.numbers import english_number, number_pairs, spanish_number
from attnkit.data.readers.pairs import read_pairs
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.dataset import PickedItems, split_pairs, tokenizers_from_artifacts
from attnkit.data.translate.module import PairsDataModule
from attnkit.text.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# ---------------------------------------------------------------------- numbers
NUMBERS = [
    (0, "zero", "cero"),
    (1, "one", "uno"),
    (7, "seven", "siete"),
    (15, "fifteen", "quince"),
    (16, "sixteen", "dieciséis"),
    (20, "twenty", "veinte"),
    (21, "twenty-one", "veintiuno"),
    (22, "twenty-two", "veintidós"),
    (23, "twenty-three", "veintitrés"),
    (26, "twenty-six", "veintiséis"),
    (30, "thirty", "treinta"),
    (31, "thirty-one", "treinta y uno"),
    (45, "forty-five", "cuarenta y cinco"),
    (99, "ninety-nine", "noventa y nueve"),
    (100, "one hundred", "cien"),
    (101, "one hundred one", "ciento uno"),
    (115, "one hundred fifteen", "ciento quince"),
    (200, "two hundred", "doscientos"),
    (321, "three hundred twenty-one", "trescientos veintiuno"),
    (500, "five hundred", "quinientos"),
    (555, "five hundred fifty-five", "quinientos cincuenta y cinco"),
    (700, "seven hundred", "setecientos"),
    (777, "seven hundred seventy-seven", "setecientos setenta y siete"),
    (900, "nine hundred", "novecientos"),
    (999, "nine hundred ninety-nine", "novecientos noventa y nueve"),
    (1000, "one thousand", "mil"),
    (1001, "one thousand one", "mil uno"),
    (1100, "one thousand one hundred", "mil cien"),
    (2000, "two thousand", "dos mil"),
    (2024, "two thousand twenty-four", "dos mil veinticuatro"),
    (21000, "twenty-one thousand", "veintiún mil"),
    (31021, "thirty-one thousand twenty-one", "treinta y un mil veintiuno"),
    (100000, "one hundred thousand", "cien mil"),
    (101000, "one hundred one thousand", "ciento un mil"),
    (500500, "five hundred thousand five hundred", "quinientos mil quinientos"),
    (
        999999,
        "nine hundred ninety-nine thousand nine hundred ninety-nine",
        "novecientos noventa y nueve mil novecientos noventa y nueve",
    ),
]


@pytest.mark.parametrize(("n", "english", "spanish"), NUMBERS)
def test_numbers_in_english_and_spanish(n: int, english: str, spanish: str):
    assert english_number(n) == english
    assert spanish_number(n) == spanish


def test_spanish_agreement_before_nouns():
    assert [spanish_number(n, "masculine") for n in (1, 21, 31, 101, 221)] == [
        "un", "veintiún", "treinta y un", "ciento un", "doscientos veintiún",
    ]  # fmt: skip
    assert [spanish_number(n, "feminine") for n in (1, 21, 31, 101, 221, 500, 700, 900)] == [
        "una", "veintiuna", "treinta y una", "ciento una", "doscientas veintiuna", "quinientas", "setecientas",
        "novecientas",
    ]  # fmt: skip
    assert spanish_number(100, "feminine") == "cien"
    with pytest.raises(ValueError, match="only generated below 1000"):
        spanish_number(2000, "feminine")
    for bad in (-1, 1_000_000, 2.5, True):
        with pytest.raises(ValueError, match=r"\[0, 1000000\)"):
            english_number(bad)  # type: ignore[arg-type]


def test_built_in_pairs_are_distinct_deterministic_and_correct():
    pairs = number_pairs(3000, seed=7)
    assert len(pairs) == 3000 and len({s for s, _ in pairs}) == 3000
    assert pairs == number_pairs(3000, seed=7)
    assert pairs != number_pairs(3000, seed=8)
    sentences = [p for p in pairs if p[0].endswith(".")]
    assert 0.4 < len(sentences) / len(pairs) < 0.6
    words = {w: n for n in range(1_000_000) if n < 1000 or n % 997 == 0 for w in [english_number(n)]}
    for english, spanish in pairs:
        if english in words:
            assert spanish == spanish_number(words[english])
    known = {
        "I have one book.": "Tengo un libro.",
        "She bought twenty-one apples.": "Ella compró veintiuna manzanas.",
        "There is one tree here.": "Hay un árbol aquí.",
        "There are two hundred one chairs here.": "Hay doscientas una sillas aquí.",
        "They sold thirty-one glasses yesterday.": "Ellos vendieron treinta y un vasos ayer.",
        "My brother has five hundred pencils.": "Mi hermano tiene quinientos lápices.",
    }
    from attnkit.data.generators.numbers import _NOUNS, _TEMPLATES, _number_sentence

    generated = {}
    for n in (1, 2, 21, 31, 201, 500):
        for noun in _NOUNS:
            for template in _TEMPLATES:
                en, es = _number_sentence(n, noun, template)
                generated[en] = es
    for english, spanish in known.items():
        assert generated[english] == spanish
    assert all(" one " not in es and "uno " not in es for es in generated.values())
    with pytest.raises(ValueError, match="num_pairs"):
        number_pairs(0)


# ---------------------------------------------------------------------- files
def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_read_pairs_tatoeba_format(tmp_path: Path):
    path = write(
        tmp_path / "spa.txt",
        "\ufeffGo.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #4986655 (cueyayotl)\r\n"
        "\n"
        "Hi.\tHola.\n"
        "  Run!  \t¡Corre!\textra\tcolumns\n",
    )
    assert read_pairs(path) == [("Go.", "Ve."), ("Hi.", "Hola."), ("Run!", "¡Corre!")]


def test_read_pairs_errors_name_file_and_line(tmp_path: Path):
    no_tab = write(tmp_path / "a.txt", "Go.\tVe.\nHi. Hola.\n")
    with pytest.raises(ValueError, match=r"a\.txt:2: no tab"):
        read_pairs(no_tab)
    empty = write(tmp_path / "b.txt", "Go.\tVe.\nHi.\t \n")
    with pytest.raises(ValueError, match=r"b\.txt:2: empty target"):
        read_pairs(empty)
    latin1 = write(tmp_path / "c.txt", b"Go.\tVe.\n" + "Hi.\tCañón\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"c\.txt:2: not UTF-8 \(byte 0xf1 at column 7\)"):
        read_pairs(latin1)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_pairs(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="no sentence pairs"):
        read_pairs(write(tmp_path / "d.txt", "\n\n"))


def test_read_pairs_can_skip_bad_lines_with_one_warning(tmp_path: Path):
    path = write(tmp_path / "e.txt", "Go.\tVe.\nbroken\n\tVe.\nHi.\tHola.\n")
    with pytest.warns(UserWarning, match=r"skipped 2 line\(s\).*first: line 2"):
        assert read_pairs(path, skip_bad_lines=True) == [("Go.", "Ve."), ("Hi.", "Hola.")]


def test_split_dedupes_and_keeps_translations_of_a_source_together():
    pairs = [(f"s{i}", f"t{i}") for i in range(200)] + [("s1", "t1"), ("s1", "other"), ("s5", "x"), ("s5", "y")]
    splits = split_pairs(pairs, 0.1, 0.2, seed=3)
    everything = splits.train + splits.val + splits.test
    assert len(everything) == len(set(everything)) == 203  # one exact duplicate removed
    assert splits.sizes() == {"train": len(splits.train), "val": len(splits.val), "test": len(splits.test)}
    # about 10 % / 20 % of the 203 pairs (group_split sizes parts in examples, whole sources each)
    assert abs(len(splits.val) - 20.3) <= 1 and abs(len(splits.test) - 40.6) <= 1
    sources = [{s for s, _ in part} for part in (splits.train, splits.val, splits.test)]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])
    assert split_pairs(pairs, 0.1, 0.2, seed=3) == splits
    assert split_pairs(pairs, 0.1, 0.2, seed=4) != splits


def test_picked_items_is_a_sequence():
    """``PickedItems`` keeps the Sequence methods (its index array once hid ``Sequence.index``; mypy found it)."""
    import numpy as np

    picked = PickedItems(["a", "b", "c"], np.array([2, 0]))
    assert list(picked) == ["c", "a"] and picked[-1] == "a"
    assert picked.index("a") == 1 and picked.count("c") == 1 and "b" not in picked


# ---------------------------------------------------------------------- data module
PAIRS = [
    ("I see a dog.", "Veo un perro."),
    ("I see a cat.", "Veo un gato."),
    ("The dog runs.", "El perro corre."),
    ("The cat sleeps.", "El gato duerme."),
    ("A dog and a cat.", "Un perro y un gato."),
    ("I run.", "Corro."),
    ("I sleep.", "Duermo."),
    ("The cat runs.", "El gato corre."),
    ("The dog sleeps.", "El perro duerme."),
    ("I see the dog.", "Veo el perro."),
]


def pairs_file(tmp_path: Path, extra: list[tuple[str, str]] = ()) -> Path:  # type: ignore[assignment]
    return write(tmp_path / "pairs.tsv", "".join(f"{s}\t{t}\tCC-BY\n" for s, t in [*PAIRS, *extra]))


def module(path: Path, **overrides) -> PairsDataModule:
    cfg = PairsDataConfig(**{"source": str(path), "val_fraction": 0.2, "test_fraction": 0.2, "seed": 0, **overrides})
    dm = PairsDataModule(cfg, batch_size=4)
    dm.setup()
    return dm


def test_batches_are_teacher_forcing_pairs(tmp_path: Path):
    dm = module(pairs_file(tmp_path))
    src_tok, tgt_tok = dm.tokenizers
    assert src_tok is tgt_tok  # shared by default
    src, src_mask, tgt_in, tgt_out, index = next(iter(dm.val_dataloader()))
    refs = dm.datasets["val"].refs
    for row in range(src.shape[0]):
        n_src, n_tgt = int(src_mask[row].sum()), int((tgt_out[row] != PAD_ID).sum())
        assert src[row, n_src - 1] == EOS_ID and (src[row, n_src:] == PAD_ID).all()
        assert tgt_in[row, 0] == BOS_ID and EOS_ID not in tgt_in[row].tolist()
        assert tgt_out[row, n_tgt - 1] == EOS_ID
        assert torch.equal(tgt_in[row, 1:n_tgt], tgt_out[row, : n_tgt - 1])  # shifted by one
        # the reference / source as the tokenizer reads it (a word unseen in training is <unk>)
        assert tgt_tok.decode(tgt_out[row]) == tgt_tok.decode(tgt_tok.encode(refs[int(index[row])]))
        source = dm.splits.val[int(index[row])][0]
        assert src_tok.decode(src[row]) == src_tok.decode(src_tok.encode(source))
    assert sum(len(batch[0]) for batch in dm.train_dataloader()) == len(dm.datasets["train"]) == 6


def test_tokenizer_is_built_on_the_training_split_only(tmp_path: Path):
    path = pairs_file(tmp_path)
    dm = module(path, tokenizer="word", shared_vocab=False)
    src_tok, tgt_tok = dm.tokenizers
    assert src_tok is not tgt_tok
    train_words = {w for s, _ in dm.splits.train for w in src_tok.pieces(s)}
    held_out = {w for s, _ in dm.splits.val + dm.splits.test for w in src_tok.pieces(s)} - train_words
    assert held_out, "the split should hold out some word"
    for word in held_out:
        assert src_tok.encode(word.strip())[-1] == UNK_ID or word.strip() in train_words
    assert ("perro" not in src_tok.vocab and " perro" in tgt_tok.vocab) or "perro" in tgt_tok.vocab

    # a checkpoint's artifacts rebuild the same tokenizers and encodings
    art = dm.artifacts()
    again = PairsDataModule.from_artifacts(dm.cfg, art, batch_size=4)
    again.setup()
    assert again.tokenizers == dm.tokenizers
    assert again.datasets["test"].src == dm.datasets["test"].src
    shared = module(path).artifacts()
    assert shared["tgt_tokenizer"] is None
    src, tgt = tokenizers_from_artifacts(shared)
    assert src is tgt


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_tokenizer_kinds_round_trip_the_references(tmp_path: Path, kind: str):
    extra = [(f"I count {i}.", f"Cuento {i}.") for i in range(300)]  # enough text for a BPE vocabulary
    dm = module(pairs_file(tmp_path, extra), tokenizer=kind, vocab_size=300 if kind == "bpe" else None)
    tgt_tok = dm.tokenizers[1]
    for ids, ref in zip(dm.datasets["train"].tgt, dm.datasets["train"].refs):
        assert tgt_tok.decode(ids) == ref


def test_reverse_lowercase_and_length_limits(tmp_path: Path):
    long_pairs = [
        (f"This sentence number {i} is much too long.", f"Esta frase número {i} es demasiado larga.") for i in range(4)
    ]
    path = pairs_file(tmp_path, long_pairs)
    dm = module(path, reverse=True, lowercase=True)
    assert all(s == s.lower() for s, _ in dm.splits.train + dm.splits.val + dm.splits.test)
    assert ("veo un perro.", "i see a dog.") in dm.splits.train + dm.splits.val + dm.splits.test
    with pytest.warns(UserWarning, match="longer than data.max_len=6"):
        short = module(path, max_len=6, tokenizer="word")
    in_train = sum(pair[0].startswith("This") for pair in short.splits.train)
    assert in_train >= 1 and short.dropped["train"] == in_train  # left out of training...
    assert len(short.datasets["train"]) == len(short.splits.train) - in_train
    kept = short.datasets["train"]
    assert all(len(s) <= 7 and len(t) <= 8 for s, t in zip(kept.src, kept.tgt))
    for split in ("val", "test"):  # ...kept (cut) in validation and test, with the full reference
        assert len(short.datasets[split]) == len(getattr(short.splits, split))
        assert short.datasets[split].refs == [t for _, t in getattr(short.splits, split)]
        assert all(len(s) <= 7 and len(t) <= 8 for s, t in zip(short.datasets[split].src, short.datasets[split].tgt))
    assert short.stats()["train"]["over_max_len"] == in_train
    with pytest.raises(ValueError, match="every training pair is longer"):
        module(path, max_len=1)


def test_config_errors():
    with pytest.raises(ValueError, match="val_fraction \\+ test_fraction must be below 1"):
        PairsDataConfig(val_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ValueError, match="vocab_size >= 260"):
        PairsDataConfig(tokenizer="bpe", vocab_size=100)
    with pytest.raises(ValueError, match="Extra inputs"):
        PairsDataConfig(sorce="x")  # type: ignore[call-arg]


def test_built_in_data_module(tmp_path: Path):
    dm = PairsDataModule(PairsDataConfig(num_pairs=600), batch_size=32)
    dm.setup()
    sizes = dm.splits.sizes()
    assert sizes == {"train": 540, "val": 30, "test": 30}
    stats = dm.stats()
    assert stats["val"]["src_unk"] < 0.05  # a small vocabulary, nearly all seen in training
    lengths = [len(s) + len(t) for s, t in zip(dm.datasets["train"].src, dm.datasets["train"].tgt)]
    loader = dm.train_dataloader()
    batches = list(loader)
    assert sum(len(b[0]) for b in batches) == 540
    spread = [max(lengths[i] for i in b[4].tolist()) - min(lengths[i] for i in b[4].tolist()) for b in batches]
    assert sum(spread) / len(spread) < 6  # batched by length: little padding
    again = [b[4].tolist() for b in loader]
    assert again != [b[4].tolist() for b in batches]  # a new order every epoch
    loader.batch_sampler.set_epoch(0)  # Lightning sets the epoch: a resumed run repeats the order
    assert [b[4].tolist() for b in loader] == [b[4].tolist() for b in batches]
