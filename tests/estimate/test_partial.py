"""The estimate over a snapshot of many files, in one pass or fanned out over shards and merged: the same
verdict either way, and partials that do not add up to the snapshot are errors naming what is wrong."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.estimate.core import EstimateOptions, estimate, tally_shard

OPTIONS = EstimateOptions(features=("score", "income"))


@pytest.fixture(scope="module")
def snapshot(files, tmp_path_factory):
    """The boundary data as a Hive-partitioned snapshot of five Parquet files, and a profile of the model."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("snapshot")
    x = np.load(files["boundary"])["x"]
    for k, rows in enumerate(np.array_split(np.arange(len(x)), 5)):
        (root / "current" / f"hour={k:02d}").mkdir(parents=True)
        pq.write_table(pa.table({"score": x[rows, 0], "income": x[rows, 1]}),
                       root / "current" / f"hour={k:02d}" / "part-0.parquet")
    profile = root / "estimate.profile"
    estimate(onnx=files["model"], reference=files["reference"], current=files["boundary"], profile_out=profile,
             options=EstimateOptions())
    return root / "current", profile


def _shards(files, snapshot, tmp_path, shards, **change):
    current, profile = snapshot
    return [tally_shard(onnx=files["model"], profile=profile, current=current, shard=k, shards=shards,
                        options=replace(OPTIONS, **change), out=tmp_path / f"part-{k}") for k in range(shards)]


@pytest.mark.parametrize("shards", [1, 2, 3, 7], ids=lambda n: f"{n}-shards")
def test_shards_merged_give_the_verdict_of_one_pass_over_the_snapshot(files, snapshot, tmp_path, shards):
    current, profile = snapshot
    one_pass = estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS)
    merged = estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS,
                      partials=_shards(files, snapshot, tmp_path, shards, batch_rows=300))
    assert one_pass.status == merged.status == "fail"  # the boundary shift: accuracy falls
    # the draws too (one stream per file): the interval's ends are the same; sums differ only in rounding
    figures = [{k: v for k, v in row.items() if k != "metric"} for row in merged.details["table"]]
    assert figures == [pytest.approx({k: v for k, v in row.items() if k != "metric"}, rel=1e-12)
                       for row in one_pass.details["table"]]
    assert [(r["low"], r["high"]) for r in merged.details["table"]] == [
        (r["low"], r["high"]) for r in one_pass.details["table"]]
    assert merged.details["current_confidence"] == one_pass.details["current_confidence"]
    assert merged.subject.data == one_pass.subject.data  # the whole snapshot's digest, as drift records it


def test_one_file_fans_out_to_one_shard_and_merges_to_its_one_pass(files, snapshot, tmp_path):
    """An `.npz` (a KFP artifact: no suffix) is one file: shard 0 reads it, the others nothing."""
    _, profile = snapshot
    current = tmp_path / "snapshot"
    current.write_bytes(files["boundary"].read_bytes())
    parts = [tally_shard(onnx=files["model"], profile=profile, current=current, shard=k, shards=3,
                         options=EstimateOptions(), out=tmp_path / f"part-{k}") for k in range(3)]
    merged = estimate(onnx=files["model"], profile=profile, current=current, options=EstimateOptions(),
                      partials=parts)
    one_pass = estimate(onnx=files["model"], profile=profile, current=files["boundary"], options=EstimateOptions())
    assert merged.details["table"] == one_pass.details["table"]


def test_a_snapshot_of_files_estimates_what_the_same_rows_in_one_file_do(files, snapshot):
    current, profile = snapshot
    from_files = estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS)
    from_npz = estimate(onnx=files["model"], profile=profile, current=files["boundary"], options=EstimateOptions())
    assert from_files.details["estimated_accuracy"] == pytest.approx(from_npz.details["estimated_accuracy"])
    assert from_files.details["estimated_interval"] == pytest.approx(from_npz.details["estimated_interval"], abs=0.01)


def test_partials_that_miss_a_shard_or_come_from_another_profile_are_errors(files, snapshot, tmp_path):
    current, profile = snapshot
    parts = _shards(files, snapshot, tmp_path, 3)  # of five files: shard 0 reads two, 1 two, 2 one
    with pytest.raises(InputError, match=r"partials: expected shards that read each of the 5 files .* once, found "
                                         r"not read: .*\.parquet$"):
        estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=parts[:2])
    # as many files as the snapshot's, but shard 0's twice and shard 1's never
    with pytest.raises(InputError, match=r"found read twice: .*part-0 and .*part-0\); not read: "):
        estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS,
                 partials=[parts[0], parts[0], parts[2]])
    # a file added to the snapshot after the shards read it
    (Path(current) / "late.parquet").write_bytes(next(Path(current).rglob("*.parquet")).read_bytes())
    try:
        with pytest.raises(InputError, match=r"found not read: late\.parquet$"):
            estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=parts)
    finally:
        (Path(current) / "late.parquet").unlink()
    other = tmp_path / "other.profile"
    estimate(onnx=files["model"], reference=files["reference"], current=files["ignored"], profile_out=other,
             options=replace(EstimateOptions(), seed=1))
    with pytest.raises(InputError, match=r"part-0: header.profile_sha256: expected [0-9a-f]{64} \(the merge's"):
        estimate(onnx=files["model"], profile=other, current=current, options=OPTIONS, partials=parts)
    with pytest.raises(InputError, match="current_labels: expected labels beside one pass"):
        estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=parts,
                 current_labels=tmp_path / "labels.npy")


