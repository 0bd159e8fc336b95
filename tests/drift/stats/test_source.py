import numpy as np
import pandas as pd
import pytest

from skewgate.common.errors import InputError
from skewgate.drift.stats.source import open_source


def _frame(n, seed):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": rng.normal(size=n), "k": rng.integers(0, 3, n), "c": rng.choice(["a", "b"], n)})


@pytest.fixture
def hive(tmp_path):
    root = tmp_path / "logs"
    for day, seed in (("2026-12-01", 1), ("2026-12-02", 2)):
        (root / f"date={day}").mkdir(parents=True)
        _frame(1000, seed).to_parquet(root / f"date={day}" / "part-0.parquet")
    (root / "_SUCCESS").write_text("")
    return root


def test_hive_directory_streams_in_batches_without_the_partition_key(hive):
    source = open_source(hive)
    assert source.dtypes == {"x": "float64", "k": "float64", "c": "object"}  # numeric features: compared as float64
    assert source.numeric_names == ("x", "k") and source.categorical_names == ("c",)
    batches = list(source.batches(batch_rows=300))
    assert source.count_rows() == sum(b.rows for b in batches) == 2000
    assert max(b.rows for b in batches) == 300
    assert {b.origin for b in batches} == {"date=2026-12-01/part-0.parquet", "date=2026-12-02/part-0.parquet"}
    whole = pd.concat([_frame(1000, 1), _frame(1000, 2)])
    assert np.concatenate([b.numeric[:, 0] for b in batches]) == pytest.approx(whole["x"].to_numpy(), rel=1e-6)


def test_a_glob_and_a_shard_of_files_read_the_same_rows(hive):
    by_glob = open_source(str(hive / "*" / "*.parquet"))
    assert len(by_glob.files) == 2 and by_glob.count_rows() == 2000
    shard = open_source(hive, files=[by_glob.files[1]])
    assert shard.count_rows() == 1000
    assert [b.origin for b in shard.batches()] == ["date=2026-12-02/part-0.parquet"]
    assert open_source(hive).sha256() == by_glob.sha256() != shard.sha256()


def test_csv_with_missing_values(tmp_path):
    pd.DataFrame({"a": [1.0, None, 3.0], "s": ["u", None, "v"]}).to_csv(tmp_path / "t.csv", index=False)
    (batch,) = open_source(tmp_path / "t.csv").batches()
    assert np.isnan(batch.numeric[1, 0]) and batch.categorical["s"].null_count == 1


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda p: p / "missing.parquet", "no such file", id="missing-file"),
        pytest.param(lambda p: str(p / "none-*.parquet"), "no match", id="empty-glob"),
        pytest.param(lambda p: (p / "empty").mkdir() or p / "empty", "no files", id="empty-directory"),
        pytest.param(lambda p: (p / "a.txt").write_text("x") and p / "a.txt", r"suffixes \['.txt'\]",
                     id="not-a-table"),
        pytest.param(lambda p: (p / "bad.parquet").write_bytes(b"nope") and p / "bad.parquet",
                     "readable Parquet/CSV", id="corrupt"),
    ],
)
def test_bad_locations_are_input_errors(tmp_path, make, message):
    with pytest.raises(InputError, match=message):
        open_source(make(tmp_path))


def test_a_uri_goes_through_pyarrow_filesystems(hive):
    """file:// takes the object-store path (a pyarrow FileSystem from the URI), with no S3 server needed."""
    by_uri, local = open_source(f"file://{hive}"), open_source(hive)
    assert by_uri.dtypes == local.dtypes and by_uri.count_rows() == 2000
    assert [b.origin for b in by_uri.batches()] == [b.origin for b in local.batches()]
    assert by_uri.sha256() == local.sha256()
    with pytest.raises(InputError, match="no such path"):
        open_source(f"file://{hive}/missing")
