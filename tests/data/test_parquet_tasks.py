"""Every task reads Parquet, Arrow and `datasets` folders and gets the rows and splits it gets from the same
data as CSV / JSONL / TSV / text; the lm token cache built from Parquet is the one built from the `.txt` file,
byte for byte, and a `DatasetDict`'s splits are the run's; one short training run on Parquet has the metrics of
the same run on CSV."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import attnkit
from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.classify.module import TextClassificationDataModule
from attnkit.data.classify.splits import load_splits
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.data.sft.config import SFTDataConfig
from attnkit.data.sft.module import SFTDataModule
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.module import PairsDataModule
from attnkit.text.chat import ChatTemplate
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from chat_models import build_chat_model

SPLITS = ("train", "val", "test")
WORDS = ["great", "awful", "plot", "actors", "boring", "superb", "the", "film"]


def _reviews(n: int) -> tuple[list[str], list[str]]:
    texts = [" ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 6)) + f" {i}" for i in range(n)]
    return texts, ["pos" if i % 3 else "neg" for i in range(n)]


def _write_formats(folder: Path, table: pa.Table) -> dict[str, Path]:
    """The table as a Parquet file, an Arrow (Feather) file, a folder of Parquet shards and a save_to_disk folder."""
    out = {"parquet": folder / "data.parquet", "arrow": folder / "data.arrow", "shards": folder / "shards"}
    pq.write_table(table, out["parquet"], row_group_size=16)
    feather.write_feather(table, out["arrow"])
    out["shards"].mkdir()
    for i, start in enumerate(range(0, table.num_rows, 25)):
        pq.write_table(table.slice(start, 25), out["shards"] / f"shard-{i:03d}.parquet")
    out["saved"] = folder / "saved"
    datasets.Dataset(table).save_to_disk(str(out["saved"]), num_shards=2)
    return out


def test_classify_reads_every_format_as_the_csv(tmp_path: Path) -> None:
    texts, labels = _reviews(80)
    rows = "".join(f"{t},{y},d{i % 12}\n" for i, (t, y) in enumerate(zip(texts, labels)))
    (tmp_path / "data.csv").write_text("text,label,doc\n" + rows)
    table = pa.table({"review": texts, "label": labels, "doc": [f"d{i % 12}" for i in range(80)]})
    want = load_splits(ClassifyDataConfig(source=str(tmp_path / "data.csv"), seed=5))
    grouped = load_splits(ClassifyDataConfig(source=str(tmp_path / "data.csv"), seed=5, group_column="doc"))
    for name, path in _write_formats(tmp_path, table).items():
        got = load_splits(ClassifyDataConfig(source=str(path), text_column="review", seed=5))
        assert got == want, name
        by_doc = ClassifyDataConfig(source=str(path), text_column="review", seed=5, group_column="doc")
        assert load_splits(by_doc) == grouped != want, name
    # through the token cache (a folder's files key the entry), the same encoded splits
    cfg = {"cache_dir": str(tmp_path / "cache"), "seed": 5, "min_freq": 1}
    csv = TextClassificationDataModule(ClassifyDataConfig(source=str(tmp_path / "data.csv"), **cfg))
    shards = TextClassificationDataModule(
        ClassifyDataConfig(source=str(tmp_path / "shards"), text_column="review", **cfg)
    )
    csv.setup(), shards.setup()
    scored = TextClassificationDataModule.for_test_file(shards.cfg, shards.artifacts(), tmp_path / "data.arrow")
    assert list(scored.datasets["test"].ids) == list(
        TextClassificationDataModule.for_test_file(csv.cfg, csv.artifacts(), tmp_path / "data.csv").datasets["test"].ids
    )
    for split in SPLITS:
        assert list(csv.datasets[split].ids) == list(shards.datasets[split].ids)
        assert list(csv.datasets[split].labels) == list(shards.datasets[split].labels)
    assert shards.cache is not None and shards.cache.folder.parent == csv.cache.folder.parent  # type: ignore[union-attr]  # set up


def test_classify_dataset_dict_splits_are_the_runs_unless_a_source_is_given(tmp_path: Path) -> None:
    texts, labels = _reviews(60)
    parts = {"train": slice(0, 40), "validation": slice(40, 50), "test": slice(50, 60)}
    datasets.DatasetDict(
        {s: datasets.Dataset.from_dict({"text": texts[p], "label": labels[p]}) for s, p in parts.items()}
    ).save_to_disk(str(tmp_path / "dict"))
    got = load_splits(ClassifyDataConfig(source=str(tmp_path / "dict")))
    assert list(got.val_texts) == texts[40:50] and list(got.test_texts) == texts[50:]
    assert sorted(got.train_texts) == sorted(texts[:40])  # nothing held out of train: both splits are given
    (tmp_path / "val.jsonl").write_text(
        "".join(json.dumps({"text": f"v {i}", "label": "pos"}) + "\n" for i in range(3))
    )
    given = load_splits(ClassifyDataConfig(source=str(tmp_path / "dict"), val_source=str(tmp_path / "val.jsonl")))
    assert list(given.val_texts) == ["v 0", "v 1", "v 2"] and list(given.test_texts) == texts[50:]
    filtered = load_splits(ClassifyDataConfig(source=str(tmp_path / "dict"), where={"label": "neg"}))
    assert set(filtered.train_labels) == {0} and list(filtered.val_texts) == texts[42:50:3]


def test_translate_reads_parquet_as_the_pairs_file(tmp_path: Path) -> None:
    pairs = [(f"one {i} two", f"uno {i} dos") for i in range(60)]
    (tmp_path / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    french = [f"un {i} deux" for i in range(60)]
    table = pa.table({"en": [s for s, _ in pairs], "es": [t for _, t in pairs], "fr": french, "n": list(range(60))})
    want = PairsDataModule(PairsDataConfig(source=str(tmp_path / "pairs.tsv"), val_fraction=0.2))
    want.setup()
    for name, path in _write_formats(tmp_path, table).items():
        cfg = PairsDataConfig(source=str(path), source_column="en", target_column="es", val_fraction=0.2)
        got = PairsDataModule(cfg)
        got.setup()
        assert got.splits == want.splits, name
    few = PairsDataModule(PairsDataConfig(source=str(tmp_path / "data.parquet"), source_column="en",
                                          target_column="es", max_rows=20))  # fmt: skip
    few.setup()
    assert few.splits is not None and sum(len(getattr(few.splits, s)) for s in SPLITS) == 20
    fr = PairsDataModule(PairsDataConfig(source=str(tmp_path / "data.parquet"), source_column="fr",
                                         target_column="es", val_fraction=0.2))  # fmt: skip
    fr.setup()  # another column: another cache entry
    assert fr.splits is not None and {s for s, _ in fr.splits.train} <= set(french)
    with pytest.raises(ValueError, match=r"data\.parquet: no column 'source'; .* set data\.source_column to one"):
        PairsDataModule(PairsDataConfig(source=str(tmp_path / "data.parquet"))).setup()


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("parquet_chat"), context=64)


def test_sft_reads_messages_and_prompt_completion_columns_as_the_jsonl(tmp_path: Path, chat_dir: Path) -> None:
    tok, template = tokenizer_from_folder(chat_dir), ChatTemplate.from_folder(chat_dir)
    assert template is not None
    chats = [[{"role": "user", "content": f"{i}+1"}, {"role": "assistant", "content": str(i + 1)}] for i in range(30)]
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps({"messages": m}) + "\n" for m in chats))
    pq.write_table(pa.table({"conversation": chats}), tmp_path / "chats.parquet")
    pq.write_table(
        pa.table({"prompt": [m[0]["content"] for m in chats], "completion": [m[1]["content"] for m in chats]}),
        tmp_path / "pc.parquet",
    )

    def module(**data: object) -> SFTDataModule:
        dm = SFTDataModule(SFTDataConfig.model_validate(data), tok, template, context=64, pad_id=0, batch_size=4)
        dm.setup()
        return dm

    want = module(source=str(tmp_path / "chats.jsonl"), val_fraction=0.2)
    for got in (
        module(source=str(tmp_path / "chats.parquet"), messages_column="conversation", val_fraction=0.2),
        module(source=str(tmp_path / "pc.parquet"), val_fraction=0.2),
    ):
        for split in SPLITS:
            assert [c.messages for c in got.chats[split]] == [c.messages for c in want.chats[split]]
            assert [r for r in got.datasets[split]] == [r for r in want.datasets[split]]
    assert module(source=str(tmp_path / "pc.parquet")).chats["train"][0].where.endswith("pc.parquet:row 1")


def _lm(source: Path, cache: Path, **data: object) -> LanguageModelDataModule:
    dm = LanguageModelDataModule(LMDataConfig.model_validate({"source": str(source), "cache_dir": str(cache), **data}),
                                 block=16)  # fmt: skip
    dm.setup()
    return dm


def test_lm_token_cache_from_parquet_and_a_saved_dataset_is_the_txt_one_byte_for_byte(tmp_path: Path) -> None:
    docs = [f"document {i}: {'la ' * (i % 9)}end." for i in range(50)]
    (tmp_path / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    padded = [f"  {d}\n" for d in docs]  # surrounding whitespace is dropped, as the .txt reader drops it
    padded.insert(20, " \n ")  # a blank row is no document, as a blank paragraph
    table = pa.table({"id": list(range(51)), "text": padded})
    formats = _write_formats(tmp_path, table)
    want = _lm(tmp_path / "corpus.txt", tmp_path / "cache")
    assert want.cache is not None
    names = sorted(p.name for p in want.cache.folder.iterdir() if p.name != "manifest.json")
    assert "train.tokens" in names and "train.text" in names
    for name, path in formats.items():
        got = _lm(path, tmp_path / "cache")
        assert got.cache is not None and got.cache.folder != want.cache.folder  # keyed on what it read
        for file in names:
            assert (got.cache.folder / file).read_bytes() == (want.cache.folder / file).read_bytes(), (name, file)
    # scoring a run on a file (attnkit test RUN --data corpus.parquet): the documents of the .txt file
    scored = []
    for path in (tmp_path / "corpus.txt", formats["parquet"]):
        dm = LanguageModelDataModule.for_test_file(want.cfg, want.artifacts(), path, block=16)
        dm.setup()
        scored.append(dm.datasets["test"].tokens.tobytes())
    assert scored[0] == scored[1] and len(scored[0]) > 0
    with pytest.raises(ValueError, match=r"the corpus is empty \(no non-blank text after data\.where / "):
        _lm(formats["parquet"], tmp_path / "cache", where={"id": -1})
    # a changed row gives a new entry, even with the same path, size and times kept
    again = _lm(formats["parquet"], tmp_path / "cache")
    assert again.cache is not None
    changed = table.set_column(1, "text", pa.array([d.replace("end", "END") for d in padded]))
    pq.write_table(changed, formats["parquet"], row_group_size=16)
    assert _lm(formats["parquet"], tmp_path / "cache").cache.folder != again.cache.folder  # type: ignore[union-attr]  # set up


def test_lm_dataset_dict_splits_are_the_runs_and_an_empty_split_is_an_error(tmp_path: Path) -> None:
    docs = [f"doc {i} " + "ab " * (i % 5) for i in range(40)]
    d = {"train": docs[:30], "validation": docs[30:36], "test": docs[36:]}
    odd = {s: [int(t.split()[1]) % 2 for t in v] for s, v in d.items()}
    datasets.DatasetDict(
        {s: datasets.Dataset.from_dict({"text": v, "odd": odd[s]}) for s, v in d.items()}
    ).save_to_disk(str(tmp_path / "dict"))
    dm = _lm(tmp_path / "dict", tmp_path / "cache")
    assert list(dm.documents["train"]) == [t.strip() for t in d["train"]]
    assert list(dm.documents["val"]) == [t.strip() for t in d["validation"]]
    assert list(dm.documents["test"]) == [t.strip() for t in d["test"]]
    odds = _lm(tmp_path / "dict", tmp_path / "cache", where={"odd": 1}, max_rows=4)
    assert list(odds.documents["train"]) == [t.strip() for t in d["train"][1:8:2]]
    assert list(odds.documents["test"]) == [t.strip() for t in d["test"][1::2]]
    with pytest.raises(ValueError, match=r"its val split has no document .* fill it or remove it"):
        datasets.DatasetDict(
            {
                "train": datasets.Dataset.from_dict({"text": docs}),
                "validation": datasets.Dataset.from_dict({"text": [" "]}),
            }
        ).save_to_disk(str(tmp_path / "blank"))
        _lm(tmp_path / "blank", tmp_path / "cache")


FAST = {"trainer.threads": 1, "trainer.progress_bar": False, "trainer.report": False, "trainer.max_epochs": 2}


def test_classify_trains_on_parquet_with_the_metrics_of_csv(tmp_path: Path) -> None:
    texts, labels = _reviews(120)
    (tmp_path / "data.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in zip(texts, labels)))
    pq.write_table(pa.table({"text": texts, "label": labels}), tmp_path / "data.parquet", row_group_size=50)
    tiny = {"model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2, "model.dim_feedforward": 32,
            "data.min_freq": 1, "data.cache_dir": str(tmp_path / "cache"), "optim.warmup": 2}  # fmt: skip
    metrics = []
    for name in ("data.csv", "data.parquet"):
        run = attnkit.train(
            "classify",
            output_dir=str(tmp_path / "runs"),
            name=name,
            **FAST,
            **tiny,
            **{"data.source": str(tmp_path / name)},
        )
        metrics.append(json.loads((run.run_dir / "metrics.json").read_text())["metrics"])
    assert metrics[0] == metrics[1] and "test/acc" in metrics[0]