@pytest.mark.parametrize(("damage", "message"), [
    pytest.param(lambda a: a.update(drawn=a["drawn"][:5]), r"drawn: expected non-negative int64 counts of shape",
                 id="fewer-resamples"),
    pytest.param(lambda a: a.update(expected=-a["expected"]), "expected: expected non-negative float64", id="negative"),
    pytest.param(lambda a: a.pop("confidence_counts"), "confidence_counts: .* found no such array", id="missing"),
    pytest.param(lambda a: a.update(header=np.array(str(a["header"]).replace('"samples": ', '"samples": 1'))),
                 "header.samples: expected non-negative counts that agree", id="samples-disagree"),
    pytest.param(lambda a: a.update(header=np.array("{}")), r"header.schema/version: expected "
                                                            r"skewgate.estimate-partial v3", id="not-a-partial"),
    pytest.param(lambda a: a.update(header=np.array(str(a["header"]).replace('"files": [', '"files": [7, '))),
                 r"header.files: expected a list of strings", id="files-not-names"),
    pytest.param(lambda a: a.update(header=np.array(str(a["header"]).replace('"files": ["', '"files": ["x", "x", "'))),
                 r"header.files: expected the files the shard read, each once, found 1 named twice",
                 id="a-file-named-twice"),
    pytest.param(lambda a: a.update(header=np.array(str(a["header"]).replace('"rows": [', '"rows": [1, '))),
                 r"header.rows: expected the rows read of each of its 3 files, adding up to its \d+ samples",
                 id="rows-not-one-per-file"),
])
def test_a_damaged_partial_is_an_error_naming_its_field(files, snapshot, tmp_path, damage, message):
    current, profile = snapshot
    parts = _shards(files, snapshot, tmp_path, 2)
    with np.load(parts[0]) as archive:
        arrays = dict(archive)
    damage(arrays)
    with parts[0].open("wb") as handle:
        np.savez(handle, **arrays)
    with pytest.raises(InputError, match=message):
        estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=parts)


def _forge(part, **header_changes):
    """`part` rewritten with its header changed, its counts as they were."""
    import json

    with np.load(part) as archive:
        arrays = dict(archive)
    header = json.loads(str(arrays["header"]))
    header.update(header_changes)
    arrays["header"] = np.array(json.dumps(header))
    with part.open("wb") as handle:
        np.savez(handle, **arrays)


def _header(part):
    import json

    with np.load(part) as archive:
        return json.loads(str(archive["header"]))


def test_a_partial_claiming_its_neighbours_files_without_their_rows_is_refused(files, snapshot, tmp_path):
    """The fail-open #35 left: shard 1's partial left out, shard 0's claiming shard 1's files as well. Its counts
    are shard 0's rows only; with the rows it names per file, the merge sees that (each way a header can lie)."""
    current, profile = snapshot
    ours, theirs = (_header(p) for p in _shards(files, snapshot, tmp_path, 2))
    part = tmp_path / "part-0"
    claimed = ours["files"] + theirs["files"]
    # the neighbour's files at the rows they hold: the claimed rows exceed what its counts hold
    _forge(part, files=claimed, rows=ours["rows"] + theirs["rows"])
    with pytest.raises(InputError, match=r"part-0: header.rows: expected the rows read of each of its 5 files, "
                                         r"adding up to its \d+ samples"):
        estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=[part])
    # the neighbour's files at no rows: the counts add up, the snapshot's files do not
    _forge(part, files=claimed, rows=ours["rows"] + [0] * len(theirs["rows"]))
    with pytest.raises(InputError, match=r"partials: expected every row of the files of .* tallied, found "
                                         r"hour=01/part-0.parquet: 0 rows read, \d+ in the file"):
        estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=[part])


def test_a_file_whose_rows_changed_after_the_shards_read_it_is_refused(files, snapshot, tmp_path):
    import pyarrow.parquet as pq

    current, profile = snapshot
    parts = _shards(files, snapshot, tmp_path, 2)
    assert estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS,
                    partials=parts).status == "fail"  # every row, as the shards read them: judged
    path = Path(current) / "hour=03" / "part-0.parquet"
    original = path.read_bytes()
    table = pq.read_table(path)
    try:
        pq.write_table(table.slice(0, table.num_rows - 1), path)  # one row fewer than the shard read
        with pytest.raises(InputError, match=rf"found hour=03/part-0.parquet: {table.num_rows} rows read, "
                                             rf"{table.num_rows - 1} in the file"):
            estimate(onnx=files["model"], profile=profile, current=current, options=OPTIONS, partials=parts)
    finally:
        path.write_bytes(original)


def test_a_shard_index_outside_the_shards_is_an_error(files, snapshot, tmp_path):
    current, profile = snapshot
    with pytest.raises(InputError, match=r"shard: expected an index in \[0, 2\), found 2"):
        tally_shard(onnx=files["model"], profile=profile, current=current, shard=2, shards=2, options=OPTIONS,
                    out=tmp_path / "p")


def test_a_glob_of_csv_files_reads_each_file_with_its_own_types(files, snapshot, tmp_path):
    """pyarrow types a data set by its first file: a column of whole numbers in one CSV would refuse the next
    file's decimals. Each file is read on its own, so both are numbers."""
    _, profile = snapshot
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.csv").write_text("score,income\n1,0\n-2,1\n")
    (tmp_path / "logs" / "b.csv").write_text("score,income\n0.5,0.25\n-0.75,1.5\n")
    verdict = estimate(onnx=files["model"], profile=profile, current=str(tmp_path / "logs" / "*.csv"),
                       options=OPTIONS)
    assert verdict.details["current_samples"] == 4
    with pytest.raises(InputError, match=r"expected a glob matching Parquet/CSV files, found no match"):
        estimate(onnx=files["model"], profile=profile, current=str(tmp_path / "none" / "*.csv"), options=OPTIONS)
